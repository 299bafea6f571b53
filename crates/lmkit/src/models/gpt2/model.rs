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
//! tied to `wte` (logits = lnf · wteᵀ), or `lm_head.weight` when the config
//! unties it. No dropout: training runs with every dropout probability at 0
//! (configs written by lmkit say so).
//!
//! Task heads (the model's `arch`): `GPT2ForSequenceClassification` scores
//! the last non-pad token of each row with `score` [L, C];
//! With [`Precision::Bf16`] (mixed precision) the four matmuls of every
//! block (c_attn, attn.c_proj, c_fc, mlp.c_proj) take bf16 operands and sum
//! in f32, forward and backward, and so does the LM head (logits and its
//! two gradients), their weights packed once per optimizer step;
//! attention, LayerNorm, GELU, the loss and the residual stream stay f32,
//! as do the weights and gradients.
//!
//! `GPT2DoubleHeadsModel` scores each choice's last token with
//! `multiple_choice_head.summary` [1, C] + [1]. Either may add GPT-1's
//! auxiliary LM loss on the same inputs: loss = task + `lm_coef` · LM
//! ([`Gpt2::forward_backward_task`]).

use crate::data::TokenBatch;
use crate::kernels::{self, AttentionShape, Bf16Weight, Gelu, WeightLayout};
use crate::models::packed::PackedSeqs;
use crate::models::{GradPieces, LossParts, Trainable};
use crate::spec::config::Gpt2Config;
use crate::spec::layout::{gpt2_layout_for, ParamLayout};
use crate::spec::names::Architecture;
use crate::spec::Precision;
use crate::util::alloc::resize_scratch;
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

/// One block's matmul weights in bf16, packed for forward and backward.
struct BlockBf16 {
    c_attn: Bf16Weight,
    attn_c_proj: Bf16Weight,
    c_fc: Bf16Weight,
    mlp_c_proj: Bf16Weight,
}

/// The bf16 copies of the weights a step uses.
struct Bf16Packs {
    /// [L]
    blocks: Vec<BlockBf16>,
    /// `[V, C]` (`nn.Linear` layout): `lm_head.weight` or `wte`.
    lm_head: Bf16Weight,
}

#[derive(Debug, Clone)]
struct Index {
    wte: Range<usize>,
    wpe: Range<usize>,
    blocks: Vec<BlockIndex>,
    ln_f_w: Range<usize>,
    ln_f_b: Range<usize>,
    /// `[L + 1]`: where backward's writes end once blocks `l..` (and ln_f)
    /// are done (blocks below `l`, `wte`, `wpe` still to come).
    pending: Vec<usize>,
    /// `[V, C]`: `lm_head.weight` when untied, else `wte`.
    lm_head: Range<usize>,
    /// `[L, C]` sequence-classification head.
    score: Option<Range<usize>>,
    /// `[1, C]`, `[1]` multiple-choice head.
    mc_w: Option<Range<usize>>,
    mc_b: Option<Range<usize>>,
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
        let wte = r("wte.weight")?;
        let pending = (0..=n_layer)
            .map(|l| {
                super::super::pending_end(layout, |name| {
                    name == "wte.weight"
                        || name == "wpe.weight"
                        || (0..l).any(|j| name.starts_with(&format!("h.{j}.")))
                })
            })
            .collect();
        Ok(Index {
            pending,
            lm_head: layout.range("lm_head.weight").unwrap_or(wte.clone()),
            wte,
            wpe: r("wpe.weight")?,
            blocks,
            ln_f_w: r("ln_f.weight")?,
            ln_f_b: r("ln_f.bias")?,
            score: layout.range("score.weight"),
            mc_w: layout.range("multiple_choice_head.summary.weight"),
            mc_b: layout.range("multiple_choice_head.summary.bias"),
        })
    }
}

/// Saved activations of one block, for the rows of one batch.
#[derive(Default)]
struct BlockActs {
    /// [N, C] LayerNorm 1 output (empty when recomputed), with mean/rstd [N].
    ln1: Vec<f32>,
    ln1_mean: Vec<f32>,
    ln1_rstd: Vec<f32>,
    /// [N, 3C] q | k | v.
    qkv: Vec<f32>,
    /// [N, C] attention output (before c_proj).
    atty: Vec<f32>,
    /// [B, NH, T, T] attention probabilities, Σ NH·Tₛ² when packed (empty
    /// when recomputed: [`Gpt2Activations::att`] holds the current layer's).
    att: Vec<f32>,
    /// [N, C] residual after the attention sub-block.
    residual2: Vec<f32>,
    ln2: Vec<f32>,
    ln2_mean: Vec<f32>,
    ln2_rstd: Vec<f32>,
    /// [N, I] c_fc output and its GELU (the GELU empty when recomputed:
    /// [`Gpt2Activations::fch_gelu`] holds the current layer's).
    fch: Vec<f32>,
    fch_gelu: Vec<f32>,
    /// [N, C] block output.
    residual3: Vec<f32>,
}

/// Every tensor forward saves for backward, plus backward scratch, for one
/// batch [B, T]: its N = B·T rows, or (packed) the N real tokens of its
/// right-padded rows, end to end. Buffers keep their capacity from batch to
/// batch (`Gpt2Activations::prepare`).
#[derive(Default)]
pub struct Gpt2Activations {
    b: usize,
    t: usize,
    /// Rows run: B·T, or the real tokens when packed.
    n: usize,
    /// Packed: each sequence's real tokens and first row; empty for B·T rows.
    packed: PackedSeqs,
    /// [N] position id of each row (0.. per sequence).
    pos_ids: Vec<u32>,
    /// [N] input ids of the last forward.
    inputs: Vec<u32>,
    /// [N, C] wte + wpe.
    encoded: Vec<f32>,
    blocks: Vec<BlockActs>,
    /// Selective recomputation ([`Gpt2::set_recompute`]): the blocks keep
    /// no attention probabilities, GELU outputs or LayerNorm outputs; these
    /// hold one layer's, written by forward and again by backward.
    recompute: bool,
    /// [N, C] when recomputing (LayerNorm 1 or 2 of the current layer), else empty.
    ln: Vec<f32>,
    /// One layer's attention probabilities when recomputing, else empty.
    att: Vec<f32>,
    /// [N, I] when recomputing, else empty.
    fch_gelu: Vec<f32>,
    lnf: Vec<f32>,
    lnf_mean: Vec<f32>,
    lnf_rstd: Vec<f32>,
    /// [N, V] logits of the last [`Gpt2::forward`]; empty until one runs
    /// (training and [`Gpt2::loss`] never materialise them).
    logits: Vec<f32>,
    /// [R, V] chunk of logits for the fused LM head + loss
    /// (`kernels::lm_head_loss*`); allocated at the first loss.
    lm_scratch: Vec<f32>,
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
    /// The size of one layer's attention probabilities.
    datt: Vec<f32>,
    /// [N, I]
    dfch: Vec<f32>,
    dfch_gelu: Vec<f32>,
}

impl Gpt2Activations {
    /// Sizes every buffer for a batch [B, T]: its B·T rows, or with `lens`
    /// (each row's real tokens, right-padded) those tokens packed. Dead
    /// contents are not kept; a buffer that must grow gets room for B·T
    /// rows, so varying packed sizes grow it once.
    fn prepare(&mut self, cfg: &Gpt2Config, b: usize, t: usize, lens: Option<&[usize]>) {
        let (c, nh, i) = (cfg.n_embd, cfg.n_head, cfg.inner());
        self.b = b;
        self.t = t;
        self.pos_ids.clear();
        let padded = (b * t, b * nh * t * t);
        let (n, att) = match lens {
            Some(lens) => {
                for &len in lens {
                    self.pos_ids.extend(0..len as u32);
                }
                let n = self.packed.set(lens);
                (n, lens.iter().map(|&len| nh * len * len).sum())
            }
            None => {
                self.packed.clear();
                self.pos_ids.extend((0..b * t).map(|r| (r % t) as u32));
                padded
            }
        };
        self.n = n;
        let fit = |v: &mut Vec<f32>, k: usize| resize_scratch(v, n * k, padded.0 * k);
        let fit_att = |v: &mut Vec<f32>, k: usize| resize_scratch(v, k * att, k * padded.1);
        // Per block when kept, once when recomputed.
        let (kept, shared) = if self.recompute { (0, 1) } else { (1, 0) };
        self.blocks.resize_with(cfg.n_layer, BlockActs::default);
        for a in &mut self.blocks {
            for (v, k) in [
                (&mut a.ln1, kept * c),
                (&mut a.ln1_mean, 1),
                (&mut a.ln1_rstd, 1),
                (&mut a.qkv, 3 * c),
                (&mut a.atty, c),
                (&mut a.residual2, c),
                (&mut a.ln2, kept * c),
                (&mut a.ln2_mean, 1),
                (&mut a.ln2_rstd, 1),
                (&mut a.fch, i),
                (&mut a.fch_gelu, kept * i),
                (&mut a.residual3, c),
            ] {
                fit(v, k);
            }
            fit_att(&mut a.att, kept);
        }
        resize_scratch(&mut self.inputs, n, padded.0);
        for (v, k) in [
            (&mut self.encoded, c),
            (&mut self.ln, shared * c),
            (&mut self.fch_gelu, shared * i),
            (&mut self.lnf, c),
            (&mut self.lnf_mean, 1),
            (&mut self.lnf_rstd, 1),
            (&mut self.losses, 1),
            (&mut self.dresidual, c),
            (&mut self.dc, c),
            (&mut self.proj, c),
            (&mut self.dqkv, 3 * c),
            (&mut self.dfch, i),
            (&mut self.dfch_gelu, i),
        ] {
            fit(v, k);
        }
        fit_att(&mut self.att, shared);
        fit_att(&mut self.datt, 1);
    }

    /// The row of token `i` (< its length) of sequence `r`.
    fn row(&self, r: usize, i: usize) -> usize {
        match self.packed.lens() {
            None => r * self.t + i,
            Some(_) => self.packed.offs()[r] + i,
        }
    }
}

/// Causal self-attention of one layer over the batch's rows: per row of
/// [B, T], or per packed sequence of `lens`.
fn causal_attention(
    out: &mut [f32],
    att: &mut [f32],
    qkv: &[f32],
    shape: AttentionShape,
    lens: Option<&[usize]>,
) {
    match lens {
        None => kernels::attention_forward(out, att, qkv, shape, true, None),
        Some(lens) => {
            kernels::attention_forward_varlen(out, att, qkv, lens, shape.c, shape.nh, true)
        }
    }
}

/// A trainable GPT-2: `GPT2LMHeadModel` (tied or untied head) or, by `arch`,
/// a task model with its head.
pub struct Gpt2 {
    pub config: Gpt2Config,
    /// The HF class: decides the layout's heads.
    pub arch: Architecture,
    pub layout: ParamLayout,
    /// All parameters, laid out by `layout`. With [`Precision::Bf16`],
    /// code that writes them other than through
    /// [`Trainable::params_and_grads`] calls [`Gpt2::weights_changed`].
    pub params: Vec<f32>,
    /// Gradients, same layout; accumulated by backward, cleared by `zero_grad`.
    pub grads: Vec<f32>,
    idx: Index,
    acts: Option<Gpt2Activations>,
    precision: Precision,
    /// Recompute attention probabilities and GELU outputs in backward
    /// rather than keep them ([`Gpt2::set_recompute`]).
    recompute: bool,
    /// bf16 copies of the matmul weights (`Precision::Bf16`), packed at the
    /// first forward after the weights changed.
    bf16: Option<Bf16Packs>,
}

fn gelu_kind(cfg: &Gpt2Config) -> Gelu {
    match cfg.activation() {
        crate::spec::config::Activation::GeluErf => Gelu::Erf,
        _ => Gelu::Tanh,
    }
}

impl Gpt2 {
    /// A `GPT2LMHeadModel` with the given parameters (e.g. loaded from a checkpoint).
    pub fn from_params(config: Gpt2Config, params: Vec<f32>) -> crate::Result<Self> {
        Self::from_params_for(config, Architecture::Gpt2LMHeadModel, params)
    }

    /// A model of GPT-2 class `arch` with parameters laid out by
    /// `gpt2_layout_for(config, arch)`.
    pub fn from_params_for(
        config: Gpt2Config,
        arch: Architecture,
        params: Vec<f32>,
    ) -> crate::Result<Self> {
        config.validate()?;
        let layout = gpt2_layout_for(&config, arch)?;
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
            arch,
            layout,
            params,
            grads,
            idx,
            acts: None,
            precision: Precision::F32,
            recompute: false,
            bf16: None,
        })
    }

    /// GPT-2 initialisation: every matrix and embedding N(0, σ) with σ =
    /// `initializer_range` (0.02), the residual projections (`attn.c_proj`,
    /// `mlp.c_proj` weights) N(0, σ/√(2·n_layer)), biases 0, LayerNorm
    /// weights 1. Deterministic in `seed`.
    pub fn new_random(config: Gpt2Config, seed: u64) -> crate::Result<Self> {
        Self::new_random_for(config, Architecture::Gpt2LMHeadModel, seed)
    }

    /// [`Gpt2::new_random`] for class `arch` (heads: N(0, σ) weights, zero biases).
    pub fn new_random_for(
        config: Gpt2Config,
        arch: Architecture,
        seed: u64,
    ) -> crate::Result<Self> {
        config.validate()?;
        let layout = gpt2_layout_for(&config, arch)?;
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
        Self::from_params_for(config, arch, params)
    }

    pub fn num_params(&self) -> usize {
        self.params.len()
    }

    /// The number format of the block matmuls (f32 unless set).
    pub fn precision(&self) -> Precision {
        self.precision
    }

    /// Selective activation recomputation (Korthikanti et al., 2022): with
    /// `on`, training keeps neither the blocks' attention probabilities
    /// (`[B, NH, T, T]` per layer, most of a long sequence's memory) nor
    /// their GELU and LayerNorm outputs, and backward recomputes each
    /// layer's from the saved q|k|v, c_fc output and LayerNorm statistics:
    /// the same values, so the same gradients bit for bit, for one more
    /// attention forward, GELU and two LayerNorms per layer.
    pub fn set_recompute(&mut self, on: bool) {
        self.recompute = on;
    }

    /// Whether backward recomputes attention probabilities and GELU outputs.
    pub fn recompute(&self) -> bool {
        self.recompute
    }

    /// Trains (and evaluates) with `precision` from the next forward on.
    pub fn set_precision(&mut self, precision: Precision) {
        self.precision = precision;
        self.bf16 = None;
    }

    /// Drops the bf16 copies of the weights: the next forward packs them
    /// again from `params`. [`Trainable::params_and_grads`] calls it.
    pub fn weights_changed(&mut self) {
        self.bf16 = None;
    }

    /// Packs every block's matmul weights in bf16 when training in bf16 and
    /// they are not packed yet (once per optimizer step).
    fn ensure_bf16(&mut self) {
        if self.precision != Precision::Bf16 || self.bf16.is_some() {
            return;
        }
        let (c, inner, v) = (
            self.config.n_embd,
            self.config.inner(),
            self.config.vocab_size,
        );
        let p = &self.params;
        let pack = |r: &Range<usize>, ic: usize, oc: usize| {
            Bf16Weight::pack(&p[r.clone()], ic, oc, WeightLayout::InOut)
        };
        self.bf16 = Some(Bf16Packs {
            blocks: self
                .idx
                .blocks
                .iter()
                .map(|w| BlockBf16 {
                    c_attn: pack(&w.c_attn_w, c, 3 * c),
                    attn_c_proj: pack(&w.attn_c_proj_w, c, c),
                    c_fc: pack(&w.c_fc_w, c, inner),
                    mlp_c_proj: pack(&w.mlp_c_proj_w, inner, c),
                })
                .collect(),
            lm_head: Bf16Weight::pack(&p[self.idx.lm_head.clone()], c, v, WeightLayout::OutIn),
        });
    }

    fn ensure_acts(&mut self, b: usize, t: usize, lens: Option<&[usize]>) {
        if self.acts.as_ref().map(|a| a.recompute) != Some(self.recompute) {
            self.acts = Some(Gpt2Activations {
                recompute: self.recompute,
                ..Default::default()
            });
        }
        let acts = self.acts.as_mut().expect("set above");
        acts.prepare(&self.config, b, t, lens);
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
    fn forward_body(
        &mut self,
        inputs: &[u32],
        b: usize,
        t: usize,
        lens: Option<&[usize]>,
    ) -> crate::Result<()> {
        self.check_batch(inputs, b, t)?;
        self.ensure_acts(b, t, lens);
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
        match lens {
            Some(lens) => {
                for (r, &len) in lens.iter().enumerate() {
                    let at = acts.packed.offs()[r];
                    acts.inputs[at..at + len].copy_from_slice(&inputs[r * t..r * t + len]);
                }
            }
            None => acts.inputs.copy_from_slice(inputs),
        }
        kernels::embeddings_forward(
            &mut acts.encoded,
            &[
                (&acts.inputs, &p[idx.wte.clone()]),
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
            let pk = packs.map(|v| &v[l]);
            let ln1 = if acts.recompute {
                &mut acts.ln
            } else {
                &mut a.ln1
            };
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
            );
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
            causal_attention(&mut a.atty, att, &a.qkv, shape, acts.packed.lens());
            linear_forward(
                &mut acts.proj,
                &a.atty,
                (&p[w.attn_c_proj_w.clone()], &p[w.attn_c_proj_b.clone()]),
                pk.map(|k| &k.attn_c_proj),
                n,
                c,
                c,
            );
            kernels::residual_forward(&mut a.residual2, residual, &acts.proj);
            let ln2 = if acts.recompute {
                &mut acts.ln
            } else {
                &mut a.ln2
            };
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
            );
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
            kernels::gelu_forward(fch_gelu, &a.fch, gelu);
            linear_forward(
                &mut acts.proj,
                fch_gelu,
                (&p[w.mlp_c_proj_w.clone()], &p[w.mlp_c_proj_b.clone()]),
                pk.map(|k| &k.mlp_c_proj),
                n,
                inner,
                c,
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
        self.lm_backward(inputs, targets, b, t, grad_scale, &mut |_| {})
    }

    /// [`Gpt2::forward_backward`], handing finished gradients to `ready`
    /// ([`Trainable::forward_backward_streamed`]).
    fn lm_backward<'g>(
        &'g mut self,
        inputs: &[u32],
        targets: &[i32],
        b: usize,
        t: usize,
        grad_scale: f32,
        ready: &mut dyn FnMut(&'g mut [f32]),
    ) -> crate::Result<LossParts> {
        self.check_targets(targets, b, t)?;
        self.forward_body(inputs, b, t, None)?;
        self.acts
            .as_mut()
            .expect("allocated by forward_body")
            .dc
            .fill(0.0);
        let loss = self.lm_loss(targets, Some(grad_scale));
        self.backward_body(ready);
        Ok(loss)
    }

    /// The LM loss of `targets` [N] on the last forward_body, with the LM
    /// head fused into it (no [N, V] logits); with `grad_scale`, ADDS to
    /// `acts.dc` (dlnf) and to the LM head's gradient d(`grad_scale` · mean
    /// loss) (the head is `wte` when tied).
    fn lm_loss(&mut self, targets: &[i32], grad_scale: Option<f32>) -> LossParts {
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
    fn backward_body<'g>(&'g mut self, ready: &mut dyn FnMut(&'g mut [f32])) {
        let cfg = &self.config;
        let (c, nh, inner) = (cfg.n_embd, cfg.n_head, cfg.inner());
        let gelu = gelu_kind(cfg);
        let p = &self.params;
        let mut pieces = GradPieces::new(&mut self.grads, ready);
        let idx = &self.idx;
        let acts = self.acts.as_mut().expect("allocated by forward_body");
        let packs = self.bf16.as_ref().map(|x| &x.blocks[..]);
        let (b, t, n) = (acts.b, acts.t, acts.n);
        acts.dresidual.fill(0.0);
        {
            let last: &[f32] = match acts.blocks.last() {
                Some(bl) => &bl.residual3,
                None => &acts.encoded,
            };
            let (gw, gb) = two_mut(pieces.rest(), idx.ln_f_w.clone(), idx.ln_f_b.clone());
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
        pieces.done_from(idx.pending[cfg.n_layer]);
        let shape = AttentionShape { b, t, c, nh };
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
                kernels::gelu_forward(&mut acts.fch_gelu, &a.fch, gelu);
                &acts.fch_gelu
            } else {
                &a.fch_gelu
            };
            acts.dfch_gelu.fill(0.0);
            {
                let (gw, gb) = two_mut(g, w.mlp_c_proj_w.clone(), w.mlp_c_proj_b.clone());
                linear_backward(
                    &mut acts.dfch_gelu,
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
            acts.dfch.fill(0.0);
            kernels::gelu_backward(&mut acts.dfch, &a.fch, &acts.dfch_gelu, gelu);
            let ln2: &[f32] = if acts.recompute {
                kernels::layernorm_apply(
                    &mut acts.ln,
                    &a.residual2,
                    &a.ln2_mean,
                    &a.ln2_rstd,
                    &p[w.ln_2_w.clone()],
                    &p[w.ln_2_b.clone()],
                    n,
                    c,
                );
                &acts.ln
            } else {
                &a.ln2
            };
            acts.dc.fill(0.0);
            {
                let (gw, gb) = two_mut(g, w.c_fc_w.clone(), w.c_fc_b.clone());
                linear_backward(
                    &mut acts.dc,
                    (gw, gb),
                    &acts.dfch,
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
                linear_backward(
                    &mut acts.dc,
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
                );
                &acts.att
            } else {
                &a.att
            };
            acts.dqkv.fill(0.0);
            let (dqkv, datt, dout) = (&mut acts.dqkv, &mut acts.datt, &acts.dc);
            match acts.packed.lens() {
                None => kernels::attention_backward(dqkv, datt, dout, &a.qkv, att, shape),
                Some(lens) => {
                    kernels::attention_backward_varlen(dqkv, datt, dout, &a.qkv, att, lens, c, nh)
                }
            }
            let ln1: &[f32] = if acts.recompute {
                kernels::layernorm_apply(
                    &mut acts.ln,
                    residual,
                    &a.ln1_mean,
                    &a.ln1_rstd,
                    &p[w.ln_1_w.clone()],
                    &p[w.ln_1_b.clone()],
                    n,
                    c,
                );
                &acts.ln
            } else {
                &a.ln1
            };
            acts.dc.fill(0.0);
            {
                let (gw, gb) = two_mut(g, w.c_attn_w.clone(), w.c_attn_b.clone());
                linear_backward(
                    &mut acts.dc,
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
            pieces.done_from(idx.pending[l]);
        }
        // dresidual = d encoded = d(wte[ids] + wpe[pos]).
        let g = pieces.rest();
        kernels::embedding_backward(&mut g[idx.wte.clone()], &acts.dresidual, &acts.inputs, c);
        kernels::embedding_backward(&mut g[idx.wpe.clone()], &acts.dresidual, &acts.pos_ids, c);
        pieces.finish();
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
    match packed {
        Some(pw) => kernels::matmul_forward_bf16(out, inp, pw, Some(wb.1), n),
        None => kernels::matmul_forward(out, inp, wb.0, Some(wb.1), n, ic, oc, WeightLayout::InOut),
    }
}

/// The backward of [`linear_forward`]: ACCUMULATES `dinp` [N,IC] and the
/// gradients `(dW, db)`.
#[allow(clippy::too_many_arguments)]
fn linear_backward(
    dinp: &mut [f32],
    (gw, gb): (&mut [f32], &mut [f32]),
    dout: &[f32],
    inp: &[f32],
    w: &[f32],
    packed: Option<&Bf16Weight>,
    n: usize,
    ic: usize,
    oc: usize,
) {
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

impl Trainable for Gpt2 {
    type Batch = TokenBatch;

    fn params(&self) -> &[f32] {
        &self.params
    }

    fn layout(&self) -> &ParamLayout {
        &self.layout
    }

    fn params_and_grads(&mut self) -> (&mut [f32], &mut [f32]) {
        self.weights_changed();
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
        Trainable::forward_backward_streamed(self, batch, grad_scale, None, &mut |_| {})
    }

    fn loss_counts(&self, batch: &TokenBatch) -> Vec<f64> {
        let n = batch.targets.iter().filter(|&&x| x != IGNORE_INDEX).count();
        vec![n as f64]
    }

    /// The LM mean over `counts[0]` targets: the batch's own mean, rescaled.
    fn forward_backward_over(
        &mut self,
        batch: &TokenBatch,
        grad_scale: f32,
        counts: &[f64],
    ) -> crate::Result<LossParts> {
        Trainable::forward_backward_streamed(self, batch, grad_scale, Some(counts), &mut |_| {})
    }

    fn forward_backward_streamed<'g>(
        &'g mut self,
        batch: &TokenBatch,
        grad_scale: f32,
        counts: Option<&[f64]>,
        ready: &mut dyn FnMut(&'g mut [f32]),
    ) -> crate::Result<LossParts> {
        let (inputs, targets, b, t) = (&batch.inputs, &batch.targets, batch.b, batch.t);
        let Some(counts) = counts else {
            return self.lm_backward(inputs, targets, b, t, grad_scale, ready);
        };
        let &[global] = counts else {
            return Err(crate::Error::InvalidInput(format!(
                "{} loss counts for GPT-2's 1",
                counts.len()
            )));
        };
        let local = Trainable::loss_counts(self, batch)[0];
        if local == 0.0 {
            ready(&mut self.grads);
            return Ok(LossParts { sum: 0.0, count: 1 });
        }
        let scale = (grad_scale as f64 * local / global) as f32;
        let lp = self.lm_backward(inputs, targets, b, t, scale, ready)?;
        Ok(LossParts {
            sum: lp.sum / global,
            count: 1,
        })
    }

    fn set_precision(&mut self, precision: Precision) -> crate::Result<()> {
        Gpt2::set_precision(self, precision);
        Ok(())
    }

    fn set_recompute(&mut self, on: bool) -> crate::Result<()> {
        Gpt2::set_recompute(self, on);
        Ok(())
    }

    fn evaluate(&mut self, batch: &TokenBatch) -> crate::Result<LossParts> {
        self.loss(&batch.inputs, &batch.targets, batch.b, batch.t)
    }

    fn decay_spans(&self) -> Vec<(Range<usize>, bool)> {
        self.layout.decay_spans()
    }

    fn tokens_per_batch(&self) -> usize {
        self.acts.as_ref().map_or(0, |a| a.b * a.t)
    }
}

/// A batch for a task head: `rows` sequences of `t` tokens, right-padded.
///
/// Sequence classification: one row per example, `labels` `[rows]`.
/// Multiple choice: `choices` consecutive rows per example (each the context,
/// a delimiter and one ending), `labels` [rows / choices] the right choice.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Gpt2TaskBatch {
    /// [rows, t] token ids, each row's padding after its `lens` real tokens.
    pub inputs: Vec<u32>,
    /// `[rows]` real tokens per row (≥ 1).
    pub lens: Vec<usize>,
    pub rows: usize,
    pub t: usize,
    /// Class ids (classification) or right-choice indices (multiple choice).
    pub labels: Vec<u32>,
    /// Choices per example (multiple choice); 1 for classification.
    pub choices: usize,
}

/// Losses and scores of one task batch.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TaskOutput {
    /// [examples, L] class logits, or [examples, choices] choice scores.
    pub logits: Vec<f32>,
    /// Summed task cross-entropy over the examples.
    pub task: LossParts,
    /// Summed auxiliary LM loss over the real next tokens (zero count when `lm_coef` is 0).
    pub lm: LossParts,
}

impl TaskOutput {
    /// GPT-1's L3 = L2 + λ·L1 of means: task mean + `lm_coef` · LM mean.
    pub fn loss(&self, lm_coef: f32) -> f64 {
        self.task.mean() + lm_coef as f64 * self.lm.mean()
    }
}

impl Gpt2 {
    /// Where `GPT2ForSequenceClassification` pools each row of `inputs`
    /// [B, T]: HF's `argmax(arange(T) · (ids != pad_token_id))`, the rightmost
    /// token that is not the pad token (0 if every token is); without a pad
    /// token, the last position (HF allows that for one row only).
    pub fn last_non_pad(&self, inputs: &[u32], b: usize, t: usize) -> crate::Result<Vec<usize>> {
        match self.config.pad_token_id {
            Some(pad) => Ok(inputs
                .chunks(t)
                .take(b)
                .map(|row| row.iter().rposition(|&x| x != pad).unwrap_or(0))
                .collect()),
            None if b == 1 => Ok(vec![t - 1]),
            None => Err(crate::Error::InvalidInput(
                "GPT-2 sequence classification of more than one row needs `pad_token_id` \
                 in the config (HF's rule: the last token that is not padding)"
                    .into(),
            )),
        }
    }

    fn check_task_batch(&self, batch: &Gpt2TaskBatch) -> crate::Result<usize> {
        let (rows, t) = (batch.rows, batch.t);
        let k = batch.choices.max(1);
        let bad = |m: String| Err(crate::Error::InvalidInput(m));
        if batch.lens.len() != rows || batch.lens.iter().any(|&l| l == 0 || l > t) {
            return bad(format!(
                "task batch: {} lengths for {rows} rows of {t} tokens (each in 1..={t})",
                batch.lens.len()
            ));
        }
        if !rows.is_multiple_of(k) || batch.labels.len() != rows / k {
            return bad(format!(
                "task batch: {} labels for {rows} rows of {k} choice(s) each",
                batch.labels.len()
            ));
        }
        let classes = match (self.idx.score.is_some(), self.idx.mc_w.is_some()) {
            (true, _) if k == 1 => self.config.num_labels(),
            (_, true) => k,
            _ => {
                return bad(format!(
                    "{} has no head for this task (choices = {k})",
                    self.arch
                ))
            }
        };
        if let Some(&l) = batch.labels.iter().find(|&&l| l as usize >= classes) {
            return bad(format!("label {l} is not below {classes}"));
        }
        Ok(classes)
    }

    /// Forward (and with `grad_scale`, backward) of a task head plus
    /// `lm_coef` times the LM loss on the same rows; gradients ACCUMULATE
    /// d(`grad_scale` · (task mean + `lm_coef` · LM mean)).
    ///
    /// `den`: what the task and LM losses are means over, when not this
    /// batch's own counts ([`Gpt2::task_loss_counts`] of a global batch).
    /// `ready` gets the gradients as backward finishes them
    /// ([`Trainable::forward_backward_streamed`]).
    fn task_pass<'g>(
        &'g mut self,
        batch: &Gpt2TaskBatch,
        lm_coef: f32,
        grad_scale: Option<f32>,
        den: Option<[f64; 2]>,
        ready: &mut dyn FnMut(&'g mut [f32]),
    ) -> crate::Result<TaskOutput> {
        let classes = self.check_task_batch(batch)?;
        if !(lm_coef >= 0.0 && lm_coef.is_finite()) {
            return Err(crate::Error::InvalidInput(format!(
                "lm_coef {lm_coef} must be a finite number ≥ 0"
            )));
        }
        if lm_coef > 0.0
            && !self.config.tie_word_embeddings
            && !self.layout.contains("lm_head.weight")
        {
            return Err(crate::Error::InvalidInput(format!(
                "the auxiliary LM loss needs an LM head: {} has none with \
                 tie_word_embeddings false (use lm_coef 0)",
                self.arch
            )));
        }
        let (rows, t) = (batch.rows, batch.t);
        let mc = batch.choices > 1 || self.idx.score.is_none();
        let pooled_at: Vec<usize> = if mc {
            batch.lens.iter().map(|&l| l - 1).collect()
        } else {
            self.last_non_pad(&batch.inputs, rows, t)?
        };
        // Everything read lies in the rows' real tokens (the pooled token
        // and the LM targets): the padding need not run. A row pooled past
        // its length (a hand-built batch whose padding is not `pad_token_id`)
        // keeps it.
        let padded = batch.lens.iter().any(|&l| l < t);
        let inside = pooled_at.iter().zip(&batch.lens).all(|(&i, &l)| i < l);
        let lens = (padded && inside).then_some(&batch.lens[..]);
        self.forward_body(&batch.inputs, rows, t, lens)?;
        let acts = self.acts.as_mut().expect("allocated");
        acts.dc.fill(0.0);
        let mut out = TaskOutput::default();
        if lm_coef > 0.0 {
            // HF shifts: position i predicts token i+1, real tokens only.
            let mut targets = vec![IGNORE_INDEX; acts.n];
            for (r, &len) in batch.lens.iter().enumerate() {
                for i in 0..len - 1 {
                    targets[acts.row(r, i)] = batch.inputs[r * t + i + 1] as i32;
                }
            }
            // lm_loss means over this batch's targets: rescale to `den`'s.
            let local = batch.lens.iter().map(|&l| l - 1).sum::<usize>() as f64;
            let adj = den.map_or(1.0, |d| if d[1] > 0.0 { local / d[1] } else { 0.0 });
            out.lm = self.lm_loss(&targets, grad_scale.map(|g| g * lm_coef * adj as f32));
        }
        // Head: pooled [rows, C] → logits [rows, OC] (OC = L, or 1 per choice).
        let c = self.config.n_embd;
        let (w, bias) = if mc {
            (self.idx.mc_w.clone(), self.idx.mc_b.clone())
        } else {
            (self.idx.score.clone(), None)
        };
        let w = w.expect("checked by check_task_batch");
        let oc = if mc { 1 } else { classes };
        let acts = self.acts.as_mut().expect("allocated");
        let mut pooled = vec![0.0f32; rows * c];
        for (r, &i) in pooled_at.iter().enumerate() {
            let src = acts.row(r, i) * c;
            pooled[r * c..(r + 1) * c].copy_from_slice(&acts.lnf[src..src + c]);
        }
        let mut logits = vec![0.0f32; rows * oc];
        kernels::matmul_forward(
            &mut logits,
            &pooled,
            &self.params[w.clone()],
            bias.clone().map(|b| &self.params[b]),
            rows,
            c,
            oc,
            WeightLayout::OutIn,
        );
        out.logits = logits.clone();
        // Cross-entropy over groups of `classes`: [examples, classes].
        let examples = rows * oc / classes;
        let targets: Vec<i32> = batch.labels.iter().map(|&l| l as i32).collect();
        let mut losses = vec![0.0f32; examples];
        let Some(grad_scale) = grad_scale else {
            let (sum, count) = kernels::cross_entropy_forward(
                &mut losses,
                &logits,
                &targets,
                examples,
                classes,
                IGNORE_INDEX,
            );
            out.task = LossParts { sum, count };
            return Ok(out);
        };
        let (sum, count) = kernels::cross_entropy_fused(
            &mut logits,
            &mut losses,
            &targets,
            examples,
            classes,
            IGNORE_INDEX,
            (grad_scale as f64 / den.map_or(examples as f64, |d| d[0])) as f32,
        );
        out.task = LossParts { sum, count };
        let mut dpooled = vec![0.0f32; rows * c];
        {
            let (gw, gb) = match bias.clone() {
                Some(b) => {
                    let (gw, gb) = two_mut(&mut self.grads, w.clone(), b);
                    (gw, Some(gb))
                }
                None => (&mut self.grads[w.clone()], None),
            };
            kernels::matmul_backward(
                Some(&mut dpooled),
                Some(gw),
                gb,
                &logits,
                &pooled,
                &self.params[w],
                rows,
                c,
                oc,
                WeightLayout::OutIn,
            );
        }
        for (r, &i) in pooled_at.iter().enumerate() {
            let dst = acts.row(r, i) * c;
            for (d, s) in acts.dc[dst..dst + c].iter_mut().zip(&dpooled[r * c..]) {
                *d += s;
            }
        }
        self.backward_body(ready);
        Ok(out)
    }

    /// Task logits and losses of `batch` (no gradients): for classification
    /// `logits` [B, L] (HF `GPT2ForSequenceClassification.logits`), for
    /// multiple choice [B, K] (`GPT2DoubleHeadsModel.mc_logits`).
    pub fn forward_task(
        &mut self,
        batch: &Gpt2TaskBatch,
        lm_coef: f32,
    ) -> crate::Result<TaskOutput> {
        self.task_pass(batch, lm_coef, None, None, &mut |_| {})
    }

    /// What the task loss and the LM loss of `batch` are means over: its
    /// examples and (with `lm_coef` > 0) its LM targets.
    pub fn task_loss_counts(batch: &Gpt2TaskBatch, lm_coef: f32) -> [f64; 2] {
        let lm = if lm_coef > 0.0 {
            batch
                .lens
                .iter()
                .map(|&l| l.saturating_sub(1))
                .sum::<usize>()
        } else {
            0
        };
        [batch.labels.len() as f64, lm as f64]
    }

    /// [`Gpt2::forward_task`] and its backward: ACCUMULATES into `grads`
    /// d(`grad_scale` · (task mean + `lm_coef` · LM mean)) / dθ.
    pub fn forward_backward_task(
        &mut self,
        batch: &Gpt2TaskBatch,
        lm_coef: f32,
        grad_scale: f32,
    ) -> crate::Result<TaskOutput> {
        self.task_pass(batch, lm_coef, Some(grad_scale), None, &mut |_| {})
    }
}

/// A GPT-2 task model for the training loop: its head's loss plus
/// `lm_coef` times the auxiliary LM loss (GPT-1 §3.2; 0 = off).
pub struct Gpt2TaskTrainer {
    pub model: Gpt2,
    pub lm_coef: f32,
}

impl Trainable for Gpt2TaskTrainer {
    type Batch = Gpt2TaskBatch;

    fn params(&self) -> &[f32] {
        &self.model.params
    }

    fn layout(&self) -> &ParamLayout {
        &self.model.layout
    }

    fn params_and_grads(&mut self) -> (&mut [f32], &mut [f32]) {
        self.model.weights_changed();
        (&mut self.model.params, &mut self.model.grads)
    }

    fn grads(&self) -> &[f32] {
        &self.model.grads
    }

    fn zero_grad(&mut self) {
        self.model.grads.fill(0.0);
    }

    /// The reported loss is the combined mean, as one part per example.
    fn forward_backward(
        &mut self,
        batch: &Gpt2TaskBatch,
        grad_scale: f32,
    ) -> crate::Result<LossParts> {
        Trainable::forward_backward_streamed(self, batch, grad_scale, None, &mut |_| {})
    }

    fn loss_counts(&self, batch: &Gpt2TaskBatch) -> Vec<f64> {
        Gpt2::task_loss_counts(batch, self.lm_coef).to_vec()
    }

    fn forward_backward_over(
        &mut self,
        batch: &Gpt2TaskBatch,
        grad_scale: f32,
        counts: &[f64],
    ) -> crate::Result<LossParts> {
        Trainable::forward_backward_streamed(self, batch, grad_scale, Some(counts), &mut |_| {})
    }

    fn forward_backward_streamed<'g>(
        &'g mut self,
        batch: &Gpt2TaskBatch,
        grad_scale: f32,
        counts: Option<&[f64]>,
        ready: &mut dyn FnMut(&'g mut [f32]),
    ) -> crate::Result<LossParts> {
        let lm_coef = self.lm_coef;
        let Some(counts) = counts else {
            let out = self
                .model
                .task_pass(batch, lm_coef, Some(grad_scale), None, ready)?;
            return Ok(combined(&out, lm_coef));
        };
        let &[task, lm] = counts else {
            return Err(crate::Error::InvalidInput(format!(
                "{} loss counts for a GPT-2 task's 2",
                counts.len()
            )));
        };
        let out =
            self.model
                .task_pass(batch, lm_coef, Some(grad_scale), Some([task, lm]), ready)?;
        let over = |l: &LossParts, d: f64| if d > 0.0 { l.sum / d } else { 0.0 };
        Ok(LossParts {
            sum: over(&out.task, task) + lm_coef as f64 * over(&out.lm, lm),
            count: 1,
        })
    }

    fn set_precision(&mut self, precision: Precision) -> crate::Result<()> {
        self.model.set_precision(precision);
        Ok(())
    }

    fn set_recompute(&mut self, on: bool) -> crate::Result<()> {
        self.model.set_recompute(on);
        Ok(())
    }

    fn evaluate(&mut self, batch: &Gpt2TaskBatch) -> crate::Result<LossParts> {
        let out = self.model.forward_task(batch, self.lm_coef)?;
        Ok(combined(&out, self.lm_coef))
    }

    fn decay_spans(&self) -> Vec<(Range<usize>, bool)> {
        self.model.layout.decay_spans()
    }

    fn tokens_per_batch(&self) -> usize {
        self.model.tokens_per_batch()
    }
}

fn combined(out: &TaskOutput, lm_coef: f32) -> LossParts {
    let n = out.task.count;
    LossParts {
        sum: out.loss(lm_coef) * n as f64,
        count: n,
    }
}
