//! vLLM's tokenizer routes (what lm-evaluation-harness's
//! `tokenizer_backend=remote` calls): `/tokenize` with `prompt`,
//! `/detokenize`, `/tokenizer_info`, checked against the library's
//! tokenizer; TEI's `/tokenize` on the same route keeps its shape.

mod common;

use std::io::Write;

use common::{connect, post, response, root};
use lmkit_tokenizers::BpeTokenizer;
use serde_json::json;

fn get(addr: &str, path: &str) -> (u16, serde_json::Value) {
    let mut s = connect(addr);
    let head = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    s.write_all(head.as_bytes()).unwrap();
    let (status, _, json) = response(&mut s);
    (status, json)
}

#[test]
fn vllm_tokenize_detokenize_and_info() {
    let dir = root().join("tests/fixtures/gpt2-zeroshot");
    let minilm = root().join("assets/minilm");
    let a = common::start(
        &[
            format!("tiny={}", dir.display()),
            format!("minilm={}", minilm.display()),
        ],
        1 << 20,
    );
    let tok = BpeTokenizer::from_dir(&dir).unwrap();
    let text = "The river ran past the mill.<|endoftext|>And on.";
    let want = tok.encode_ids(text.as_bytes(), true);
    let eot = tok.endoftext_id().expect("an end-of-text token");
    assert!(
        want.contains(&eot),
        "special-token strings are read as their ids"
    );

    let body = json!({"model": "tiny", "prompt": text, "add_special_tokens": false});
    let (st, r) = post(&a, "/tokenize", &body);
    assert_eq!(st, 200, "{r}");
    let got: Vec<u32> = serde_json::from_value(r["tokens"].clone()).unwrap();
    assert_eq!(got, want);
    assert_eq!(r["count"], want.len());
    assert_eq!(r["max_model_len"], 96);

    let (st, r) = post(&a, "/detokenize", &json!({"model": "tiny", "tokens": want}));
    assert_eq!(st, 200, "{r}");
    assert_eq!(r["prompt"], text);

    // Two models served: the info is the GPT-2's (vLLM's clients name none).
    let (st, r) = get(&a, "/tokenizer_info");
    assert_eq!(st, 200, "{r}");
    assert_eq!(r["eos_token"], "<|endoftext|>");
    assert_eq!(r["model_max_length"], 96);

    // TEI's shape on the same route is unchanged; a body of neither shape
    // is a 400 naming what is wrong.
    let (st, r) = post(
        &a,
        "/tokenize",
        &json!({"model": "tiny", "inputs": "The river"}),
    );
    assert_eq!(st, 200, "{r}");
    assert!(r[0][0]["id"].is_u64(), "{r}");
    let (st, r) = post(&a, "/tokenize", &json!({"model": "tiny", "prompt": 3}));
    assert_eq!(st, 400, "{r}");
    let (st, r) = post(
        &a,
        "/detokenize",
        &json!({"model": "tiny", "tokens": [1, 99999]}),
    );
    assert_eq!(st, 400, "{r}");
}
