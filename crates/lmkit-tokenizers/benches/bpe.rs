//! Encode speed of lmkit's GPT-2 BPE against tiktoken-rs (r50k_base), measured
//! in the same run on the same text: the Rust books corpus (assets/books).
//!
//! `cargo bench -p lmkit-tokenizers --bench bpe`; compare the lmkit and
//! tiktoken lines of each group (same bytes, so time ratios are speed ratios).

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use lmkit_tokenizers::BpeTokenizer;
use rayon::prelude::*;

fn assets() -> std::path::PathBuf {
    std::path::PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../assets"))
}

fn bench(c: &mut Criterion) {
    let dir = assets().join("gpt2");
    let lmkit = BpeTokenizer::from_dir(&dir)
        .unwrap_or_else(|e| panic!("{e}; run scripts/fetch-assets.sh first"));
    let tiktoken = tiktoken_rs::r50k_base().expect("tiktoken r50k_base");
    let corpus = std::fs::read_to_string(assets().join("books/corpus.txt"))
        .unwrap_or_else(|e| panic!("corpus: {e}; run scripts/fetch-assets.sh first"));
    let docs: Vec<&str> = corpus.split("\n\u{c}\n").collect();
    assert_eq!(
        lmkit.encode_ordinary(corpus.as_bytes()),
        tiktoken.encode_ordinary(&corpus),
        "the bench compares equal outputs"
    );

    let mut g = c.benchmark_group("encode_corpus_1thread");
    g.throughput(Throughput::Bytes(corpus.len() as u64));
    g.sample_size(10);
    g.bench_function("lmkit", |b| {
        b.iter(|| lmkit.encode_ordinary(corpus.as_bytes()))
    });
    g.bench_function("tiktoken-rs", |b| {
        b.iter(|| tiktoken.encode_ordinary(&corpus))
    });
    g.finish();

    let mut g = c.benchmark_group("encode_batch_all_threads");
    g.throughput(Throughput::Bytes(corpus.len() as u64));
    g.sample_size(10);
    g.bench_function("lmkit", |b| b.iter(|| lmkit.encode_batch(&docs, false)));
    g.bench_function("tiktoken-rs", |b| {
        b.iter(|| {
            docs.par_iter()
                .map(|d| tiktoken.encode_ordinary(d))
                .collect::<Vec<_>>()
        })
    });
    g.finish();

    let long: String = "Donaudampfschifffahrtsgesellschaftskapitän".repeat(400);
    let mut g = c.benchmark_group("encode_16kb_word");
    g.throughput(Throughput::Bytes(long.len() as u64));
    g.sample_size(10);
    g.bench_function("lmkit", |b| {
        b.iter(|| lmkit.encode_ordinary(long.as_bytes()))
    });
    g.bench_function("tiktoken-rs", |b| {
        b.iter(|| tiktoken.encode_ordinary(&long))
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
