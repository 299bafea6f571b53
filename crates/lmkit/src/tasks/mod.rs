//! Tasks: each fine-tuning task written once, for every family it supports.
//!
//! A task module owns what its task needs: reading its data, preparing a
//! model (the head created with one HF-style initialiser), filling a
//! training batch, evaluating (one metric schema: the bare names here and
//! in `lmkit eval --json`, with an `eval_` prefix in training rows) and
//! the predictions of an evaluation in the HF pipeline's shape. The loss is
//! the model's ([`crate::models::Trainable`]).
//!
//! [`REGISTRY`] lists the tasks; [`TaskKind`] is one of them, parsed from
//! its name. Fine-tuning ([`crate::recipes::finetune`]) is one generic
//! function over a task, and every front end (the CLI, the server, Python)
//! dispatches through [`TaskKind`] and [`EvalTarget`]: nothing above this
//! layer knows which tasks exist.
//!
//! Adding a task: write a module with a unit struct implementing [`Task`]
//! and add one line to [`REGISTRY`] (`docs/adding-a-task.md` walks through
//! an example, compiled and run as a test).

pub mod classify;
mod common;
mod error;
pub mod lm;
pub mod multiple_choice;
mod options;
pub mod qa;
pub mod regression;
pub mod rerank;
pub mod token_classify;

use std::path::Path;

use serde_json::{Map, Value};

use crate::checkpoint::read_config;
use crate::eval::benchmark::{self, Benchmark, EvalOptions, Evaluation, Keep, Progress};
use crate::models::bert::BertTrainer;
use crate::models::gpt2::{Gpt2, Gpt2TaskTrainer};
use crate::spec::config::{AnyConfig, ModelConfig};
use crate::spec::names::Family;
use crate::train::runner::ModelWriteError;
use crate::train::Trainable;

pub use common::{hf_init_heads, load_bert_as};
pub use error::{check_vocab, invalid, RecipeError, Result};
pub use options::{FinetuneOptions, StopRequest};
pub use qa::{qa_train_features, QaFeature};

/// Metrics of one evaluation, by their bare names (`accuracy`, `f1`, ...).
pub type Metrics = Map<String, Value>;

/// Every task lmkit fine-tunes and evaluates, in the order `--help` lists
/// them. A new task is a module and one line here.
pub const REGISTRY: &[&dyn Task] = &[
    &classify::Classify,
    &regression::Regression,
    &token_classify::TokenClassify,
    &qa::Qa,
    &multiple_choice::MultipleChoice,
    &lm::Lm,
];

/// What a fine-tuning task knows; one implementation per task module.
pub trait Task: Sync {
    /// The name `--task` and Python take (`token-classify`).
    fn name(&self) -> &'static str;
    /// Other names accepted for it (`squad` for `qa`).
    fn aliases(&self) -> &'static [&'static str] {
        &[]
    }
    /// One line for `--help`: what is trained, and on which families.
    fn summary(&self) -> &'static str;
    /// The data format, for `--help`.
    fn data_format(&self) -> &'static str;
    /// What its evaluation reports, for `--help`.
    fn scores(&self) -> &'static str;
    /// The families it supports, in the order an error lists them.
    fn families(&self) -> &'static [Family];
    /// `max_seq_len` when none is given.
    fn default_max_seq_len(&self) -> usize {
        128
    }
    /// A hint added to the error for a model of a family the task does not
    /// take: the task its user most likely meant.
    fn other_family_hint(&self, _family: Family) -> Option<&'static str> {
        None
    }
    /// The options beyond the common ones that shape its training (recorded
    /// in checkpoints and compared on resume): `doc_stride`, `lm_coef`.
    fn training_options(&self) -> &'static [&'static str] {
        &[]
    }
    /// Loads the model of `cx.model_dir` (its config already checked to be
    /// of a family the task supports) with the task's head, reads the data
    /// and returns what the training loop needs.
    fn prepare(&self, cx: &PrepareCx<'_>) -> Result<Prepared>;
    /// Scores the fine-tuned model in `model_dir` on `data` (the same
    /// scoring as fine-tuning's per-epoch evaluation): the metrics by their
    /// bare names and one prediction row per item.
    fn evaluate(&self, cx: &EvalCx<'_>) -> Result<Evaluation>;
}

/// One of the [`REGISTRY`]'s tasks.
#[derive(Clone, Copy)]
pub struct TaskKind(&'static dyn Task);

impl TaskKind {
    pub const CLASSIFY: TaskKind = TaskKind(&classify::Classify);
    pub const REGRESSION: TaskKind = TaskKind(&regression::Regression);
    pub const TOKEN_CLASSIFY: TaskKind = TaskKind(&token_classify::TokenClassify);
    pub const QA: TaskKind = TaskKind(&qa::Qa);
    pub const MULTIPLE_CHOICE: TaskKind = TaskKind(&multiple_choice::MultipleChoice);
    pub const LM: TaskKind = TaskKind(&lm::Lm);

    /// A task of the caller's own, outside the registry: it fine-tunes and
    /// evaluates through the same loop and checks as the registry's
    /// (`docs/adding-a-task.md` runs one), but names do not parse to it.
    pub const fn custom(task: &'static dyn Task) -> TaskKind {
        TaskKind(task)
    }

    /// Every registered task.
    pub fn all() -> impl Iterator<Item = TaskKind> {
        REGISTRY.iter().map(|&t| TaskKind(t))
    }

    /// The task's implementation.
    pub fn task(self) -> &'static dyn Task {
        self.0
    }

    pub fn name(self) -> &'static str {
        self.0.name()
    }

    /// `max_seq_len` when none is given: 384 for QA (HF's window), else 128.
    pub fn default_max_seq_len(self) -> usize {
        self.0.default_max_seq_len()
    }

    /// Whether the option (by field name) shapes this task's training.
    pub fn uses(self, option: &str) -> bool {
        self.0.training_options().contains(&option)
    }

    /// Reads `dir/config.json` and checks the task supports its family,
    /// naming the task and the families it takes otherwise.
    pub fn model_config(self, dir: &Path) -> Result<AnyConfig> {
        let config = read_config(dir, None)?;
        let families = self.0.families();
        if !families.contains(&config.family()) {
            let want: Vec<&str> = families.iter().map(|f| f.name()).collect();
            let mut msg = format!(
                "`task` {} needs a {} checkpoint, but {} holds a {} model ({})",
                self.name(),
                want.join(" or "),
                dir.display(),
                config.family().name(),
                config.architectures().join(", ")
            );
            if let Some(hint) = self.0.other_family_hint(config.family()) {
                msg.push_str("; ");
                msg.push_str(hint);
            }
            return Err(invalid(msg));
        }
        Ok(config)
    }

    /// `--help` text of `--task`: one line per task, with its families and data.
    pub fn help() -> String {
        Self::all()
            .map(|t| {
                let fams: Vec<&str> = t.0.families().iter().map(|f| f.name()).collect();
                format!(
                    "{}: {} [{}]; data: {}",
                    t.name(),
                    t.0.summary(),
                    fams.join(", "),
                    t.0.data_format()
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl PartialEq for TaskKind {
    fn eq(&self, other: &Self) -> bool {
        self.name() == other.name()
    }
}

impl Eq for TaskKind {}

impl std::fmt::Debug for TaskKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TaskKind({})", self.name())
    }
}

impl std::fmt::Display for TaskKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for TaskKind {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        Self::all()
            .find(|t| t.name() == s || t.0.aliases().contains(&s))
            .ok_or_else(|| {
                let names: Vec<&str> = Self::all().map(TaskKind::name).collect();
                let mut msg = format!("unknown task `{s}` (expected {})", names.join(", "));
                if Benchmark::from_name(s).is_some() {
                    msg.push_str(&format!(
                        "; `{s}` is a zero-shot benchmark: run it with `eval`"
                    ));
                }
                msg
            })
    }
}

/// What [`Task::prepare`] is given.
pub struct PrepareCx<'a> {
    pub model_dir: &'a Path,
    /// `model_dir`'s config.json, of a family the task supports.
    pub config: AnyConfig,
    pub train: &'a Path,
    pub eval: Option<&'a Path>,
    pub opts: &'a FinetuneOptions,
}

/// What [`Task::evaluate`] is given.
pub struct EvalCx<'a> {
    pub model_dir: &'a Path,
    /// `model_dir`'s config.json, of a family the task supports.
    pub config: AnyConfig,
    pub data: &'a Path,
    pub opts: &'a EvalOptions,
    /// The items to score (the overlap filter), by their text segments.
    pub keep: Keep<'a>,
}

/// Builds a training batch from the indices of training items.
pub type FillFn<M> = Box<dyn FnMut(&[usize], &mut <M as Trainable>::Batch)>;
/// Scores the model on the held-out set: its metrics, or None without one.
pub type EvalFn<M> = Box<dyn FnMut(&mut M) -> Result<Option<Metrics>>>;
/// Writes the task's model (HF layout, config, tokenizer) into a folder:
/// the final model and every checkpoint's.
pub type SaveFn<M> = Box<dyn Fn(&M, &Path) -> std::result::Result<(), ModelWriteError>>;

/// A model ready to fine-tune with its data: what the training loop runs.
pub struct Session<M: Trainable> {
    pub model: M,
    pub batch: M::Batch,
    /// Training items (examples, windows or blocks) the loop permutes.
    pub train_items: usize,
    /// Evaluation items (examples, questions or blocks), 0 without eval data.
    pub eval_items: usize,
    /// One line on what is trained on what.
    pub description: String,
    pub fill: FillFn<M>,
    pub evaluate: EvalFn<M>,
    pub save: SaveFn<M>,
}

/// A [`Session`] of one of the trainable model kinds.
pub enum Prepared {
    Bert(Session<BertTrainer>),
    /// GPT-2 with a task head (classification, multiple choice).
    Gpt2Head(Session<Gpt2TaskTrainer>),
    /// GPT-2 as a causal LM.
    Gpt2(Session<Gpt2>),
}

/// What `lmkit eval --task` and `lmkit.evaluate` take: a fine-tuning task
/// (its model fine-tuned) or a zero-shot GPT-2 benchmark.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EvalTarget {
    Task(TaskKind),
    Benchmark(Benchmark),
}

impl EvalTarget {
    pub fn name(self) -> &'static str {
        match self {
            EvalTarget::Task(t) => t.name(),
            EvalTarget::Benchmark(b) => b.name(),
        }
    }

    /// `--help` text of `eval --task`: tasks, then benchmarks.
    pub fn help() -> String {
        let benches = Benchmark::ALL
            .iter()
            .map(|b| format!("{}: {}", b.name(), b.summary()));
        TaskKind::all()
            .map(|t| {
                let fams: Vec<&str> = t.0.families().iter().map(|f| f.name()).collect();
                let data = t.0.data_format();
                format!(
                    "{}: {}, {data}: {}",
                    t.name(),
                    fams.join(" or "),
                    t.0.scores()
                )
            })
            .chain(benches)
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Every name, tasks then benchmarks.
    pub fn names() -> Vec<&'static str> {
        TaskKind::all()
            .map(TaskKind::name)
            .chain(Benchmark::ALL.iter().map(|b| b.name()))
            .collect()
    }
}

impl std::str::FromStr for EvalTarget {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        if let Some(b) = Benchmark::from_name(s) {
            return Ok(EvalTarget::Benchmark(b));
        }
        s.parse::<TaskKind>()
            .map(EvalTarget::Task)
            .map_err(|_| format!("unknown task `{s}` (expected {})", Self::names().join(", ")))
    }
}

/// Scores the model in `model_dir` on `data`: a fine-tuned model on its
/// task, or a GPT-2 on a benchmark. The metrics (bare names, plus `task`)
/// are what `lmkit eval --json` prints and `lmkit.evaluate` returns.
pub fn evaluate(
    target: EvalTarget,
    model_dir: &Path,
    data: &Path,
    opts: &EvalOptions,
    keep: Keep<'_>,
    progress: Progress<'_>,
) -> Result<Evaluation> {
    let mut out = match target {
        EvalTarget::Benchmark(b) => {
            read_config(
                model_dir,
                Some((Family::Gpt2, &format!("`task` {}", b.name()))),
            )?;
            benchmark::run(b, model_dir, data, opts, keep, progress)?
        }
        EvalTarget::Task(t) => {
            let cx = EvalCx {
                model_dir,
                config: t.model_config(model_dir)?,
                data,
                opts,
                keep,
            };
            t.0.evaluate(&cx)?
        }
    };
    out.metrics
        .insert("task".into(), Value::String(target.name().into()));
    Ok(out)
}

/// `docs/adding-a-task.md`'s example, compiled and run by `cargo test --doc`.
#[cfg(doctest)]
#[doc = include_str!("../../../../docs/adding-a-task.md")]
pub struct AddingATask;
