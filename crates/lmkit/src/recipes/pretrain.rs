//! Pretraining from the user's text, both families, one entry point:
//! [`pretrain`] resolves [`PretrainOptions`] (each family's defaults; on
//! `resume`, the checkpoint's values, and an error where a given value would
//! break an exact resume) and runs GPT-2 causal-LM pretraining
//! ([`super::gpt2_pretrain`]) or BERT MLM + NSP pretraining
//! ([`super::bert_pretrain`]).
//!
//! OUTPUT holds `metrics.jsonl`, `checkpoints/step-N/` (HF model, tokenizer,
//! optimizer moments and trainer state; the newest `keep` are kept), GPT-2's
//! token shards in `data/`, and at the end the final model in HF layout.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::bert_pretrain::{run_bert_pretraining, BertDims, BertPretrainOptions, BertRunConfig};
use super::{gpt2_pretrain, invalid, Result};
use crate::spec::names::Family;
use crate::spec::optim::{LrSchedule, OptimConfig, ScheduleKind};
use crate::train::{latest_checkpoint, load_train_state, RunEvent, TrainState};

/// Progress reports to the caller (the CLI draws bars and prints lines).
#[derive(Debug)]
pub enum PretrainEvent<'a> {
    /// Tokenizing the data into shards: bytes done of total.
    Tokenizing {
        done: u64,
        total: u64,
    },
    Start {
        message: String,
        start_step: u64,
        max_steps: u64,
    },
    Step {
        row: &'a Map<String, Value>,
    },
    Eval {
        row: &'a Map<String, Value>,
    },
    /// A generated sample (GPT-2), prompt included.
    Sample {
        step: u64,
        text: &'a str,
    },
    Saved {
        path: &'a Path,
    },
    Note(String),
}

/// The outcome of a run.
pub type PretrainSummary = crate::train::RunSummary;

impl<'a> From<RunEvent<'a>> for PretrainEvent<'a> {
    fn from(e: RunEvent<'a>) -> Self {
        match e {
            RunEvent::Step { row } => PretrainEvent::Step { row },
            RunEvent::Eval { row } => PretrainEvent::Eval { row },
            RunEvent::Text { step, text } => PretrainEvent::Sample { step, text },
            RunEvent::Saved { path } => PretrainEvent::Saved { path },
            RunEvent::Note(n) => PretrainEvent::Note(n),
        }
    }
}

/// The size of a new model: a preset, optionally overridden per dimension.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ModelSize {
    /// One of [`GPT2_PRESETS`] (both families) or [`BERT_PRESETS`].
    pub preset: Option<String>,
    pub n_layer: Option<usize>,
    pub n_embd: Option<usize>,
    pub n_head: Option<usize>,
    pub n_positions: Option<usize>,
}

impl ModelSize {
    /// Whether any dimension was given.
    pub fn given(&self) -> bool {
        self.preset.is_some()
            || self.n_layer.is_some()
            || self.n_embd.is_some()
            || self.n_head.is_some()
            || self.n_positions.is_some()
    }
}

/// Model sizes: (name, n_layer, n_embd, n_head, n_positions).
pub const GPT2_PRESETS: &[(&str, usize, usize, usize, usize)] = &[
    ("gpt2", 12, 768, 12, 1024),
    ("gpt2-medium", 24, 1024, 16, 1024),
    ("gpt2-large", 36, 1280, 20, 1024),
    ("gpt2-xl", 48, 1600, 25, 1024),
    ("tiny", 2, 64, 4, 256),
    ("mini", 4, 256, 4, 512),
    ("small", 6, 384, 6, 1024),
];

/// BERT sizes beyond the small shared ones of [`GPT2_PRESETS`].
pub const BERT_PRESETS: &[(&str, usize, usize, usize, usize)] = &[
    ("bert-base", 12, 768, 12, 512),
    ("bert-large", 24, 1024, 16, 512),
];

/// Everything a pretraining run can be told. `None` means: on `resume` the
/// checkpoint's value, otherwise the family's default (GPT-2 as nanoGPT:
/// lr 6e-4 cosine to lr/10, β2 0.95, weight decay 0.1; BERT as the paper:
/// lr 1e-4 linear to 0, β2 0.999, weight decay 0.01).
#[derive(Debug, Clone, PartialEq)]
pub struct PretrainOptions {
    pub family: Family,
    /// Text files, folders or JSONL files (`text` field). GPT-2 with
    /// `resume`: defaults to the shards already in OUTPUT/data.
    pub data: Vec<PathBuf>,
    pub output: PathBuf,
    /// Tokenizer folder (BPE for GPT-2, WordPiece for BERT); not needed with
    /// `resume` or `init_from`.
    pub tokenizer: Option<PathBuf>,
    /// Start from this HF checkpoint folder.
    pub init_from: Option<PathBuf>,
    /// Continue the newest checkpoint in OUTPUT/checkpoints, exactly.
    pub resume: bool,
    /// Stop (with a checkpoint) after this many steps of this invocation.
    pub stop_after: Option<u64>,
    pub size: ModelSize,
    pub seq_len: Option<usize>,
    pub batch_size: Option<usize>,
    pub grad_accum: Option<usize>,
    pub max_steps: Option<u64>,
    pub lr: Option<f32>,
    pub min_lr: Option<f32>,
    pub warmup_steps: Option<u64>,
    pub schedule: Option<ScheduleKind>,
    pub weight_decay: Option<f32>,
    pub beta1: Option<f32>,
    pub beta2: Option<f32>,
    pub grad_clip: Option<f32>,
    pub eval_every: Option<u64>,
    pub eval_batches: Option<usize>,
    pub val_fraction: Option<f64>,
    pub save_every: Option<u64>,
    pub keep: Option<usize>,
    pub log_every: Option<u64>,
    pub seed: Option<u64>,
    /// Also decay the embeddings.
    pub decay_embeddings: bool,
    /// BERT: mask whole words together.
    pub whole_word_masking: bool,
    /// GPT-2: a sample every N steps (0 = never; default `eval_every`).
    pub sample_every: Option<u64>,
    pub sample_prompt: Option<String>,
    pub sample_tokens: Option<usize>,
}

impl Default for PretrainOptions {
    fn default() -> Self {
        PretrainOptions {
            family: Family::Gpt2,
            data: Vec::new(),
            output: PathBuf::new(),
            tokenizer: None,
            init_from: None,
            resume: false,
            stop_after: None,
            size: ModelSize::default(),
            seq_len: None,
            batch_size: None,
            grad_accum: None,
            max_steps: None,
            lr: None,
            min_lr: None,
            warmup_steps: None,
            schedule: None,
            weight_decay: None,
            beta1: None,
            beta2: None,
            grad_clip: None,
            eval_every: None,
            eval_batches: None,
            val_fraction: None,
            save_every: None,
            keep: None,
            log_every: None,
            seed: None,
            decay_embeddings: false,
            whole_word_masking: false,
            sample_every: None,
            sample_prompt: None,
            sample_tokens: None,
        }
    }
}

/// Runs (or continues) the pretraining `o` describes. `should_stop` is
/// polled after every step: when it says so the run saves a checkpoint and
/// returns with `interrupted` set.
pub fn pretrain(
    o: &PretrainOptions,
    on_event: &mut dyn FnMut(PretrainEvent),
    should_stop: &dyn Fn() -> bool,
) -> Result<PretrainSummary> {
    match o.family {
        Family::Gpt2 => {
            if o.whole_word_masking {
                return Err(invalid("`whole_word_masking` applies to BERT only"));
            }
            gpt2_pretrain::run(o, on_event, should_stop)
        }
        Family::Bert => run_bert(o, on_event, should_stop),
    }
}

/// Whether OUTPUT holds a checkpoint a `resume` would continue.
pub fn has_checkpoint(output: &Path) -> Result<bool> {
    Ok(latest_checkpoint(&output.join("checkpoints"))?.is_some())
}

/// The trainer state of the newest checkpoint under OUTPUT when resuming
/// (`None` when not resuming); an error when resuming from nothing, or when
/// not resuming over an existing run.
pub(crate) fn saved_state(o: &PretrainOptions) -> Result<Option<(PathBuf, TrainState)>> {
    let root = o.output.join("checkpoints");
    let latest = latest_checkpoint(&root)?;
    if !o.resume {
        if let Some(d) = latest {
            return Err(invalid(format!(
                "{} already holds a checkpoint ({}); pass `resume` to continue it or choose another `output`",
                o.output.display(),
                d.display()
            )));
        }
        return Ok(None);
    }
    let dir = latest.ok_or_else(|| {
        invalid(format!(
            "`resume`: no checkpoint in {} to resume from",
            root.display()
        ))
    })?;
    let (state, _) = load_train_state(&dir)?;
    Ok(Some((dir, state)))
}

/// A value that an exact resume must keep: the given one, else the saved
/// one, else `default`; a given value that differs from the saved one is an
/// error naming the option.
pub(crate) fn pick<T: PartialEq + Copy + std::fmt::Debug>(
    name: &str,
    given: Option<T>,
    saved: Option<T>,
    default: T,
) -> Result<T> {
    match (given, saved) {
        (Some(g), Some(s)) if g != s => Err(invalid(format!(
            "`{name}` {g:?} differs from the checkpoint's {s:?}; an exact resume needs the same value"
        ))),
        (g, s) => Ok(g.or(s).unwrap_or(default)),
    }
}

/// `(n_layer, n_embd, n_head, n_positions)` of a preset of `family`.
pub fn preset(family: Family, name: &str) -> Result<(usize, usize, usize, usize)> {
    let bert_only = BERT_PRESETS.iter().find(|p| p.0 == name);
    let shared = GPT2_PRESETS.iter().find(|p| p.0 == name);
    let found = match family {
        Family::Gpt2 => shared,
        Family::Bert if name.starts_with("gpt2") => {
            return Err(invalid(format!(
                "`preset` {name} is a GPT-2 size; for BERT use tiny, mini, small, bert-base or bert-large"
            )))
        }
        Family::Bert => bert_only.or(shared),
    };
    found.map(|p| (p.1, p.2, p.3, p.4)).ok_or_else(|| {
        let mut names: Vec<&str> = GPT2_PRESETS.iter().map(|p| p.0).collect();
        if family == Family::Bert {
            names.retain(|n| !n.starts_with("gpt2"));
            names.extend(BERT_PRESETS.iter().map(|p| p.0));
        }
        invalid(format!(
            "unknown preset `{name}` (known: {})",
            names.join(", ")
        ))
    })
}

/// The optimizer settings: given values, else the saved ones, else `d`.
pub(crate) fn optim_config(
    o: &PretrainOptions,
    saved: Option<&OptimConfig>,
    d: &OptimConfig,
    max_steps: u64,
    grad_accum: usize,
) -> OptimConfig {
    let lr =
        o.lr.or(saved.map(|s| s.schedule.max_lr))
            .unwrap_or(d.schedule.max_lr);
    // The default floor follows the peak (nanoGPT: lr / 10; BERT: 0).
    let default_min = d.schedule.min_lr / d.schedule.max_lr * lr;
    OptimConfig {
        schedule: LrSchedule {
            kind: o
                .schedule
                .or(saved.map(|s| s.schedule.kind))
                .unwrap_or(d.schedule.kind),
            max_lr: lr,
            min_lr: o
                .min_lr
                .or(saved.map(|s| s.schedule.min_lr))
                .unwrap_or(default_min),
            warmup_steps: o
                .warmup_steps
                .or(saved.map(|s| s.schedule.warmup_steps))
                .unwrap_or((max_steps / 20).min(200)),
            total_steps: max_steps,
        },
        beta1: o.beta1.or(saved.map(|s| s.beta1)).unwrap_or(d.beta1),
        beta2: o.beta2.or(saved.map(|s| s.beta2)).unwrap_or(d.beta2),
        eps: saved.map_or(d.eps, |s| s.eps),
        weight_decay: o
            .weight_decay
            .or(saved.map(|s| s.weight_decay))
            .unwrap_or(d.weight_decay),
        grad_clip: o
            .grad_clip
            .or(saved.map(|s| s.grad_clip))
            .unwrap_or(d.grad_clip),
        grad_accum,
    }
}

/// BERT: resolve the options into the BERT recipe's own and run it.
fn run_bert(
    o: &PretrainOptions,
    on_event: &mut dyn FnMut(PretrainEvent),
    should_stop: &dyn Fn() -> bool,
) -> Result<PretrainSummary> {
    if o.sample_every.is_some() || o.sample_prompt.is_some() || o.sample_tokens.is_some() {
        return Err(invalid(
            "`sample_every`/`sample_prompt`/`sample_tokens` generate text: GPT-2 only",
        ));
    }
    let saved = saved_state(o)?.map(|(_, s)| s);
    let sr: Option<BertRunConfig> = saved
        .as_ref()
        .and_then(|s| serde_json::from_value(s.extra["run"].clone()).ok());
    let sr = sr.as_ref();
    let so = saved.as_ref().map(|s| &s.optim);
    let seq_len = pick("seq_len", o.seq_len, sr.map(|r| r.seq_len), 128)?;
    let max_steps = o.max_steps.or(sr.map(|r| r.max_steps)).unwrap_or(1000);
    let run = BertRunConfig {
        seq_len,
        batch_size: pick("batch_size", o.batch_size, sr.map(|r| r.batch_size), 8)?,
        grad_accum: pick("grad_accum", o.grad_accum, sr.map(|r| r.grad_accum), 1)?,
        seed: pick("seed", o.seed, sr.map(|r| r.seed), 1337)?,
        whole_word_masking: o.whole_word_masking || sr.is_some_and(|r| r.whole_word_masking),
        short_seq_prob: sr.map_or(0.1, |r| r.short_seq_prob),
        val_fraction: pick(
            "val_fraction",
            o.val_fraction,
            sr.map(|r| r.val_fraction),
            0.05,
        )?,
        max_steps,
        eval_every: o.eval_every.or(sr.map(|r| r.eval_every)).unwrap_or(100),
        eval_batches: o.eval_batches.or(sr.map(|r| r.eval_batches)).unwrap_or(20),
        save_every: o.save_every.or(sr.map(|r| r.save_every)).unwrap_or(500),
        keep: o.keep.or(sr.map(|r| r.keep)).unwrap_or(2).max(1),
        log_every: o.log_every.or(sr.map(|r| r.log_every)).unwrap_or(1).max(1),
    };
    let dims = if o.size.given() {
        let s = &o.size;
        let (l, c, h, p) = match &s.preset {
            Some(name) => preset(Family::Bert, name)?,
            None => {
                if s.n_layer.is_none() || s.n_embd.is_none() || s.n_head.is_none() {
                    return Err(invalid(
                        "give `preset`, or all of `n_layer`, `n_embd` and `n_head`",
                    ));
                }
                (0, 0, 0, seq_len.max(512))
            }
        };
        Some(BertDims {
            layers: s.n_layer.unwrap_or(l),
            hidden: s.n_embd.unwrap_or(c),
            heads: s.n_head.unwrap_or(h),
            intermediate: None,
            max_positions: s.n_positions.unwrap_or(p),
        })
    } else {
        None
    };
    let defaults = OptimConfig {
        schedule: LrSchedule {
            kind: ScheduleKind::Linear,
            max_lr: 1e-4,
            min_lr: 0.0,
            warmup_steps: 0,
            total_steps: max_steps,
        },
        beta1: 0.9,
        beta2: 0.999,
        eps: 1e-8,
        weight_decay: 0.01,
        grad_clip: 1.0,
        grad_accum: run.grad_accum,
    };
    let optim = optim_config(o, so, &defaults, max_steps, run.grad_accum);
    let opts = BertPretrainOptions {
        data: o.data.clone(),
        output: o.output.clone(),
        tokenizer: o.tokenizer.clone(),
        init_from: o.init_from.clone(),
        dims,
        resume: o.resume,
        run,
        optim,
        decay_embeddings: o.decay_embeddings,
        stop_after: o.stop_after,
    };
    run_bert_pretraining(&opts, on_event, should_stop)
}
