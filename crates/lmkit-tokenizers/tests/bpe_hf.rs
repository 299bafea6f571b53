//! Parity with HF tokenizers (Python), via fixtures written by
//! scripts/make_bpe_fixtures.py: GPT-2's vocabulary on corpus samples and
//! adversarial strings, and a tokenizer.json trained and saved by HF.

mod bpe_common;

use lmkit_tokenizers::{BpeTokenizer, Tokenizer};
use serde::Deserialize;

#[derive(Deserialize)]
struct Fixture {
    texts: Vec<String>,
    ids: Vec<Vec<u32>>,
}

fn fixture(name: &str) -> Fixture {
    let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn check(tok: &BpeTokenizer, f: &Fixture) {
    assert!(f.texts.len() >= 10);
    for (text, want) in f.texts.iter().zip(&f.ids) {
        let got = tok.encode_ordinary(text.as_bytes());
        assert_eq!(
            &got,
            want,
            "differs from HF tokenizers on {:?}",
            &text[..text.len().min(60)]
        );
        assert_eq!(tok.decode(&got).unwrap(), text.as_bytes());
    }
}

#[test]
fn gpt2_equals_hf_tokenizers() {
    check(bpe_common::gpt2(), &fixture("bpe_hf_gpt2.json"));
}

#[test]
fn hf_written_tokenizer_json_loads_and_equals_hf() {
    let dir = format!(
        "{}/tests/fixtures/bpe_hf_trained",
        env!("CARGO_MANIFEST_DIR")
    );
    let tok = BpeTokenizer::from_dir(&dir).unwrap();
    assert_eq!(tok.vocab_size(), 600);
    assert_eq!(tok.endoftext_id(), Some(0));
    check(&tok, &fixture("bpe_hf_trained.json"));
    let generic = Tokenizer::from_dir(&dir).unwrap();
    assert_eq!(generic.eos_token_id(), Some(0));
    assert_eq!(
        generic.token_to_id("Ġt"),
        Some(tok.token_to_id("Ġt").unwrap())
    );
}
