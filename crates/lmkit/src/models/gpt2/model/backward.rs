//! The backward pass: the LM loss fused with the LM head (and its
//! gradient), then backward through ln_f, the blocks and the embeddings.

use super::forward::{attention_products, causal_attention};
use super::{gelu_kind, Gpt2};
use crate::kernels::{self, AttentionShape, Bf16Weight, GradWrite, WeightLayout};
use crate::models::{GradPieces, LossParts};
use crate::spec::IGNORE_INDEX;
use crate::util::profile::{span, timed, Phase};
use crate::util::slice::two_mut;

impl Gpt2 {
    /// Forward + backward on one batch: returns the summed loss and
    /// ACCUMULATES into `grads` the gradient of `grad_scale` · (mean loss over
    /// the scored targets). A batch that does not fit the model is an error
    /// and leaves the gradients untouched.
    pub fn forward_backward(
        &mut self,
        inputs: &[u32],
        targets: &[i32],
        b: usize,
        t: usize,
        grad_scale: f32,
    ) -> crate::Result<LossParts> {
        self.lm_backward(inputs, targets, b, t, grad_scale, &mut |_| {})
    }

    /// [`Gpt2::forward_backward`], handing finished gradients to `ready`
    /// ([`Trainable::forward_backward_streamed`](crate::models::Trainable::forward_backward_streamed)).
    pub(super) fn lm_backward<'g>(
        &'g mut self,
        inputs: &[u32],
        targets: &[i32],
        b: usize,
        t: usize,
        grad_scale: f32,
        ready: &mut dyn FnMut(&'g mut [f32]),
    ) -> crate::Result<LossParts> {
        timed(Phase::Other, || self.check_targets(targets, b, t))?;
        self.forward_body(inputs, b, t, None)?;
        let acts = self.acts.as_mut().expect("allocated by forward_body");
        timed(Phase::Copy, || acts.dc.fill(0.0));
        // The head's products inside are their own phase.
        let loss = timed(Phase::LmHeadLoss, || {
            self.lm_loss(targets, Some(grad_scale))
        });
        self.backward_body(ready);
        Ok(loss)
    }

    /// The LM loss of `targets` [N] on the last forward_body, with the LM
    /// head fused into it (no [N, V] logits); with `grad_scale`, ADDS to
    /// `acts.dc` (dlnf) and to the LM head's gradient d(`grad_scale` · mean
    /// loss) (the head is `wte` when tied).
    pub(super) fn lm_loss(&mut self, targets: &[i32], grad_scale: Option<f32>) -> LossParts {
        let (c, v) = (self.config.n_embd, self.config.vocab_size);
        let w = &self.params[self.idx.lm_head.clone()];
        let acts = self.acts.as_mut().expect("allocated by forward_body");
        let n = acts.n;
        let scratch_len = kernels::lm_head_scratch_len(n, v);
        if acts.lm_scratch.len() != scratch_len {
            acts.lm_scratch = vec![0.0; scratch_len];
        }
        let Some(grad_scale) = grad_scale else {
            let (sum, count) = kernels::lm_head_loss(
                &mut acts.lm_scratch,
                &mut acts.losses,
                &acts.lnf,
                w,
                targets,
                n,
                c,
                v,
                IGNORE_INDEX,
            );
            return LossParts { sum, count };
        };
        let count = targets.iter().filter(|&&x| x != IGNORE_INDEX).count();
        let scale = if count > 0 {
            grad_scale / count as f32
        } else {
            0.0
        };
        // Mixed precision: the head's products on its packed bf16 copy.
        let packed = self.bf16.as_ref().map(|x| &x.lm_head);
        let (sum, count) = kernels::lm_head_loss_backward_packed(
            &mut acts.lm_scratch,
            &mut acts.losses,
            &mut acts.dc,
            &mut self.grads[self.idx.lm_head.clone()],
            &acts.lnf,
            (w, packed),
            targets,
            [n, c, v],
            IGNORE_INDEX,
            scale,
        );
        LossParts { sum, count }
    }

    /// Backward from `acts.dc` = dloss/dlnf [N, C] of the last forward_body
    /// through ln_f, the blocks and the embeddings; ACCUMULATES into `grads`,
    /// handing each finished part to `ready` (see [`GradPieces`]).
    #[allow(
        clippy::too_many_lines,
        reason = "a backward pass: every block's sub-layers in reverse, one piece to read against forward_body"
    )]
    pub(super) fn backward_body<'g>(&'g mut self, ready: &mut dyn FnMut(&'g mut [f32])) {
        let cfg = &self.config;
        let (c, nh, inner) = (cfg.n_embd, cfg.n_head, cfg.inner());
        let gelu = gelu_kind(cfg);
        let p = &self.params;
        let mut pieces = GradPieces::new(&mut self.grads, ready);
        let idx = &self.idx;
        let acts = self.acts.as_mut().expect("allocated by forward_body");
        let packs = self.bf16.as_ref().map(|x| &x.blocks[..]);
        let (b, t, n) = (acts.b, acts.t, acts.n);
        timed(Phase::Copy, || acts.dresidual.fill(0.0));
        {
            let last: &[f32] = match acts.blocks.last() {
                Some(bl) => &bl.residual3,
                None => &acts.encoded,
            };
            let (gw, gb) = two_mut(pieces.rest(), idx.ln_f_w.clone(), idx.ln_f_b.clone());
            timed(Phase::LayerNorm, || {
                kernels::layernorm_backward(
                    &mut acts.dresidual,
                    gw,
                    gb,
                    &acts.dc,
                    last,
                    &p[idx.ln_f_w.clone()],
                    &acts.lnf_mean,
                    &acts.lnf_rstd,
                    n,
                    c,
                )
            });
        }
        pieces.done_from(idx.pending[cfg.n_layer]);
        let shape = AttentionShape { b, t, c, nh };
        let products = attention_products(packs.is_some());
        for l in (0..cfg.n_layer).rev() {
            let g = pieces.rest();
            let w = &idx.blocks[l];
            let (before, rest) = acts.blocks.split_at(l);
            let residual: &[f32] = if l == 0 {
                &acts.encoded
            } else {
                &before[l - 1].residual3
            };
            let a = &rest[0];
            let pk = packs.map(|v| &v[l]);
            // dresidual = d residual3. MLP: residual3 = residual2 + c_proj(gelu(c_fc(ln2))).
            let fch_gelu: &[f32] = if acts.recompute {
                timed(Phase::Gelu, || {
                    kernels::gelu_forward(&mut acts.fch_gelu, &a.fch, gelu)
                });
                &acts.fch_gelu
            } else {
                &a.fch_gelu
            };
            // Each input gradient below is written over its scratch buffer
            // (GradWrite::Set): no zeroing first.
            {
                let (gw, gb) = two_mut(g, w.mlp_c_proj_w.clone(), w.mlp_c_proj_b.clone());
                linear_backward(
                    (&mut acts.dfch_gelu, GradWrite::Set),
                    (gw, gb),
                    &acts.dresidual,
                    fch_gelu,
                    &p[w.mlp_c_proj_w.clone()],
                    pk.map(|k| &k.mlp_c_proj),
                    n,
                    inner,
                    c,
                );
            }
            // d gelu(fch) → d fch, in place.
            timed(Phase::Gelu, || {
                kernels::gelu_backward(&mut acts.dfch_gelu, &a.fch, gelu)
            });
            let ln2: &[f32] = if acts.recompute {
                timed(Phase::LayerNorm, || {
                    kernels::layernorm_apply(
                        &mut acts.ln,
                        &a.residual2,
                        &a.ln2_mean,
                        &a.ln2_rstd,
                        &p[w.ln_2_w.clone()],
                        &p[w.ln_2_b.clone()],
                        n,
                        c,
                    )
                });
                &acts.ln
            } else {
                &a.ln2
            };
            {
                let (gw, gb) = two_mut(g, w.c_fc_w.clone(), w.c_fc_b.clone());
                linear_backward(
                    (&mut acts.dc, GradWrite::Set),
                    (gw, gb),
                    &acts.dfch_gelu,
                    ln2,
                    &p[w.c_fc_w.clone()],
                    pk.map(|k| &k.c_fc),
                    n,
                    c,
                    inner,
                );
            }
            {
                let (gw, gb) = two_mut(g, w.ln_2_w.clone(), w.ln_2_b.clone());
                timed(Phase::LayerNorm, || {
                    kernels::layernorm_backward(
                        &mut acts.dresidual,
                        gw,
                        gb,
                        &acts.dc,
                        &a.residual2,
                        &p[w.ln_2_w.clone()],
                        &a.ln2_mean,
                        &a.ln2_rstd,
                        n,
                        c,
                    )
                });
            }
            // dresidual = d residual2. Attention: residual2 = residual + c_proj(attn(c_attn(ln1))).
            {
                let (gw, gb) = two_mut(g, w.attn_c_proj_w.clone(), w.attn_c_proj_b.clone());
                linear_backward(
                    (&mut acts.dc, GradWrite::Set),
                    (gw, gb),
                    &acts.dresidual,
                    &a.atty,
                    &p[w.attn_c_proj_w.clone()],
                    pk.map(|k| &k.attn_c_proj),
                    n,
                    c,
                    c,
                );
            }
            let att: &[f32] = if acts.recompute {
                // The output is the saved `atty` again; `proj` is free in backward.
                causal_attention(
                    &mut acts.proj,
                    &mut acts.att,
                    &a.qkv,
                    shape,
                    acts.packed.lens(),
                    packs.is_some(),
                );
                &acts.att
            } else {
                &a.att
            };
            timed(Phase::Copy, || acts.dqkv.fill(0.0));
            let (dqkv, datt, dout) = (&mut acts.dqkv, &mut acts.datt, &acts.dc);
            timed(Phase::Attention, || match acts.packed.lens() {
                None => kernels::attention_backward(dqkv, datt, dout, &a.qkv, att, shape, products),
                Some(lens) => kernels::attention_backward_varlen(
                    dqkv, datt, dout, &a.qkv, att, lens, c, nh, products,
                ),
            });
            let ln1: &[f32] = if acts.recompute {
                timed(Phase::LayerNorm, || {
                    kernels::layernorm_apply(
                        &mut acts.ln,
                        residual,
                        &a.ln1_mean,
                        &a.ln1_rstd,
                        &p[w.ln_1_w.clone()],
                        &p[w.ln_1_b.clone()],
                        n,
                        c,
                    )
                });
                &acts.ln
            } else {
                &a.ln1
            };
            {
                let (gw, gb) = two_mut(g, w.c_attn_w.clone(), w.c_attn_b.clone());
                linear_backward(
                    (&mut acts.dc, GradWrite::Set),
                    (gw, gb),
                    &acts.dqkv,
                    ln1,
                    &p[w.c_attn_w.clone()],
                    pk.map(|k| &k.c_attn),
                    n,
                    c,
                    3 * c,
                );
            }
            {
                let (gw, gb) = two_mut(g, w.ln_1_w.clone(), w.ln_1_b.clone());
                timed(Phase::LayerNorm, || {
                    kernels::layernorm_backward(
                        &mut acts.dresidual,
                        gw,
                        gb,
                        &acts.dc,
                        residual,
                        &p[w.ln_1_w.clone()],
                        &a.ln1_mean,
                        &a.ln1_rstd,
                        n,
                        c,
                    )
                });
            }
            pieces.done_from(idx.pending[l]);
        }
        // dresidual = d encoded = d(wte[ids] + wpe[pos]).
        let g = pieces.rest();
        timed(Phase::Embedding, || {
            kernels::embedding_backward(&mut g[idx.wte.clone()], &acts.dresidual, &acts.inputs, c);
            kernels::embedding_backward(&mut g[idx.wpe.clone()], &acts.dresidual, &acts.pos_ids, c);
        });
        pieces.finish();
    }
}

/// The backward of `linear_forward` (in `forward`): writes `dinp` [N,IC]
/// as its [`GradWrite`] says; ACCUMULATES the gradients `(dW, db)`.
#[allow(clippy::too_many_arguments)]
fn linear_backward(
    dinp: (&mut [f32], GradWrite),
    (gw, gb): (&mut [f32], &mut [f32]),
    dout: &[f32],
    inp: &[f32],
    w: &[f32],
    packed: Option<&Bf16Weight>,
    n: usize,
    ic: usize,
    oc: usize,
) {
    let _span = span(Phase::Matmul);
    match packed {
        Some(pw) => kernels::matmul_backward_bf16(Some(dinp), Some(gw), Some(gb), dout, inp, pw, n),
        None => kernels::matmul_backward(
            Some(dinp),
            Some(gw),
            Some(gb),
            dout,
            inp,
            w,
            n,
            ic,
            oc,
            WeightLayout::InOut,
        ),
    }
}
