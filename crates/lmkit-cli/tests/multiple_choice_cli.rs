//! `lmkit finetune --task multiple-choice` and `lmkit eval --task
//! multiple-choice` end to end on tiny models of both families (2 steps):
//! the saved HF class, eval rows that `lmkit eval` reproduces on the saved
//! model, per-item predictions, SWAG's columns, and clear errors.

mod common;

use std::path::{Path, PathBuf};

use common::{byte_tokenizer, lmkit, tmpdir, Cleanup};
use serde_json::Value;

fn ok(args: &[&str]) -> String {
    let o = lmkit(args);
    assert!(
        o.status.success(),
        "lmkit {args:?} failed:\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

fn fails(args: &[&str]) -> String {
    let o = lmkit(args);
    assert!(!o.status.success(), "lmkit {args:?} should fail");
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn s(p: &Path) -> String {
    p.display().to_string()
}

fn fixture(case: &str) -> String {
    s(&Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures")
        .join(case))
}

/// `n` examples of 3 choices over the tiny BERT vocabulary: the right
/// ending repeats the context's animal.
fn rows(n: usize) -> String {
    let animals = ["dog", "cat", "bird"];
    (0..n)
        .map(|i| {
            let a = animals[i % 3];
            let mut choices = vec![
                format!("the {a} ran home"),
                "the king saw paris".to_string(),
                "a red door".to_string(),
            ];
            let label = i % 3;
            choices.swap(0, label);
            serde_json::json!({"context": format!("the old {a} was very big"), "choices": choices, "label": label})
                .to_string()
                + "\n"
        })
        .collect()
}

/// Finetunes 2 steps and evaluates the saved model: the eval row of the
/// run and `lmkit eval` agree; returns the output folder.
fn finetune_and_eval(dir: &Path, model: &str, arch: &str, extra: &[&str]) -> PathBuf {
    let (train, eval) = (dir.join("train.jsonl"), dir.join("eval.jsonl"));
    std::fs::write(&train, rows(8)).unwrap();
    std::fs::write(&eval, rows(5)).unwrap();
    let out = dir.join(format!("out-{arch}"));
    let mut args = vec![
        "finetune",
        "--task",
        "multiple-choice",
        "--model",
        model,
        "--train",
        train.to_str().unwrap(),
        "--eval",
        eval.to_str().unwrap(),
        "--output",
        out.to_str().unwrap(),
        "--batch-size",
        "4",
        "--max-steps",
        "2",
        "--lr",
        "1e-3",
        "--json",
    ];
    args.extend_from_slice(extra);
    let summary: Value = serde_json::from_str(ok(&args).trim()).unwrap();
    assert_eq!(summary["steps"], 2, "{summary}");
    let row = &summary["eval"];
    assert_eq!(row["eval_examples"], 5, "{summary}");
    let (loss, acc) = (
        row["eval_loss"].as_f64().unwrap(),
        row["eval_accuracy"].as_f64().unwrap(),
    );
    assert!(
        loss.is_finite() && loss > 0.0 && (0.0..=1.0).contains(&acc),
        "{row}"
    );
    let metrics = std::fs::read_to_string(out.join("metrics.jsonl")).unwrap();
    assert!(
        metrics.lines().any(|l| l.contains("\"eval_accuracy\"")),
        "{metrics}"
    );
    let config: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("config.json")).unwrap()).unwrap();
    assert_eq!(config["architectures"][0], arch);
    // The saved model, evaluated by `lmkit eval`, gives the run's last row.
    let preds = dir.join(format!("preds-{arch}.jsonl"));
    let got: Value = serde_json::from_str(
        ok(&[
            "eval",
            "--task",
            "multiple-choice",
            "--model",
            &s(&out),
            "--data",
            &s(&eval),
            "--json",
            "--predictions",
            &s(&preds),
        ])
        .trim(),
    )
    .unwrap();
    assert_eq!(got["task"], "multiple-choice");
    assert_eq!(got["examples"], 5);
    assert!(
        (got["accuracy"].as_f64().unwrap() - acc).abs() < 1e-12,
        "{got} vs {row}"
    );
    assert!(
        (got["loss"].as_f64().unwrap() - loss).abs() < 1e-9,
        "{got} vs {row}"
    );
    let items: Vec<Value> = std::fs::read_to_string(&preds)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(items.len(), 5);
    let right = items.iter().filter(|p| p["choice"] == p["label"]).count();
    assert_eq!(right as f64 / 5.0, acc);
    for p in &items {
        let scores = p["scores"].as_array().unwrap();
        assert_eq!(scores.len(), 3);
        let best = (0..3)
            .max_by(|&a, &b| scores[a].as_f64().partial_cmp(&scores[b].as_f64()).unwrap())
            .unwrap();
        assert_eq!(p["choice"], best, "{p}");
    }
    out
}

#[test]
fn bert_multiple_choice_finetune_then_eval() {
    let dir = tmpdir("mc-bert");
    let _clean = Cleanup(dir.clone());
    let out = finetune_and_eval(
        &dir,
        &fixture("bert-tiny-bare"),
        "BertForMultipleChoice",
        &[],
    );
    // SWAG's columns read as the same examples (sent2 joins each ending).
    let swag = dir.join("swag.jsonl");
    std::fs::write(
        &swag,
        "{\"sent1\": \"the old dog was very big\", \"sent2\": \"the\", \"ending0\": \"dog ran home\", \
         \"ending1\": \"king saw paris\", \"ending2\": \"red door\", \"label\": 0}\n",
    )
    .unwrap();
    let got: Value = serde_json::from_str(
        ok(&[
            "eval",
            "--task",
            "multiple-choice",
            "--model",
            &s(&out),
            "--data",
            &s(&swag),
            "--json",
        ])
        .trim(),
    )
    .unwrap();
    assert_eq!(got["examples"], 1, "{got}");
    // A model without the head is named as such.
    let err = fails(&[
        "eval",
        "--task",
        "multiple-choice",
        "--model",
        &fixture("bert-tiny-classify"),
        "--data",
        &s(&swag),
    ]);
    assert!(err.contains("no multiple-choice head"), "{err}");
}

#[test]
fn gpt2_multiple_choice_finetune_then_eval() {
    let dir = tmpdir("mc-gpt2");
    let _clean = Cleanup(dir.clone());
    // A tiny byte-level GPT-2 (one pretraining step), a GPT2LMHeadModel.
    let tok = byte_tokenizer(&dir);
    let corpus = dir.join("corpus.txt");
    std::fs::write(
        &corpus,
        "the old dog was very big. the cat ran home.\n".repeat(100),
    )
    .unwrap();
    let base = dir.join("base");
    ok(&[
        "pretrain",
        "--tokenizer",
        &s(&tok),
        "--data",
        &s(&corpus),
        "--output",
        &s(&base),
        "--n-layer",
        "1",
        "--n-embd",
        "32",
        "--n-head",
        "2",
        "--seq-len",
        "64",
        "--batch-size",
        "2",
        "--max-steps",
        "1",
        "--eval-every",
        "0",
        "--sample-every",
        "0",
    ]);
    let out = finetune_and_eval(
        &dir,
        &s(&base),
        "GPT2DoubleHeadsModel",
        &["--lm-coef", "0.5", "--max-seq-len", "48"],
    );
    let config: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("config.json")).unwrap()).unwrap();
    assert_eq!(config["pad_token_id"], 256, "<|endoftext|> pads");
    // Bad data is an error naming the line, before any training.
    let bad = dir.join("bad.jsonl");
    for (text, want) in [
        (
            "{\"context\": \"a\", \"choices\": [\"b\", \"c\"], \"label\": 0}\n\
             {\"context\": \"a\", \"choices\": [\"b\", \"c\", \"d\"], \"label\": 0}\n",
            "bad.jsonl:2: 3 choices, but line 1 has 2",
        ),
        (
            "{\"context\": \"a\", \"choices\": [\"b\", \"c\"], \"label\": 2}\n",
            "bad.jsonl:1: label 2 is not the index of one of the 2 choices",
        ),
        (
            "{\"context\": \"a\", \"choices\": [\"b\"], \"label\": 0}\n",
            "bad.jsonl:1: 1 choice(s): an example needs at least 2",
        ),
        (
            "{\"choices\": [\"b\", \"c\"], \"label\": 0}\n",
            "bad.jsonl:1: missing field `context`",
        ),
    ] {
        std::fs::write(&bad, text).unwrap();
        let err = fails(&[
            "finetune",
            "--task",
            "multiple-choice",
            "--model",
            &s(&base),
            "--train",
            &s(&bad),
            "--output",
            &s(&dir.join("never")),
        ]);
        assert!(err.contains(want), "{err}");
        assert!(!dir.join("never").exists());
    }
}
