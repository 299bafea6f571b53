//! The two model families, with the same outline:
//!
//! - [`gpt2`]: the training model (`Gpt2`: forward with saved activations,
//!   backward), and the inference engine (`Gpt2Engine`: f32/bf16/int8
//!   weights, KV cache, generation, sampling, perplexity).
//! - [`bert`]: the encoder (`Bert`: forward, shared by training and
//!   inference), its backward and heads (`BertTrainer`), bf16 weights, and
//!   the inference pipelines (embed, fill-mask, classify, QA).
//!
//! - [`auto_dtype`]: `dtype = auto`, the fastest number format on this CPU.
//! - [`load`]: an inference model by folder or hub name, its family checked
//!   (what the CLI and the Python package call).
//!
//! [`Trainable`] is what a model offers the training loop (`train`).

pub mod auto_dtype;
pub mod bert;
pub mod gpt2;
pub mod load;
pub(crate) mod packed;

use std::ops::Range;

/// A summed loss over `count` scored targets (mean = sum / count).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct LossParts {
    pub sum: f64,
    pub count: usize,
}

impl LossParts {
    pub fn mean(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.sum / self.count as f64
        }
    }

    pub fn add(&mut self, other: LossParts) {
        self.sum += other.sum;
        self.count += other.count;
    }
}

/// A model the trainer can optimize: one flat parameter buffer and a
/// gradient buffer with the same layout, and a fused forward + backward.
pub trait Trainable {
    /// One micro-batch of input (token ids, targets, masks...).
    type Batch;

    fn params(&self) -> &[f32];
    /// Where each named HF tensor sits in [`Self::params`] (how a checkpoint
    /// of the model is read back into it).
    fn layout(&self) -> &crate::spec::layout::ParamLayout;
    /// Parameters (mutable) and gradients together, for the optimizer.
    fn params_and_grads(&mut self) -> (&mut [f32], &mut [f32]);
    /// [`Self::params_and_grads`] for an optimizer step that updates the
    /// whole buffer through [`crate::kernels::adamw_update_scaled`] with the
    /// returned hook (when there is one), which keeps the model's derived
    /// copies of the parameters (bf16 packs) fresh as each part is updated
    /// instead of marking them stale. The parameters may then change only
    /// through that update. The default has no hook.
    fn params_grads_hooked(
        &mut self,
    ) -> (
        &mut [f32],
        &mut [f32],
        Option<crate::kernels::UpdateHook<'_>>,
    ) {
        let (p, g) = self.params_and_grads();
        (p, g, None)
    }
    fn grads(&self) -> &[f32];
    fn zero_grad(&mut self);
    /// Forward and backward on `batch`: returns the summed loss and ACCUMULATES
    /// into the gradients d(`grad_scale` · mean loss of this batch) / dθ.
    /// An error (a batch that does not fit the model) leaves the gradients
    /// of earlier micro-batches as they were.
    fn forward_backward(
        &mut self,
        batch: &Self::Batch,
        grad_scale: f32,
    ) -> crate::Result<LossParts>;
    /// What each loss term of `batch` is a mean over (labelled tokens,
    /// rows...), one number per term in a fixed order. A data-parallel step
    /// sums them over the ranks' batches and trains with
    /// [`Self::forward_backward_over`], so the ranks' gradients add up to
    /// those of one process over the global batch, however the labels fall.
    /// Empty (the default): every rank's batch weighs the same (e.g. GPT-2
    /// pretraining's full rows), and the ranks' mean gradients are averaged.
    fn loss_counts(&self, _batch: &Self::Batch) -> Vec<f64> {
        Vec::new()
    }
    /// [`Self::forward_backward`] with each loss term a mean over `counts`
    /// (from [`Self::loss_counts`], summed over the global batch) instead of
    /// this batch's own: ACCUMULATES `grad_scale` · d(this batch's share of
    /// the global loss)/dθ and returns that share as `{ sum, count: 1 }`.
    fn forward_backward_over(
        &mut self,
        batch: &Self::Batch,
        grad_scale: f32,
        counts: &[f64],
    ) -> crate::Result<LossParts> {
        let _ = counts;
        self.forward_backward(batch, grad_scale)
    }
    /// [`Self::forward_backward`] (`counts` `None`) or
    /// [`Self::forward_backward_over`], handing the gradient buffer to
    /// `ready` in pieces as backward finishes with them: disjoint, from the
    /// end of the buffer down, together the whole buffer, each once no later
    /// part of backward writes it (a data-parallel step all-reduces a layer's
    /// gradients while backward runs through the layers below). The default
    /// hands the whole buffer over at the end.
    fn forward_backward_streamed<'g>(
        &'g mut self,
        batch: &Self::Batch,
        grad_scale: f32,
        counts: Option<&[f64]>,
        ready: &mut dyn FnMut(&'g mut [f32]),
    ) -> crate::Result<LossParts> {
        let loss = match counts {
            Some(c) => self.forward_backward_over(batch, grad_scale, c)?,
            None => self.forward_backward(batch, grad_scale)?,
        };
        ready(self.params_and_grads().1);
        Ok(loss)
    }
    /// Recompute activations in backward instead of keeping them (less
    /// memory, the same gradients) where the model has it (GPT-2); turning
    /// it on elsewhere is an error.
    fn set_recompute(&mut self, on: bool) -> crate::Result<()> {
        if on {
            return Err(crate::Error::InvalidInput(
                "`recompute`: this model keeps its activations (GPT-2 recomputes them)".into(),
            ));
        }
        Ok(())
    }
    /// The number format of the matmuls from now on: f32 (exact against
    /// HF, every model) or bf16 mixed precision where the model has it
    /// (an error otherwise).
    fn set_precision(&mut self, precision: crate::spec::Precision) -> crate::Result<()> {
        match precision {
            crate::spec::Precision::F32 => Ok(()),
            p => Err(crate::Error::InvalidInput(format!(
                "`dtype` {p}: this model trains in f32 only"
            ))),
        }
    }
    /// Forward only (validation).
    fn evaluate(&mut self, batch: &Self::Batch) -> crate::Result<LossParts>;
    /// Parameter ranges with whether weight decay applies to each.
    fn decay_spans(&self) -> Vec<(Range<usize>, bool)>;
    /// Tokens consumed per micro-batch (for throughput).
    fn tokens_per_batch(&self) -> usize;
}

/// A gradient buffer handed out in pieces while backward runs
/// ([`Trainable::forward_backward_streamed`]): backward writes through
/// [`Self::rest`] with the buffer's own offsets, and says with
/// [`Self::done_from`] where its remaining writes end.
pub struct GradPieces<'g, 'r> {
    /// `[0, frontier)` of the buffer: what backward may still write.
    rest: &'g mut [f32],
    ready: &'r mut dyn FnMut(&'g mut [f32]),
}

impl<'g, 'r> GradPieces<'g, 'r> {
    pub fn new(grads: &'g mut [f32], ready: &'r mut dyn FnMut(&'g mut [f32])) -> Self {
        GradPieces { rest: grads, ready }
    }

    /// The part of the buffer backward may still write (indices are the
    /// whole buffer's; it ends at the last [`Self::done_from`]).
    pub fn rest(&mut self) -> &mut [f32] {
        self.rest
    }

    /// Backward writes nothing at or past `frontier` any more: hands
    /// `[frontier, end of rest)` to `ready`.
    pub fn done_from(&mut self, frontier: usize) {
        if frontier < self.rest.len() {
            let (lo, hi) = std::mem::take(&mut self.rest).split_at_mut(frontier);
            (self.ready)(hi);
            self.rest = lo;
        }
    }

    /// Backward is over: hands out the rest.
    pub fn finish(self) {
        if !self.rest.is_empty() {
            (self.ready)(self.rest);
        }
    }
}

/// The end of the furthest parameter of `layout` that `pending` names
/// (what backward still writes): [`GradPieces::done_from`]'s frontier.
pub fn pending_end(
    layout: &crate::spec::layout::ParamLayout,
    pending: impl Fn(&str) -> bool,
) -> usize {
    layout
        .specs()
        .iter()
        .filter(|s| pending(&s.name))
        .map(|s| s.range().end)
        .max()
        .unwrap_or(0)
}
