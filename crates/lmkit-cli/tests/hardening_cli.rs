//! The released commands as a careless user or a hostile input drives them
//! (issue 13): every case here panicked, wrapped or lost files before; now
//! each is a clear error (exit 1, no panic) or a correct result.

mod common;

use std::path::{Path, PathBuf};

use common::{byte_tokenizer, lmkit, tmpdir};

fn fixture(case: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures")
        .join(case)
        .display()
        .to_string()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Runs lmkit expecting an orderly failure: exit code 1 and no panic. Stderr.
fn refused(args: &[&str]) -> String {
    let o = lmkit(args);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(1), "lmkit {args:?}:\n{err}");
    assert!(!err.contains("panicked"), "lmkit {args:?} panicked:\n{err}");
    err
}

fn succeeds(args: &[&str]) -> String {
    let o = lmkit(args);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "lmkit {args:?}:\n{err}");
    String::from_utf8(o.stdout).unwrap()
}

/// Item 5: numeric flags at the edge of their type.
#[test]
fn huge_numeric_flags_do_not_panic() {
    let dir = tmpdir("hard-flags");
    let input = dir.join("in.txt");
    std::fs::write(&input, "the dog was very old\nparis is in france\n").unwrap();
    let max = u64::MAX.to_string();
    let out = succeeds(&[
        "classify",
        "--model",
        &fixture("bert-tiny-classify"),
        "--input",
        s(&input),
        "--batch-size",
        &max,
    ]);
    assert_eq!(out.lines().count(), 2, "{out}");
    let ctx = dir.join("ctx.txt");
    std::fs::write(&ctx, "the dog was in paris with a very old cat").unwrap();
    let out = succeeds(&[
        "qa",
        "--model",
        &fixture("bert-tiny-qa"),
        "--question",
        "where was the dog",
        "--context",
        s(&ctx),
        "--max-answer-len",
        &max,
        "--json",
    ]);
    assert!(out.contains("\"answer\""), "{out}");
}

fn rows(n: usize) -> String {
    (0..n)
        .map(|i| {
            let (t, l) = if i % 2 == 0 {
                ("the dog was old", "neg")
            } else {
                ("paris is in france", "pos")
            };
            format!("{{\"text\": \"{t}\", \"label\": \"{l}\"}}\n")
        })
        .collect()
}

/// Item 8: `finetune --output` replaced a non-empty folder (even `--model`
/// itself) without a word.
#[test]
fn finetune_refuses_to_overwrite() {
    let dir = tmpdir("hard-output");
    let train = dir.join("train.jsonl");
    std::fs::write(&train, rows(8)).unwrap();
    // A copy of the model, so writing into it would be noticed and harmless.
    let model = dir.join("model");
    std::fs::create_dir_all(&model).unwrap();
    for e in std::fs::read_dir(fixture("bert-tiny-classify")).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), model.join(e.file_name())).unwrap();
    }
    let weights = std::fs::read(model.join("model.safetensors")).unwrap();
    let args = |output: &Path, extra: &[&'static str]| -> Vec<String> {
        let mut a: Vec<String> = [
            "finetune",
            "--task",
            "classify",
            "--model",
            s(&model),
            "--train",
            s(&train),
            "--output",
            s(output),
            "--epochs",
            "1",
            "--batch-size",
            "4",
        ]
        .iter()
        .map(|x| x.to_string())
        .collect();
        a.extend(extra.iter().map(|x| x.to_string()));
        a
    };
    let run = |a: Vec<String>| -> std::process::Output {
        let r: Vec<&str> = a.iter().map(String::as_str).collect();
        lmkit(&r)
    };
    for extra in [&[][..], &["--overwrite"][..]] {
        let o = run(args(&model, extra));
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{err}");
        assert!(err.contains("input model's folder"), "{err}");
    }
    assert_eq!(
        std::fs::read(model.join("model.safetensors")).unwrap(),
        weights
    );

    let out = dir.join("out");
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(out.join("notes.txt"), "mine").unwrap();
    let o = run(args(&out, &[]));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("not empty") && err.contains("--overwrite"),
        "{err}"
    );
    assert_eq!(
        std::fs::read_to_string(out.join("notes.txt")).unwrap(),
        "mine"
    );
    assert!(!out.join("model.safetensors").exists());
    let o = run(args(&out, &["--overwrite"]));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(out.join("model.safetensors").exists());
}

/// Item 10: `--lr -1` ran gradient ascent.
#[test]
fn pretrain_refuses_a_negative_learning_rate() {
    let dir = tmpdir("hard-lr");
    let tok = byte_tokenizer(&dir);
    let data = dir.join("data.txt");
    std::fs::write(&data, "some text to train on.\n".repeat(50)).unwrap();
    let out: PathBuf = dir.join("run");
    for lr in ["-1", "0", "NaN", "inf"] {
        let err = refused(&[
            "pretrain",
            "--tokenizer",
            s(&tok),
            "--data",
            s(&data),
            "--output",
            s(&out),
            "--n-layer",
            "1",
            "--n-embd",
            "16",
            "--n-head",
            "2",
            "--seq-len",
            "16",
            "--max-steps",
            "2",
            &format!("--lr={lr}"),
        ]);
        assert!(err.contains("`lr`") || err.contains("--lr"), "{lr}: {err}");
    }
    // --keep 0 would delete the checkpoint a resume needs (it was taken as 1).
    let err = refused(&[
        "pretrain",
        "--tokenizer",
        s(&tok),
        "--data",
        s(&data),
        "--output",
        s(&out),
        "--preset",
        "tiny",
        "--max-steps",
        "2",
        "--keep",
        "0",
    ]);
    assert!(err.contains("--keep must be at least 1"), "{err}");
}

/// A copy of a fixture model in `dir`, to be changed by the test.
fn model_copy(case: &str, dir: &Path) -> PathBuf {
    let model = dir.join(case);
    std::fs::create_dir_all(&model).unwrap();
    for e in std::fs::read_dir(fixture(case)).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), model.join(e.file_name())).unwrap();
    }
    model
}

/// Item 3: data the model cannot embed (ids past its vocabulary, a second
/// segment for a one-segment model) failed deep inside training.
#[test]
fn finetune_refuses_data_the_model_cannot_embed() {
    let dir = tmpdir("hard-embed");
    let train = dir.join("pairs.jsonl");
    let pairs: String = (0..8)
        .map(|i| {
            format!(
                "{{\"text\": \"zebra quokka\", \"text_pair\": \"the dog\", \"label\": \"{}\"}}\n",
                ["neg", "pos"][i % 2]
            )
        })
        .collect();
    std::fs::write(&train, pairs).unwrap();
    // A tokenizer with two more words than the model has embeddings.
    let big = model_copy("bert-tiny-classify", &dir.join("big"));
    std::fs::remove_file(big.join("tokenizer.json")).unwrap();
    let mut vocab = std::fs::read_to_string(big.join("vocab.txt")).unwrap();
    vocab.push_str("zebra\nquokka\n");
    std::fs::write(big.join("vocab.txt"), vocab).unwrap();
    let finetune = |model: &Path, out: &str| {
        refused(&[
            "finetune",
            "--task",
            "classify",
            "--model",
            s(model),
            "--train",
            s(&train),
            "--output",
            s(&dir.join(out)),
            "--epochs",
            "1",
        ])
    };
    let err = finetune(&big, "o1");
    assert!(
        err.contains("the tokenizer has 174 tokens but the model's vocab_size is 172"),
        "{err}"
    );
    // A one-segment model (type_vocab_size 1) given text pairs.
    let one = model_copy("bert-tiny-classify", &dir.join("one"));
    let cfg = std::fs::read_to_string(one.join("config.json")).unwrap();
    std::fs::write(
        one.join("config.json"),
        cfg.replace("\"type_vocab_size\": 2", "\"type_vocab_size\": 1"),
    )
    .unwrap();
    let err = finetune(&one, "o2");
    assert!(err.contains("type_vocab_size 1"), "{err}");
    assert!(!dir.join("o1").exists() && !dir.join("o2").exists());
    // Item 13: a zero evaluation batch is blamed on its own flag.
    let err = refused(&[
        "finetune",
        "--task",
        "classify",
        "--model",
        &fixture("bert-tiny-classify"),
        "--train",
        s(&train),
        "--output",
        s(&dir.join("o3")),
        "--eval-batch-size",
        "0",
    ]);
    assert!(err.contains("--eval-batch-size must be positive"), "{err}");
}

/// Item 13: `qa` and `eval --task squad` on a model with few positions
/// failed with their default 384-token window and 128-token overlap; the
/// defaults now follow the model, as HF's pipeline does, and an error names
/// the flags. Causes are printed once, without a backtrace.
#[test]
fn qa_windows_follow_the_model() {
    let dir = tmpdir("hard-qa");
    let squad = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/data/squad/rust_book.json");
    let out = succeeds(&[
        "eval",
        "--task",
        "squad",
        "--model",
        &fixture("bert-tiny-qa"),
        "--data",
        s(&squad),
        "--limit",
        "3",
        "--json",
    ]);
    assert!(out.contains("exact_match"), "{out}");
    let ctx = dir.join("ctx.txt");
    std::fs::write(
        &ctx,
        "the dog was in paris with a very old cat. ".repeat(10),
    )
    .unwrap();
    let o = lmkit(&[
        "qa",
        "--model",
        &fixture("bert-tiny-qa"),
        "--question",
        "where was the dog and what was it doing there with the very old cat in paris",
        "--context",
        s(&ctx),
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("--max-seq-len 32") && err.contains("--doc-stride 16"),
        "{err}"
    );
    assert!(!err.contains("backtrace"), "{err}");
    let err = refused(&[
        "qa",
        "--model",
        &fixture("bert-tiny-qa"),
        "--question",
        "where",
        "--context",
        s(&ctx),
        "--max-seq-len",
        "512",
    ]);
    assert!(err.contains("--max-seq-len 512 exceeds"), "{err}");
    // A cause whose text is already in the message is not repeated.
    let err = refused(&["tokenize", "--tokenizer", s(&dir.join("missing"))]);
    let first = err.lines().next().unwrap_or("");
    for line in err.lines().skip(1) {
        let cause = line.trim().trim_start_matches("caused by: ");
        assert!(!first.contains(cause), "printed twice:\n{err}");
    }
}

/// Items 11 and 12: BERT pretraining reads BERT's own text layout (one
/// sentence per line, a blank line between documents), and the same command
/// plus `--resume` continues it; so does `--resume` alone, without `--data`.
#[test]
fn bert_pretrain_reads_sentence_per_line_and_resumes() {
    let dir = tmpdir("hard-bert");
    let vocab = fixture("bert-tiny-bare");
    let docs: Vec<String> = (0..10)
        .map(|d| {
            (0..6)
                .map(|k| {
                    format!(
                        "the {} saw the {} by the river.",
                        ["man", "king", "dog", "cat"][(d + k) % 4],
                        ["house", "tree", "sea"][k % 3]
                    )
                })
                .collect::<Vec<_>>()
                .join("\n")
        })
        .collect();
    let data = dir.join("docs.txt");
    std::fs::write(&data, docs.join("\n\n")).unwrap();
    let out = dir.join("out");
    let cmd = |extra: &[&str]| -> Vec<String> {
        let mut a: Vec<String> = [
            "pretrain",
            "--arch",
            "bert",
            "--tokenizer",
            &vocab,
            "--data",
            s(&data),
            "--output",
            s(&out),
            "--preset",
            "tiny",
            "--n-positions",
            "32",
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
        ]
        .iter()
        .map(|x| x.to_string())
        .collect();
        a.extend(extra.iter().map(|x| x.to_string()));
        a
    };
    let run = |a: Vec<String>| {
        let r: Vec<&str> = a.iter().map(String::as_str).collect();
        lmkit(&r)
    };
    let o = run(cmd(&["--stop-after", "2"]));
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "{err}");
    // 10 documents: 8 train, 2 validation.
    assert!(err.contains("8 train / 2 val documents"), "{err}");
    let o = run(cmd(&["--stop-after", "2", "--resume"]));
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(
        o.status.success() && err.contains("resuming at step 2"),
        "{err}"
    );
    // --resume alone: the model, tokenizer and data come from the run.
    let o = lmkit(&[
        "pretrain",
        "--arch",
        "bert",
        "--output",
        s(&out),
        "--resume",
    ]);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(
        o.status.success() && err.contains("resuming at step 4"),
        "{err}"
    );
    assert!(out.join("model.safetensors").is_file());
    // Resumed as the wrong family (no --arch bert): said so.
    let err = refused(&["pretrain", "--output", s(&out), "--resume"]);
    assert!(err.contains("from BERT pretraining, not GPT-2"), "{err}");
    // A size that contradicts the checkpoint is named.
    let mut bad = cmd(&["--resume"]);
    let at = bad.iter().position(|a| a == "tiny").unwrap();
    bad[at] = "mini".into();
    let o = run(bad);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(
        o.status.code() == Some(1) && err.contains("--preset mini has n_layer 4"),
        "{err}"
    );

    // One document only: split in two, and said so.
    let one = dir.join("one.txt");
    std::fs::write(&one, docs[0].repeat(3)).unwrap();
    let o = lmkit(&[
        "pretrain",
        "--arch",
        "bert",
        "--tokenizer",
        &vocab,
        "--data",
        s(&one),
        "--output",
        s(&dir.join("one")),
        "--preset",
        "tiny",
        "--n-positions",
        "32",
        "--seq-len",
        "32",
        "--batch-size",
        "2",
        "--max-steps",
        "1",
    ]);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(
        o.status.success() && err.contains("split in two halves"),
        "{err}"
    );
}
