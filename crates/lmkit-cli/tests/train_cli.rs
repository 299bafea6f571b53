//! `lmkit pretrain` / `lmkit plot` end to end on a tiny model: outputs,
//! metrics rows, exact resume through the CLI, and clear errors on bad input.

mod common;

use std::path::{Path, PathBuf};
use std::process::Output;

use common::{byte_tokenizer, lmkit, tmpdir};

fn corpus(dir: &Path) -> PathBuf {
    let text: String = (0..400)
        .map(|i| format!("Line {i}: the quick brown fox jumps over the lazy dog.\n"))
        .collect();
    let p = dir.join("corpus.txt");
    std::fs::write(&p, text).unwrap();
    p
}

fn rows(out: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(out.join("metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn pretrain_resume_and_plot() {
    let dir = tmpdir("pretrain");
    let tok = byte_tokenizer(&dir);
    let data = corpus(&dir);
    let (tok, data) = (tok.to_str().unwrap(), data.to_str().unwrap());
    let common = [
        "pretrain",
        "--tokenizer",
        tok,
        "--data",
        data,
        "--n-layer",
        "2",
        "--n-embd",
        "32",
        "--n-head",
        "4",
        "--seq-len",
        "32",
        "--batch-size",
        "4",
        "--grad-accum",
        "2",
        "--max-steps",
        "16",
        "--eval-every",
        "4",
        "--save-every",
        "5",
        "--lr",
        "3e-3",
        "--val-fraction",
        "0.1",
    ];
    let straight = dir.join("straight");
    let o = lmkit(&[&common[..], &["--output", straight.to_str().unwrap()]].concat());
    assert!(o.status.success(), "{}", stderr(&o));
    // HF layout in OUTPUT and in each checkpoint, plus the training state.
    for f in [
        "config.json",
        "model.safetensors",
        "vocab.json",
        "merges.txt",
    ] {
        assert!(straight.join(f).is_file(), "{f}");
        assert!(
            straight.join("checkpoints/step-00000016").join(f).is_file(),
            "{f}"
        );
    }
    for f in ["optimizer.safetensors", "trainer_state.json"] {
        assert!(
            straight.join("checkpoints/step-00000016").join(f).is_file(),
            "{f}"
        );
    }
    let r = rows(&straight);
    let train: Vec<&serde_json::Value> = r.iter().filter(|x| x.get("loss").is_some()).collect();
    assert_eq!(train.len(), 16);
    for k in ["step", "loss", "lr", "grad_norm", "tokens_per_s"] {
        assert!(
            train
                .iter()
                .all(|x| x.get(k).is_some_and(|v| v.is_number())),
            "{k}"
        );
    }
    let val: Vec<f64> = r
        .iter()
        .filter_map(|x| x.get("val_loss")?.as_f64())
        .collect();
    assert_eq!(val.len(), 5, "steps 0, 4, 8, 12, 16");
    assert!(val[4] < val[0] - 1.0, "validation loss drops: {val:?}");

    // 8 steps, stop, resume to 16: the same rows, bit for bit.
    let split = dir.join("split");
    let o = lmkit(
        &[
            &common[..],
            &["--output", split.to_str().unwrap(), "--stop-after", "8"],
        ]
        .concat(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("--resume"));
    // Without --resume an existing run is not overwritten.
    let o = lmkit(&[&common[..], &["--output", split.to_str().unwrap()]].concat());
    assert!(
        !o.status.success() && stderr(&o).contains("--resume"),
        "{}",
        stderr(&o)
    );
    // Issue 13 item 9: a resume given other data is refused before the
    // run's shards are touched.
    let shards = std::fs::read(split.join("data/train.bin")).unwrap();
    let other = dir.join("other.txt");
    std::fs::write(
        &other,
        "Some other text entirely, not the run's data.\n".repeat(50),
    )
    .unwrap();
    let o = lmkit(&[
        "pretrain",
        "--output",
        split.to_str().unwrap(),
        "--resume",
        "--data",
        other.to_str().unwrap(),
    ]);
    let err = stderr(&o);
    assert!(
        o.status.code() == Some(1) && err.contains("--data") && err.contains("other.txt"),
        "{err}"
    );
    assert_eq!(std::fs::read(split.join("data/train.bin")).unwrap(), shards);
    // Item 11: a flag that contradicts the checkpoint is named, with both values.
    let mut deeper = common.to_vec();
    let at = deeper.iter().position(|a| *a == "--n-layer").unwrap();
    deeper[at + 1] = "3";
    let o = lmkit(
        &[
            &deeper[..],
            &["--output", split.to_str().unwrap(), "--resume"],
        ]
        .concat(),
    );
    let err = stderr(&o);
    assert!(
        o.status.code() == Some(1) && err.contains("--n-layer 3") && err.contains("checkpoint's 2"),
        "{err}"
    );
    // Item 11: the same command plus --resume continues the run.
    let o = lmkit(
        &[
            &common[..],
            &["--output", split.to_str().unwrap(), "--resume"],
        ]
        .concat(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let strip = |v: Vec<serde_json::Value>| -> Vec<String> {
        v.into_iter()
            .map(|mut x| {
                let m = x.as_object_mut().unwrap();
                for k in ["tokens_per_s", "elapsed_s"] {
                    m.remove(k);
                }
                x.to_string()
            })
            .collect()
    };
    assert_eq!(strip(rows(&split)), strip(rows(&straight)));
    assert_eq!(
        std::fs::read(split.join("model.safetensors")).unwrap(),
        std::fs::read(straight.join("model.safetensors")).unwrap()
    );
    // A resume with a different batch size would not be exact: refused.
    let o = lmkit(&[
        "pretrain",
        "--output",
        split.to_str().unwrap(),
        "--resume",
        "--batch-size",
        "8",
        "--max-steps",
        "20",
    ]);
    assert!(
        !o.status.success() && stderr(&o).contains("batch-size"),
        "{}",
        stderr(&o)
    );

    let o = lmkit(&["plot", straight.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(std::fs::read(straight.join("metrics.png"))
        .unwrap()
        .starts_with(b"\x89PNG"));
}

#[test]
fn bad_input_is_a_clear_error() {
    let dir = tmpdir("bad");
    let tok = byte_tokenizer(&dir);
    let tok = tok.to_str().unwrap();
    let out = dir.join("out");
    let out = out.to_str().unwrap();
    let base = [
        "pretrain",
        "--tokenizer",
        tok,
        "--output",
        out,
        "--seq-len",
        "32",
        "--max-steps",
        "2",
    ];
    let fail = |extra: &[&str], want: &str| {
        let _ = std::fs::remove_dir_all(dir.join("out"));
        let o = lmkit(&[&base[..], extra].concat());
        let e = stderr(&o);
        assert!(!o.status.success(), "succeeded with {extra:?}");
        assert!(e.contains(want), "{extra:?}: {e}");
        assert!(!e.contains("panicked"), "{e}");
    };
    fail(
        &["--preset", "tiny", "--data", "/nonexistent/file.txt"],
        "/nonexistent/file.txt",
    );
    std::fs::write(dir.join("empty.txt"), "").unwrap();
    fail(
        &[
            "--preset",
            "tiny",
            "--data",
            dir.join("empty.txt").to_str().unwrap(),
        ],
        "no text",
    );
    std::fs::write(dir.join("short.txt"), "just a few words").unwrap();
    fail(
        &[
            "--preset",
            "tiny",
            "--data",
            dir.join("short.txt").to_str().unwrap(),
        ],
        "fewer than one batch",
    );
    let data = corpus(&dir);
    let data = data.to_str().unwrap();
    fail(&["--data", data, "--preset", "nope"], "unknown preset");
    fail(
        &["--preset", "tiny", "--data", data, "--schedule", "exp"],
        "schedule",
    );
    fail(
        &["--preset", "tiny", "--data", data, "--n-positions", "16"],
        "n_positions 16",
    );
    fail(&["--data", data], "--preset");
    // A model whose vocabulary is smaller than the tokenizer's.
    let small = dir.join("small-model");
    std::fs::create_dir_all(&small).unwrap();
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/gpt2-tiny/config.json"),
        small.join("config.json"),
    )
    .unwrap();
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/fixtures/gpt2-tiny/model.safetensors"),
        small.join("model.safetensors"),
    )
    .unwrap();
    let _ = std::fs::remove_dir_all(dir.join("out"));
    let o = lmkit(&[
        "pretrain",
        "--tokenizer",
        tok,
        "--output",
        out,
        "--data",
        data,
        "--init-from",
        small.to_str().unwrap(),
        "--seq-len",
        "16",
        "--max-steps",
        "2",
    ]);
    let e = stderr(&o);
    assert!(
        !o.status.success() && e.contains("do not belong together"),
        "{e}"
    );
    let o = lmkit(&[
        "pretrain",
        "--output",
        dir.join("none").to_str().unwrap(),
        "--resume",
    ]);
    assert!(
        !o.status.success() && stderr(&o).contains("no checkpoint"),
        "{}",
        stderr(&o)
    );
}

/// `pretrain --profile`: the phase table at the end of the run, the step's
/// phases in every metrics row.
#[test]
fn pretrain_profile_prints_the_table() {
    let dir = tmpdir("pretrain-profile");
    let tok = byte_tokenizer(&dir);
    let data = corpus(&dir);
    let out = dir.join("out");
    let o = lmkit(&[
        "pretrain",
        "--tokenizer",
        tok.to_str().unwrap(),
        "--data",
        data.to_str().unwrap(),
        "--output",
        out.to_str().unwrap(),
        "--preset",
        "tiny",
        "--seq-len",
        "32",
        "--batch-size",
        "2",
        "--max-steps",
        "3",
        "--eval-every",
        "0",
        "--save-every",
        "0",
        "--profile",
    ]);
    let e = stderr(&o);
    assert!(o.status.success(), "{e}");
    for s in [
        "per-phase time of a training step (mean of 2 steps after the first)",
        "lm_head_loss",
        "unaccounted",
        "matmul share",
        "non-matmul share",
    ] {
        assert!(e.contains(s), "{s}: {e}");
    }
    let steps: Vec<_> = rows(&out)
        .into_iter()
        .filter(|r| r.get("loss").is_some())
        .collect();
    assert_eq!(steps.len(), 3);
    assert!(steps
        .iter()
        .all(|r| r["phase_ms"]["matmul"].as_f64() > Some(0.0)));
}
