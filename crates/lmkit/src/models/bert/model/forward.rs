//! The encoder forward ([`Bert::forward`], [`Bert::forward_unpadded`]):
//! embeddings, then every post-LN layer, on the batch or its real tokens.

use super::super::weights::EncoderMatmul;
use super::activations::{right_padded_lens, LayerActs};
use super::{Bert, BertActivations, BertBatch};
use crate::error::{Error, Result};
use crate::kernels::{self, AttentionShape, WeightLayout};
use crate::spec::layout::{bert_layer_prefix, bert_qkv_bias_range, bert_qkv_weight_range};
use crate::util::parallel::on_pool;
use crate::util::profile::{timed, Phase};

impl Bert {
    /// `out[N,OC] = inp[N,C]·Wᵀ + b` for the `nn.Linear` parameter `name`
    /// (`name.weight` `[OC,C]`, `name.bias` `[OC]`).
    fn linear(&self, out: &mut [f32], inp: &[f32], name: &str, n: usize, c: usize, oc: usize) {
        let w = self.param(&format!("{name}.weight"));
        let b = self.param(&format!("{name}.bias"));
        kernels::matmul_forward(out, inp, w, Some(b), n, c, oc, WeightLayout::OutIn);
    }

    /// Runs the encoder on `batch`; the last hidden state ends up in
    /// `acts.hidden()` `[B,T,C]`. `acts` is resized as needed.
    pub fn forward(&self, batch: &BertBatch, acts: &mut BertActivations) -> Result<()> {
        self.check_batch(batch)?;
        on_pool(|| self.encode(batch, acts, false));
        Ok(())
    }

    /// [`Self::forward`] without the padding: when every row of `batch` is
    /// right-padded (mask `1…1 0…0`, at least one real token) and some row
    /// is padded, only the real tokens run through the encoder, each
    /// sequence attending to its own tokens (the same arithmetic for them
    /// as the padded forward, minus the masked keys' zero terms). `acts`'
    /// rows are then those tokens, packed ([`BertActivations::row`] maps
    /// positions to rows); the padding's own outputs, which HF computes and
    /// no loss or pooling of real tokens reads, are not computed.
    pub fn forward_unpadded(&self, batch: &BertBatch, acts: &mut BertActivations) -> Result<()> {
        self.check_batch(batch)?;
        on_pool(|| self.encode(batch, acts, true));
        Ok(())
    }

    /// [`Self::forward`] on a checked batch; `unpad`: see
    /// [`Self::forward_unpadded`].
    fn encode(&self, batch: &BertBatch, acts: &mut BertActivations, unpad: bool) {
        let cfg = &self.config;
        let (c, nh) = (cfg.hidden_size, cfg.num_attention_heads);
        // The rows the encoder runs on: the batch, or its real tokens.
        let mut packed = std::mem::take(&mut acts.packed);
        packed.clear();
        if let Some(lens) = unpad.then(|| right_padded_lens(batch)).flatten() {
            packed.gather(batch, &lens);
        }
        let (input, att_len) = match packed.lens() {
            Some(lens) => (&packed.batch, lens.iter().map(|&l| nh * l * l).sum()),
            None => (batch, batch.b * nh * batch.t * batch.t),
        };
        let n = input.b * input.t;
        let nl = cfg.num_hidden_layers;
        acts.prepare(cfg, batch.b, batch.t, n, att_len);
        let eps = self.eps();
        let batch = input;
        // Embeddings: word + position + token type, then LayerNorm into slot 0.
        timed(Phase::Embedding, || {
            kernels::embeddings_forward(
                &mut acts.emb,
                &[
                    (
                        &batch.input_ids,
                        self.param("embeddings.word_embeddings.weight"),
                    ),
                    (
                        &batch.position_ids,
                        self.param("embeddings.position_embeddings.weight"),
                    ),
                    (
                        &batch.token_type_ids,
                        self.param("embeddings.token_type_embeddings.weight"),
                    ),
                ],
                c,
            )
        });
        timed(Phase::LayerNorm, || {
            kernels::layernorm_forward(
                &mut acts.hs[..n * c],
                &mut acts.emb_mean,
                &mut acts.emb_rstd,
                &acts.emb,
                self.param("embeddings.LayerNorm.weight"),
                self.param("embeddings.LayerNorm.bias"),
                n,
                c,
                eps,
            )
        });
        let slots = acts.slots;
        for l in 0..nl {
            let (src, dst) = (l % slots, (l + 1) % slots);
            // Split the slot buffer into the layer's input and output.
            let (x, y) = if src < dst {
                let (lo, hi) = acts.hs.split_at_mut(dst * n * c);
                (&lo[src * n * c..(src + 1) * n * c], &mut hi[..n * c])
            } else {
                let (lo, hi) = acts.hs.split_at_mut(src * n * c);
                (&hi[..n * c], &mut lo[dst * n * c..(dst + 1) * n * c])
            };
            let li = l.min(acts.layers.len() - 1);
            let la = &mut acts.layers[li];
            self.encode_layer(l, la, x, y, batch, packed.lens());
        }
        acts.out_slot = nl % slots;
        acts.packed = packed;
    }

    /// Encoder layer `l` on `n` rows: `x` `[N,C]` in, `y` `[N,C]` out, its
    /// intermediates in `la`; `lens`: the packed sequences' lengths, else
    /// `batch`'s attention mask applies.
    fn encode_layer(
        &self,
        l: usize,
        la: &mut LayerActs,
        x: &[f32],
        y: &mut [f32],
        batch: &BertBatch,
        lens: Option<&[usize]>,
    ) {
        let cfg = &self.config;
        let (c, nh, i_sz) = (
            cfg.hidden_size,
            cfg.num_attention_heads,
            cfg.intermediate_size,
        );
        let n = batch.b * batch.t;
        let eps = self.eps();
        let shape = AttentionShape {
            b: batch.b,
            t: batch.t,
            c,
            nh,
        };

        let p = bert_layer_prefix(l);
        // Attention block.
        timed(Phase::Matmul, || {
            match self.packed(l, EncoderMatmul::Qkv) {
                Some(w) => w.forward(&mut la.qkv, x, n),
                None => {
                    // Ranges checked in from_parts.
                    let wr = bert_qkv_weight_range(&self.layout, l).unwrap_or_default();
                    let br = bert_qkv_bias_range(&self.layout, l).unwrap_or_default();
                    kernels::matmul_forward(
                        &mut la.qkv,
                        x,
                        &self.params[wr],
                        Some(&self.params[br]),
                        n,
                        c,
                        3 * c,
                        WeightLayout::OutIn,
                    );
                }
            }
        });
        timed(Phase::Attention, || match lens {
            Some(lens) => kernels::attention_forward_varlen(
                &mut la.atty,
                &mut la.att,
                &la.qkv,
                lens,
                c,
                nh,
                false,
                self.attention_products(),
            ),
            None => kernels::attention_forward(
                &mut la.atty,
                &mut la.att,
                &la.qkv,
                shape,
                false,
                Some(&batch.attention_mask),
                self.attention_products(),
            ),
        });
        timed(Phase::Matmul, || {
            match self.packed(l, EncoderMatmul::AttnOut) {
                Some(w) => w.forward(&mut la.res1, &la.atty, n),
                None => self.linear(
                    &mut la.res1,
                    &la.atty,
                    &format!("{p}attention.output.dense"),
                    n,
                    c,
                    c,
                ),
            }
        });
        timed(Phase::Residual, || kernels::add_inplace(&mut la.res1, x));
        timed(Phase::LayerNorm, || {
            kernels::layernorm_forward(
                &mut la.ln1,
                &mut la.ln1_mean,
                &mut la.ln1_rstd,
                &la.res1,
                self.param(&format!("{p}attention.output.LayerNorm.weight")),
                self.param(&format!("{p}attention.output.LayerNorm.bias")),
                n,
                c,
                eps,
            )
        });
        // Feed-forward block.
        timed(Phase::Matmul, || {
            match self.packed(l, EncoderMatmul::Inter) {
                Some(w) => w.forward(&mut la.fch, &la.ln1, n),
                None => self.linear(
                    &mut la.fch,
                    &la.ln1,
                    &format!("{p}intermediate.dense"),
                    n,
                    c,
                    i_sz,
                ),
            }
        });
        timed(Phase::Gelu, || {
            kernels::gelu_forward(&mut la.fch_gelu, &la.fch, self.gelu())
        });
        timed(Phase::Matmul, || match self.packed(l, EncoderMatmul::Out) {
            Some(w) => w.forward(&mut la.res2, &la.fch_gelu, n),
            None => self.linear(
                &mut la.res2,
                &la.fch_gelu,
                &format!("{p}output.dense"),
                n,
                i_sz,
                c,
            ),
        });
        timed(Phase::Residual, || {
            kernels::add_inplace(&mut la.res2, &la.ln1)
        });
        timed(Phase::LayerNorm, || {
            kernels::layernorm_forward(
                y,
                &mut la.ln2_mean,
                &mut la.ln2_rstd,
                &la.res2,
                self.param(&format!("{p}output.LayerNorm.weight")),
                self.param(&format!("{p}output.LayerNorm.bias")),
                n,
                c,
                eps,
            )
        });
    }

    fn check_batch(&self, batch: &BertBatch) -> Result<()> {
        let cfg = &self.config;
        // The fields are public: a hand-built batch may disagree with its shape.
        let n = batch.b.checked_mul(batch.t);
        for (what, len) in [
            ("input ids", batch.input_ids.len()),
            ("token type ids", batch.token_type_ids.len()),
            ("attention mask", batch.attention_mask.len()),
            ("position ids", batch.position_ids.len()),
        ] {
            if n != Some(len) {
                return Err(Error::InvalidInput(format!(
                    "batch of {} x {}: {len} {what}",
                    batch.b, batch.t
                )));
            }
        }
        if let Some(&p) = batch
            .position_ids
            .iter()
            .find(|&&p| p as usize >= cfg.max_position_embeddings)
        {
            return Err(Error::ContextTooLong {
                len: p as usize + 1,
                max: cfg.max_position_embeddings,
            });
        }
        if batch.t > cfg.max_position_embeddings {
            return Err(Error::ContextTooLong {
                len: batch.t,
                max: cfg.max_position_embeddings,
            });
        }
        if let Some(&id) = batch
            .input_ids
            .iter()
            .find(|&&id| id as usize >= cfg.vocab_size)
        {
            return Err(Error::TokenIdOutOfRange {
                id,
                vocab: cfg.vocab_size,
            });
        }
        if let Some(&tt) = batch
            .token_type_ids
            .iter()
            .find(|&&tt| tt as usize >= cfg.type_vocab_size)
        {
            return Err(Error::InvalidInput(format!(
                "token type id {tt} is out of range for type_vocab_size {}",
                cfg.type_vocab_size
            )));
        }
        Ok(())
    }
}
