//! `lmkit finetune`: fine-tune a BERT or GPT-2 checkpoint for a task of the
//! library's registry (`lmkit finetune --help` lists them with their data).
//! OUTPUT gets an HF checkpoint + tokenizer (loadable by `lmkit classify` /
//! `qa` / `ner` / `generate`, `lmkit eval` and transformers) and
//! `metrics.jsonl` (train rows every step, eval rows after every epoch, the
//! metrics `lmkit eval` prints prefixed `eval_`), and `checkpoints/step-N/`
//! (model + optimizer + trainer state) at every epoch end or `--save-every`
//! steps. The same command plus `--resume` continues a run exactly; Ctrl-C
//! once finishes the step, saves a checkpoint and exits 130, twice exits at
//! once.

use std::path::PathBuf;

use anyhow::{Context, Result};
use lmkit::checkpoint::resolve_model_dir;
use lmkit::models::auto_dtype::DtypeRequest;
use lmkit::recipes::finetune::{finetune_on, FinetuneEvent, FinetuneOptions, StopRequest};
use lmkit::recipes::RecipeError;
use lmkit::spec::Precision;
use lmkit::tasks::TaskKind;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// What to fine-tune for (see the list below).
    #[arg(long)]
    pub task: TaskKind,
    /// Starting checkpoint (HF layout) of a family the task supports; a bare
    /// BertModel or GPT-2 LM gets the task's head, initialised as HF does.
    #[arg(long)]
    pub model: String,
    /// Training data, in the task's format (see the list below).
    #[arg(long)]
    pub train: PathBuf,
    /// Evaluation data in the same format, scored after every epoch.
    #[arg(long)]
    pub eval: Option<PathBuf>,
    /// Output folder: the fine-tuned model, tokenizer and metrics.jsonl.
    #[arg(long)]
    pub output: PathBuf,
    /// Write into a non-empty --output folder, replacing its files (and
    /// an earlier run's checkpoints).
    #[arg(long)]
    pub overwrite: bool,
    /// Continue the run in --output from its newest checkpoint, exactly:
    /// give the command that started it plus --resume (a flag that
    /// contradicts the checkpoint is an error; --max-steps may change).
    #[arg(long)]
    pub resume: bool,
    /// A checkpoint (OUTPUT/checkpoints/step-N: model, optimizer, trainer
    /// state) every N steps, 0 = only at the end and on Ctrl-C [default: at
    /// the end of every epoch].
    #[arg(long)]
    pub save_every: Option<u64>,
    /// Checkpoints to keep.
    #[arg(long, default_value_t = FinetuneOptions::default().keep)]
    pub keep: usize,
    #[arg(long, default_value_t = FinetuneOptions::default().epochs)]
    pub epochs: usize,
    #[arg(long, default_value_t = FinetuneOptions::default().batch_size)]
    pub batch_size: usize,
    /// Peak learning rate (linear warmup, then linear decay to 0).
    #[arg(long, default_value_t = FinetuneOptions::default().lr)]
    pub lr: f32,
    /// Fraction of the steps used for warmup.
    #[arg(long, default_value_t = FinetuneOptions::default().warmup_ratio)]
    pub warmup_ratio: f64,
    /// Longest input in tokens [default: 128; qa: 384 (the window)].
    #[arg(long)]
    pub max_seq_len: Option<usize>,
    #[arg(long, default_value_t = FinetuneOptions::default().seed)]
    pub seed: u64,
    /// Decoupled AdamW weight decay on matmul weights.
    #[arg(long, default_value_t = FinetuneOptions::default().weight_decay)]
    pub weight_decay: f32,
    /// AdamW's β1.
    #[arg(long, default_value_t = FinetuneOptions::default().beta1)]
    pub beta1: f32,
    /// AdamW's β2.
    #[arg(long, default_value_t = FinetuneOptions::default().beta2)]
    pub beta2: f32,
    /// AdamW's ε.
    #[arg(long, default_value_t = FinetuneOptions::default().eps)]
    pub eps: f32,
    /// A metrics row every N steps.
    #[arg(long, default_value_t = FinetuneOptions::default().log_every)]
    pub log_every: u64,
    /// Global gradient-norm clip, 0 = off.
    #[arg(long, default_value_t = FinetuneOptions::default().grad_clip)]
    pub grad_clip: f32,
    /// qa: tokens of overlap between windows of a long context.
    #[arg(long, default_value_t = FinetuneOptions::default().doc_stride)]
    pub doc_stride: usize,
    /// qa: longest answer in tokens (evaluation).
    #[arg(long, default_value_t = FinetuneOptions::default().max_answer_len)]
    pub max_answer_len: usize,
    /// qa: answers considered per question (evaluation).
    #[arg(long, default_value_t = FinetuneOptions::default().n_best)]
    pub n_best: usize,
    /// Stop after this many steps (the schedule still spans all epochs).
    #[arg(long)]
    pub max_steps: Option<u64>,
    #[arg(long, default_value_t = FinetuneOptions::default().eval_batch_size)]
    pub eval_batch_size: usize,
    /// Print the summary as one JSON object.
    #[arg(long)]
    pub json: bool,
    /// Save models in shards of at most this size (e.g. 5GB, 500MiB), as HF's
    /// max_shard_size: model-0000K-of-0000N.safetensors + model.safetensors.index.json.
    #[arg(long, value_parser = lmkit::util::size::parse_byte_size)]
    pub max_shard_size: Option<u64>,
    /// classify and multiple-choice on GPT-2: weight λ of the LM loss on the
    /// same inputs (GPT-1's L2 + λ·L1); 0 = off.
    #[arg(long, default_value_t = FinetuneOptions::default().lm_coef)]
    pub lm_coef: f32,
    #[command(flatten)]
    pub dist: crate::distributed::DistArgs,
    /// f32 (exact against HF), or bf16: mixed precision, the matmuls of every
    /// block (GPT-2: and the LM head) with bf16 operands and f32 sums (weights,
    /// gradients and AdamW state stay f32), or auto: bf16 where this CPU runs the
    /// model's products faster in it, else f32 (never int8). --resume needs the run's.
    #[arg(long, default_value_t = FinetuneOptions::default().dtype)]
    pub dtype: DtypeRequest<Precision>,
    /// GPT-2: recompute attention probabilities, GELU and LayerNorm outputs in
    /// backward instead of keeping them: the same gradients in far less memory
    /// at long sequences (an error for BERT).
    #[arg(long)]
    pub recompute: bool,
    /// Time each step's phases (matmuls, attention, LayerNorm, GELU, the
    /// heads, AdamW...): `phase_ms` in every metrics row, and at the end a
    /// table of the mean step (after the first) with the matmul share.
    #[arg(long)]
    pub profile: bool,
}

pub fn run(a: Args) -> Result<()> {
    let dir = resolve_model_dir(&a.model)?;
    let opts = FinetuneOptions {
        epochs: a.epochs,
        batch_size: a.batch_size,
        eval_batch_size: a.eval_batch_size,
        lr: a.lr,
        warmup_ratio: a.warmup_ratio,
        max_seq_len: a.max_seq_len.unwrap_or(a.task.default_max_seq_len()),
        seed: a.seed,
        weight_decay: a.weight_decay,
        beta1: a.beta1,
        beta2: a.beta2,
        eps: a.eps,
        grad_clip: a.grad_clip,
        doc_stride: a.doc_stride,
        max_answer_len: a.max_answer_len,
        n_best: a.n_best,
        max_steps: a.max_steps,
        log_every: a.log_every,
        overwrite: a.overwrite,
        max_shard_size: a.max_shard_size,
        lm_coef: a.lm_coef,
        resume: a.resume,
        save_every: a.save_every,
        keep: a.keep,
        shard_optimizer: a.dist.shard_optimizer,
        dtype: a.dtype,
        recompute: a.recompute,
        profile: a.profile,
        stop: StopRequest::new(crate::interrupt::requested),
    };
    // `mpirun -np N lmkit finetune ...`: one rank of a data-parallel run;
    // rank 0 prints and writes.
    let comm = a.dist.communicator()?;
    let root = comm.is_root();
    crate::interrupt::install();
    let pb = crate::progress::Progress::new(
        "{bar:30} {pos}/{len} {msg} [{elapsed_precise} < {eta_precise}]",
    );
    let mut on_event = |e: FinetuneEvent| {
        if !root {
            return;
        }
        match &e {
            FinetuneEvent::Start {
                total_steps,
                start_step,
                ..
            } => {
                pb.set_length(*total_steps);
                pb.update(*start_step, String::new);
            }
            FinetuneEvent::Step { stats, .. } => {
                pb.update(stats.step, || e.step_text().unwrap_or_default());
            }
            _ => {}
        }
        for line in e.lines() {
            pb.line(&line);
        }
    };
    let eval = a.eval.as_deref();
    let summary = finetune_on(
        a.task,
        &dir,
        &a.train,
        eval,
        &a.output,
        &opts,
        comm.as_ref(),
        &mut on_event,
    )
    .map_err(|e| match e {
        RecipeError::OutputNotEmpty { .. } => {
            anyhow::anyhow!("{e} (pass --overwrite to replace its files)")
        }
        e => anyhow::Error::new(e),
    })
    .with_context(|| format!("fine-tuning {}", dir.display()));
    pb.finish();
    let summary = crate::distributed::or_abort(comm.as_ref(), summary)?;
    if !root {
        return Ok(());
    }
    if a.json {
        let j = summary.to_json();
        println!("{j}");
    } else {
        eprintln!(
            "{} steps in {:.1} s of training ({:.1} examples/s, {:.0} tokens/s); final loss {}",
            summary.steps,
            summary.train_seconds,
            summary.examples_per_s,
            summary.tokens_per_s,
            summary.final_loss.map_or("-".into(), |l| format!("{l:.4}"))
        );
        if let Some(p) = &summary.profile {
            eprint!("{}", p.table());
        }
        if !summary.interrupted {
            eprintln!("model written to {}", summary.output.display());
        }
    }
    if summary.interrupted {
        eprintln!(
            "stopped at step {}{}; continue with the same command plus --resume",
            summary.steps,
            summary
                .checkpoint
                .as_ref()
                .map_or(String::new(), |c| format!(" (checkpoint {})", c.display()))
        );
        if crate::interrupt::requested() {
            std::process::exit(crate::interrupt::EXIT_CODE);
        }
    }
    Ok(())
}
