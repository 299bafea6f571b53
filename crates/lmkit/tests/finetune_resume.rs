//! Fine-tuning checkpoints and exact resume, for every task through one
//! helper: a run stopped by `max_steps` mid-epoch, resumed and stopped again
//! by a stop request (the CLI's Ctrl-C), then resumed to the end, writes
//! the same metrics rows (every loss bit for bit, every evaluation) and the
//! same final model as a run never stopped. Checkpoints are loadable HF
//! folders with the trainer state; a resume that is not the same run, or
//! of a finished run, is refused before anything in the output folder
//! changes.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use lmkit::checkpoint::save_params;
use lmkit::models::bert::Bert;
use lmkit::models::gpt2::Gpt2;
use lmkit::recipes::finetune::{
    finetune, FinetuneOptions, FinetuneSummary, FinetuneTask, StopRequest,
};
use lmkit::spec::Gpt2Config;
use lmkit::train::{list_checkpoints, read_metrics, read_train_state};

type Run<'a> = dyn Fn(&Path, &FinetuneOptions) -> lmkit::recipes::Result<FinetuneSummary> + 'a;

fn fixture(case: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures")
        .join(case)
}

fn tmpdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("lmkit-ftresume-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// metrics.jsonl rows as text, without the wall-clock fields.
fn rows(out: &Path) -> Vec<String> {
    read_metrics(&out.join("metrics.jsonl"))
        .unwrap()
        .into_iter()
        .map(|mut r| {
            for k in ["tokens_per_s", "elapsed_s", "examples_per_s"] {
                r.remove(k);
            }
            serde_json::Value::Object(r).to_string()
        })
        .collect()
}

fn is_eval_at(row: &str, step: u64) -> bool {
    let v: serde_json::Value = serde_json::from_str(row).unwrap();
    v["step"] == step && v.get("loss").is_none()
}

/// Straight run vs. stop at `k` (`max_steps`, mid-epoch) + resume stopped
/// after 2 steps by a [`StopRequest`] + resume to the end. Returns the
/// split run's output folder.
fn check_exact_resume(dir: &Path, run: &Run<'_>, opts: &FinetuneOptions, k: u64) -> PathBuf {
    let straight = dir.join("straight");
    let s = run(&straight, opts).unwrap();
    let total = s.steps;
    assert!(total > k + 2, "{total} steps");
    assert!(!s.interrupted);
    // The default: a checkpoint at every epoch end, the newest 2 kept.
    let kept = list_checkpoints(&straight.join("checkpoints")).unwrap();
    assert_eq!(kept.len(), 2, "{kept:?}");
    assert_eq!(kept[1].0, total);

    let split = dir.join("split");
    let a = run(
        &split,
        &FinetuneOptions {
            max_steps: Some(k),
            ..opts.clone()
        },
    )
    .unwrap();
    assert_eq!((a.steps, a.interrupted), (k, false));
    let ckpt = a.checkpoint.clone().unwrap();
    assert!(
        ckpt.ends_with(format!("checkpoints/step-{k:08}")),
        "{ckpt:?}"
    );
    for f in ["config.json", "optimizer.safetensors", "trainer_state.json"] {
        assert!(ckpt.join(f).is_file(), "{f}");
    }
    let state = read_train_state(&ckpt).unwrap();
    assert_eq!(state.step, k);
    assert!(state.extra["finetune"]["task"].is_string());

    let polls = Arc::new(AtomicUsize::new(0));
    let p = polls.clone();
    let b = run(
        &split,
        &FinetuneOptions {
            resume: true,
            stop: StopRequest::new(move || p.fetch_add(1, Ordering::SeqCst) + 1 >= 2),
            ..opts.clone()
        },
    )
    .unwrap();
    assert!(b.interrupted);
    assert_eq!(b.steps, k + 2);
    assert_eq!(polls.load(Ordering::SeqCst), 2, "polled after every step");
    assert!(b
        .checkpoint
        .unwrap()
        .ends_with(format!("step-{:08}", k + 2)));

    let c = run(
        &split,
        &FinetuneOptions {
            resume: true,
            ..opts.clone()
        },
    )
    .unwrap();
    assert_eq!((c.steps, c.interrupted), (total, false));
    assert_eq!(c.last_eval, s.last_eval);

    // The same curve, plus the evaluation where `max_steps` stopped.
    let mut got = rows(&split);
    let at = got.iter().position(|r| is_eval_at(r, k));
    got.remove(at.expect("an evaluation where max_steps stopped"));
    let want = rows(&straight);
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(&want) {
        assert_eq!(g, w);
    }
    assert_eq!(
        std::fs::read(split.join("model.safetensors")).unwrap(),
        std::fs::read(straight.join("model.safetensors")).unwrap()
    );

    // A finished run resumed says so, and changes nothing.
    let before = std::fs::read(split.join("metrics.jsonl")).unwrap();
    let e = run(
        &split,
        &FinetuneOptions {
            resume: true,
            ..opts.clone()
        },
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("is complete"), "{e}");
    assert_eq!(std::fs::read(split.join("metrics.jsonl")).unwrap(), before);
    split
}

/// Animal vs place sentences over the tiny BERT fixture's vocabulary.
fn animal_place_rows(n: usize, offset: usize) -> String {
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
            format!(
                "{{\"text\": \"{} {w} {} {w}\", \"label\": \"{label}\"}}\n",
                filler[(j / 2) % 6],
                filler[(j / 5) % 6]
            )
        })
        .collect()
}

fn small() -> FinetuneOptions {
    FinetuneOptions {
        epochs: 2,
        batch_size: 8,
        lr: 3e-3,
        warmup_ratio: 0.2,
        weight_decay: 0.01,
        max_seq_len: 16,
        ..FinetuneOptions::default()
    }
}

#[test]
fn bert_classify_resumes_exactly_and_refuses_another_run() {
    let dir = tmpdir("bert-cls");
    let (train, eval) = (dir.join("train.jsonl"), dir.join("eval.jsonl"));
    std::fs::write(&train, animal_place_rows(44, 0)).unwrap();
    std::fs::write(&eval, animal_place_rows(12, 5)).unwrap();
    let model = fixture("bert-tiny-pretraining");
    let run = |out: &Path, o: &FinetuneOptions| {
        finetune(
            FinetuneTask::CLASSIFY,
            &model,
            &train,
            Some(&eval),
            out,
            o,
            &mut |_| {},
        )
    };
    // 44 examples / 8: 6 steps an epoch (the last batch of 4); stop at 4.
    let split = check_exact_resume(&dir, &run, &small(), 4);
    // Checkpoints are HF folders: the classifier loads from one.
    let (_, newest) = list_checkpoints(&split.join("checkpoints"))
        .unwrap()
        .pop()
        .unwrap();
    let m = Bert::from_dir(&newest).unwrap();
    assert_eq!(m.config.id2label, ["animal", "place"]);

    // A run stopped by `max_steps` 3, then resumed by commands that are not
    // its own: each refused, naming what differs, nothing touched.
    let out = dir.join("other");
    run(
        &out,
        &FinetuneOptions {
            max_steps: Some(3),
            ..small()
        },
    )
    .unwrap();
    let snapshot = |d: &Path| {
        let mut files: Vec<(PathBuf, Vec<u8>)> = walk(d)
            .into_iter()
            .map(|p| (p.clone(), std::fs::read(&p).unwrap()))
            .collect();
        files.sort();
        files
    };
    let before = snapshot(&out);
    let resume = |o: FinetuneOptions| FinetuneOptions { resume: true, ..o };
    let refused = |e: lmkit::recipes::RecipeError, want: &str| {
        let e = e.to_string();
        assert!(e.contains(want), "want {want:?}: {e}");
        assert_eq!(snapshot(&out), before, "{want}: the output folder changed");
    };
    refused(
        run(
            &out,
            &resume(FinetuneOptions {
                lr: 1e-3,
                ..small()
            }),
        )
        .unwrap_err(),
        "`lr` 0.001 differs from the checkpoint's 0.003",
    );
    refused(
        run(
            &out,
            &resume(FinetuneOptions {
                batch_size: 4,
                ..small()
            }),
        )
        .unwrap_err(),
        "`batch_size` 4 on 1 rank(s) is a global batch of 4, the checkpoint's is",
    );
    let other = dir.join("other.jsonl");
    std::fs::write(&other, animal_place_rows(44, 1)).unwrap();
    refused(
        finetune(
            FinetuneTask::CLASSIFY,
            &model,
            &other,
            Some(&eval),
            &out,
            &resume(small()),
            &mut |_| {},
        )
        .unwrap_err(),
        "`train`",
    );
    refused(
        finetune(
            FinetuneTask::CLASSIFY,
            &model,
            &train,
            None,
            &out,
            &resume(small()),
            &mut |_| {},
        )
        .unwrap_err(),
        "`eval`",
    );
    refused(
        finetune(
            FinetuneTask::CLASSIFY,
            &fixture("bert-tiny-bare"),
            &train,
            Some(&eval),
            &out,
            &resume(small()),
            &mut |_| {},
        )
        .unwrap_err(),
        "`model`",
    );
    refused(
        finetune(
            FinetuneTask::QA,
            &model,
            &train,
            None,
            &out,
            &resume(small()),
            &mut |_| {},
        )
        .unwrap_err(),
        "`task` qa",
    );
    // Without `resume` the run is not started over unless asked.
    refused(run(&out, &small()).unwrap_err(), "pass `resume`");
    refused(
        run(
            &out,
            &resume(FinetuneOptions {
                overwrite: true,
                ..small()
            }),
        )
        .unwrap_err(),
        "give one",
    );
    // `max_steps` may change: at its budget the checkpoint says so.
    refused(
        run(
            &out,
            &resume(FinetuneOptions {
                max_steps: Some(3),
                ..small()
            }),
        )
        .unwrap_err(),
        "already at `max_steps` 3",
    );
    let e = run(&dir.join("none"), &resume(small()))
        .unwrap_err()
        .to_string();
    assert!(e.contains("no checkpoint"), "{e}");
    // `overwrite` starts again: the old run's checkpoints go.
    let s = run(
        &out,
        &FinetuneOptions {
            overwrite: true,
            max_steps: Some(1),
            save_every: Some(0),
            ..small()
        },
    )
    .unwrap();
    assert_eq!(s.steps, 1);
    let kept: Vec<u64> = list_checkpoints(&out.join("checkpoints"))
        .unwrap()
        .into_iter()
        .map(|(s, _)| s)
        .collect();
    assert_eq!(kept, [1]);
    std::fs::remove_dir_all(&dir).unwrap();
}

fn walk(d: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(d).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// A random 2-layer GPT-2 (vocab 257) with a byte-level tokenizer.
fn byte_gpt2(dir: &Path) -> PathBuf {
    let m = dir.join("gpt2");
    std::fs::create_dir_all(&m).unwrap();
    let mut printable: Vec<u32> = (b'!' as u32..=b'~' as u32).collect();
    printable.extend(0xA1..=0xAC);
    printable.extend(0xAE..=0xFF);
    let mut vocab = serde_json::Map::new();
    let mut extra = 0;
    for b in 0..256u32 {
        let c = if printable.contains(&b) {
            b
        } else {
            extra += 1;
            255 + extra
        };
        vocab.insert(char::from_u32(c).unwrap().to_string(), (b as u64).into());
    }
    vocab.insert("<|endoftext|>".into(), 256u64.into());
    std::fs::write(m.join("vocab.json"), serde_json::to_string(&vocab).unwrap()).unwrap();
    std::fs::write(m.join("merges.txt"), "#version: 0.2\n").unwrap();
    let cfg = Gpt2Config {
        vocab_size: 257,
        n_positions: 32,
        n_embd: 32,
        n_layer: 2,
        n_head: 4,
        resid_pdrop: 0.0,
        embd_pdrop: 0.0,
        attn_pdrop: 0.0,
        ..Gpt2Config::default()
    };
    let g = Gpt2::new_random(cfg, 3).unwrap();
    save_params(&g.layout, &g.params, &g.config, &m, g.arch).unwrap();
    m
}

#[test]
fn gpt2_lm_and_classify_resume_exactly() {
    let dir = tmpdir("gpt2");
    let model = byte_gpt2(&dir);
    let text: String = (0..60)
        .map(|i| format!("Line {i}: the quick brown fox jumps over the lazy dog.\n"))
        .collect();
    let (train, eval) = (dir.join("train.txt"), dir.join("eval.txt"));
    std::fs::write(&train, &text).unwrap();
    std::fs::write(&eval, &text[..600]).unwrap();
    let lm = |out: &Path, o: &FinetuneOptions| {
        finetune(
            FinetuneTask::LM,
            &model,
            &train,
            Some(&eval),
            out,
            o,
            &mut |_| {},
        )
    };
    // 3,300-odd tokens in blocks of 16: 200-odd blocks, 26 steps an epoch.
    check_exact_resume(&dir.join("lm"), &lm, &small(), 5);

    let (ctrain, ceval) = (dir.join("train.jsonl"), dir.join("eval.jsonl"));
    std::fs::write(&ctrain, animal_place_rows(36, 0)).unwrap();
    std::fs::write(&ceval, animal_place_rows(10, 3)).unwrap();
    let cls = |out: &Path, o: &FinetuneOptions| {
        finetune(
            FinetuneTask::CLASSIFY,
            &model,
            &ctrain,
            Some(&ceval),
            out,
            o,
            &mut |_| {},
        )
    };
    check_exact_resume(&dir.join("cls"), &cls, &small(), 2);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// SQuAD-style "who saw what" questions over the tiny vocabulary.
fn tiny_squad(n: usize) -> String {
    let subjects = ["the old man", "a woman", "the king", "the child", "a dog"];
    let objects = ["the river", "a house", "the red book", "the sea", "a tree"];
    let qas: Vec<String> = (0..n)
        .map(|i| {
            let (s, o) = (subjects[i % 5], objects[(i / 5) % 5]);
            let context = format!("it was a long day . {s} saw {o} .");
            let start = context.find(s).unwrap();
            format!(
                "{{\"context\": \"{context}\", \"qas\": [{{\"id\": \"q{i}\", \"question\": \"who saw {o}\", \"answers\": [{{\"text\": \"{s}\", \"answer_start\": {start}}}]}}]}}"
            )
        })
        .collect();
    format!(
        "{{\"version\": \"1.1\", \"data\": [{{\"title\": \"t\", \"paragraphs\": [{}]}}]}}",
        qas.join(",")
    )
}

#[test]
fn bert_qa_and_token_classify_resume_exactly() {
    let dir = tmpdir("bert-qa-ner");
    let model = fixture("bert-tiny-bare");
    let (qtrain, qeval) = (dir.join("train.json"), dir.join("eval.json"));
    std::fs::write(&qtrain, tiny_squad(30)).unwrap();
    std::fs::write(&qeval, tiny_squad(6)).unwrap();
    let qa = |out: &Path, o: &FinetuneOptions| {
        finetune(
            FinetuneTask::QA,
            &model,
            &qtrain,
            Some(&qeval),
            out,
            o,
            &mut |_| {},
        )
    };
    let qa_opts = FinetuneOptions {
        max_seq_len: 24,
        doc_stride: 8,
        ..small()
    };
    check_exact_resume(&dir.join("qa"), &qa, &qa_opts, 3);

    let words = ["dog", "cat", "paris", "london", "the", "saw", "was", "old"];
    let conll = |n: usize| -> String {
        (0..n)
            .map(|i| {
                (0..4)
                    .map(|k| {
                        let w = words[(i * 3 + k * 5) % words.len()];
                        let tag = if matches!(w, "paris" | "london") {
                            "B-LOC"
                        } else {
                            "O"
                        };
                        format!("{w} {tag}\n")
                    })
                    .collect::<String>()
                    + "\n"
            })
            .collect()
    };
    let (ttrain, teval) = (dir.join("train.conll"), dir.join("eval.conll"));
    std::fs::write(&ttrain, conll(40)).unwrap();
    std::fs::write(&teval, conll(10)).unwrap();
    let tag = |out: &Path, o: &FinetuneOptions| {
        finetune(
            FinetuneTask::TOKEN_CLASSIFY,
            &model,
            &ttrain,
            Some(&teval),
            out,
            o,
            &mut |_| {},
        )
    };
    check_exact_resume(&dir.join("ner"), &tag, &small(), 3);
    std::fs::remove_dir_all(&dir).unwrap();
}
