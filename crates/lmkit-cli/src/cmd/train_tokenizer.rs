//! `lmkit train-tokenizer --kind bpe|wordpiece --vocab-size N --output DIR FILES...`
//!
//! Learns a vocabulary from text files and writes it to DIR: byte-level BPE
//! (vocab.json + merges.txt + tokenizer.json) or WordPiece (vocab.txt). Then
//! loads DIR back and checks that it round-trips a sample of the input.

use std::path::PathBuf;
use std::time::Instant;

use crate::progress::Progress;
use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use lmkit_tokenizers::train_bpe::{BpeTrainer, BpeTrainerOptions};
use lmkit_tokenizers::wordpiece::{
    train_wordpiece_files, TrainProgress, WordPieceTokenizer, WordPieceTrainer,
};
use lmkit_tokenizers::Tokenizer;

#[derive(Clone, Copy, ValueEnum)]
pub enum Kind {
    /// GPT-2 style byte-level BPE.
    Bpe,
    /// BERT style WordPiece.
    Wordpiece,
}

#[derive(Args)]
pub struct TrainTokenizerArgs {
    #[arg(long, value_enum)]
    pub kind: Kind,
    /// Final vocabulary size, special tokens included.
    #[arg(long)]
    pub vocab_size: usize,
    /// Output directory (created if needed).
    #[arg(long)]
    pub output: PathBuf,
    /// Ignore pairs (BPE) or words seen fewer times than this.
    #[arg(long, default_value_t = 2)]
    pub min_frequency: u64,
    /// Special tokens (repeatable). Default: `<|endoftext|>` for BPE.
    #[arg(long = "special-token")]
    pub special_tokens: Vec<String>,
    /// Text files to learn from.
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
}

fn bar(len: u64, what: &str) -> Progress {
    let bar = Progress::new(&format!(
        "{what:>9} [{{bar:40}}] {{pos}}/{{len}} {{per_sec}} eta {{eta}}"
    ));
    bar.set_length(len);
    bar
}

/// Reads each file and hands its bytes to `feed`, with a progress bar over bytes.
fn read_files(files: &[PathBuf], mut feed: impl FnMut(&[u8])) -> Result<u64> {
    let total: u64 = files
        .iter()
        .map(|f| {
            std::fs::metadata(f)
                .map(|m| m.len())
                .with_context(|| format!("reading {}", f.display()))
        })
        .sum::<Result<u64>>()?;
    let progress = bar(total, "counting");
    let mut done = 0;
    for file in files {
        let bytes = lmkit::data::source::read_source(file)?;
        feed(&bytes);
        done += std::fs::metadata(file).map_or(0, |m| m.len());
        progress.update(done, || "bytes counted".into());
    }
    progress.finish();
    Ok(total)
}

pub fn run(args: TrainTokenizerArgs) -> Result<()> {
    let start = Instant::now();
    let tokenizer: Tokenizer = match args.kind {
        Kind::Bpe => train_bpe(&args)?.into(),
        Kind::Wordpiece => train_wordpiece(&args)?.into(),
    };
    tokenizer
        .save(&args.output)
        .with_context(|| format!("writing the tokenizer to {}", args.output.display()))?;
    check_round_trip(&args)?;
    eprintln!(
        "trained a {} tokenizer of {} tokens in {:.1}s, written to {}",
        tokenizer.kind(),
        tokenizer.vocab_size(),
        start.elapsed().as_secs_f64(),
        args.output.display()
    );
    Ok(())
}

fn train_bpe(args: &TrainTokenizerArgs) -> Result<lmkit_tokenizers::BpeTokenizer> {
    let mut options = BpeTrainerOptions {
        vocab_size: args.vocab_size,
        min_frequency: args.min_frequency,
        ..Default::default()
    };
    if !args.special_tokens.is_empty() {
        options.special_tokens = args.special_tokens.clone();
    }
    let mut trainer = BpeTrainer::new(options)?;
    read_files(&args.files, |text| trainer.feed(text))?;
    let progress = bar(0, "merging");
    let tokenizer = trainer.train(|done, total| {
        progress.set_length(total as u64);
        progress.update(done as u64, || "merges".into());
    })?;
    progress.finish();
    Ok(tokenizer)
}

fn train_wordpiece(args: &TrainTokenizerArgs) -> Result<WordPieceTokenizer> {
    if !args.special_tokens.is_empty() {
        bail!("--special-token is for BPE; WordPiece always has [PAD] [UNK] [CLS] [SEP] [MASK]");
    }
    let trainer = WordPieceTrainer {
        vocab_size: args.vocab_size,
        min_frequency: args.min_frequency,
        ..Default::default()
    };
    let progress = bar(0, "training");
    let tokenizer = train_wordpiece_files(&args.files, &trainer, |p| match p {
        TrainProgress::Counting {
            done_bytes,
            total_bytes,
        } => {
            progress.set_length(total_bytes);
            progress.update(done_bytes, || "bytes counted".into());
        }
        TrainProgress::Merging { vocab_size, target } => {
            progress.set_length(target as u64);
            progress.update(vocab_size as u64, || "tokens in the vocabulary".into());
        }
    })?;
    progress.finish();
    Ok(tokenizer)
}

/// Loads the written files back and checks they round-trip the start of the input.
fn check_round_trip(args: &TrainTokenizerArgs) -> Result<()> {
    let reloaded = Tokenizer::from_dir(&args.output)
        .with_context(|| format!("loading back {}", args.output.display()))?;
    let mut sample = std::fs::read(&args.files[0])
        .with_context(|| format!("reading {}", args.files[0].display()))?;
    sample.truncate(1 << 16);
    if std::str::from_utf8(&sample).is_err() {
        // Cut at a character boundary so WordPiece can take the sample too.
        let valid = std::str::from_utf8(&sample).map_or_else(|e| e.valid_up_to(), |s| s.len());
        sample.truncate(valid);
    }
    let ids = reloaded.encode_ids(&sample, false)?;
    let back = reloaded.decode(&ids)?;
    if reloaded.kind() == "bpe" && back != sample {
        bail!("the trained tokenizer does not round-trip its own training text");
    }
    Ok(())
}
