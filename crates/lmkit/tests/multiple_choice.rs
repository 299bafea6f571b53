//! Multiple choice: the data reader (both row shapes, every error), GPT-1's
//! input transformation for GPT-2, `BertForMultipleChoice` written in HF's
//! layout (the keys transformers wrote for tests/fixtures/bert-tiny-multiple-choice,
//! the same logits once loaded back), the recipe on the tiny fixtures, and
//! (ignored) fine-tuning on the committed story-cloze set from the Rust books.

use std::path::{Path, PathBuf};

use lmkit::checkpoint::{save_params, SafeTensors};
use lmkit::data::multiple_choice::{read_multiple_choice, MAX_CHOICES};
use lmkit::models::bert::{Bert, BertActivations, BertBatch};
use lmkit::models::gpt2::classify::encode_choice;
use lmkit::recipes::finetune::{finetune, FinetuneOptions, FinetuneTask};
use lmkit::spec::names::Architecture;
use lmkit::spec::AnyConfig;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn fixture(case: &str) -> PathBuf {
    root().join("tests/fixtures").join(case)
}

struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> Self {
        let p = std::env::temp_dir().join(format!("lmkit-mc-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }

    fn file(&self, name: &str, text: &str) -> PathBuf {
        let p = self.0.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn reads_both_row_shapes() {
    let d = TempDir::new("read");
    let p = d.file(
        "a.jsonl",
        "{\"context\": \"c\", \"choices\": [\"x\", \"y\", \"z\"], \"label\": 2}\n\n\
         {\"question\": \"q?\", \"choices\": [\"x\", \"y\", \"z\"], \"label\": 0}\n\
         {\"context\": \"c\", \"question\": \"q\", \"choices\": [\"x\", \"y\", \"z\"], \"label\": 1}\n\
         {\"sent1\": \"s1\", \"sent2\": \"s2\", \"ending0\": \"e0\", \"ending1\": \"e1\", \
          \"ending2\": \"e2\", \"label\": 1, \"video-id\": \"v\"}\n",
    );
    let data = read_multiple_choice(&p).unwrap();
    assert_eq!(data.num_choices, 3);
    assert_eq!(data.labels(), [2, 0, 1, 1]);
    let e = &data.examples;
    assert_eq!((e[0].line, e[1].line, e[3].line), (1, 3, 5));
    // BERT pairs follow HF run_swag; GPT-2 puts the question before the delimiter.
    assert_eq!(e[0].bert_pair(1), ("c", "y".to_string()));
    assert_eq!(e[1].bert_pair(0), ("q?", "x".to_string()));
    assert_eq!(e[2].bert_pair(2), ("c", "q z".to_string()));
    assert_eq!(e[3].bert_pair(0), ("s1", "s2 e0".to_string()));
    assert_eq!(e[3].choices, ["e0", "e1", "e2"]);
    assert_eq!(e[2].gpt2_prefix(), "c q");
    assert_eq!(e[1].gpt2_prefix(), "q?");
}

#[test]
fn bad_rows_are_errors_naming_the_line() {
    let d = TempDir::new("bad");
    let many: Vec<String> = (0..=MAX_CHOICES).map(|i| format!("\"c{i}\"")).collect();
    let many_endings: Vec<String> = (0..=MAX_CHOICES)
        .map(|i| format!("\"ending{i}\": \"e\""))
        .collect();
    let ok = "{\"context\": \"c\", \"choices\": [\"x\", \"y\"], \"label\": 0}\n";
    for (text, want) in [
        ("", "no examples"),
        ("[1]\n", ":1: expected a JSON object"),
        (
            "{\"context\": \"c\", \"label\": 0}\n",
            ":1: missing field `choices`",
        ),
        (
            "{\"choices\": [\"x\", \"y\"], \"label\": 0}\n",
            ":1: missing field `context`",
        ),
        (
            "{\"context\": 3, \"choices\": [\"x\", \"y\"], \"label\": 0}\n",
            "`context` must be a string",
        ),
        (
            "{\"context\": \"c\", \"choices\": \"x\", \"label\": 0}\n",
            "`choices` must be an array",
        ),
        (
            "{\"context\": \"c\", \"choices\": [\"x\", 1], \"label\": 0}\n",
            "choice 1 must be a string",
        ),
        (
            "{\"context\": \"c\", \"choices\": [], \"label\": 0}\n",
            "0 choice(s)",
        ),
        (
            "{\"context\": \"c\", \"choices\": [\"x\", \"y\"]}\n",
            "missing field `label`",
        ),
        (
            "{\"context\": \"c\", \"choices\": [\"x\", \"y\"], \"label\": \"x\"}\n",
            "must be an integer",
        ),
        (
            "{\"context\": \"c\", \"choices\": [\"x\", \"y\"], \"label\": -1}\n",
            "label -1 is not the index",
        ),
        (
            "{\"context\": \"c\", \"choices\": [\"x\", \"y\"], \"label\": 0.5}\n",
            "label 0.5 is not the index",
        ),
        (
            "{\"sent1\": \"s\", \"label\": 0}\n",
            "missing field `choices` (or SWAG's",
        ),
        (
            &format!(
                "{{\"context\": \"c\", \"choices\": [{}], \"label\": 0}}\n",
                many.join(",")
            ),
            "more than 16 choices",
        ),
        (
            &format!(
                "{{\"sent1\": \"s\", {}, \"label\": 0}}\n",
                many_endings.join(",")
            ),
            "more than 16 choices",
        ),
        (
            &format!(
                "{ok}{{\"context\": \"c\", \"choices\": [\"x\", \"y\", \"z\"], \"label\": 0}}\n"
            ),
            ":2: 3 choices, but line 1 has 2",
        ),
    ] {
        let p = d.file("bad.jsonl", text);
        let err = read_multiple_choice(&p).unwrap_err().to_string();
        assert!(err.contains(want), "{text:?}: {err}");
    }
}

#[test]
fn gpt2_choice_is_prefix_delimiter_choice_cut_at_the_front() {
    let tok = lmkit_tokenizers::BpeTokenizer::from_dir(root().join("assets/gpt2")).unwrap();
    let eos = tok.endoftext_id().unwrap();
    let (p, c) = ("One two three four five six.", " And then it ended.");
    let (pi, ci) = (
        tok.encode_ordinary(p.as_bytes()),
        tok.encode_ordinary(c.as_bytes()),
    );
    let full = encode_choice(&tok, eos, p, c, 64);
    assert_eq!(full, [pi.clone(), vec![eos], ci.clone()].concat());
    // Too long: the context loses its start, the choice and delimiter stay.
    let cut = encode_choice(&tok, eos, p, c, ci.len() + 3);
    assert_eq!(
        cut,
        [pi[pi.len() - 2..].to_vec(), vec![eos], ci.clone()].concat()
    );
    // A choice longer than the window keeps its start; nothing of the context.
    let tiny = encode_choice(&tok, eos, p, c, 3);
    assert_eq!(tiny, [vec![eos], ci[..2].to_vec()].concat());
}

/// What lmkit writes for a `BertForMultipleChoice` is the checkpoint
/// transformers wrote (the same keys and shapes), and loads back with the
/// same scores; `scripts/check_finetune_hf.py` loads a fine-tuned one in
/// transformers itself.
#[test]
fn bert_multiple_choice_round_trips_in_hf_layout() {
    let case = fixture("bert-tiny-multiple-choice");
    let m = Bert::from_dir(&case).unwrap();
    assert!(m.heads.multiple_choice && m.heads.pooler && !m.heads.classifier);
    let d = TempDir::new("rt");
    save_params(
        &m.layout,
        &m.params,
        &m.config,
        &d.0,
        Architecture::BertForMultipleChoice,
    )
    .unwrap();
    let reference: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(case.join("reference.json")).unwrap())
            .unwrap();
    let st = SafeTensors::open(d.0.join("model.safetensors")).unwrap();
    let mut got: Vec<(String, Vec<usize>)> = st
        .names()
        .iter()
        .map(|k| (k.to_string(), st.shape(k).unwrap().to_vec()))
        .collect();
    got.sort();
    let mut want: Vec<(String, Vec<usize>)> = reference["checkpoint_keys"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| {
            let shape = v
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_u64().unwrap() as usize);
            (k.clone(), shape.collect())
        })
        .collect();
    want.sort();
    assert_eq!(got, want, "HF's keys and shapes exactly");
    let cfg = AnyConfig::from_file(d.0.join("config.json")).unwrap();
    assert_eq!(cfg.architecture(), Architecture::BertForMultipleChoice);
    let again = Bert::from_dir(&d.0).unwrap();
    assert_eq!(again.params, m.params);
    let batch = BertBatch::new(2, 3, vec![2, 40, 3, 2, 41, 3], vec![0; 6], vec![1; 6]).unwrap();
    let score = |m: &Bert| {
        let mut acts = BertActivations::new(false);
        m.forward(&batch, &mut acts).unwrap();
        m.choice_logits(&m.pooled(&acts).unwrap()).unwrap()
    };
    assert_eq!(score(&again), score(&m));
}

/// The recipe on the tiny BERT fixture: a run of a few steps is written as
/// `BertForMultipleChoice`, and `eval_multiple_choice_dir` on the saved
/// folder reproduces the run's last evaluation.
#[test]
fn bert_recipe_saves_a_multiple_choice_model_that_evaluates_alike() {
    let d = TempDir::new("recipe");
    let rows: String = (0..6)
        .map(|i| {
            format!(
                "{{\"context\": \"the dog was old\", \"question\": \"the\", \"choices\": \
                 [\"cat ran\", \"king saw {}\"], \"label\": {}}}\n",
                ["paris", "london"][i % 2],
                i % 2
            )
        })
        .collect();
    let train = d.file("train.jsonl", &rows);
    let out = d.0.join("out");
    let opts = FinetuneOptions {
        epochs: 1,
        batch_size: 4,
        lr: 1e-3,
        max_seq_len: 16,
        ..FinetuneOptions::default()
    };
    // A sequence classifier's head (2 rows) is no multiple-choice head (1 row):
    // said before anything is written.
    let clf = fixture("bert-tiny-classify");
    let e = finetune(
        FinetuneTask::MULTIPLE_CHOICE,
        &clf,
        &train,
        None,
        &out,
        &opts,
        &mut |_| {},
    )
    .unwrap_err();
    assert!(e.to_string().contains("sequence classifier"), "{e}");
    assert!(!out.join("model.safetensors").exists());
    let base = fixture("bert-tiny-bare");
    let s = finetune(
        FinetuneTask::MULTIPLE_CHOICE,
        &base,
        &train,
        Some(&train),
        &out,
        &opts,
        &mut |_| {},
    )
    .unwrap();
    assert_eq!(s.steps, 2);
    let ev = s.last_eval.unwrap();
    assert_eq!(ev["eval_examples"], 6);
    let m = Bert::from_dir(&out).unwrap();
    assert_eq!(m.architecture, Some(Architecture::BertForMultipleChoice));
    // `lmkit eval`'s scoring of the saved model: the training row's metrics.
    let r = evaluate_mc(&out, &train, 16, 64).unwrap();
    assert_eq!(r.metrics["accuracy"], ev["eval_accuracy"]);
    assert_eq!(r.metrics["loss"], ev["eval_loss"]);
    // A file of another K than the model saw still evaluates (one score per choice).
    let three = d.file(
        "three.jsonl",
        "{\"context\": \"the dog\", \"choices\": [\"a\", \"b\", \"c\"], \"label\": 2}\n",
    );
    let r = evaluate_mc(&out, &three, 16, 64).unwrap();
    assert_eq!(r.metrics["examples"], 1);
    assert_eq!(r.predictions[0]["scores"].as_array().unwrap().len(), 3);
    // A GPT-2 checkpoint without a tokenizer, and a classify-only BERT, are clear errors.
    let e = evaluate_mc(&fixture("bert-tiny-classify"), &train, 16, 64)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("no multiple-choice head"), "{e}");
}

// ---------------------------------------------------------------- end to end on real text

fn story(split: &str) -> PathBuf {
    root().join(format!(
        "tests/data/multiple_choice/rust_story.{split}.jsonl"
    ))
}

/// The real all-MiniLM-L6-v2 (a bare BertModel with its pooler; the
/// classifier is new) fine-tuned as `BertForMultipleChoice`
/// on the committed story-cloze set (400 train rows of 4 choices, 3 epochs),
/// scored on the 100 held-out rows. Measured (November 2026, 2 cores shared
/// with other builds, load ~8): eval accuracy 0.69 / 0.76 / 0.79 after
/// epochs 1 / 2 / 3 (chance 0.25), eval loss 0.56; 1753 s.
#[test]
#[ignore = "about 30 min on 2 busy shared cores (MiniLM on 400 x 4 pairs, 3 epochs); run with --ignored"]
fn minilm_picks_the_next_sentence() {
    let minilm = root().join("assets/minilm");
    assert!(
        minilm.join("model.safetensors").exists(),
        "{} is missing: run scripts/fetch-assets.sh first",
        minilm.display()
    );
    let d = TempDir::new("e2e-bert");
    let out = d.0.join("out");
    let opts = FinetuneOptions {
        epochs: 3,
        batch_size: 16,
        lr: 5e-5,
        max_seq_len: 96,
        ..FinetuneOptions::default()
    };
    let t0 = std::time::Instant::now();
    let s = finetune(
        FinetuneTask::MULTIPLE_CHOICE,
        &minilm,
        &story("train"),
        Some(&story("eval")),
        &out,
        &opts,
        &mut |_| {},
    )
    .unwrap();
    let ev = s.last_eval.unwrap();
    eprintln!(
        "MiniLM multiple choice: {ev:?} in {:.0} s",
        t0.elapsed().as_secs_f64()
    );
    let acc = ev["eval_accuracy"].as_f64().unwrap();
    assert!(acc >= 0.7, "eval accuracy {acc} (measured 0.79)");
    assert_eq!(ev["eval_examples"], 100);
}

/// `lmkit eval --task multiple-choice` on the model in `dir`.
fn evaluate_mc(
    dir: &std::path::Path,
    data: &std::path::Path,
    max_seq_len: usize,
    batch_size: usize,
) -> lmkit::tasks::Result<lmkit::eval::benchmark::Evaluation> {
    let opts = lmkit::eval::benchmark::EvalOptions {
        max_seq_len: Some(max_seq_len),
        batch_size: Some(batch_size),
        ..Default::default()
    };
    let target = lmkit::tasks::EvalTarget::Task(lmkit::tasks::TaskKind::MULTIPLE_CHOICE);
    lmkit::tasks::evaluate(target, dir, data, &opts, None, &mut |_, _| {})
}
