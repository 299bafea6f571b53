//! The backward of the encoder and the embeddings, from d loss / d (last
//! hidden state), with its scratch buffers ([`Grads`]).

use super::super::heads::{layernorm_bwd, linear_bwd, range};
use super::super::model::{Bert, BertActivations, BertBatch};
use super::super::weights::EncoderMatmul;
use crate::error::{Error, Result};
use crate::kernels::bf16_gemm::PackedBf16;
use crate::kernels::{self, AttentionShape, GradWrite, WeightLayout};
use crate::models::GradPieces;
use crate::spec::layout::ParamLayout;
use crate::spec::layout::{bert_layer_prefix, bert_qkv_bias_range, bert_qkv_weight_range};
use crate::util::alloc::resize_scratch;
use crate::util::profile::{span, timed, Phase};
use crate::util::slice::two_mut;

/// Backward scratch for one (B, T).
#[derive(Debug, Default)]
pub(super) struct Grads {
    /// Gradient of the current layer output `[N,C]`, then of its input.
    pub(super) dy: Vec<f32>,
    dx: Vec<f32>,
    dres: Vec<f32>,
    dln1: Vec<f32>,
    datty: Vec<f32>,
    dqkv: Vec<f32>,
    datt: Vec<f32>,
    /// d gelu(fch), then d fch (in place).
    dfch_gelu: Vec<f32>,
}

impl Grads {
    /// For `rows` and `att` attention probabilities (`.0` now, `.1` the
    /// padded batch's, as `BertActivations` sizes its buffers).
    pub(super) fn resize(&mut self, rows: (usize, usize), c: usize, i: usize, att: (usize, usize)) {
        let fit = |v: &mut Vec<f32>, k: usize| resize_scratch(v, rows.0 * k, rows.1 * k);
        for v in [
            &mut self.dy,
            &mut self.dx,
            &mut self.dres,
            &mut self.dln1,
            &mut self.datty,
        ] {
            fit(v, c);
        }
        fit(&mut self.dqkv, 3 * c);
        fit(&mut self.dfch_gelu, i);
        resize_scratch(&mut self.datt, att.0, att.1);
    }
}

/// The backward of the encoder and embeddings: `s.dy` holds d loss / d
/// (last hidden state) `[N,C]`; parameter gradients accumulate into `grads`.
/// Per layer, the reverse of `Bert::forward` (see the module docs).
#[allow(
    clippy::too_many_lines,
    reason = "a backward pass: every layer's sub-layers in reverse, one piece to read against Bert::forward"
)]
pub(super) fn encoder_backward(
    model: &Bert,
    acts: &BertActivations,
    s: &mut Grads,
    mut pieces: GradPieces<'_, '_>,
    batch: &BertBatch,
) -> Result<()> {
    let cfg = &model.config;
    // The rows the forward ran on: the batch, or its packed real tokens.
    let unpadded = acts.packed();
    let batch = unpadded.map_or(batch, |p| &p.batch);
    let (b, t, c) = (batch.b, batch.t, cfg.hidden_size);
    let (n, i_sz, nh) = (b * t, cfg.intermediate_size, cfg.num_attention_heads);
    let gelu = model.gelu();
    let (layout, params) = (&model.layout, &model.params[..]);
    let packed = model.bf16_weights();
    // Where the writes still to come end once layers `l..` are done: the
    // layers below `l` and the embeddings.
    // One pass over the layout: `pending[l]` for l = 0..=L.
    let nl = cfg.num_hidden_layers;
    let mut pending = vec![0; nl + 1];
    for spec in layout.specs() {
        let end = spec.range().end;
        let layer = spec
            .name
            .strip_prefix("encoder.layer.")
            .and_then(|r| r.split('.').next()?.parse::<usize>().ok());
        match layer {
            Some(j) if j < nl => pending[j + 1] = pending[j + 1].max(end),
            _ if spec.name.starts_with("embeddings.") => pending[0] = pending[0].max(end),
            _ => {}
        }
    }
    for l in 1..=nl {
        pending[l] = pending[l].max(pending[l - 1]);
    }
    pieces.done_from(pending[nl]);
    // --- Encoder, last layer first. s.dy = d(output of layer l).
    let shape = AttentionShape { b, t, c, nh };
    for l in (0..cfg.num_hidden_layers).rev() {
        let grads = pieces.rest();
        let la = &acts.layers[l];
        let x = acts
            .hidden_state(l)
            .ok_or_else(|| Error::InvalidInput("activations were not kept".into()))?;
        let p = bert_layer_prefix(l);
        // y = LN2(res2), res2 = output.dense(gelu(fch)) + ln1.
        timed(Phase::Copy, || s.dres.fill(0.0));
        layernorm_bwd(
            layout,
            params,
            grads,
            &format!("{p}output.LayerNorm"),
            &mut s.dres,
            &s.dy,
            &la.res2,
            &la.ln2_mean,
            &la.ln2_rstd,
            n,
            c,
        );
        dense_bwd(
            packed.map(|w| w.get(l, EncoderMatmul::Out)),
            (layout, params, grads),
            &format!("{p}output.dense"),
            Some((&mut s.dfch_gelu, GradWrite::Set)),
            &s.dres,
            &la.fch_gelu,
            (n, i_sz, c),
        );
        // d gelu(fch) → d fch, in place.
        timed(Phase::Gelu, || {
            kernels::gelu_backward(&mut s.dfch_gelu, &la.fch, gelu)
        });
        timed(Phase::Copy, || s.dln1.copy_from_slice(&s.dres));
        dense_bwd(
            packed.map(|w| w.get(l, EncoderMatmul::Inter)),
            (layout, params, grads),
            &format!("{p}intermediate.dense"),
            Some((&mut s.dln1, GradWrite::Add)),
            &s.dfch_gelu,
            &la.ln1,
            (n, c, i_sz),
        );
        // ln1 = LN1(res1), res1 = attention.output.dense(atty) + x.
        timed(Phase::Copy, || s.dres.fill(0.0));
        layernorm_bwd(
            layout,
            params,
            grads,
            &format!("{p}attention.output.LayerNorm"),
            &mut s.dres,
            &s.dln1,
            &la.res1,
            &la.ln1_mean,
            &la.ln1_rstd,
            n,
            c,
        );
        dense_bwd(
            packed.map(|w| w.get(l, EncoderMatmul::AttnOut)),
            (layout, params, grads),
            &format!("{p}attention.output.dense"),
            Some((&mut s.datty, GradWrite::Set)),
            &s.dres,
            &la.atty,
            (n, c, c),
        );
        timed(Phase::Copy, || s.dqkv.fill(0.0));
        let attention = span(Phase::Attention);
        match unpadded.and_then(|p| p.lens()) {
            Some(lens) => kernels::attention_backward_varlen(
                &mut s.dqkv,
                &mut s.datt,
                &s.datty,
                &la.qkv,
                &la.att,
                lens,
                c,
                nh,
                model.attention_products(),
            ),
            None => kernels::attention_backward(
                &mut s.dqkv,
                &mut s.datt,
                &s.datty,
                &la.qkv,
                &la.att,
                shape,
                model.attention_products(),
            ),
        }
        drop(attention);
        timed(Phase::Copy, || s.dx.copy_from_slice(&s.dres));
        let wr = bert_qkv_weight_range(layout, l)
            .ok_or_else(|| Error::InvalidInput(format!("layer {l}: q/k/v not packed")))?;
        let br = bert_qkv_bias_range(layout, l)
            .ok_or_else(|| Error::InvalidInput(format!("layer {l}: q/k/v biases not packed")))?;
        {
            let _span = span(Phase::Matmul);
            let (gw, gb) = two_mut(grads, wr.clone(), br);
            match packed {
                Some(w) => kernels::matmul_backward_bf16(
                    Some((&mut s.dx, GradWrite::Add)),
                    Some(gw),
                    Some(gb),
                    &s.dqkv,
                    x,
                    w.get(l, EncoderMatmul::Qkv).weight(),
                    n,
                ),
                None => kernels::matmul_backward(
                    Some((&mut s.dx, GradWrite::Add)),
                    Some(gw),
                    Some(gb),
                    &s.dqkv,
                    x,
                    &params[wr],
                    n,
                    c,
                    3 * c,
                    WeightLayout::OutIn,
                ),
            }
        }
        std::mem::swap(&mut s.dy, &mut s.dx);
        pieces.done_from(pending[l]);
    }
    // Embeddings: hidden_state(0) = LN(word + position + token type).
    let grads = pieces.rest();
    timed(Phase::Copy, || s.dres.fill(0.0));
    layernorm_bwd(
        layout,
        params,
        grads,
        "embeddings.LayerNorm",
        &mut s.dres,
        &s.dy,
        &acts.emb,
        &acts.emb_mean,
        &acts.emb_rstd,
        n,
        c,
    );
    let _span = span(Phase::Embedding);
    for (name, ids) in [
        ("embeddings.position_embeddings.weight", &batch.position_ids),
        (
            "embeddings.token_type_embeddings.weight",
            &batch.token_type_ids,
        ),
    ] {
        kernels::embedding_backward(&mut grads[range(layout, name)], &s.dres, ids, c);
    }
    // HF's `nn.Embedding(padding_idx=pad_token_id)`: the [PAD] row gets no
    // gradient from the lookup (only from the tied MLM decoder).
    if let Some(pad) = cfg.pad_token_id {
        for (r, &id) in batch.input_ids.iter().enumerate() {
            if id == pad {
                s.dres[r * c..(r + 1) * c].fill(0.0);
            }
        }
    }
    let wemb = range(layout, "embeddings.word_embeddings.weight");
    kernels::embedding_backward(&mut grads[wemb], &s.dres, &batch.input_ids, c);
    pieces.finish();
    Ok(())
}

/// [`linear_bwd`] of the `nn.Linear` `name` (`dims`: N, in, out), on its
/// packed bf16 weight when training in bf16.
fn dense_bwd(
    packed: Option<&PackedBf16>,
    (layout, params, grads): (&ParamLayout, &[f32], &mut [f32]),
    name: &str,
    dinp: Option<(&mut [f32], GradWrite)>,
    dout: &[f32],
    inp: &[f32],
    (n, c, k): (usize, usize, usize),
) {
    let _span = span(Phase::Matmul);
    match packed {
        Some(w) => {
            let wr = range(layout, &format!("{name}.weight"));
            let br = range(layout, &format!("{name}.bias"));
            let (gw, gb) = two_mut(grads, wr, br);
            kernels::matmul_backward_bf16(dinp, Some(gw), Some(gb), dout, inp, w.weight(), n);
        }
        None => linear_bwd(layout, params, grads, name, dinp, dout, inp, n, c, k),
    }
}
