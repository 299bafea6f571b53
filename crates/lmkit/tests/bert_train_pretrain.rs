//! BERT pretraining runs: batches ([CLS] A [SEP] B [SEP], token types, MLM
//! labels only where chosen, fresh masks per epoch), metrics rows, the HF
//! BertForPreTraining output, --init-from a bare BertModel, and an exact
//! resume. Uses the real uncased vocabulary of assets/minilm and text of
//! assets/books.

use std::path::{Path, PathBuf};

use lmkit::data::mlm::IGNORE_INDEX;
use lmkit::models::bert::Bert;
use lmkit::recipes::bert_pretrain::{
    prepare_corpus, preview_epoch, run_bert_pretraining, BertDims, BertPretrainOptions,
    BertRunConfig,
};
use lmkit::spec::names::Architecture;
use lmkit::spec::Precision;
use lmkit::train::{read_metrics, LrSchedule, OptimConfig, ScheduleKind};
use lmkit_tokenizers::wordpiece::WordPieceTokenizer;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn asset(rel: &str) -> PathBuf {
    let p = root().join("assets").join(rel);
    assert!(
        p.exists(),
        "{} is missing: run scripts/fetch-assets.sh first",
        p.display()
    );
    p
}

fn tmpdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("lmkit-bp-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The first `n` documents of the books corpus.
fn corpus_slice(dir: &Path, n: usize) -> PathBuf {
    let text = std::fs::read_to_string(asset("books/corpus.txt")).unwrap();
    let docs: Vec<&str> = text.split("\n\u{c}\n").take(n).collect();
    let p = dir.join("corpus.txt");
    std::fs::write(&p, docs.join("\n\u{c}\n")).unwrap();
    p
}

fn run_cfg(max_steps: u64) -> BertRunConfig {
    BertRunConfig {
        seq_len: 64,
        batch_size: 4,
        grad_accum: 1,
        seed: 7,
        whole_word_masking: false,
        short_seq_prob: 0.1,
        val_fraction: 0.1,
        max_steps,
        eval_every: 5,
        eval_batches: 2,
        save_every: 0,
        keep: 2,
        log_every: 1,
        ranks: 1,
        dtype: Precision::F32,
    }
}

fn options(dir: &Path, data: PathBuf, max_steps: u64) -> BertPretrainOptions {
    BertPretrainOptions {
        data: vec![data],
        text_field: "text".into(),
        output: dir.to_path_buf(),
        tokenizer: Some(asset("minilm")),
        init_from: None,
        dims: Some(BertDims {
            layers: 2,
            hidden: 32,
            heads: 4,
            intermediate: None,
            max_positions: 64,
        }),
        resume: false,
        run: run_cfg(max_steps),
        optim: OptimConfig {
            schedule: LrSchedule {
                kind: ScheduleKind::Linear,
                max_lr: 1e-3,
                min_lr: 0.0,
                warmup_steps: 2,
                total_steps: max_steps,
            },
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.01,
            grad_clip: 1.0,
            grad_accum: 1,
        },
        decay_embeddings: false,
        stop_after: None,
        max_shard_size: None,
        shard_optimizer: false,
        profile: false,
        dtype_auto: false,
    }
}

#[test]
fn batches_have_the_pretraining_layout_and_fresh_masks() {
    let dir = tmpdir("layout");
    let data = corpus_slice(&dir, 30);
    let tok = WordPieceTokenizer::from_dir(asset("minilm")).unwrap();
    let corpus = prepare_corpus(&[data], "text", &tok, 0.1).unwrap();
    assert!(corpus.val.len() >= 2 && corpus.train.len() > corpus.val.len());
    let run = run_cfg(10);
    let e0 = preview_epoch(&corpus, &tok, &run, 0, 50).unwrap();
    let again = preview_epoch(&corpus, &tok, &run, 0, 50).unwrap();
    let e1 = preview_epoch(&corpus, &tok, &run, 1, 50).unwrap();
    let (cls, sep, mask) = (tok.cls_id(), tok.sep_id(), tok.mask_id().unwrap());
    let (mut chosen, mut real) = (0, 0);
    for ((pair, tb), (_, tb2)) in e0.iter().zip(&again) {
        assert_eq!(tb.batch, tb2.batch, "same epoch, same masks");
        let b = &tb.batch;
        let n = pair.tokens_a.len() + pair.tokens_b.len() + 3;
        assert!(n <= 64);
        assert!(!pair.tokens_a.contains(&tok.pad_id()) && !pair.tokens_b.contains(&tok.pad_id()));
        let ids = &b.input_ids;
        assert_eq!(ids[0], cls);
        let a_end = 1 + pair.tokens_a.len();
        assert_eq!((ids[a_end], ids[n - 1]), (sep, sep));
        assert!(b.token_type_ids[..=a_end].iter().all(|&t| t == 0));
        assert!(b.token_type_ids[a_end + 1..n].iter().all(|&t| t == 1));
        assert!(b.attention_mask[..n].iter().all(|&m| m == 1));
        assert!(b.attention_mask[n..].iter().all(|&m| m == 0));
        let labels = tb.targets.mlm_labels().unwrap();
        let (orig, _) = pair.to_input(cls, sep);
        for i in 0..64 {
            if labels[i] == IGNORE_INDEX {
                if i < n {
                    assert_eq!(ids[i], orig[i], "an unchosen token changed");
                }
            } else {
                assert_eq!(labels[i], orig[i] as i32);
                assert!(i > 0 && i < n - 1 && i != a_end, "special token chosen");
                chosen += 1;
                if ids[i] == mask {
                    real += 1;
                }
            }
        }
        let nsp = tb.targets.nsp_labels().unwrap();
        assert_eq!(nsp[0], i32::from(pair.is_random_next));
    }
    assert!(
        chosen > 100 && real > chosen / 2,
        "{chosen} chosen, {real} [MASK]"
    );
    let differ = e0
        .iter()
        .zip(&e1)
        .filter(|((_, a), (_, b))| a.targets.mlm_labels() != b.targets.mlm_labels())
        .count();
    assert!(
        differ > 45,
        "epoch 1 reuses epoch 0's masks ({differ}/50 differ)"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn pretraining_writes_metrics_and_an_hf_model_and_resumes_exactly() {
    let dir = tmpdir("run");
    let data = corpus_slice(&dir, 30);
    // Straight through 12 steps.
    let a = dir.join("a");
    let sa = run_bert_pretraining(
        &options(&a, data.clone(), 12),
        &mut |_| {},
        &lmkit::train::StopRequest::default(),
    )
    .unwrap();
    assert_eq!(sa.steps, 12);
    let rows = read_metrics(&a.join("metrics.jsonl")).unwrap();
    let train: Vec<_> = rows.iter().filter(|r| r.contains_key("mlm_loss")).collect();
    assert_eq!(train.len(), 12);
    for r in &train {
        let f = |k: &str| r[k].as_f64().unwrap();
        // One micro-batch per step: the optimised loss is MLM + NSP of that batch.
        assert!((f("loss") - f("mlm_loss") - f("nsp_loss")).abs() < 1e-9);
        assert!((0.0..=1.0).contains(&f("nsp_accuracy")));
    }
    let val: Vec<_> = rows.iter().filter(|r| r.contains_key("val_loss")).collect();
    assert_eq!(val.len(), 4, "steps 0, 5, 10, 12");
    assert!(val.iter().all(|r| r.contains_key("val_nsp_accuracy")));
    let first = train[0]["mlm_loss"].as_f64().unwrap();
    assert!(
        (first - (30522f64).ln()).abs() < 1.0,
        "initial MLM loss {first} ≈ ln V"
    );
    let m = Bert::from_dir(&a).unwrap();
    assert_eq!(m.architecture, Some(Architecture::BertForPreTraining));
    assert!(m.heads.mlm && m.heads.nsp && m.heads.pooler);

    // 5 steps, stop, resume to 12: the same bytes.
    let b = dir.join("b");
    let mut o = options(&b, data.clone(), 12);
    o.stop_after = Some(5);
    let sb = run_bert_pretraining(&o, &mut |_| {}, &lmkit::train::StopRequest::default()).unwrap();
    assert!(sb.interrupted && sb.steps == 5);
    let mut o = options(&b, data, 12);
    o.resume = true;
    let sb = run_bert_pretraining(&o, &mut |_| {}, &lmkit::train::StopRequest::default()).unwrap();
    assert_eq!(sb.steps, 12);
    let wa = std::fs::read(a.join("model.safetensors")).unwrap();
    let wb = std::fs::read(b.join("model.safetensors")).unwrap();
    assert!(wa == wb, "resumed run differs from the straight run");
    let rb = read_metrics(&b.join("metrics.jsonl")).unwrap();
    assert_eq!(
        rows.iter().filter(|r| r.contains_key("loss")).count(),
        rb.iter().filter(|r| r.contains_key("loss")).count()
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `profile` covers BERT's whole step, f32 and bf16: the encoder's
/// products, attention, LayerNorm, GELU, the MLM head and AdamW each
/// timed, their sum within the step and most of it.
#[test]
fn profile_covers_the_bert_step() {
    let dir = tmpdir("profile");
    let data = corpus_slice(&dir, 30);
    for dtype in [Precision::F32, Precision::Bf16] {
        let mut o = options(&dir.join(format!("{dtype:?}")), data.clone(), 4);
        o.profile = true;
        o.run.dtype = dtype;
        let s =
            run_bert_pretraining(&o, &mut |_| {}, &lmkit::train::StopRequest::default()).unwrap();
        let p = s.profile.expect("a profile");
        let sum: f64 = p.phases.iter().map(|x| x.ms).sum();
        assert!(sum <= p.step_ms * 1.0001, "{sum} > {}", p.step_ms);
        // Most: the NSP head and batch handling are not timed, a larger
        // share on this tiny model than on a real one.
        assert!(
            sum >= 0.6 * p.step_ms,
            "{dtype:?}: phases cover too little:\n{}",
            p.table()
        );
        let ms = |name: &str| p.phases.iter().find(|x| x.phase == name).unwrap().ms;
        for name in [
            "matmul",
            "attention",
            "layernorm",
            "gelu",
            "lm_head_matmul",
            "adamw",
        ] {
            assert!(ms(name) > 0.0, "{dtype:?}: {name}\n{}", p.table());
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn init_from_a_bare_model_adds_heads_and_resume_rejects_changes() {
    let dir = tmpdir("init");
    let data = corpus_slice(&dir, 12);
    let mut o = options(&dir.join("out"), data.clone(), 3);
    o.dims = None;
    o.init_from = Some(asset("minilm"));
    o.tokenizer = None;
    o.run.seq_len = 48;
    o.run.eval_every = 0;
    let s = run_bert_pretraining(&o, &mut |_| {}, &lmkit::train::StopRequest::default()).unwrap();
    assert_eq!(s.steps, 3);
    let m = Bert::from_dir(dir.join("out")).unwrap();
    assert_eq!(m.config.num_hidden_layers, 6);
    assert_eq!(m.config.hidden_dropout_prob, 0.0);
    assert!(m.heads.mlm && m.heads.nsp);
    // A second fresh run into the same folder, and a resume with another seq-len.
    let err = run_bert_pretraining(&o, &mut |_| {}, &lmkit::train::StopRequest::default())
        .unwrap_err()
        .to_string();
    assert!(err.contains("already holds a checkpoint"), "{err}");
    o.resume = true;
    o.run.max_steps = 5;
    o.run.seq_len = 64;
    let err = run_bert_pretraining(&o, &mut |_| {}, &lmkit::train::StopRequest::default())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("`seq_len` 64 differs from the checkpoint's 48"),
        "{err}"
    );
    // A GPT-2 checkpoint is not a BERT one.
    let mut g = options(&dir.join("g"), data, 3);
    g.dims = None;
    g.init_from = Some(root().join("tests/fixtures/gpt2-tiny"));
    let err = run_bert_pretraining(&g, &mut |_| {}, &lmkit::train::StopRequest::default())
        .unwrap_err()
        .to_string();
    assert!(err.contains("not a BERT checkpoint"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A model with the tiny fixture's exact config writes exactly the tensors
/// (names and shapes) HF's `BertForPreTraining.save_pretrained` wrote.
#[test]
fn pretraining_checkpoint_has_hf_keys() {
    let dir = tmpdir("keys");
    let fx = root().join("tests/fixtures/bert-tiny-pretraining");
    let docs: Vec<String> = (0..10)
        .map(|d| {
            (0..6)
                .map(|k| {
                    format!(
                        "the {} saw a {} .",
                        ["man", "king", "dog"][(d + k) % 3],
                        ["house", "tree"][k % 2]
                    )
                })
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect();
    let data = dir.join("docs.txt");
    std::fs::write(&data, docs.join("\n\u{c}\n")).unwrap();
    let mut o = options(&dir.join("out"), data, 2);
    o.tokenizer = Some(fx.clone());
    o.dims = Some(BertDims {
        layers: 2,
        hidden: 32,
        heads: 4,
        intermediate: Some(64),
        max_positions: 32,
    });
    o.run.seq_len = 32;
    o.run.val_fraction = 0.0;
    run_bert_pretraining(&o, &mut |_| {}, &lmkit::train::StopRequest::default()).unwrap();
    let bytes = std::fs::read(dir.join("out/model.safetensors")).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let got: std::collections::BTreeMap<String, Vec<usize>> = st
        .tensors()
        .into_iter()
        .map(|(k, t)| (k, t.shape().to_vec()))
        .collect();
    let j: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fx.join("reference.json")).unwrap()).unwrap();
    let want: std::collections::BTreeMap<String, Vec<usize>> = j["checkpoint_keys"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| {
            (
                k.clone(),
                v.as_array()
                    .unwrap()
                    .iter()
                    .map(|x| x.as_u64().unwrap() as usize)
                    .collect(),
            )
        })
        .collect();
    assert_eq!(got, want);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `dtype` bf16 (the encoder's matmuls on bf16 operands): the losses follow
/// f32's without equalling them, a stopped bf16 run resumes exactly, and a
/// resume with another dtype is refused.
#[test]
fn bf16_pretraining_tracks_f32_and_resumes_exactly() {
    let dir = tmpdir("bf16");
    let data = corpus_slice(&dir, 30);
    let opts = |out: &str, dtype: Precision| {
        let mut o = options(&dir.join(out), data.clone(), 8);
        o.run.dtype = dtype;
        o
    };
    let losses = |out: &str| -> Vec<f64> {
        read_metrics(&dir.join(out).join("metrics.jsonl"))
            .unwrap()
            .iter()
            .filter_map(|r| r.get("loss").and_then(|v| v.as_f64()))
            .collect()
    };
    run_bert_pretraining(
        &opts("f32", Precision::F32),
        &mut |_| {},
        &lmkit::train::StopRequest::default(),
    )
    .unwrap();
    run_bert_pretraining(
        &opts("bf16", Precision::Bf16),
        &mut |_| {},
        &lmkit::train::StopRequest::default(),
    )
    .unwrap();
    let (f, b) = (losses("f32"), losses("bf16"));
    assert_eq!((f.len(), b.len()), (8, 8));
    assert_ne!(f, b, "bf16 is not f32");
    for (x, y) in b.iter().zip(&f) {
        assert!((x - y).abs() <= 0.01 * y, "bf16 {b:?} vs f32 {f:?}");
    }
    let mut cut = opts("cut", Precision::Bf16);
    cut.stop_after = Some(3);
    assert!(
        run_bert_pretraining(&cut, &mut |_| {}, &lmkit::train::StopRequest::default())
            .unwrap()
            .interrupted
    );
    let mut wrong = opts("cut", Precision::F32);
    wrong.resume = true;
    let err = run_bert_pretraining(&wrong, &mut |_| {}, &lmkit::train::StopRequest::default())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("`dtype` f32 differs from the checkpoint's bf16"),
        "{err}"
    );
    let mut again = opts("cut", Precision::Bf16);
    again.resume = true;
    run_bert_pretraining(&again, &mut |_| {}, &lmkit::train::StopRequest::default()).unwrap();
    assert_eq!(losses("cut"), b, "a resumed bf16 run continues exactly");
    std::fs::remove_dir_all(&dir).unwrap();
}
