//! The optimizer step over any [`Trainable`] model: gradient accumulation,
//! global-norm clipping, AdamW with decoupled weight decay, an LR schedule.

use super::schedule::LrSchedule;
use crate::kernels::{self, AdamW};
use serde::{Deserialize, Serialize};
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
    /// Parameters (mutable) and gradients together, for the optimizer.
    fn params_and_grads(&mut self) -> (&mut [f32], &mut [f32]);
    fn grads(&self) -> &[f32];
    fn zero_grad(&mut self);
    /// Forward and backward on `batch`: returns the summed loss and ACCUMULATES
    /// into the gradients d(`grad_scale` · mean loss of this batch) / dθ.
    fn forward_backward(&mut self, batch: &Self::Batch, grad_scale: f32) -> LossParts;
    /// Forward only (validation).
    fn evaluate(&mut self, batch: &Self::Batch) -> LossParts;
    /// Parameter ranges with whether weight decay applies to each.
    fn decay_spans(&self) -> Vec<(Range<usize>, bool)>;
    /// Tokens consumed per micro-batch (for throughput).
    fn tokens_per_batch(&self) -> usize;
}

/// Optimizer hyper-parameters that stay fixed during a run.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct OptimConfig {
    pub schedule: LrSchedule,
    pub beta1: f32,
    pub beta2: f32,
    pub eps: f32,
    pub weight_decay: f32,
    /// Global-norm clip threshold; 0 disables clipping.
    pub grad_clip: f32,
    /// Micro-batches per optimizer step.
    pub grad_accum: usize,
}

/// AdamW moments and the number of optimizer steps taken.
#[derive(Debug, Clone, PartialEq)]
pub struct OptimState {
    pub m: Vec<f32>,
    pub v: Vec<f32>,
    /// Optimizer steps completed (the next step is `step + 1`, 1-based in AdamW).
    pub step: u64,
}

impl OptimState {
    pub fn new(num_params: usize) -> Self {
        OptimState {
            m: vec![0.0; num_params],
            v: vec![0.0; num_params],
            step: 0,
        }
    }
}

/// What one optimizer step did.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepStats {
    /// 1-based number of this step.
    pub step: u64,
    /// Mean loss over the accumulated micro-batches (token-weighted).
    pub loss: f64,
    pub lr: f32,
    /// Global gradient norm before clipping.
    pub grad_norm: f32,
    pub tokens: usize,
}

#[derive(Debug, thiserror::Error)]
pub enum StepError {
    /// The loss or gradient norm is NaN or infinite; parameters were NOT updated.
    #[error("non-finite {what} ({value}) at step {step}: parameters left unchanged")]
    NonFinite {
        what: &'static str,
        value: f64,
        step: u64,
    },
}

/// One optimizer step: `cfg.grad_accum` micro-batches from `next_batch`,
/// forward + backward each (gradients averaged over micro-batches), global
/// norm clip, AdamW with the scheduled learning rate.
pub fn train_step<M: Trainable>(
    model: &mut M,
    opt: &mut OptimState,
    cfg: &OptimConfig,
    batch: &mut M::Batch,
    next_batch: &mut dyn FnMut(&mut M::Batch),
) -> Result<StepStats, StepError> {
    let k = cfg.grad_accum.max(1);
    model.zero_grad();
    let mut loss = LossParts::default();
    for _ in 0..k {
        next_batch(batch);
        loss.add(model.forward_backward(batch, 1.0 / k as f32));
    }
    let step = opt.step + 1;
    let mean = loss.mean();
    if !mean.is_finite() {
        return Err(StepError::NonFinite {
            what: "loss",
            value: mean,
            step,
        });
    }
    let spans = model.decay_spans();
    let (params, grads) = model.params_and_grads();
    let grad_norm = kernels::global_norm(grads);
    if !grad_norm.is_finite() {
        return Err(StepError::NonFinite {
            what: "gradient norm",
            value: grad_norm as f64,
            step,
        });
    }
    if cfg.grad_clip > 0.0 {
        // As torch.nn.utils.clip_grad_norm_: scale by max / (norm + 1e-6) when < 1.
        let coef = cfg.grad_clip / (grad_norm + 1e-6);
        if coef < 1.0 {
            kernels::scale_inplace(grads, coef);
        }
    }
    let lr = cfg.schedule.lr(opt.step);
    let adamw = AdamW {
        lr,
        beta1: cfg.beta1,
        beta2: cfg.beta2,
        eps: cfg.eps,
        weight_decay: cfg.weight_decay,
    };
    kernels::adamw_update(params, grads, &mut opt.m, &mut opt.v, step, &adamw, &spans);
    opt.step = step;
    Ok(StepStats {
        step,
        loss: mean,
        lr,
        grad_norm,
        tokens: k * model.tokens_per_batch(),
    })
}
