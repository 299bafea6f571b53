//! GPT-2 for training: forward with every activation saved, and the full
//! backward, over flat f32 buffers and the explicit kernels (llm.c style).
//!
//! Shape legend: B batch, T sequence length, C channels (n_embd), NH heads,
//! HS head size (C / NH), I MLP width (n_inner, default 4C), V vocabulary,
//! L layers, P positions (n_positions), N = B·T rows.
//!
//! `Gpt2` holds the config, the parameter layout and ONE parameter buffer,
//! one gradient buffer with the same layout, and the activations
//! ([`Gpt2Activations`]) preallocated for the current (B, T). The LM head is
//! tied to `wte` (logits = lnf · wteᵀ). No dropout: training runs with every
//! dropout probability at 0 (configs written by lmkit say so).

use crate::data::TokenBatch;
use crate::kernels::{self, AttentionShape, Gelu, WeightLayout};
use crate::models::{LossParts, Trainable};
use crate::spec::config::Gpt2Config;
use crate::spec::layout::{gpt2_layout, ParamLayout};
use crate::util::rng::Rng;
use crate::util::slice::two_mut;
use std::ops::Range;

use crate::spec::IGNORE_INDEX;

/// Ranges of one block's parameters in the flat buffer, named after their
/// HF tensors (`h.{i}.ln_1.weight` → `ln_1_w`, `h.{i}.attn.c_proj.bias` →
/// `attn_c_proj_b`), as the inference engine names them.
#[derive(Debug, Clone)]
struct BlockIndex {
    ln_1_w: Range<usize>,
    ln_1_b: Range<usize>,
    c_attn_w: Range<usize>,
    c_attn_b: Range<usize>,
    attn_c_proj_w: Range<usize>,
    attn_c_proj_b: Range<usize>,
    ln_2_w: Range<usize>,
    ln_2_b: Range<usize>,
    c_fc_w: Range<usize>,
    c_fc_b: Range<usize>,
    mlp_c_proj_w: Range<usize>,
    mlp_c_proj_b: Range<usize>,
}

#[derive(Debug, Clone)]
struct Index {
    wte: Range<usize>,
    wpe: Range<usize>,
    blocks: Vec<BlockIndex>,
    ln_f_w: Range<usize>,
    ln_f_b: Range<usize>,
}

impl Index {
    fn new(layout: &ParamLayout, n_layer: usize) -> crate::Result<Self> {
        let r = |name: &str| {
            layout.range(name).ok_or_else(|| {
                crate::Error::InvalidInput(format!("GPT-2 layout has no parameter `{name}`"))
            })
        };
        let mut blocks = Vec::with_capacity(n_layer);
        for l in 0..n_layer {
            let p = |s: &str| r(&format!("h.{l}.{s}"));
            blocks.push(BlockIndex {
                ln_1_w: p("ln_1.weight")?,
                ln_1_b: p("ln_1.bias")?,
                c_attn_w: p("attn.c_attn.weight")?,
                c_attn_b: p("attn.c_attn.bias")?,
                attn_c_proj_w: p("attn.c_proj.weight")?,
                attn_c_proj_b: p("attn.c_proj.bias")?,
                ln_2_w: p("ln_2.weight")?,
                ln_2_b: p("ln_2.bias")?,
                c_fc_w: p("mlp.c_fc.weight")?,
                c_fc_b: p("mlp.c_fc.bias")?,
                mlp_c_proj_w: p("mlp.c_proj.weight")?,
                mlp_c_proj_b: p("mlp.c_proj.bias")?,
            });
        }
        Ok(Index {
            wte: r("wte.weight")?,
            wpe: r("wpe.weight")?,
            blocks,
            ln_f_w: r("ln_f.weight")?,
            ln_f_b: r("ln_f.bias")?,
        })
    }
}

/// Saved activations of one block, for (B, T).
struct BlockActs {
    /// [N, C] LayerNorm 1 output, with mean/rstd [N].
    ln1: Vec<f32>,
    ln1_mean: Vec<f32>,
    ln1_rstd: Vec<f32>,
    /// [N, 3C] q | k | v.
    qkv: Vec<f32>,
    /// [N, C] attention output (before c_proj).
    atty: Vec<f32>,
    /// [B, NH, T, T] attention probabilities.
    att: Vec<f32>,
    /// [N, C] residual after the attention sub-block.
    residual2: Vec<f32>,
    ln2: Vec<f32>,
    ln2_mean: Vec<f32>,
    ln2_rstd: Vec<f32>,
    /// [N, I] c_fc output and its GELU.
    fch: Vec<f32>,
    fch_gelu: Vec<f32>,
    /// [N, C] block output.
    residual3: Vec<f32>,
}

/// Every tensor forward saves for backward, plus backward scratch, for one (B, T).
pub struct Gpt2Activations {
    b: usize,
    t: usize,
    /// [N] position id of each row (0..T per sequence).
    pos_ids: Vec<u32>,
    /// [N] input ids of the last forward.
    inputs: Vec<u32>,
    /// [N, C] wte + wpe.
    encoded: Vec<f32>,
    blocks: Vec<BlockActs>,
    lnf: Vec<f32>,
    lnf_mean: Vec<f32>,
    lnf_rstd: Vec<f32>,
    /// [N, V] logits; the fused loss overwrites them with dlogits.
    logits: Vec<f32>,
    /// [N] per-token losses.
    losses: Vec<f32>,
    // Backward scratch, shared by all layers.
    /// [N, C] running gradient of the residual stream.
    dresidual: Vec<f32>,
    /// [N, C] gradient into a LayerNorm output / attention output.
    dc: Vec<f32>,
    /// [N, C] c_proj outputs in forward.
    proj: Vec<f32>,
    /// [N, 3C]
    dqkv: Vec<f32>,
    /// [B, NH, T, T]
    datt: Vec<f32>,
    /// [N, I]
    dfch: Vec<f32>,
    dfch_gelu: Vec<f32>,
}

impl Gpt2Activations {
    fn new(cfg: &Gpt2Config, b: usize, t: usize) -> Self {
        let (c, nh, i, v) = (cfg.n_embd, cfg.n_head, cfg.inner(), cfg.vocab_size);
        let n = b * t;
        let z = |len: usize| vec![0.0f32; len];
        let blocks = (0..cfg.n_layer)
            .map(|_| BlockActs {
                ln1: z(n * c),
                ln1_mean: z(n),
                ln1_rstd: z(n),
                qkv: z(n * 3 * c),
                atty: z(n * c),
                att: z(b * nh * t * t),
                residual2: z(n * c),
                ln2: z(n * c),
                ln2_mean: z(n),
                ln2_rstd: z(n),
                fch: z(n * i),
                fch_gelu: z(n * i),
                residual3: z(n * c),
            })
            .collect();
        Gpt2Activations {
            b,
            t,
            pos_ids: (0..n).map(|r| (r % t) as u32).collect(),
            inputs: vec![0; n],
            encoded: z(n * c),
            blocks,
            lnf: z(n * c),
            lnf_mean: z(n),
            lnf_rstd: z(n),
            logits: z(n * v),
            losses: z(n),
            dresidual: z(n * c),
            dc: z(n * c),
            proj: z(n * c),
            dqkv: z(n * 3 * c),
            datt: z(b * nh * t * t),
            dfch: z(n * i),
            dfch_gelu: z(n * i),
        }
    }
}

/// A trainable GPT-2 (`GPT2LMHeadModel` with tied head).
pub struct Gpt2 {
    pub config: Gpt2Config,
    pub layout: ParamLayout,
    /// All parameters, laid out by `layout`.
    pub params: Vec<f32>,
    /// Gradients, same layout; accumulated by backward, cleared by `zero_grad`.
    pub grads: Vec<f32>,
    idx: Index,
    acts: Option<Gpt2Activations>,
}

fn gelu_kind(cfg: &Gpt2Config) -> Gelu {
    match cfg.activation() {
        crate::spec::config::Activation::GeluErf => Gelu::Erf,
        _ => Gelu::Tanh,
    }
}

impl Gpt2 {
    /// A model with the given parameters (e.g. loaded from a checkpoint).
    pub fn from_params(config: Gpt2Config, params: Vec<f32>) -> crate::Result<Self> {
        config.validate()?;
        let layout = gpt2_layout(&config)?;
        if params.len() != layout.total_len() {
            return Err(crate::Error::InvalidInput(format!(
                "GPT-2 parameter buffer has {} values, the config needs {}",
                params.len(),
                layout.total_len()
            )));
        }
        let idx = Index::new(&layout, config.n_layer)?;
        let grads = vec![0.0; params.len()];
        Ok(Gpt2 {
            config,
            layout,
            params,
            grads,
            idx,
            acts: None,
        })
    }

    /// GPT-2 initialisation: every matrix and embedding N(0, σ) with σ =
    /// `initializer_range` (0.02), the residual projections (`attn.c_proj`,
    /// `mlp.c_proj` weights) N(0, σ/√(2·n_layer)), biases 0, LayerNorm
    /// weights 1. Deterministic in `seed`.
    pub fn new_random(config: Gpt2Config, seed: u64) -> crate::Result<Self> {
        config.validate()?;
        let layout = gpt2_layout(&config)?;
        let mut params = layout.try_zeros()?;
        let std = config.initializer_range;
        let proj_std = std / (2.0 * config.n_layer as f64).sqrt();
        let mut rng = Rng::new(seed);
        for spec in layout.specs() {
            let buf = &mut params[spec.range()];
            let name = spec.name.as_str();
            if spec.shape.len() == 2 {
                let s = if name.ends_with("c_proj.weight") {
                    proj_std
                } else {
                    std
                };
                for x in buf.iter_mut() {
                    *x = (rng.normal() * s) as f32;
                }
            } else if name.contains("ln_") && name.ends_with(".weight") {
                buf.fill(1.0);
            }
        }
        Self::from_params(config, params)
    }

    pub fn num_params(&self) -> usize {
        self.params.len()
    }

    fn ensure_acts(&mut self, b: usize, t: usize) {
        let ok = self.acts.as_ref().is_some_and(|a| a.b == b && a.t == t);
        if !ok {
            self.acts = None; // free the old set before allocating the new one
            self.acts = Some(Gpt2Activations::new(&self.config, b, t));
        }
    }

    /// Checks a batch against the model: T within n_positions, ids < V.
    pub fn check_batch(&self, inputs: &[u32], b: usize, t: usize) -> crate::Result<()> {
        if b == 0 || t == 0 || inputs.len() != b * t {
            return Err(crate::Error::InvalidInput(format!(
                "batch of {} ids is not B·T = {b}·{t}",
                inputs.len()
            )));
        }
        if t > self.config.n_positions {
            return Err(crate::Error::InvalidInput(format!(
                "sequence length {t} exceeds the model's n_positions {}",
                self.config.n_positions
            )));
        }
        if let Some(&bad) = inputs
            .iter()
            .find(|&&id| id as usize >= self.config.vocab_size)
        {
            return Err(crate::Error::InvalidInput(format!(
                "token id {bad} is outside the model's vocabulary of {}",
                self.config.vocab_size
            )));
        }
        Ok(())
    }

    /// Forward pass over `inputs` [B, T]; saves every activation. With
    /// `targets` [B, T] (`IGNORE_INDEX` = not scored) returns the summed loss
    /// and the logits stay in the activations ([`Gpt2::logits`]).
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
        self.forward_body(inputs, b, t)?;
        let v = self.config.vocab_size;
        let acts = self
            .acts
            .as_mut()
            .expect("activations allocated by forward_body");
        let n = b * t;
        let lnf = &acts.lnf;
        kernels::matmul_forward(
            &mut acts.logits,
            lnf,
            &self.params[self.idx.wte.clone()],
            None,
            n,
            self.config.n_embd,
            v,
            WeightLayout::OutIn,
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

    /// Logits [B, T, V] of the last [`Gpt2::forward`] (not after a training step,
    /// whose fused loss overwrites them with their gradient).
    pub fn logits(&self) -> &[f32] {
        self.acts.as_ref().map_or(&[], |a| &a.logits)
    }

    /// Embeddings, blocks and ln_f: everything up to the logits.
    fn forward_body(&mut self, inputs: &[u32], b: usize, t: usize) -> crate::Result<()> {
        self.check_batch(inputs, b, t)?;
        self.ensure_acts(b, t);
        let cfg = &self.config;
        let (c, nh, inner) = (cfg.n_embd, cfg.n_head, cfg.inner());
        let eps = cfg.layer_norm_epsilon as f32;
        let gelu = gelu_kind(cfg);
        let n = b * t;
        let p = &self.params;
        let idx = &self.idx;
        let acts = self.acts.as_mut().expect("allocated above");
        acts.inputs.copy_from_slice(inputs);
        kernels::embeddings_forward(
            &mut acts.encoded,
            &[
                (inputs, &p[idx.wte.clone()]),
                (&acts.pos_ids, &p[idx.wpe.clone()]),
            ],
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
            kernels::layernorm_forward(
                &mut a.ln1,
                &mut a.ln1_mean,
                &mut a.ln1_rstd,
                residual,
                &p[w.ln_1_w.clone()],
                &p[w.ln_1_b.clone()],
                n,
                c,
                eps,
            );
            kernels::matmul_forward(
                &mut a.qkv,
                &a.ln1,
                &p[w.c_attn_w.clone()],
                Some(&p[w.c_attn_b.clone()]),
                n,
                c,
                3 * c,
                WeightLayout::InOut,
            );
            kernels::attention_forward(&mut a.atty, &mut a.att, &a.qkv, shape, true, None);
            kernels::matmul_forward(
                &mut acts.proj,
                &a.atty,
                &p[w.attn_c_proj_w.clone()],
                Some(&p[w.attn_c_proj_b.clone()]),
                n,
                c,
                c,
                WeightLayout::InOut,
            );
            kernels::residual_forward(&mut a.residual2, residual, &acts.proj);
            kernels::layernorm_forward(
                &mut a.ln2,
                &mut a.ln2_mean,
                &mut a.ln2_rstd,
                &a.residual2,
                &p[w.ln_2_w.clone()],
                &p[w.ln_2_b.clone()],
                n,
                c,
                eps,
            );
            kernels::matmul_forward(
                &mut a.fch,
                &a.ln2,
                &p[w.c_fc_w.clone()],
                Some(&p[w.c_fc_b.clone()]),
                n,
                c,
                inner,
                WeightLayout::InOut,
            );
            kernels::gelu_forward(&mut a.fch_gelu, &a.fch, gelu);
            kernels::matmul_forward(
                &mut acts.proj,
                &a.fch_gelu,
                &p[w.mlp_c_proj_w.clone()],
                Some(&p[w.mlp_c_proj_b.clone()]),
                n,
                inner,
                c,
                WeightLayout::InOut,
            );
            kernels::residual_forward(&mut a.residual3, &a.residual2, &acts.proj);
        }
        let last: &[f32] = match acts.blocks.last() {
            Some(bl) => &bl.residual3,
            None => &acts.encoded,
        };
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
        );
        Ok(())
    }

    /// Targets [B, T]: each a vocabulary id or `IGNORE_INDEX`.
    pub fn check_targets(&self, targets: &[i32], b: usize, t: usize) -> crate::Result<()> {
        if targets.len() != b * t {
            return Err(crate::Error::InvalidInput(format!(
                "batch of {} targets is not B·T = {b}·{t}",
                targets.len()
            )));
        }
        let v = self.config.vocab_size;
        if let Some(&bad) = targets
            .iter()
            .find(|&&x| x != IGNORE_INDEX && (x < 0 || x as usize >= v))
        {
            return Err(crate::Error::InvalidInput(format!(
                "target id {bad} is outside the model's vocabulary of {v}"
            )));
        }
        Ok(())
    }

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
        self.check_targets(targets, b, t)?;
        self.forward_body(inputs, b, t)?;
        let cfg = &self.config;
        let (c, nh, inner, v) = (cfg.n_embd, cfg.n_head, cfg.inner(), cfg.vocab_size);
        let gelu = gelu_kind(cfg);
        let n = b * t;
        let p = &self.params;
        let g = &mut self.grads;
        let idx = &self.idx;
        let acts = self.acts.as_mut().expect("allocated by forward_body");

        kernels::matmul_forward(
            &mut acts.logits,
            &acts.lnf,
            &p[idx.wte.clone()],
            None,
            n,
            c,
            v,
            WeightLayout::OutIn,
        );
        let count = targets.iter().filter(|&&x| x != IGNORE_INDEX).count();
        let scale = if count > 0 {
            grad_scale / count as f32
        } else {
            0.0
        };
        let (sum, count) = kernels::cross_entropy_fused(
            &mut acts.logits,
            &mut acts.losses,
            targets,
            n,
            v,
            IGNORE_INDEX,
            scale,
        );

        // lm head (tied): dlnf = dlogits · wte, dwte += dlogitsᵀ · lnf.
        acts.dc.fill(0.0);
        kernels::matmul_backward(
            Some(&mut acts.dc),
            Some(&mut g[idx.wte.clone()]),
            None,
            &acts.logits,
            &acts.lnf,
            &p[idx.wte.clone()],
            n,
            c,
            v,
            WeightLayout::OutIn,
        );
        acts.dresidual.fill(0.0);
        {
            let last: &[f32] = match acts.blocks.last() {
                Some(bl) => &bl.residual3,
                None => &acts.encoded,
            };
            let (gw, gb) = two_mut(g, idx.ln_f_w.clone(), idx.ln_f_b.clone());
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
            );
        }
        let shape = AttentionShape { b, t, c, nh };
        for l in (0..cfg.n_layer).rev() {
            let w = &idx.blocks[l];
            let (before, rest) = acts.blocks.split_at(l);
            let residual: &[f32] = if l == 0 {
                &acts.encoded
            } else {
                &before[l - 1].residual3
            };
            let a = &rest[0];
            // dresidual = d residual3. MLP: residual3 = residual2 + c_proj(gelu(c_fc(ln2))).
            acts.dfch_gelu.fill(0.0);
            {
                let (gw, gb) = two_mut(g, w.mlp_c_proj_w.clone(), w.mlp_c_proj_b.clone());
                kernels::matmul_backward(
                    Some(&mut acts.dfch_gelu),
                    Some(gw),
                    Some(gb),
                    &acts.dresidual,
                    &a.fch_gelu,
                    &p[w.mlp_c_proj_w.clone()],
                    n,
                    inner,
                    c,
                    WeightLayout::InOut,
                );
            }
            acts.dfch.fill(0.0);
            kernels::gelu_backward(&mut acts.dfch, &a.fch, &acts.dfch_gelu, gelu);
            acts.dc.fill(0.0);
            {
                let (gw, gb) = two_mut(g, w.c_fc_w.clone(), w.c_fc_b.clone());
                kernels::matmul_backward(
                    Some(&mut acts.dc),
                    Some(gw),
                    Some(gb),
                    &acts.dfch,
                    &a.ln2,
                    &p[w.c_fc_w.clone()],
                    n,
                    c,
                    inner,
                    WeightLayout::InOut,
                );
            }
            {
                let (gw, gb) = two_mut(g, w.ln_2_w.clone(), w.ln_2_b.clone());
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
                );
            }
            // dresidual = d residual2. Attention: residual2 = residual + c_proj(attn(c_attn(ln1))).
            acts.dc.fill(0.0);
            {
                let (gw, gb) = two_mut(g, w.attn_c_proj_w.clone(), w.attn_c_proj_b.clone());
                kernels::matmul_backward(
                    Some(&mut acts.dc),
                    Some(gw),
                    Some(gb),
                    &acts.dresidual,
                    &a.atty,
                    &p[w.attn_c_proj_w.clone()],
                    n,
                    c,
                    c,
                    WeightLayout::InOut,
                );
            }
            acts.dqkv.fill(0.0);
            kernels::attention_backward(
                &mut acts.dqkv,
                &mut acts.datt,
                &acts.dc,
                &a.qkv,
                &a.att,
                shape,
            );
            acts.dc.fill(0.0);
            {
                let (gw, gb) = two_mut(g, w.c_attn_w.clone(), w.c_attn_b.clone());
                kernels::matmul_backward(
                    Some(&mut acts.dc),
                    Some(gw),
                    Some(gb),
                    &acts.dqkv,
                    &a.ln1,
                    &p[w.c_attn_w.clone()],
                    n,
                    c,
                    3 * c,
                    WeightLayout::InOut,
                );
            }
            {
                let (gw, gb) = two_mut(g, w.ln_1_w.clone(), w.ln_1_b.clone());
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
                );
            }
        }
        // dresidual = d encoded = d(wte[ids] + wpe[pos]).
        kernels::embedding_backward(&mut g[idx.wte.clone()], &acts.dresidual, &acts.inputs, c);
        kernels::embedding_backward(&mut g[idx.wpe.clone()], &acts.dresidual, &acts.pos_ids, c);
        Ok(LossParts { sum, count })
    }
}

impl Trainable for Gpt2 {
    type Batch = TokenBatch;

    fn params(&self) -> &[f32] {
        &self.params
    }

    fn params_and_grads(&mut self) -> (&mut [f32], &mut [f32]) {
        (&mut self.params, &mut self.grads)
    }

    fn grads(&self) -> &[f32] {
        &self.grads
    }

    fn zero_grad(&mut self) {
        self.grads.fill(0.0);
    }

    fn forward_backward(
        &mut self,
        batch: &TokenBatch,
        grad_scale: f32,
    ) -> crate::Result<LossParts> {
        Gpt2::forward_backward(
            self,
            &batch.inputs,
            &batch.targets,
            batch.b,
            batch.t,
            grad_scale,
        )
    }

    fn evaluate(&mut self, batch: &TokenBatch) -> crate::Result<LossParts> {
        self.forward(&batch.inputs, Some(&batch.targets), batch.b, batch.t)
    }

    fn decay_spans(&self) -> Vec<(Range<usize>, bool)> {
        self.layout.decay_spans()
    }

    fn tokens_per_batch(&self) -> usize {
        self.acts.as_ref().map_or(0, |a| a.b * a.t)
    }
}
