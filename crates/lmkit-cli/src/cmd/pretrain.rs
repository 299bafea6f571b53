//! `lmkit pretrain`: flags → [`PretrainOptions`] → [`lmkit::recipes::pretrain::pretrain`],
//! with a progress bar, Ctrl-C (first: finish the step and save; second:
//! quit) and `--threads`. The progress shown is `progress/pretrain.rs`'s.

use crate::progress::pretrain::PretrainView;
use anyhow::{bail, Result};
use lmkit::recipes::pretrain::{
    self as lib, ModelSize, PretrainEvent, PretrainOptions, PretrainSummary,
};
use lmkit::spec::{Family, ScheduleKind};
use lmkit::util::comm::Communicator;
use std::path::PathBuf;

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
    /// Text files, folders (searched for .txt/.md/.jsonl...), JSONL or
    /// Parquet files (the text in each row's --text-field). gpt2: files or form-feed lines separate documents;
    /// `.bin` files are token ids already (llm.c's or nanoGPT's, as `lmkit
    /// tokenize --format` writes them), used as they are. bert: one sentence per line, a blank line between documents (as BERT's
    /// create_pretraining_data). With --resume, defaults to the run's data.
    #[arg(long, num_args = 1..)]
    pub data: Vec<PathBuf>,
    /// The field of JSONL / Parquet rows that holds the text [default: text;
    /// with --resume, the run's].
    #[arg(long)]
    pub text_field: Option<String>,
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
    /// Start from this HF checkpoint: a folder (config.json + model.safetensors) or a hub name.
    #[arg(long)]
    pub init_from: Option<String>,
    /// Continue from the newest checkpoint in OUTPUT/checkpoints, exactly:
    /// add it to the command that started the run (a flag that contradicts
    /// the checkpoint is an error), or give just --output and --resume.
    #[arg(long)]
    pub resume: bool,
    /// Stop (with a checkpoint) after this many steps of this invocation,
    /// without changing the schedule; resume later with --resume.
    #[arg(long)]
    pub stop_after: Option<u64>,
    /// A metrics row every N steps [default: 1].
    #[arg(long)]
    pub log_every: Option<u64>,
    /// Also write OUTPUT/overlap.bloom, the Bloom filter of the data's 8-grams,
    /// for `lmkit eval --overlap` and `lmkit overlap --filter` (train–test overlap).
    #[arg(long)]
    pub overlap_filter: bool,
    /// Save models in shards of at most this size (e.g. 5GB, 500MiB), as HF's
    /// max_shard_size: model-0000K-of-0000N.safetensors + model.safetensors.index.json.
    #[arg(long, value_parser = lmkit::util::size::parse_byte_size)]
    pub max_shard_size: Option<u64>,
    #[command(flatten)]
    pub dist: crate::distributed::DistArgs,
    /// f32 (exact against HF), or bf16: mixed precision, the matmuls of every
    /// block (GPT-2: and the LM head) with bf16 operands and f32 sums (weights,
    /// gradients and AdamW state stay f32), or auto: bf16 where this CPU runs the
    /// model's products faster in it, else f32 (never int8) [default: f32; with
    /// --resume, the run's].
    #[arg(long)]
    pub dtype: Option<String>,
    /// GPT-2: recompute each block's attention probabilities, GELU and LayerNorm
    /// outputs in backward instead of keeping them: the same gradients, far less
    /// memory at long sequences (the [B, heads, T, T] probabilities of every
    /// layer), one more attention forward per layer (selective recomputation).
    #[arg(long)]
    pub recompute: bool,
    /// Time each step's phases (matmuls, attention, LayerNorm, GELU, the LM
    /// head's loss, AdamW...): `phase_ms` in every metrics row, and at the
    /// end a table of the mean step (after the first) with the matmul share.
    #[arg(long)]
    pub profile: bool,
}

/// The library options these flags describe.
pub fn options(a: &Args) -> Result<PretrainOptions> {
    let family = match a.arch.as_str() {
        "gpt2" => Family::Gpt2,
        "bert" => Family::Bert,
        other => bail!("--arch {other}: expected gpt2 or bert"),
    };
    Ok(PretrainOptions {
        family,
        data: a.data.clone(),
        text_field: a.text_field.clone(),
        output: a.output.clone(),
        tokenizer: a.tokenizer.clone(),
        init_from: a
            .init_from
            .as_deref()
            .map(lmkit::checkpoint::resolve_model_dir)
            .transpose()?,
        resume: a.resume,
        stop_after: a.stop_after,
        size: ModelSize {
            preset: a.preset.clone(),
            n_layer: a.n_layer,
            n_embd: a.n_embd,
            n_head: a.n_head,
            n_positions: a.n_positions,
        },
        seq_len: a.seq_len,
        batch_size: a.batch_size,
        grad_accum: a.grad_accum,
        max_steps: a.max_steps,
        lr: a.lr,
        min_lr: a.min_lr,
        warmup_steps: a.warmup_steps,
        schedule: a.schedule,
        weight_decay: a.weight_decay,
        beta1: a.beta1,
        beta2: a.beta2,
        grad_clip: a.grad_clip,
        eval_every: a.eval_every,
        eval_batches: a.eval_batches,
        val_fraction: a.val_fraction,
        save_every: a.save_every,
        keep: a.keep,
        log_every: a.log_every,
        seed: a.seed,
        decay_embeddings: a.decay_embeddings,
        whole_word_masking: a.whole_word_masking,
        sample_every: a.sample_every,
        sample_prompt: a.sample_prompt.clone(),
        sample_tokens: a.sample_tokens,
        overlap_filter: a.overlap_filter,
        max_shard_size: a.max_shard_size,
        shard_optimizer: a.dist.shard_optimizer,
        dtype: a.dtype.as_deref().map(str::parse).transpose()?,
        recompute: a.recompute,
        profile: a.profile,
    })
}

pub fn run(args: Args) -> Result<()> {
    let s = run_training(&args)?;
    if s.interrupted {
        eprintln!("stopped at step {}; continue with --resume", s.steps);
        if crate::interrupt::requested() {
            std::process::exit(crate::interrupt::EXIT_CODE);
        }
    }
    Ok(())
}

/// The whole pretraining run, with progress on stderr.
pub fn run_training(args: &Args) -> Result<PretrainSummary> {
    let opts = options(args)?;
    let comm = args.dist.communicator()?;
    let r = train_on(args, &opts, comm.as_ref());
    crate::distributed::or_abort(comm.as_ref(), r)
}

/// The run as one rank of `comm`: rank 0 prints.
fn train_on(
    args: &Args,
    opts: &PretrainOptions,
    comm: &dyn Communicator,
) -> Result<PretrainSummary> {
    crate::interrupt::install();
    let root = comm.is_root();
    let view = PretrainView::new(opts.family == Family::Bert);
    let mut on_event = |e: PretrainEvent| {
        if root {
            view.show(e);
        }
    };
    let stop = lmkit::train::StopRequest::new(crate::interrupt::requested);
    let t0 = std::time::Instant::now();
    let s = lib::pretrain_on(opts, comm, &mut on_event, &stop);
    view.finish();
    let s = s?;
    if !root {
        return Ok(s);
    }
    let loss = |l: Option<f64>| l.map_or("-".to_string(), |l| format!("{l:.4}"));
    eprintln!(
        "{} at step {} after {:.1} s: final loss {}, validation loss {} (first {})",
        if s.interrupted { "stopped" } else { "done" },
        s.steps,
        t0.elapsed().as_secs_f64(),
        loss(s.final_loss),
        loss(s.last_val_loss),
        loss(s.first_val_loss)
    );
    if let Some(p) = &s.profile {
        eprint!("{}", p.table());
    }
    if !s.interrupted {
        eprintln!(
            "final model: {} (HF layout: config.json, safetensors weights, tokenizer)",
            args.output.display()
        );
    }
    Ok(s)
}
