//! `lmkit quickstart`: the first command of the README. Trains a byte-level
//! BPE tokenizer and a small GPT-2 on a corpus available offline, for a few
//! minutes on 2 cores, showing progress; then prints the validation
//! perplexity before and after, and samples from the trained model.
//!
//! Default corpus, in order: `--data`; `assets/books/corpus.txt` (made by
//! `scripts/fetch-assets.sh`) when present; else the Rust toolchain's HTML
//! books under `$(rustc --print sysroot)/share/doc/rust/html`, extracted here
//! by `lmkit::data::html` (the same rules as scripts/html_to_text.py).
//! The toolchain's books are the robust default — every Rust install that
//! has the `rust-docs` component (rustup's default profile) has them, and
//! no Python or network is involved; the asset file is just the same text
//! already extracted, so it is used when it exists.

use crate::cmd::pretrain;
use anyhow::{bail, Context, Result};
use lmkit_tokenizers::train_bpe::{BpeTrainer, BpeTrainerOptions};
use std::path::{Path, PathBuf};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Text to train on instead of the default corpus (files, folders, JSONL).
    #[arg(long, num_args = 1..)]
    pub data: Vec<PathBuf>,
    /// Where the tokenizer, shards, checkpoints and metrics go.
    #[arg(long, default_value = "quickstart-out")]
    pub output: PathBuf,
    /// BPE vocabulary size (including <|endoftext|>).
    #[arg(long, default_value_t = 4096)]
    pub vocab_size: usize,
    /// Optimizer steps (default: as many as fit --train-seconds on this machine,
    /// measured before training starts).
    #[arg(long)]
    pub steps: Option<u64>,
    /// Time budget for the training steps when --steps is not given.
    #[arg(long, default_value_t = 180)]
    pub train_seconds: u64,
    /// Start over even if OUTPUT holds a previous quickstart run.
    #[arg(long)]
    pub fresh: bool,
}

/// Bytes of the corpus used to learn the tokenizer (enough for a 4k vocabulary).
const TOKENIZER_SAMPLE_BYTES: usize = 3 << 20;

pub fn run(args: Args) -> Result<()> {
    let out = &args.output;
    if args.fresh && out.exists() {
        std::fs::remove_dir_all(out).with_context(|| format!("removing {}", out.display()))?;
    }
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let start = std::time::Instant::now();

    // 1. Corpus.
    let data = if args.data.is_empty() {
        vec![default_corpus(out)?]
    } else {
        args.data.clone()
    };

    // 2. Tokenizer.
    let tok_dir = out.join("tokenizer");
    if !tok_dir.join("vocab.json").is_file() {
        eprintln!("[1/3] learning a {}-token BPE vocabulary", args.vocab_size);
        let mut trainer = BpeTrainer::new(BpeTrainerOptions {
            vocab_size: args.vocab_size,
            ..BpeTrainerOptions::default()
        })?;
        let mut fed = 0usize;
        for f in lmkit::data::shards::list_sources(&data)? {
            if fed >= TOKENIZER_SAMPLE_BYTES {
                break;
            }
            let bytes = std::fs::read(&f).with_context(|| format!("reading {}", f.display()))?;
            let take = bytes.len().min(TOKENIZER_SAMPLE_BYTES - fed);
            trainer.feed(&bytes[..take]);
            fed += take;
        }
        let pb = crate::progress::Progress::new("      merges {bar:30} {pos}/{len}");
        let tok = trainer.train(|done, total| {
            pb.set_length(total as u64);
            pb.update(done as u64, || "merges".into());
        })?;
        pb.finish();
        tok.save(&tok_dir)?;
    } else {
        eprintln!("[1/3] reusing the tokenizer in {}", tok_dir.display());
    }

    // 3. Model: a 4-layer, d 256 GPT-2 with a 128-token context, big enough to
    // write English-looking text after a few minutes on 2 cores.
    let run_dir = out.join("run");
    let resume = lmkit::recipes::pretrain::has_checkpoint(&run_dir)?;
    let steps = match (args.steps, resume) {
        (Some(s), _) => Some(s),
        (None, true) => None, // the interrupted run's own step count
        (None, false) => {
            let vocab = lmkit_tokenizers::BpeTokenizer::from_dir(&tok_dir)?.vocab_size();
            let step_s = time_one_step(vocab);
            // ~10% of the time goes to validation, sampling and checkpoints.
            let n = ((args.train_seconds as f64 * 0.9 / step_s) as u64).clamp(50, 3000);
            eprintln!(
                "      one step takes {step_s:.2} s here: {n} steps fit {} s",
                args.train_seconds
            );
            Some(n)
        }
    };
    let total = steps.unwrap_or(0);
    eprintln!("[2/3] pretraining a small GPT-2");
    let p = pretrain::Args {
        arch: "gpt2".into(),
        tokenizer: (!resume).then(|| tok_dir.clone()),
        data,
        output: run_dir.clone(),
        n_layer: (!resume).then_some(N_LAYER),
        n_embd: (!resume).then_some(N_EMBD),
        n_head: (!resume).then_some(N_HEAD),
        n_positions: (!resume).then_some(SEQ_LEN),
        seq_len: Some(SEQ_LEN),
        batch_size: Some(BATCH),
        grad_accum: Some(1),
        max_steps: steps,
        lr: (!resume).then_some(2e-3),
        min_lr: (!resume).then_some(2e-4),
        warmup_steps: (!resume).then_some((total / 20).max(10).min(total / 2)),
        eval_every: (!resume).then_some((total / 6).max(1)),
        eval_batches: Some(8),
        save_every: (!resume).then_some((total / 3).max(1)),
        seed: Some(1337),
        resume,
        ..Default::default()
    };
    let summary = pretrain::run_training(&p)?;
    if summary.interrupted {
        eprintln!(
            "stopped at step {}; run `lmkit quickstart` again to continue",
            summary.steps
        );
        if crate::interrupt::requested() {
            std::process::exit(crate::interrupt::EXIT_CODE);
        }
        return Ok(());
    }

    // 4. Results.
    eprintln!("[3/3] sampling from the trained model");
    let model_dir = run_dir.clone();
    let samples = lmkit::recipes::gpt2_pretrain::sample_texts(
        &model_dir,
        &[
            "The Rust programming language",
            "A function that",
            "In this chapter, we",
        ],
        60,
        7,
    )?;
    println!();
    for (prompt, text) in samples {
        println!("--- {prompt}{text}");
        println!();
    }
    if let (Some(a), Some(b)) = (summary.first_val_loss, summary.last_val_loss) {
        println!(
            "validation perplexity: {:.1} before training -> {:.1} after {} steps (loss {:.3} -> {:.3})",
            a.exp(),
            b.exp(),
            summary.steps,
            a,
            b
        );
    }
    println!(
        "done in {:.0} s. Model (HF layout): {}   curves: lmkit plot {}",
        start.elapsed().as_secs_f64(),
        model_dir.display(),
        run_dir.display()
    );
    Ok(())
}

const N_LAYER: usize = 4;
const N_EMBD: usize = 256;
const N_HEAD: usize = 4;
const SEQ_LEN: usize = 128;
const BATCH: usize = 16;

/// Seconds per optimizer step of the quickstart model on this machine
/// (forward + backward on random tokens; best of 3 after a warmup).
fn time_one_step(vocab_size: usize) -> f64 {
    use lmkit::models::gpt2::Gpt2;
    let cfg = lmkit::spec::Gpt2Config {
        vocab_size,
        n_positions: SEQ_LEN,
        n_embd: N_EMBD,
        n_layer: N_LAYER,
        n_head: N_HEAD,
        ..Default::default()
    };
    let Ok(mut m) = Gpt2::new_random(cfg, 0) else {
        return 1.0;
    };
    let n = BATCH * SEQ_LEN;
    let ids: Vec<u32> = (0..n).map(|i| (i * 7919 % vocab_size) as u32).collect();
    let targets: Vec<i32> = ids.iter().map(|&x| x as i32).collect();
    let mut best = f64::MAX;
    for i in 0..4 {
        let t0 = std::time::Instant::now();
        if m.forward_backward(&ids, &targets, BATCH, SEQ_LEN, 1.0)
            .is_err()
        {
            return 1.0;
        }
        if i > 0 {
            best = best.min(t0.elapsed().as_secs_f64());
        }
    }
    best
}

/// The default corpus file: assets/books/corpus.txt if present, else text
/// extracted from the toolchain's HTML books into OUT/corpus.txt (once).
fn default_corpus(out: &Path) -> Result<PathBuf> {
    let assets = [
        PathBuf::from("assets/books/corpus.txt"),
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../assets/books/corpus.txt"),
    ];
    if let Some(p) = assets.iter().find(|p| p.is_file()) {
        eprintln!("corpus: {}", p.display());
        return Ok(p.clone());
    }
    let cached = out.join("corpus.txt");
    if cached.is_file() {
        eprintln!("corpus: {}", cached.display());
        return Ok(cached);
    }
    let sysroot = std::process::Command::new("rustc")
        .args(["--print", "sysroot"])
        .output()
        .context("running `rustc --print sysroot` to find the toolchain's books")?;
    let html =
        PathBuf::from(String::from_utf8_lossy(&sysroot.stdout).trim()).join("share/doc/rust/html");
    if !html.join("book").is_dir() {
        bail!(
            "no default corpus: {} has no books (install them with `rustup component add rust-docs`) \
             and assets/books/corpus.txt is absent (scripts/fetch-assets.sh makes it); or pass --data FILE",
            html.display()
        );
    }
    eprintln!(
        "corpus: extracting the text of the Rust books in {}",
        html.display()
    );
    let text = lmkit::data::html::books_text(&html)?;
    lmkit::util::fs::atomic_write(&cached, text.as_bytes())?;
    Ok(cached)
}
