//! Fine-tuning: one generic loop over a task of the `tasks` layer
//! ([`TaskKind`]: classification and multiple choice for both families,
//! regression, token classification and SQuAD span QA for BERT, causal LM
//! for GPT-2). The task reads its data, prepares the model with its head
//! (a bare `BertModel` such as all-MiniLM-L6-v2 gets new heads initialised
//! as HF does), fills batches, evaluates and saves; this module runs it.
//!
//! The loop is the `train` engine's [`train_step`](crate::train::train_step) (AdamW with decoupled
//! weight decay on the layout's decay flags, global-norm clipping, linear
//! warmup then linear decay to 0 like HF's `get_linear_schedule_with_warmup`).
//! Each epoch visits the training items in a permutation drawn from
//! `(seed, epoch)`, `batch_size` at a time (the last batch may be smaller),
//! each batch padded to its longest example. Dropout is off. After every
//! epoch the eval file, if any, is scored by the task's evaluation (the one
//! `lmkit eval` runs) and a row of its metrics, prefixed `eval_`, goes to
//! `OUTPUT/metrics.jsonl`; at the end OUTPUT holds the task's HF checkpoint
//! and the tokenizer.
//!
//! Checkpoints as in pretraining: `OUTPUT/checkpoints/step-N/` (the HF model
//! and tokenizer, AdamW moments, trainer state with the epoch and cursor in
//! its permutation), at the end of every epoch or every `save_every` steps,
//! the newest `keep` kept. `resume` continues the newest one exactly (the
//! same losses, bit for bit, as a run never stopped) after checking that it
//! is this command's run; a [`StopRequest`] (the CLI's Ctrl-C) ends the run
//! after the current step with a checkpoint.
//!
//! Shape legend: B batch, T sequence.

use crate::util::comm::{Communicator, SingleProcess};
use std::path::{Path, PathBuf};

use serde_json::{json, Map, Value};

use crate::spec::Precision;
pub use crate::tasks::{
    load_bert_as, qa_train_features, FinetuneOptions, QaFeature, StopRequest, TaskKind,
};
use crate::tasks::{EvalFn, FillFn, Metrics, PrepareCx, Prepared, SaveFn, Session};
use crate::train::runner::ModelWriteError;

/// The task kind fine-tuning takes (the [`TaskKind`] of the `tasks` registry).
pub type FinetuneTask = TaskKind;

use super::{io, RecipeError, Result};
use crate::train::runner::Row;
use crate::train::{
    list_checkpoints, DataParallel, DataPosition, LrSchedule, MetricsWriter, OptimConfig,
    OptimState, RunConfig, RunEvent, RunTask, Runner, ScheduleKind, StepStats, TrainState,
    Trainable,
};
use crate::util::profile::StepProfile;
use crate::util::rng::Rng;

mod job;
use job::{resume_from, Job};

/// Progress reports to the caller (the CLI draws bars from them).
#[derive(Debug)]
pub enum FinetuneEvent<'a> {
    Start {
        description: String,
        train_examples: usize,
        eval_examples: usize,
        total_steps: u64,
        /// Steps already done (a resumed run), else 0.
        start_step: u64,
    },
    Step {
        epoch: usize,
        stats: &'a StepStats,
        examples_per_s: f64,
    },
    Eval {
        epoch: usize,
        row: &'a Map<String, Value>,
    },
    /// A checkpoint was written.
    Saved {
        path: &'a Path,
    },
    Note(String),
}

impl FinetuneEvent<'_> {
    /// The lines a front end prints for the event (none for a step, which
    /// a progress bar shows with [`Self::step_text`]).
    pub fn lines(&self) -> Vec<String> {
        match self {
            FinetuneEvent::Start {
                description,
                train_examples,
                eval_examples,
                total_steps,
                start_step,
            } => {
                let mut v = vec![format!(
                    "{description}; {train_examples} training / {eval_examples} eval items, {total_steps} steps"
                )];
                if *start_step > 0 {
                    v.push(format!("resuming at step {start_step}"));
                }
                v
            }
            FinetuneEvent::Step { .. } => vec![],
            FinetuneEvent::Eval { epoch, row } => {
                let shown: Vec<String> = row
                    .iter()
                    .filter(|(k, _)| !matches!(k.as_str(), "step" | "epoch"))
                    .map(|(k, v)| match v.as_f64() {
                        Some(x) if v.is_f64() => format!("{k} {x:.4}"),
                        _ => format!("{k} {v}"),
                    })
                    .collect();
                vec![format!("epoch {}: {}", epoch + 1, shown.join(", "))]
            }
            FinetuneEvent::Saved { path } => vec![format!("saved {}", path.display())],
            FinetuneEvent::Note(n) => vec![n.clone()],
        }
    }

    /// A step's progress: `epoch E | loss L | lr X | N ex/s` (None for
    /// other events).
    pub fn step_text(&self) -> Option<String> {
        let FinetuneEvent::Step {
            epoch,
            stats,
            examples_per_s,
        } = self
        else {
            return None;
        };
        Some(format!(
            "epoch {} | loss {:.4} | lr {:.2e} | {examples_per_s:.1} ex/s",
            epoch + 1,
            stats.loss,
            stats.lr
        ))
    }

    /// The event as a JSON object (`"event"`: start, step, eval, saved or
    /// note), as Python's callbacks receive it.
    pub fn to_json(&self) -> Value {
        match self {
            FinetuneEvent::Start {
                description,
                train_examples,
                eval_examples,
                total_steps,
                start_step,
            } => {
                json!({"event": "start", "description": description, "train_examples": train_examples,
                        "eval_examples": eval_examples, "total_steps": total_steps, "start_step": start_step})
            }
            FinetuneEvent::Step {
                epoch,
                stats,
                examples_per_s,
            } => json!({"event": "step", "epoch": epoch, "step": stats.step, "loss": stats.loss,
                        "lr": stats.lr, "examples_per_s": examples_per_s}),
            FinetuneEvent::Eval { epoch, row } => {
                json!({"event": "eval", "epoch": epoch, "row": row})
            }
            FinetuneEvent::Saved { path } => json!({"event": "saved", "path": path}),
            FinetuneEvent::Note(n) => json!({"event": "note", "message": n}),
        }
    }
}

/// The outcome of a run.
#[derive(Debug, Clone, PartialEq)]
pub struct FinetuneSummary {
    pub steps: u64,
    pub epochs_done: usize,
    pub train_examples: usize,
    /// Examples and tokens (padded batch positions) per second of training
    /// (optimizer steps only: evaluation and saving excluded).
    pub examples_per_s: f64,
    pub tokens_per_s: f64,
    pub train_seconds: f64,
    pub final_loss: Option<f64>,
    /// The last evaluation row (`eval_accuracy`/`eval_f1`, `exact_match`/`f1`, `eval_loss`/`eval_ppl`).
    pub last_eval: Option<Map<String, Value>>,
    pub output: PathBuf,
    /// Stopped by the [`StopRequest`] before `max_steps`: continue with `resume`.
    pub interrupted: bool,
    /// The newest checkpoint this run wrote.
    pub checkpoint: Option<PathBuf>,
    /// The mean step phase by phase, with `profile` on.
    pub profile: Option<StepProfile>,
}

impl FinetuneSummary {
    /// The summary as the CLI's `--json` prints it and Python returns it.
    pub fn to_json(&self) -> Value {
        json!({
            "steps": self.steps,
            "epochs": self.epochs_done,
            "train_examples": self.train_examples,
            "examples_per_s": self.examples_per_s,
            "tokens_per_s": self.tokens_per_s,
            "train_seconds": self.train_seconds,
            "final_loss": self.final_loss,
            "eval": self.last_eval,
            "output": self.output,
            "interrupted": self.interrupted,
            "checkpoint": self.checkpoint,
            "profile": self.profile,
        })
    }
}

/// Fine-tunes `model_dir` for `task`: the one entry point of every task
/// (the CLI's `finetune` and Python's `lmkit.finetune` call it).
pub fn finetune(
    task: TaskKind,
    model_dir: &Path,
    train: &Path,
    eval: Option<&Path>,
    output: &Path,
    opts: &FinetuneOptions,
    on_event: &mut dyn FnMut(FinetuneEvent),
) -> Result<FinetuneSummary> {
    finetune_on(
        task,
        model_dir,
        train,
        eval,
        output,
        opts,
        &SingleProcess,
        on_event,
    )
}

/// [`finetune`] as one rank of a data-parallel job over `comm` (every rank
/// calls it with the same arguments): `batch_size` is per rank, each rank
/// trains on its share of every global batch of `batch_size` × ranks
/// examples (the epoch's order is one process's), every loss term is a mean
/// over the global batch ([`crate::models::Trainable::loss_counts`]), so the
/// steps are one process's with the global batch. Every rank evaluates the
/// whole evaluation set (the same weights give the same scores); rank 0
/// alone writes the output folder. A checkpoint resumes on any number of
/// ranks that keeps the global batch.
#[allow(clippy::too_many_arguments)]
pub fn finetune_on(
    task: TaskKind,
    model_dir: &Path,
    train: &Path,
    eval: Option<&Path>,
    output: &Path,
    opts: &FinetuneOptions,
    comm: &dyn Communicator,
    on_event: &mut dyn FnMut(FinetuneEvent),
) -> Result<FinetuneSummary> {
    let job = Job::start(task, model_dir, train, eval, output, opts, comm)?;
    let cx = PrepareCx {
        model_dir,
        config: task.model_config(model_dir)?,
        train,
        eval,
        opts,
    };
    // One generic loop; the arms differ only in the model's type.
    match task.task().prepare(&cx)? {
        Prepared::Bert(s) => run_loop(s, opts, job, on_event),
        Prepared::Gpt2Head(s) => run_loop(s, opts, job, on_event),
        Prepared::Gpt2(s) => run_loop(s, opts, job, on_event),
    }
}

fn linear_schedule(opts: &FinetuneOptions, total_steps: u64) -> OptimConfig {
    let warmup = (opts.warmup_ratio * total_steps as f64).ceil() as u64;
    OptimConfig {
        schedule: LrSchedule {
            kind: ScheduleKind::Linear,
            max_lr: opts.lr,
            min_lr: 0.0,
            warmup_steps: warmup,
            total_steps,
        },
        beta1: opts.beta1,
        beta2: opts.beta2,
        eps: opts.eps,
        weight_decay: opts.weight_decay,
        grad_clip: opts.grad_clip,
        grad_accum: 1,
    }
}

/// Fine-tuning's part of a [`Runner`] run: epochs of a fresh permutation of
/// the examples drawn from `(seed, epoch)`, `b` (the global batch) at a time
/// (the last batch of an epoch may be smaller), evaluation after every
/// epoch. Rank `rank` of a data-parallel run takes `rank_b` examples of
/// each batch, from `rank × rank_b` on (none of a short last batch that
/// ends before).
struct EpochTask<M: Trainable> {
    n: usize,
    b: usize,
    rank_b: usize,
    rank: usize,
    /// Whether this rank got examples of the batch just drawn.
    rows: bool,
    seed: u64,
    per_epoch: u64,
    epoch: u64,
    cursor: usize,
    order: Vec<usize>,
    fill: FillFn<M>,
    evaluate: EvalFn<M>,
    save: SaveFn<M>,
    /// Examples of the batch just drawn.
    last_batch: usize,
    examples: usize,
    tokens: usize,
    train_s: f64,
    last_eval: Option<Map<String, Value>>,
}

impl<M: Trainable> EpochTask<M> {
    fn order(n: usize, seed: u64, epoch: u64) -> Vec<usize> {
        let mut order: Vec<usize> = (0..n).collect();
        Rng::derive(seed, epoch).shuffle(&mut order);
        order
    }
}

impl<M: Trainable> RunTask<M> for EpochTask<M> {
    type Error = RecipeError;

    fn next_batch(&mut self, batch: &mut M::Batch) -> Result<()> {
        if self.cursor >= self.n {
            self.epoch += 1;
            self.cursor = 0;
            self.order = Self::order(self.n, self.seed, self.epoch);
        }
        let end = (self.cursor + self.b).min(self.n);
        let lo = (self.cursor + self.rank * self.rank_b).min(end);
        let hi = (lo + self.rank_b).min(end);
        self.rows = lo < hi;
        if self.rows {
            (self.fill)(&self.order[lo..hi], batch);
        }
        self.last_batch = end - self.cursor;
        self.cursor = end;
        Ok(())
    }

    fn has_rows(&self) -> bool {
        self.rows
    }

    fn position(&self) -> DataPosition {
        DataPosition {
            epoch: self.epoch,
            cursor: self.cursor as u64,
        }
    }

    fn step_row(&mut self, _: &mut M, stats: &StepStats, seconds: f64, row: &mut Row) {
        self.train_s += seconds;
        self.examples += self.last_batch;
        self.tokens += stats.tokens;
        let done_in_epoch = stats.step - self.epoch * self.per_epoch;
        row.insert(
            "epoch".into(),
            json!(self.epoch as f64 + done_in_epoch as f64 / self.per_epoch as f64),
        );
        row.insert(
            "examples_per_s".into(),
            json!(self.last_batch as f64 / seconds.max(1e-9)),
        );
    }

    fn evaluate(&mut self, model: &mut M) -> Result<Option<Row>> {
        let Some(metrics) = (self.evaluate)(model)? else {
            return Ok(None);
        };
        let mut row = training_row(metrics);
        let trained = self.cursor > 0 || self.epoch > 0;
        row.insert(
            "epoch".into(),
            json!(if trained { self.epoch + 1 } else { 0 }),
        );
        self.last_eval = Some(row.clone());
        Ok(Some(row))
    }

    fn write_model(&self, model: &M, dir: &Path) -> std::result::Result<(), ModelWriteError> {
        (self.save)(model, dir)
    }
}

/// A task's metrics as a training row: each name prefixed `eval_`, as HF's
/// Trainer writes them (`eval_accuracy`); `lmkit eval` prints the bare names.
fn training_row(metrics: Metrics) -> Row {
    metrics
        .into_iter()
        .map(|(k, v)| (format!("eval_{k}"), v))
        .collect()
}

/// The steps of a run: per epoch, in the schedule, and to run now.
#[derive(Clone, Copy)]
struct Steps {
    /// The global batch (`batch_size` per rank).
    b: usize,
    per_epoch: u64,
    schedule: u64,
    total: u64,
}

impl Steps {
    fn new(opts: &FinetuneOptions, items: usize, ranks: usize) -> Self {
        let b = opts.batch_size * ranks;
        let per_epoch = items.div_ceil(b) as u64;
        let schedule = per_epoch * opts.epochs as u64;
        let total = opts.max_steps.map_or(schedule, |m| m.min(schedule));
        Steps {
            b,
            per_epoch,
            schedule,
            total,
        }
    }
}

/// The epoch loop of every fine-tuning task, on the [`Runner`]: the
/// session's `fill(indices, batch)` builds a batch from item indices,
/// `evaluate(model)` scores after each epoch (and where `max_steps` stops),
/// `save(model, dir)` writes the model's files (checkpoints and, at the end,
/// the output folder). A resumed `job` continues from its checkpoint: the
/// model's parameters, the moments, the step and the data position.
fn run_loop<M: Trainable>(
    session: Session<M>,
    opts: &FinetuneOptions,
    mut job: Job,
    on_event: &mut dyn FnMut(FinetuneEvent),
) -> Result<FinetuneSummary> {
    let Session {
        mut model,
        mut batch,
        train_items: n,
        eval_items,
        description,
        fill,
        evaluate,
        save,
    } = session;
    let (output, comm) = (job.output, job.comm);
    let steps = Steps::new(opts, n, comm.world_size());
    let optim = linear_schedule(opts, steps.schedule);
    let num_params = model.params().len();
    model.set_precision(job.record.dtype)?;
    model.set_recompute(opts.recompute)?;
    let mut record = job.record.clone();
    record.examples = n;
    // Everything is checked before the output folder is touched.
    let (mut state, mut opt) = match &job.resume {
        Some(dir) => resume_from(dir, &job, opts, &mut model, n, steps)?,
        None => (
            TrainState::new(opts.seed, optim, steps.b, opts.max_seq_len, num_params),
            OptimState::new(num_params),
        ),
    };
    state.optim = optim;
    state.extra = json!({ "finetune": record });
    let mut metrics = open_output(&job, state.step)?;
    if job.record.dtype == Precision::Bf16 {
        job.notes.push(Precision::Bf16.describe().into());
    }
    if comm.world_size() > 1 {
        job.notes.push(format!(
            "data-parallel: {} ranks x {} examples = a global batch of {}",
            comm.world_size(),
            opts.batch_size,
            steps.b
        ));
    }
    for n in job.notes {
        on_event(FinetuneEvent::Note(n));
    }
    on_event(FinetuneEvent::Start {
        description,
        train_examples: n,
        eval_examples: eval_items,
        total_steps: steps.total,
        start_step: state.step,
    });
    let DataPosition { epoch, cursor } = state.data;
    let mut task = EpochTask::<M> {
        n,
        b: steps.b,
        rank_b: opts.batch_size,
        rank: comm.rank(),
        rows: true,
        seed: opts.seed,
        per_epoch: steps.per_epoch,
        epoch,
        cursor: cursor as usize,
        order: EpochTask::<M>::order(n, opts.seed, epoch),
        fill,
        evaluate,
        save,
        last_batch: 0,
        examples: 0,
        tokens: 0,
        train_s: 0.0,
        last_eval: None,
    };
    let config = RunConfig {
        max_steps: steps.total,
        log_every: opts.log_every,
        eval_every: steps.per_epoch,
        save_every: opts.save_every.unwrap_or(steps.per_epoch),
        keep: super::check_keep(opts.keep)?,
        stop_after: None,
        checkpoint_dir: Some(output.join("checkpoints")),
        final_dir: Some(output.to_path_buf()),
        // Only a run of no steps (`max_steps` 0) reports its starting point.
        eval_at_start: steps.total == 0,
        profile: opts.profile,
    };
    let runner = Runner {
        model: &mut model,
        opt: &mut opt,
        state: &mut state,
        optim: &optim,
        metrics: metrics.as_mut(),
        config: &config,
        parallel: DataParallel {
            comm,
            shard_optimizer: opts.shard_optimizer,
        },
    };
    let last_of_epoch = n - (steps.per_epoch as usize - 1) * steps.b;
    let run = runner.run(
        &mut task,
        &mut batch,
        &mut |e| forward_event(e, steps, last_of_epoch, on_event),
        &opts.stop,
    )?;
    Ok(FinetuneSummary {
        steps: run.steps,
        epochs_done: if run.steps == 0 {
            0
        } else {
            task.epoch as usize + 1
        },
        train_examples: n,
        examples_per_s: task.examples as f64 / task.train_s.max(1e-9),
        tokens_per_s: task.tokens as f64 / task.train_s.max(1e-9),
        train_seconds: task.train_s,
        final_loss: run.final_loss,
        last_eval: task.last_eval,
        output: output.to_path_buf(),
        interrupted: run.interrupted,
        checkpoint: run.checkpoint,
        profile: run.profile,
    })
}

/// Rank 0 creates the output folder (a fresh run drops an earlier run's
/// checkpoints, which would pass for this one's) and opens its
/// `metrics.jsonl` (a resumed run's cut after `step`); other ranks write
/// nothing. Every rank has checked the folder before.
fn open_output(job: &Job, step: u64) -> Result<Option<MetricsWriter>> {
    let output = job.output;
    job.comm.barrier();
    if !job.comm.is_root() {
        return Ok(None);
    }
    std::fs::create_dir_all(output).map_err(io(output))?;
    if job.resume.is_none() {
        for (_, d) in list_checkpoints(&output.join("checkpoints"))? {
            std::fs::remove_dir_all(&d).map_err(io(&d))?;
        }
    }
    let path = output.join("metrics.jsonl");
    let writer =
        MetricsWriter::open(&path, job.resume.as_ref().map(|_| step)).map_err(io(&path))?;
    Ok(Some(writer))
}

/// The [`Runner`]'s events as fine-tuning's.
fn forward_event(
    e: RunEvent,
    steps: Steps,
    last_of_epoch: usize,
    on_event: &mut dyn FnMut(FinetuneEvent),
) {
    match e {
        RunEvent::Step { stats, seconds, .. } => {
            let epoch = ((stats.step - 1) / steps.per_epoch) as usize;
            let n = if stats.step % steps.per_epoch == 0 {
                last_of_epoch
            } else {
                steps.b
            };
            on_event(FinetuneEvent::Step {
                epoch,
                stats,
                examples_per_s: n as f64 / seconds.max(1e-9),
            })
        }
        RunEvent::Eval { row } => {
            let done = row.get("epoch").and_then(Value::as_u64).unwrap_or(0);
            on_event(FinetuneEvent::Eval {
                epoch: done.saturating_sub(1) as usize,
                row,
            })
        }
        RunEvent::Saved { path } => on_event(FinetuneEvent::Saved { path }),
        RunEvent::Note(n) => on_event(FinetuneEvent::Note(n)),
        RunEvent::Text { .. } => {}
    }
}

#[cfg(test)]
mod options_tests {
    use super::FinetuneOptions;
    use crate::recipes::pretrain_options::PretrainOptions;

    /// Options read by field name (how Python passes them): sizes as
    /// numbers or text, absent fields at their defaults, unknown ones refused.
    #[test]
    fn options_deserialize_from_their_field_names() {
        let f: FinetuneOptions =
            serde_json::from_str(r#"{"epochs": 2, "max_shard_size": "1MB"}"#).unwrap();
        assert_eq!((f.epochs, f.max_shard_size), (2, Some(1_000_000)));
        assert_eq!(f.lr, FinetuneOptions::default().lr);
        let f: FinetuneOptions = serde_json::from_str(r#"{"max_shard_size": 4096}"#).unwrap();
        assert_eq!(f.max_shard_size, Some(4096));
        let e = serde_json::from_str::<FinetuneOptions>(r#"{"epoch": 2}"#).unwrap_err();
        assert!(e.to_string().contains("unknown field `epoch`"), "{e}");
        assert!(serde_json::from_str::<FinetuneOptions>(r#"{"max_shard_size": "5XB"}"#).is_err());
        let p: PretrainOptions = serde_json::from_str(
            r#"{"family": "bert", "output": "out", "size": {"preset": "tiny", "n_layer": 3}}"#,
        )
        .unwrap();
        assert_eq!(p.family, crate::spec::Family::Bert);
        assert_eq!(
            (p.size.preset.as_deref(), p.size.n_layer),
            (Some("tiny"), Some(3))
        );
        assert!(serde_json::from_str::<PretrainOptions>(r#"{"family": "t5"}"#).is_err());
    }
}
