//! The optimizer step over any [`Trainable`] model: gradient accumulation,
//! global-norm clipping, AdamW with decoupled weight decay, an LR schedule.

use crate::checkpoint::state::OptimState;
use crate::kernels::{self, AdamW};
use crate::models::{LossParts, Trainable};
use crate::spec::optim::OptimConfig;

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
    /// A non-finite loss or gradient stopped a run ([`super::Runner`]):
    /// nothing after the last checkpoint was saved.
    #[error(
        "non-finite {what} ({value}) at step {step}; training stopped. The last good checkpoint is {} (try a lower `lr` or `grad_clip`)",
        last_checkpoint.as_ref().map_or("none (no checkpoint was saved yet)".to_string(), |p| p.display().to_string())
    )]
    Diverged {
        what: &'static str,
        value: f64,
        step: u64,
        last_checkpoint: Option<std::path::PathBuf>,
    },
    /// A batch the model cannot take (ids outside the vocabulary, too long...).
    #[error(transparent)]
    Model(#[from] crate::Error),
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
        loss.add(model.forward_backward(batch, 1.0 / k as f32)?);
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
