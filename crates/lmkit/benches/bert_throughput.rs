//! BERT throughput probe driven by scripts/bench_bert.py (which times the
//! PyTorch / sentence-transformers / ONNX Runtime peers in the same run and
//! prints ratios). Not a criterion bench: it prints one JSON object.
//!
//! ```text
//! cargo bench -p lmkit --bench bert_throughput -- forward --model DIR [--batch 32] [--seq 128] [--reps 3] [--dtype f32|bf16|int8]
//! cargo bench -p lmkit --bench bert_throughput -- embed --model DIR --input FILE [--batch 32] [--reps 3] [--dtype f32|bf16|int8]
//! ```
//! `forward`: encoder on B×T random ids (all real tokens), best of `reps`
//! after one warm-up. `embed`: `BertPipeline::embed` over the lines of
//! FILE (tokenization, length bucketing, pooling, normalization included;
//! model loading excluded).

use std::time::Instant;

use lmkit::models::bert::{Bert, BertActivations, BertBatch};
use lmkit::models::bert::{BertPipeline, EmbedOptions};
use lmkit::models::gpt2::WeightDtype;

fn arg<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(String::as_str)
}

fn num(args: &[String], name: &str, default: usize) -> usize {
    arg(args, name).map_or(default, |v| {
        v.parse()
            .unwrap_or_else(|_| panic!("{name}: not a number: {v}"))
    })
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // `cargo bench` passes `--bench`; ignore it.
    let mode = args
        .iter()
        .find(|a| !a.starts_with("--"))
        .cloned()
        .unwrap_or_default();
    let model = arg(&args, "--model").expect("--model DIR");
    let dtype: WeightDtype = arg(&args, "--dtype")
        .unwrap_or("f32")
        .parse()
        .unwrap_or_else(|e| panic!("{e}"));
    let reps = num(&args, "--reps", 3).max(1);
    let threads = rayon::current_num_threads();
    match mode.as_str() {
        "forward" => {
            let (b, t) = (num(&args, "--batch", 32), num(&args, "--seq", 128));
            let mut m = Bert::from_dir(model).unwrap_or_else(|e| panic!("{e}"));
            m.set_dtype(dtype).unwrap_or_else(|e| panic!("{e}"));
            let v = m.config.vocab_size as u64;
            // Deterministic pseudo-random ids away from the special tokens.
            let ids: Vec<u32> = (0..(b * t) as u64)
                .map(|i| (1000 + (i.wrapping_mul(2_654_435_761) % (v - 1000))) as u32)
                .collect();
            let batch = BertBatch::new(b, t, ids, vec![0; b * t], vec![1; b * t]).unwrap();
            let mut acts = BertActivations::new(false);
            m.forward(&batch, &mut acts).unwrap();
            let mut best = f64::INFINITY;
            for _ in 0..reps {
                let t0 = Instant::now();
                m.forward(&batch, &mut acts).unwrap();
                best = best.min(t0.elapsed().as_secs_f64());
            }
            println!(
                "{{\"mode\":\"forward\",\"dtype\":\"{dtype}\",\"batch\":{b},\"seq\":{t},\"threads\":{threads},\"seconds\":{best},\"sentences_per_s\":{}}}",
                b as f64 / best
            );
        }
        "embed" => {
            let input = arg(&args, "--input").expect("--input FILE");
            let text = std::fs::read_to_string(input).unwrap_or_else(|e| panic!("{input}: {e}"));
            let lines: Vec<&str> = text.lines().collect();
            let mut p = BertPipeline::from_dir(model).unwrap_or_else(|e| panic!("{e}"));
            p.model.set_dtype(dtype).unwrap_or_else(|e| panic!("{e}"));
            let opts = EmbedOptions {
                batch_size: num(&args, "--batch", 32),
                ..Default::default()
            };
            p.embed(&lines[..lines.len().min(64)], &opts).unwrap();
            let mut best = f64::INFINITY;
            for _ in 0..reps {
                let t0 = Instant::now();
                let out = p.embed(&lines, &opts).unwrap();
                best = best.min(t0.elapsed().as_secs_f64());
                assert_eq!(out.len(), lines.len());
            }
            println!(
                "{{\"mode\":\"embed\",\"dtype\":\"{dtype}\",\"sentences\":{},\"threads\":{threads},\"seconds\":{best},\"sentences_per_s\":{}}}",
                lines.len(),
                lines.len() as f64 / best
            );
        }
        other => panic!("unknown mode {other:?} (forward | embed)"),
    }
}
