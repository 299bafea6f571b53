//! The buffers of one encoder forward ([`BertActivations`], per layer
//! [`LayerActs`]) and the packed real tokens of an unpadded forward.

use super::BertBatch;
use crate::error::{Error, Result};
use crate::models::packed::PackedSeqs;
use crate::spec::config::BertConfig;
use crate::util::alloc::resize_scratch;

/// One encoder layer's intermediates (see the module docs for the names).
#[derive(Debug, Clone, Default)]
pub struct LayerActs {
    /// `[N,3C]`.
    pub qkv: Vec<f32>,
    /// Attention probabilities `[B,NH,T,T]` (packed: `[NH,Tₛ,Tₛ]` per sequence).
    pub att: Vec<f32>,
    /// Attention output before the projection `[N,C]`.
    pub atty: Vec<f32>,
    /// Projection + residual, input of LN1 `[N,C]`.
    pub res1: Vec<f32>,
    /// `[N,C]`, with LN statistics `[N]`.
    pub ln1: Vec<f32>,
    pub ln1_mean: Vec<f32>,
    pub ln1_rstd: Vec<f32>,
    /// Intermediate pre-activation and GELU output `[N,I]`.
    pub fch: Vec<f32>,
    pub fch_gelu: Vec<f32>,
    /// Output projection + residual, input of LN2 `[N,C]`.
    pub res2: Vec<f32>,
    pub ln2_mean: Vec<f32>,
    pub ln2_rstd: Vec<f32>,
}

impl LayerActs {
    /// For `rows` and `att` attention probabilities (`.0` now, `.1` the
    /// padded batch's: a buffer that grows is given room for those).
    fn resize(&mut self, cfg: &BertConfig, rows: (usize, usize), att: (usize, usize)) {
        let (c, i) = (cfg.hidden_size, cfg.intermediate_size);
        let fit = |v: &mut Vec<f32>, k: usize| resize_scratch(v, rows.0 * k, rows.1 * k);
        fit(&mut self.qkv, 3 * c);
        for v in [
            &mut self.atty,
            &mut self.res1,
            &mut self.ln1,
            &mut self.res2,
        ] {
            fit(v, c);
        }
        for v in [&mut self.fch, &mut self.fch_gelu] {
            fit(v, i);
        }
        for v in [
            &mut self.ln1_mean,
            &mut self.ln1_rstd,
            &mut self.ln2_mean,
            &mut self.ln2_rstd,
        ] {
            fit(v, 1);
        }
        resize_scratch(&mut self.att, att.0, att.1);
    }
}

/// Buffers of one forward pass. With `keep_all`, `hidden_state(l)` is the
/// input of layer `l` (0 = embeddings output) for every `l`, and
/// `layers[l]` holds layer `l`'s intermediates: what a backward needs.
#[derive(Debug, Clone, Default)]
pub struct BertActivations {
    pub b: usize,
    pub t: usize,
    pub(super) keep_all: bool,
    /// Embedding sum before LayerNorm `[N,C]` and its LN statistics `[N]`.
    pub emb: Vec<f32>,
    pub emb_mean: Vec<f32>,
    pub emb_rstd: Vec<f32>,
    /// Hidden-state slots `[S,N,C]`: S = L+1 with `keep_all`, else 2.
    pub(super) hs: Vec<f32>,
    pub(super) slots: usize,
    pub(super) out_slot: usize,
    /// Per-layer intermediates (L with `keep_all`, else 1 reused).
    pub layers: Vec<LayerActs>,
    /// The real tokens the rows hold after [`Bert::forward_unpadded`](super::Bert::forward_unpadded).
    pub(super) packed: PackedRows,
}

/// The real tokens of a right-padded batch, packed (what
/// [`Bert::forward_unpadded`](super::Bert::forward_unpadded) runs on).
#[derive(Debug, Clone, Default)]
pub(crate) struct PackedRows {
    /// `[1,R]`: the real tokens' ids, token types and positions (mask all 1).
    pub(crate) batch: BertBatch,
    /// Each sequence's length and first row; empty: not packed.
    seqs: PackedSeqs,
}

impl PackedRows {
    pub(super) fn clear(&mut self) {
        self.seqs.clear();
    }

    /// Packs the first `lens[b]` positions of each row of `batch`.
    pub(super) fn gather(&mut self, batch: &BertBatch, lens: &[usize]) {
        let r = self.seqs.set(lens);
        let p = &mut self.batch;
        for v in [&mut p.input_ids, &mut p.token_type_ids, &mut p.position_ids] {
            v.clear();
            v.reserve(r);
        }
        for (bi, &len) in lens.iter().enumerate() {
            let span = bi * batch.t..bi * batch.t + len;
            p.input_ids
                .extend_from_slice(&batch.input_ids[span.clone()]);
            p.token_type_ids
                .extend_from_slice(&batch.token_type_ids[span.clone()]);
            p.position_ids.extend_from_slice(&batch.position_ids[span]);
        }
        p.attention_mask.clear();
        p.attention_mask.resize(r, 1);
        (p.b, p.t) = (1, r);
    }

    /// Each sequence's rows, in order.
    pub(crate) fn spans(&self) -> impl Iterator<Item = std::ops::Range<usize>> + '_ {
        self.seqs.spans()
    }

    /// Each sequence's length when packed.
    pub(crate) fn lens(&self) -> Option<&[usize]> {
        self.seqs.lens()
    }
}

/// Each row's real length when `batch` is right-padded with at least one
/// real token per row and some padding; `None` otherwise (nothing to gain,
/// or a mask that packing would not reproduce).
pub(super) fn right_padded_lens(batch: &BertBatch) -> Option<Vec<usize>> {
    let (b, t) = (batch.b, batch.t);
    if b == 0 || t == 0 {
        return None;
    }
    let mut lens = Vec::with_capacity(b);
    for row in batch.attention_mask.chunks_exact(t) {
        let len = row.iter().take_while(|&&m| m != 0).count();
        if len == 0 || row[len..].iter().any(|&m| m != 0) {
            return None;
        }
        lens.push(len);
    }
    (lens.iter().sum::<usize>() < b * t).then_some(lens)
}

impl BertActivations {
    /// Empty buffers; `keep_all` keeps every layer's activations.
    pub fn new(keep_all: bool) -> Self {
        BertActivations {
            keep_all,
            ..Default::default()
        }
    }

    /// Sizes the buffers for a `[B,T]` batch run on `n` rows with `att`
    /// attention probabilities per layer.
    /// The unpadded row counts vary from batch to batch: a buffer that
    /// grows gets room for the padded batch, so it grows rarely.
    pub(super) fn prepare(&mut self, cfg: &BertConfig, b: usize, t: usize, n: usize, att: usize) {
        let (c, nl, nh) = (
            cfg.hidden_size,
            cfg.num_hidden_layers,
            cfg.num_attention_heads,
        );
        self.b = b;
        self.t = t;
        self.slots = if self.keep_all { nl + 1 } else { 2 };
        let rows = (n, (b * t).max(n));
        resize_scratch(&mut self.emb, n * c, rows.1 * c);
        resize_scratch(&mut self.emb_mean, n, rows.1);
        resize_scratch(&mut self.emb_rstd, n, rows.1);
        resize_scratch(&mut self.hs, self.slots * n * c, self.slots * rows.1 * c);
        let nlayers = if self.keep_all { nl } else { 1 };
        self.layers.resize_with(nlayers, LayerActs::default);
        let att = (att, (b * nh * t * t).max(att));
        for la in &mut self.layers {
            la.resize(cfg, rows, att);
        }
    }

    /// The row of position `j` of sequence `bi` (`bi·T + j`, or its packed
    /// row after [`Bert::forward_unpadded`](super::Bert::forward_unpadded); `None` for padding not run).
    pub fn row(&self, bi: usize, j: usize) -> Option<usize> {
        if bi >= self.b || j >= self.t {
            return None;
        }
        match self.packed.lens() {
            Some(_) => self.packed.seqs.row(bi, j),
            None => Some(bi * self.t + j),
        }
    }

    /// The rows of positions `0..len` of sequence `bi`, which lie end to
    /// end either way; an error if one of them was not run (padding).
    pub fn span(&self, bi: usize, len: usize) -> Result<std::ops::Range<usize>> {
        let first = match len {
            0 => Some(0),
            _ => self.row(bi, 0).filter(|_| self.row(bi, len - 1).is_some()),
        };
        first.map(|r| r..r + len).ok_or_else(|| {
            Error::InvalidInput(format!(
                "positions 0..{len} of sequence {bi} were not all run (the batch is {}×{}{})",
                self.b,
                self.t,
                if self.packed.lens().is_some() {
                    ", padding skipped"
                } else {
                    ""
                }
            ))
        })
    }

    /// Rows of the hidden state: B·T, or the real tokens when packed.
    pub fn rows(&self) -> usize {
        match self.packed.lens() {
            Some(_) => self.packed.batch.t,
            None => self.b * self.t,
        }
    }

    /// The `[CLS]` (first) row of each sequence `[B]`.
    pub fn cls_rows(&self) -> Vec<usize> {
        match self.packed.lens() {
            Some(_) => self.packed.seqs.offs().to_vec(),
            None => (0..self.b).map(|bi| bi * self.t).collect(),
        }
    }

    /// The packed real tokens, after [`Bert::forward_unpadded`](super::Bert::forward_unpadded) packed them.
    pub(crate) fn packed(&self) -> Option<&PackedRows> {
        self.packed.lens().map(|_| &self.packed)
    }

    /// The encoder output (HF `last_hidden_state`) `[B,T,C]`, or `[R,C]`
    /// for the R real tokens after [`Bert::forward_unpadded`](super::Bert::forward_unpadded) packed them.
    pub fn hidden(&self) -> &[f32] {
        self.hidden_state_slot(self.out_slot)
    }

    /// With `keep_all`: HF `hidden_states[l]` (0 = embeddings, L = output;
    /// `[R,C]` when packed, as [`Self::hidden`]).
    pub fn hidden_state(&self, l: usize) -> Option<&[f32]> {
        (self.keep_all && l < self.slots).then(|| self.hidden_state_slot(l))
    }

    fn hidden_state_slot(&self, s: usize) -> &[f32] {
        let nc = self.hs.len().checked_div(self.slots).unwrap_or(0);
        &self.hs[s * nc..(s + 1) * nc]
    }
}
