//! GPT-2 evaluation and LM fine-tuning end to end on a small random GPT-2
//! with the real GPT-2 vocabulary (assets/gpt2): LAMBADA scoring against a
//! direct computation from full-sequence logits, TL;DR summaries with
//! ROUGE, and `finetune --task lm` lowering the held-out loss of real text.

use std::path::{Path, PathBuf};

use lmkit::checkpoint::save_params;
use lmkit::eval::lambada::read_lambada;
use lmkit::eval::rouge::rouge;
use lmkit::eval::run::{eval_lambada, eval_summarize, SummarizeOptions};
use lmkit::eval::summarize::{first_sentences, read_summarize};
use lmkit::models::gpt2::Gpt2;
use lmkit::models::gpt2::{Gpt2Engine, WeightDtype};
use lmkit::recipes::finetune::{finetune, FinetuneOptions, FinetuneTask};
use lmkit::spec::{Architecture, Gpt2Config};
use lmkit_tokenizers::BpeTokenizer;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn tmpdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("lmkit-evg-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A 2-layer d64 GPT-2 with random weights and the real vocabulary.
fn small_gpt2(dir: &Path, seed: u64) {
    let vocab = root().join("assets/gpt2");
    assert!(
        vocab.join("merges.txt").exists(),
        "{} is missing: run scripts/fetch-assets.sh first",
        vocab.display()
    );
    let cfg = Gpt2Config {
        n_positions: 256,
        n_embd: 64,
        n_layer: 2,
        n_head: 4,
        initializer_range: 0.2,
        ..Gpt2Config::default()
    };
    let m = Gpt2::new_random(cfg, seed).unwrap();
    save_params(
        &m.layout,
        &m.params,
        &m.config,
        dir,
        Architecture::Gpt2LMHeadModel,
    )
    .unwrap();
    for f in ["vocab.json", "merges.txt"] {
        std::fs::copy(vocab.join(f), dir.join(f)).unwrap();
    }
}

fn data(rel: &str) -> PathBuf {
    root().join("tests/data").join(rel)
}

#[test]
fn lambada_matches_a_direct_computation() {
    let dir = tmpdir("lam");
    small_gpt2(&dir, 5);
    let tok = BpeTokenizer::from_dir(&dir).unwrap();
    let mut engine = Gpt2Engine::load(&dir, WeightDtype::F32).unwrap();
    let mut items = read_lambada(&data("lambada/rust_book.jsonl")).unwrap();
    // 11 passages: a full batch of 8 in one forward_many, then 3.
    items.truncate(11);
    let mut seen = Vec::new();
    let (scores, outs) = eval_lambada(&mut engine, &tok, &items, 8, |d, _| seen.push(d)).unwrap();
    assert_eq!(seen, (1..=11).collect::<Vec<_>>());
    assert_eq!(scores.count, 11);
    let v = engine.config().vocab_size;
    let mut lp_sum = 0.0;
    let mut correct = 0;
    for (it, o) in items.iter().zip(&outs) {
        // The whole passage encodes to context tokens + " word" tokens.
        let full = tok.encode_ordinary(format!("{} {}", it.context, it.word).as_bytes());
        let ctx_len = tok.encode_ordinary(it.context.as_bytes()).len();
        let logits = engine.forward_all_logits(&full, 1, None).unwrap();
        let (mut lp, mut greedy) = (0.0f64, true);
        for p in ctx_len..full.len() {
            let row = &logits[(p - 1) * v..p * v];
            let max = row.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
            let lse = max as f64
                + row
                    .iter()
                    .map(|&x| ((x - max) as f64).exp())
                    .sum::<f64>()
                    .ln();
            lp += row[full[p] as usize] as f64 - lse;
            let arg = (0..v).fold(0, |b, k| if row[k] > row[b] { k } else { b });
            greedy &= arg == full[p] as usize;
        }
        assert!(
            (lp - o.logprob).abs() < 1e-3 * lp.abs().max(1.0),
            "{lp} vs {}",
            o.logprob
        );
        assert_eq!(greedy, o.greedy_correct);
        lp_sum += lp;
        correct += greedy as usize;
    }
    assert!((scores.accuracy - correct as f64 / 11.0).abs() < 1e-12);
    let ppl = (-lp_sum / 11.0).exp();
    assert!(
        (scores.perplexity - ppl).abs() < 1e-3 * ppl,
        "{} vs {ppl}",
        scores.perplexity
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn greedy_tldr_summaries_are_scored_with_rouge() {
    let dir = tmpdir("sum");
    small_gpt2(&dir, 6);
    let tok = BpeTokenizer::from_dir(&dir).unwrap();
    let mut engine = Gpt2Engine::load(&dir, WeightDtype::F32).unwrap();
    let mut items = read_summarize(&data("summarize/rust_book.jsonl")).unwrap();
    items.truncate(2);
    let opts = SummarizeOptions {
        max_new_tokens: 20,
        top_k: 0,
        ..SummarizeOptions::default()
    };
    let (means, outs) = eval_summarize(&mut engine, &tok, &items, &opts, |_, _| {}).unwrap();
    let (again, outs2) = eval_summarize(&mut engine, &tok, &items, &opts, |_, _| {}).unwrap();
    assert_eq!(outs, outs2, "greedy decoding is deterministic");
    assert_eq!(means, again);
    for ((s, r), it) in outs.iter().zip(&items) {
        assert_eq!(*r, rouge(s, &it.summary));
        assert_eq!(
            first_sentences(s, 3),
            *s,
            "summary is already cut to 3 sentences"
        );
    }
    let mean1 = 100.0 * outs.iter().map(|(_, r)| r.rouge1.fmeasure).sum::<f64>() / 2.0;
    assert!((means.rouge1 - mean1).abs() < 1e-12);
    // Top-k 2 sampling: seeded, so repeatable too.
    let k2 = SummarizeOptions {
        max_new_tokens: 20,
        ..SummarizeOptions::default()
    };
    let a = eval_summarize(&mut engine, &tok, &items, &k2, |_, _| {}).unwrap();
    let b = eval_summarize(&mut engine, &tok, &items, &k2, |_, _| {}).unwrap();
    assert_eq!(a.1, b.1);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// TL;DR decoded in batches (articles joining as others finish) gives
/// every article the summary it gets alone, greedy and top-k sampled (each
/// article its own seed), and reports progress as each one finishes.
#[test]
fn batched_tldr_summaries_equal_one_at_a_time() {
    let dir = tmpdir("sumb");
    small_gpt2(&dir, 6);
    let tok = BpeTokenizer::from_dir(&dir).unwrap();
    let mut engine = Gpt2Engine::load(&dir, WeightDtype::F32).unwrap();
    let items = read_summarize(&data("summarize/rust_book.jsonl")).unwrap();
    assert!(items.len() > 8, "more articles than one batch");
    for top_k in [0, 2] {
        let opts = |batch_size| SummarizeOptions {
            max_new_tokens: 24,
            top_k,
            seed: 7,
            batch_size,
            ..SummarizeOptions::default()
        };
        let (m1, one) = eval_summarize(&mut engine, &tok, &items, &opts(1), |_, _| {}).unwrap();
        for bs in [3, 8] {
            let mut seen = Vec::new();
            let (m, outs) = eval_summarize(&mut engine, &tok, &items, &opts(bs), |d, n| {
                assert_eq!(n, items.len());
                seen.push(d)
            })
            .unwrap();
            assert_eq!(seen, (1..=items.len()).collect::<Vec<_>>());
            for (k, (a, b)) in one.iter().zip(&outs).enumerate() {
                assert_eq!(a, b, "top_k {top_k}, batch {bs}: article {k}");
            }
            assert_eq!(m1, m);
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn lm_finetuning_lowers_held_out_loss() {
    let dir = tmpdir("lm");
    let model = dir.join("model");
    small_gpt2(&model, 7);
    let corpus = std::fs::read_to_string(root().join("assets/books/corpus.txt"))
        .expect("assets/books/corpus.txt is missing: run scripts/fetch-assets.sh first");
    let docs: Vec<&str> = corpus.split("\n\u{c}\n").collect();
    let (train, eval) = (dir.join("train.txt"), dir.join("eval.txt"));
    // Enough training text for several batches per epoch, whatever the books' page sizes.
    let mut train_docs = Vec::new();
    for doc in &docs[1..40] {
        if train_docs.iter().map(|d: &&str| d.len()).sum::<usize>() >= 6_000 {
            break;
        }
        train_docs.push(*doc);
    }
    std::fs::write(&train, train_docs.join("\n\u{c}\n")).unwrap();
    std::fs::write(&eval, docs[40]).unwrap();
    let out = dir.join("out");
    let opts = FinetuneOptions {
        epochs: 3,
        batch_size: 8,
        lr: 2e-3,
        max_seq_len: 64,
        ..FinetuneOptions::default()
    };
    // Loss of the untouched model on the eval text, from a 0-step run's evaluation...
    let before = finetune(
        FinetuneTask::LM,
        &model,
        &train,
        Some(&eval),
        &dir.join("zero"),
        &FinetuneOptions {
            max_steps: Some(0),
            epochs: 1,
            ..opts.clone()
        },
        &mut |_| {},
    )
    .unwrap();
    let l0 = before.last_eval.unwrap()["eval_loss"].as_f64().unwrap();
    let s = finetune(
        FinetuneTask::LM,
        &model,
        &train,
        Some(&eval),
        &out,
        &opts,
        &mut |_| {},
    )
    .unwrap();
    assert_eq!(s.epochs_done, 3);
    assert_eq!(s.steps % 3, 0, "{} steps are not 3 equal epochs", s.steps);
    assert!(s.steps >= 12, "{} steps", s.steps);
    let l1 = s.last_eval.unwrap()["eval_loss"].as_f64().unwrap();
    assert!(l1 < l0 - 1.0, "held-out loss {l0} → {l1}");
    // The output is a GPT2LMHeadModel the inference engine loads.
    let mut e = Gpt2Engine::load(&out, WeightDtype::F32).unwrap();
    let tok = BpeTokenizer::from_dir(&out).unwrap();
    let ids = tok.encode_ordinary(b"The Rust programming language");
    assert_eq!(
        e.forward_all_logits(&ids, 1, None).unwrap().len(),
        ids.len() * 50257
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
