//! `lmkit embed`'s long-input options and `--dimensions` give what the
//! library gives (itself equal to sentence-transformers on
//! tests/fixtures/minilm-chunked: crates/lmkit/tests/serving_fixtures.rs);
//! `lmkit rerank` joins them in the next change.

mod common;

use std::path::{Path, PathBuf};

use common::lmkit_stdin;
use lmkit::models::bert::{BertPipeline, EmbedOptions, LongInputs};
use serde_json::Value;

fn fixture(case: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures")
        .join(case)
}

/// `reference.json` of a fixture case.
fn meta(case: &str) -> Value {
    let path = fixture(case).join("reference.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn embed_chunks_refuses_and_cuts_dimensions() {
    let meta = meta("minilm-chunked");
    // A part of the document (~1,300 tokens) keeps the test short.
    let doc = meta["document"].as_str().unwrap();
    let doc = doc.split(' ').take(600).collect::<Vec<_>>().join(" ");
    let doc = doc.as_str();
    let minilm = fixture("../../assets/minilm");
    let m = minilm.to_str().unwrap();
    let c = &meta["chunkings"][1];
    let opts = EmbedOptions {
        long: LongInputs::Chunk(serde_json::from_value(c.clone()).unwrap()),
        ..Default::default()
    };
    let p = BertPipeline::from_dir(&minilm).unwrap();
    let want = &p.embed(&[doc], &opts).unwrap()[0];
    let (n, k) = (c["max_tokens"].to_string(), c["overlap"].to_string());
    let args = [
        "embed",
        "--model",
        m,
        "--chunk-tokens",
        &n,
        "--chunk-overlap",
        &k,
    ];
    let (code, out, err) = lmkit_stdin(&args, format!("{doc}\n").as_bytes());
    assert_eq!(code, Some(0), "{err}");
    let got: Vec<f32> = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(got.len(), want.len());
    assert!(got.iter().zip(want).all(|(a, b)| (a - b).abs() < 1e-6));
    let (code, _, err) = lmkit_stdin(&["embed", "--model", m, "--no-truncate"], doc.as_bytes());
    assert_ne!(code, Some(0));
    assert!(err.contains("256"), "{err}");
    let args = ["embed", "--model", m, "--dimensions", "64"];
    let (code, out, err) = lmkit_stdin(&args, b"the cat sat on the mat\n");
    assert_eq!(code, Some(0), "{err}");
    let v: Vec<f32> = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v.len(), 64);
    assert!((v.iter().map(|x| x * x).sum::<f32>() - 1.0).abs() < 1e-5);
}
