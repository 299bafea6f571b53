//! The Runner: the loop every step-based training run shares, over any
//! [`Trainable`] model — optimizer steps (micro-batches, accumulation,
//! clipping, schedule: [`train_step_parallel`]), metric rows, periodic evaluation,
//! atomic checkpoints with the exact data position (so a resume is
//! bit-exact), a stop request (Ctrl-C) or a step budget that saves first,
//! a clear error naming the last good checkpoint when the loss diverges,
//! and the final model.
//!
//! What to train on and how to score it comes from a [`RunTask`] (a recipe).
//!
//! Data-parallel ([`DataParallel`] over several ranks): every rank runs the
//! loop in lockstep on its slice of each batch (the task's `next_batch`),
//! evaluates, and decides to stop together (a stop request on any rank
//! stops all); rank 0 alone writes metrics, samples, checkpoints and the
//! final model. At every checkpoint the ranks check that their weights are
//! still bit-identical.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use serde_json::{json, Map, Value};

use super::metrics::MetricsWriter;
use super::step::{train_step_parallel, DataParallel, StepError, StepStats};
use crate::checkpoint::state::{
    latest_checkpoint, save_checkpoint, DataPosition, OptimState, StateError, TrainState,
};
use crate::models::Trainable;
use crate::spec::optim::OptimConfig;
use crate::util::profile::{self, Phase, PhaseTimes, StepProfile, StepProfiler};

/// A metrics row.
pub type Row = Map<String, Value>;

/// Writes a model's files (HF layout + tokenizer) into a folder.
pub type ModelWriteError = Box<dyn std::error::Error + Send + Sync>;

/// The recipe's part of a run.
pub trait RunTask<M: Trainable> {
    /// The recipe's error; the runner's own errors convert into it.
    type Error: From<StepError> + From<StateError> + From<crate::Error>;

    /// Fills `batch` with the next micro-batch and advances the data position.
    fn next_batch(&mut self, batch: &mut M::Batch) -> Result<(), Self::Error>;
    /// Whether the batch just drawn holds rows for this rank: a data-parallel
    /// task whose last global batch of an epoch does not reach every rank
    /// says `false` there (and leaves `batch` as it was).
    fn has_rows(&self) -> bool {
        true
    }
    /// Where the data stands after the batches drawn so far (saved in checkpoints).
    fn position(&self) -> DataPosition;
    /// Adds recipe-specific fields to the row of the step just taken (e.g.
    /// per-head losses), which took `seconds`; called after every step, the
    /// row written every `log_every`.
    fn step_row(&mut self, _model: &mut M, _stats: &StepStats, _seconds: f64, _row: &mut Row) {}
    /// A validation row (`val_loss`, ...; the runner adds `step`), or `None`
    /// when there is nothing to validate on.
    fn evaluate(&mut self, model: &mut M) -> Result<Option<Row>, Self::Error>;
    /// Called after every step with the trainer state (whose RNG it may
    /// draw from): a text to show (e.g. a generated sample), if any.
    fn after_step(&mut self, _model: &mut M, _state: &mut TrainState) -> Option<String> {
        None
    }
    /// Writes the model's files into `dir` (a checkpoint or the final model).
    fn write_model(&self, model: &M, dir: &Path) -> Result<(), ModelWriteError>;
}

/// When the runner logs, evaluates, saves and stops.
#[derive(Debug, Clone, PartialEq)]
pub struct RunConfig {
    pub max_steps: u64,
    /// A metrics row every N steps (and at the last).
    pub log_every: u64,
    /// Validation every N steps, 0 = only before the first and after the last.
    pub eval_every: u64,
    /// A checkpoint every N steps, 0 = only at the end (and when stopped).
    pub save_every: u64,
    /// Checkpoints kept (≥ 1).
    pub keep: usize,
    /// Stop (with a checkpoint) after this many steps of this invocation.
    pub stop_after: Option<u64>,
    /// `OUTPUT/checkpoints`.
    /// `None`: no checkpoints (a stop request then just ends the run).
    pub checkpoint_dir: Option<PathBuf>,
    /// Where the final model goes once `max_steps` is reached.
    /// `None`: the recipe writes the final model itself.
    pub final_dir: Option<PathBuf>,
    /// Validate before the first step of a fresh run.
    pub eval_at_start: bool,
    /// Time each step's phases ([`profile`]): `phase_ms` in the metrics
    /// rows, the mean step in [`RunSummary::profile`].
    pub profile: bool,
}

/// Progress reports.
#[derive(Debug)]
pub enum RunEvent<'a> {
    /// Every step; `row` on the steps that write one (`log_every`).
    Step {
        stats: &'a StepStats,
        seconds: f64,
        row: Option<&'a Row>,
    },
    Eval {
        row: &'a Row,
    },
    /// A text from [`RunTask::after_step`].
    Text {
        step: u64,
        text: &'a str,
    },
    Saved {
        path: &'a Path,
    },
    Note(String),
}

/// A stop request, polled after every step (the CLI's Ctrl-C): when it
/// answers true the run finishes the step, saves a checkpoint and returns
/// with `interrupted` set. None by default.
#[derive(Clone, Default)]
pub struct StopRequest(Option<Arc<dyn Fn() -> bool + Send + Sync>>);

impl StopRequest {
    pub fn new(poll: impl Fn() -> bool + Send + Sync + 'static) -> Self {
        StopRequest(Some(Arc::new(poll)))
    }

    /// Whether a stop was asked for.
    pub fn requested(&self) -> bool {
        self.0.as_ref().is_some_and(|f| f())
    }
}

impl std::fmt::Debug for StopRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self.0 {
            Some(_) => "StopRequest(set)",
            None => "StopRequest(none)",
        })
    }
}

/// The same poll (or none on both sides).
impl PartialEq for StopRequest {
    fn eq(&self, other: &Self) -> bool {
        match (&self.0, &other.0) {
            (None, None) => true,
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

/// The outcome of a run (serialized as Python's `lmkit.pretrain` returns it).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct RunSummary {
    pub steps: u64,
    pub final_loss: Option<f64>,
    pub first_val_loss: Option<f64>,
    pub last_val_loss: Option<f64>,
    /// The last checkpoint written by this run.
    pub checkpoint: Option<PathBuf>,
    /// Stopped early (a [`StopRequest`] or `stop_after`); continue with a resume.
    pub interrupted: bool,
    /// With [`RunConfig::profile`]: the mean step of this invocation, phase
    /// by phase (its first step left out when there are others).
    pub profile: Option<StepProfile>,
}

/// A model, its optimizer state and trainer state, trained by a [`RunTask`].
pub struct Runner<'a, M: Trainable> {
    pub model: &'a mut M,
    pub opt: &'a mut OptimState,
    pub state: &'a mut TrainState,
    pub optim: &'a OptimConfig,
    /// `None` on the ranks other than 0 (which write no files).
    pub metrics: Option<&'a mut MetricsWriter>,
    pub config: &'a RunConfig,
    /// The ranks sharing each step ([`DataParallel::SINGLE`]: one process).
    /// With a sharded optimizer, `opt` may come whole (fresh or from a
    /// checkpoint) and is cut to this rank's shard.
    pub parallel: DataParallel<'a>,
}

impl<M: Trainable> Runner<'_, M> {
    /// Trains from `state.step` to `max_steps` (or until stopped).
    /// `stop` is polled after every step.
    pub fn run<T: RunTask<M>>(
        mut self,
        task: &mut T,
        batch: &mut M::Batch,
        on_event: &mut dyn FnMut(RunEvent),
        stop: &StopRequest,
    ) -> Result<RunSummary, T::Error> {
        // Denormals would take the gemms' slow path (see `util::fpenv`).
        let _flush = crate::util::fpenv::FlushDenormals::new();
        let cfg = self.config;
        let comm = self.parallel.comm;
        let root = comm.is_root();
        let num_params = self.model.params().len();
        if self.opt.m.len() == num_params {
            *self.opt = self
                .parallel
                .take_shard(std::mem::replace(self.opt, OptimState::new(0)));
        }
        // Every rank starts from the same weights (same seed or checkpoint).
        check_in_sync(&self.parallel, self.model.params(), self.state.step)?;
        let mut summary = RunSummary {
            steps: self.state.step,
            ..Default::default()
        };
        if self.state.step == 0 && cfg.eval_at_start {
            evaluate(
                task,
                self.model,
                0,
                self.metrics.as_deref_mut(),
                &mut summary,
                on_event,
            )?;
        }
        let run_start = Instant::now();
        let elapsed0 = self.state.elapsed_s;
        let mut steps_this_run = 0u64;
        let _profiling = cfg.profile.then(profile::Enable::new);
        let mut profiler = StepProfiler::default();
        while self.state.step < cfg.max_steps {
            let (stats, dt, phases) = self.step(task, batch)?;
            if let Some(t) = &phases {
                profiler.add(dt, t);
                summary.profile = profiler.report();
            }
            let state = &mut *self.state;
            state.step = stats.step;
            state.data = task.position();
            state.tokens_seen += stats.tokens as u64;
            state.elapsed_s = elapsed0 + run_start.elapsed().as_secs_f64();
            steps_this_run += 1;
            summary.steps = state.step;
            summary.final_loss = Some(stats.loss);
            let last = state.step == cfg.max_steps;
            self.log_step(task, &stats, dt, phases.as_ref(), last, on_event)?;
            if cfg.eval_every > 0 && self.state.step.is_multiple_of(cfg.eval_every) || last {
                evaluate(
                    task,
                    self.model,
                    self.state.step,
                    self.metrics.as_deref_mut(),
                    &mut summary,
                    on_event,
                )?;
            }
            // Samples (and the trainer RNG draws behind them) on rank 0
            // only: its state is the one checkpoints keep.
            if root {
                if let Some(text) = task.after_step(self.model, self.state) {
                    on_event(RunEvent::Text {
                        step: self.state.step,
                        text: &text,
                    });
                }
            }
            let interrupted = comm.any(stop.requested());
            let stop_after = cfg.stop_after.is_some_and(|n| steps_this_run >= n);
            let periodic = cfg.save_every > 0 && self.state.step.is_multiple_of(cfg.save_every);
            if periodic || last || interrupted || stop_after {
                self.save(task, num_params, &mut summary, on_event)?;
            }
            if interrupted || stop_after {
                summary.interrupted = true;
                return Ok(summary);
            }
        }
        // The final model, loadable straight from its folder.
        if let Some(dir) = cfg.final_dir.as_ref().filter(|_| root) {
            task.write_model(self.model, dir)
                .map_err(|e| StateError::Model {
                    path: dir.clone(),
                    message: e.to_string(),
                })?;
        }
        // No rank reports the run done before the model is written.
        comm.barrier();
        Ok(summary)
    }

    /// One optimizer step over the task's next batches: its stats, the
    /// seconds it took and, when profiling, its phases. A non-finite loss or
    /// gradient norm becomes [`StepError::Diverged`], naming the last
    /// checkpoint.
    fn step<T: RunTask<M>>(
        &mut self,
        task: &mut T,
        batch: &mut M::Batch,
    ) -> Result<(StepStats, f64, Option<PhaseTimes>), T::Error> {
        if self.config.profile {
            // Evaluation and checkpoints since the last step are not its time.
            let _ = profile::take();
        }
        let t0 = Instant::now();
        let mut data_err = None;
        let stepped = train_step_parallel(
            self.model,
            self.opt,
            self.optim,
            batch,
            &mut |b| {
                if data_err.is_none() {
                    if let Err(e) = profile::timed(Phase::Data, || task.next_batch(b)) {
                        data_err = Some(e);
                    }
                }
                data_err.is_none() && task.has_rows()
            },
            &self.parallel,
        );
        if let Some(e) = data_err {
            return Err(e);
        }
        let stats: StepStats = match stepped {
            Ok(s) => s,
            Err(StepError::NonFinite { what, value, step }) => {
                let last = match &self.config.checkpoint_dir {
                    Some(d) => latest_checkpoint(d)?,
                    None => None,
                };
                return Err(StepError::Diverged {
                    what,
                    value,
                    step,
                    last_checkpoint: last,
                }
                .into());
            }
            Err(e) => return Err(e.into()),
        };
        let dt = t0.elapsed().as_secs_f64();
        let phases = self.config.profile.then(profile::take);
        Ok((stats, dt, phases))
    }

    /// The row of the step just taken (the task's fields, and the runner's
    /// on the steps that log: every `log_every` and the `last`), written to
    /// metrics.jsonl, and the [`RunEvent::Step`] report.
    fn log_step<T: RunTask<M>>(
        &mut self,
        task: &mut T,
        stats: &StepStats,
        dt: f64,
        phases: Option<&PhaseTimes>,
        last: bool,
        on_event: &mut dyn FnMut(RunEvent),
    ) -> Result<(), T::Error> {
        let state = &*self.state;
        let mut row = Row::new();
        task.step_row(self.model, stats, dt, &mut row);
        let logged = state.step.is_multiple_of(self.config.log_every.max(1)) || last;
        if logged {
            for (k, v) in [
                ("step", json!(stats.step)),
                ("loss", json!(stats.loss)),
                ("lr", json!(stats.lr)),
                ("grad_norm", json!(stats.grad_norm)),
                ("tokens_per_s", json!(stats.tokens as f64 / dt.max(1e-9))),
                ("tokens", json!(state.tokens_seen)),
                ("elapsed_s", json!(state.elapsed_s)),
            ] {
                row.insert(k.into(), v);
            }
            if self.parallel.comm.world_size() > 1 {
                row.insert("comm_s".into(), json!(stats.comm_s));
                row.insert("comm_wait_s".into(), json!(stats.comm_wait_s));
            }
            if let Some(t) = phases {
                let ms: Map<String, Value> = Phase::ALL
                    .iter()
                    .map(|&p| (p.name().to_string(), json!(t.get(p) * 1e3)))
                    .collect();
                row.insert("phase_ms".into(), Value::Object(ms));
                row.insert("step_ms".into(), json!(dt * 1e3));
            }
            if let Some(m) = self.metrics.as_deref_mut() {
                write_row(m, &row)?;
            }
        }
        on_event(RunEvent::Step {
            stats,
            seconds: dt,
            row: logged.then_some(&row),
        });
        Ok(())
    }

    /// A checkpoint of the step just taken, when the run keeps checkpoints:
    /// the ranks' weights checked in sync, a sharded optimizer state gathered,
    /// and rank 0 writing it (the previous one kept intact on failure).
    fn save<T: RunTask<M>>(
        &mut self,
        task: &mut T,
        num_params: usize,
        summary: &mut RunSummary,
        on_event: &mut dyn FnMut(RunEvent),
    ) -> Result<(), T::Error> {
        let Some(dir_root) = self.config.checkpoint_dir.as_ref() else {
            return Ok(());
        };
        let dp = &self.parallel;
        check_in_sync(dp, self.model.params(), self.state.step)?;
        let full = dp.sharded().then(|| dp.gather_optim(self.opt, num_params));
        if dp.comm.is_root() {
            let model = &*self.model;
            let mut w = |dir: &Path| task.write_model(model, dir);
            let saved = full.as_ref().unwrap_or(self.opt);
            let dir = save_checkpoint(dir_root, self.state, saved, &mut w, self.config.keep)
                .map_err(|e| StateError::Invalid {
                    path: dir_root.clone(),
                    message: format!(
                        "saving a checkpoint (the previous checkpoint is intact): {e}"
                    ),
                })?;
            on_event(RunEvent::Saved { path: &dir });
            summary.checkpoint = Some(dir);
        }
        Ok(())
    }
}

fn write_row(metrics: &mut MetricsWriter, row: &Row) -> Result<(), crate::Error> {
    metrics
        .write(row)
        .map_err(|e| crate::Error::io(metrics.path(), e))
}

/// Checks that every rank holds the same weights (bit for bit): a hash of
/// rank 0's parameters against each rank's own.
fn check_in_sync(dp: &DataParallel, params: &[f32], step: u64) -> Result<(), StepError> {
    let comm = dp.comm;
    if comm.world_size() == 1 {
        return Ok(());
    }
    let mine = params_hash(params).to_le_bytes();
    let mut root = mine;
    comm.broadcast(&mut root, 0);
    if comm.any(root != mine) {
        return Err(StepError::RanksDiffer { step });
    }
    Ok(())
}

/// FNV-1a over the parameters' bits.
fn params_hash(params: &[f32]) -> u64 {
    params.iter().fold(0xcbf2_9ce4_8422_2325, |h, x| {
        (h ^ u64::from(x.to_bits())).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Validation: a row to metrics.jsonl (rank 0) and the caller, the summary updated.
fn evaluate<M: Trainable, T: RunTask<M>>(
    task: &mut T,
    model: &mut M,
    step: u64,
    metrics: Option<&mut MetricsWriter>,
    summary: &mut RunSummary,
    on_event: &mut dyn FnMut(RunEvent),
) -> Result<(), T::Error> {
    if let Some(mut row) = task.evaluate(model)? {
        row.insert("step".into(), json!(step));
        if let Some(m) = metrics {
            write_row(m, &row)?;
        }
        if let Some(v) = row.get("val_loss").and_then(Value::as_f64) {
            summary.first_val_loss.get_or_insert(v);
            summary.last_val_loss = Some(v);
        }
        on_event(RunEvent::Eval { row: &row });
    }
    Ok(())
}
