//! The optimizer step over any [`Trainable`] model: gradient accumulation,
//! global-norm clipping, AdamW with decoupled weight decay, an LR schedule;
//! data-parallel over the ranks of a [`Communicator`] ([`DataParallel`]).

use std::ops::Range;

use crate::checkpoint::state::OptimState;
use crate::kernels::{self, AdamW};
use crate::models::{LossParts, Trainable};
use crate::spec::optim::OptimConfig;
use crate::util::comm::{block_range, Communicator, SingleProcess};
use crate::util::profile::{timed, Phase};

/// Gradient elements per all-reduce: the gradients go out in buckets of
/// 16 MiB, the last layers' first (the order backward finishes them).
pub const GRAD_BUCKET: usize = 1 << 22;

/// How the ranks of a data-parallel run share an optimizer step. Each rank
/// runs forward + backward on its own slice of the global batch; the loss
/// (sum, count) and the gradients are summed over the ranks and the
/// gradients averaged, so every rank takes the same step as one process
/// over the whole global batch would, and the weights stay identical.
///
/// With `shard_optimizer` (ZeRO stage 1) each rank keeps the AdamW moments
/// of one block of the parameters ([`DataParallel::shard`]): gradients are
/// reduce-scattered, each rank updates its block, and the blocks are
/// all-gathered into every rank's weights — the same weights, with the
/// optimizer's memory divided by the world size.
#[derive(Clone, Copy)]
pub struct DataParallel<'a> {
    pub comm: &'a dyn Communicator,
    pub shard_optimizer: bool,
}

impl std::fmt::Debug for DataParallel<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DataParallel")
            .field("rank", &self.comm.rank())
            .field("world_size", &self.comm.world_size())
            .field("shard_optimizer", &self.shard_optimizer)
            .finish()
    }
}

impl DataParallel<'static> {
    /// One process: the plain optimizer step.
    pub const SINGLE: DataParallel<'static> = DataParallel {
        comm: &SingleProcess,
        shard_optimizer: false,
    };
}

impl DataParallel<'_> {
    pub fn world_size(&self) -> usize {
        self.comm.world_size()
    }

    /// Whether the optimizer state is split across ranks.
    pub fn sharded(&self) -> bool {
        self.shard_optimizer && self.world_size() > 1
    }

    /// The parameters (of `n`) whose AdamW moments this rank keeps and
    /// updates: all of them, or its block when sharded.
    pub fn shard(&self, n: usize) -> Range<usize> {
        if self.sharded() {
            block_range(n, self.world_size(), self.comm.rank())
        } else {
            0..n
        }
    }

    /// This rank's part of a full optimizer state (a fresh one or one read
    /// from a checkpoint); the state itself when not sharded.
    pub fn take_shard(&self, opt: OptimState) -> OptimState {
        let r = self.shard(opt.m.len());
        if r.len() == opt.m.len() {
            return opt;
        }
        OptimState {
            m: opt.m[r.clone()].to_vec(),
            v: opt.v[r].to_vec(),
            step: opt.step,
        }
    }

    /// The whole optimizer state of `n` parameters from every rank's shard
    /// (collective: every rank calls it, every rank gets it).
    pub fn gather_optim(&self, opt: &OptimState, n: usize) -> OptimState {
        if !self.sharded() {
            return opt.clone();
        }
        OptimState {
            m: self.gather(&opt.m, n),
            v: self.gather(&opt.v, n),
            step: opt.step,
        }
    }

    /// `full` ([n]) from every rank's block `local` (its [`Self::shard`]).
    fn gather(&self, local: &[f32], n: usize) -> Vec<f32> {
        let mut full = vec![0.0; n];
        gather_blocks(self.comm, local, &mut full);
        full
    }
}

/// All-gathers the blocks of [`block_range`] into `full`, `local` being this
/// rank's block: equal blocks by all-gather, the last rank's tail by a sum
/// in which the others give zeros.
fn gather_blocks(comm: &dyn Communicator, local: &[f32], full: &mut [f32]) {
    let (n, w, rank) = (full.len(), comm.world_size(), comm.rank());
    let q = n / w;
    comm.all_gather(&local[..q], &mut full[..w * q]);
    if n > w * q {
        let tail = &mut full[w * q..];
        if rank + 1 == w {
            tail.copy_from_slice(&local[q..]);
        } else {
            tail.fill(0.0);
        }
        comm.all_reduce_sum(tail);
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
    /// Seconds spent in collectives (loss, gradients, norm, weights) on a
    /// data-parallel run: waiting for the other ranks included; 0 on one.
    /// The gradient all-reduce runs beside backward, so part of it is hidden.
    pub comm_s: f64,
    /// The part of `comm_s` the step waited for: collectives on the step's
    /// own thread, and the gradient all-reduce left when backward ended.
    pub comm_wait_s: f64,
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
    /// The ranks of a data-parallel run no longer hold the same weights
    /// (checked at every checkpoint; nothing was saved).
    #[error("step {step}: the ranks' weights differ (a rank computed another update); nothing was saved")]
    RanksDiffer { step: u64 },
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
    train_step_parallel(
        model,
        opt,
        cfg,
        batch,
        &mut |b| {
            next_batch(b);
            true
        },
        &DataParallel::SINGLE,
    )
}

/// [`train_step`] on one rank of a data-parallel run: `next_batch` gives
/// this rank's slice of each global micro-batch, and says `false` when the
/// slice is empty (the short last batch of an epoch; the rank then adds
/// nothing to that micro-batch, which needs the model's
/// [`Trainable::loss_counts`]); `opt` holds this rank's
/// [`DataParallel::shard`] of the moments. The stats are the global ones
/// (loss over every rank's tokens, tokens of the global batch).
pub fn train_step_parallel<M: Trainable>(
    model: &mut M,
    opt: &mut OptimState,
    cfg: &OptimConfig,
    batch: &mut M::Batch,
    next_batch: &mut dyn FnMut(&mut M::Batch) -> bool,
    dp: &DataParallel,
) -> Result<StepStats, StepError> {
    let k = cfg.grad_accum.max(1);
    let (comm, world) = (dp.comm, dp.world_size());
    let step = opt.step + 1;
    comm.set_step(step);
    let mut time = CommTime::default();
    // Unsharded: the last micro-batch's backward hands its finished
    // gradients to a thread that all-reduces them while it goes on (else
    // they are all-reduced after it, in the same buckets).
    let overlap = world > 1 && !dp.sharded() && comm.overlap_backward();
    timed(Phase::Copy, || model.zero_grad());
    let (loss, weighted) = accumulate(model, batch, next_batch, k, dp, overlap, &mut time)?;
    let mean = global_mean(loss, weighted, k, comm, &mut time);
    if !mean.is_finite() {
        return Err(StepError::NonFinite {
            what: "loss",
            value: mean,
            step,
        });
    }
    let spans = timed(Phase::Other, || model.decay_spans());
    let tokens = k * model.tokens_per_batch() * world;
    // Unsharded, the update covers the whole buffer: the model's hook packs
    // each updated part of a weight for the next forward (bf16) while it
    // is in cache.
    let (params, grads, hook) = timed(Phase::Other, || {
        if dp.sharded() {
            let (p, g) = model.params_and_grads();
            (p, g, None)
        } else {
            model.params_grads_hooked()
        }
    });
    let n = params.len();
    let shard = dp.shard(n);
    if world > 1 {
        if dp.sharded() {
            time.timed(&mut || reduce_scatter_grads(comm, grads, &shard));
        } else if !overlap {
            time.timed(&mut || {
                for bucket in grads.rchunks_mut(GRAD_BUCKET) {
                    comm.all_reduce_sum(bucket);
                }
            });
        }
        if !weighted {
            timed(Phase::GradNorm, || {
                kernels::scale_inplace(&mut grads[shard.clone()], 1.0 / world as f32)
            });
        }
    }
    let mut grad_norm = 0.0;
    time.timed(&mut || grad_norm = timed(Phase::GradNorm, || norm(dp, grads)));
    if !grad_norm.is_finite() {
        return Err(StepError::NonFinite {
            what: "gradient norm",
            value: grad_norm as f64,
            step,
        });
    }
    // As torch.nn.utils.clip_grad_norm_: scale by max / (norm + 1e-6) when
    // < 1, applied inside the AdamW pass (same bits, one pass fewer).
    let coef = if cfg.grad_clip > 0.0 {
        (cfg.grad_clip / (grad_norm + 1e-6)).min(1.0)
    } else {
        1.0
    };
    let lr = cfg.schedule.lr(opt.step);
    let adamw = AdamW {
        lr,
        beta1: cfg.beta1,
        beta2: cfg.beta2,
        eps: cfg.eps,
        weight_decay: cfg.weight_decay,
    };
    assert_eq!(
        opt.m.len(),
        shard.len(),
        "optimizer state is not this rank's shard"
    );
    if hook.is_some() {
        assert_eq!(shard, 0..n, "a hooked update covers the whole buffer");
    }
    timed(Phase::AdamW, || {
        kernels::adamw_update_scaled(
            &mut params[shard.clone()],
            &grads[shard.clone()],
            coef,
            &mut opt.m,
            &mut opt.v,
            step,
            &adamw,
            &shard_spans(&spans, &shard),
            hook.as_ref(),
        )
    });
    if dp.sharded() {
        let mine = params[shard].to_vec();
        time.timed(&mut || gather_blocks(comm, &mine, params));
    }
    opt.step = step;
    Ok(StepStats {
        step,
        loss: mean,
        lr,
        grad_norm,
        tokens,
        comm_s: time.comm_s + time.beside_s,
        comm_wait_s: time.comm_wait_s + time.beside_wait_s,
    })
}

/// Seconds of one step in collectives.
#[derive(Default)]
struct CommTime {
    /// On the step's own thread (all of it waited for).
    comm_s: f64,
    comm_wait_s: f64,
    /// On the thread all-reducing beside backward, and the part of it
    /// waited for when backward ended.
    beside_s: f64,
    beside_wait_s: f64,
}

impl CommTime {
    /// Runs `f` (a collective on this thread), adding its seconds.
    fn timed(&mut self, f: &mut dyn FnMut()) {
        let t0 = std::time::Instant::now();
        timed(Phase::Comm, f);
        let dt = t0.elapsed().as_secs_f64();
        self.comm_s += dt;
        self.comm_wait_s += dt;
    }
}

/// Forward + backward over the step's `k` micro-batches from `next_batch`
/// (gradients scaled by 1/k; the last one's reduced beside backward when
/// `overlap`). Returns the summed loss of this rank and whether it is
/// weighted by the global batch's counts (the model's `loss_counts`, so the
/// ranks' gradients add up to the global one instead of being averaged).
fn accumulate<M: Trainable>(
    model: &mut M,
    batch: &mut M::Batch,
    next_batch: &mut dyn FnMut(&mut M::Batch) -> bool,
    k: usize,
    dp: &DataParallel,
    overlap: bool,
    time: &mut CommTime,
) -> Result<(LossParts, bool), StepError> {
    let (comm, world) = (dp.comm, dp.world_size());
    let mut loss = LossParts::default();
    let mut weighted = false;
    for i in 0..k {
        let rows = next_batch(batch);
        let mut counts = if world > 1 {
            model.loss_counts(batch)
        } else {
            Vec::new()
        };
        if counts.is_empty() {
            if !rows {
                return Err(crate::Error::InvalidInput(
                    "a rank has no rows of a micro-batch, and the model's loss cannot be weighted \
                     by its labels (no loss_counts): give every rank rows"
                        .into(),
                )
                .into());
            }
        } else {
            weighted = true;
            if !rows {
                counts.fill(0.0);
            }
            time.timed(&mut || comm.all_reduce_sum_f64(&mut counts));
        }
        let counts = (!counts.is_empty()).then_some(&counts[..]);
        let scale = 1.0 / k as f32;
        if overlap && i + 1 == k {
            let (part, busy, wait) = reduced_backward(model, batch, scale, counts, rows, comm)?;
            loss.add(part);
            time.beside_s += busy;
            time.beside_wait_s += wait;
        } else if rows {
            loss.add(match counts {
                Some(c) => model.forward_backward_over(batch, scale, c)?,
                None => model.forward_backward(batch, scale)?,
            });
        }
    }
    Ok((loss, weighted))
}

/// The step's mean loss over every rank's tokens (each rank then sees the
/// same loss, so all skip a NaN step alike).
fn global_mean(
    loss: LossParts,
    weighted: bool,
    k: usize,
    comm: &dyn Communicator,
    time: &mut CommTime,
) -> f64 {
    if comm.world_size() > 1 {
        let mut l = [loss.sum, loss.count as f64];
        time.timed(&mut || comm.all_reduce_sum_f64(&mut l));
        if weighted {
            // The ranks' shares of each micro-batch's loss, over k micro-batches.
            l[0] / k as f64
        } else {
            LossParts {
                sum: l[0],
                count: l[1] as usize,
            }
            .mean()
        }
    } else {
        loss.mean()
    }
}

/// The last micro-batch's forward + backward (when this rank has `rows`)
/// with the gradients all-reduced on a second thread as backward finishes
/// them. Returns the loss part, the seconds that thread spent in
/// collectives, and the seconds this one then waited for it.
fn reduced_backward<M: Trainable>(
    model: &mut M,
    batch: &M::Batch,
    scale: f32,
    counts: Option<&[f64]>,
    rows: bool,
    comm: &dyn Communicator,
) -> crate::Result<(LossParts, f64, f64)> {
    let n = model.grads().len();
    std::thread::scope(|s| {
        let (tx, rx) = std::sync::mpsc::channel::<&mut [f32]>();
        let reducer = s.spawn(move || {
            let mut r = BucketReducer::new(n, GRAD_BUCKET, comm);
            for piece in rx {
                r.push(piece);
            }
            r.busy_s
        });
        let loss = if rows {
            model.forward_backward_streamed(batch, scale, counts, &mut |piece| {
                // The reducer only stops early by panicking, which join() re-raises.
                let _ = tx.send(piece);
            })
        } else {
            // Nothing to add; the other ranks' sums still need this one.
            let _ = tx.send(model.params_and_grads().1);
            Ok(LossParts::default())
        };
        drop(tx);
        let t0 = std::time::Instant::now();
        let busy =
            timed(Phase::Comm, || reducer.join()).unwrap_or_else(|e| std::panic::resume_unwind(e));
        // Waiting longer than the collectives took is scheduling, not them.
        let wait = t0.elapsed().as_secs_f64().min(busy);
        Ok((loss?, busy, wait))
    })
}

/// All-reduces a gradient buffer of `n` floats in fixed buckets of
/// `bucket` floats ([`GRAD_BUCKET`]) from the end down, each as soon as the pieces that
/// cover it have arrived (pieces come from the end down): every rank calls
/// the same collectives, however its backward cut the buffer.
struct BucketReducer<'g, 'c> {
    comm: &'c dyn Communicator,
    /// Pieces not yet wholly reduced, with their offsets, highest first.
    pieces: Vec<(usize, &'g mut [f32])>,
    /// Offset where the received pieces begin.
    low: usize,
    /// End of the next bucket to reduce.
    next: usize,
    bucket: usize,
    scratch: Vec<f32>,
    busy_s: f64,
}

impl<'g, 'c> BucketReducer<'g, 'c> {
    fn new(n: usize, bucket: usize, comm: &'c dyn Communicator) -> Self {
        BucketReducer {
            comm,
            pieces: Vec::new(),
            low: n,
            next: n,
            bucket: bucket.max(1),
            scratch: Vec::new(),
            busy_s: 0.0,
        }
    }

    fn push(&mut self, piece: &'g mut [f32]) {
        assert!(
            piece.len() <= self.low,
            "gradient pieces overrun the buffer"
        );
        self.low -= piece.len();
        self.pieces.push((self.low, piece));
        // Bucket `[start, next)`: the last one is short (rchunks' order).
        while self.next > 0 {
            let start = self.next.saturating_sub(self.bucket);
            if start < self.low {
                break;
            }
            self.reduce(start, self.next);
            self.next = start;
            self.pieces.retain(|(at, _)| *at < start);
        }
    }

    /// All-reduces `[start, end)`: in place when one piece holds it, else
    /// through `scratch`.
    fn reduce(&mut self, start: usize, end: usize) {
        let t0 = std::time::Instant::now();
        let whole = self
            .pieces
            .iter_mut()
            .find(|(at, p)| *at <= start && end <= *at + p.len());
        if let Some((at, p)) = whole {
            self.comm.all_reduce_sum(&mut p[start - *at..end - *at]);
        } else {
            self.scratch.clear();
            self.scratch.resize(end - start, 0.0);
            for (at, p) in &self.pieces {
                let (a, b) = (start.max(*at), end.min(*at + p.len()));
                if a < b {
                    self.scratch[a - start..b - start].copy_from_slice(&p[a - at..b - at]);
                }
            }
            self.comm.all_reduce_sum(&mut self.scratch);
            for (at, p) in &mut self.pieces {
                let (a, b) = (start.max(*at), end.min(*at + p.len()));
                if a < b {
                    p[a - *at..b - *at].copy_from_slice(&self.scratch[a - start..b - start]);
                }
            }
        }
        self.busy_s += t0.elapsed().as_secs_f64();
    }
}

/// The gradients of this rank's block, summed over ranks, into
/// `grads[shard]` (the rest of `grads` is left as it was: local sums).
fn reduce_scatter_grads(comm: &dyn Communicator, grads: &mut [f32], shard: &Range<usize>) {
    let (n, w) = (grads.len(), comm.world_size());
    let q = n / w;
    let mut mine = vec![0.0; q];
    comm.reduce_scatter_sum(&grads[..w * q], &mut mine);
    grads[shard.start..shard.start + q].copy_from_slice(&mine);
    if n > w * q {
        // The tail past the equal blocks belongs to the last rank.
        comm.all_reduce_sum(&mut grads[w * q..]);
    }
}

/// The global gradient norm, summed over the blocks of [`block_range`] in
/// rank order whether or not the optimizer is sharded, so both give the
/// same bits (one process: [`kernels::global_norm`]).
fn norm(dp: &DataParallel, grads: &[f32]) -> f32 {
    let world = dp.world_size();
    let mut blocks: Vec<f64> = (0..world)
        .map(|i| {
            if dp.sharded() && i != dp.comm.rank() {
                0.0
            } else {
                kernels::sum_squares(&grads[block_range(grads.len(), world, i)])
            }
        })
        .collect();
    if dp.sharded() {
        dp.comm.all_reduce_sum_f64(&mut blocks);
    }
    blocks.iter().sum::<f64>().sqrt() as f32
}

/// The weight-decay spans of `spans` (over the whole buffer) inside
/// `shard`, relative to its start.
fn shard_spans(spans: &[(Range<usize>, bool)], shard: &Range<usize>) -> Vec<(Range<usize>, bool)> {
    spans
        .iter()
        .filter_map(|(r, decay)| {
            let (a, b) = (r.start.max(shard.start), r.end.min(shard.end));
            (a < b).then(|| (a - shard.start..b - shard.start, *decay))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::util::comm::ThreadGroup;

    /// Ranks whose backward cut the buffer differently (one piece; pieces
    /// inside a bucket and across bucket ends) call the same collectives
    /// and all get the sums.
    #[test]
    fn bucket_reducer_sums_whatever_the_pieces() {
        let n = 23;
        let cuts: [&[usize]; 3] = [&[], &[20, 13, 5, 4], &[22, 1]];
        let out: Vec<Vec<f32>> = std::thread::scope(|s| {
            let handles: Vec<_> = ThreadGroup::new(3)
                .into_iter()
                .zip(cuts)
                .map(|(c, cut)| {
                    s.spawn(move || {
                        let r = c.rank() as f32;
                        let mut g: Vec<f32> = (0..n).map(|i| i as f32 + 100.0 * r).collect();
                        let mut red = BucketReducer::new(n, 4, &c);
                        let mut rest = &mut g[..];
                        for &at in cut {
                            let (lo, hi) = rest.split_at_mut(at);
                            red.push(hi);
                            rest = lo;
                        }
                        red.push(rest);
                        assert_eq!(red.next, 0, "every bucket reduced");
                        drop(red);
                        g
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for g in out {
            for (i, &x) in g.iter().enumerate() {
                assert_eq!(x, 3.0 * i as f32 + 300.0, "element {i}");
            }
        }
    }
}
