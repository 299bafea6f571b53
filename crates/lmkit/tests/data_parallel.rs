//! Data-parallel GPT-2 and BERT pretraining on ranks that are threads of
//! this process (`ThreadGroup`: the same code path as MPI, without MPI):
//! 2 ranks of batch 2 take the same steps as 1 process of batch 4 (losses
//! and validation within 1e-5; BERT's masked tokens fall unevenly on the
//! ranks, so its loss terms are means over the global batch's counts), the
//! sharded optimizer (ZeRO-1) gives bit-identical weights and checkpoints,
//! and a 2-rank checkpoint resumes on 1 rank (and on 2) exactly.
//! Fine-tuning likewise (BERT token classification, whose labelled tokens
//! differ per rank, and GPT-2 classification with its auxiliary LM loss),
//! with a last batch of each epoch that leaves rank 1 without examples.
//! `mpi_cli.rs` in lmkit-cli runs the same over `mpirun`.

use lmkit::recipes::finetune::{finetune_on, FinetuneOptions, FinetuneSummary, FinetuneTask};
use lmkit::recipes::pretrain::{pretrain_on, ModelSize, PretrainOptions, PretrainSummary};
use lmkit::spec::Family;
use lmkit::util::comm::{Communicator, SingleProcess, ThreadGroup};
use std::path::{Path, PathBuf};

fn tmpdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("lmkit-dp-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A byte-level BPE tokenizer (no merges, vocab 257) and a small corpus.
fn inputs(dir: &Path) -> (PathBuf, PathBuf) {
    let tok = dir.join("tok");
    std::fs::create_dir_all(&tok).unwrap();
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
    std::fs::write(
        tok.join("vocab.json"),
        serde_json::to_string(&vocab).unwrap(),
    )
    .unwrap();
    std::fs::write(tok.join("merges.txt"), "#version: 0.2\n").unwrap();
    let text: String = (0..300)
        .map(|i| format!("Line {i}: the quick brown fox jumps over the lazy dog.\n"))
        .collect();
    let data = dir.join("corpus.txt");
    std::fs::write(&data, text).unwrap();
    (tok, data)
}

fn options(dir: &Path, out: &str, batch: usize) -> PretrainOptions {
    let (tok, data) = inputs(dir);
    PretrainOptions {
        family: Family::Gpt2,
        data: vec![data],
        output: dir.join(out),
        tokenizer: Some(tok),
        size: ModelSize {
            n_layer: Some(2),
            n_embd: Some(32),
            n_head: Some(4),
            ..ModelSize::default()
        },
        seq_len: Some(16),
        batch_size: Some(batch),
        grad_accum: Some(2),
        max_steps: Some(6),
        eval_every: Some(3),
        eval_batches: Some(4),
        save_every: Some(3),
        sample_every: Some(0),
        lr: Some(3e-3),
        val_fraction: Some(0.1),
        ..PretrainOptions::default()
    }
}

/// `job` on `ranks` threads (1: one process), rank 0's result.
fn on_ranks<T: Send>(ranks: usize, job: impl Fn(&dyn Communicator) -> T + Sync) -> T {
    if ranks == 1 {
        return job(&SingleProcess);
    }
    let job = &job;
    std::thread::scope(|s| {
        let handles: Vec<_> = ThreadGroup::new(ranks)
            .into_iter()
            .map(|c| s.spawn(move || job(&c)))
            .collect();
        let mut all: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        all.swap_remove(0)
    })
}

/// Runs `o` on `ranks` threads (1: one process), rank 0's summary.
fn run(o: &PretrainOptions, ranks: usize) -> PretrainSummary {
    on_ranks(ranks, |c| {
        pretrain_on(o, c, &mut |_| {}, &lmkit::train::StopRequest::default()).unwrap()
    })
}

/// `(step, key)` → value of every metrics row holding `key`.
fn series(out: &Path, key: &str) -> Vec<(u64, f64)> {
    lmkit::train::read_metrics(&out.join("metrics.jsonl"))
        .unwrap()
        .iter()
        .filter_map(|r| Some((r["step"].as_u64()?, r.get(key)?.as_f64()?)))
        .collect()
}

fn assert_close(a: &[(u64, f64)], b: &[(u64, f64)], rel: f64, what: &str) {
    assert_eq!(a.len(), b.len(), "{what}: {a:?} vs {b:?}");
    for (x, y) in a.iter().zip(b) {
        assert_eq!(x.0, y.0, "{what}");
        assert!(
            (x.1 - y.1).abs() <= rel * y.1.abs(),
            "{what} at step {}: {} vs {}",
            x.0,
            x.1,
            y.1
        );
    }
}

fn bytes(p: PathBuf) -> Vec<u8> {
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

#[test]
fn two_ranks_match_one_process_and_shard_exactly() {
    let dir = tmpdir("match");
    let one = options(&dir, "one", 4);
    let two = options(&dir, "two", 2);
    let zero = PretrainOptions {
        shard_optimizer: true,
        ..options(&dir, "zero", 2)
    };
    let s1 = run(&one, 1);
    let s2 = run(&two, 2);
    run(&zero, 2);
    assert_eq!((s1.steps, s2.steps), (6, 6));
    let l1 = series(&one.output, "loss");
    assert_eq!(l1.len(), 6);
    assert_close(&series(&two.output, "loss"), &l1, 1e-5, "loss");
    // The gradients themselves (AdamW and clipping would hide a scale).
    assert_close(
        &series(&two.output, "grad_norm"),
        &series(&one.output, "grad_norm"),
        1e-5,
        "grad_norm",
    );
    assert_close(
        &series(&two.output, "val_loss"),
        &series(&one.output, "val_loss"),
        1e-5,
        "val_loss",
    );
    // The global batch: tokens counted over both ranks.
    assert_eq!(series(&two.output, "tokens"), series(&one.output, "tokens"),);
    // ZeRO-1: the same update, so the same bits (moments gathered whole).
    assert_eq!(series(&zero.output, "loss"), series(&two.output, "loss"),);
    for f in [
        "model.safetensors",
        "checkpoints/step-00000006/optimizer.safetensors",
    ] {
        assert!(
            bytes(zero.output.join(f)) == bytes(two.output.join(f)),
            "{f} differs with --shard-optimizer"
        );
    }
}

#[test]
fn two_rank_checkpoint_resumes_on_one_and_two() {
    let dir = tmpdir("resume");
    let straight1 = options(&dir, "straight1", 4);
    run(&straight1, 1);
    let straight2 = options(&dir, "straight2", 2);
    run(&straight2, 2);
    for (name, shard) in [("cut", false), ("cut-zero", true)] {
        // 3 steps on 2 ranks, then the rest on 1 rank (batch 4 from the checkpoint).
        let first = PretrainOptions {
            stop_after: Some(3),
            shard_optimizer: shard,
            ..options(&dir, name, 2)
        };
        assert!(run(&first, 2).interrupted);
        let again = PretrainOptions {
            output: first.output.clone(),
            resume: true,
            ..PretrainOptions::default()
        };
        let s = run(&again, 1);
        assert_eq!(s.steps, 6);
        assert_close(
            &series(&again.output, "loss"),
            &series(&straight1.output, "loss"),
            1e-5,
            name,
        );
        // The first 3 steps are the 2-rank run's own, bit for bit.
        assert_eq!(
            series(&again.output, "loss")[..3],
            series(&straight2.output, "loss")[..3]
        );
    }
    // 2 ranks -> 2 ranks: bit-identical to the run never stopped.
    let first = PretrainOptions {
        stop_after: Some(3),
        ..options(&dir, "cut2", 2)
    };
    run(&first, 2);
    let again = PretrainOptions {
        resume: true,
        ..first.clone()
    };
    let again = PretrainOptions {
        stop_after: None,
        ..again
    };
    run(&again, 2);
    assert_eq!(
        series(&again.output, "loss"),
        series(&straight2.output, "loss")
    );
    assert!(
        bytes(again.output.join("model.safetensors"))
            == bytes(straight2.output.join("model.safetensors"))
    );

    // A batch size that changes the global batch is refused, naming it.
    let bad = PretrainOptions {
        output: dir.join("cut"),
        resume: true,
        batch_size: Some(2),
        max_steps: Some(8),
        ..PretrainOptions::default()
    };
    let e = pretrain_on(
        &bad,
        &SingleProcess,
        &mut |_| {},
        &lmkit::train::StopRequest::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("global batch"), "{e}");
}

/// A WordPiece vocabulary (the words of [`bert_corpus`], `##` pieces of
/// their letters) and documents of sentences, a blank line between them.
fn bert_inputs(dir: &Path) -> (PathBuf, PathBuf) {
    let tok = dir.join("wordpiece");
    std::fs::create_dir_all(&tok).unwrap();
    let words = [
        "the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "a", "cat", "sleeps",
        "under", "warm", "sun", "and", "bird", "sings", "in", "tree", ".",
    ];
    let mut vocab: Vec<String> = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
        .map(String::from)
        .to_vec();
    vocab.extend(words.iter().map(|w| w.to_string()));
    vocab.extend(('b'..='z').map(|c| c.to_string()));
    vocab.extend(('a'..='z').map(|c| format!("##{c}")));
    vocab.extend((0..10).map(|d| d.to_string()));
    vocab.extend((0..10).map(|d| format!("##{d}")));
    std::fs::write(tok.join("vocab.txt"), vocab.join("\n") + "\n").unwrap();
    let mut text = String::new();
    for d in 0..40 {
        for s in 0..(3 + d % 4) {
            let w = |k: usize| words[(d * 7 + s * 3 + k) % (words.len() - 1)];
            text += &format!("the {} {} {} over {} {d}{s} .\n", w(0), w(1), w(2), w(3));
        }
        text += "\n";
    }
    let data = dir.join("docs.txt");
    std::fs::write(&data, text).unwrap();
    (tok, data)
}

fn bert_options(dir: &Path, out: &str, batch: usize) -> PretrainOptions {
    let (tok, data) = bert_inputs(dir);
    PretrainOptions {
        family: Family::Bert,
        data: vec![data],
        output: dir.join(out),
        tokenizer: Some(tok),
        size: ModelSize {
            n_layer: Some(2),
            n_embd: Some(32),
            n_head: Some(4),
            n_positions: Some(32),
            ..ModelSize::default()
        },
        seq_len: Some(32),
        batch_size: Some(batch),
        grad_accum: Some(2),
        max_steps: Some(6),
        eval_every: Some(3),
        eval_batches: Some(2),
        save_every: Some(3),
        lr: Some(3e-3),
        val_fraction: Some(0.2),
        ..PretrainOptions::default()
    }
}

#[test]
fn bert_two_ranks_match_one_process_shard_and_resume() {
    let dir = tmpdir("bert");
    let one = bert_options(&dir, "one", 4);
    let two = bert_options(&dir, "two", 2);
    let zero = PretrainOptions {
        shard_optimizer: true,
        ..bert_options(&dir, "zero", 2)
    };
    assert_eq!(run(&one, 1).steps, 6);
    assert_eq!(run(&two, 2).steps, 6);
    run(&zero, 2);
    let l1 = series(&one.output, "loss");
    assert_eq!(l1.len(), 6);
    for key in [
        "loss",
        "grad_norm",
        "mlm_loss",
        "nsp_loss",
        "nsp_accuracy",
        "val_loss",
    ] {
        let want = series(&one.output, key);
        assert!(!want.is_empty(), "{key}");
        assert_close(&series(&two.output, key), &want, 1e-5, key);
    }
    // The ranks' masked tokens differ in number: a plain average of their
    // mean gradients would not match (the test above would fail).
    assert_eq!(series(&zero.output, "loss"), series(&two.output, "loss"));
    assert!(
        bytes(zero.output.join("model.safetensors")) == bytes(two.output.join("model.safetensors")),
        "--shard-optimizer changed BERT's weights"
    );
    // 3 steps on 2 ranks (sharded), the rest on 1 process.
    let first = PretrainOptions {
        stop_after: Some(3),
        shard_optimizer: true,
        ..bert_options(&dir, "cut", 2)
    };
    assert!(run(&first, 2).interrupted);
    let again = PretrainOptions {
        family: Family::Bert,
        output: first.output.clone(),
        resume: true,
        ..PretrainOptions::default()
    };
    assert_eq!(run(&again, 1).steps, 6);
    assert_close(
        &series(&again.output, "loss"),
        &l1,
        1e-5,
        "resumed BERT loss",
    );
}

/// Runs `finetune_on` with `o` on `ranks` threads; rank 0's summary.
fn finetune_ranks(
    task: FinetuneTask,
    model: &Path,
    train: &Path,
    eval: &Path,
    out: &Path,
    o: &FinetuneOptions,
    ranks: usize,
) -> FinetuneSummary {
    on_ranks(ranks, |c| {
        finetune_on(task, model, train, Some(eval), out, o, c, &mut |_| {}).unwrap()
    })
}

/// 1 process of batch 4 against 2 ranks of 2 (and sharded), and a 2-rank
/// run stopped after 3 steps and resumed on 1 process: `keys` of the
/// metrics equal within 1e-5.
fn check_finetune(
    dir: &Path,
    task: FinetuneTask,
    model: &Path,
    (train, eval): (&Path, &Path),
    keys: &[&str],
) {
    let opts = |batch: usize| FinetuneOptions {
        epochs: 2,
        batch_size: batch,
        lr: 3e-3,
        warmup_ratio: 0.2,
        weight_decay: 0.01,
        max_seq_len: 24,
        lm_coef: 0.5,
        ..FinetuneOptions::default()
    };
    let out = |name: &str| dir.join(name);
    let one = finetune_ranks(task, model, train, eval, &out("one"), &opts(4), 1);
    assert!(one.steps >= 6, "{}", one.steps);
    finetune_ranks(task, model, train, eval, &out("two"), &opts(2), 2);
    let zero = FinetuneOptions {
        shard_optimizer: true,
        ..opts(2)
    };
    finetune_ranks(task, model, train, eval, &out("zero"), &zero, 2);
    for key in keys {
        let want = series(&out("one"), key);
        assert!(!want.is_empty(), "{key}");
        assert_close(&series(&out("two"), key), &want, 1e-5, key);
    }
    assert!(
        bytes(out("zero").join("model.safetensors")) == bytes(out("two").join("model.safetensors")),
        "shard_optimizer changed the fine-tuned weights"
    );
    let cut = FinetuneOptions {
        max_steps: Some(3),
        ..opts(2)
    };
    finetune_ranks(task, model, train, eval, &out("cut"), &cut, 2);
    let again = FinetuneOptions {
        resume: true,
        ..opts(4)
    };
    let s = finetune_ranks(task, model, train, eval, &out("cut"), &again, 1);
    assert_eq!(s.steps, one.steps);
    assert_close(
        &series(&out("cut"), "loss"),
        &series(&out("one"), "loss"),
        1e-5,
        "resumed",
    );
}

#[test]
fn finetuning_two_ranks_match_one_process() {
    let dir = tmpdir("finetune");
    let fixtures = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures");
    // BERT token classification: 10 sentences, global batches of 4, 4, 2.
    let words = ["dog", "cat", "paris", "london", "the", "saw", "was", "old"];
    let conll = |n: usize, seed: usize| -> String {
        (0..n)
            .map(|i| {
                (0..2 + (i + seed) % 5)
                    .map(|k| {
                        let w = words[(i * 3 + k * 5 + seed) % words.len()];
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
    let (train, eval) = (dir.join("train.conll"), dir.join("eval.conll"));
    std::fs::write(&train, conll(10, 0)).unwrap();
    std::fs::write(&eval, conll(6, 1)).unwrap();
    check_finetune(
        &dir.join("ner"),
        FinetuneTask::TOKEN_CLASSIFY,
        &fixtures.join("bert-tiny-bare"),
        (&train, &eval),
        &["loss", "grad_norm", "eval_loss", "eval_f1"],
    );

    // GPT-2 classification + λ · LM loss: texts of different lengths.
    let gpt2 = options(&dir, "gpt2", 4);
    run(&gpt2, 1);
    let rows = |n: usize, seed: usize| -> String {
        (0..n)
            .map(|i| {
                let label = if (i + seed).is_multiple_of(2) {
                    "fox"
                } else {
                    "dog"
                };
                let text = format!("Line {i}: the {label}{}", " jumps".repeat((i + seed) % 4));
                format!("{{\"text\": \"{text}\", \"label\": \"{label}\"}}\n")
            })
            .collect()
    };
    let (train, eval) = (dir.join("train.jsonl"), dir.join("eval.jsonl"));
    std::fs::write(&train, rows(10, 0)).unwrap();
    std::fs::write(&eval, rows(6, 1)).unwrap();
    check_finetune(
        &dir.join("cls"),
        FinetuneTask::CLASSIFY,
        &gpt2.output,
        (&train, &eval),
        &["loss", "grad_norm", "eval_loss", "eval_accuracy"],
    );
}

#[test]
fn thread_group_reports_its_shape() {
    let g = ThreadGroup::new(3);
    assert_eq!(g.len(), 3);
    assert_eq!((g[2].rank(), g[2].world_size()), (2, 3));
}
