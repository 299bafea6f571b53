//! Fine-tuning end to end on small models: classification from a
//! BertForPreTraining checkpoint (new classifier, unused MLM/NSP heads
//! ignored), span QA labels and training, GPT-2 LM fine-tuning, the saved
//! HF checkpoints, and clear errors for the wrong architecture. The real
//! MiniLM runs are in `finetune_minilm.rs`.

use std::path::{Path, PathBuf};

use lmkit::data::squad::read_squad;
use lmkit::models::bert::Bert;
use lmkit::recipes::finetune::{finetune, qa_train_features, FinetuneOptions, FinetuneTask};
use lmkit::spec::names::Architecture;
use lmkit::train::read_metrics;
use lmkit::util::Rng;
use lmkit_tokenizers::wordpiece::WordPieceTokenizer;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn fixture(case: &str) -> PathBuf {
    root().join("tests/fixtures").join(case)
}

/// `{key: shape}` of a safetensors file.
fn keys_of(path: &Path) -> std::collections::BTreeMap<String, Vec<usize>> {
    let bytes = std::fs::read(path).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    st.tensors()
        .into_iter()
        .map(|(k, t)| (k, t.shape().to_vec()))
        .collect()
}

/// `checkpoint_keys` of a fixture: what HF's `save_pretrained` wrote.
fn hf_keys(case: &str) -> std::collections::BTreeMap<String, Vec<usize>> {
    let j: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(fixture(case).join("reference.json")).unwrap(),
    )
    .unwrap();
    j["checkpoint_keys"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| {
            let shape = v
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_u64().unwrap() as usize)
                .collect();
            (k.clone(), shape)
        })
        .collect()
}

fn tmpdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("lmkit-ft-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Sentences over the tiny fixture vocabulary: animals vs places.
fn animal_place_rows(n: usize, seed: u64) -> String {
    let animals = ["dog", "cat", "bird"];
    let places = ["paris", "france", "london", "england", "city"];
    let filler = [
        "the", "a", "was", "very", "old", "big", "saw", "near", "home",
    ];
    let mut rng = Rng::new(seed);
    let mut out = String::new();
    for i in 0..n {
        let (pool, label): (&[&str], &str) = if i % 2 == 0 {
            (&animals, "animal")
        } else {
            (&places, "place")
        };
        let mut words = Vec::new();
        for k in 0..6 {
            if k % 2 == 0 {
                words.push(pool[rng.below(pool.len() as u64) as usize]);
            } else {
                words.push(filler[rng.below(filler.len() as u64) as usize]);
            }
        }
        out.push_str(&format!(
            "{{\"text\": \"{}\", \"label\": \"{label}\"}}\n",
            words.join(" ")
        ));
    }
    out
}

#[test]
fn tiny_classifier_learns_and_saves_an_hf_checkpoint() {
    let dir = tmpdir("cls");
    let (train, eval) = (dir.join("train.jsonl"), dir.join("eval.jsonl"));
    std::fs::write(&train, animal_place_rows(64, 1)).unwrap();
    std::fs::write(&eval, animal_place_rows(32, 2)).unwrap();
    let out = dir.join("out");
    let opts = FinetuneOptions {
        epochs: 6,
        batch_size: 8,
        lr: 3e-3,
        max_seq_len: 16,
        ..FinetuneOptions::default()
    };
    let mut events = 0;
    let s = finetune(
        FinetuneTask::CLASSIFY,
        &fixture("bert-tiny-pretraining"),
        &train,
        Some(&eval),
        &out,
        &opts,
        &mut |_| events += 1,
    )
    .unwrap();
    assert_eq!(s.steps, 6 * 8);
    assert!(events > 48);
    let rows = read_metrics(&out.join("metrics.jsonl")).unwrap();
    let evals: Vec<_> = rows
        .iter()
        .filter(|r| r.contains_key("eval_accuracy"))
        .collect();
    assert_eq!(evals.len(), 6, "one eval row per epoch");
    assert!(evals.iter().all(|r| r.contains_key("eval_f1")));
    let train_rows: Vec<f64> = rows
        .iter()
        .filter_map(|r| r.get("loss").and_then(|v| v.as_f64()))
        .collect();
    assert_eq!(train_rows.len(), 48);
    let acc = evals[5]["eval_accuracy"].as_f64().unwrap();
    let accs: Vec<f64> = evals
        .iter()
        .map(|r| r["eval_accuracy"].as_f64().unwrap())
        .collect();
    assert!(acc >= 0.95, "held-out accuracy per epoch {accs:?}");
    assert!(train_rows[47] < train_rows[0]);

    // The checkpoint: BertForSequenceClassification with the labels, no MLM/NSP heads.
    let m = Bert::from_dir(&out).unwrap();
    assert_eq!(
        m.architecture,
        Some(Architecture::BertForSequenceClassification)
    );
    assert_eq!(m.config.id2label, ["animal", "place"]);
    assert!(m.heads.classifier && m.heads.pooler && !m.heads.mlm && !m.heads.nsp);
    let cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("config.json")).unwrap()).unwrap();
    assert_eq!(cfg["label2id"]["place"], 1);
    assert!(out.join("vocab.txt").exists());
    // The same tensor names as HF's BertForSequenceClassification (the
    // fixture has 3 labels, this model 2).
    let mut want = hf_keys("bert-tiny-classify");
    want.insert("classifier.weight".into(), vec![2, 32]);
    want.insert("classifier.bias".into(), vec![2]);
    assert_eq!(keys_of(&out.join("model.safetensors")), want);
    // Predictions through the inference pipeline agree with the eval accuracy.
    let p = lmkit::models::bert::BertPipeline::from_dir(&out).unwrap();
    let r = p
        .classify(&["the dog saw a cat", "paris near london"], 2, false)
        .unwrap();
    assert_eq!(r[0][0].label, "animal");
    assert_eq!(r[1][0].label, "place");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn wrong_architecture_and_labels_are_clear_errors() {
    let dir = tmpdir("errs");
    let train = dir.join("train.jsonl");
    std::fs::write(&train, animal_place_rows(8, 1)).unwrap();
    let opts = FinetuneOptions {
        epochs: 1,
        ..FinetuneOptions::default()
    };
    // classify takes both families (GPT-2 in gpt2_heads.rs); qa is BERT's.
    let err = finetune(
        FinetuneTask::QA,
        &fixture("gpt2-tiny"),
        &train,
        None,
        &dir.join("o"),
        &opts,
        &mut |_| {},
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("`task` qa needs a BERT checkpoint") && err.contains("GPT-2"),
        "{err}"
    );
    let err = finetune(
        FinetuneTask::LM,
        &fixture("bert-tiny-bare"),
        &train,
        None,
        &dir.join("o"),
        &opts,
        &mut |_| {},
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("`task` lm needs a GPT-2 checkpoint"), "{err}");
    // A classifier checkpoint keeps its labels: unknown ones name the line.
    std::fs::write(
        &train,
        "{\"text\": \"a good day\", \"label\": \"pos\"}\n{\"text\": \"a bad day\", \"label\": \"awful\"}\n",
    )
    .unwrap();
    let err = finetune(
        FinetuneTask::CLASSIFY,
        &fixture("bert-tiny-classify"),
        &train,
        None,
        &dir.join("o"),
        &opts,
        &mut |_| {},
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("train.jsonl:2: unknown label \"awful\""),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Synthetic SQuAD over the tiny vocabulary: "who" questions whose answer
/// is the subject of the context.
fn tiny_squad(n: usize, seed: u64) -> String {
    let subjects = ["the old man", "a woman", "the king", "the child", "a dog"];
    let objects = ["the river", "a house", "the red book", "the sea", "a tree"];
    let mut rng = Rng::new(seed);
    let mut qas = Vec::new();
    for i in 0..n {
        let s = subjects[rng.below(5) as usize];
        let o = objects[rng.below(5) as usize];
        let filler = [
            "it was a long day .",
            "the sun was up .",
            "there was a cat .",
        ][i % 3];
        let context = format!("{filler} {s} saw {o} .");
        let start = context.find(s).unwrap();
        qas.push(format!(
            "{{\"context\": \"{context}\", \"qas\": [{{\"id\": \"q{i}\", \"question\": \"who saw {o}\", \"answers\": [{{\"text\": \"{s}\", \"answer_start\": {start}}}]}}]}}"
        ));
    }
    format!(
        "{{\"version\": \"1.1\", \"data\": [{{\"title\": \"tiny\", \"paragraphs\": [{}]}}]}}",
        qas.join(",")
    )
}

#[test]
fn tiny_qa_trains_and_answers() {
    let dir = tmpdir("qa");
    let (train, eval) = (dir.join("train.json"), dir.join("eval.json"));
    std::fs::write(&train, tiny_squad(48, 3)).unwrap();
    std::fs::write(&eval, tiny_squad(16, 4)).unwrap();
    let out = dir.join("out");
    let opts = FinetuneOptions {
        epochs: 6,
        batch_size: 8,
        lr: 3e-3,
        max_seq_len: 24,
        doc_stride: 8,
        ..FinetuneOptions::default()
    };
    // From a bare BertModel: the QA head is new, the pooler is dropped.
    let s = finetune(
        FinetuneTask::QA,
        &fixture("bert-tiny-bare"),
        &train,
        Some(&eval),
        &out,
        &opts,
        &mut |_| {},
    )
    .unwrap();
    let ev = s.last_eval.unwrap();
    let (em, f1) = (
        ev["eval_exact_match"].as_f64().unwrap(),
        ev["eval_f1"].as_f64().unwrap(),
    );
    assert!(f1 >= 80.0 && em >= 60.0, "EM {em}, F1 {f1}");
    let m = Bert::from_dir(&out).unwrap();
    assert_eq!(m.architecture, Some(Architecture::BertForQuestionAnswering));
    assert!(m.heads.qa && !m.heads.pooler);
    assert_eq!(
        keys_of(&out.join("model.safetensors")),
        hf_keys("bert-tiny-qa")
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Window labels: every window that holds the whole answer points at
/// tokens whose offsets cover exactly the answer's words; windows without
/// it point at [CLS].
#[test]
fn qa_window_labels_cover_the_answer() {
    let tok = WordPieceTokenizer::from_dir(fixture("bert-tiny-qa")).unwrap();
    let path = std::env::temp_dir().join(format!("lmkit-ft-qafeat-{}.json", std::process::id()));
    std::fs::write(&path, tiny_squad(20, 9)).unwrap();
    let ex = read_squad(&path).unwrap();
    // Windows of 16 tokens with stride 4 split most contexts.
    let feats = qa_train_features(&tok, &ex, 16, 4).unwrap();
    assert!(
        feats.len() > ex.len(),
        "contexts were not split into windows"
    );
    let mut with_answer = 0;
    let mut k = 0;
    for e in &ex {
        let ans = &e.answers[0];
        let (s, t) = (
            ans.byte_start.unwrap(),
            ans.byte_start.unwrap() + ans.text.len(),
        );
        let wins = tok
            .encode_pair_windows(&e.question, &e.context, 16, 4)
            .unwrap()
            .len();
        for f in &feats[k..k + wins] {
            if f.start == 0 {
                assert_eq!(f.end, 0);
                continue;
            }
            with_answer += 1;
            let o = &f.encoding.offsets;
            assert_eq!((o[f.start].0, o[f.end].1), (s, t), "{}", e.id);
        }
        k += wins;
    }
    assert_eq!(k, feats.len());
    assert!(
        with_answer >= ex.len(),
        "{with_answer} windows hold an answer"
    );
    std::fs::remove_file(&path).unwrap();
}
