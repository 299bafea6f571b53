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
}
