//! What a pretraining run can be told ([`PretrainOptions`]), what it
//! reports ([`PretrainEvent`]) and the option resolution both families share
//! (each family's defaults; on `resume`, the checkpoint's values). Used by
//! [`super::gpt2_pretrain`] and [`super::bert_pretrain`]; the entry point
//! is [`super::pretrain::pretrain`].

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::run_record::check_global_batch;
use super::{invalid, Result};
use crate::models::auto_dtype::DtypeRequest;
use crate::spec::names::Family;
use crate::spec::optim::{LrSchedule, OptimConfig, ScheduleKind};
use crate::spec::Precision;
use crate::train::{
    latest_checkpoint, read_train_state, skipped_checkpoints, RunEvent, TrainState,
};

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

impl<'a> PretrainEvent<'a> {
    /// The pretraining event a Runner event makes, if any (steps without a
    /// metrics row make none).
    pub(crate) fn of_run(e: RunEvent<'a>) -> Option<Self> {
        Some(match e {
            RunEvent::Step { row, .. } => PretrainEvent::Step { row: row? },
            RunEvent::Eval { row } => PretrainEvent::Eval { row },
            RunEvent::Text { step, text } => PretrainEvent::Sample { step, text },
            RunEvent::Saved { path } => PretrainEvent::Saved { path },
            RunEvent::Note(n) => PretrainEvent::Note(n),
        })
    }
}

/// The size of a new model: a preset, optionally overridden per dimension.
#[derive(Debug, Clone, Default, PartialEq, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
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
///
/// Deserializes from the field names (unknown ones are an error, absent ones
/// take [`Default`]): how the Python package passes its keyword arguments.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
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
    /// Write OUTPUT/overlap.bloom: the Bloom filter of the training text's
    /// 8-grams (GPT-2's train–test overlap check), for `eval --overlap`.
    pub overlap_filter: bool,
    /// The field of JSONL / Parquet rows that holds the text; `None`: the
    /// resumed run's, else [`crate::data::DEFAULT_TEXT_FIELD`].
    pub text_field: Option<String>,
    /// Write models in shards of at most this many bytes (HF's
    /// `max_shard_size`); `None`: one file.
    #[serde(deserialize_with = "crate::util::size::deserialize_byte_size")]
    pub max_shard_size: Option<u64>,
    /// Data-parallel runs ([`super::pretrain::pretrain_on`] over several
    /// ranks): each rank keeps the AdamW moments of 1/N of the parameters
    /// (ZeRO stage 1). The same weights; no effect on one rank.
    pub shard_optimizer: bool,
    /// The number format of every block's matmuls (GPT-2: and the LM
    /// head), f32 (exact against HF) or bf16 (mixed precision: bf16
    /// operands, f32 sums, weights and optimizer state), or auto: bf16 where
    /// this CPU runs the model's products faster in it, else f32
    /// ([`crate::models::auto_dtype`]; a resumed run keeps its own); `None`:
    /// the resumed run's, else f32.
    pub dtype: Option<DtypeRequest<Precision>>,
    /// GPT-2: recompute each block's attention probabilities, GELU and
    /// LayerNorm outputs in backward instead of keeping them ([`crate::models::gpt2::Gpt2::set_recompute`]):
    /// far less memory at long sequences, the same gradients, a little
    /// more compute. Not part of the run: a resume may turn it on or off.
    pub recompute: bool,
    /// Time every step's phases (matmuls, attention, LayerNorm, AdamW...,
    /// [`crate::util::profile::Phase`]): `phase_ms` in the metrics rows and
    /// the mean step in the summary's `profile`. Not part of the run.
    pub profile: bool,
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
            overlap_filter: false,
            text_field: None,
            max_shard_size: None,
            shard_optimizer: false,
            dtype: None,
            recompute: false,
            profile: false,
        }
    }
}

/// Whether OUTPUT holds a checkpoint a `resume` would continue.
pub fn has_checkpoint(output: &Path) -> Result<bool> {
    Ok(latest_checkpoint(&output.join("checkpoints"))?.is_some())
}

/// The trainer state of the newest checkpoint under OUTPUT when resuming
/// (`None` when not resuming); an error when resuming from nothing, or when
/// not resuming over an existing run. Step folders newer than it that are
/// not complete checkpoints are named in a note, never passed over silently.
pub(crate) fn saved_state(
    o: &PretrainOptions,
    on_event: &mut dyn FnMut(PretrainEvent),
) -> Result<Option<(PathBuf, TrainState)>> {
    let root = o.output.join("checkpoints");
    let latest = latest_checkpoint(&root)?;
    if o.resume {
        for d in skipped_checkpoints(&root)? {
            on_event(PretrainEvent::Note(format!(
                "note: {} is not a complete checkpoint (no trainer_state.json); resuming from the newest complete one",
                d.display()
            )));
        }
    }
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
    let state = read_train_state(&dir)?;
    Ok(Some((dir, state)))
}

/// A resumed checkpoint must come from pretraining `family`; one from the
/// other family's pretraining says which it is.
pub(crate) fn check_resumed_family(dir: &Path, state: &TrainState, family: Family) -> Result<()> {
    let name = |f: &str| match f {
        "gpt2" => "GPT-2",
        "bert" => "BERT",
        _ => "another kind of",
    };
    let want = match family {
        Family::Gpt2 => "gpt2",
        Family::Bert => "bert",
    };
    match state.extra.get("arch").and_then(Value::as_str) {
        Some(a) if a == want => Ok(()),
        Some(a) => Err(invalid(format!(
            "{}: this checkpoint is from {} pretraining, not {}: resume it as {}",
            dir.display(),
            name(a),
            name(want),
            name(a)
        ))),
        None => Err(invalid(format!(
            "{}: this checkpoint is not from {} pretraining",
            dir.display(),
            name(want)
        ))),
    }
}

/// On `resume`, the model-size options of the command that started the run
/// are welcome; one that contradicts the checkpoint's model is an error
/// naming the option, the stored value and the given one. `stored` is the
/// checkpoint's `(n_layer, n_embd, n_head, n_positions)`.
pub(crate) fn check_resumed_size(
    family: Family,
    size: &ModelSize,
    stored: (usize, usize, usize, usize),
) -> Result<()> {
    let from_preset = match &size.preset {
        Some(name) => Some(preset(family, name)?),
        None => None,
    };
    let rows = [
        ("n_layer", size.n_layer, from_preset.map(|p| p.0), stored.0),
        ("n_embd", size.n_embd, from_preset.map(|p| p.1), stored.1),
        ("n_head", size.n_head, from_preset.map(|p| p.2), stored.2),
        (
            "n_positions",
            size.n_positions,
            from_preset.map(|p| p.3),
            stored.3,
        ),
    ];
    for (name, given, by_preset, had) in rows {
        match (given, by_preset) {
            (Some(g), _) if g != had => {
                return Err(invalid(format!(
                    "`{name}` {g} differs from the checkpoint's {had}; `resume` continues the checkpoint's model"
                )))
            }
            (None, Some(p)) if p != had => {
                return Err(invalid(format!(
                    "`preset` {} has {name} {p}, the checkpoint's model has {had}; `resume` continues the checkpoint's model",
                    size.preset.as_deref().unwrap_or_default()
                )))
            }
            _ => {}
        }
    }
    Ok(())
}

/// The `init_from` a run records in its trainer state (`extra.init_from`).
pub(crate) fn init_from_record(init_from: &Option<PathBuf>) -> Value {
    match init_from {
        Some(p) => Value::String(
            std::fs::canonicalize(p)
                .unwrap_or_else(|_| p.clone())
                .display()
                .to_string(),
        ),
        None => Value::Null,
    }
}

/// On `resume`, `init_from` may repeat the folder the run started from
/// (recorded in `state.extra.init_from`); another folder is an error.
pub(crate) fn check_resumed_init(given: &Option<PathBuf>, state: &TrainState) -> Result<()> {
    let Some(g) = given else { return Ok(()) };
    // Absent: a checkpoint from before the run recorded it.
    let Some(stored) = state.extra.get("init_from") else {
        return Ok(());
    };
    let given_s = init_from_record(given);
    match stored.as_str() {
        Some(s) if Some(s) == given_s.as_str() => Ok(()),
        Some(s) => Err(invalid(format!(
            "`init_from` {} differs from the checkpoint's {s}; `resume` continues the checkpoint's model",
            g.display()
        ))),
        None => Err(invalid(format!(
            "`init_from` {}: the checkpoint's run started from a new model, not from a checkpoint; `resume` continues the checkpoint's model",
            g.display()
        ))),
    }
}

/// The value a run continues with: the given one, else the saved one
/// (resuming), else `default`. A given value that differs from the saved
/// one is an error of the run-record comparison
/// ([`super::run_record::check_same_run`]), not of this.
pub(crate) fn or_saved<T>(given: Option<T>, saved: Option<T>, default: T) -> T {
    given.or(saved).unwrap_or(default)
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
) -> Result<OptimConfig> {
    let lr =
        o.lr.or(saved.map(|s| s.schedule.max_lr))
            .unwrap_or(d.schedule.max_lr);
    // The default floor follows the peak (nanoGPT: lr / 10; BERT: 0).
    let default_min = d.schedule.min_lr / d.schedule.max_lr * lr;
    let c = OptimConfig {
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
    };
    c.validate()?;
    Ok(c)
}

pub(crate) fn one() -> usize {
    1
}

/// The per-rank batch size of a run on `ranks` ranks: as given, else the
/// default (8); on resume from a checkpoint's `(batch_size, ranks)`, what
/// keeps its global batch (an error when the given size or the number of
/// ranks cannot keep it).
pub(crate) fn rank_batch_size(
    given: Option<usize>,
    saved: Option<(usize, usize)>,
    ranks: usize,
) -> Result<usize> {
    let Some((saved_batch, saved_ranks)) = saved else {
        return Ok(given.unwrap_or(8));
    };
    let global = saved_batch * saved_ranks.max(1);
    let was = if saved_ranks > 1 {
        format!("{global} = {saved_batch} x {saved_ranks} ranks")
    } else {
        global.to_string()
    };
    match given {
        Some(b) => {
            check_global_batch((b, ranks), (saved_batch, saved_ranks))?;
            Ok(b)
        }
        None if global % ranks != 0 => Err(invalid(format!(
            "the checkpoint's global batch {was} does not split over {ranks} ranks; \
             resume with a number of ranks that divides it"
        ))),
        None => Ok(global / ranks),
    }
}
