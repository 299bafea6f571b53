//! `lmkit finetune`, `lmkit eval` and `lmkit pretrain --arch bert` end to
//! end on tiny models: outputs that `lmkit classify` / `qa` load, metrics
//! that `lmkit eval` reproduces, and clear errors on bad input.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{byte_tokenizer, lmkit, tmpdir};

fn ok(args: &[&str]) -> String {
    let o = lmkit(args);
    assert!(
        o.status.success(),
        "lmkit {args:?} failed:\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

/// `ok` with stderr too (the tests capture it: not a terminal).
fn ok_with_log(args: &[&str]) -> (String, String) {
    let o = lmkit(args);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "lmkit {args:?} failed:\n{err}");
    (String::from_utf8(o.stdout).unwrap(), err)
}

fn fails(args: &[&str]) -> String {
    let o = lmkit(args);
    assert!(!o.status.success(), "lmkit {args:?} should fail");
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// `lmkit eval --task classify`, expected to fail: its stderr.
fn eval_classify_fails(model: &str, data: &str) -> String {
    fails(&[
        "eval", "--task", "classify", "--model", model, "--data", data,
    ])
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

fn s(p: &Path) -> String {
    p.display().to_string()
}

/// Animal vs place sentences over the tiny fixture vocabulary.
fn rows(n: usize, offset: usize) -> String {
    let animals = ["dog", "cat", "bird"];
    let places = ["paris", "france", "london", "england"];
    let filler = ["the", "a", "was", "very", "old", "big"];
    (0..n)
        .map(|i| {
            let j = i + offset;
            let (w, label) = if i % 2 == 0 {
                (animals[j % 3], "animal")
            } else {
                (places[j % 4], "place")
            };
            // Fillers depend on the pair index only, so both labels see them all.
            format!(
                "{{\"text\": \"{} {w} {} {w}\", \"label\": \"{label}\"}}\n",
                filler[(j / 2) % 6],
                filler[(j / 12) % 6]
            )
        })
        .collect()
}

#[test]
fn finetune_classify_then_eval_and_classify() {
    let dir = tmpdir("cls");
    let (train, eval, out) = (
        dir.join("train.jsonl"),
        dir.join("eval.jsonl"),
        dir.join("out"),
    );
    std::fs::write(&train, rows(48, 0)).unwrap();
    std::fs::write(&eval, rows(24, 7)).unwrap();
    let (summary, log) = ok_with_log(&[
        "finetune",
        "--task",
        "classify",
        "--model",
        &fixture("bert-tiny-bare"),
        "--train",
        &s(&train),
        "--eval",
        &s(&eval),
        "--output",
        &s(&out),
        "--epochs",
        "5",
        "--batch-size",
        "8",
        "--lr",
        "3e-3",
        "--max-seq-len",
        "16",
        "--json",
    ]);
    let j: serde_json::Value = serde_json::from_str(summary.trim()).unwrap();
    assert_eq!(j["steps"], 30);
    // Not on a terminal: the header and every epoch's evaluation are still
    // logged, as timestamped lines, and no empty bar is drawn.
    assert!(
        log.contains("48 training / 24 eval items, 30 steps"),
        "{log}"
    );
    for e in 1..=5 {
        assert!(log.contains(&format!("] epoch {e}: ")), "epoch {e}: {log}");
    }
    assert!(!log.contains("0/0"), "{log}");
    let acc = j["eval"]["eval_accuracy"].as_f64().unwrap();
    assert!(acc >= 0.9, "{summary}");
    // lmkit eval reproduces the last epoch's metrics from the saved checkpoint.
    let preds = dir.join("preds.jsonl");
    let e = ok(&[
        "eval",
        "--task",
        "classify",
        "--model",
        &s(&out),
        "--data",
        &s(&eval),
        "--json",
        "--max-seq-len",
        "16",
        "--predictions",
        &s(&preds),
    ]);
    let e: serde_json::Value = serde_json::from_str(e.trim()).unwrap();
    assert_eq!(e["accuracy"].as_f64().unwrap(), acc);
    assert_eq!(e["f1"], j["eval"]["eval_f1"]);
    assert_eq!(std::fs::read_to_string(&preds).unwrap().lines().count(), 24);
    // `--predictions -`: the same rows on stdout, the metrics on stderr; an
    // existing file is refused before the evaluation runs.
    let args = |p: &str| -> Vec<String> {
        [
            "eval",
            "--task",
            "classify",
            "--model",
            &s(&out),
            "--data",
            &s(&eval),
            "--json",
            "--max-seq-len",
            "16",
            "--predictions",
            p,
        ]
        .map(String::from)
        .to_vec()
    };
    let a: Vec<String> = args("-");
    let (stdout, log) = ok_with_log(&a.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(stdout, std::fs::read_to_string(&preds).unwrap());
    let m: serde_json::Value = serde_json::from_str(log.trim()).unwrap();
    assert_eq!(m, e);
    let a: Vec<String> = args(&s(&preds));
    let err = fails(&a.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(err.contains("preds.jsonl exists"), "{err}");
    // lmkit classify loads it.
    let mut child = Command::new(env!("CARGO_BIN_EXE_lmkit"))
        .args(["classify", "--model", &s(&out)])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"was cat old cat\nvery london the london\n")
        .unwrap();
    let o = child.wait_with_output().unwrap();
    let text = String::from_utf8(o.stdout).unwrap();
    let labels: Vec<&str> = text
        .lines()
        .map(|l| l.split('\t').next().unwrap())
        .collect();
    assert_eq!(labels, ["animal", "place"], "{text}");

    // Bad input: unknown label at eval, malformed row, wrong architecture.
    let bad = dir.join("bad.jsonl");
    std::fs::write(
        &bad,
        "{\"text\": \"the dog\", \"label\": \"animal\"}\n{\"text\": \"x\", \"label\": \"plant\"}\n",
    )
    .unwrap();
    let err = eval_classify_fails(&s(&out), &s(&bad));
    assert!(
        err.contains("bad.jsonl:2: unknown label \"plant\""),
        "{err}"
    );
    std::fs::write(
        &bad,
        "{\"text\": \"the dog\", \"label\": \"animal\"}\n{\"text\": \"x\" \"label\": 1}\n",
    )
    .unwrap();
    let err = eval_classify_fails(&s(&out), &s(&bad));
    assert!(err.contains("bad.jsonl:2: invalid JSON"), "{err}");
    let err = eval_classify_fails(&fixture("bert-tiny-bare"), &s(&eval));
    assert!(err.contains("no sequence-classification head"), "{err}");
    let err = fails(&[
        "eval",
        "--task",
        "lambada",
        "--model",
        &s(&out),
        "--data",
        &s(&eval),
    ]);
    assert!(
        err.contains("needs a GPT-2 checkpoint") && err.contains("BERT"),
        "{err}"
    );
    // classify takes both families (GPT2ForSequenceClassification); qa is BERT's.
    let err = fails(&[
        "finetune",
        "--task",
        "qa",
        "--model",
        &fixture("gpt2-tiny"),
        "--train",
        &s(&train),
        "--output",
        &s(&dir.join("o2")),
    ]);
    assert!(err.contains("needs a BERT checkpoint"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn finetune_qa_then_eval_squad_and_qa() {
    let dir = tmpdir("qa");
    let subjects = ["the old man", "a woman", "the king", "the child"];
    let objects = ["the river", "a house", "the sea", "a tree"];
    let mut paras = Vec::new();
    for i in 0..32 {
        let (sub, obj) = (subjects[i % 4], objects[(i / 4) % 4]);
        let ctx = format!("it was a long day . {sub} saw {obj} .");
        let start = ctx.find(sub).unwrap();
        paras.push(format!(
            "{{\"context\": \"{ctx}\", \"qas\": [{{\"id\": \"q{i}\", \"question\": \"who saw {obj}\", \"answers\": [{{\"text\": \"{sub}\", \"answer_start\": {start}}}]}}]}}"
        ));
    }
    let squad = format!(
        "{{\"version\": \"1.1\", \"data\": [{{\"title\": \"t\", \"paragraphs\": [{}]}}]}}",
        paras.join(",")
    );
    let data = dir.join("squad.json");
    std::fs::write(&data, squad).unwrap();
    let out = dir.join("out");
    let summary = ok(&[
        "finetune",
        "--task",
        "qa",
        "--model",
        &fixture("bert-tiny-pretraining"),
        "--train",
        &s(&data),
        "--eval",
        &s(&data),
        "--output",
        &s(&out),
        "--epochs",
        "6",
        "--batch-size",
        "8",
        "--lr",
        "3e-3",
        "--max-seq-len",
        "32",
        "--doc-stride",
        "8",
        "--json",
    ]);
    let j: serde_json::Value = serde_json::from_str(summary.trim()).unwrap();
    let f1 = j["eval"]["eval_f1"].as_f64().unwrap();
    assert!(f1 > 80.0, "{summary}");
    let e = ok(&[
        "eval",
        "--task",
        "squad",
        "--model",
        &s(&out),
        "--data",
        &s(&data),
        "--json",
        "--max-seq-len",
        "32",
        "--doc-stride",
        "8",
    ]);
    let e: serde_json::Value = serde_json::from_str(e.trim()).unwrap();
    assert_eq!(e["f1"].as_f64().unwrap(), f1);
    assert_eq!(e["examples"], 32);
    let ctx = dir.join("ctx.txt");
    std::fs::write(&ctx, "it was a long day . the king saw a tree .").unwrap();
    let a = ok(&[
        "qa",
        "--model",
        &s(&out),
        "--question",
        "who saw a tree",
        "--context",
        &s(&ctx),
    ]);
    assert_eq!(a.trim(), "the king");
    // Malformed SQuAD: the entry is named.
    std::fs::write(&data, "{\"data\": [{\"paragraphs\": [{\"context\": \"x\", \"qas\": [{\"id\": \"z\", \"answers\": []}]}]}]}").unwrap();
    let err = fails(&[
        "eval",
        "--task",
        "squad",
        "--model",
        &s(&out),
        "--data",
        &s(&data),
    ]);
    assert!(
        err.contains("data[0].paragraphs[0].qas[0] (id \"z\"): missing field `question`"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A tiny GPT-2 over bytes (vocab.json of the 256 byte symbols + <|endoftext|>, no merges).
fn byte_gpt2(dir: &Path) -> PathBuf {
    let tok = byte_tokenizer(dir);
    let text: String = (0..300)
        .map(|i| format!("Line {i}: the quick brown fox jumps over the lazy dog.\n"))
        .collect();
    let corpus = dir.join("corpus.txt");
    std::fs::write(&corpus, text).unwrap();
    let out = dir.join("gpt2");
    let (_, log) = ok_with_log(&[
        "pretrain",
        "--tokenizer",
        &s(&tok),
        "--data",
        &s(&corpus),
        "--output",
        &s(&out),
        "--n-layer",
        "1",
        "--n-embd",
        "32",
        "--n-head",
        "2",
        "--seq-len",
        "64",
        "--batch-size",
        "4",
        "--max-steps",
        "20",
        "--lr",
        "3e-3",
        "--eval-every",
        "0",
        "--sample-every",
        "0",
        "--overlap-filter",
    ]);
    assert!(
        out.join("overlap.bloom").is_file(),
        "--overlap-filter writes the filter"
    );
    // A summary line ends the run, also when stderr is a log.
    assert!(log.contains("done at step 20 after "), "{log}");
    assert!(log.contains("final model: "), "{log}");
    out
}

#[test]
fn gpt2_eval_tasks_and_lm_finetuning() {
    let dir = tmpdir("gpt2");
    let model = byte_gpt2(&dir);
    let lam = dir.join("lambada.jsonl");
    std::fs::write(
        &lam,
        "{\"text\": \"the quick brown fox jumps over the lazy dog\"}\n{\"text\": \"Line 7: the quick brown fox\"}\n",
    )
    .unwrap();
    let e = ok(&[
        "eval",
        "--task",
        "lambada",
        "--model",
        &s(&model),
        "--data",
        &s(&lam),
        "--json",
    ]);
    let e: serde_json::Value = serde_json::from_str(e.trim()).unwrap();
    assert_eq!(e["count"], 2);
    assert!(e["perplexity"].as_f64().unwrap() > 1.0);
    // --overlap: all items and those not in the training text, side by
    // side. The first passage is training text; the second is too short for
    // an 8-gram; the third is new.
    let lam3 = dir.join("lambada3.jsonl");
    std::fs::write(
        &lam3,
        "{\"text\": \"the quick brown fox jumps over the lazy dog\"}\n{\"text\": \"Line 7: the quick brown fox\"}\n\
         {\"text\": \"a slow green turtle walks under the busy bridge today\"}\n",
    )
    .unwrap();
    let e = ok(&[
        "eval",
        "--task",
        "lambada",
        "--model",
        &s(&model),
        "--data",
        &s(&lam3),
        "--overlap",
        &s(&model.join("overlap.bloom")),
        "--json",
    ]);
    let e: serde_json::Value = serde_json::from_str(e.trim()).unwrap();
    assert_eq!(e["all"]["count"], 3, "{e}");
    assert_eq!(e["clean"]["count"], 2, "{e}");
    assert_eq!(
        (
            e["overlap"]["items"].clone(),
            e["overlap"]["overlapping"].clone()
        ),
        (serde_json::json!(3), serde_json::json!(1)),
        "{e}"
    );
    let sum = dir.join("sum.jsonl");
    std::fs::write(&sum, "{\"article\": \"the quick brown fox jumps over the lazy dog.\", \"summary\": \"a fox jumps.\"}\n").unwrap();
    let e = ok(&[
        "eval",
        "--task",
        "summarize",
        "--model",
        &s(&model),
        "--data",
        &s(&sum),
        "--json",
        "--greedy",
        "--max-new-tokens",
        "12",
    ]);
    let e: serde_json::Value = serde_json::from_str(e.trim()).unwrap();
    assert_eq!(e["decoding"], "greedy");
    assert!(e["rouge1"].as_f64().unwrap() >= 0.0 && e.get("rougeL").is_some());
    let text = dir.join("held.txt");
    std::fs::write(
        &text,
        "Line 9000: the quick brown fox jumps over the lazy dog.\nLine 9001: the quick brown fox jumps over the lazy dog.\n",
    )
    .unwrap();
    let p = ok(&[
        "eval",
        "--task",
        "perplexity",
        "--model",
        &s(&model),
        "--data",
        &s(&text),
        "--json",
    ]);
    let p: serde_json::Value = serde_json::from_str(p.trim()).unwrap();
    assert!(p["perplexity"].as_f64().unwrap() < 257.0, "{p}");
    // LM fine-tuning writes a GPT2LMHeadModel that `lmkit generate` loads.
    let out = dir.join("ft");
    ok(&[
        "finetune",
        "--task",
        "lm",
        "--model",
        &s(&model),
        "--train",
        &s(&dir.join("corpus.txt")),
        "--eval",
        &s(&text),
        "--output",
        &s(&out),
        "--epochs",
        "1",
        "--batch-size",
        "4",
        "--max-seq-len",
        "64",
        "--max-steps",
        "5",
        "--lr",
        "1e-3",
    ]);
    let g = ok(&[
        "generate",
        "--model",
        &s(&out),
        "--prompt",
        "Line",
        "--max-new-tokens",
        "5",
        "--greedy",
    ]);
    assert!(!g.is_empty());
    let err = fails(&[
        "eval",
        "--task",
        "squad",
        "--model",
        &s(&model),
        "--data",
        &s(&lam),
    ]);
    assert!(
        err.contains("qa needs a BERT checkpoint") && err.contains("zero-shot-qa"),
        "{err}"
    );
    let bad = dir.join("bad.jsonl");
    std::fs::write(&bad, "{\"text\": \"ok then fine\"}\n{\"txt\": \"oops\"}\n").unwrap();
    let err = fails(&[
        "eval",
        "--task",
        "lambada",
        "--model",
        &s(&model),
        "--data",
        &s(&bad),
    ]);
    assert!(err.contains("bad.jsonl:2: missing field `text`"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn pretrain_bert_cli() {
    let dir = tmpdir("bert");
    let vocab = root().join("tests/fixtures/bert-tiny-bare");
    let docs: Vec<String> = (0..12)
        .map(|d| {
            (0..8)
                .map(|k| {
                    format!(
                        "the {} saw the {} by the river .",
                        ["man", "king", "dog", "cat"][(d + k) % 4],
                        ["house", "tree", "sea"][k % 3]
                    )
                })
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect();
    let data = dir.join("docs.txt");
    std::fs::write(&data, docs.join("\n\u{c}\n")).unwrap();
    let out = dir.join("out");
    let args = [
        "pretrain",
        "--arch",
        "bert",
        "--tokenizer",
        &s(&vocab),
        "--data",
        &s(&data),
        "--output",
        &s(&out),
        "--n-layer",
        "1",
        "--n-embd",
        "32",
        "--n-head",
        "2",
        "--seq-len",
        "32",
        "--batch-size",
        "4",
        "--max-steps",
        "6",
        "--eval-every",
        "3",
        "--val-fraction",
        "0.2",
        "--whole-word-masking",
    ];
    ok(&args);
    let cfg = std::fs::read_to_string(out.join("config.json")).unwrap();
    assert!(cfg.contains("BertForPreTraining"), "{cfg}");
    let m = std::fs::read_to_string(out.join("metrics.jsonl")).unwrap();
    assert!(
        m.contains("\"mlm_loss\"")
            && m.contains("\"nsp_accuracy\"")
            && m.contains("\"val_nsp_loss\"")
    );
    let err = fails(&[
        "pretrain",
        "--arch",
        "bert",
        "--tokenizer",
        &s(&vocab),
        "--data",
        &s(&data),
        "--output",
        &s(&dir.join("o2")),
        "--preset",
        "tiny",
        "--sample-every",
        "5",
    ]);
    assert!(err.contains("GPT-2 only"), "{err}");
    let err = fails(&[
        "pretrain",
        "--arch",
        "bert",
        "--tokenizer",
        &root().join("assets/gpt2").display().to_string(),
        "--data",
        &s(&data),
        "--output",
        &s(&dir.join("o3")),
        "--preset",
        "tiny",
    ]);
    assert!(err.contains("WordPiece"), "{err}");

    // JSONL rows with the text in another field: --text-field, kept by --resume.
    let rows = dir.join("docs.jsonl");
    let jsonl: String = docs
        .iter()
        .map(|d| serde_json::json!({ "body": d }).to_string() + "\n")
        .collect();
    std::fs::write(&rows, jsonl).unwrap();
    let (out4, rows) = (dir.join("o4"), s(&rows));
    let base = [
        "pretrain",
        "--arch",
        "bert",
        "--tokenizer",
        &s(&vocab),
        "--output",
        &s(&out4),
        "--preset",
        "tiny",
        "--seq-len",
        "32",
        "--batch-size",
        "2",
        "--val-fraction",
        "0",
    ];
    let err = fails(&[&base[..], &["--data", &rows, "--max-steps", "1"]].concat());
    assert!(err.contains("docs.jsonl:1: missing field `text`"), "{err}");
    let o4 = [
        &base[..],
        &["--data", &rows, "--text-field", "body", "--max-steps", "1"],
    ]
    .concat();
    ok(&o4);
    ok(&[&base[..], &["--resume", "--max-steps", "2"]].concat());
    let m = std::fs::read_to_string(out4.join("metrics.jsonl")).unwrap();
    assert!(m.contains("\"step\":2"), "{m}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `finetune --task token-classify` writes a BertForTokenClassification that
/// `eval --task token-classify` scores as the last metrics row did and that
/// `lmkit ner` tags with the HF pipeline's keys.
#[test]
fn token_classify_finetune_eval_and_ner() {
    let dir = tmpdir("tagging");
    let data = dir.join("d.conll");
    std::fs::write(
        &data,
        "-DOCSTART- -X- O\n\nthe DT O\nking NN B-PER\nwalked VB O\nto TO O\nparis NNP B-LOC\n\n\
         she O\nfound O\nlondon B-LOC\n\nthe O\nqueen B-PER\nof I-PER\nengland I-PER\n",
    )
    .unwrap();
    let model = root().join("tests/fixtures/bert-tiny-token-classify");
    let (model, data_s) = (model.to_str().unwrap(), data.to_str().unwrap());
    let out = dir.join("out");
    let out_s = out.to_str().unwrap();
    let summary: serde_json::Value = serde_json::from_str(&ok(&[
        "finetune",
        "--task",
        "token-classify",
        "--model",
        model,
        "--train",
        data_s,
        "--eval",
        data_s,
        "--output",
        out_s,
        "--epochs",
        "2",
        "--batch-size",
        "2",
        "--lr",
        "1e-3",
        "--json",
    ]))
    .unwrap();
    assert_eq!(summary["steps"], 4);
    let cfg = std::fs::read_to_string(out.join("config.json")).unwrap();
    assert!(cfg.contains("BertForTokenClassification"), "{cfg}");
    let last = &summary["eval"];
    let ev: serde_json::Value = serde_json::from_str(&ok(&[
        "eval",
        "--task",
        "token-classify",
        "--model",
        out_s,
        "--data",
        data_s,
        "--json",
    ]))
    .unwrap();
    for (k, e) in [
        ("f1", "eval_f1"),
        ("precision", "eval_precision"),
        ("loss", "eval_loss"),
    ] {
        let (a, b) = (ev[k].as_f64().unwrap(), last[e].as_f64().unwrap());
        assert!((a - b).abs() < 1e-9, "{k}: eval {a} vs finetune {b}");
    }
    let tagged = ok(&["ner", "--model", out_s, "--input", data_s, "--json"]);
    let first: serde_json::Value = serde_json::from_str(tagged.lines().next().unwrap()).unwrap();
    for e in first.as_array().unwrap() {
        for k in ["entity_group", "score", "word", "start", "end"] {
            assert!(e.get(k).is_some(), "{e}");
        }
    }
    let err = fails(&[
        "ner",
        "--input",
        data_s,
        "--model",
        root()
            .join("tests/fixtures/bert-tiny-classify")
            .to_str()
            .unwrap(),
    ]);
    assert!(err.contains("token-classification head"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// metrics.jsonl rows as text, without the wall-clock fields.
fn metric_rows(out: &Path) -> Vec<String> {
    std::fs::read_to_string(out.join("metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| {
            let mut v: serde_json::Value = serde_json::from_str(l).unwrap();
            let m = v.as_object_mut().unwrap();
            for k in ["tokens_per_s", "elapsed_s", "examples_per_s"] {
                m.remove(k);
            }
            v.to_string()
        })
        .collect()
}

/// Issue 16: fine-tuning checkpoints like pretraining's. A run stopped by
/// --max-steps and continued by the same command plus --resume writes the
/// metrics rows of a run never stopped (and the same model); a flag that
/// contradicts the checkpoint is named; Ctrl-C (SIGINT) finishes the step,
/// saves a checkpoint, says how to resume and exits 130, and the resume
/// continues from there.
#[test]
fn finetune_resume_and_ctrl_c() {
    let dir = tmpdir("ft-resume");
    let (train, eval) = (dir.join("train.jsonl"), dir.join("eval.jsonl"));
    std::fs::write(&train, rows(48, 0)).unwrap();
    std::fs::write(&eval, rows(24, 7)).unwrap();
    let model = fixture("bert-tiny-bare");
    let (train, eval) = (s(&train), s(&eval));
    let cmd = |out: &Path, epochs: &str, extra: &[&str]| -> Vec<String> {
        let mut a: Vec<String> = [
            "finetune",
            "--task",
            "classify",
            "--model",
            &model,
            "--train",
            &train,
            "--eval",
            &eval,
            "--output",
            &s(out),
            "--epochs",
            epochs,
            "--batch-size",
            "8",
            "--lr",
            "3e-3",
            "--max-seq-len",
            "16",
        ]
        .iter()
        .map(|x| x.to_string())
        .collect();
        a.extend(extra.iter().map(|x| x.to_string()));
        a
    };
    let run = |args: Vec<String>| {
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        lmkit(&refs)
    };
    let straight = dir.join("straight");
    let o = run(cmd(&straight, "3", &[]));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // 6 steps an epoch: checkpoints at the epoch ends, the newest 2 kept.
    for (step, kept) in [(6, false), (12, true), (18, true)] {
        let d = straight.join(format!("checkpoints/step-{step:08}"));
        assert_eq!(d.is_dir(), kept, "{}", d.display());
    }
    for f in [
        "config.json",
        "model.safetensors",
        "vocab.txt",
        "optimizer.safetensors",
        "trainer_state.json",
    ] {
        assert!(
            straight.join("checkpoints/step-00000018").join(f).is_file(),
            "{f}"
        );
    }

    let split = dir.join("split");
    let o = run(cmd(&split, "3", &["--max-steps", "9"]));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // Not resumed: refused, saying how to go on.
    let o = run(cmd(&split, "3", &[]));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        o.status.code() == Some(1) && err.contains("--resume") && err.contains("--overwrite"),
        "{err}"
    );
    let mut other_lr = cmd(&split, "3", &["--resume"]);
    let at = other_lr.iter().position(|a| a == "--lr").unwrap();
    other_lr[at + 1] = "1e-3".into();
    let o = run(other_lr);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        o.status.code() == Some(1)
            && err.contains("--lr 0.001 differs from the checkpoint's 0.003"),
        "{err}"
    );
    let o = run(cmd(&split, "3", &["--resume"]));
    let log = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{log}");
    assert!(log.contains("resuming at step 9"), "{log}");
    // The same rows, plus the evaluation where --max-steps stopped.
    let mut got = metric_rows(&split);
    let at = got
        .iter()
        .position(|r| r.contains("\"eval_accuracy\"") && r.contains("\"step\":9"))
        .expect("an evaluation at step 9");
    got.remove(at);
    assert_eq!(got, metric_rows(&straight));
    assert_eq!(
        std::fs::read(split.join("model.safetensors")).unwrap(),
        std::fs::read(straight.join("model.safetensors")).unwrap()
    );

    // Ctrl-C: a long run, interrupted once it has taken a few steps.
    let sig = dir.join("sigint");
    let args = cmd(&sig, "500", &[]);
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_lmkit"))
        .args(&args)
        .env("RAYON_NUM_THREADS", "2")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = std::time::Instant::now();
    while std::fs::read_to_string(sig.join("metrics.jsonl")).map_or(0, |t| t.lines().count()) < 3 {
        assert!(t0.elapsed().as_secs() < 120, "no steps after 2 minutes");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let kill = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let o = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(130), "{err}");
    assert!(
        err.contains("continue with the same command plus --resume"),
        "{err}"
    );
    let steps = |out: &Path| -> Vec<u64> {
        metric_rows(out)
            .iter()
            .filter(|r| r.contains("\"loss\""))
            .map(|r| {
                serde_json::from_str::<serde_json::Value>(r).unwrap()["step"]
                    .as_u64()
                    .unwrap()
            })
            .collect()
    };
    let done = *steps(&sig).last().unwrap();
    assert!(done < 3000, "the run was not stopped: {done} steps");
    assert!(
        sig.join(format!("checkpoints/step-{done:08}/trainer_state.json"))
            .is_file(),
        "no checkpoint at step {done}: {err}"
    );
    // The same command plus --resume goes on from there (here for 3 steps).
    let until = (done + 3).to_string();
    let o = run(cmd(&sig, "500", &["--resume", "--max-steps", &until]));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(steps(&sig), (1..=done + 3).collect::<Vec<u64>>());
    std::fs::remove_dir_all(&dir).unwrap();
}
