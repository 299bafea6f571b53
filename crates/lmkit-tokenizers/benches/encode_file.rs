//! Times lmkit's GPT-2 encode (and tiktoken-rs's, same run) on one file and
//! prints one JSON line per measurement; `scripts/bench_tokenizers.py` runs it
//! beside Python tiktoken and HF tokenizers and prints the ratios.
//!
//! `cargo bench -p lmkit-tokenizers --bench encode_file -- [FILE] [--reps N]`
//! (default FILE: assets/books/corpus.txt; documents split at "\n\f\n").
//! Loading and single-thread runs report thread CPU time (robust on a shared
//! machine), batch runs wall time. `lmkit load` is `BpeTokenizer::from_dir`
//! on assets/gpt2 (vocab.json + merges.txt) with the cache of compiled
//! tokenizers off, `lmkit load cached` the same with it on and holding them
//! (a fresh folder, filled by a first load), `tiktoken-rs load` is
//! `r50k_base()` (its tables are compiled in; it still builds them).
//! `--encoding NAME` times an OpenAI encoding instead (lmkit's built-in
//! `openai::encoding(NAME)` against tiktoken-rs's, both from the same rank
//! file; no cached load).

use std::time::Instant;

use lmkit_tokenizers::BpeTokenizer;

#[path = "../tests/bpe_common/mod.rs"]
mod bpe_common;
use bpe_common::tiktoken_of;
use rayon::prelude::*;

/// CPU time of the calling thread in seconds, so single-thread timings
/// hold on a busy machine. `CLOCK_THREAD_CPUTIME_ID`, not
/// /proc/thread-self/schedstat: the latter moves only at scheduler ticks
/// (4 ms here), which quantised every start-up figure to 8 or 12 ms.
fn thread_cpu() -> Option<f64> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec, which `ts` is.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    (rc == 0).then_some(ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9)
}

/// Best of `reps` runs: thread CPU time when `cpu`, else wall time.
fn best_of<T>(reps: usize, cpu: bool, mut f: impl FnMut() -> T) -> (f64, T) {
    let mut best = f64::INFINITY;
    let mut out = f();
    for _ in 0..reps {
        let (t, c) = (Instant::now(), thread_cpu());
        out = f();
        let took = match (cpu, c, thread_cpu()) {
            (true, Some(a), Some(b)) => b - a,
            _ => t.elapsed().as_secs_f64(),
        };
        best = best.min(took);
    }
    (best, out)
}

fn main() {
    let root = std::path::PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."));
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let mut file = root.join("assets/books/corpus.txt");
    let mut reps = 5;
    let mut encoding = None;
    let mut i = 0;
    while i < args.len() {
        if args[i] == "--encoding" {
            encoding = Some(args.get(i + 1).expect("--encoding NAME").clone());
            i += 1;
        } else if args[i] == "--reps" {
            reps = args
                .get(i + 1)
                .and_then(|s| s.parse().ok())
                .expect("--reps N");
            i += 1;
        } else {
            file = args[i].clone().into();
        }
        i += 1;
    }
    let text = std::fs::read_to_string(&file)
        .unwrap_or_else(|e| panic!("{}: {e}; run scripts/fetch-assets.sh first", file.display()));
    let docs: Vec<&str> = text.split("\n\u{c}\n").collect();
    let gpt2 = root.join("assets/gpt2");
    let threads = rayon::current_num_threads();
    let report = |name: &str, secs: f64, tokens: usize| {
        println!(
            "{{\"name\": \"{name}\", \"seconds\": {secs:.6}, \"bytes\": {}, \"tokens\": {tokens}, \"threads\": {threads}}}",
            text.len()
        );
    };
    if let Some(name) = encoding {
        let (s, lmkit) = best_of(reps, true, || {
            lmkit_tokenizers::openai::encoding(&name).expect("a known encoding")
        });
        report("lmkit load", s, lmkit.vocab_size());
        let (s, tiktoken) = best_of(reps, true, || tiktoken_of(&name));
        report("tiktoken-rs load", s, 0);
        return encodes(reps, &text, &docs, &lmkit, &tiktoken, report);
    }
    // Start-up: reading and checking vocab.json + merges.txt (one thread,
    // so CPU time like the single-thread encodes).
    let load = || {
        BpeTokenizer::from_dir(&gpt2)
            .unwrap_or_else(|e| panic!("{e}; run scripts/fetch-assets.sh first"))
    };
    // Set before any other thread reads the environment.
    std::env::set_var("LMKIT_CACHE_DIR", "");
    let (s, lmkit) = best_of(reps, true, load);
    report("lmkit load", s, lmkit.vocab_size());
    let cache = std::env::temp_dir().join(format!("lmkit-bench-cache-{}", std::process::id()));
    std::env::set_var("LMKIT_CACHE_DIR", &cache);
    let (s, cached) = best_of(reps, true, load);
    report("lmkit load cached", s, cached.vocab_size());
    let _ = std::fs::remove_dir_all(&cache);
    let (s, tiktoken) = best_of(reps, true, || tiktoken_rs::r50k_base().expect("r50k_base"));
    report("tiktoken-rs load", s, 0);
    encodes(reps, &text, &docs, &lmkit, &tiktoken, report);
}

/// The encode timings: one text on one thread, the documents on all.
fn encodes(
    reps: usize,
    text: &str,
    docs: &[&str],
    lmkit: &BpeTokenizer,
    tiktoken: &tiktoken_rs::CoreBPE,
    report: impl Fn(&str, f64, usize),
) {
    let (s, ids) = best_of(reps, true, || lmkit.encode_ordinary(text.as_bytes()));
    report("lmkit single", s, ids.len());
    if std::env::var_os("LMKIT_BENCH_PARTS").is_some() {
        // The tokenizer's own scanner alone (the rest is the merge loop
        // and the lookups).
        use lmkit_tokenizers::pretokenize::{split_cl100k, split_gpt2, split_o200k, Pattern};
        let t = text.as_bytes();
        let (s, n) = best_of(reps, true, || match lmkit.pattern() {
            Pattern::Cl100k => split_cl100k(t).count(),
            Pattern::O200k => split_o200k(t).count(),
            Pattern::Custom(p) => p.pieces(t).len(),
            Pattern::Gpt2 => split_gpt2(t).count(),
        });
        report("lmkit pretokenize-only", s, n);
    }
    if std::env::var_os("LMKIT_BENCH_ONLY").is_some() {
        return;
    }
    let (s, ids) = best_of(reps, true, || tiktoken.encode_ordinary(text));
    report("tiktoken-rs single", s, ids.len());
    let (s, ids) = best_of(reps, false, || lmkit.encode_batch(docs, false));
    report("lmkit batch", s, ids.iter().map(Vec::len).sum());
    let (s, ids) = best_of(reps, false, || {
        docs.par_iter()
            .map(|d| tiktoken.encode_ordinary(d))
            .collect::<Vec<_>>()
    });
    report("tiktoken-rs batch", s, ids.iter().map(Vec::len).sum());
}
