//! `lmkit rerank` and `lmkit embed`'s long-input options and `--dimensions`
//! give what the library gives (itself equal to sentence-transformers on
//! tests/fixtures/cross-encoder-tiny and minilm-chunked:
//! crates/lmkit/tests/serving_fixtures.rs).

mod common;

use std::path::{Path, PathBuf};

use common::{lmkit, lmkit_stdin};
use lmkit::models::bert::{BertPipeline, EmbedOptions, LongInputs};
use lmkit::tasks::rerank::{self, RerankOptions};
use serde_json::{json, Value};

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
fn rerank_scores_equal_crossencoder_predict() {
    let meta = meta("cross-encoder-tiny");
    let texts: Vec<&str> = meta["texts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    let input = texts.join("\n") + "\n";
    let model = fixture("cross-encoder-tiny");
    let query = meta["query"].as_str().unwrap();
    let p = rerank::load(model.to_str().unwrap(), "f32".parse().unwrap()).unwrap();
    let pairs: Vec<(&str, &str)> = texts.iter().map(|t| (query, *t)).collect();
    let base = [
        "rerank",
        "--model",
        model.to_str().unwrap(),
        "--query",
        query,
    ];
    for raw in [false, true] {
        let mut args = base.to_vec();
        args.extend(["--truncate", "--json"]);
        if raw {
            args.push("--raw-scores");
        }
        let (code, out, err) = lmkit_stdin(&args, input.as_bytes());
        assert_eq!(code, Some(0), "{err}");
        let rows: Value = serde_json::from_str(&out).unwrap();
        let opts = RerankOptions {
            raw_scores: raw,
            truncate: true,
        };
        let want = rerank::predict(&p, &pairs, &opts, 8).unwrap();
        let rows = rows.as_array().unwrap();
        assert_eq!(rows.len(), want.len());
        for (k, row) in rows.iter().enumerate() {
            let i = row["index"].as_u64().unwrap() as usize;
            assert!((row["score"].as_f64().unwrap() as f32 - want[i]).abs() < 1e-6);
            assert_eq!(row["text"], json!(texts[i]));
            if k > 0 {
                assert!(rows[k - 1]["score"].as_f64() >= row["score"].as_f64());
            }
        }
    }
    // Without --truncate the long pair is an error naming the limit.
    let (code, _, err) = lmkit_stdin(&base, input.as_bytes());
    assert_ne!(code, Some(0));
    assert!(err.contains("32"), "{err}");
    // A three-label classifier is no cross-encoder.
    let cls = fixture("bert-tiny-classify");
    let o = lmkit(&["rerank", "--model", cls.to_str().unwrap(), "--query", "q"]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("one label"));
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
