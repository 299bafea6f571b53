//! `lmkit pretrain`: pretrain GPT-2 from scratch (or continue from an HF
//! checkpoint) on the user's text.
//!
//! OUTPUT layout: `data/` (token shards, reused while the sources and the
//! tokenizer are unchanged), `metrics.jsonl`, `checkpoints/step-N/` (HF model,
//! tokenizer, optimizer and trainer state; the newest `--keep` are kept) and,
//! at the end, the final model in HF layout directly in OUTPUT.

use anyhow::{anyhow, bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use lmkit::checkpoint::{self, save_params, LoadOptions};
use lmkit::data::{self, batch, BatchSampler, PrepareOptions, TokenBatch, TokenData};
use lmkit::models::gpt2::Gpt2;
use lmkit::models::gpt2::{GenerationConfig, Gpt2Engine, SamplingParams, WeightDtype};
use lmkit::spec::{Architecture, Gpt2Config};
use lmkit::train::{
    latest_checkpoint, load_train_state, save_checkpoint, train_step, LossParts, LrSchedule,
    MetricsWriter, OptimConfig, OptimState, ScheduleKind, StepError, TrainState, Trainable,
};
use lmkit_tokenizers::BpeTokenizer as Tokenizer;
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

#[derive(clap::Args, Clone, Debug, Default)]
pub struct Args {
    /// Model architecture: gpt2 (causal LM) or bert (masked LM + next-sentence
    /// prediction; --tokenizer is then a WordPiece vocabulary).
    #[arg(long, default_value = "gpt2")]
    pub arch: String,
    /// bert: mask whole words (a token and its `##` continuations) together.
    #[arg(long)]
    pub whole_word_masking: bool,
    /// Tokenizer folder (vocab.json + merges.txt or tokenizer.json). Not
    /// needed with --resume or --init-from (their own tokenizer is used).
    #[arg(long)]
    pub tokenizer: Option<PathBuf>,
    /// Text files, folders (searched for .txt/.md/.jsonl...) or JSONL files
    /// with a `text` field. With --resume, defaults to the shards in OUTPUT/data.
    #[arg(long, num_args = 1..)]
    pub data: Vec<PathBuf>,
    /// Output folder: shards, metrics.jsonl, checkpoints, the final model.
    #[arg(long)]
    pub output: PathBuf,
    /// Model size: gpt2 (124M: 12 layers × 768), gpt2-medium (24 × 1024),
    /// gpt2-large (36 × 1280), gpt2-xl (48 × 1600), or a small one: tiny
    /// (2 × 64), mini (4 × 256), small (6 × 384). --n-* override its values.
    #[arg(long)]
    pub preset: Option<String>,
    /// Transformer blocks L of a new model.
    #[arg(long)]
    pub n_layer: Option<usize>,
    /// Channels C of a new model.
    #[arg(long)]
    pub n_embd: Option<usize>,
    /// Attention heads NH of a new model (C must divide into them).
    #[arg(long)]
    pub n_head: Option<usize>,
    /// Context size of a new model (default: the preset's, else --seq-len).
    #[arg(long)]
    pub n_positions: Option<usize>,
    /// Tokens per training sequence T [default: 256, at most n_positions].
    #[arg(long)]
    pub seq_len: Option<usize>,
    /// Sequences per micro-batch B [default: 8].
    #[arg(long)]
    pub batch_size: Option<usize>,
    /// Micro-batches per optimizer step [default: 1].
    #[arg(long)]
    pub grad_accum: Option<usize>,
    /// Optimizer steps in the whole run [default: 1000].
    #[arg(long)]
    pub max_steps: Option<u64>,
    /// Peak learning rate [default: 6e-4].
    #[arg(long)]
    pub lr: Option<f32>,
    /// Learning-rate floor of the decay [default: lr / 10].
    #[arg(long)]
    pub min_lr: Option<f32>,
    /// Linear warmup steps [default: max_steps / 20, at most 200].
    #[arg(long)]
    pub warmup_steps: Option<u64>,
    /// cosine | linear | constant [default: cosine].
    #[arg(long)]
    pub schedule: Option<ScheduleKind>,
    /// Decoupled AdamW weight decay on matmul weights [default: 0.1].
    #[arg(long)]
    pub weight_decay: Option<f32>,
    /// Also decay the embeddings (wte, wpe).
    #[arg(long)]
    pub decay_embeddings: bool,
    /// AdamW β1 [default: 0.9].
    #[arg(long)]
    pub beta1: Option<f32>,
    /// AdamW β2 [default: 0.95].
    #[arg(long)]
    pub beta2: Option<f32>,
    /// Global gradient-norm clip, 0 = off [default: 1.0].
    #[arg(long)]
    pub grad_clip: Option<f32>,
    /// Validation loss every N steps, 0 = only before the first and after the last step [default: 100].
    #[arg(long)]
    pub eval_every: Option<u64>,
    /// Validation batches per evaluation [default: 20].
    #[arg(long)]
    pub eval_batches: Option<usize>,
    /// Fraction of the tokens held out for validation [default: 0.05].
    #[arg(long)]
    pub val_fraction: Option<f64>,
    /// Checkpoint every N steps, 0 = only at the end (and on Ctrl-C) [default: 500].
    #[arg(long)]
    pub save_every: Option<u64>,
    /// Print a generated sample every N steps, 0 = never [default: --eval-every].
    #[arg(long)]
    pub sample_every: Option<u64>,
    /// Prompt of the periodic samples (default: start of a document).
    #[arg(long)]
    pub sample_prompt: Option<String>,
    /// Tokens per periodic sample [default: 48].
    #[arg(long)]
    pub sample_tokens: Option<usize>,
    /// Checkpoints to keep [default: 2].
    #[arg(long)]
    pub keep: Option<usize>,
    /// Seed for initialisation and data order [default: 1337].
    #[arg(long)]
    pub seed: Option<u64>,
    /// Start from this HF GPT-2 checkpoint folder (config.json + model.safetensors).
    #[arg(long)]
    pub init_from: Option<PathBuf>,
    /// Continue from the newest checkpoint in OUTPUT/checkpoints, exactly.
    #[arg(long)]
    pub resume: bool,
    /// Stop (with a checkpoint) after this many steps of this invocation,
    /// without changing the schedule; resume later with --resume.
    #[arg(long)]
    pub stop_after: Option<u64>,
    /// A metrics row every N steps [default: 1].
    #[arg(long)]
    pub log_every: Option<u64>,
    /// Rayon threads (default: all cores).
    #[arg(long)]
    pub threads: Option<usize>,
}

/// Model sizes: (name, n_layer, n_embd, n_head, n_positions).
pub const PRESETS: &[(&str, usize, usize, usize, usize)] = &[
    ("gpt2", 12, 768, 12, 1024),
    ("gpt2-medium", 24, 1024, 16, 1024),
    ("gpt2-large", 36, 1280, 20, 1024),
    ("gpt2-xl", 48, 1600, 25, 1024),
    ("tiny", 2, 64, 4, 256),
    ("mini", 4, 256, 4, 512),
    ("small", 6, 384, 6, 1024),
];

/// Hyper-parameters of a run after defaults and resume are applied; stored
/// in the trainer state so `--resume` continues with the same ones.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RunConfig {
    pub seq_len: usize,
    pub batch_size: usize,
    pub grad_accum: usize,
    pub max_steps: u64,
    pub eval_every: u64,
    pub eval_batches: usize,
    pub sample_every: u64,
    pub sample_tokens: usize,
    pub sample_prompt: String,
    pub save_every: u64,
    pub keep: usize,
    pub log_every: u64,
    pub seed: u64,
    pub val_fraction: f64,
    pub decay_embeddings: bool,
}

/// What a finished run reports (used by `quickstart`).
pub struct Summary {
    pub steps: u64,
    pub final_loss: Option<f64>,
    pub first_val_loss: Option<f64>,
    pub last_val_loss: Option<f64>,
    pub checkpoint: Option<PathBuf>,
    pub interrupted: bool,
}

/// Ctrl-C count: 1 = stop after this step with a checkpoint, 2 = exit now.
static INTERRUPTS: AtomicUsize = AtomicUsize::new(0);

fn install_ctrlc() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let r = ctrlc::set_handler(|| {
            if INTERRUPTS.fetch_add(1, Ordering::SeqCst) >= 1 {
                eprintln!("\ninterrupted twice: exiting without saving");
                std::process::exit(130);
            }
            eprintln!(
                "\ninterrupt: finishing this step, saving a checkpoint (Ctrl-C again to quit now)"
            );
        });
        if let Err(e) = r {
            eprintln!("warning: cannot install the Ctrl-C handler: {e}");
        }
    });
}

fn preset(name: &str) -> Result<(usize, usize, usize, usize)> {
    PRESETS
        .iter()
        .find(|p| p.0 == name)
        .map(|p| (p.1, p.2, p.3, p.4))
        .ok_or_else(|| {
            let names: Vec<&str> = PRESETS.iter().map(|p| p.0).collect();
            anyhow!("unknown preset `{name}` (known: {})", names.join(", "))
        })
}

fn model_dims_given(a: &Args) -> bool {
    a.preset.is_some()
        || a.n_layer.is_some()
        || a.n_embd.is_some()
        || a.n_head.is_some()
        || a.n_positions.is_some()
}

/// A fresh GPT-2 config from --preset / --n-layer / --n-embd / --n-head.
fn new_config(a: &Args, vocab_size: usize, eos: u32, seq_len: usize) -> Result<Gpt2Config> {
    let (mut l, mut c, mut h, mut p) = match &a.preset {
        Some(name) => preset(name)?,
        None => (6, 384, 6, 0),
    };
    if a.preset.is_none() && (a.n_layer.is_none() || a.n_embd.is_none() || a.n_head.is_none()) {
        bail!("give --preset NAME or all of --n-layer, --n-embd and --n-head");
    }
    l = a.n_layer.unwrap_or(l);
    c = a.n_embd.unwrap_or(c);
    h = a.n_head.unwrap_or(h);
    if p == 0 {
        p = seq_len;
    }
    p = a.n_positions.unwrap_or(p);
    if seq_len > p {
        bail!("--seq-len {seq_len} exceeds the model's context (n_positions {p})");
    }
    let cfg = Gpt2Config {
        vocab_size,
        n_positions: p,
        n_embd: c,
        n_layer: l,
        n_head: h,
        resid_pdrop: 0.0,
        embd_pdrop: 0.0,
        attn_pdrop: 0.0,
        bos_token_id: Some(eos),
        eos_token_id: Some(eos),
        ..Gpt2Config::default()
    };
    cfg.validate().context("model configuration")?;
    Ok(cfg)
}

fn load_hf_gpt2(dir: &Path) -> Result<(Gpt2Config, Vec<f32>)> {
    let pre = checkpoint::load_pretrained(
        &dir.display().to_string(),
        Some(Architecture::Gpt2LMHeadModel),
        LoadOptions::default(),
    )
    .with_context(|| format!("loading the GPT-2 checkpoint {}", dir.display()))?;
    let cfg = match pre.config {
        lmkit::spec::AnyConfig::Gpt2(c) => c,
        _ => bail!("{}: not a GPT-2 checkpoint", dir.display()),
    };
    Ok((cfg, pre.params))
}

fn say(pb: &ProgressBar, msg: &str) {
    if pb.is_hidden() {
        eprintln!("{msg}");
    } else {
        pb.println(msg);
    }
}

fn eval_loss(
    model: &mut Gpt2,
    val: &data::TokenShard,
    b: usize,
    t: usize,
    max: usize,
) -> Option<f64> {
    let n = batch::eval_batch_count(val, b, t, max);
    if n == 0 {
        return None;
    }
    let mut bt = TokenBatch::new(b, t);
    let mut total = LossParts::default();
    for i in 0..n {
        batch::fill_eval_batch(val, i, &mut bt);
        total.add(model.evaluate(&bt).ok()?);
    }
    Some(total.mean())
}

fn pick<T: PartialEq + Copy + std::fmt::Debug>(
    name: &str,
    given: Option<T>,
    saved: Option<T>,
    default: T,
) -> Result<T> {
    match (given, saved) {
        (Some(g), Some(s)) if g != s => bail!(
            "--{name} {g:?} differs from the checkpoint's {s:?}; an exact resume needs the same value"
        ),
        (g, s) => Ok(g.or(s).unwrap_or(default)),
    }
}

pub fn run(args: Args) -> Result<()> {
    let s = run_training(&args)?;
    if s.interrupted {
        eprintln!("stopped at step {}; continue with --resume", s.steps);
    }
    Ok(())
}

/// The whole pretraining run; returns a summary once it ends (or stops).
pub fn run_training(args: &Args) -> Result<Summary> {
    if args.arch == "bert" {
        return run_bert(args);
    }
    if args.arch != "gpt2" {
        bail!("--arch {}: expected gpt2 or bert", args.arch);
    }
    if args.whole_word_masking {
        bail!("--whole-word-masking applies to --arch bert only");
    }
    if let Some(n) = args.threads {
        // Fails only if a pool already exists (e.g. quickstart set it): keep that one.
        let _ = rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build_global();
    }
    install_ctrlc();
    let out = &args.output;
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let ckpt_root = out.join("checkpoints");

    // Model, tokenizer, and saved state.
    let resumed = if args.resume {
        let dir = latest_checkpoint(&ckpt_root)?.ok_or_else(|| {
            anyhow!(
                "--resume: no checkpoint in {} to resume from",
                ckpt_root.display()
            )
        })?;
        if model_dims_given(args) || args.init_from.is_some() {
            bail!("--resume takes the model from the checkpoint; drop --preset/--n-*/--init-from");
        }
        let (state, opt) = load_train_state(&dir)?;
        Some((dir, state, opt))
    } else {
        if let Some(d) = latest_checkpoint(&ckpt_root)? {
            bail!(
                "{} already holds a checkpoint ({}); pass --resume to continue it or choose another --output",
                out.display(),
                d.display()
            );
        }
        None
    };
    let saved_run: Option<RunConfig> = resumed
        .as_ref()
        .and_then(|(_, s, _)| serde_json::from_value(s.extra["run"].clone()).ok());
    let sr = saved_run.as_ref();

    let seq_len = pick("seq-len", args.seq_len, sr.map(|r| r.seq_len), 256)?;
    let batch_size = pick("batch-size", args.batch_size, sr.map(|r| r.batch_size), 8)?;
    let grad_accum = pick("grad-accum", args.grad_accum, sr.map(|r| r.grad_accum), 1)?;
    let seed = pick("seed", args.seed, sr.map(|r| r.seed), 1337)?;
    let val_fraction = pick(
        "val-fraction",
        args.val_fraction,
        sr.map(|r| r.val_fraction),
        0.05,
    )?;
    let max_steps = args.max_steps.or(sr.map(|r| r.max_steps)).unwrap_or(1000);
    let run_cfg = RunConfig {
        seq_len,
        batch_size,
        grad_accum,
        max_steps,
        eval_every: args.eval_every.or(sr.map(|r| r.eval_every)).unwrap_or(100),
        eval_batches: args
            .eval_batches
            .or(sr.map(|r| r.eval_batches))
            .unwrap_or(20),
        sample_every: args
            .sample_every
            .or(sr.map(|r| r.sample_every))
            .or(args.eval_every)
            .unwrap_or(100),
        sample_tokens: args
            .sample_tokens
            .or(sr.map(|r| r.sample_tokens))
            .unwrap_or(48),
        sample_prompt: args
            .sample_prompt
            .clone()
            .or(sr.map(|r| r.sample_prompt.clone()))
            .unwrap_or_default(),
        save_every: args.save_every.or(sr.map(|r| r.save_every)).unwrap_or(500),
        keep: args.keep.or(sr.map(|r| r.keep)).unwrap_or(2).max(1),
        log_every: args
            .log_every
            .or(sr.map(|r| r.log_every))
            .unwrap_or(1)
            .max(1),
        seed,
        val_fraction,
        decay_embeddings: args.decay_embeddings || sr.is_some_and(|r| r.decay_embeddings),
    };
    if seq_len == 0 || batch_size == 0 || grad_accum == 0 || max_steps == 0 {
        bail!("--seq-len, --batch-size, --grad-accum and --max-steps must be positive");
    }

    let (tokenizer, mut model) = match &resumed {
        Some((dir, _, _)) => {
            let tok = Tokenizer::from_dir(dir)
                .with_context(|| format!("loading the tokenizer saved in {}", dir.display()))?;
            let (cfg, params) = load_hf_gpt2(dir)?;
            (tok, Gpt2::from_params(cfg, params)?)
        }
        None => {
            let tok_dir = args
                .tokenizer
                .clone()
                .or_else(|| args.init_from.clone())
                .ok_or_else(|| anyhow!("--tokenizer DIR is required"))?;
            let tok = Tokenizer::from_dir(&tok_dir)
                .with_context(|| format!("loading the tokenizer in {}", tok_dir.display()))?;
            let eos = tok.endoftext_id().ok_or_else(|| {
                anyhow!(
                    "{}: the tokenizer has no <|endoftext|> token to join documents with",
                    tok_dir.display()
                )
            })?;
            let model = match &args.init_from {
                Some(dir) => {
                    if model_dims_given(args) {
                        bail!("--init-from takes the model size from the checkpoint; drop --preset/--n-*");
                    }
                    let (mut cfg, params) = load_hf_gpt2(dir)?;
                    if cfg.resid_pdrop != 0.0 || cfg.embd_pdrop != 0.0 || cfg.attn_pdrop != 0.0 {
                        eprintln!(
                            "note: lmkit trains without dropout; the saved config will say 0"
                        );
                        (cfg.resid_pdrop, cfg.embd_pdrop, cfg.attn_pdrop) = (0.0, 0.0, 0.0);
                    }
                    Gpt2::from_params(cfg, params)?
                }
                None => Gpt2::new_random(new_config(args, tok.vocab_size(), eos, seq_len)?, seed)?,
            };
            (tok, model)
        }
    };
    let cfg = model.config.clone();
    if tokenizer.vocab_size() > cfg.vocab_size {
        bail!(
            "the tokenizer has {} tokens but the model's vocabulary is {}: they do not match",
            tokenizer.vocab_size(),
            cfg.vocab_size
        );
    }
    if seq_len > cfg.n_positions {
        bail!(
            "--seq-len {seq_len} exceeds the model's context (n_positions {})",
            cfg.n_positions
        );
    }
    let eos = tokenizer
        .endoftext_id()
        .ok_or_else(|| anyhow!("the tokenizer has no <|endoftext|> token"))?;
    if run_cfg.decay_embeddings {
        model.layout.set_decay("wte.weight", true)?;
        model.layout.set_decay("wpe.weight", true)?;
    }

    // Data.
    let data_dir = out.join("data");
    let data = prepare_data(
        args,
        &data_dir,
        &tokenizer,
        cfg.vocab_size,
        eos,
        val_fraction,
    )?;
    if data.meta.vocab_size as usize != cfg.vocab_size {
        bail!(
            "{}: shards were made for a vocabulary of {}, the model has {}",
            data_dir.display(),
            data.meta.vocab_size,
            cfg.vocab_size
        );
    }
    let mut sampler = BatchSampler::new(data.train.len(), batch_size, seq_len, seed)?;
    if data.val.is_none() {
        eprintln!("note: no validation split (--val-fraction 0): validation loss is not measured");
    }

    // Optimizer and state.
    let warmup = args
        .warmup_steps
        .or(resumed
            .as_ref()
            .map(|(_, s, _)| s.optim.schedule.warmup_steps))
        .unwrap_or((max_steps / 20).min(200));
    let saved_optim = resumed.as_ref().map(|(_, s, _)| s.optim);
    let lr = args
        .lr
        .or(saved_optim.map(|o| o.schedule.max_lr))
        .unwrap_or(6e-4);
    let optim = OptimConfig {
        schedule: LrSchedule {
            kind: args
                .schedule
                .or(saved_optim.map(|o| o.schedule.kind))
                .unwrap_or(ScheduleKind::Cosine),
            max_lr: lr,
            min_lr: args
                .min_lr
                .or(saved_optim.map(|o| o.schedule.min_lr))
                .unwrap_or(lr / 10.0),
            warmup_steps: warmup,
            total_steps: max_steps,
        },
        beta1: args.beta1.or(saved_optim.map(|o| o.beta1)).unwrap_or(0.9),
        beta2: args.beta2.or(saved_optim.map(|o| o.beta2)).unwrap_or(0.95),
        eps: saved_optim.map_or(1e-8, |o| o.eps),
        weight_decay: args
            .weight_decay
            .or(saved_optim.map(|o| o.weight_decay))
            .unwrap_or(0.1),
        grad_clip: args
            .grad_clip
            .or(saved_optim.map(|o| o.grad_clip))
            .unwrap_or(1.0),
        grad_accum,
    };
    let (mut state, mut opt) = match resumed {
        Some((_, mut state, opt)) => {
            if state.num_params != model.num_params() {
                bail!("the checkpoint's optimizer state does not match the model's size");
            }
            sampler.set_position(state.data)?;
            state.optim = optim;
            (state, opt)
        }
        None => (
            TrainState::new(seed, optim, batch_size, seq_len, model.num_params()),
            OptimState::new(model.num_params()),
        ),
    };
    state.extra = json!({"arch": "gpt2", "run": run_cfg});
    let start_step = state.step;
    if start_step >= max_steps {
        bail!("the checkpoint is at step {start_step}, already at --max-steps {max_steps}; raise --max-steps");
    }

    let mut metrics = MetricsWriter::open(
        &out.join("metrics.jsonl"),
        args.resume.then_some(start_step),
    )?;
    eprintln!(
        "model: GPT-2 {} layers, d {}, {} heads, vocab {}, {:.2}M parameters | data: {} train / {} val tokens | \
         {} x {} tokens x {} accum per step, {} steps",
        cfg.n_layer,
        cfg.n_embd,
        cfg.n_head,
        cfg.vocab_size,
        model.num_params() as f64 / 1e6,
        data.meta.train_tokens,
        data.meta.val_tokens,
        batch_size,
        seq_len,
        grad_accum,
        max_steps
    );
    if start_step > 0 {
        eprintln!("resuming at step {start_step}");
    }

    let pb = ProgressBar::new(max_steps);
    pb.set_style(
        ProgressStyle::with_template(
            "{bar:30} {pos}/{len} {msg} [{elapsed_precise} < {eta_precise}]",
        )
        .expect("static template")
        .progress_chars("=> "),
    );
    pb.set_position(start_step);

    let write_model =
        |dir: &Path, model: &Gpt2| -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
            save_params(
                &model.layout,
                &model.params,
                &model.config,
                dir,
                Architecture::Gpt2LMHeadModel,
            )?;
            tokenizer.save(dir)?;
            Ok(())
        };
    let save = |state: &TrainState, opt: &OptimState, model: &Gpt2| -> Result<PathBuf> {
        let mut w = |dir: &Path| write_model(dir, model);
        save_checkpoint(&ckpt_root, state, opt, &mut w, run_cfg.keep)
            .context("saving a checkpoint (the previous checkpoint is intact)")
    };

    let mut batch_buf = TokenBatch::new(batch_size, seq_len);
    let mut summary = Summary {
        steps: start_step,
        final_loss: None,
        first_val_loss: None,
        last_val_loss: None,
        checkpoint: None,
        interrupted: false,
    };
    let evaluate = |model: &mut Gpt2,
                    step: u64,
                    metrics: &mut MetricsWriter,
                    summary: &mut Summary|
     -> Result<()> {
        if let Some(val) = &data.val {
            if let Some(v) = eval_loss(model, val, batch_size, seq_len, run_cfg.eval_batches) {
                let row = json!({"step": step, "val_loss": v, "val_ppl": v.exp()});
                metrics.write(row.as_object().expect("object"))?;
                say(
                    &pb,
                    &format!("step {step}: val loss {v:.4}, perplexity {:.2}", v.exp()),
                );
                summary.first_val_loss.get_or_insert(v);
                summary.last_val_loss = Some(v);
            } else {
                say(
                    &pb,
                    "note: the validation split is smaller than one batch; skipping validation",
                );
            }
        }
        Ok(())
    };
    if start_step == 0 {
        evaluate(&mut model, 0, &mut metrics, &mut summary)?;
    }

    let mut ema_tps: Option<f64> = None;
    let run_start = Instant::now();
    let elapsed0 = state.elapsed_s;
    let mut steps_this_run = 0u64;
    let mut last_saved = None;
    while state.step < max_steps {
        let t0 = Instant::now();
        let shard = &data.train;
        let stats = match train_step(&mut model, &mut opt, &optim, &mut batch_buf, &mut |b| {
            sampler.next_batch(shard, b)
        }) {
            Ok(s) => s,
            Err(e @ StepError::NonFinite { .. }) => {
                pb.abandon();
                let last = latest_checkpoint(&ckpt_root)?;
                bail!(
                    "{e}; training stopped. The last good checkpoint is {} (try a lower --lr or --grad-clip)",
                    last.map_or("none (no checkpoint was saved yet)".into(), |p| p.display().to_string())
                );
            }
            Err(e @ StepError::Model(_)) => bail!(e),
        };
        let dt = t0.elapsed().as_secs_f64();
        let tps = stats.tokens as f64 / dt.max(1e-9);
        ema_tps = Some(ema_tps.map_or(tps, |e| 0.9 * e + 0.1 * tps));
        state.step = stats.step;
        state.data = sampler.position();
        state.tokens_seen += stats.tokens as u64;
        state.elapsed_s = elapsed0 + run_start.elapsed().as_secs_f64();
        steps_this_run += 1;
        summary.steps = state.step;
        summary.final_loss = Some(stats.loss);
        if state.step % run_cfg.log_every == 0 || state.step == max_steps {
            let row = json!({
                "step": stats.step, "loss": stats.loss, "lr": stats.lr,
                "grad_norm": stats.grad_norm, "tokens_per_s": tps,
                "tokens": state.tokens_seen, "elapsed_s": state.elapsed_s,
            });
            metrics.write(row.as_object().expect("object"))?;
        }
        pb.set_position(state.step);
        pb.set_message(format!(
            "loss {:.4} | lr {:.2e} | {:.0} tok/s",
            stats.loss,
            stats.lr,
            ema_tps.unwrap_or(tps)
        ));
        let last = state.step == max_steps;
        if run_cfg.eval_every > 0 && state.step % run_cfg.eval_every == 0 || last {
            evaluate(&mut model, state.step, &mut metrics, &mut summary)?;
        }
        if run_cfg.sample_every > 0 && state.step % run_cfg.sample_every == 0 {
            // The seed comes from the trainer's RNG (saved in checkpoints), so
            // a resumed run prints the same samples.
            let seed = state.rng.next_u64();
            let text = Gpt2Engine::from_params(
                &model.config,
                &model.layout,
                &model.params,
                WeightDtype::F32,
            )
            .map_err(anyhow::Error::from)
            .and_then(|mut e| {
                continue_text(
                    &mut e,
                    &tokenizer,
                    &run_cfg.sample_prompt,
                    run_cfg.sample_tokens,
                    seed,
                )
            });
            match text {
                Ok(t) => say(
                    &pb,
                    &format!(
                        "step {} sample: {}{}",
                        state.step,
                        run_cfg.sample_prompt,
                        t.replace('\n', " / ")
                    ),
                ),
                Err(e) => say(&pb, &format!("step {}: sampling failed: {e:#}", state.step)),
            }
        }
        let interrupted = INTERRUPTS.load(Ordering::SeqCst) > 0;
        let stop_after = args.stop_after.is_some_and(|n| steps_this_run >= n);
        let periodic = run_cfg.save_every > 0 && state.step % run_cfg.save_every == 0;
        if periodic || last || interrupted || stop_after {
            let dir = save(&state, &opt, &model)?;
            say(
                &pb,
                &format!("step {}: saved {}", state.step, dir.display()),
            );
            last_saved = Some(dir);
        }
        if interrupted || stop_after {
            summary.interrupted = true;
            break;
        }
    }
    pb.finish();
    if state.step == max_steps {
        // The final model, loadable straight from OUTPUT.
        write_model(out, &model)
            .map_err(|e| anyhow!("writing the final model to {}: {e}", out.display()))?;
        eprintln!(
            "final model: {} (HF layout: config.json + model.safetensors + tokenizer)",
            out.display()
        );
    }
    summary.checkpoint = last_saved;
    Ok(summary)
}

/// Tokenizes --data into OUTPUT/data (or reuses it), with a progress bar.
fn prepare_data(
    args: &Args,
    dir: &Path,
    tok: &Tokenizer,
    vocab_size: usize,
    eos: u32,
    val_fraction: f64,
) -> Result<TokenData> {
    if args.data.is_empty() {
        if args.resume && dir.join("meta.json").exists() {
            return Ok(data::open_shards(dir)?);
        }
        bail!("--data FILE... is required");
    }
    // The tokenizer is identified by its vocabulary (the same however it was loaded).
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for id in 0..tok.vocab_size() as u32 {
        for b in tok.id_to_token(id).unwrap_or("").bytes().chain([0xff]) {
            h = (h ^ b as u64).wrapping_mul(0x0100_0000_01b3);
        }
    }
    let tokenizer_id = format!("vocab:{h:016x}");
    let opts = PrepareOptions {
        vocab_size,
        eos_id: eos,
        val_fraction,
        tokenizer_id,
    };
    let pb = ProgressBar::new(0);
    pb.set_style(
        ProgressStyle::with_template(
            "tokenizing {bar:30} {bytes}/{total_bytes} ({bytes_per_sec}, {eta})",
        )
        .expect("static template"),
    );
    let encode =
        |text: &str| -> Result<Vec<u32>, String> { Ok(tok.encode_ids(text.as_bytes(), false)) };
    let progress = |done: u64, total: u64| {
        pb.set_length(total);
        pb.set_position(done);
    };
    let prepared = data::prepare_shards(&args.data, dir, &opts, &encode, &progress)?;
    pb.finish_and_clear();
    let m = &prepared.meta;
    eprintln!(
        "data: {} documents, {} train + {} val tokens ({}){}",
        m.documents,
        m.train_tokens,
        m.val_tokens,
        if m.token_width == 2 { "u16" } else { "u32" },
        if prepared.reused {
            ", reusing the existing shards"
        } else {
            ""
        }
    );
    Ok(data::open_shards(dir)?)
}

/// Whether OUTPUT holds a checkpoint a `--resume` would continue.
pub fn has_checkpoint(output: &Path) -> Result<bool> {
    Ok(latest_checkpoint(&output.join("checkpoints"))?.is_some())
}

/// Sampling settings of the periodic and quickstart samples.
fn sample_config(max_new: usize, seed: u64, eos: Option<u32>) -> GenerationConfig {
    GenerationConfig {
        max_new_tokens: max_new,
        sampling: SamplingParams {
            temperature: 0.8,
            top_k: 40,
            ..SamplingParams::default()
        },
        seed,
        eos_token_id: eos,
        truncate: true,
        ..GenerationConfig::default()
    }
}

/// Continues `prompt` (empty: from <|endoftext|>) with the inference engine.
fn continue_text(
    engine: &mut Gpt2Engine,
    tok: &Tokenizer,
    prompt: &str,
    max_new: usize,
    seed: u64,
) -> Result<String> {
    let eos = tok.endoftext_id();
    let mut ids = tok.encode_ids(prompt.as_bytes(), false);
    if ids.is_empty() {
        ids.extend(eos);
    }
    // Fit the context: keep at least half of it (or the whole prompt) for the prompt.
    let ctx = engine.config().n_positions;
    let max_new = max_new.min(ctx.saturating_sub(ids.len().min(ctx / 2)).max(1));
    let out = engine.generate(&ids, &sample_config(max_new, seed, eos), |_| {
        std::ops::ControlFlow::Continue(())
    })?;
    let new: Vec<u32> = out.ids.into_iter().filter(|&id| Some(id) != eos).collect();
    Ok(String::from_utf8_lossy(&tok.decode(&new)?).into_owned())
}

/// Samples from the trained model in `model_dir` (HF layout + tokenizer):
/// `(prompt, continuation)` for each prompt.
pub fn sample_texts(
    model_dir: &Path,
    prompts: &[&str],
    max_new: usize,
    seed: u64,
) -> Result<Vec<(String, String)>> {
    let tok = Tokenizer::from_dir(model_dir)
        .with_context(|| format!("loading the tokenizer in {}", model_dir.display()))?;
    let mut engine = Gpt2Engine::load(model_dir, WeightDtype::F32)
        .with_context(|| format!("loading {}", model_dir.display()))?;
    prompts
        .iter()
        .enumerate()
        .map(|(i, p)| {
            Ok((
                p.to_string(),
                continue_text(&mut engine, &tok, p, max_new, seed + i as u64)?,
            ))
        })
        .collect()
}

/// BERT model sizes beyond the shared presets: (name, layers, hidden, heads, positions).
const BERT_PRESETS: &[(&str, usize, usize, usize, usize)] = &[
    ("bert-base", 12, 768, 12, 512),
    ("bert-large", 24, 1024, 16, 512),
];

/// `--arch bert`: masked-LM + next-sentence pretraining (see
/// `lmkit::recipes::bert_pretrain`), with the same flags as GPT-2.
fn run_bert(args: &Args) -> Result<Summary> {
    use lmkit::recipes::bert_pretrain::{
        run_bert_pretraining, BertDims, BertPretrainOptions, BertRunConfig, PretrainEvent,
    };
    if args.sample_every.is_some() || args.sample_prompt.is_some() || args.sample_tokens.is_some() {
        bail!("--sample-every/--sample-prompt/--sample-tokens generate text: GPT-2 only");
    }
    if let Some(n) = args.threads {
        let _ = rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build_global();
    }
    install_ctrlc();
    let ckpt_root = args.output.join("checkpoints");
    let saved = if args.resume {
        match latest_checkpoint(&ckpt_root)? {
            Some(dir) => Some(load_train_state(&dir)?.0),
            None => None,
        }
    } else {
        None
    };
    let sr: Option<BertRunConfig> = saved
        .as_ref()
        .and_then(|s| serde_json::from_value(s.extra["run"].clone()).ok());
    let sr = sr.as_ref();
    let so = saved.as_ref().map(|s| s.optim);
    let seq_len = pick("seq-len", args.seq_len, sr.map(|r| r.seq_len), 128)?;
    let max_steps = args.max_steps.or(sr.map(|r| r.max_steps)).unwrap_or(1000);
    let run = BertRunConfig {
        seq_len,
        batch_size: pick("batch-size", args.batch_size, sr.map(|r| r.batch_size), 8)?,
        grad_accum: pick("grad-accum", args.grad_accum, sr.map(|r| r.grad_accum), 1)?,
        seed: pick("seed", args.seed, sr.map(|r| r.seed), 1337)?,
        whole_word_masking: args.whole_word_masking || sr.is_some_and(|r| r.whole_word_masking),
        short_seq_prob: sr.map_or(0.1, |r| r.short_seq_prob),
        val_fraction: pick(
            "val-fraction",
            args.val_fraction,
            sr.map(|r| r.val_fraction),
            0.05,
        )?,
        max_steps,
        eval_every: args.eval_every.or(sr.map(|r| r.eval_every)).unwrap_or(100),
        eval_batches: args
            .eval_batches
            .or(sr.map(|r| r.eval_batches))
            .unwrap_or(20),
        save_every: args.save_every.or(sr.map(|r| r.save_every)).unwrap_or(500),
        keep: args.keep.or(sr.map(|r| r.keep)).unwrap_or(2).max(1),
        log_every: args
            .log_every
            .or(sr.map(|r| r.log_every))
            .unwrap_or(1)
            .max(1),
    };
    let dims = if model_dims_given(args) {
        let (mut l, mut c, mut h, mut p) = match &args.preset {
            Some(name) => match BERT_PRESETS.iter().find(|x| x.0 == name) {
                Some(x) => (x.1, x.2, x.3, x.4),
                None if name.starts_with("gpt2") => {
                    bail!("preset `{name}` is a GPT-2 size; for BERT use tiny, mini, small, bert-base or bert-large")
                }
                None => preset(name)?,
            },
            None => {
                if args.n_layer.is_none() || args.n_embd.is_none() || args.n_head.is_none() {
                    bail!("give --preset NAME or all of --n-layer, --n-embd and --n-head");
                }
                (0, 0, 0, seq_len.max(512))
            }
        };
        l = args.n_layer.unwrap_or(l);
        c = args.n_embd.unwrap_or(c);
        h = args.n_head.unwrap_or(h);
        p = args.n_positions.unwrap_or(p);
        Some(BertDims {
            layers: l,
            hidden: c,
            heads: h,
            intermediate: None,
            max_positions: p,
        })
    } else {
        None
    };
    let lr = args.lr.or(so.map(|o| o.schedule.max_lr)).unwrap_or(1e-4);
    let optim = OptimConfig {
        schedule: LrSchedule {
            kind: args
                .schedule
                .or(so.map(|o| o.schedule.kind))
                .unwrap_or(ScheduleKind::Linear),
            max_lr: lr,
            min_lr: args.min_lr.or(so.map(|o| o.schedule.min_lr)).unwrap_or(0.0),
            warmup_steps: args
                .warmup_steps
                .or(so.map(|o| o.schedule.warmup_steps))
                .unwrap_or((max_steps / 20).min(200)),
            total_steps: max_steps,
        },
        beta1: args.beta1.or(so.map(|o| o.beta1)).unwrap_or(0.9),
        beta2: args.beta2.or(so.map(|o| o.beta2)).unwrap_or(0.999),
        eps: so.map_or(1e-8, |o| o.eps),
        weight_decay: args
            .weight_decay
            .or(so.map(|o| o.weight_decay))
            .unwrap_or(0.01),
        grad_clip: args.grad_clip.or(so.map(|o| o.grad_clip)).unwrap_or(1.0),
        grad_accum: run.grad_accum,
    };
    let opts = BertPretrainOptions {
        data: args.data.clone(),
        output: args.output.clone(),
        tokenizer: args.tokenizer.clone(),
        init_from: args.init_from.clone(),
        dims,
        resume: args.resume,
        run,
        optim,
        decay_embeddings: args.decay_embeddings,
        stop_after: args.stop_after,
    };
    let pb = ProgressBar::new(max_steps);
    pb.set_style(
        ProgressStyle::with_template(
            "{bar:30} {pos}/{len} {msg} [{elapsed_precise} < {eta_precise}]",
        )
        .expect("static template")
        .progress_chars("=> "),
    );
    let mut on_event = |e: PretrainEvent| match e {
        PretrainEvent::Start {
            message,
            start_step,
            ..
        } => {
            say(&pb, &message);
            if start_step > 0 {
                say(&pb, &format!("resuming at step {start_step}"));
            }
            pb.set_position(start_step);
        }
        PretrainEvent::Step { row } => {
            let f = |k: &str| row.get(k).and_then(|v| v.as_f64()).unwrap_or(f64::NAN);
            pb.set_position(row.get("step").and_then(|v| v.as_u64()).unwrap_or(0));
            pb.set_message(format!(
                "loss {:.4} (mlm {:.4}, nsp {:.4}, nsp acc {:.2}) | lr {:.2e} | {:.0} tok/s",
                f("loss"),
                f("mlm_loss"),
                f("nsp_loss"),
                f("nsp_accuracy"),
                f("lr"),
                f("tokens_per_s")
            ));
        }
        PretrainEvent::Eval { row } => {
            let f = |k: &str| row.get(k).and_then(|v| v.as_f64()).unwrap_or(f64::NAN);
            say(
                &pb,
                &format!(
                    "step {}: val loss {:.4} (mlm {:.4}, nsp {:.4}, nsp accuracy {:.3})",
                    row.get("step").and_then(|v| v.as_u64()).unwrap_or(0),
                    f("val_loss"),
                    f("val_mlm_loss"),
                    f("val_nsp_loss"),
                    f("val_nsp_accuracy")
                ),
            );
        }
        PretrainEvent::Saved { path } => say(&pb, &format!("saved {}", path.display())),
        PretrainEvent::Note(n) => say(&pb, &n),
    };
    let should_stop = || INTERRUPTS.load(Ordering::SeqCst) > 0;
    let s = run_bert_pretraining(&opts, &mut on_event, &should_stop)?;
    pb.finish();
    if !s.interrupted {
        eprintln!(
            "final model: {} (HF BertForPreTraining: config.json + model.safetensors + tokenizer)",
            args.output.display()
        );
    }
    Ok(Summary {
        steps: s.steps,
        final_loss: s.final_loss,
        first_val_loss: s.first_val_loss,
        last_val_loss: s.last_val_loss,
        checkpoint: s.checkpoint,
        interrupted: s.interrupted,
    })
}
