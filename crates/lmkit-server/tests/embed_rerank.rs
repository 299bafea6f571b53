//! `/v1/embeddings` and `/embed` with `dimensions`, `truncate` and
//! `chunking`, and `/rerank` with a cross-encoder: the server answers what
//! the library computes (itself checked against sentence-transformers in
//! crates/lmkit/tests/serving_fixtures.rs), with TEI's errors.

mod common;

use common::{post, root};
use lmkit::models::bert::{BertPipeline, EmbedOptions, LongInputs};
use lmkit::tasks::rerank::{self, RerankOptions};
use serde_json::{json, Value};

/// `reference.json` of a fixture case.
fn meta(case: &str) -> Value {
    let path = root()
        .join("tests/fixtures")
        .join(case)
        .join("reference.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn vector(v: &Value) -> Vec<f32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect()
}

/// Whether `got` (a JSON array) equals `want` within `tol`.
fn close(got: &Value, want: &[f32], tol: f32) -> bool {
    let got = vector(got);
    got.len() == want.len() && got.iter().zip(want).all(|(x, y)| (x - y).abs() < tol)
}

#[test]
fn embeddings_take_dimensions_truncate_and_chunking() {
    let minilm = root().join("assets/minilm");
    let a = common::start(&[format!("minilm={}", minilm.display())], 4 << 20);
    let p = BertPipeline::from_dir(&minilm).unwrap();
    // dimensions: the library's (truncated, re-normalized: tested there).
    let texts = ["the cat sat on the mat", "a dog ran across the road"];
    let (st, r) = post(
        &a,
        "/v1/embeddings",
        &json!({"model": "minilm", "input": texts, "dimensions": 64}),
    );
    assert_eq!(st, 200, "{r}");
    let opts = EmbedOptions {
        dimensions: Some(64),
        ..Default::default()
    };
    let want = p.embed(&texts, &opts).unwrap();
    for (i, w) in want.iter().enumerate() {
        assert!(close(&r["data"][i]["embedding"], w, 1e-6));
    }
    for d in [0, 385] {
        let body = json!({"model": "minilm", "input": "x", "dimensions": d});
        let (st, e) = post(&a, "/v1/embeddings", &body);
        assert_eq!(
            (st, e["error"]["param"].as_str()),
            (400, Some("dimensions")),
            "{e}"
        );
    }

    // A 5,000-token document: refused by /embed (TEI's default) with a 413
    // naming the limit, truncated on request, chunked as sentence-transformers
    // pools its windows.
    let meta = meta("minilm-chunked");
    let doc = meta["document"].as_str().unwrap();
    let (st, e) = post(&a, "/embed", &json!({"inputs": doc}));
    assert_eq!(st, 413, "{e}");
    let msg = e["error"]["message"].as_str().unwrap();
    assert!(msg.contains("less than 256 tokens"), "{msg}");
    let (st, _) = post(&a, "/embed", &json!({"inputs": doc, "truncate": true}));
    assert_eq!(st, 200);
    let (st, e) = post(
        &a,
        "/v1/embeddings",
        &json!({"model": "minilm", "input": doc, "truncate": false}),
    );
    assert_eq!(
        (st, e["error"]["param"].as_str()),
        (413, Some("input")),
        "{e}"
    );
    // One chunking per route, each the library's (itself equal to
    // sentence-transformers' pooled windows: tests/serving_fixtures.rs).
    // A part of the document (~1,300 tokens) keeps the test short.
    let chunkings = meta["chunkings"].as_array().unwrap();
    let part = doc.split(' ').take(600).collect::<Vec<_>>().join(" ");
    let doc = part.as_str();
    for (c, route) in chunkings.iter().zip(["/embed", "/v1/embeddings"]) {
        let opts = EmbedOptions {
            long: LongInputs::Chunk(serde_json::from_value(c.clone()).unwrap()),
            ..Default::default()
        };
        let want = p.embed(&[doc], &opts).unwrap();
        let (st, r) = if route == "/embed" {
            post(&a, route, &json!({"inputs": [doc], "chunking": c}))
        } else {
            post(
                &a,
                route,
                &json!({"model": "minilm", "input": doc, "chunking": c}),
            )
        };
        assert_eq!(st, 200, "{r}");
        let got = if route == "/embed" {
            &r[0]
        } else {
            &r["data"][0]["embedding"]
        };
        assert!(close(got, &want[0], 1e-6), "{route} {c}");
    }
    for (bad, why) in [
        (json!({"max_tokens": 300}), "max_tokens"),
        (json!({"max_tokens": 64, "overlap": 62}), "overlap"),
        (json!({"max_tokens": 64, "stride": 8}), "unknown field"),
    ] {
        let (st, e) = post(&a, "/embed", &json!({"inputs": "x", "chunking": bad}));
        assert_eq!(st, 400, "{e}");
        assert!(e["error"]["message"].as_str().unwrap().contains(why), "{e}");
    }
    let both = json!({"inputs": "x", "chunking": {}, "truncate": true});
    assert_eq!(post(&a, "/embed", &both).0, 400);

    // Requests that share a worker call: one refused text fails only its own.
    let (a1, a2, doc2) = (a.clone(), a.clone(), doc.to_string());
    let long = std::thread::spawn(move || post(&a1, "/embed", &json!({"inputs": doc2})).0);
    let short = std::thread::spawn(move || post(&a2, "/embed", &json!({"inputs": "short"})).0);
    assert_eq!((long.join().unwrap(), short.join().unwrap()), (413, 200));
}

#[test]
fn rerank_scores_equal_crossencoder_predict() {
    let ce = root().join("tests/fixtures/cross-encoder-tiny");
    let a = common::start(&[format!("ce={}", ce.display())], 1 << 20);
    let p = rerank::load(ce.to_str().unwrap(), "f32".parse().unwrap()).unwrap();
    let meta = meta("cross-encoder-tiny");
    let (query, texts) = (meta["query"].as_str().unwrap(), &meta["texts"]);
    let pairs: Vec<(&str, &str)> = texts
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (query, t.as_str().unwrap()))
        .collect();
    for raw in [false, true] {
        // The library's scores (equal to CrossEncoder.predict: tests/serving_fixtures.rs).
        let opts = RerankOptions {
            raw_scores: raw,
            truncate: true,
        };
        let want = rerank::predict(&p, &pairs, &opts, 8).unwrap();
        let body = json!({"query": query, "texts": texts, "raw_scores": raw,
                          "truncate": true, "return_text": true});
        let (st, r) = post(&a, "/rerank", &body);
        assert_eq!(st, 200, "{r}");
        let rows = r.as_array().unwrap();
        assert_eq!(rows.len(), want.len());
        for w in rows.windows(2) {
            assert!(w[0]["score"].as_f64() >= w[1]["score"].as_f64(), "{r}");
        }
        for row in rows {
            let i = row["index"].as_u64().unwrap() as usize;
            assert!((row["score"].as_f64().unwrap() as f32 - want[i]).abs() < 1e-6);
            assert_eq!(row["text"], texts[i]);
        }
    }
    // The last pair is over the model's 32 positions: TEI's 413 unless truncated.
    let (st, e) = post(&a, "/rerank", &json!({"query": query, "texts": texts}));
    assert_eq!(st, 413, "{e}");
}
