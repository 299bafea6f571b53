//! BERT backward against PyTorch: the loss and the gradient of every
//! parameter after one `loss.backward()`, for every HF head
//! (tests/fixtures/bert-tiny-{pretraining,mlm,nsp,classify,qa,regression,multiple-choice}), and one
//! AdamW step through the trainer against `torch.optim.AdamW`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use lmkit::kernels::AdamW;
use lmkit::models::bert::{Bert, BertActivations, BertBatch};
use lmkit::models::bert::{BertTargets, BertTrainBatch, BertTrainer};
use lmkit::models::gpt2::WeightDtype;

#[path = "support/streamed.rs"]
mod streamed;
use lmkit::models::Trainable;
use lmkit::spec::names::{canonical_name, Family};
use serde_json::Value;
use streamed::check_streamed;

fn fixture(case: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures")
        .join(case)
}

struct Reference {
    bytes: Vec<u8>,
    json: Value,
}

impl Reference {
    fn load(case: &str) -> Reference {
        let dir = fixture(case);
        Reference {
            bytes: std::fs::read(dir.join("reference.safetensors")).unwrap(),
            json: serde_json::from_str(
                &std::fs::read_to_string(dir.join("reference.json")).unwrap(),
            )
            .unwrap(),
        }
    }

    fn st(&self) -> safetensors::SafeTensors<'_> {
        safetensors::SafeTensors::deserialize(&self.bytes).unwrap()
    }

    fn f32(&self, name: &str) -> Vec<f32> {
        let st = self.st();
        let t = st.tensor(name).unwrap_or_else(|_| panic!("tensor {name}"));
        assert_eq!(t.dtype(), safetensors::Dtype::F32);
        t.data()
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
            .collect()
    }

    fn i64(&self, name: &str) -> (Vec<usize>, Vec<i64>) {
        let st = self.st();
        let t = st.tensor(name).unwrap_or_else(|_| panic!("tensor {name}"));
        assert_eq!(t.dtype(), safetensors::Dtype::I64);
        let v = t
            .data()
            .chunks_exact(8)
            .map(|b| i64::from_le_bytes(b.try_into().unwrap()))
            .collect();
        (t.shape().to_vec(), v)
    }

    fn i32s(&self, name: &str) -> Vec<i32> {
        self.i64(name).1.iter().map(|&x| x as i32).collect()
    }

    fn scalar(&self, name: &str) -> f64 {
        self.json["scalars"][name]["value"].as_f64().unwrap()
    }

    /// `[B,T]`, or multiple choice's `[B,K,T]` as `[B·K,T]` (as HF flattens it).
    fn batch(&self) -> BertBatch {
        let (shape, ids) = self.i64("input_ids");
        let (_, types) = self.i64("token_type_ids");
        let (_, mask) = self.i64("attention_mask");
        let (t, rows) = shape.split_last().unwrap();
        BertBatch::new(
            rows.iter().product(),
            *t,
            ids.iter().map(|&x| x as u32).collect(),
            types.iter().map(|&x| x as u32).collect(),
            mask.iter().map(|&x| x as u8).collect(),
        )
        .unwrap()
    }

    /// `grad.*` / `adamw.*` tensors by canonical parameter name.
    fn by_param(&self, prefix: &str) -> HashMap<String, Vec<f32>> {
        let st = self.st();
        st.names()
            .into_iter()
            .filter_map(|k| {
                k.strip_prefix(prefix)
                    .map(|n| (k.to_string(), n.to_string()))
            })
            .map(|(k, n)| (canonical_name(Family::Bert, &n), self.f32(&k)))
            .collect()
    }
}

/// `|a − b| ≤ tol·max|ref| + 1e-6` per tensor: relative to the tensor's
/// scale, with a floor for gradients that are 0 in exact arithmetic (the key
/// bias: softmax ignores a shift shared by all keys; both sides hold ~1e-7 noise).
fn assert_close(what: &str, got: &[f32], want: &[f32], tol: f32) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let scale = want.iter().fold(0.0f32, |m, x| m.max(x.abs()));
    for (i, (a, b)) in got.iter().zip(want).enumerate() {
        assert!(
            (a - b).abs() <= tol * scale + 1e-6,
            "{what}[{i}]: got {a}, want {b} (tensor max {scale})"
        );
    }
}

fn targets(case: &str, r: &Reference) -> BertTargets {
    match case {
        "bert-tiny-pretraining" => BertTargets::Pretraining {
            mlm: r.i32s("mlm_labels"),
            nsp: r.i32s("next_sentence_label"),
        },
        "bert-tiny-mlm" => BertTargets::Mlm(r.i32s("labels")),
        "bert-tiny-nsp" => BertTargets::Nsp(r.i32s("labels")),
        "bert-tiny-classify" => BertTargets::Classify(r.i32s("labels")),
        "bert-tiny-token-classify" => BertTargets::TokenClassify(r.i32s("labels")),
        "bert-tiny-regression" => BertTargets::Regression(r.f32("labels")),
        "bert-tiny-multiple-choice" => BertTargets::MultipleChoice(r.i32s("labels")),
        "bert-tiny-qa" => BertTargets::Qa {
            start: r.i32s("start_positions"),
            end: r.i32s("end_positions"),
        },
        _ => unreachable!(),
    }
}

fn check_case(case: &str) -> (BertTrainer, Reference) {
    let model = Bert::from_dir(fixture(case)).unwrap_or_else(|e| panic!("{case}: {e}"));
    let r = Reference::load(case);
    let mut tr = BertTrainer::new(model).unwrap();
    let tb = BertTrainBatch {
        batch: r.batch(),
        targets: targets(case, &r),
    };
    let st = tr.forward_backward(&tb, 1.0).unwrap();
    let want = r.scalar("loss");
    assert!(
        (st.loss - want).abs() <= 1e-5 * want.abs().max(1.0),
        "{case}: loss {} vs {want}",
        st.loss
    );
    if case == "bert-tiny-pretraining" {
        assert!((st.mlm.mean() - r.scalar("mlm_loss")).abs() < 1e-5);
        assert!((st.nsp.mean() - r.scalar("nsp_loss")).abs() < 1e-5);
    }
    let grads = r.by_param("grad.");
    assert_eq!(
        grads.len(),
        tr.model.layout.specs().len(),
        "{case}: every parameter has a reference gradient"
    );
    for spec in tr.model.layout.specs() {
        let want = grads
            .get(&spec.name)
            .unwrap_or_else(|| panic!("{case}: no grad.{}", spec.name));
        assert_close(
            &format!("{case} grad {}", spec.name),
            &tr.grads[spec.range()],
            want,
            2e-4,
        );
    }
    check_streamed_case(case, &tb, &tr);
    (tr, r)
}

/// The streamed backward of a fresh trainer gives `want`'s gradients.
fn check_streamed_case(case: &str, tb: &BertTrainBatch, want: &BertTrainer) {
    let tr = BertTrainer::new(Bert::from_dir(fixture(case)).unwrap()).unwrap();
    let layers = tr.model.config.num_hidden_layers;
    check_streamed(case, tr, tb, layers, &want.grads);
}

#[test]
fn pretraining_heads_gradients() {
    check_case("bert-tiny-pretraining");
}

#[test]
fn masked_lm_gradients() {
    check_case("bert-tiny-mlm");
}

#[test]
fn next_sentence_gradients() {
    check_case("bert-tiny-nsp");
}

#[test]
fn sequence_classification_gradients() {
    check_case("bert-tiny-classify");
}

#[test]
fn token_classification_gradients() {
    let (tr, r) = check_case("bert-tiny-token-classify");
    // The fixture ignores later word pieces, [CLS], [SEP] and padding.
    let labels = r.i32s("labels");
    assert!(labels.iter().filter(|&&x| x == -100).count() > labels.len() / 3);
    // Central finite differences of the loss (f64 sums of f32 losses) on a
    // few entries of the classifier and of an encoder weight.
    let model = Bert::from_dir(fixture("bert-tiny-token-classify")).unwrap();
    let mut fd = BertTrainer::new(model).unwrap();
    let tb = BertTrainBatch {
        batch: r.batch(),
        targets: targets("bert-tiny-token-classify", &r),
    };
    for name in [
        "classifier.weight",
        "classifier.bias",
        "encoder.layer.1.output.dense.weight",
    ] {
        let range = fd.model.layout.range(name).unwrap();
        for i in [range.start, range.start + 3, range.end - 1] {
            let h = 1e-2f32;
            let x = fd.model.params[i];
            fd.model.params[i] = x + h;
            let up = fd.evaluate_batch(&tb).unwrap().loss;
            fd.model.params[i] = x - h;
            let down = fd.evaluate_batch(&tb).unwrap().loss;
            fd.model.params[i] = x;
            let num = (up - down) / (2.0 * h as f64);
            let got = tr.grads[i] as f64;
            assert!(
                (num - got).abs() <= 2e-3 * num.abs().max(0.1),
                "{name}[{}]: finite difference {num} vs backward {got}",
                i - range.start
            );
        }
    }
}

/// STS-B-style regression (one output, `problem_type` regression): HF's
/// `MSELoss(logits.squeeze(), labels)`, its outputs and every gradient.
#[test]
fn regression_gradients() {
    let (mut tr, r) = check_case("bert-tiny-regression");
    assert_close(
        "regression logits",
        &tr.outputs().class_logits,
        &r.f32("logits"),
        1e-4,
    );
    let st = tr.take_stats();
    assert_eq!(st.regression.count, 3);
    assert!((st.regression.mean() - r.scalar("loss")).abs() <= 1e-5 * r.scalar("loss"));
}

#[test]
fn multiple_choice_logits_and_gradients() {
    let (tr, r) = check_case("bert-tiny-multiple-choice");
    assert!(tr.model.heads.multiple_choice);
    assert_close(
        "multiple-choice logits [B,K]",
        &tr.outputs().choice_logits,
        &r.f32("logits"),
        1e-4,
    );
    // Inference gives the same scores: pooled [B·K,C] → classifier → [B·K].
    let mut acts = lmkit::models::bert::BertActivations::new(false);
    tr.model.forward(&r.batch(), &mut acts).unwrap();
    let pooled = tr.model.pooled(&acts).unwrap();
    assert_close(
        "choice_logits",
        &tr.model.choice_logits(&pooled).unwrap(),
        &r.f32("logits"),
        1e-4,
    );
    // Labels that do not fit the batch are errors, not panics.
    let mut tr = tr;
    for bad in [
        vec![0, 1, 0, 1],
        vec![3, 0],
        vec![],
        vec![0, 1, 2, 0, 1, 2, 0],
    ] {
        let tb = BertTrainBatch {
            batch: r.batch(),
            targets: BertTargets::MultipleChoice(bad.clone()),
        };
        assert!(tr.forward_backward(&tb, 1.0).is_err(), "{bad:?}");
    }
}

#[test]
fn question_answering_gradients() {
    check_case("bert-tiny-qa");
}

/// Gradients accumulate: two calls at scale ½ equal one at scale 1.
#[test]
fn gradients_accumulate_with_scale() {
    let (tr1, r) = check_case("bert-tiny-classify");
    let model = Bert::from_dir(fixture("bert-tiny-classify")).unwrap();
    let mut tr2 = BertTrainer::new(model).unwrap();
    let tb = BertTrainBatch {
        batch: r.batch(),
        targets: targets("bert-tiny-classify", &r),
    };
    tr2.forward_backward(&tb, 0.5).unwrap();
    tr2.forward_backward(&tb, 0.5).unwrap();
    assert_close("accumulated", &tr2.grads, &tr1.grads, 1e-5);
    let stats = tr2.take_stats();
    assert_eq!(stats.batches, 2);
    assert_eq!(tr2.take_stats().batches, 0);
}

/// One AdamW step with the fixture's hyper-parameters and decay groups
/// (the layout's flags) reproduces `torch.optim.AdamW`, compared where the
/// gradient is not ~0 (there a ±lr update can flip sign).
#[test]
fn adamw_step_matches_torch() {
    let (mut tr, r) = check_case("bert-tiny-pretraining");
    let a = &r.json["adamw"];
    let decay: Vec<String> = a["decay"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| canonical_name(Family::Bert, v.as_str().unwrap()))
        .collect();
    for spec in tr.model.layout.specs() {
        assert_eq!(
            spec.decay,
            decay.contains(&spec.name),
            "decay flag of {}",
            spec.name
        );
    }
    let cfg = AdamW {
        lr: a["lr"].as_f64().unwrap() as f32,
        beta1: a["betas"][0].as_f64().unwrap() as f32,
        beta2: a["betas"][1].as_f64().unwrap() as f32,
        eps: a["eps"].as_f64().unwrap() as f32,
        weight_decay: a["weight_decay"].as_f64().unwrap() as f32,
    };
    let spans = tr.model.layout.decay_spans();
    let n = tr.grads.len();
    let (mut m, mut v) = (vec![0.0; n], vec![0.0; n]);
    let grads = tr.grads.clone();
    lmkit::kernels::adamw_update(
        &mut tr.model.params,
        &grads,
        &mut m,
        &mut v,
        1,
        &cfg,
        &spans,
    );
    let after = r.by_param("adamw.");
    for spec in tr.model.layout.specs() {
        let want = &after[&spec.name];
        let got = &tr.model.params[spec.range()];
        let g = &grads[spec.range()];
        for i in 0..want.len() {
            if g[i].abs() > 1e-6 {
                assert!(
                    (got[i] - want[i]).abs() <= 2e-6 * want[i].abs().max(1.0),
                    "adamw {}[{i}]: {} vs {}",
                    spec.name,
                    got[i],
                    want[i]
                );
            }
        }
    }
}

#[test]
fn targets_without_a_head_are_an_error() {
    let model = Bert::from_dir(fixture("bert-tiny-qa")).unwrap();
    let r = Reference::load("bert-tiny-qa");
    let mut tr = BertTrainer::new(model).unwrap();
    let tb = BertTrainBatch {
        batch: r.batch(),
        targets: BertTargets::Classify(vec![0, 1]),
    };
    let err = tr.forward_backward(&tb, 1.0).unwrap_err().to_string();
    assert!(
        err.contains("classification targets given but the model has no such head"),
        "{err}"
    );
}

/// bf16 training (the encoder's four matmuls per layer and attention's
/// products on bf16 operands, f32 sums, as PyTorch autocast runs `linear`
/// and `bmm`): the loss and every gradient follow f32's on the pretraining
/// fixture, within what rounding the operands to 8 bits of mantissa allows
/// (the tiny fixture's 8-wide heads round q, k, p and v too: loss within
/// 1%, gradient cosines above 0.998); after the weights change the packed
/// copy follows them.
#[test]
fn bf16_loss_and_gradients_follow_f32() {
    let case = "bert-tiny-pretraining";
    let r = Reference::load(case);
    let tb = BertTrainBatch {
        batch: r.batch(),
        targets: targets(case, &r),
    };
    let mut f = BertTrainer::new(Bert::from_dir(fixture(case)).unwrap()).unwrap();
    let mut b = BertTrainer::new(Bert::from_dir(fixture(case)).unwrap()).unwrap();
    Trainable::set_precision(&mut b, lmkit::spec::Precision::Bf16).unwrap();
    let sf = f.forward_backward(&tb, 1.0).unwrap();
    let sb = b.forward_backward(&tb, 1.0).unwrap();
    assert!(sb.loss != sf.loss, "bf16 is not f32");
    assert!(
        (sb.loss - sf.loss).abs() < 1e-2 * sf.loss,
        "{} vs {}",
        sb.loss,
        sf.loss
    );
    for spec in f.model.layout.specs() {
        let (x, y) = (&b.grads[spec.range()], &f.grads[spec.range()]);
        let dot: f64 = x
            .iter()
            .zip(y)
            .map(|(a, c)| (*a as f64) * (*c as f64))
            .sum();
        let nx: f64 = x.iter().map(|a| (*a as f64).powi(2)).sum::<f64>().sqrt();
        let ny: f64 = y.iter().map(|a| (*a as f64).powi(2)).sum::<f64>().sqrt();
        if ny > 1e-6 {
            assert!(
                dot / (nx * ny) > 0.998,
                "{}: cosine {}",
                spec.name,
                dot / (nx * ny)
            );
            assert!(
                (nx - ny).abs() < 0.03 * ny,
                "{}: norm {nx} vs {ny}",
                spec.name
            );
        }
    }
    // New weights (as an optimizer step writes them): both follow.
    for t in [&mut f, &mut b] {
        let (p, g) = Trainable::params_and_grads(t);
        for x in p.iter_mut() {
            *x *= 0.5;
        }
        g.fill(0.0);
    }
    let (sf, sb) = (
        f.forward_backward(&tb, 1.0).unwrap(),
        b.forward_backward(&tb, 1.0).unwrap(),
    );
    assert!(
        (sb.loss - sf.loss).abs() < 1e-2 * sf.loss,
        "{} vs {}",
        sb.loss,
        sf.loss
    );
}

/// A model packed for f32 inference (`set_dtype(F32)`: the encoder's
/// matrices transposed into a copy) trains on its parameters: the copy is
/// dropped when the trainer takes the model, so once the parameters change
/// the loss follows them.
#[test]
fn training_drops_the_inference_copy() {
    let case = "bert-tiny-classify";
    let r = Reference::load(case);
    let tb = BertTrainBatch {
        batch: r.batch(),
        targets: targets(case, &r),
    };
    let mut packed = Bert::from_dir(fixture(case)).unwrap();
    packed.set_dtype(WeightDtype::F32).unwrap();
    let mut a = BertTrainer::new(packed).unwrap();
    let mut b = BertTrainer::new(Bert::from_dir(fixture(case)).unwrap()).unwrap();
    let before = b.forward_backward(&tb, 1.0).unwrap().loss;
    for tr in [&mut a, &mut b] {
        for p in tr.model.params.iter_mut() {
            *p *= 0.5;
        }
    }
    let (la, lb) = (
        a.forward_backward(&tb, 1.0).unwrap().loss,
        b.forward_backward(&tb, 1.0).unwrap().loss,
    );
    assert!((lb - before).abs() > 1e-3, "the change moves the loss");
    assert_eq!(la, lb);
}

/// The unpadded forward packs the real tokens of a right-padded batch and
/// gives each the padded forward's hidden state (and [CLS] pooling); the
/// training heads above (HF's gradients on these padded batches) run on it.
#[test]
fn unpadded_forward_matches_padded_on_real_tokens() {
    let case = "bert-tiny-classify";
    let r = Reference::load(case);
    let model = Bert::from_dir(fixture(case)).unwrap();
    let batch = r.batch();
    let (b, t) = (batch.b, batch.t);
    let c = model.config.hidden_size;
    let real: usize = batch.attention_mask.iter().map(|&m| m as usize).sum();
    assert!(real < b * t, "{case}: the fixture batch has padding");
    let mut padded = BertActivations::new(false);
    let mut packed = BertActivations::new(true);
    model.forward(&batch, &mut padded).unwrap();
    model.forward_unpadded(&batch, &mut packed).unwrap();
    assert_eq!(padded.rows(), b * t);
    assert_eq!(packed.rows(), real, "only the real tokens ran");
    let (hp, hu) = (padded.hidden(), packed.hidden());
    for bi in 0..b {
        for j in 0..t {
            let real = batch.attention_mask[bi * t + j] != 0;
            match packed.row(bi, j) {
                Some(row) => {
                    assert!(real, "row {bi} position {j}: padding got a row");
                    let want = &hp[(bi * t + j) * c..(bi * t + j + 1) * c];
                    assert_close(
                        &format!("row {bi} position {j}"),
                        &hu[row * c..(row + 1) * c],
                        want,
                        1e-5,
                    );
                }
                None => assert!(!real, "row {bi} position {j}: a real token got no row"),
            }
        }
    }
    assert_close(
        "pooled",
        &model.pooled(&packed).unwrap(),
        &model.pooled(&padded).unwrap(),
        1e-5,
    );
    // A sequence's real tokens are one span of rows; a span reaching into
    // padding is an error, and so is an MLM row there.
    for bi in 0..b {
        let len = (0..t)
            .filter(|&j| batch.attention_mask[bi * t + j] != 0)
            .count();
        let first = packed.row(bi, 0).unwrap();
        assert_eq!(packed.span(bi, len).unwrap(), first..first + len);
        assert_eq!(padded.span(bi, len).unwrap(), bi * t..bi * t + len);
    }
    let pad = batch.attention_mask.iter().position(|&m| m == 0).unwrap();
    assert!(packed.span(pad / t, pad % t + 1).is_err());
    assert!(model.mlm_logits(&packed, &[pad]).is_err());

    // Left padding is not packed: the padded forward's rows, unchanged.
    let mut left = batch.clone();
    left.attention_mask[0] = 0;
    let mut want = BertActivations::new(false);
    model.forward(&left, &mut want).unwrap();
    let mut got = BertActivations::new(false);
    model.forward_unpadded(&left, &mut got).unwrap();
    assert_eq!(got.rows(), b * t);
    assert_eq!(got.hidden(), want.hidden());
}

/// `BertBatch`'s fields are public: a hand-built batch whose arrays disagree
/// with its shape, or whose position ids pass the model's table, is an
/// error before anything is indexed (padded or not).
#[test]
fn hand_built_batches_are_checked() {
    let case = "bert-tiny-classify";
    let model = Bert::from_dir(fixture(case)).unwrap();
    let good = Reference::load(case).batch();
    let mut acts = BertActivations::new(false);
    let mut short = good.clone();
    short.token_type_ids.pop();
    let mut far = good.clone();
    far.position_ids[1] = model.config.max_position_embeddings as u32;
    for (what, bad) in [("short token types", short), ("position id", far)] {
        assert!(model.forward(&bad, &mut acts).is_err(), "{what}");
        assert!(model.forward_unpadded(&bad, &mut acts).is_err(), "{what}");
    }
    model.forward_unpadded(&good, &mut acts).unwrap();
    assert_eq!(acts.row(good.b, 0), None);
    assert_eq!(acts.row(0, good.t), None);
}
