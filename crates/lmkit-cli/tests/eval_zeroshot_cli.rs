//! `lmkit eval --task cbt|translate|qa` end to end on the `gpt2-zeroshot`
//! fixture: the metrics equal HF's (the fixture's reference.json, written by
//! `scripts/make_fixtures.py --only gpt2-zeroshot`), --json, --limit,
//! --predictions, --reverse, --targets, --overlap, and clear errors.

mod common;

use std::path::{Path, PathBuf};

use common::{lmkit, tmpdir};
use serde_json::Value;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn p(rel: &str) -> String {
    root().join(rel).to_str().unwrap().to_string()
}

fn model() -> String {
    p("tests/fixtures/gpt2-zeroshot")
}

fn reference() -> Value {
    let text = std::fs::read_to_string(root().join("tests/fixtures/gpt2-zeroshot/reference.json"))
        .unwrap();
    serde_json::from_str::<Value>(&text).unwrap()["zeroshot"].clone()
}

fn eval(task: &str, data: &str, extra: &[&str]) -> Value {
    let m = model();
    let mut args = vec![
        "eval", "--task", task, "--model", &m, "--data", data, "--json",
    ];
    args.extend_from_slice(extra);
    let o = lmkit(&args);
    assert!(
        o.status.success(),
        "lmkit {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).unwrap()
}

fn refused(task: &str, data: &str, extra: &[&str]) -> String {
    let m = model();
    let mut args = vec!["eval", "--task", task, "--model", &m, "--data", data];
    args.extend_from_slice(extra);
    let o = lmkit(&args);
    assert_eq!(o.status.code(), Some(1), "lmkit {args:?} should fail");
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(!err.contains("panicked"), "{err}");
    err
}

#[test]
fn cbt_accuracy_and_predictions() {
    let r = reference();
    let want: Vec<bool> = r["cbt"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["correct"].as_bool().unwrap())
        .collect();
    let dir = tmpdir("zs-cbt");
    let preds = dir.join("preds.jsonl");
    let data = p("tests/data/cbt/tiny_NE.txt");
    let e = eval("cbt", &data, &["--predictions", preds.to_str().unwrap()]);
    let n_right = want.iter().filter(|&&c| c).count();
    assert_eq!(e["count"], want.len(), "{e}");
    assert_eq!(e["correct"], n_right, "{e}");
    assert_eq!(
        e["accuracy"].as_f64().unwrap(),
        n_right as f64 / want.len() as f64
    );
    let rows: Vec<Value> = std::fs::read_to_string(&preds)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let got: Vec<bool> = rows
        .iter()
        .map(|r| r["correct"].as_bool().unwrap())
        .collect();
    assert_eq!(got, want);
    assert_eq!(rows[0]["scores"].as_array().unwrap().len(), 10);
    let e = eval("cbt", &data, &["--limit", "2"]);
    assert_eq!(e["count"], 2);

    // A bad query line: the error names the file and line.
    let bad = dir.join("bad.txt");
    std::fs::write(&bad, "1 A dog .\n2 The XXXXX ran .\tcat\t\tdog|fox\n").unwrap();
    let err = refused("cbt", bad.to_str().unwrap(), &[]);
    assert!(
        err.contains("bad.txt:2: the answer `cat` is not among"),
        "{err}"
    );
}

#[test]
fn translate_bleu_both_directions_and_inputs() {
    let r = reference();
    let data = p("tests/data/translate/en_fr.jsonl");
    let base = ["--shots", "2", "--max-new-tokens", "16"];
    let e = eval("translate", &data, &base);
    let want = &r["translate"]["en-fr"];
    assert!((e["bleu"].as_f64().unwrap() - want["bleu"].as_f64().unwrap()).abs() < 0.01);
    assert_eq!(e["sys_len"], want["sys_len"], "{e}");
    assert_eq!(e["ref_len"], want["ref_len"], "{e}");
    assert_eq!(e["count"], 6);
    // The same pairs as two aligned text files give the same report.
    let mut text_args = base.to_vec();
    let fr = p("tests/data/translate/fr.txt");
    text_args.extend(["--targets", &fr]);
    assert_eq!(
        eval("translate", &p("tests/data/translate/en.txt"), &text_args),
        e
    );
    let mut rev = base.to_vec();
    rev.push("--reverse");
    let e = eval("translate", &data, &rev);
    let want = &r["translate"]["fr-en"];
    assert_eq!(e["sys_len"], want["sys_len"], "{e}");
    assert_eq!(e["ref_len"], want["ref_len"], "{e}");
    assert_eq!(e["direction"], "target-source");
    let mut lim = base.to_vec();
    lim.extend(["--limit", "3"]);
    assert_eq!(eval("translate", &data, &lim)["count"], 3);
    // Files that are not aligned, and examples that leave nothing.
    let dir = tmpdir("zs-tr");
    let short = dir.join("short.txt");
    std::fs::write(&short, "un\n").unwrap();
    let err = refused(
        "translate",
        &p("tests/data/translate/en.txt"),
        &["--targets", short.to_str().unwrap()],
    );
    assert!(err.contains("aligned line by line"), "{err}");
    let err = refused("translate", &data, &["--shots", "8"]);
    assert!(err.contains("leave none"), "{err}");
}

#[test]
fn qa_scores_and_overlap() {
    let r = reference();
    let data = p("tests/data/qa/nq_tiny.jsonl");
    let dir = tmpdir("zs-qa");
    let preds = dir.join("qa.jsonl");
    let e = eval(
        "zero-shot-qa",
        &data,
        &[
            "--shots",
            "2",
            "--max-new-tokens",
            "16",
            "--predictions",
            preds.to_str().unwrap(),
        ],
    );
    let answers: Vec<String> = std::fs::read_to_string(&preds)
        .unwrap()
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["answer"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    let want: Vec<&str> = r["qa"]["nq"]["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["answer"].as_str().unwrap())
        .collect();
    assert_eq!(answers, want);
    assert_eq!(e["count"], 4);
    let coqa = p("tests/data/qa/coqa_tiny.jsonl");
    let e = eval("zero-shot-qa", &coqa, &["--max-new-tokens", "16"]);
    assert_eq!(e["count"], 6);
    // --overlap: the first story is in the "training text".
    let train = dir.join("train.txt");
    std::fs::write(
        &train,
        "Anna had a little red boat. Every morning she sailed it on the pond behind the house. \
         One windy day the boat floated away, and her brother Karl brought it back.\n",
    )
    .unwrap();
    let bloom = dir.join("f.bloom");
    let o = lmkit(&[
        "overlap",
        "--train",
        train.to_str().unwrap(),
        "--save-filter",
        bloom.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let e = eval(
        "zero-shot-qa",
        &coqa,
        &[
            "--max-new-tokens",
            "4",
            "--overlap",
            bloom.to_str().unwrap(),
        ],
    );
    assert_eq!(e["all"]["count"], 6, "{e}");
    assert_eq!(e["clean"]["count"], 3, "{e}");
    // A row without answers names its line.
    let bad = dir.join("bad.jsonl");
    std::fs::write(&bad, "{\"question\": \"q\", \"answers\": []}\n").unwrap();
    let err = refused("zero-shot-qa", bad.to_str().unwrap(), &[]);
    assert!(err.contains("bad.jsonl:1: `answers` is empty"), "{err}");
}
