//! Every task of the library's registry, on every family it supports:
//! `lmkit finetune` for one step with evaluation, then `lmkit eval --json`
//! on the saved model with the same data and lengths. The training row's
//! `eval_*` metrics are `eval`'s, key for key and value for value (one
//! scoring, one schema). A task added to the registry without data here
//! fails this test until it gets some.

use std::path::{Path, PathBuf};
use std::process::Command;

use lmkit::spec::Family;
use lmkit::tasks::TaskKind;
use serde_json::Value;

fn lmkit(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_lmkit"))
        .args(args)
        .output()
        .unwrap()
}

fn ok(args: &[&str]) -> String {
    let o = lmkit(args);
    assert!(
        o.status.success(),
        "lmkit {args:?} failed:\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn fixture(family: Family) -> String {
    let name = match family {
        Family::Bert => "bert-tiny-bare",
        Family::Gpt2 => "gpt2-zeroshot",
    };
    root()
        .join("tests/fixtures")
        .join(name)
        .display()
        .to_string()
}

/// Training (and evaluation) data for `task`, and the length flags both
/// commands get.
fn data(task: &str) -> (String, Vec<&'static str>) {
    let len = vec!["--max-seq-len", "32"];
    match task {
        "classify" => {
            let words = ["dog", "paris", "cat", "london", "bird", "france"];
            let rows: String = (0..8)
                .map(|i| {
                    let label = if i % 2 == 0 { "animal" } else { "place" };
                    format!(
                        "{{\"text\": \"the {} was old\", \"label\": \"{label}\"}}\n",
                        words[i % 6]
                    )
                })
                .collect();
            (rows, len)
        }
        "regression" => {
            let all =
                std::fs::read_to_string(root().join("tests/data/regression/replaced.train.jsonl"))
                    .unwrap();
            (all.lines().take(8).map(|l| format!("{l}\n")).collect(), len)
        }
        "token-classify" => (
            "the O\nking B-PER\nwalked O\nto O\nparis B-LOC\n\nshe O\nfound O\nlondon B-LOC\n\n\
             the O\nqueen B-PER\nof I-PER\nengland I-PER\n"
                .into(),
            len,
        ),
        "qa" => {
            let paras: Vec<String> = ["the old man", "a woman", "the king", "the child"]
                .iter()
                .enumerate()
                .map(|(i, sub)| {
                    let ctx = format!("it was a long day . {sub} saw the sea .");
                    let start = ctx.find(sub).unwrap();
                    format!(
                        "{{\"context\": \"{ctx}\", \"qas\": [{{\"id\": \"q{i}\", \"question\": \"who saw the sea\", \
                         \"answers\": [{{\"text\": \"{sub}\", \"answer_start\": {start}}}]}}]}}"
                    )
                })
                .collect();
            let json = format!(
                "{{\"data\": [{{\"title\": \"t\", \"paragraphs\": [{}]}}]}}",
                paras.join(", ")
            );
            (json, vec!["--max-seq-len", "32", "--doc-stride", "8"])
        }
        "multiple-choice" => {
            let rows: String = ["dog", "cat", "bird", "dog", "cat", "bird"]
                .iter()
                .enumerate()
                .map(|(i, a)| {
                    let mut choices = vec![format!("the {a} ran home"), "a red door".to_string()];
                    choices.swap(0, i % 2);
                    serde_json::json!({"context": format!("the old {a} was big"), "choices": choices, "label": i % 2})
                        .to_string()
                        + "\n"
                })
                .collect();
            (rows, len)
        }
        "lm" => {
            let text = "The quick brown fox jumps over the lazy dog. ".repeat(12);
            (format!("{text}\n\x0c\n{text}"), vec!["--max-seq-len", "16"])
        }
        other => panic!("no test data for the task `{other}`: add some to this test"),
    }
}

/// The `eval_*` metrics of a training row, without the prefix.
fn eval_metrics(row: &Value) -> serde_json::Map<String, Value> {
    row.as_object()
        .unwrap()
        .iter()
        .filter_map(|(k, v)| Some((k.strip_prefix("eval_")?.to_string(), v.clone())))
        .collect()
}

#[test]
fn every_task_scores_alike_in_training_and_in_eval() {
    let tmp = std::env::temp_dir().join(format!("lmkit-tasks-registry-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).unwrap();
    let mut runs = 0;
    for task in TaskKind::all() {
        let (rows, len) = data(task.name());
        let file = tmp.join(format!("{}.data", task.name()));
        std::fs::write(&file, rows).unwrap();
        let file = file.display().to_string();
        for &family in task.task().families() {
            let out = tmp.join(format!("{}-{family:?}", task.name()));
            let out_s = out.display().to_string();
            let model = fixture(family);
            let mut args = vec![
                "finetune",
                "--task",
                task.name(),
                "--model",
                &model,
                "--train",
                &file,
                "--eval",
                &file,
                "--output",
                &out_s,
                "--epochs",
                "1",
                "--max-steps",
                "1",
                "--batch-size",
                "4",
                "--json",
            ];
            args.extend(&len);
            let summary: Value = serde_json::from_str(ok(&args).trim()).unwrap();
            let trained = eval_metrics(&summary["eval"]);
            let mut args = vec![
                "eval",
                "--task",
                task.name(),
                "--model",
                &out_s,
                "--data",
                &file,
                "--json",
            ];
            args.extend(&len);
            let mut scored: Value = serde_json::from_str(ok(&args).trim()).unwrap();
            assert_eq!(scored["task"], task.name());
            scored.as_object_mut().unwrap().remove("task");
            assert!(
                !trained.is_empty(),
                "{task} {family:?}: no eval row: {summary}"
            );
            assert_eq!(
                Value::Object(trained),
                scored,
                "{task} on {family:?}: the training row's metrics differ from `lmkit eval`'s"
            );
            runs += 1;
        }
    }
    // Every registered task, both families where it takes both.
    assert_eq!(
        runs,
        TaskKind::all()
            .map(|t| t.task().families().len())
            .sum::<usize>()
    );
    std::fs::remove_dir_all(&tmp).unwrap();
}
