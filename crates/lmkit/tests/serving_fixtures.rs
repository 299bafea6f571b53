//! The embedding and rerank options `lmkit serve`, `lmkit embed` and Python
//! share, against sentence-transformers (tests/fixtures, written by
//! scripts/make_fixtures_serving.py): chunked embeddings of a 5,000-token
//! document, long inputs refused or truncated, `dimensions`, and a
//! cross-encoder's scores equal to `CrossEncoder.predict`.

use std::path::{Path, PathBuf};

use lmkit::models::bert::{BertPipeline, Chunking, EmbedOptions, LongInputs};
use lmkit::tasks::rerank::{self, RerankOptions};
use serde_json::Value;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `reference.json` and the F32/I64 tensors of `reference.safetensors`.
fn reference(case: &str) -> (Value, safetensors::SafeTensors<'static>) {
    let dir = root().join("tests/fixtures").join(case);
    let json = serde_json::from_str(&std::fs::read_to_string(dir.join("reference.json")).unwrap())
        .unwrap();
    let bytes: &'static [u8] = Box::leak(
        std::fs::read(dir.join("reference.safetensors"))
            .unwrap()
            .into_boxed_slice(),
    );
    (json, safetensors::SafeTensors::deserialize(bytes).unwrap())
}

fn floats(st: &safetensors::SafeTensors<'_>, name: &str) -> Vec<f32> {
    let t = st.tensor(name).unwrap();
    assert_eq!(t.dtype(), safetensors::Dtype::F32, "{name}");
    t.data()
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect()
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

fn minilm() -> BertPipeline {
    let dir = root().join("assets/minilm");
    assert!(
        dir.join("model.safetensors").exists(),
        "assets/minilm is missing: run scripts/fetch-assets.sh"
    );
    BertPipeline::from_dir(dir).unwrap()
}

#[test]
fn chunked_embeddings_match_sentence_transformers() {
    let p = minilm();
    let (json, st) = reference("minilm-chunked");
    let doc = json["document"].as_str().unwrap();
    // The same tokens as the reference's tokenizer, so the same windows.
    let ids = st.tensor("ids").unwrap();
    let want: Vec<u32> = ids
        .data()
        .chunks_exact(8)
        .map(|b| i64::from_le_bytes(b.try_into().unwrap()) as u32)
        .collect();
    assert_eq!(p.tokenizer.encode(doc, false).unwrap().ids, want);
    assert!(want.len() > 5000, "a long document: {} tokens", want.len());
    for c in json["chunkings"].as_array().unwrap() {
        let chunking: Chunking = serde_json::from_value(c.clone()).unwrap();
        let opts = EmbedOptions {
            long: LongInputs::Chunk(chunking),
            batch_size: 8,
            ..Default::default()
        };
        let got = p.embed(&[doc, "a short text"], &opts).unwrap();
        let key = format!("{}_{}", c["max_tokens"], c["overlap"]);
        let d = max_diff(&got[0], &floats(&st, &format!("embedding_{key}")));
        assert!(d < 1e-5, "chunking {key}: max |diff| {d}");
        // A text that fits is one window: the plain embedding.
        let plain = p
            .embed(&["a short text"], &EmbedOptions::default())
            .unwrap();
        assert!(max_diff(&got[1], &plain[0]) < 1e-6);
    }
    // Refused (TEI's truncate=false): the error names the length and limit.
    let refuse = EmbedOptions {
        long: LongInputs::Refuse,
        ..Default::default()
    };
    match p.embed(&["fits", doc], &refuse) {
        Err(lmkit::Error::ContextTooLong { len, max }) => {
            assert_eq!((len, max), (want.len() + 2, 256));
        }
        other => panic!("expected ContextTooLong, got {other:?}"),
    }
    assert!(p.embed(&["fits"], &refuse).is_ok());
}

#[test]
fn dimensions_truncate_then_renormalize() {
    let p = minilm();
    let texts = ["the cat sat on the mat", "a dog ran across the road"];
    let raw = p
        .embed(
            &texts,
            &EmbedOptions {
                normalize: Some(false),
                ..Default::default()
            },
        )
        .unwrap();
    for k in [1, 64, 384] {
        let got = p
            .embed(
                &texts,
                &EmbedOptions {
                    dimensions: Some(k),
                    ..Default::default()
                },
            )
            .unwrap();
        for (g, r) in got.iter().zip(&raw) {
            let norm = r[..k].iter().map(|x| x * x).sum::<f32>().sqrt();
            let want: Vec<f32> = r[..k].iter().map(|x| x / norm).collect();
            assert!(max_diff(g, &want) < 1e-6, "dimensions {k}");
        }
    }
    for k in [0, 385] {
        let opts = EmbedOptions {
            dimensions: Some(k),
            ..Default::default()
        };
        let e = p.embed(&texts, &opts).unwrap_err().to_string();
        assert!(e.contains("`dimensions`") && e.contains("384"), "{e}");
    }
}

#[test]
fn cross_encoder_scores_match_crossencoder_predict() {
    let dir = root().join("tests/fixtures/cross-encoder-tiny");
    let p = rerank::load(dir.to_str().unwrap(), "f32".parse().unwrap()).unwrap();
    let (json, st) = reference("cross-encoder-tiny");
    let query = json["query"].as_str().unwrap();
    let texts: Vec<&str> = json["texts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    let pairs: Vec<(&str, &str)> = texts.iter().map(|t| (query, *t)).collect();
    for (raw, name) in [(false, "scores"), (true, "raw_scores")] {
        let opts = RerankOptions {
            raw_scores: raw,
            truncate: true,
        };
        let got = rerank::predict(&p, &pairs, &opts, 4).unwrap();
        let want = floats(&st, name);
        let d = max_diff(&got, &want);
        assert!(d < 1e-5, "{name}: max |diff| {d}");
        // rank(): the same scores, best first.
        let ranked = rerank::rank(&p, query, &texts, &opts, 2).unwrap();
        assert_eq!(ranked.len(), texts.len());
        for w in ranked.windows(2) {
            assert!(w[0].score >= w[1].score);
        }
        for r in &ranked {
            assert!((r.score - want[r.index]).abs() < 1e-5);
        }
    }
    // The last pair is over the model's 32 positions: refused unless truncated.
    let e = rerank::predict(&p, &pairs, &RerankOptions::default(), 4).unwrap_err();
    assert!(e.to_string().contains("32"), "{e}");
    // A classifier with three labels is no cross-encoder.
    let three = root().join("tests/fixtures/bert-tiny-classify");
    let e = rerank::load(three.to_str().unwrap(), "f32".parse().unwrap()).unwrap_err();
    assert!(e.to_string().contains("one label"), "{e}");
}
