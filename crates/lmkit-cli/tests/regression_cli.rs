//! `lmkit finetune --task regression`, `lmkit eval --task regression` and
//! `lmkit classify` on a regression model, end to end on the tiny fixtures
//! (two steps on a slice of the committed STS-like set): the HF config,
//! per-epoch rows that `eval` reproduces, HF pipeline-shaped scores for
//! texts and pairs, and clear errors.

mod common;

use std::path::{Path, PathBuf};

use common::{lmkit, lmkit_stdin, tmpdir};
use serde_json::{json, Value};

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

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn fixture(case: &str) -> String {
    root()
        .join("tests/fixtures")
        .join(case)
        .display()
        .to_string()
}

/// The first `n` rows of a committed regression file, into `dir`.
fn head(name: &str, n: usize, dir: &Path) -> String {
    let text = std::fs::read_to_string(root().join("tests/data/regression").join(name)).unwrap();
    let p = dir.join(name);
    let rows: Vec<&str> = text.lines().take(n).collect();
    std::fs::write(&p, rows.join("\n") + "\n").unwrap();
    p.display().to_string()
}

#[test]
fn finetune_regression_then_eval_and_classify() {
    let dir = tmpdir("regression");
    let train = head("replaced.train.jsonl", 8, &dir);
    let eval = head("replaced.eval.jsonl", 6, &dir);
    let out = dir.join("out");
    let out_s = out.to_str().unwrap();
    // Two steps from a bare BertModel: a new one-output head.
    let summary: Value = serde_json::from_str(&ok(&[
        "finetune",
        "--task",
        "regression",
        "--model",
        &fixture("bert-tiny-bare"),
        "--train",
        &train,
        "--eval",
        &eval,
        "--output",
        out_s,
        "--epochs",
        "1",
        "--batch-size",
        "4",
        "--lr",
        "1e-3",
        "--json",
    ]))
    .unwrap();
    assert_eq!(summary["steps"], 2);
    let last = &summary["eval"];
    for k in ["eval_loss", "eval_pearson", "eval_spearmanr"] {
        assert!(last[k].is_f64(), "{k}: {last}");
    }
    assert_eq!(last["eval_examples"], 6);
    let cfg: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("config.json")).unwrap()).unwrap();
    assert_eq!(
        cfg["architectures"],
        json!(["BertForSequenceClassification"])
    );
    assert_eq!(cfg["problem_type"], "regression");
    assert_eq!(cfg["id2label"], json!({"0": "LABEL_0"}));
    let metrics = std::fs::read_to_string(out.join("metrics.jsonl")).unwrap();
    assert_eq!(
        metrics
            .lines()
            .filter(|l| l.contains("eval_pearson"))
            .count(),
        1
    );

    // `eval --task regression` reproduces the epoch's row.
    let preds = dir.join("preds.jsonl");
    let ev: Value = serde_json::from_str(&ok(&[
        "eval",
        "--task",
        "regression",
        "--model",
        out_s,
        "--data",
        &eval,
        "--json",
        "--predictions",
        preds.to_str().unwrap(),
    ]))
    .unwrap();
    assert_eq!(ev["task"], "regression");
    assert_eq!(ev["examples"], 6);
    for (k, e) in [
        ("loss", "eval_loss"),
        ("pearson", "eval_pearson"),
        ("spearmanr", "eval_spearmanr"),
    ] {
        let (a, b) = (ev[k].as_f64().unwrap(), last[e].as_f64().unwrap());
        assert!((a - b).abs() < 1e-9, "{k}: eval {a} vs finetune {b}");
    }
    let text = ok(&[
        "eval",
        "--task",
        "regression",
        "--model",
        out_s,
        "--data",
        &eval,
    ]);
    assert!(
        text.contains("pearson ") && text.contains("spearmanr ") && text.contains("loss "),
        "{text}"
    );
    let p: Vec<Value> = std::fs::read_to_string(&preds)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(p.len(), 6);

    // `classify` on the pairs: HF's pipeline shape, the same scores.
    let rows = std::fs::read_to_string(&eval).unwrap();
    let (code, stdout, stderr) = lmkit_stdin(
        &[
            "classify",
            "--model",
            out_s,
            "--jsonl",
            "--json",
            "--truncate",
        ],
        rows.as_bytes(),
    );
    assert_eq!(code, Some(0), "{stderr}");
    let got: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(got.len(), 6);
    for (g, w) in got.iter().zip(&p) {
        assert_eq!(g["label"], "LABEL_0");
        let (a, b) = (g["score"].as_f64().unwrap(), w["score"].as_f64().unwrap());
        assert!((a - b).abs() < 1e-5, "classify {a} vs eval {b}");
    }
    // A single text too: `LABEL_0<TAB>score`.
    let (code, stdout, _) = lmkit_stdin(&["classify", "--model", out_s], b"a short text\n");
    assert_eq!(code, Some(0));
    assert!(stdout.starts_with("LABEL_0\t"), "{stdout}");

    // Clear errors: a class label file, a classifier for regression, and
    // regression scoring of a classifier.
    let bad = dir.join("bad.jsonl");
    std::fs::write(&bad, "{\"text\": \"a b\", \"label\": \"high\"}\n").unwrap();
    let err = fails(&[
        "finetune",
        "--task",
        "regression",
        "--model",
        &fixture("bert-tiny-bare"),
        "--train",
        bad.to_str().unwrap(),
        "--output",
        dir.join("o2").to_str().unwrap(),
    ]);
    assert!(
        err.contains(
            "bad.jsonl:1: field `label` must be a number (a regression target), found a string"
        ),
        "{err}"
    );
    let err = fails(&[
        "eval",
        "--task",
        "regression",
        "--model",
        &fixture("bert-tiny-classify"),
        "--data",
        &eval,
    ]);
    assert!(
        err.contains("--task regression needs a regression model"),
        "{err}"
    );
    let err = fails(&[
        "eval", "--task", "classify", "--model", out_s, "--data", &eval,
    ]);
    assert!(err.contains("--task regression"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}
