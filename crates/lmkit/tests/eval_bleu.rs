//! Corpus BLEU against sacreBLEU 2.x (`BLEU()` defaults) on the corpora of
//! `tests/fixtures/sacrebleu/bleu.json` (written by
//! `scripts/make_fixtures.py --only sacrebleu-bleu`): the 13a tokenization
//! of every string, the n-gram counts, totals and lengths exactly, and the
//! score, precisions and brevity penalty to 1e-9.

use std::path::Path;

use lmkit::eval::bleu::{corpus_bleu, tokenize_13a};
use serde_json::Value;

fn fixture() -> Value {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/sacrebleu/bleu.json");
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

fn usizes(v: &Value) -> Vec<usize> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as usize)
        .collect()
}

#[test]
fn corpus_bleu_equals_sacrebleu() {
    let doc = fixture();
    let corpora = doc["corpora"].as_object().unwrap();
    assert!(corpora.len() >= 6);
    for (name, c) in corpora {
        for (s, want) in c["tokenized"].as_object().unwrap() {
            assert_eq!(
                tokenize_13a(s.trim_end()),
                want.as_str().unwrap(),
                "{name}: {s:?}"
            );
        }
        let hyps: Vec<&str> = c["hypotheses"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| h.as_str().unwrap())
            .collect();
        let refs: Vec<Vec<&str>> = c["references"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                r.as_array()
                    .unwrap()
                    .iter()
                    .map(|x| x.as_str().unwrap())
                    .collect()
            })
            .collect();
        let b = corpus_bleu(&hyps, &refs);
        assert_eq!(
            b.stats.counts.to_vec(),
            usizes(&c["counts"]),
            "{name}: counts"
        );
        assert_eq!(
            b.stats.totals.to_vec(),
            usizes(&c["totals"]),
            "{name}: totals"
        );
        assert_eq!(
            b.stats.sys_len,
            c["sys_len"].as_u64().unwrap() as usize,
            "{name}"
        );
        assert_eq!(
            b.stats.ref_len,
            c["ref_len"].as_u64().unwrap() as usize,
            "{name}"
        );
        let close = |x: f64, y: &Value, what: &str| {
            let y = y.as_f64().unwrap();
            assert!(
                (x - y).abs() <= 1e-9 * y.abs().max(1.0),
                "{name}: {what} {x} vs {y}"
            );
        };
        close(b.score, &c["score"], "score");
        close(b.bp, &c["bp"], "bp");
        for (k, p) in c["precisions"].as_array().unwrap().iter().enumerate() {
            close(b.precisions[k], p, "precision");
        }
    }
}
