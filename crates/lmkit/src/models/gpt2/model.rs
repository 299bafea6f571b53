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
//! `GPT2DoubleHeadsModel` scores each choice's last token with
//! `multiple_choice_head.summary` [1, C] + [1]. Either may add GPT-1's
//! auxiliary LM loss on the same inputs: loss = task + `lm_coef` · LM
//! ([`Gpt2::forward_backward_task`]).
//!
//! With [`Precision::Bf16`] (mixed precision) the four matmuls of every
//! block (c_attn, attn.c_proj, c_fc, mlp.c_proj) take bf16 operands and sum
//! in f32, forward and backward, and so does the LM head (logits and its
//! two gradients), their weights packed once per optimizer step;
//! attention, LayerNorm, GELU, the loss and the residual stream stay f32,
//! as do the weights and gradients.
//!
//! This file holds the model, its parameter index, its saved activations,
//! the bf16 packing and [`Trainable`] for the LM; `forward` the forward
//! pass and the logits, `backward` the fused LM loss and the full backward,
//! `task` the task heads ([`Gpt2TaskBatch`], [`Gpt2TaskTrainer`]).

mod backward;
mod forward;
mod task;

pub use task::{Gpt2TaskBatch, Gpt2TaskTrainer, TaskOutput};

use crate::data::TokenBatch;
use crate::kernels::{Bf16RowWriter, Bf16Weight, Gelu, UpdateHook, WeightLayout, BF16_ROW_ALIGN};
use crate::models::packed::PackedSeqs;
use crate::models::{LossParts, Trainable};
use crate::spec::config::Gpt2Config;
use crate::spec::layout::{gpt2_layout_for, ParamLayout};
use crate::spec::names::Architecture;
use crate::spec::Precision;
use crate::util::alloc::resize_scratch;
use crate::util::profile::{span, Phase};
use crate::util::rng::Rng;
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

impl Bf16Packs {
    /// Every packed weight with its range in the parameters: each block's
    /// four, then the LM head.
    fn weights_mut<'a>(
        &'a mut self,
        idx: &'a Index,
    ) -> impl Iterator<Item = (&'a Range<usize>, &'a mut Bf16Weight)> {
        let blocks = idx.blocks.iter().zip(self.blocks.iter_mut());
        blocks
            .flat_map(|(w, b)| {
                [
                    (&w.c_attn_w, &mut b.c_attn),
                    (&w.attn_c_proj_w, &mut b.attn_c_proj),
                    (&w.c_fc_w, &mut b.c_fc),
                    (&w.mlp_c_proj_w, &mut b.mlp_c_proj),
                ]
            })
            .chain(std::iter::once((&idx.lm_head, &mut self.lm_head)))
    }
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
    /// [N, I] d gelu(fch), then d fch (in place).
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
    /// The copies of the weights before they changed: their buffers are
    /// packed again rather than allocated anew every step.
    bf16_spare: Option<Bf16Packs>,
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
            bf16_spare: None,
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
        self.bf16_spare = None;
    }

    /// Marks the bf16 copies of the weights stale: the next forward packs
    /// them again from `params` (into the same buffers). [`Trainable::params_and_grads`] calls it.
    pub fn weights_changed(&mut self) {
        if let Some(packs) = self.bf16.take() {
            self.bf16_spare = Some(packs);
        }
    }

    /// Parameters and gradients for an optimizer step over the whole buffer
    /// ([`Trainable::params_grads_hooked`]): with bf16 copies of the weights
    /// packed, a hook that packs each updated part of a weight into them, so
    /// the next forward does not read every weight again to pack it; else
    /// the copies are marked stale ([`Self::weights_changed`]).
    pub fn params_grads_hooked(&mut self) -> (&mut [f32], &mut [f32], Option<UpdateHook<'_>>) {
        let refreshable = match self.bf16.as_mut() {
            Some(p) => p.weights_mut(&self.idx).all(|(_, w)| w.refreshable()),
            None => false,
        };
        if !refreshable {
            self.weights_changed();
            return (&mut self.params, &mut self.grads, None);
        }
        let Gpt2 {
            params,
            grads,
            bf16,
            idx,
            ..
        } = self;
        let packs = bf16.as_mut().expect("checked above");
        let mut targets: Vec<(Range<usize>, Bf16RowWriter<'_>)> = packs
            .weights_mut(idx)
            .map(|(r, w)| (r.clone(), w.row_writer().expect("checked above")))
            .collect();
        targets.sort_by_key(|(r, _)| r.start);
        let units: Vec<_> = targets
            .iter()
            .map(|(r, w)| (r.clone(), BF16_ROW_ALIGN * w.row_len()))
            .collect();
        let chunks = crate::kernels::chunk_plan(params.len(), &units);
        let after = move |r: Range<usize>, vals: &[f32]| {
            let i = targets.partition_point(|(t, _)| t.end <= r.start);
            if let Some((t, w)) = targets.get(i).filter(|(t, _)| t.start <= r.start) {
                debug_assert!(r.end <= t.end, "a chunk straddles a weight");
                // SAFETY: `chunk_plan` cut each weight into disjoint blocks
                // of whole BF16_ROW_ALIGN rows (the last what remains).
                unsafe { w.fill_rows((r.start - t.start) / w.row_len(), vals) };
            }
        };
        let hook = UpdateHook {
            chunks,
            after: Box::new(after),
        };
        (params, grads, Some(hook))
    }

    /// Packs every block's matmul weights in bf16 when training in bf16 and
    /// they are not packed yet (once per optimizer step).
    fn ensure_bf16(&mut self) {
        if self.precision != Precision::Bf16 || self.bf16.is_some() {
            return;
        }
        let _span = span(Phase::WeightPack);
        let (c, inner, v) = (
            self.config.n_embd,
            self.config.inner(),
            self.config.vocab_size,
        );
        let p = &self.params;
        if let Some(mut packs) = self.bf16_spare.take() {
            for (r, w) in packs.weights_mut(&self.idx) {
                w.repack(&p[r.clone()]);
            }
            self.bf16 = Some(packs);
            return;
        }
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

    fn params_grads_hooked(&mut self) -> (&mut [f32], &mut [f32], Option<UpdateHook<'_>>) {
        Gpt2::params_grads_hooked(self)
    }

    fn grads(&self) -> &[f32] {
        &self.grads
    }

    fn zero_grad(&mut self) {
        crate::kernels::zero_fill(&mut self.grads);
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
