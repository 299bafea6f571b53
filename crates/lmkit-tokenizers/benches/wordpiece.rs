//! WordPiece encode throughput on the real MiniLM vocabulary and the books
//! corpus. Ratios against HF tokenizers come from `scripts/bench_wordpiece.py`.

use std::path::Path;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use lmkit_tokenizers::wordpiece::WordPieceTokenizer;

fn load() -> Option<(WordPieceTokenizer, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../assets");
    let mut tok = WordPieceTokenizer::from_dir(root.join("minilm")).ok()?;
    tok.set_truncation(None).set_padding(None);
    let text = std::fs::read_to_string(root.join("books/corpus.txt")).ok()?;
    Some((tok, text))
}

fn bench(c: &mut Criterion) {
    let Some((tok, text)) = load() else {
        eprintln!("assets/ missing: run scripts/fetch-assets.sh; skipping the WordPiece bench");
        return;
    };
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .take(20_000)
        .collect();
    let bytes: usize = lines.iter().map(|l| l.len()).sum();
    let mut g = c.benchmark_group("wordpiece");
    g.throughput(Throughput::Bytes(bytes as u64));
    g.sample_size(10);
    g.bench_function("encode_per_line", |b| {
        b.iter(|| {
            let mut n = 0;
            for l in &lines {
                n += tok.encode(l, true).map_or(0, |e| e.len());
            }
            n
        })
    });
    g.bench_function("encode_batch", |b| {
        b.iter(|| tok.encode_batch(&lines, true).map_or(0, |v| v.len()))
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
