//! Times WordPiece encoding of every non-empty line of a file, one call per
//! line and in batches of 1000 lines, and prints lines/s, and loading the
//! tokenizer (best of 10, ms) (read by scripts/bench_wordpiece.py).
//!
//!     cargo run --release --example wordpiece_bench -p lmkit-tokenizers -- FILE [TOKENIZER_DIR]

use std::time::Instant;

use lmkit_tokenizers::wordpiece::WordPieceTokenizer;

/// Lines per `encode_batch` call (the Python side uses the same).
const BATCH: usize = 1000;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let file = args
        .next()
        .ok_or("usage: wordpiece_bench FILE [TOKENIZER_DIR]")?;
    let dir = args.next().unwrap_or_else(|| "assets/minilm".into());
    let mut load = f64::INFINITY;
    for _ in 0..10 {
        let t = Instant::now();
        std::hint::black_box(WordPieceTokenizer::from_dir(&dir)?);
        load = load.min(t.elapsed().as_secs_f64());
    }
    let mut tok = WordPieceTokenizer::from_dir(&dir)?;
    tok.set_truncation(None).set_padding(None);
    let text = std::fs::read_to_string(&file)?;
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();

    // Warm up, and count tokens for a cross-check with the Python side.
    let mut tokens = 0usize;
    for l in &lines {
        tokens += tok.encode(l, true)?.len();
    }
    let best = |f: &mut dyn FnMut() -> Result<(), lmkit_tokenizers::Error>| {
        let mut best = f64::INFINITY;
        for _ in 0..5 {
            let t = Instant::now();
            f()?;
            best = best.min(t.elapsed().as_secs_f64());
        }
        Ok::<f64, lmkit_tokenizers::Error>(best)
    };
    let single = best(&mut || {
        for l in &lines {
            std::hint::black_box(tok.encode(l, true)?);
        }
        Ok(())
    })?;
    let batch = best(&mut || {
        for chunk in lines.chunks(BATCH) {
            std::hint::black_box(tok.encode_batch(chunk, true)?);
        }
        Ok(())
    })?;
    println!("lines {}", lines.len());
    println!("tokens {tokens}");
    println!("single_lines_per_s {:.0}", lines.len() as f64 / single);
    println!("batch_lines_per_s {:.0}", lines.len() as f64 / batch);
    println!("load_ms {:.3}", load * 1e3);
    Ok(())
}
