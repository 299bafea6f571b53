//! The forward pass: embeddings, blocks and ln_f over the batch's rows
//! (padded or packed), and the logits of the tied or untied LM head.

use super::{gelu_kind, Gpt2, Gpt2Activations};
use crate::kernels::{self, AttentionProducts, AttentionShape, Bf16Weight, WeightLayout};
use crate::models::LossParts;
use crate::spec::IGNORE_INDEX;
use crate::util::profile::{span, timed, Phase};

impl Gpt2 {
    /// Forward pass over `inputs` [B, T]; saves every activation and the
    /// logits [B, T, V] ([`Gpt2::logits`]). With `targets` [B, T]
    /// (`IGNORE_INDEX` = not scored) also returns the summed loss. For the
    /// loss alone, [`Gpt2::loss`] never holds the logits.
    /// A batch that does not fit the model is an error (see [`Gpt2::check_batch`]).
    pub fn forward(
        &mut self,
        inputs: &[u32],
        targets: Option<&[i32]>,
        b: usize,
        t: usize,
    ) -> crate::Result<LossParts> {
        if let Some(tg) = targets {
            self.check_targets(tg, b, t)?;
        }
        self.forward_body(inputs, b, t, None)?;
        let v = self.config.vocab_size;
        let acts = self
            .acts
            .as_mut()
            .expect("activations allocated by forward_body");
        let n = b * t;
        acts.logits.resize(n * v, 0.0);
        lm_head_forward(
            &mut acts.logits,
            &acts.lnf,
            &self.params[self.idx.lm_head.clone()],
            self.bf16.as_ref().map(|x| &x.lm_head),
            n,
            self.config.n_embd,
            v,
        );
        match targets {
            Some(tg) => {
                let (sum, count) = kernels::cross_entropy_forward(
                    &mut acts.losses,
                    &acts.logits,
                    tg,
                    n,
                    v,
                    IGNORE_INDEX,
                );
                Ok(LossParts { sum, count })
            }
            None => Ok(LossParts::default()),
        }
    }

    /// Logits [B, T, V] of the last [`Gpt2::forward`] (training steps,
    /// [`Gpt2::loss`] and the task passes do not compute them).
    pub fn logits(&self) -> &[f32] {
        self.acts.as_ref().map_or(&[], |a| &a.logits)
    }

    /// The summed LM loss of `targets` [B, T] (`IGNORE_INDEX` = not scored)
    /// given `inputs` [B, T], without materialising the [B, T, V] logits
    /// (the LM head runs fused with the loss, a chunk of rows at a time).
    /// Same errors as [`Gpt2::forward`].
    pub fn loss(
        &mut self,
        inputs: &[u32],
        targets: &[i32],
        b: usize,
        t: usize,
    ) -> crate::Result<LossParts> {
        self.check_targets(targets, b, t)?;
        self.forward_body(inputs, b, t, None)?;
        Ok(self.lm_loss(targets, None))
    }

    /// Embeddings, blocks and ln_f: everything up to the logits.
    ///
    /// With `lens` (each row's real tokens, 1..=T, checked by the caller;
    /// the rest is right padding) only the real tokens run, packed end to
    /// end, each sequence attending to its own earlier tokens: causal
    /// attention never lets a real token see the padding after it, so they
    /// get the padded forward's arithmetic.
    #[allow(
        clippy::too_many_lines,
        reason = "the layers' steps in order over one set of activations; split, each piece would take a dozen of its buffers"
    )]
    pub(super) fn forward_body(
        &mut self,
        inputs: &[u32],
        b: usize,
        t: usize,
        lens: Option<&[usize]>,
    ) -> crate::Result<()> {
        timed(Phase::Other, || self.check_batch(inputs, b, t))?;
        timed(Phase::Other, || self.ensure_acts(b, t, lens));
        self.ensure_bf16();
        let packs = self.bf16.as_ref().map(|x| &x.blocks[..]);
        let cfg = &self.config;
        let (c, nh, inner) = (cfg.n_embd, cfg.n_head, cfg.inner());
        let eps = cfg.layer_norm_epsilon as f32;
        let gelu = gelu_kind(cfg);
        let p = &self.params;
        let idx = &self.idx;
        let acts = self.acts.as_mut().expect("allocated above");
        let n = acts.n;
        acts.embed(
            inputs,
            t,
            lens,
            (&p[idx.wte.clone()], &p[idx.wpe.clone()]),
            c,
        );
        let shape = AttentionShape { b, t, c, nh };
        for l in 0..cfg.n_layer {
            let w = &idx.blocks[l];
            let (before, rest) = acts.blocks.split_at_mut(l);
            let residual: &[f32] = if l == 0 {
                &acts.encoded
            } else {
                &before[l - 1].residual3
            };
            let a = &mut rest[0];
            let pk = packs.map(|v| &v[l]);
            let ln1 = if acts.recompute {
                &mut acts.ln
            } else {
                &mut a.ln1
            };
            timed(Phase::LayerNorm, || {
                kernels::layernorm_forward(
                    ln1,
                    &mut a.ln1_mean,
                    &mut a.ln1_rstd,
                    residual,
                    &p[w.ln_1_w.clone()],
                    &p[w.ln_1_b.clone()],
                    n,
                    c,
                    eps,
                )
            });
            linear_forward(
                &mut a.qkv,
                ln1,
                (&p[w.c_attn_w.clone()], &p[w.c_attn_b.clone()]),
                pk.map(|k| &k.c_attn),
                n,
                c,
                3 * c,
            );
            let att = if acts.recompute {
                &mut acts.att
            } else {
                &mut a.att
            };
            causal_attention(
                &mut a.atty,
                att,
                &a.qkv,
                shape,
                acts.packed.lens(),
                pk.is_some(),
            );
            linear_forward(
                &mut acts.proj,
                &a.atty,
                (&p[w.attn_c_proj_w.clone()], &p[w.attn_c_proj_b.clone()]),
                pk.map(|k| &k.attn_c_proj),
                n,
                c,
                c,
            );
            timed(Phase::Residual, || {
                kernels::residual_forward(&mut a.residual2, residual, &acts.proj)
            });
            let ln2 = if acts.recompute {
                &mut acts.ln
            } else {
                &mut a.ln2
            };
            timed(Phase::LayerNorm, || {
                kernels::layernorm_forward(
                    ln2,
                    &mut a.ln2_mean,
                    &mut a.ln2_rstd,
                    &a.residual2,
                    &p[w.ln_2_w.clone()],
                    &p[w.ln_2_b.clone()],
                    n,
                    c,
                    eps,
                )
            });
            linear_forward(
                &mut a.fch,
                ln2,
                (&p[w.c_fc_w.clone()], &p[w.c_fc_b.clone()]),
                pk.map(|k| &k.c_fc),
                n,
                c,
                inner,
            );
            let fch_gelu = if acts.recompute {
                &mut acts.fch_gelu
            } else {
                &mut a.fch_gelu
            };
            timed(Phase::Gelu, || {
                kernels::gelu_forward(fch_gelu, &a.fch, gelu)
            });
            linear_forward(
                &mut acts.proj,
                fch_gelu,
                (&p[w.mlp_c_proj_w.clone()], &p[w.mlp_c_proj_b.clone()]),
                pk.map(|k| &k.mlp_c_proj),
                n,
                inner,
                c,
            );
            timed(Phase::Residual, || {
                kernels::residual_forward(&mut a.residual3, &a.residual2, &acts.proj)
            });
        }
        let last: &[f32] = match acts.blocks.last() {
            Some(bl) => &bl.residual3,
            None => &acts.encoded,
        };
        timed(Phase::LayerNorm, || {
            kernels::layernorm_forward(
                &mut acts.lnf,
                &mut acts.lnf_mean,
                &mut acts.lnf_rstd,
                last,
                &p[idx.ln_f_w.clone()],
                &p[idx.ln_f_b.clone()],
                n,
                c,
                eps,
            )
        });
        Ok(())
    }
}

impl Gpt2Activations {
    /// Copies the batch's ids `[B, T]` (with `lens`, each row's real
    /// tokens, packed) into `inputs` and writes their embeddings, `wte` +
    /// `wpe`, into `encoded`.
    fn embed(
        &mut self,
        inputs: &[u32],
        t: usize,
        lens: Option<&[usize]>,
        (wte, wpe): (&[f32], &[f32]),
        c: usize,
    ) {
        timed(Phase::Copy, || match lens {
            Some(lens) => {
                for (r, &len) in lens.iter().enumerate() {
                    let at = self.packed.offs()[r];
                    self.inputs[at..at + len].copy_from_slice(&inputs[r * t..r * t + len]);
                }
            }
            None => self.inputs.copy_from_slice(inputs),
        });
        let _span = span(Phase::Embedding);
        kernels::embeddings_forward(
            &mut self.encoded,
            &[(&self.inputs, wte), (&self.pos_ids, wpe)],
            c,
        );
    }
}

/// Causal self-attention of one layer over the batch's rows: per row of
/// [B, T], or per packed sequence of `lens`.
pub(super) fn causal_attention(
    out: &mut [f32],
    att: &mut [f32],
    qkv: &[f32],
    shape: AttentionShape,
    lens: Option<&[usize]>,
    bf16_weights: bool,
) {
    let _span = span(Phase::Attention);
    let products = attention_products(bf16_weights);
    match lens {
        None => kernels::attention_forward(out, att, qkv, shape, true, None, products),
        Some(lens) => kernels::attention_forward_varlen(
            out, att, qkv, lens, shape.c, shape.nh, true, products,
        ),
    }
}

/// Attention's products in bf16 when the weights' are (mixed precision).
pub(super) fn attention_products(bf16_weights: bool) -> AttentionProducts {
    if bf16_weights {
        AttentionProducts::Bf16
    } else {
        AttentionProducts::F32
    }
}

/// The logits `[N,V] = lnf[N,C]·Wᵀ` (W `[V,C]`): bf16 operands when `packed`.
fn lm_head_forward(
    logits: &mut [f32],
    lnf: &[f32],
    w: &[f32],
    packed: Option<&Bf16Weight>,
    n: usize,
    c: usize,
    v: usize,
) {
    let _span = span(Phase::LmHeadMatmul);
    match packed {
        Some(pw) => kernels::matmul_forward_bf16(logits, lnf, pw, None, n),
        None => kernels::matmul_forward(logits, lnf, w, None, n, c, v, WeightLayout::OutIn),
    }
}

/// A block matmul `out[N,OC] = inp[N,IC]·W[IC,OC] + b` (`wb` = (W, b)):
/// bf16 operands when `packed`, else f32.
fn linear_forward(
    out: &mut [f32],
    inp: &[f32],
    wb: (&[f32], &[f32]),
    packed: Option<&Bf16Weight>,
    n: usize,
    ic: usize,
    oc: usize,
) {
    let _span = span(Phase::Matmul);
    match packed {
        Some(pw) => kernels::matmul_forward_bf16(out, inp, pw, Some(wb.1), n),
        None => kernels::matmul_forward(out, inp, wb.0, Some(wb.1), n, ic, oc, WeightLayout::InOut),
    }
}
