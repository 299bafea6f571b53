//! BERT against HF transformers golden references (tests/fixtures, written
//! by scripts/make_fixtures.py): hidden states, pooler and every head's
//! logits on random-init tiny checkpoints, fill-mask top-k, and the real
//! all-MiniLM-L6-v2 against sentence-transformers.

use std::path::{Path, PathBuf};

use lmkit::models::bert::{Bert, BertActivations, BertBatch};
use lmkit::models::bert::{BertPipeline, Chunking, EmbedOptions, LongInputs, QaOptions};
use lmkit::models::gpt2::WeightDtype;
use serde_json::Value;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn fixture(case: &str) -> PathBuf {
    root().join("tests/fixtures").join(case)
}

/// `reference.safetensors` + `reference.json` of a case.
struct Reference {
    bytes: Vec<u8>,
    json: Value,
}

impl Reference {
    fn load(case: &str) -> Reference {
        let dir = fixture(case);
        let bytes =
            std::fs::read(dir.join("reference.safetensors")).expect("reference.safetensors");
        let json =
            serde_json::from_str(&std::fs::read_to_string(dir.join("reference.json")).unwrap())
                .unwrap();
        Reference { bytes, json }
    }

    fn tensor(&self, name: &str) -> (Vec<usize>, safetensors::Dtype, Vec<u8>) {
        let st = safetensors::SafeTensors::deserialize(&self.bytes).unwrap();
        let t = st
            .tensor(name)
            .unwrap_or_else(|_| panic!("reference tensor {name}"));
        (t.shape().to_vec(), t.dtype(), t.data().to_vec())
    }

    fn f32(&self, name: &str) -> (Vec<usize>, Vec<f32>) {
        let (shape, dtype, data) = self.tensor(name);
        assert_eq!(dtype, safetensors::Dtype::F32, "{name}");
        let v = data
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
            .collect();
        (shape, v)
    }

    fn i64(&self, name: &str) -> (Vec<usize>, Vec<i64>) {
        let (shape, dtype, data) = self.tensor(name);
        assert_eq!(dtype, safetensors::Dtype::I64, "{name}");
        let v = data
            .chunks_exact(8)
            .map(|b| i64::from_le_bytes(b.try_into().unwrap()))
            .collect();
        (shape, v)
    }

    /// The case's padded input batch.
    fn batch(&self) -> BertBatch {
        let (shape, ids) = self.i64("input_ids");
        let (_, types) = self.i64("token_type_ids");
        let (_, mask) = self.i64("attention_mask");
        BertBatch::new(
            shape[0],
            shape[1],
            ids.iter().map(|&x| x as u32).collect(),
            types.iter().map(|&x| x as u32).collect(),
            mask.iter().map(|&x| x as u8).collect(),
        )
        .unwrap()
    }
}

/// `|a − b| ≤ tol·max(1, max|ref|)` elementwise (the fixtures' suggested tolerance).
fn assert_close(what: &str, got: &[f32], want: &[f32], tol: f32) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let scale = want.iter().fold(1.0f32, |m, x| m.max(x.abs()));
    let (i, err) = got
        .iter()
        .zip(want)
        .map(|(a, b)| (a - b).abs())
        .enumerate()
        .fold(
            (0, 0.0f32),
            |acc, (i, e)| if e > acc.1 { (i, e) } else { acc },
        );
    assert!(
        err <= tol * scale,
        "{what}: max |diff| {err} at {i} (got {}, want {}), allowed {}",
        got[i],
        want[i],
        tol * scale
    );
}

/// [`Bert::forward_unpadded`] on a fixture batch that has padding.
fn unpadded(m: &Bert, batch: &BertBatch) -> BertActivations {
    let real = batch.attention_mask.iter().filter(|&&x| x != 0).count();
    assert!(real < batch.b * batch.t, "the fixture batch has padding");
    let mut acts = BertActivations::new(false);
    m.forward_unpadded(batch, &mut acts).unwrap();
    assert_eq!(acts.rows(), real, "only the real tokens ran");
    acts
}

/// (packed row, padded position `bi·T + j`) of every real token.
fn real_positions<'a>(
    batch: &'a BertBatch,
    acts: &'a BertActivations,
) -> impl Iterator<Item = (usize, usize)> + 'a {
    (0..batch.b * batch.t).filter_map(|p| acts.row(p / batch.t, p % batch.t).map(|r| (r, p)))
}

fn forward(case: &str) -> (Bert, Reference, BertBatch, BertActivations) {
    let model = Bert::from_dir(fixture(case)).unwrap_or_else(|e| panic!("{case}: {e}"));
    let r = Reference::load(case);
    let batch = r.batch();
    let mut acts = BertActivations::new(true);
    model.forward(&batch, &mut acts).unwrap();
    (model, r, batch, acts)
}

fn check_hidden(case: &str, r: &Reference, acts: &BertActivations) {
    let (shape, hs) = r.f32("hidden_states");
    let per = hs.len() / shape[0];
    for l in 0..shape[0] {
        let got = acts.hidden_state(l).unwrap();
        assert_close(
            &format!("{case} hidden_states[{l}]"),
            got,
            &hs[l * per..(l + 1) * per],
            1e-4,
        );
    }
    assert_close(
        &format!("{case} last"),
        acts.hidden(),
        &hs[(shape[0] - 1) * per..],
        1e-4,
    );
}

#[test]
fn pretraining_all_heads() {
    let (m, r, batch, acts) = forward("bert-tiny-pretraining");
    assert!(m.heads.pooler && m.heads.mlm && m.heads.nsp);
    check_hidden("pretraining", &r, &acts);
    assert_close(
        "last_hidden_state",
        acts.hidden(),
        &r.f32("last_hidden_state").1,
        1e-4,
    );
    let pooled = m.pooled(&acts).unwrap();
    assert_close("pooler_output", &pooled, &r.f32("pooler_output").1, 1e-4);
    let rows: Vec<usize> = (0..batch.b * batch.t).collect();
    let mlm = m.mlm_logits(&acts, &rows).unwrap();
    assert_close(
        "prediction_logits",
        &mlm,
        &r.f32("prediction_logits").1,
        1e-4,
    );
    let nsp = m.nsp_logits(&pooled).unwrap();
    assert_close(
        "seq_relationship_logits",
        &nsp,
        &r.f32("seq_relationship_logits").1,
        1e-4,
    );
    // A head the checkpoint lacks is a clear error, not a panic.
    let e = m.qa_logits(&acts).unwrap_err().to_string();
    assert!(e.contains("qa_outputs"), "{e}");
}

#[test]
fn bare_model_without_prefix() {
    let (m, r, _, acts) = forward("bert-tiny-bare");
    assert!(m.heads.pooler && !m.heads.mlm);
    check_hidden("bare", &r, &acts);
    assert_close(
        "pooler_output",
        &m.pooled(&acts).unwrap(),
        &r.f32("pooler_output").1,
        1e-4,
    );
}

#[test]
fn sequence_classification() {
    let (m, r, _, acts) = forward("bert-tiny-classify");
    let logits = m.classifier_logits(&m.pooled(&acts).unwrap()).unwrap();
    assert_close("classify logits", &logits, &r.f32("logits").1, 1e-4);
    assert_eq!(m.config.id2label, ["neg", "neu", "pos"]);
}

#[test]
fn token_classification_logits() {
    let (m, r, batch, acts) = forward("bert-tiny-token-classify");
    assert!(m.heads.token_classifier && !m.heads.classifier && !m.heads.pooler);
    let logits = m.token_logits(&acts).unwrap();
    let want = r.f32("logits").1;
    assert_close("token logits", &logits, &want, 1e-4);
    // Unpadded: the real tokens' rows, against HF's logits at their positions.
    let packed = unpadded(&m, &batch);
    let l = m.config.num_labels();
    let got = m.token_logits(&packed).unwrap();
    assert_eq!(got.len(), packed.rows() * l);
    for (row, p) in real_positions(&batch, &packed) {
        let (g, w) = (&got[row * l..(row + 1) * l], &want[p * l..(p + 1) * l]);
        assert_close(&format!("token logits at {p}"), g, w, 1e-4);
    }
    assert_eq!(m.config.id2label, ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]);
    // A sequence classifier is not a token classifier, and the other way round.
    assert!(m.pooled(&acts).is_err());
    let (c, _, _, cacts) = forward("bert-tiny-classify");
    assert!(c.token_logits(&cacts).is_err());
}

#[test]
fn question_answering_logits() {
    let (m, r, batch, acts) = forward("bert-tiny-qa");
    assert!(!m.heads.pooler);
    let (s, e) = m.qa_logits(&acts).unwrap();
    let (ws, we) = (r.f32("start_logits").1, r.f32("end_logits").1);
    assert_close("start_logits", &s, &ws, 1e-4);
    assert_close("end_logits", &e, &we, 1e-4);
    let packed = unpadded(&m, &batch);
    let (s, e) = m.qa_logits(&packed).unwrap();
    assert_eq!((s.len(), e.len()), (packed.rows(), packed.rows()));
    let pick = |v: &[f32], at: &[usize]| at.iter().map(|&i| v[i]).collect::<Vec<f32>>();
    let (rows, pos): (Vec<usize>, Vec<usize>) = real_positions(&batch, &packed).unzip();
    assert_close(
        "unpadded start_logits",
        &pick(&s, &rows),
        &pick(&ws, &pos),
        1e-4,
    );
    assert_close(
        "unpadded end_logits",
        &pick(&e, &rows),
        &pick(&we, &pos),
        1e-4,
    );
    assert!(m.pooled(&acts).is_err());
}

#[test]
fn next_sentence_logits() {
    let (m, r, _, acts) = forward("bert-tiny-nsp");
    let logits = m.nsp_logits(&m.pooled(&acts).unwrap()).unwrap();
    assert_close("nsp logits", &logits, &r.f32("logits").1, 1e-4);
}

#[test]
fn masked_lm_logits() {
    let (m, r, batch, acts) = forward("bert-tiny-mlm");
    let rows: Vec<usize> = (0..batch.b * batch.t).collect();
    let logits = m.mlm_logits(&acts, &rows).unwrap();
    assert_close("mlm logits", &logits, &r.f32("logits").1, 1e-4);
}

/// The pipeline (tokenizer + model + softmax + top-k) against
/// `transformers.pipeline("fill-mask", top_k=5)`.
#[test]
fn fill_mask_matches_hf_pipeline() {
    let p = BertPipeline::from_dir(fixture("bert-tiny-mlm")).unwrap();
    let r = Reference::load("bert-tiny-mlm");
    let results = r.json["fill_mask"]["results"].as_array().unwrap();
    for (i, res) in results.iter().enumerate() {
        let text = res["text"].as_str().unwrap();
        let got = p.fill_mask(text, 5).unwrap();
        let (_, probs) = r.f32(&format!("fill_mask.{i}.probs"));
        let masks = res["masks"].as_array().unwrap();
        assert_eq!(got.len(), masks.len(), "{text}");
        for (m, (g, want)) in got.iter().zip(masks).enumerate() {
            let want = want.as_array().unwrap();
            let want_ids: Vec<u64> = want.iter().map(|w| w["id"].as_u64().unwrap()).collect();
            let got_ids: Vec<u64> = g.iter().map(|p| p.id as u64).collect();
            assert_eq!(got_ids, want_ids, "{text} mask {m}");
            for (gp, wp) in g.iter().zip(want) {
                assert_eq!(gp.token, wp["token"].as_str().unwrap());
                assert_eq!(gp.sequence, wp["sequence"].as_str().unwrap(), "{text}");
                assert!((gp.score as f64 - wp["score"].as_f64().unwrap()).abs() < 1e-5);
                let v = probs.len() / masks.len();
                assert!((gp.score - probs[m * v + gp.id as usize]).abs() < 1e-5);
            }
        }
    }
    let e = p.fill_mask("no mask here", 5).unwrap_err().to_string();
    assert!(e.contains("[MASK]"), "{e}");
    // A checkpoint without the MLM head says so.
    let qa = BertPipeline::from_dir(fixture("bert-tiny-qa")).unwrap();
    let e = qa.fill_mask("the [MASK] .", 5).unwrap_err().to_string();
    assert!(e.contains("masked-LM head"), "{e}");
}

/// Span QA end to end on the fixture's pairs: the model is random, so this
/// checks the plumbing (windows, logits, offsets) against the best span
/// computed directly from HF's logits.
#[test]
fn question_answering_pipeline() {
    let p = BertPipeline::from_dir(fixture("bert-tiny-qa")).unwrap();
    let r = Reference::load("bert-tiny-qa");
    let (shape, _) = r.i64("input_ids");
    let (_, start) = r.f32("start_logits");
    let (_, end) = r.f32("end_logits");
    let pairs = [
        ("who saw the dog", "the old man saw the dog by the river"),
        ("where is paris", "paris is in france"),
    ];
    let t = shape[1];
    for (i, (q, c)) in pairs.iter().enumerate() {
        let got = p.answer(q, c, 384, 128, QaOptions::default()).unwrap();
        assert_eq!(got.len(), 1);
        // Recompute from HF's logits with the same post-processing.
        let enc = p.tokenizer.encode_pair(q, c, true).unwrap();
        let k = enc.len();
        let w = lmkit::models::bert::qa::QaWindow {
            encoding: &enc,
            start_logits: &start[i * t..i * t + k],
            end_logits: &end[i * t..i * t + k],
        };
        let cont = |id: u32| {
            p.tokenizer
                .id_to_token(id)
                .is_some_and(|s| s.starts_with("##"))
        };
        let want = lmkit::models::bert::qa::best_answers(&[w], c, &cont, QaOptions::default());
        assert_eq!(got[0].answer, want[0].answer, "{q}");
        assert!((got[0].score - want[0].score).abs() < 1e-4);
        assert_eq!(&c[got[0].byte_start..got[0].byte_end], got[0].answer);
    }
    // A context longer than one window: the windows run together, the last
    // (shorter) one unpadded beside the others; the same answers as each
    // window run alone.
    let long = "the old man saw the dog by the river . ".repeat(20) + "and a cat";
    let q = "who saw the dog";
    let opts = QaOptions {
        top_k: 3,
        ..Default::default()
    };
    let a = p.answer(q, &long, 32, 8, opts).unwrap();
    assert_eq!(a.len(), 3);
    assert!(a.windows(2).all(|w| w[0].score >= w[1].score));
    let wins = p.tokenizer.encode_pair_windows(q, &long, 32, 8).unwrap();
    let lens: Vec<usize> = wins.iter().map(|w| w.encoding.len()).collect();
    assert!(
        lens.len() > 2 && lens.iter().any(|&l| l != lens[0]),
        "{lens:?}"
    );
    let alone: Vec<(Vec<f32>, Vec<f32>)> = wins
        .iter()
        .map(|w| {
            let batch = BertBatch::from_encodings(&[&w.encoding], 0).unwrap();
            let mut acts = BertActivations::new(false);
            p.model.forward(&batch, &mut acts).unwrap();
            p.model.qa_logits(&acts).unwrap()
        })
        .collect();
    let qw: Vec<_> = wins
        .iter()
        .zip(&alone)
        .map(|(w, (s, e))| lmkit::models::bert::qa::QaWindow {
            encoding: &w.encoding,
            start_logits: s,
            end_logits: e,
        })
        .collect();
    let cont = |id: u32| {
        p.tokenizer
            .id_to_token(id)
            .is_some_and(|s| s.starts_with("##"))
    };
    let want = lmkit::models::bert::qa::best_answers(&qw, &long, &cont, opts);
    assert_eq!(a.len(), want.len());
    for (g, w) in a.iter().zip(&want) {
        assert_eq!((g.byte_start, g.byte_end), (w.byte_start, w.byte_end));
        assert!(
            (g.score - w.score).abs() < 1e-4,
            "{} vs {}",
            g.score,
            w.score
        );
    }
    assert!(p.answer("", "x", 384, 128, QaOptions::default()).is_err());
}

#[test]
fn classify_and_nsp_pipelines() {
    let p = BertPipeline::from_dir(fixture("bert-tiny-classify")).unwrap();
    let r = Reference::load("bert-tiny-classify");
    let (_, logits) = r.f32("logits");
    let texts = [
        "the king was very good",
        "a bad day",
        "she found the old red book at home",
    ];
    let got = p.classify(&texts, 2, false).unwrap();
    for (i, g) in got.iter().enumerate() {
        let l = &logits[i * 3..(i + 1) * 3];
        let best = (0..3).max_by(|&a, &b| l[a].total_cmp(&l[b])).unwrap();
        assert_eq!(g[0].label, ["neg", "neu", "pos"][best]);
        let z: f32 = l.iter().map(|x| (x - l[best]).exp()).sum();
        assert!((g[0].score - 1.0 / z).abs() < 1e-5);
    }
    let long = "good ".repeat(40);
    assert!(p.classify(&[&long], 2, false).is_err());
    assert_eq!(p.classify(&[&long], 2, true).unwrap().len(), 1);

    let nsp = BertPipeline::from_dir(fixture("bert-tiny-nsp")).unwrap();
    let r = Reference::load("bert-tiny-nsp");
    let (_, l) = r.f32("logits");
    let got = nsp
        .next_sentence("the sun was up", "they walked to the sea")
        .unwrap();
    let want = 1.0 / (1.0 + (l[1] - l[0]).exp());
    assert!((got[0] - want).abs() < 1e-5, "{got:?} vs {want}");
}

/// A cross-encoder (one-label classifier over a text pair) scores pairs as
/// HF's `BertForSequenceClassification(**tokenizer(query, text))`, whatever
/// the batch; over-long pairs are an error unless truncated.
#[test]
fn cross_encoder_pair_scores_match_hf() {
    let p = BertPipeline::from_dir(fixture("bert-tiny-rerank")).unwrap();
    let r = Reference::load("bert-tiny-rerank");
    let (shape, logits) = r.f32("logits");
    assert_eq!(shape, [4, 1]);
    let query = "where is the old dog";
    let texts = [
        "the old dog is by the river",
        "paris is in france",
        "a dog",
        "she found the red book",
    ];
    let pairs: Vec<(&str, &str)> = texts.iter().map(|t| (query, *t)).collect();
    for batch in [1, 3, 8] {
        let got: Vec<f32> = p
            .score_pairs(&pairs, batch, false)
            .unwrap()
            .into_iter()
            .map(|l| {
                assert_eq!(l.len(), 1);
                l[0]
            })
            .collect();
        assert_close(&format!("pair logits, batch {batch}"), &got, &logits, 1e-4);
    }
    let long = "dog ".repeat(40);
    assert!(p.score_pairs(&[(query, &long)], 2, false).is_err());
    assert_eq!(p.score_pairs(&[(query, &long)], 2, true).unwrap().len(), 1);
    // Only models with a classification head score pairs.
    let mlm = BertPipeline::from_dir(fixture("bert-tiny-mlm")).unwrap();
    assert!(mlm.score_pairs(&pairs, 2, false).is_err());
}

/// bf16 and int8 weights: same model, products in bf16 / int8 (activations
/// quantized per row) — close to f32, not equal; f32 again is exact.
#[test]
fn reduced_precision_forward_is_close() {
    let (mut m, r, _, _) = forward("bert-tiny-pretraining");
    let mut acts = BertActivations::new(false);
    // int8: PyTorch's `quantize_dynamic` (per-tensor u8 activations) gives
    // max |diff| 0.34 and mean 0.069 on this fixture (scale 2.8).
    for (dtype, bound, mean_bound) in [
        (WeightDtype::Bf16, 5e-2, 0.02),
        (WeightDtype::Int8, 0.1, 0.05),
    ] {
        m.set_dtype(dtype).unwrap();
        assert_eq!(m.dtype(), dtype);
        m.forward(&r.batch(), &mut acts).unwrap();
        assert_close(
            &format!("{dtype} last_hidden_state"),
            acts.hidden(),
            &r.f32("last_hidden_state").1,
            bound,
        );
        let d = acts
            .hidden()
            .iter()
            .zip(&r.f32("last_hidden_state").1)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        assert!(d > 0.0, "{dtype}: the products really are rounded");
        let want = r.f32("last_hidden_state").1;
        let mean = acts
            .hidden()
            .iter()
            .zip(&want)
            .map(|(a, b)| (a - b).abs())
            .sum::<f32>()
            / want.len() as f32;
        println!("{dtype}: max |diff| {d}, mean {mean}");
        assert!(
            mean <= mean_bound,
            "{dtype}: mean |diff| {mean} above {mean_bound}"
        );
    }
    m.set_dtype(WeightDtype::F32).unwrap();
    m.forward(&r.batch(), &mut acts).unwrap();
    assert_close(
        "f32 again",
        acts.hidden(),
        &r.f32("last_hidden_state").1,
        1e-4,
    );
}

/// The real MiniLM; missing, the test fails and says how to fetch it
/// (scripts/test.sh fetches it first), never skips.
fn minilm() -> PathBuf {
    let dir = root().join("assets/minilm");
    assert!(
        dir.join("model.safetensors").exists(),
        "assets/minilm is missing: run scripts/fetch-assets.sh"
    );
    dir
}

/// The real all-MiniLM-L6-v2 against sentence-transformers `encode()`.
#[test]
fn minilm_matches_sentence_transformers() {
    let dir = minilm();
    let p = BertPipeline::from_dir(&dir).unwrap();
    assert_eq!(p.max_len(), 256);
    let r = Reference::load("minilm-embeddings");
    let sentences: Vec<&str> = r.json["sentences"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect();
    let (eshape, want) = r.f32("embeddings");
    let d = eshape[1];
    // Batch sizes 1 and 7 (different padding, same answer).
    for bs in [7, 1] {
        let got = p
            .embed(
                &sentences,
                &EmbedOptions {
                    batch_size: bs,
                    ..Default::default()
                },
            )
            .unwrap();
        for (i, g) in got.iter().enumerate() {
            assert_close(
                &format!("embedding {i} (batch {bs})"),
                g,
                &want[i * d..(i + 1) * d],
                1e-4,
            );
        }
    }
    let (_, mean) = r.f32("mean_pooled");
    let raw = p
        .embed(
            &sentences,
            &EmbedOptions {
                normalize: Some(false),
                ..Default::default()
            },
        )
        .unwrap();
    for (i, g) in raw.iter().enumerate() {
        assert_close(
            &format!("mean_pooled {i}"),
            g,
            &mean[i * d..(i + 1) * d],
            1e-4,
        );
    }
    // Token states of sentence 0.
    let (tshape, tok) = r.f32("token_embeddings.0");
    let enc = p.tokenizer.encode(sentences[0], true).unwrap();
    assert_eq!(enc.len(), tshape[0]);
    let mut acts = BertActivations::new(false);
    p.model
        .forward(&BertBatch::from_encodings(&[&enc], 0).unwrap(), &mut acts)
        .unwrap();
    assert_close("token_embeddings.0", acts.hidden(), &tok, 1e-4);
    // Windows: a long text is split and averaged rather than truncated, so
    // its embedding differs from the truncated one.
    let long = sentences
        .iter()
        .find(|s| s.split(' ').count() > 500)
        .unwrap();
    let w = p
        .embed(
            &[long],
            &EmbedOptions {
                long: LongInputs::Chunk(Chunking::default()),
                ..Default::default()
            },
        )
        .unwrap();
    let t = p.embed(&[long], &EmbedOptions::default()).unwrap();
    let dot: f32 = w[0].iter().zip(&t[0]).map(|(a, b)| a * b).sum();
    assert!(
        dot < 0.9999 && dot > 0.5,
        "window vs truncated cosine {dot}"
    );
}

/// The real MiniLM with bf16 and int8 encoder matmuls: every sentence's
/// embedding within a small angle of sentence-transformers' f32 one.
#[test]
fn minilm_reduced_precision_embeddings_stay_close() {
    let dir = minilm();
    let mut p = BertPipeline::from_dir(&dir).unwrap();
    let r = Reference::load("minilm-embeddings");
    let sentences: Vec<&str> = r.json["sentences"]
        .as_array()
        .unwrap()
        .iter()
        .take(16)
        .map(|s| s.as_str().unwrap())
        .collect();
    let (eshape, want) = r.f32("embeddings");
    // int8: lowest cosine 0.9986 over these 16 sentences, 0.9935 over all 22
    // (measured, the Python test).
    for (dtype, min_cos) in [(WeightDtype::Bf16, 0.999), (WeightDtype::Int8, 0.99)] {
        p.model.set_dtype(dtype).unwrap();
        let got = p.embed(&sentences, &EmbedOptions::default()).unwrap();
        let mut worst = 1f32;
        for (i, g) in got.iter().enumerate() {
            let cos: f32 = g
                .iter()
                .zip(&want[i * eshape[1]..])
                .map(|(a, b)| a * b)
                .sum();
            assert!(
                cos > min_cos,
                "sentence {i}: cosine {cos} between {dtype} and sentence-transformers"
            );
            worst = worst.min(cos);
        }
        println!("{dtype}: lowest cosine {worst}");
    }
}

/// Full-size BERT-base (random init, assets/big from `make_fixtures.py --big`):
/// hidden states and pooler within 1e-4 of HF.
#[test]
#[ignore = "needs assets/big: python3 scripts/make_fixtures.py --big assets/big (PyTorch; scripts/test.sh does it)"]
fn bert_base_random_matches_hf() {
    let dir = root().join("assets/big/bert-base-random");
    assert!(
        dir.join("reference.safetensors").exists(),
        "assets/big/bert-base-random is missing: run python3 scripts/make_fixtures.py --big assets/big"
    );
    let m = Bert::from_dir(&dir).unwrap();
    let bytes = std::fs::read(dir.join("reference.safetensors")).unwrap();
    let r = Reference {
        bytes,
        json: Value::Null,
    };
    let mut acts = BertActivations::new(false);
    m.forward(&r.batch(), &mut acts).unwrap();
    assert_close(
        "bert-base last_hidden_state",
        acts.hidden(),
        &r.f32("last_hidden_state").1,
        1e-4,
    );
    assert_close(
        "bert-base pooler_output",
        &m.pooled(&acts).unwrap(),
        &r.f32("pooler_output").1,
        1e-4,
    );
}

/// SQuAD and tagging evaluation run each batch unpadded: in-order batches
/// of sequences of different lengths give what each sequence alone gives
/// (batch 1, nothing to pad).
#[test]
fn unpadded_evaluation_matches_one_at_a_time() {
    use lmkit::data::squad::read_squad;
    use lmkit::data::tagging::{encode_sentences, read_tagging, tag_map};
    use lmkit::eval::run::{eval_squad, eval_token_classify};

    let p = BertPipeline::from_dir(fixture("bert-tiny-qa")).unwrap();
    let ex = read_squad(&root().join("tests/data/squad/rust_book.json")).unwrap();
    let opts = QaOptions::default();
    let one = eval_squad(&p.model, &p.tokenizer, &ex, 32, 4, opts, 1).unwrap();
    let many = eval_squad(&p.model, &p.tokenizer, &ex, 32, 4, opts, 8).unwrap();
    assert_eq!(one.predictions.len(), ex.len());
    for ((id, a), (_, b)) in one.predictions.iter().zip(&many.predictions) {
        let (a, b) = (&a[0], &b[0]);
        assert_eq!(
            (a.byte_start, a.byte_end),
            (b.byte_start, b.byte_end),
            "{id}"
        );
        assert!(
            (a.score - b.score).abs() < 1e-4,
            "{id}: {} vs {}",
            a.score,
            b.score
        );
    }
    assert_eq!(one.scores, many.scores);

    let p = BertPipeline::from_dir(fixture("bert-tiny-token-classify")).unwrap();
    let data = read_tagging(&root().join("tests/data/tagging/rust_prose.eval.conll")).unwrap();
    let labels = tag_map(&data).unwrap();
    let encs = encode_sentences(&p.tokenizer, &data, &labels, 32).unwrap();
    let lens: Vec<usize> = encs.iter().take(8).map(|e| e.encoding.len()).collect();
    assert!(lens.iter().any(|&l| l != lens[0]), "{lens:?}");
    let pad = p.tokenizer.pad_id();
    let one = eval_token_classify(&p.model, pad, &encs, 1).unwrap();
    let many = eval_token_classify(&p.model, pad, &encs, 8).unwrap();
    assert_eq!(one.predictions, many.predictions);
    assert!(
        (one.loss - many.loss).abs() < 1e-5,
        "{} vs {}",
        one.loss,
        many.loss
    );
}
