//! Trains a WordPiece vocabulary on text files and saves it (HF layout),
//! printing how long counting and merging took.
//!
//!     cargo run --release --example wordpiece_train -p lmkit-tokenizers -- VOCAB_SIZE OUT_DIR FILE...

use std::time::Instant;

use lmkit_tokenizers::wordpiece::{train_wordpiece_files, TrainProgress, WordPieceTrainer};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [size, out, files @ ..] = args.as_slice() else {
        return Err("usage: wordpiece_train VOCAB_SIZE OUT_DIR FILE...".into());
    };
    if files.is_empty() {
        return Err("no input files".into());
    }
    let trainer = WordPieceTrainer {
        vocab_size: size.parse()?,
        ..Default::default()
    };
    let bytes: u64 = files
        .iter()
        .map(|f| std::fs::metadata(f).map_or(0, |m| m.len()))
        .sum();
    let start = Instant::now();
    let mut counted = None;
    let tok = train_wordpiece_files(files, &trainer, |p| {
        if let TrainProgress::Merging { .. } = p {
            counted.get_or_insert_with(|| start.elapsed().as_secs_f64());
        }
    })?;
    let total = start.elapsed().as_secs_f64();
    tok.save(out)?;
    let counting = counted.unwrap_or(total);
    println!(
        "{:.1} MB: counting {counting:.2}s, merges {:.2}s, total {total:.2}s, vocab {}",
        bytes as f64 / 1e6,
        total - counting,
        tok.vocab_size()
    );
    Ok(())
}
