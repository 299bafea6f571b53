//! Fine-tuning: sequence classification, regression (STS-B style) and SQuAD
//! span QA from any BERT
//! checkpoint (a bare `BertModel` such as all-MiniLM-L6-v2 included, new
//! heads initialised as HF does), sequence classification of GPT-2
//! (`GPT2ForSequenceClassification` with GPT-1's auxiliary LM loss),
//! multiple choice for both (`BertForMultipleChoice`, `GPT2DoubleHeadsModel`),
//! and causal-LM fine-tuning of GPT-2.
//!
//! The loop is the `train` engine's [`train_step`](crate::train::train_step) (AdamW with decoupled
//! weight decay on the layout's decay flags, global-norm clipping, linear
//! warmup then linear decay to 0 like HF's `get_linear_schedule_with_warmup`).
//! Each epoch visits the training examples in a permutation drawn from
//! `(seed, epoch)`, `batch_size` at a time (the last batch may be smaller),
//! each batch padded to its longest example. Dropout is off. After every
//! epoch the eval file, if any, is scored and a row goes to
//! `OUTPUT/metrics.jsonl`; at the end OUTPUT holds an HF checkpoint
//! (`BertForSequenceClassification`, `BertForQuestionAnswering` or
//! `GPT2LMHeadModel`) and the tokenizer.
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
use std::sync::Arc;

use lmkit_tokenizers::wordpiece::WordPieceTokenizer;
use lmkit_tokenizers::{BpeTokenizer, Encoding};
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use crate::checkpoint::{
    load_params, load_pretrained, open_model_dir_for, read_config, save_params_sharded, LoadOptions,
};
use crate::data::classify_data::{read_classify_jsonl, read_regression_jsonl, LabelMap};
use crate::data::multiple_choice::read_multiple_choice;
use crate::data::squad::{read_squad, SquadExample};
use crate::data::tagging::{encode_sentences, read_tagging, tag_map};
use crate::data::TokenBatch;
use crate::eval::run::{
    encode_classify, encode_gpt2_classify, eval_classify, eval_gpt2_classify, eval_regression,
    eval_squad, eval_token_classify,
};
use crate::eval::run::{
    encode_gpt2_multiple_choice, encode_multiple_choice, eval_gpt2_multiple_choice,
    eval_multiple_choice, ChoiceEval, ClassifyEval,
};
use crate::models::bert::QaOptions;
use crate::models::bert::{hf_init, BertTargets, BertTrainBatch, BertTrainer};
use crate::models::bert::{Bert, BertBatch};
use crate::models::gpt2::classify::task_batch;
use crate::models::gpt2::{Gpt2, Gpt2TaskBatch, Gpt2TaskTrainer};
use crate::spec::config::{AnyConfig, BertConfig, ModelConfig};
use crate::spec::layout::{bert_layout, gpt2_layout_for};
use crate::spec::names::BertHeads;
use crate::spec::names::{Architecture, Family};
use crate::spec::{Precision, IGNORE_INDEX};

use super::pretrain_options::{init_from_record, pick};
use super::{check_output, check_vocab, invalid, RecipeError, Result};
use crate::data::shards::fingerprint_files;
use crate::train::runner::{ModelWriteError, Row};
use crate::train::{
    latest_checkpoint, list_checkpoints, load_train_state, read_train_state, skipped_checkpoints,
    DataParallel, DataPosition, LossParts, LrSchedule, MetricsWriter, OptimConfig, OptimState,
    RunConfig, RunEvent, RunTask, Runner, ScheduleKind, StepStats, TrainState, Trainable,
};
use crate::util::rng::Rng;

/// What to fine-tune for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinetuneTask {
    /// `BertForSequenceClassification` on JSONL `{"text", "text_pair"?, "label"}`.
    Classify,
    /// `BertForQuestionAnswering` on SQuAD v1.1 JSON.
    Qa,
    /// `GPT2LMHeadModel` on text (files split at form-feed lines, or JSONL `text`).
    Lm,
    /// `BertForTokenClassification` on CoNLL-style columns or JSONL `{"tokens", "tags"}`.
    TokenClassify,
    /// `BertForSequenceClassification` with one output (`problem_type`
    /// regression, MSE) on JSONL `{"text", "text_pair"?, "label": number}`.
    Regression,
    /// `BertForMultipleChoice` / `GPT2DoubleHeadsModel` on JSONL
    /// `{"context", "question"?, "choices", "label"}` or SWAG's columns.
    MultipleChoice,
}

impl std::str::FromStr for FinetuneTask {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "classify" => Ok(Self::Classify),
            "qa" => Ok(Self::Qa),
            "lm" => Ok(Self::Lm),
            "token-classify" => Ok(Self::TokenClassify),
            "regression" => Ok(Self::Regression),
            "multiple-choice" => Ok(Self::MultipleChoice),
            o => Err(format!(
                "unknown task `{o}` (expected classify, qa, lm, token-classify, regression or \
                 multiple-choice)"
            )),
        }
    }
}

impl FinetuneTask {
    /// `max_seq_len` when none is given: 384 for QA (HF's window), else 128.
    pub fn default_max_seq_len(self) -> usize {
        match self {
            Self::Qa => 384,
            _ => 128,
        }
    }

    /// The name `FromStr` reads.
    pub fn name(self) -> &'static str {
        match self {
            Self::Classify => "classify",
            Self::Qa => "qa",
            Self::Lm => "lm",
            Self::TokenClassify => "token-classify",
            Self::Regression => "regression",
            Self::MultipleChoice => "multiple-choice",
        }
    }
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

/// Hyper-parameters (HF Trainer defaults where it has them). Deserializes
/// from the field names (unknown ones are an error, absent ones take
/// [`Default`]): how the Python package passes its keyword arguments.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FinetuneOptions {
    pub epochs: usize,
    pub batch_size: usize,
    pub eval_batch_size: usize,
    /// Peak learning rate.
    pub lr: f32,
    /// Fraction of the steps spent warming up linearly.
    pub warmup_ratio: f64,
    /// Longest input in tokens (QA: the window length; LM: the block length).
    pub max_seq_len: usize,
    pub seed: u64,
    pub weight_decay: f32,
    pub beta1: f32,
    pub beta2: f32,
    pub eps: f32,
    /// Global gradient-norm clip (HF `max_grad_norm` 1.0); 0 = off.
    pub grad_clip: f32,
    /// QA: overlap between consecutive windows (HF run_qa `doc_stride` 128).
    pub doc_stride: usize,
    /// QA: longest answer in tokens (HF run_qa 30).
    pub max_answer_len: usize,
    /// QA: answers kept per question in the predictions (HF run_qa `n_best_size` 20).
    pub n_best: usize,
    /// Stop after this many optimizer steps (the schedule still spans all epochs).
    pub max_steps: Option<u64>,
    /// A metrics row every N steps.
    pub log_every: u64,
    /// Write into a non-empty output folder (its files are replaced).
    pub overwrite: bool,
    /// Write the model in shards of at most this many bytes; `None`: one file.
    #[serde(deserialize_with = "crate::util::size::deserialize_byte_size")]
    pub max_shard_size: Option<u64>,
    /// GPT-2 classification: λ of GPT-1's L3 = L2 + λ·L1, the weight of the
    /// LM loss on the same inputs (GPT-1 used 0.5); 0 = off.
    pub lm_coef: f32,
    /// Continue the run in the output folder from its newest checkpoint,
    /// exactly. Every option that shapes training must be the run's (an
    /// error names the one that differs); `max_steps`, `save_every`, `keep`
    /// and the evaluation settings may change.
    pub resume: bool,
    /// A checkpoint every N steps; `None`: at the end of every epoch; 0: only
    /// at the end (and when stopped).
    pub save_every: Option<u64>,
    /// Checkpoints kept (at least 1).
    pub keep: usize,
    /// Data-parallel runs ([`finetune_on`] over several ranks): each rank
    /// keeps the optimizer moments of its share of the parameters (ZeRO
    /// stage 1); the same weights as without.
    pub shard_optimizer: bool,
    /// The number format of the matmuls of every block (GPT-2: and the LM
    /// head): f32 (exact against HF) or bf16 (mixed precision: bf16
    /// operands, f32 sums, weights and optimizer state). A resumed run must
    /// give the run's.
    pub dtype: Precision,
    /// GPT-2: recompute activations in backward instead of keeping them
    /// ([`crate::models::gpt2::Gpt2::set_recompute`]); an error for BERT.
    /// Memory only: a resume may turn it on or off.
    pub recompute: bool,
    /// Polled after every step; see [`StopRequest`].
    #[serde(skip)]
    pub stop: StopRequest,
}

impl Default for FinetuneOptions {
    fn default() -> Self {
        FinetuneOptions {
            epochs: 3,
            batch_size: 16,
            eval_batch_size: 64,
            lr: 5e-5,
            warmup_ratio: 0.0,
            max_seq_len: 128,
            seed: 42,
            weight_decay: 0.0,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            grad_clip: 1.0,
            doc_stride: 128,
            max_answer_len: 30,
            n_best: 20,
            max_steps: None,
            log_every: 1,
            overwrite: false,
            max_shard_size: None,
            lm_coef: 0.5,
            resume: false,
            save_every: None,
            keep: 2,
            shard_optimizer: false,
            dtype: Precision::F32,
            recompute: false,
            stop: StopRequest::default(),
        }
    }
}

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
        })
    }
}

/// Fine-tunes `model_dir` for `task`: the one entry point of every task
/// (the CLI's `finetune` and Python's `lmkit.finetune` call it).
pub fn finetune(
    task: FinetuneTask,
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
    task: FinetuneTask,
    model_dir: &Path,
    train: &Path,
    eval: Option<&Path>,
    output: &Path,
    opts: &FinetuneOptions,
    comm: &dyn Communicator,
    on_event: &mut dyn FnMut(FinetuneEvent),
) -> Result<FinetuneSummary> {
    let run = match task {
        FinetuneTask::Classify => finetune_classify,
        FinetuneTask::Qa => finetune_qa,
        FinetuneTask::Lm => finetune_lm,
        FinetuneTask::TokenClassify => finetune_token_classify,
        FinetuneTask::Regression => finetune_regression,
        FinetuneTask::MultipleChoice => finetune_multiple_choice,
    };
    run(model_dir, train, eval, output, opts, comm, on_event)
}

/// Reads `dir/config.json`, demanding the `family` task `task` needs.
fn task_config(dir: &Path, family: Family, task: &str) -> Result<AnyConfig> {
    Ok(read_config(dir, Some((family, &format!("`task` {task}"))))?)
}

/// Loads a BERT checkpoint into the layout of `arch` (its `config` adjusted
/// by the caller): base weights must all be there; heads `arch` has but the
/// file lacks are initialised as HF does (N(0, initializer_range) weights,
/// zero biases), heads the file has but `arch` lacks are ignored.
/// Returns the model and the names of the initialised parameters.
pub fn load_bert_as(
    dir: &Path,
    config: BertConfig,
    arch: Architecture,
    seed: u64,
) -> Result<(Bert, Vec<String>)> {
    let (_, file) = open_model_dir_for(dir, Some((Family::Bert, arch.hf_name())))?;
    let heads: BertHeads = arch.bert_heads();
    let layout = bert_layout(&config, heads)?;
    let mut params = layout.try_zeros()?;
    let report = load_params(
        &layout,
        &mut params,
        &file,
        Family::Bert,
        LoadOptions {
            allow_missing_heads: true,
            ignore_unused_heads: true,
        },
    )?;
    let missing = report.missing_heads.clone();
    let mut rng = Rng::derive(seed, 0x4845_4144); // "HEAD"
    hf_init(
        &layout,
        &mut params,
        config.initializer_range,
        None,
        &mut rng,
        &|name| missing.iter().any(|m| m == name),
    );
    let model = Bert::from_parts(config, heads, layout, params, Some(arch))?;
    Ok((model, missing))
}

/// The tokenizer's ids fit the model's embeddings, and text pairs (segment
/// B has token type 1) need `type_vocab_size` ≥ 2: checked before training,
/// with the reason, rather than as an id out of range in the first batch.
fn check_fits(
    dir: &Path,
    tok: &WordPieceTokenizer,
    config: &BertConfig,
    pairs: bool,
) -> Result<()> {
    check_vocab(tok.vocab_size(), config.vocab_size)?;
    if pairs && config.type_vocab_size < 2 {
        return Err(invalid(format!(
            "{}: the model has type_vocab_size {} (one segment), but the task gives it text pairs, \
             whose second segment is token type 1",
            dir.display(),
            config.type_vocab_size
        )));
    }
    Ok(())
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

fn check_opts(opts: &FinetuneOptions) -> Result<()> {
    for (name, v) in [
        ("epochs", opts.epochs),
        ("batch_size", opts.batch_size),
        ("eval_batch_size", opts.eval_batch_size),
    ] {
        if v == 0 {
            return Err(invalid(format!("`{name}` must be positive")));
        }
    }
    if !(0.0..1.0).contains(&opts.warmup_ratio) {
        return Err(invalid(format!(
            "`warmup_ratio` {} must be in [0, 1)",
            opts.warmup_ratio
        )));
    }
    if !(opts.lr > 0.0 && opts.lr.is_finite()) {
        return Err(invalid(format!("`lr` {} must be positive", opts.lr)));
    }
    if opts.max_seq_len < 8 {
        return Err(invalid(format!(
            "`max_seq_len` {} is too short",
            opts.max_seq_len
        )));
    }
    Ok(())
}

/// One fine-tuning run: what it starts from, on what data, into which
/// folder; recorded in its checkpoints and checked on `resume`.
struct Job<'a> {
    /// The ranks of a data-parallel run (one process: [`SingleProcess`]).
    comm: &'a dyn Communicator,
    model_dir: &'a Path,
    train: &'a Path,
    eval: Option<&'a Path>,
    output: &'a Path,
    /// What the checkpoints record of this run (`examples` 0 until the
    /// data is read).
    record: RunRecord,
    /// The newest checkpoint, when resuming.
    resume: Option<PathBuf>,
    /// Passed-over step folders, told once the run starts.
    notes: Vec<String>,
}

/// What a fine-tuning checkpoint records of its run (`extra.finetune` of
/// the trainer state): on `resume` the command must give the same.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct RunRecord {
    task: String,
    /// The starting checkpoint, canonical.
    model: String,
    /// Fingerprints of the training and evaluation files' contents.
    train: String,
    eval: Option<String>,
    epochs: usize,
    /// Per rank.
    batch_size: usize,
    /// Ranks of the data-parallel run; 1 in checkpoints from before.
    #[serde(default = "super::pretrain_options::one")]
    ranks: usize,
    lr: f32,
    warmup_ratio: f64,
    max_seq_len: usize,
    seed: u64,
    weight_decay: f32,
    beta1: f32,
    beta2: f32,
    eps: f32,
    grad_clip: f32,
    /// QA only.
    doc_stride: Option<usize>,
    /// Classification and multiple choice only (GPT-2 uses it).
    lm_coef: Option<f32>,
    /// Training items (examples, windows or blocks) the data made.
    examples: usize,
    /// The matmuls' number format; f32 in checkpoints from before.
    #[serde(default)]
    dtype: Precision,
}

fn fingerprint(path: &Path) -> Result<String> {
    fingerprint_files(&[path.to_path_buf()]).map_err(|source| RecipeError::Io {
        path: path.to_path_buf(),
        source,
    })
}

impl<'a> Job<'a> {
    /// Checks the options and the output folder before anything is read or
    /// written: a fresh run needs an absent or empty folder (or
    /// `overwrite`); `resume` needs a checkpoint of this command's run there
    /// (task, starting model, data and training options are compared now;
    /// the item count and model size once the data and model are loaded).
    fn start(
        task: FinetuneTask,
        model_dir: &'a Path,
        train: &'a Path,
        eval: Option<&'a Path>,
        output: &'a Path,
        opts: &FinetuneOptions,
        comm: &'a dyn Communicator,
    ) -> Result<Self> {
        check_opts(opts)?;
        let mut job = Job {
            comm,
            model_dir,
            train,
            eval,
            output,
            record: RunRecord {
                task: task.name().into(),
                model: init_from_record(&Some(model_dir.to_path_buf()))
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                train: fingerprint(train)?,
                eval: eval.map(fingerprint).transpose()?,
                epochs: opts.epochs,
                batch_size: opts.batch_size,
                ranks: comm.world_size(),
                lr: opts.lr,
                warmup_ratio: opts.warmup_ratio,
                max_seq_len: opts.max_seq_len,
                seed: opts.seed,
                weight_decay: opts.weight_decay,
                beta1: opts.beta1,
                beta2: opts.beta2,
                eps: opts.eps,
                grad_clip: opts.grad_clip,
                doc_stride: (task == FinetuneTask::Qa).then_some(opts.doc_stride),
                lm_coef: matches!(task, FinetuneTask::Classify | FinetuneTask::MultipleChoice)
                    .then_some(opts.lm_coef),
                examples: 0,
                dtype: opts.dtype,
            },
            resume: None,
            notes: Vec::new(),
        };
        let root = output.join("checkpoints");
        if !opts.resume {
            if let (Some(d), false) = (latest_checkpoint(&root)?, opts.overwrite) {
                return Err(invalid(format!(
                    "{} holds a fine-tuning run (checkpoint {}); pass `resume` to continue it, \
                     or `overwrite` to start again",
                    output.display(),
                    d.display()
                )));
            }
            check_output(model_dir, output, opts.overwrite)?;
            return Ok(job);
        }
        if opts.overwrite {
            return Err(invalid(
                "`resume` continues the run in the output folder and `overwrite` replaces it: give one",
            ));
        }
        check_output(model_dir, output, true)?;
        let dir = latest_checkpoint(&root)?.ok_or_else(|| {
            invalid(format!(
                "`resume`: no checkpoint in {} to resume from",
                root.display()
            ))
        })?;
        for d in skipped_checkpoints(&root)? {
            job.notes.push(format!(
                "note: {} is not a complete checkpoint (no trainer_state.json); resuming from the newest complete one",
                d.display()
            ));
        }
        let state = read_train_state(&dir)?;
        job.check(&dir, &state, None)?;
        job.resume = Some(dir);
        Ok(job)
    }

    /// The checkpoint in `dir` (trainer state `state`) belongs to this
    /// command's run: an error naming what differs otherwise. `examples`:
    /// the items this command's data made, once known.
    fn check(&self, dir: &Path, state: &TrainState, examples: Option<usize>) -> Result<()> {
        let saved: RunRecord = state
            .extra
            .get("finetune")
            .and_then(|v| serde_json::from_value(v.clone()).ok())
            .ok_or_else(|| {
                invalid(format!(
                    "{}: not a fine-tuning checkpoint (a pretraining run? continue it with pretrain)",
                    dir.display()
                ))
            })?;
        let given = RunRecord {
            examples: examples.unwrap_or(saved.examples),
            // Compared as the global batch.
            ranks: self.record.ranks,
            ..self.record.clone()
        };
        let out = self.output.display();
        if saved.task != given.task {
            return Err(invalid(format!(
                "`task` {}: the run in {out} fine-tunes for `{}`; an exact resume needs the same task",
                given.task, saved.task
            )));
        }
        if saved.model != given.model {
            return Err(invalid(format!(
                "`model` {} differs from the run's starting checkpoint {}; `resume` continues that run",
                self.model_dir.display(),
                saved.model
            )));
        }
        if saved.train != given.train {
            return Err(invalid(format!(
                "`train` {}: not the data the run in {out} was trained on (its contents differ); \
                 an exact resume needs the same data",
                self.train.display()
            )));
        }
        if saved.eval != given.eval {
            return Err(invalid(format!(
                "`eval` {}: not the evaluation data of the run in {out}; give the same `eval` (or none, if it had none)",
                self.eval.map_or("(none)".into(), |p| p.display().to_string())
            )));
        }
        pick("epochs", Some(given.epochs), Some(saved.epochs), 0)?;
        let global = |r: &RunRecord| r.batch_size * r.ranks.max(1);
        if global(&given) != global(&saved) {
            return Err(invalid(format!(
                "`batch_size` {} on {} rank(s) is a global batch of {}, the run in {out} had {} \
                 ({} x {} ranks); an exact resume keeps the global batch",
                given.batch_size,
                given.ranks,
                global(&given),
                global(&saved),
                saved.batch_size,
                saved.ranks
            )));
        }
        pick("lr", Some(given.lr), Some(saved.lr), 0.0)?;
        pick(
            "warmup_ratio",
            Some(given.warmup_ratio),
            Some(saved.warmup_ratio),
            0.0,
        )?;
        pick(
            "max_seq_len",
            Some(given.max_seq_len),
            Some(saved.max_seq_len),
            0,
        )?;
        pick("seed", Some(given.seed), Some(saved.seed), 0)?;
        pick(
            "weight_decay",
            Some(given.weight_decay),
            Some(saved.weight_decay),
            0.0,
        )?;
        pick("beta1", Some(given.beta1), Some(saved.beta1), 0.0)?;
        pick("beta2", Some(given.beta2), Some(saved.beta2), 0.0)?;
        pick("eps", Some(given.eps), Some(saved.eps), 0.0)?;
        pick(
            "grad_clip",
            Some(given.grad_clip),
            Some(saved.grad_clip),
            0.0,
        )?;
        pick("doc_stride", given.doc_stride, saved.doc_stride, 0)?;
        pick("lm_coef", given.lm_coef, saved.lm_coef, 0.0)?;
        if given.dtype != saved.dtype {
            return Err(invalid(format!(
                "`dtype` {} differs from the run's {}; an exact resume needs the same value",
                given.dtype, saved.dtype
            )));
        }
        if given.examples != saved.examples {
            return Err(invalid(format!(
                "the data now makes {} training items, the run in {out} had {}: \
                 an exact resume needs the same items",
                given.examples, saved.examples
            )));
        }
        Ok(())
    }
}

/// Evaluates the model on the held-out set: the metrics row, or None without one.
type EvalFn<'a, M> = dyn FnMut(&mut M) -> Result<Option<Map<String, Value>>> + 'a;

/// Writes the task's model (HF layout, config, tokenizer) into a folder: the
/// final model and every checkpoint's.
type SaveFn<'a, M> = dyn Fn(&M, &Path) -> std::result::Result<(), ModelWriteError> + 'a;

/// The files of a BERT task's model: its weights in `arch`'s HF layout, its
/// config and the tokenizer.
fn save_bert(
    m: &Bert,
    arch: Architecture,
    tok: &WordPieceTokenizer,
    max_shard_size: Option<u64>,
    dir: &Path,
) -> std::result::Result<(), ModelWriteError> {
    save_params_sharded(&m.layout, &m.params, &m.config, dir, arch, max_shard_size)?;
    tok.save(dir)?;
    Ok(())
}

/// [`save_bert`] for GPT-2.
fn save_gpt2(
    m: &Gpt2,
    arch: Architecture,
    tok: &BpeTokenizer,
    max_shard_size: Option<u64>,
    dir: &Path,
) -> std::result::Result<(), ModelWriteError> {
    save_params_sharded(&m.layout, &m.params, &m.config, dir, arch, max_shard_size)?;
    tok.save(dir)?;
    Ok(())
}

/// Fine-tuning's part of a [`Runner`] run: epochs of a fresh permutation of
/// the examples drawn from `(seed, epoch)`, `b` (the global batch) at a time
/// (the last batch of an epoch may be smaller), evaluation after every
/// epoch. Rank `rank` of a data-parallel run takes `rank_b` examples of
/// each batch, from `rank × rank_b` on (none of a short last batch that
/// ends before).
struct EpochTask<'a, M: Trainable> {
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
    fill: &'a mut dyn FnMut(&[usize], &mut M::Batch),
    evaluate: &'a mut EvalFn<'a, M>,
    save: &'a SaveFn<'a, M>,
    /// Examples of the batch just drawn.
    last_batch: usize,
    examples: usize,
    tokens: usize,
    train_s: f64,
    last_eval: Option<Map<String, Value>>,
}

impl<'a, M: Trainable> EpochTask<'a, M> {
    fn order(n: usize, seed: u64, epoch: u64) -> Vec<usize> {
        let mut order: Vec<usize> = (0..n).collect();
        Rng::derive(seed, epoch).shuffle(&mut order);
        order
    }
}

impl<M: Trainable> RunTask<M> for EpochTask<'_, M> {
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
        let Some(mut row) = (self.evaluate)(model)? else {
            return Ok(None);
        };
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

/// The epoch loop of every fine-tuning task, on the [`Runner`]:
/// `fill(indices, batch)` builds a batch from example indices,
/// `evaluate(model)` scores after each epoch (and where `max_steps` stops),
/// `save(model, dir)` writes the model's files (checkpoints and, at the end,
/// the output folder). A resumed `job` continues from its checkpoint: the
/// model's parameters, the moments, the step and the data position.
#[allow(clippy::too_many_arguments)]
fn run_loop<'a, M: Trainable>(
    model: &mut M,
    n_examples: usize,
    opts: &FinetuneOptions,
    batch: &mut M::Batch,
    fill: &'a mut dyn FnMut(&[usize], &mut M::Batch),
    evaluate: &'a mut EvalFn<'a, M>,
    save: &'a SaveFn<'a, M>,
    description: String,
    eval_examples: usize,
    mut job: Job,
    on_event: &mut dyn FnMut(FinetuneEvent),
) -> Result<FinetuneSummary> {
    let output = job.output;
    let comm = job.comm;
    let root = comm.is_root();
    // `b`: the global batch, `opts.batch_size` per rank.
    let b = opts.batch_size * comm.world_size();
    let per_epoch = n_examples.div_ceil(b) as u64;
    let schedule_steps = per_epoch * opts.epochs as u64;
    let total = opts
        .max_steps
        .map_or(schedule_steps, |m| m.min(schedule_steps));
    let optim = linear_schedule(opts, schedule_steps);
    let num_params = model.params().len();
    model.set_precision(opts.dtype)?;
    model.set_recompute(opts.recompute)?;
    let record = RunRecord {
        examples: n_examples,
        ..job.record.clone()
    };
    // Everything is checked before the output folder is touched.
    let (mut state, mut opt) = match &job.resume {
        Some(dir) => resume_from(dir, &job, opts, model, n_examples, total, schedule_steps)?,
        None => (
            TrainState::new(opts.seed, optim, b, opts.max_seq_len, num_params),
            OptimState::new(num_params),
        ),
    };
    state.optim = optim;
    state.extra = json!({ "finetune": record });
    let ckpt_root = output.join("checkpoints");
    // Every rank has checked (and on resume read) the folder before rank 0,
    // alone, writes it.
    comm.barrier();
    let mut metrics = if root {
        std::fs::create_dir_all(output).map_err(|source| RecipeError::Io {
            path: output.to_path_buf(),
            source,
        })?;
        if job.resume.is_none() {
            // `overwrite`: an earlier run's checkpoints would pass for this one's.
            for (_, d) in list_checkpoints(&ckpt_root)? {
                std::fs::remove_dir_all(&d)
                    .map_err(|source| RecipeError::Io { path: d, source })?;
            }
        }
        let metrics_path = output.join("metrics.jsonl");
        Some(
            MetricsWriter::open(&metrics_path, job.resume.as_ref().map(|_| state.step)).map_err(
                |source| RecipeError::Io {
                    path: metrics_path,
                    source,
                },
            )?,
        )
    } else {
        None
    };
    if opts.dtype == Precision::Bf16 {
        job.notes.push(Precision::Bf16.describe().into());
    }
    if comm.world_size() > 1 {
        job.notes.push(format!(
            "data-parallel: {} ranks x {} examples = a global batch of {b}",
            comm.world_size(),
            opts.batch_size
        ));
    }
    for n in job.notes {
        on_event(FinetuneEvent::Note(n));
    }
    on_event(FinetuneEvent::Start {
        description,
        train_examples: n_examples,
        eval_examples,
        total_steps: total,
        start_step: state.step,
    });
    let DataPosition { epoch, cursor } = state.data;
    let mut task = EpochTask::<M> {
        n: n_examples,
        b,
        rank_b: opts.batch_size,
        rank: comm.rank(),
        rows: true,
        seed: opts.seed,
        per_epoch,
        epoch,
        cursor: cursor as usize,
        order: EpochTask::<M>::order(n_examples, opts.seed, epoch),
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
        max_steps: total,
        log_every: opts.log_every,
        eval_every: per_epoch,
        save_every: opts.save_every.unwrap_or(per_epoch),
        keep: super::check_keep(opts.keep)?,
        stop_after: None,
        checkpoint_dir: Some(ckpt_root),
        final_dir: Some(output.to_path_buf()),
        // Only a run of no steps (`max_steps` 0) reports its starting point.
        eval_at_start: total == 0,
    };
    let runner = Runner {
        model,
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
    let last_of_epoch = n_examples - (per_epoch as usize - 1) * b;
    let run = runner.run(
        &mut task,
        batch,
        &mut |e| match e {
            RunEvent::Step { stats, seconds, .. } => {
                let epoch = ((stats.step - 1) / per_epoch) as usize;
                let n = if stats.step % per_epoch == 0 {
                    last_of_epoch
                } else {
                    b
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
        },
        &|| opts.stop.requested(),
    )?;
    let epochs_done = if run.steps == 0 {
        0
    } else {
        task.epoch as usize + 1
    };
    Ok(FinetuneSummary {
        steps: run.steps,
        epochs_done,
        train_examples: n_examples,
        examples_per_s: task.examples as f64 / task.train_s.max(1e-9),
        tokens_per_s: task.tokens as f64 / task.train_s.max(1e-9),
        train_seconds: task.train_s,
        final_loss: run.final_loss,
        last_eval: task.last_eval,
        output: output.to_path_buf(),
        interrupted: run.interrupted,
        checkpoint: run.checkpoint,
    })
}

/// The trainer state and moments of checkpoint `dir`, its parameters loaded
/// into `model`, after checking that it is this command's run, that it
/// fits the model and the data, and that it has steps left.
#[allow(clippy::too_many_arguments)]
fn resume_from<M: Trainable>(
    dir: &Path,
    job: &Job,
    opts: &FinetuneOptions,
    model: &mut M,
    n_examples: usize,
    total: u64,
    schedule_steps: u64,
) -> Result<(TrainState, OptimState)> {
    let (state, opt) = load_train_state(dir)?;
    job.check(dir, &state, Some(n_examples))?;
    let num_params = model.params().len();
    if state.num_params != num_params {
        return Err(invalid(format!(
            "{}: the checkpoint's model has {} parameters, this command's {num_params}",
            dir.display(),
            state.num_params
        )));
    }
    let DataPosition { epoch, cursor } = state.data;
    if epoch >= opts.epochs as u64 || cursor > n_examples as u64 {
        return Err(invalid(format!(
            "{}: data position (epoch {epoch}, item {cursor}) is outside the run's {} epochs of {n_examples} items",
            dir.display(),
            opts.epochs
        )));
    }
    if state.step >= schedule_steps {
        return Err(invalid(format!(
            "the run in {} is complete: all {} epochs ({schedule_steps} steps) are done and its model is there; \
             nothing to resume",
            job.output.display(),
            opts.epochs
        )));
    }
    if state.step >= total {
        return Err(invalid(format!(
            "the checkpoint is at step {}, already at `max_steps` {total}; raise `max_steps` (or drop it) to continue",
            state.step
        )));
    }
    let (config, file) = open_model_dir_for(dir, None)?;
    let layout = model.layout().clone();
    load_params(
        &layout,
        model.params_and_grads().0,
        &file,
        config.family(),
        LoadOptions::default(),
    )?;
    Ok((state, opt))
}

fn pad_batch(encs: &[&Encoding], pad: u32) -> Result<BertBatch> {
    Ok(BertBatch::from_encodings(encs, pad)?)
}

/// Fine-tunes a sequence classifier from the checkpoint in `model_dir`:
/// `BertForSequenceClassification` from a BERT, `GPT2ForSequenceClassification`
/// from a GPT-2 (the family is read from its config.json). Labels come from
/// the checkpoint when it already has a classifier (its `id2label`), else
/// from the training file.
fn finetune_classify(
    model_dir: &Path,
    train: &Path,
    eval: Option<&Path>,
    output: &Path,
    opts: &FinetuneOptions,
    comm: &dyn Communicator,
    on_event: &mut dyn FnMut(FinetuneEvent),
) -> Result<FinetuneSummary> {
    let job = Job::start(
        FinetuneTask::Classify,
        model_dir,
        train,
        eval,
        output,
        opts,
        comm,
    )?;
    let mut config = match read_config(model_dir, None)? {
        AnyConfig::Bert(c) => c,
        AnyConfig::Gpt2(c) => {
            return finetune_gpt2_classify(model_dir, c, train, eval, job, opts, on_event)
        }
    };
    let tok = WordPieceTokenizer::from_dir(model_dir)?;
    let train_data = read_classify_jsonl(train)?;
    let has_classifier = open_model_dir_for(model_dir, None)?
        .1
        .names()
        .iter()
        .any(|k| k.starts_with("classifier."));
    let labels = if has_classifier {
        LabelMap::from_names(config.id2label.clone())?
    } else {
        LabelMap::from_examples(&train_data)?
    };
    config.id2label = labels.names().to_vec();
    let train_ids = labels.ids(&train_data)?;
    let eval_data = eval.map(read_classify_jsonl).transpose()?;
    let eval_ids = eval_data.as_ref().map(|d| labels.ids(d)).transpose()?;
    let pairs = std::iter::once(&train_data)
        .chain(&eval_data)
        .any(|d| d.examples.iter().any(|e| e.text_pair.is_some()));
    check_fits(model_dir, &tok, &config, pairs)?;
    let max_len = opts.max_seq_len.min(config.max_position_embeddings);
    let (model, _) = load_bert_as(
        model_dir,
        config,
        Architecture::BertForSequenceClassification,
        opts.seed,
    )?;
    let train_encs = encode_classify(&tok, &train_data, max_len)?;
    let eval_encs = eval_data
        .as_ref()
        .map(|d| encode_classify(&tok, d, max_len))
        .transpose()?;
    let pad = tok.pad_id();
    let mut trainer = BertTrainer::new(model)?;
    let mut batch = BertTrainBatch::default();
    let mut fill = |idx: &[usize], bt: &mut BertTrainBatch| {
        let refs: Vec<&Encoding> = idx.iter().map(|&i| &train_encs[i]).collect();
        // Encodings were built by us within the model's limits.
        bt.batch = pad_batch(&refs, pad).expect("valid batch");
        bt.targets = BertTargets {
            class_labels: Some(idx.iter().map(|&i| train_ids[i] as i32).collect()),
            ..Default::default()
        };
    };
    let eval_bs = opts.eval_batch_size;
    let mut evaluate = |m: &mut BertTrainer| -> Result<Option<Map<String, Value>>> {
        let (Some(encs), Some(gold)) = (&eval_encs, &eval_ids) else {
            return Ok(None);
        };
        let r = eval_classify(&m.model, pad, encs, gold, eval_bs)?;
        Ok(Some(classify_row(&r)))
    };
    let description = format!(
        "classify: {} labels ({}), {} train examples",
        labels.num_labels(),
        labels.names().join(", "),
        train_encs.len()
    );
    let arch = Architecture::BertForSequenceClassification;
    let save =
        |t: &BertTrainer, dir: &Path| save_bert(&t.model, arch, &tok, opts.max_shard_size, dir);
    run_loop(
        &mut trainer,
        train_encs.len(),
        opts,
        &mut batch,
        &mut fill,
        &mut evaluate,
        &save,
        description,
        eval_encs.as_ref().map_or(0, Vec::len),
        job,
        on_event,
    )
}

/// Fine-tunes a one-output `BertForSequenceClassification` for regression
/// from the BERT checkpoint in `model_dir`, as HF does with `num_labels=1`,
/// `problem_type="regression"` (STS-B in run_glue): the MSE of the output
/// against the row's `label`, Pearson / Spearman of the eval outputs after
/// every epoch. The saved config has `num_labels` 1 (`id2label`
/// `{0: "LABEL_0"}` unless the checkpoint already names its one output)
/// and `problem_type` regression. A checkpoint whose classifier has more
/// than one output is an error.
fn finetune_regression(
    model_dir: &Path,
    train: &Path,
    eval: Option<&Path>,
    output: &Path,
    opts: &FinetuneOptions,
    comm: &dyn Communicator,
    on_event: &mut dyn FnMut(FinetuneEvent),
) -> Result<FinetuneSummary> {
    let job = Job::start(
        FinetuneTask::Regression,
        model_dir,
        train,
        eval,
        output,
        opts,
        comm,
    )?;
    let AnyConfig::Bert(mut config) = task_config(model_dir, Family::Bert, "regression")? else {
        unreachable!("task_config checked the family")
    };
    let tok = WordPieceTokenizer::from_dir(model_dir)?;
    let train_data = read_regression_jsonl(train)?;
    let has_classifier = open_model_dir_for(model_dir, None)?
        .1
        .names()
        .iter()
        .any(|k| k.starts_with("classifier."));
    if !has_classifier {
        config.set_num_labels(1);
    } else if config.num_labels() != 1 {
        return Err(invalid(format!(
            "{}: its classifier has {} outputs ({}); regression needs one: start from a model \
             without a classifier (its encoder) or a one-output one",
            model_dir.display(),
            config.num_labels(),
            config.id2label.join(", ")
        )));
    }
    config.problem_type = Some("regression".into());
    let eval_data = eval.map(read_regression_jsonl).transpose()?;
    let pairs = std::iter::once(&train_data)
        .chain(&eval_data)
        .any(|d| d.examples.iter().any(|e| e.text_pair.is_some()));
    check_fits(model_dir, &tok, &config, pairs)?;
    let max_len = opts.max_seq_len.min(config.max_position_embeddings);
    let (model, _) = load_bert_as(
        model_dir,
        config,
        Architecture::BertForSequenceClassification,
        opts.seed,
    )?;
    let train_encs = encode_classify(&tok, &train_data, max_len)?;
    let eval_encs = eval_data
        .as_ref()
        .map(|d| encode_classify(&tok, d, max_len))
        .transpose()?;
    let train_y: Vec<f32> = train_data.examples.iter().map(|e| e.label).collect();
    let eval_y: Option<Vec<f32>> = eval_data
        .as_ref()
        .map(|d| d.examples.iter().map(|e| e.label).collect());
    let pad = tok.pad_id();
    let mut trainer = BertTrainer::new(model)?;
    let mut batch = BertTrainBatch::default();
    let mut fill = |idx: &[usize], bt: &mut BertTrainBatch| {
        let refs: Vec<&Encoding> = idx.iter().map(|&i| &train_encs[i]).collect();
        // Encodings were built by us within the model's limits.
        bt.batch = pad_batch(&refs, pad).expect("valid batch");
        bt.targets = BertTargets {
            regression_targets: Some(idx.iter().map(|&i| train_y[i]).collect()),
            ..Default::default()
        };
    };
    let eval_bs = opts.eval_batch_size;
    let mut evaluate = |m: &mut BertTrainer| -> Result<Option<Map<String, Value>>> {
        let (Some(encs), Some(gold)) = (&eval_encs, &eval_y) else {
            return Ok(None);
        };
        let r = eval_regression(&m.model, pad, encs, gold, eval_bs)?;
        Ok(Some(object(json!({
            "eval_loss": r.loss,
            "eval_pearson": r.scores.pearson,
            "eval_spearmanr": r.scores.spearmanr,
            "eval_examples": r.scores.count,
        }))))
    };
    let (lo, hi) = train_y
        .iter()
        .fold((f32::INFINITY, f32::NEG_INFINITY), |(a, b), &y| {
            (a.min(y), b.max(y))
        });
    let description = format!(
        "regression: {} train examples, targets {lo}..{hi}",
        train_encs.len()
    );
    let arch = Architecture::BertForSequenceClassification;
    let save =
        |t: &BertTrainer, dir: &Path| save_bert(&t.model, arch, &tok, opts.max_shard_size, dir);
    run_loop(
        &mut trainer,
        train_encs.len(),
        opts,
        &mut batch,
        &mut fill,
        &mut evaluate,
        &save,
        description,
        eval_encs.as_ref().map_or(0, Vec::len),
        job,
        on_event,
    )
}

/// `finetune_classify` for GPT-2 (GPT-1 §3.2 with GPT-2's vocabulary):
/// each input is the text's tokens, for a pair `text <|endoftext|> pair`
/// (the delimiter), cut to `max_seq_len`; batches are right-padded with the
/// pad token, `<|endoftext|>` unless the config names one (written to the
/// saved config's `pad_token_id`, as HF users do); `score` reads the last
/// non-pad token; the loss adds `lm_coef` times the LM loss on the same
/// tokens (the tied head; a config with `tie_word_embeddings: false` needs
/// `lm_coef` 0, as `GPT2ForSequenceClassification` saves no LM head).
fn finetune_gpt2_classify(
    model_dir: &Path,
    mut config: crate::spec::config::Gpt2Config,
    train: &Path,
    eval: Option<&Path>,
    job: Job,
    opts: &FinetuneOptions,
    on_event: &mut dyn FnMut(FinetuneEvent),
) -> Result<FinetuneSummary> {
    let arch = Architecture::Gpt2ForSequenceClassification;
    if !(opts.lm_coef >= 0.0 && opts.lm_coef.is_finite()) {
        return Err(invalid(format!(
            "`lm_coef` {} must be a finite number >= 0",
            opts.lm_coef
        )));
    }
    if opts.lm_coef > 0.0 && !config.tie_word_embeddings {
        return Err(invalid(
            "the model has tie_word_embeddings false, and GPT2ForSequenceClassification keeps \
             no LM head for the auxiliary LM loss: use lm_coef 0",
        ));
    }
    let tok = BpeTokenizer::from_dir(model_dir)?;
    check_vocab(tok.vocab_size(), config.vocab_size)?;
    let eos = tok.endoftext_id().ok_or_else(|| {
        invalid("the tokenizer has no <|endoftext|> token (the pair delimiter and padding)")
    })?;
    let pad = *config.pad_token_id.get_or_insert(eos);
    for (what, id) in [("pad_token_id", pad), ("<|endoftext|>", eos)] {
        if id as usize >= config.vocab_size {
            return Err(invalid(format!(
                "{what} {id} is outside the model's vocabulary of {}",
                config.vocab_size
            )));
        }
    }
    let train_data = read_classify_jsonl(train)?;
    let (_, file) = open_model_dir_for(model_dir, Some((Family::Gpt2, arch.hf_name())))?;
    let has_score = file.names().iter().any(|k| k.starts_with("score."));
    let labels = if has_score {
        LabelMap::from_names(config.id2label.clone())?
    } else {
        LabelMap::from_examples(&train_data)?
    };
    config.id2label = labels.names().to_vec();
    let train_ids = labels.ids(&train_data)?;
    let eval_data = eval.map(read_classify_jsonl).transpose()?;
    let eval_ids = eval_data.as_ref().map(|d| labels.ids(d)).transpose()?;
    let layout = gpt2_layout_for(&config, arch)?;
    let mut params = layout.try_zeros()?;
    let report = load_params(
        &layout,
        &mut params,
        &file,
        Family::Gpt2,
        LoadOptions {
            allow_missing_heads: true,
            ignore_unused_heads: true,
        },
    )?;
    // A new `score`: N(0, initializer_range), as HF initialises nn.Linear.
    let mut rng = Rng::derive(opts.seed, 0x4845_4144); // "HEAD"
    for name in &report.missing_heads {
        if let Some(r) = layout.range(name) {
            for x in &mut params[r] {
                *x = (rng.normal() * config.initializer_range) as f32;
            }
        }
    }
    let model = Gpt2::from_params_for(config, arch, params)?;
    let t = opts.max_seq_len.min(model.config.n_positions);
    let train_rows = encode_gpt2_classify(&tok, &train_data, t, eos);
    let eval_rows = eval_data
        .as_ref()
        .map(|d| encode_gpt2_classify(&tok, d, t, eos));
    let mut trainer = Gpt2TaskTrainer {
        model,
        lm_coef: opts.lm_coef,
    };
    let mut batch = Gpt2TaskBatch::default();
    let mut fill = |idx: &[usize], bt: &mut Gpt2TaskBatch| {
        let refs: Vec<&[u32]> = idx.iter().map(|&i| train_rows[i].as_slice()).collect();
        *bt = task_batch(
            &refs,
            pad,
            idx.iter().map(|&i| train_ids[i] as u32).collect(),
            1,
        );
    };
    let eval_bs = opts.eval_batch_size;
    let mut evaluate = |m: &mut Gpt2TaskTrainer| -> Result<Option<Map<String, Value>>> {
        let (Some(rows), Some(gold)) = (&eval_rows, &eval_ids) else {
            return Ok(None);
        };
        let r = eval_gpt2_classify(&mut m.model, rows, gold, eval_bs)?;
        Ok(Some(classify_row(&r)))
    };
    let description = format!(
        "classify (GPT-2, lm_coef {}): {} labels ({}), {} train examples",
        opts.lm_coef,
        labels.num_labels(),
        labels.names().join(", "),
        train_rows.len()
    );
    let save =
        |t: &Gpt2TaskTrainer, dir: &Path| save_gpt2(&t.model, arch, &tok, opts.max_shard_size, dir);
    run_loop(
        &mut trainer,
        train_rows.len(),
        opts,
        &mut batch,
        &mut fill,
        &mut evaluate,
        &save,
        description,
        eval_rows.as_ref().map_or(0, Vec::len),
        job,
        on_event,
    )
}

/// Fine-tunes `BertForTokenClassification` (HF run_ner: tags on the first
/// word piece of each word, seqeval entity scores after every epoch) from
/// the BERT checkpoint in `model_dir`. Tags come from the checkpoint when it
/// is already a token classifier (its `id2label`), else from the training
/// file (sorted).
fn finetune_token_classify(
    model_dir: &Path,
    train: &Path,
    eval: Option<&Path>,
    output: &Path,
    opts: &FinetuneOptions,
    comm: &dyn Communicator,
    on_event: &mut dyn FnMut(FinetuneEvent),
) -> Result<FinetuneSummary> {
    let job = Job::start(
        FinetuneTask::TokenClassify,
        model_dir,
        train,
        eval,
        output,
        opts,
        comm,
    )?;
    let AnyConfig::Bert(mut config) = task_config(model_dir, Family::Bert, "token-classify")?
    else {
        unreachable!("task_config checked the family")
    };
    let tok = WordPieceTokenizer::from_dir(model_dir)?;
    check_fits(model_dir, &tok, &config, false)?;
    let train_data = read_tagging(train)?;
    let is_tagger = config
        .architectures
        .iter()
        .any(|a| a == Architecture::BertForTokenClassification.hf_name());
    let labels = if is_tagger {
        LabelMap::from_names(config.id2label.clone())?
    } else {
        tag_map(&train_data)?
    };
    config.id2label = labels.names().to_vec();
    let eval_data = eval.map(read_tagging).transpose()?;
    let max_len = opts.max_seq_len.min(config.max_position_embeddings);
    let train_encs = encode_sentences(&tok, &train_data, &labels, max_len)?;
    let eval_encs = eval_data
        .as_ref()
        .map(|d| encode_sentences(&tok, d, &labels, max_len))
        .transpose()?;
    let (model, _) = load_bert_as(
        model_dir,
        config,
        Architecture::BertForTokenClassification,
        opts.seed,
    )?;
    let pad = tok.pad_id();
    let mut trainer = BertTrainer::new(model)?;
    let mut batch = BertTrainBatch::default();
    let mut fill = |idx: &[usize], bt: &mut BertTrainBatch| {
        let refs: Vec<&Encoding> = idx.iter().map(|&i| &train_encs[i].encoding).collect();
        bt.batch = pad_batch(&refs, pad).expect("valid batch");
        let t = bt.batch.t;
        let mut labels = Vec::with_capacity(idx.len() * t);
        for &i in idx {
            let l = &train_encs[i].labels;
            labels.extend_from_slice(l);
            labels.extend(std::iter::repeat_n(IGNORE_INDEX, t - l.len()));
        }
        bt.targets = BertTargets {
            token_labels: Some(labels),
            ..Default::default()
        };
    };
    let eval_bs = opts.eval_batch_size;
    let mut evaluate = |m: &mut BertTrainer| -> Result<Option<Map<String, Value>>> {
        let Some(encs) = &eval_encs else {
            return Ok(None);
        };
        let r = eval_token_classify(&m.model, pad, encs, eval_bs)?;
        Ok(Some(object(json!({
            "eval_loss": r.loss,
            "eval_precision": r.scores.precision,
            "eval_recall": r.scores.recall,
            "eval_f1": r.scores.f1,
            "eval_accuracy": r.scores.accuracy,
            "eval_examples": encs.len(),
        }))))
    };
    let description = format!(
        "token-classify: {} tags ({}), {} train sentences",
        labels.num_labels(),
        labels.names().join(", "),
        train_encs.len()
    );
    let arch = Architecture::BertForTokenClassification;
    let save =
        |t: &BertTrainer, dir: &Path| save_bert(&t.model, arch, &tok, opts.max_shard_size, dir);
    run_loop(
        &mut trainer,
        train_encs.len(),
        opts,
        &mut batch,
        &mut fill,
        &mut evaluate,
        &save,
        description,
        eval_encs.as_ref().map_or(0, Vec::len),
        job,
        on_event,
    )
}

/// Fine-tunes a multiple-choice model from the checkpoint in `model_dir`
/// (the family is read from its config.json) on [`read_multiple_choice`]
/// data, `batch_size` examples of K choices per step:
/// `BertForMultipleChoice` from a BERT (HF run_swag: each choice the pair
/// (context, question + choice), the pooled `[CLS]` of each scored by
/// `classifier` [1, C], cross-entropy over the K scores), or
/// `GPT2DoubleHeadsModel` from a GPT-2 (see [`finetune_gpt2_multiple_choice`]).
/// The evaluation file may have another K than the training file.
fn finetune_multiple_choice(
    model_dir: &Path,
    train: &Path,
    eval: Option<&Path>,
    output: &Path,
    opts: &FinetuneOptions,
    comm: &dyn Communicator,
    on_event: &mut dyn FnMut(FinetuneEvent),
) -> Result<FinetuneSummary> {
    let job = Job::start(
        FinetuneTask::MultipleChoice,
        model_dir,
        train,
        eval,
        output,
        opts,
        comm,
    )?;
    let config = match read_config(model_dir, None)? {
        AnyConfig::Bert(c) => c,
        AnyConfig::Gpt2(c) => {
            return finetune_gpt2_multiple_choice(model_dir, c, train, eval, job, opts, on_event)
        }
    };
    let arch = Architecture::BertForMultipleChoice;
    // A sequence classifier's `classifier` has one row per label; this head
    // has one score per choice: said plainly rather than as a shape mismatch.
    let (_, file) = open_model_dir_for(model_dir, None)?;
    if let Some(shape) = file
        .shape("classifier.weight")
        .filter(|s| s.first() != Some(&1))
    {
        return Err(invalid(format!(
            "{}: its classifier.weight has shape {shape:?} (a sequence classifier's); multiple \
             choice scores each choice with one output [1, hidden]: start from the encoder it \
             was fine-tuned from, or a BertForMultipleChoice checkpoint",
            model_dir.display()
        )));
    }
    let tok = WordPieceTokenizer::from_dir(model_dir)?;
    check_fits(model_dir, &tok, &config, true)?;
    let train_data = read_multiple_choice(train)?;
    let eval_data = eval.map(read_multiple_choice).transpose()?;
    let max_len = opts.max_seq_len.min(config.max_position_embeddings);
    let (model, _) = load_bert_as(model_dir, config, arch, opts.seed)?;
    let train_encs = encode_multiple_choice(&tok, &train_data, max_len)?;
    let eval_encs = eval_data
        .as_ref()
        .map(|d| encode_multiple_choice(&tok, d, max_len))
        .transpose()?;
    let (k, gold) = (train_data.num_choices, train_data.labels());
    let pad = tok.pad_id();
    let mut trainer = BertTrainer::new(model)?;
    let mut batch = BertTrainBatch::default();
    let mut fill = |idx: &[usize], bt: &mut BertTrainBatch| {
        // [B, K, T] as [B·K, T]: each example's K choices in order.
        let refs: Vec<&Encoding> = idx
            .iter()
            .flat_map(|&i| &train_encs[i * k..(i + 1) * k])
            .collect();
        bt.batch = pad_batch(&refs, pad).expect("valid batch");
        bt.targets = BertTargets {
            choice_labels: Some(idx.iter().map(|&i| gold[i] as i32).collect()),
            ..Default::default()
        };
    };
    let eval_bs = opts.eval_batch_size;
    let mut evaluate = |m: &mut BertTrainer| -> Result<Option<Map<String, Value>>> {
        let (Some(encs), Some(d)) = (&eval_encs, &eval_data) else {
            return Ok(None);
        };
        let r = eval_multiple_choice(&m.model, pad, encs, d.num_choices, &d.labels(), eval_bs)?;
        Ok(Some(choice_row(&r)))
    };
    let description = format!(
        "multiple-choice: {k} choices, {} train examples ({} sequences of ≤ {max_len} tokens)",
        train_data.examples.len(),
        train_encs.len()
    );
    let save =
        |t: &BertTrainer, dir: &Path| save_bert(&t.model, arch, &tok, opts.max_shard_size, dir);
    run_loop(
        &mut trainer,
        train_data.examples.len(),
        opts,
        &mut batch,
        &mut fill,
        &mut evaluate,
        &save,
        description,
        eval_data.as_ref().map_or(0, |d| d.examples.len()),
        job,
        on_event,
    )
}

/// A metrics row from a `json!({...})` object.
fn object(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => unreachable!("metrics rows are written as JSON objects"),
    }
}

/// The metrics row of a classification evaluation (both families).
fn classify_row(r: &ClassifyEval) -> Map<String, Value> {
    object(json!({
        "eval_loss": r.loss,
        "eval_accuracy": r.scores.accuracy,
        "eval_f1": r.scores.f1,
        "eval_examples": r.scores.count,
    }))
}

/// The metrics row of a multiple-choice evaluation.
fn choice_row(r: &ChoiceEval) -> Map<String, Value> {
    object(json!({
        "eval_loss": r.loss,
        "eval_accuracy": r.accuracy,
        "eval_examples": r.count,
    }))
}

/// `finetune_multiple_choice` for GPT-2 (GPT-1 §3.2's input transformation
/// for multiple choice): each choice is the sequence `context question
/// <|endoftext|> choice` ([`encode_choice`](crate::models::gpt2::classify::encode_choice)),
/// the multiple-choice head
/// (`multiple_choice_head.summary` [1, C] + [1], new ones N(0,
/// initializer_range) and 0 as HF initialises them) scores its last token
/// (`mc_token_ids`), softmax over the K choices; the loss adds `lm_coef`
/// times the LM loss on the same sequences (GPT-1's λ). Saved as
/// `GPT2DoubleHeadsModel` with `pad_token_id` (`<|endoftext|>` unless the
/// config names one) and `num_labels` 1, as HF has it.
fn finetune_gpt2_multiple_choice(
    model_dir: &Path,
    mut config: crate::spec::config::Gpt2Config,
    train: &Path,
    eval: Option<&Path>,
    job: Job,
    opts: &FinetuneOptions,
    on_event: &mut dyn FnMut(FinetuneEvent),
) -> Result<FinetuneSummary> {
    let arch = Architecture::Gpt2DoubleHeadsModel;
    if !(opts.lm_coef >= 0.0 && opts.lm_coef.is_finite()) {
        return Err(invalid(format!(
            "`lm_coef` {} must be a finite number >= 0",
            opts.lm_coef
        )));
    }
    let tok = BpeTokenizer::from_dir(model_dir)?;
    check_vocab(tok.vocab_size(), config.vocab_size)?;
    let eos = tok.endoftext_id().ok_or_else(|| {
        invalid("the tokenizer has no <|endoftext|> token (the choice delimiter and padding)")
    })?;
    let pad = *config.pad_token_id.get_or_insert(eos);
    for (what, id) in [("pad_token_id", pad), ("<|endoftext|>", eos)] {
        if id as usize >= config.vocab_size {
            return Err(invalid(format!(
                "{what} {id} is outside the model's vocabulary of {}",
                config.vocab_size
            )));
        }
    }
    // HF's GPT2DoubleHeadsModel: one score per choice.
    config.set_num_labels(1);
    let train_data = read_multiple_choice(train)?;
    let eval_data = eval.map(read_multiple_choice).transpose()?;
    let (_, file) = open_model_dir_for(model_dir, Some((Family::Gpt2, arch.hf_name())))?;
    let layout = gpt2_layout_for(&config, arch)?;
    let mut params = layout.try_zeros()?;
    let report = load_params(
        &layout,
        &mut params,
        &file,
        Family::Gpt2,
        LoadOptions {
            allow_missing_heads: true,
            ignore_unused_heads: true,
        },
    )?;
    if report.missing_heads.iter().any(|n| n == "lm_head.weight") {
        return Err(invalid(format!(
            "{}: the model has tie_word_embeddings false but no lm_head.weight, which \
             GPT2DoubleHeadsModel keeps",
            model_dir.display()
        )));
    }
    let mut rng = Rng::derive(opts.seed, 0x4845_4144); // "HEAD"
    for name in &report.missing_heads {
        if let Some(r) = layout.range(name) {
            let weight = name.ends_with(".weight");
            for x in &mut params[r] {
                *x = if weight {
                    (rng.normal() * config.initializer_range) as f32
                } else {
                    0.0
                };
            }
        }
    }
    let model = Gpt2::from_params_for(config, arch, params)?;
    let t = opts.max_seq_len.min(model.config.n_positions);
    let train_rows = encode_gpt2_multiple_choice(&tok, &train_data, t, eos);
    let eval_rows = eval_data
        .as_ref()
        .map(|d| encode_gpt2_multiple_choice(&tok, d, t, eos));
    let (k, gold) = (train_data.num_choices, train_data.labels());
    let mut trainer = Gpt2TaskTrainer {
        model,
        lm_coef: opts.lm_coef,
    };
    let mut batch = Gpt2TaskBatch::default();
    let mut fill = |idx: &[usize], bt: &mut Gpt2TaskBatch| {
        let refs: Vec<&[u32]> = idx
            .iter()
            .flat_map(|&i| &train_rows[i * k..(i + 1) * k])
            .map(Vec::as_slice)
            .collect();
        *bt = task_batch(&refs, pad, idx.iter().map(|&i| gold[i] as u32).collect(), k);
    };
    let eval_bs = opts.eval_batch_size;
    let mut evaluate = |m: &mut Gpt2TaskTrainer| -> Result<Option<Map<String, Value>>> {
        let (Some(rows), Some(d)) = (&eval_rows, &eval_data) else {
            return Ok(None);
        };
        let r = eval_gpt2_multiple_choice(&mut m.model, rows, d.num_choices, &d.labels(), eval_bs)?;
        Ok(Some(choice_row(&r)))
    };
    let description = format!(
        "multiple-choice (GPT-2, lm_coef {}): {k} choices, {} train examples ({} sequences of ≤ {t} tokens)",
        opts.lm_coef,
        train_data.examples.len(),
        train_rows.len()
    );
    let save =
        |t: &Gpt2TaskTrainer, dir: &Path| save_gpt2(&t.model, arch, &tok, opts.max_shard_size, dir);
    run_loop(
        &mut trainer,
        train_data.examples.len(),
        opts,
        &mut batch,
        &mut fill,
        &mut evaluate,
        &save,
        description,
        eval_data.as_ref().map_or(0, |d| d.examples.len()),
        job,
        on_event,
    )
}

/// One training window of a SQuAD question (HF run_qa's `prepare_train_features`).
#[derive(Debug, Clone, PartialEq)]
pub struct QaFeature {
    pub encoding: Encoding,
    /// Answer token span (inclusive), or (0, 0) = `[CLS]` when the window
    /// does not contain the whole answer.
    pub start: usize,
    pub end: usize,
}

/// Windows of `max_len` tokens (stride `stride`) for every question with
/// start/end labels from its first answer; a question whose answer text is
/// not at its `answer_start` is an error naming the entry.
pub fn qa_train_features(
    tok: &WordPieceTokenizer,
    examples: &[SquadExample],
    max_len: usize,
    stride: usize,
) -> Result<Vec<QaFeature>> {
    let mut out = Vec::new();
    for ex in examples {
        let ans = ex
            .answers
            .first()
            .ok_or_else(|| invalid(format!("{}: a training question needs an answer", ex.entry)))?;
        let s = ans.byte_start.ok_or_else(|| {
            invalid(format!(
                "{}: answer {:?} is not at answer_start {} of the context",
                ex.entry, ans.text, ans.char_start
            ))
        })?;
        let e = s + ans.text.len();
        let wins = tok
            .encode_pair_windows(&ex.question, &ex.context, max_len, stride)
            .map_err(|err| invalid(format!("{}: {err}", ex.entry)))?;
        for w in wins {
            let ctx = w.context_range();
            let enc = w.encoding;
            let (mut start, mut end) = (0, 0);
            if !ctx.is_empty() {
                let (first, last) = (ctx.start, ctx.end - 1);
                if enc.offsets[first].0 <= s && enc.offsets[last].1 >= e {
                    // As HF: the last token starting at or before the answer
                    // start, the first token ending at or after its end.
                    let mut i = first;
                    while i <= last && enc.offsets[i].0 <= s {
                        i += 1;
                    }
                    start = i - 1;
                    let mut j = last + 1;
                    while j > first && enc.offsets[j - 1].1 >= e {
                        j -= 1;
                    }
                    end = j;
                }
            }
            out.push(QaFeature {
                encoding: enc,
                start,
                end,
            });
        }
    }
    Ok(out)
}

/// Fine-tunes `BertForQuestionAnswering` on SQuAD v1.1 data.
fn finetune_qa(
    model_dir: &Path,
    train: &Path,
    eval: Option<&Path>,
    output: &Path,
    opts: &FinetuneOptions,
    comm: &dyn Communicator,
    on_event: &mut dyn FnMut(FinetuneEvent),
) -> Result<FinetuneSummary> {
    let job = Job::start(FinetuneTask::Qa, model_dir, train, eval, output, opts, comm)?;
    let AnyConfig::Bert(config) = task_config(model_dir, Family::Bert, "qa")? else {
        unreachable!("task_config checked the family")
    };
    if opts.doc_stride >= opts.max_seq_len {
        return Err(invalid(format!(
            "`doc_stride` {} must be smaller than `max_seq_len` {}",
            opts.doc_stride, opts.max_seq_len
        )));
    }
    let tok = WordPieceTokenizer::from_dir(model_dir)?;
    check_fits(model_dir, &tok, &config, true)?;
    let max_len = opts.max_seq_len.min(config.max_position_embeddings);
    let train_ex = read_squad(train)?;
    let eval_ex = eval.map(read_squad).transpose()?;
    let mut plain = tok.clone();
    plain.set_padding(None);
    plain.set_truncation(None);
    let feats = qa_train_features(&plain, &train_ex, max_len, opts.doc_stride)?;
    let (model, _) = load_bert_as(
        model_dir,
        config,
        Architecture::BertForQuestionAnswering,
        opts.seed,
    )?;
    let pad = tok.pad_id();
    let mut trainer = BertTrainer::new(model)?;
    let mut batch = BertTrainBatch::default();
    let mut fill = |idx: &[usize], bt: &mut BertTrainBatch| {
        let refs: Vec<&Encoding> = idx.iter().map(|&i| &feats[i].encoding).collect();
        bt.batch = pad_batch(&refs, pad).expect("valid batch");
        bt.targets = BertTargets {
            start_positions: Some(idx.iter().map(|&i| feats[i].start as i32).collect()),
            end_positions: Some(idx.iter().map(|&i| feats[i].end as i32).collect()),
            ..Default::default()
        };
    };
    let qa_opts = QaOptions {
        top_k: opts.n_best.max(1),
        max_answer_len: opts.max_answer_len,
        handle_impossible_answer: false,
    };
    let (stride, eval_bs) = (opts.doc_stride, opts.eval_batch_size);
    let mut evaluate = |m: &mut BertTrainer| -> Result<Option<Map<String, Value>>> {
        let Some(ex) = &eval_ex else {
            return Ok(None);
        };
        let r = eval_squad(&m.model, &plain, ex, max_len, stride, qa_opts, eval_bs)?;
        Ok(Some(object(json!({
            "exact_match": r.scores.exact_match,
            "f1": r.scores.f1,
            "eval_examples": r.scores.total,
        }))))
    };
    let description = format!(
        "qa: {} questions → {} windows of ≤ {max_len} tokens (stride {})",
        train_ex.len(),
        feats.len(),
        opts.doc_stride
    );
    let arch = Architecture::BertForQuestionAnswering;
    let save =
        |t: &BertTrainer, dir: &Path| save_bert(&t.model, arch, &tok, opts.max_shard_size, dir);
    run_loop(
        &mut trainer,
        feats.len(),
        opts,
        &mut batch,
        &mut fill,
        &mut evaluate,
        &save,
        description,
        eval_ex.as_ref().map_or(0, Vec::len),
        job,
        on_event,
    )
}

/// GPT-2 blocks of a text file: documents (form-feed separated, or JSONL
/// `text`) each preceded by `<|endoftext|>`, concatenated, cut into
/// `T + 1`-token windows at stride T.
fn lm_blocks(path: &Path, tok: &BpeTokenizer, t: usize) -> Result<Vec<Vec<u32>>> {
    let docs = crate::data::nsp::read_documents(&[path.to_path_buf()])?;
    let eos = tok
        .endoftext_id()
        .ok_or_else(|| invalid("the tokenizer has no <|endoftext|> token"))?;
    let mut ids = Vec::new();
    for d in &docs {
        ids.push(eos);
        ids.extend(tok.encode_ordinary(d.as_bytes()));
    }
    let blocks: Vec<Vec<u32>> = (0..ids.len().saturating_sub(1) / t)
        .map(|k| ids[k * t..k * t + t + 1].to_vec())
        .collect();
    if blocks.is_empty() {
        return Err(invalid(format!(
            "{}: {} tokens, fewer than one block of {}+1",
            path.display(),
            ids.len(),
            t
        )));
    }
    Ok(blocks)
}

/// Causal-LM fine-tuning of a GPT-2 checkpoint (HF `run_clm`: text grouped
/// into blocks of `max_seq_len`).
fn finetune_lm(
    model_dir: &Path,
    train: &Path,
    eval: Option<&Path>,
    output: &Path,
    opts: &FinetuneOptions,
    comm: &dyn Communicator,
    on_event: &mut dyn FnMut(FinetuneEvent),
) -> Result<FinetuneSummary> {
    let job = Job::start(FinetuneTask::Lm, model_dir, train, eval, output, opts, comm)?;
    let AnyConfig::Gpt2(config) = task_config(model_dir, Family::Gpt2, "lm")? else {
        unreachable!("task_config checked the family")
    };
    let tok = BpeTokenizer::from_dir(model_dir)?;
    check_vocab(tok.vocab_size(), config.vocab_size)?;
    let t = opts.max_seq_len.min(config.n_positions);
    let pre = load_pretrained(
        &model_dir.display().to_string(),
        Some(Architecture::Gpt2LMHeadModel),
        LoadOptions::default(),
    )?;
    let params = pre.params;
    let mut model = Gpt2::from_params(config, params)?;
    let train_blocks = lm_blocks(train, &tok, t)?;
    let eval_blocks = eval.map(|p| lm_blocks(p, &tok, t)).transpose()?;
    let b = opts.batch_size;
    let mut batch = TokenBatch::new(b, t);
    let mut fill = |idx: &[usize], bt: &mut TokenBatch| {
        *bt = TokenBatch::new(idx.len(), t);
        for (r, &i) in idx.iter().enumerate() {
            let blk = &train_blocks[i];
            bt.inputs[r * t..(r + 1) * t].copy_from_slice(&blk[..t]);
            for k in 0..t {
                bt.targets[r * t + k] = blk[k + 1] as i32;
            }
        }
    };
    let eval_bs = opts.eval_batch_size;
    let mut evaluate = |m: &mut Gpt2| -> Result<Option<Map<String, Value>>> {
        let Some(blocks) = &eval_blocks else {
            return Ok(None);
        };
        let mut total = LossParts::default();
        for chunk in blocks.chunks(eval_bs) {
            let mut bt = TokenBatch::new(chunk.len(), t);
            for (r, blk) in chunk.iter().enumerate() {
                bt.inputs[r * t..(r + 1) * t].copy_from_slice(&blk[..t]);
                for k in 0..t {
                    bt.targets[r * t + k] = blk[k + 1] as i32;
                }
            }
            debug_assert!(bt.targets.iter().all(|&x| x != IGNORE_INDEX));
            total.add(m.evaluate(&bt)?);
        }
        let loss = total.mean();
        Ok(Some(object(
            json!({"eval_loss": loss, "eval_ppl": loss.exp(), "eval_tokens": total.count}),
        )))
    };
    let description = format!(
        "lm: {} blocks of {t} tokens, GPT-2 {} layers d {}",
        train_blocks.len(),
        model.config.n_layer,
        model.config.n_embd
    );
    let save = |m: &Gpt2, dir: &Path| {
        save_gpt2(
            m,
            Architecture::Gpt2LMHeadModel,
            &tok,
            opts.max_shard_size,
            dir,
        )
    };
    run_loop(
        &mut model,
        train_blocks.len(),
        opts,
        &mut batch,
        &mut fill,
        &mut evaluate,
        &save,
        description,
        eval_blocks.as_ref().map_or(0, Vec::len),
        job,
        on_event,
    )
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
