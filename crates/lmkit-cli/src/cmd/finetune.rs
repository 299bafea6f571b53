//! `lmkit finetune`: fine-tune a BERT or GPT-2 checkpoint for sequence
//! classification (`--task classify`, JSONL `{"text", "text_pair"?,
//! "label"}`; GPT-2 joins a pair with `<|endoftext|>` and adds `--lm-coef`
//! times the LM loss), a BERT checkpoint for token classification (`--task
//! token-classify`, CoNLL-style columns or JSONL `{"tokens", "tags"}`, scored
//! with seqeval's entity F1), regression (`--task regression`, the classify
//! JSONL with a number as `label`: a one-output classifier trained with MSE,
//! scored with Pearson / Spearman) or SQuAD span QA (`--task qa`, SQuAD v1.1 JSON), either family
//! for multiple choice (`--task multiple-choice`, JSONL `{"context", "question"?, "choices",
//! "label"}` or SWAG's columns; GPT-2 adds `--lm-coef` times the LM loss), or a GPT-2
//! checkpoint as a causal LM on text (`--task lm`). OUTPUT gets an HF
//! checkpoint + tokenizer (loadable by `lmkit classify` / `qa` / `generate`
//! and transformers) and `metrics.jsonl` (train rows every step, eval rows
//! after every epoch), and `checkpoints/step-N/` (model + optimizer + trainer
//! state) at every epoch end or `--save-every` steps. The same command plus
//! `--resume` continues a run exactly; Ctrl-C once finishes the step, saves
//! a checkpoint and exits 130, twice exits at once.

use std::path::PathBuf;

use anyhow::{Context, Result};
use lmkit::checkpoint::resolve_model_dir;
use lmkit::recipes::finetune::{
    finetune_on, FinetuneEvent, FinetuneOptions, FinetuneTask, StopRequest,
};
use lmkit::recipes::RecipeError;
use serde_json::Value;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// classify | qa | lm | token-classify | regression | multiple-choice.
    #[arg(long)]
    pub task: FinetuneTask,
    /// Starting checkpoint (HF layout): any BERT for classify/qa/token-classify/
    /// regression/multiple-choice (a bare BertModel gets new heads), a GPT-2 for
    /// classify/lm/multiple-choice.
    #[arg(long)]
    pub model: String,
    /// Training data: JSONL (classify; regression with a number as `label`), SQuAD v1.1 JSON
    /// (qa), text or JSONL `text` (lm),
    /// CoNLL-style columns (token first, tag last) or JSONL `{"tokens", "tags"}` (token-classify),
    /// JSONL `{"context", "question"?, "choices", "label"}` or SWAG's `sent1`, `sent2`,
    /// `ending0..`, `label` (multiple-choice; the same number of choices on every row).
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
    #[arg(long, default_value_t = 2)]
    pub keep: usize,
    #[arg(long, default_value_t = 3)]
    pub epochs: usize,
    #[arg(long, default_value_t = 16)]
    pub batch_size: usize,
    /// Peak learning rate (linear warmup, then linear decay to 0).
    #[arg(long, default_value_t = 5e-5)]
    pub lr: f32,
    /// Fraction of the steps used for warmup.
    #[arg(long, default_value_t = 0.0)]
    pub warmup_ratio: f64,
    /// Longest input in tokens [default: 128; qa: 384 (the window)].
    #[arg(long)]
    pub max_seq_len: Option<usize>,
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Decoupled AdamW weight decay on matmul weights.
    #[arg(long, default_value_t = 0.0)]
    pub weight_decay: f32,
    /// Global gradient-norm clip, 0 = off.
    #[arg(long, default_value_t = 1.0)]
    pub grad_clip: f32,
    /// qa: tokens of overlap between windows of a long context.
    #[arg(long, default_value_t = 128)]
    pub doc_stride: usize,
    /// qa: longest answer in tokens (evaluation).
    #[arg(long, default_value_t = 30)]
    pub max_answer_len: usize,
    /// qa: answers considered per question (evaluation).
    #[arg(long, default_value_t = 20)]
    pub n_best: usize,
    /// Stop after this many steps (the schedule still spans all epochs).
    #[arg(long)]
    pub max_steps: Option<u64>,
    #[arg(long, default_value_t = 64)]
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
    #[arg(long, default_value_t = 0.5)]
    pub lm_coef: f32,
    #[command(flatten)]
    pub dist: crate::distributed::DistArgs,
    /// f32 (exact against HF), or bf16: mixed precision, the matmuls of every
    /// block (GPT-2: and the LM head) with bf16 operands and f32 sums (weights,
    /// gradients and AdamW state stay f32). --resume needs the run's.
    #[arg(long, default_value = "f32")]
    pub dtype: String,
    /// GPT-2: recompute attention probabilities, GELU and LayerNorm outputs in
    /// backward instead of keeping them: the same gradients in far less memory
    /// at long sequences (an error for BERT).
    #[arg(long)]
    pub recompute: bool,
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
        grad_clip: a.grad_clip,
        doc_stride: a.doc_stride,
        max_answer_len: a.max_answer_len,
        n_best: a.n_best,
        max_steps: a.max_steps,
        overwrite: a.overwrite,
        max_shard_size: a.max_shard_size,
        lm_coef: a.lm_coef,
        resume: a.resume,
        save_every: a.save_every,
        keep: a.keep,
        shard_optimizer: a.dist.shard_optimizer,
        dtype: a.dtype.parse()?,
        recompute: a.recompute,
        stop: StopRequest::new(crate::interrupt::requested),
        ..FinetuneOptions::default()
    };
    // `mpirun -np N lmkit finetune ...`: one rank of a data-parallel run;
    // rank 0 prints and writes.
    let comm = a.dist.communicator()?;
    let root = comm.is_root();
    crate::interrupt::install();
    let pb = crate::progress::Progress::new(
        "{bar:30} {pos}/{len} {msg} [{elapsed_precise} < {eta_precise}]",
    );
    let mut on_event = |e: FinetuneEvent| match e {
        _ if !root => {}
        FinetuneEvent::Start {
            description,
            train_examples,
            eval_examples,
            total_steps,
            start_step,
        } => {
            pb.line(&format!(
                "{description}; {train_examples} training / {eval_examples} eval items, {total_steps} steps"
            ));
            if start_step > 0 {
                pb.line(&format!("resuming at step {start_step}"));
            }
            pb.set_length(total_steps);
            pb.update(start_step, String::new);
        }
        FinetuneEvent::Step {
            epoch,
            stats,
            examples_per_s,
        } => {
            pb.update(stats.step, || {
                format!(
                    "epoch {} | loss {:.4} | lr {:.2e} | {examples_per_s:.1} ex/s",
                    epoch + 1,
                    stats.loss,
                    stats.lr
                )
            });
        }
        FinetuneEvent::Eval { epoch, row } => {
            let shown: Vec<String> = row
                .iter()
                .filter(|(k, _)| !matches!(k.as_str(), "step" | "epoch"))
                .map(|(k, v)| match v {
                    Value::Number(n) if n.is_f64() => {
                        format!("{k} {:.4}", n.as_f64().unwrap_or(0.0))
                    }
                    other => format!("{k} {other}"),
                })
                .collect();
            pb.line(&format!("epoch {}: {}", epoch + 1, shown.join(", ")));
        }
        FinetuneEvent::Saved { path } => pb.line(&format!("saved {}", path.display())),
        FinetuneEvent::Note(n) => pb.line(&n),
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
