//! `mpirun -np 2 lmkit pretrain` over the system MPI on loopback TCP (built
//! with `--features mpi`; `scripts/test.sh` installs Open MPI and runs these):
//! 2 ranks of batch 2 train a small GPT-2 with the per-step losses of one
//! process of batch 4 (relative 1e-5), and so do 2 ranks of a small BERT
//! (MLM + NSP), and `lmkit finetune` (BERT token classification, whose
//! labelled tokens fall unevenly on the ranks); `--shard-optimizer` gives the same
//! weights, a 2-rank checkpoint resumes on 1 rank, and a rank that is
//! killed or stalls ends the whole job (naming the rank) with the last
//! checkpoint intact.
#![cfg(feature = "mpi")]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{byte_tokenizer, lmkit, tmpdir};

const LMKIT: &str = env!("CARGO_BIN_EXE_lmkit");

/// `mpirun -np n lmkit args`: TCP over loopback (as between machines),
/// root allowed (CI containers), more ranks than cores allowed.
fn mpirun(n: usize, args: &[&str]) -> Command {
    let mut c = Command::new("mpirun");
    c.args([
        "--allow-run-as-root",
        "--oversubscribe",
        "-np",
        &n.to_string(),
    ])
    .args([
        "--mca",
        "btl",
        "self,tcp",
        "--mca",
        "btl_tcp_if_include",
        "lo",
    ])
    .args(["--mca", "oob_tcp_if_include", "lo"])
    .args(["-x", "RAYON_NUM_THREADS=1", LMKIT])
    .args(args);
    c
}

fn run_mpi(n: usize, args: &[&str]) -> Output {
    mpirun(n, args).output().expect("run mpirun")
}

fn corpus(dir: &Path) -> PathBuf {
    let text: String = (0..400)
        .map(|i| format!("Line {i}: the quick brown fox jumps over the lazy dog.\n"))
        .collect();
    let p = dir.join("corpus.txt");
    std::fs::write(&p, text).unwrap();
    p
}

/// `(step, value)` of every metrics row holding `key`.
fn series(out: &Path, key: &str) -> Vec<(u64, f64)> {
    std::fs::read_to_string(out.join("metrics.jsonl"))
        .unwrap()
        .lines()
        .filter_map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            Some((v["step"].as_u64()?, v.get(key)?.as_f64()?))
        })
        .collect()
}

fn assert_close(a: &[(u64, f64)], b: &[(u64, f64)], what: &str) {
    assert_eq!(a.len(), b.len(), "{what}: {a:?} vs {b:?}");
    for (x, y) in a.iter().zip(b) {
        assert_eq!(x.0, y.0, "{what}");
        assert!(
            (x.1 - y.1).abs() <= 1e-5 * y.1.abs(),
            "{what} at step {}: {} vs {}",
            x.0,
            x.1,
            y.1
        );
    }
}

fn ok(o: &Output, what: &str) {
    assert!(
        o.status.success(),
        "{what}: {}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

fn base(tok: &str, data: &str, out: &Path, batch: &str, steps: &str) -> Vec<String> {
    [
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
        batch,
        "--grad-accum",
        "2",
        "--max-steps",
        steps,
        "--eval-every",
        "4",
        "--eval-batches",
        "4",
        "--save-every",
        "4",
        "--sample-every",
        "0",
        "--lr",
        "3e-3",
        "--val-fraction",
        "0.1",
        "--output",
        out.to_str().unwrap(),
    ]
    .map(String::from)
    .to_vec()
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

#[test]
fn two_ranks_equal_one_process_shard_and_resume() {
    let dir = tmpdir("mpi-equal");
    let tok = byte_tokenizer(&dir);
    let data = corpus(&dir);
    let (tok, data) = (tok.to_str().unwrap(), data.to_str().unwrap());

    let one = dir.join("one");
    ok(&lmkit(&strs(&base(tok, data, &one, "4", "8"))), "1 process");
    let two = dir.join("two");
    let o = run_mpi(2, &strs(&base(tok, data, &two, "2", "8")));
    ok(&o, "2 ranks");
    // Rank 0 alone prints; the start line shows the global batch.
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("4 (2 x 2 ranks) x 32 tokens"), "{err}");
    assert_eq!(err.matches("done at step 8").count(), 1, "{err}");

    let l1 = series(&one, "loss");
    assert_eq!(l1.len(), 8);
    assert_close(&series(&two, "loss"), &l1, "loss");
    assert_close(
        &series(&two, "grad_norm"),
        &series(&one, "grad_norm"),
        "grad_norm",
    );
    assert_close(
        &series(&two, "val_loss"),
        &series(&one, "val_loss"),
        "val_loss",
    );
    let comm = series(&two, "comm_s");
    assert_eq!(comm.len(), 8, "comm_s on every row of a 2-rank run");
    // The gradient all-reduce runs beside backward: the step waits for part.
    let wait = series(&two, "comm_wait_s");
    assert_eq!(wait.len(), 8, "comm_wait_s on every row");
    for ((_, w), (_, c)) in wait.iter().zip(&comm) {
        assert!((0.0..=c + 1e-9).contains(w), "comm_wait_s {w} > comm_s {c}");
    }

    // ZeRO-1: the same weights.
    let zero = dir.join("zero");
    let mut args = base(tok, data, &zero, "2", "8");
    args.push("--shard-optimizer".into());
    ok(&run_mpi(2, &strs(&args)), "--shard-optimizer");
    assert_close(
        &series(&zero, "loss"),
        &series(&two, "loss"),
        "sharded loss",
    );
    let w = |d: &Path| std::fs::read(d.join("model.safetensors")).unwrap();
    assert!(w(&zero) == w(&two), "--shard-optimizer changed the weights");

    // 4 steps on 2 ranks (sharded), the rest on 1 process: the same run.
    let cut = dir.join("cut");
    let mut args = base(tok, data, &cut, "2", "8");
    args.extend(["--stop-after", "4", "--shard-optimizer"].map(String::from));
    ok(&run_mpi(2, &strs(&args)), "2 ranks, stopped");
    assert_eq!(series(&cut, "loss").len(), 4);
    let out = cut.to_str().unwrap();
    ok(
        &lmkit(&["pretrain", "--output", out, "--resume"]),
        "resume on 1",
    );
    assert_close(&series(&cut, "loss"), &l1, "resumed loss");
}

/// A WordPiece vocabulary folder and documents (blank-line separated) for
/// `pretrain --arch bert`.
fn bert_inputs(dir: &Path) -> (PathBuf, PathBuf) {
    let tok = dir.join("wordpiece");
    std::fs::create_dir_all(&tok).unwrap();
    let words = "the quick brown fox jumps over lazy dog cat sleeps under warm sun bird sings";
    let mut vocab: Vec<String> = "[PAD] [UNK] [CLS] [SEP] [MASK] . a"
        .split(' ')
        .chain(words.split(' '))
        .map(String::from)
        .collect();
    vocab.extend(('0'..='9').flat_map(|d| [d.to_string(), format!("##{d}")]));
    std::fs::write(tok.join("vocab.txt"), vocab.join("\n") + "\n").unwrap();
    let w: Vec<&str> = words.split(' ').collect();
    let mut text = String::new();
    for d in 0..40 {
        for s in 0..(3 + d % 4) {
            let x = |k: usize| w[(d * 7 + s * 3 + k) % w.len()];
            text += &format!("a {} {} {} {} {d}{s} .\n", x(0), x(1), x(2), x(3));
        }
        text += "\n";
    }
    let data = dir.join("docs.txt");
    std::fs::write(&data, text).unwrap();
    (tok, data)
}

#[test]
fn bert_two_ranks_equal_one_process() {
    let dir = tmpdir("mpi-bert");
    let (tok, data) = bert_inputs(&dir);
    let (tok, data) = (tok.to_str().unwrap(), data.to_str().unwrap());
    let args = |out: &Path, batch: &str| {
        let mut a = base(tok, data, out, batch, "6");
        // GPT-2's sampling flag out, BERT's size in.
        let i = a.iter().position(|x| x == "--sample-every").unwrap();
        a.drain(i..i + 2);
        a.extend(["--arch", "bert", "--n-positions", "32"].map(String::from));
        a
    };
    let one = dir.join("one");
    ok(&lmkit(&strs(&args(&one, "4"))), "BERT, 1 process");
    let two = dir.join("two");
    let o = run_mpi(2, &strs(&args(&two, "2")));
    ok(&o, "BERT, 2 ranks");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("4 (2 x 2 ranks) x 32 tokens"), "{err}");
    for key in ["loss", "mlm_loss", "nsp_loss", "grad_norm", "val_loss"] {
        let want = series(&one, key);
        assert!(!want.is_empty(), "{key}");
        assert_close(&series(&two, key), &want, key);
    }
    // ZeRO-1: the same weights.
    let zero = dir.join("zero");
    let mut a = args(&zero, "2");
    a.push("--shard-optimizer".into());
    ok(&run_mpi(2, &strs(&a)), "BERT --shard-optimizer");
    let w = |d: &Path| std::fs::read(d.join("model.safetensors")).unwrap();
    assert!(
        w(&zero) == w(&two),
        "--shard-optimizer changed BERT's weights"
    );
    // The all-reduce after backward instead of beside it: the same buckets,
    // the same weights.
    let after = dir.join("after");
    let mut a = args(&after, "2");
    a.push("--no-comm-overlap".into());
    ok(&run_mpi(2, &strs(&a)), "BERT --no-comm-overlap");
    assert!(
        w(&after) == w(&two),
        "--no-comm-overlap changed BERT's weights"
    );
    for ((_, wait), (_, comm)) in series(&after, "comm_wait_s")
        .iter()
        .zip(&series(&after, "comm_s"))
    {
        assert_eq!(wait, comm, "without overlap the step waits for all of it");
    }
}

#[test]
fn finetune_two_ranks_equal_one_process_and_resume_on_one() {
    let dir = tmpdir("mpi-finetune");
    let model =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/bert-tiny-bare");
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
    let args = |out: &Path, batch: &str| -> Vec<String> {
        [
            "finetune",
            "--task",
            "token-classify",
            "--model",
            model.to_str().unwrap(),
            "--train",
            train.to_str().unwrap(),
            "--eval",
            eval.to_str().unwrap(),
            "--output",
            out.to_str().unwrap(),
            "--epochs",
            "2",
            "--batch-size",
            batch,
            "--lr",
            "3e-3",
            "--max-seq-len",
            "24",
        ]
        .map(String::from)
        .to_vec()
    };
    let one = dir.join("one");
    ok(&lmkit(&strs(&args(&one, "4"))), "finetune, 1 process");
    let two = dir.join("two");
    let o = run_mpi(2, &strs(&args(&two, "2")));
    ok(&o, "finetune, 2 ranks");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("2 ranks x 2 examples = a global batch of 4"),
        "{err}"
    );
    for key in ["loss", "grad_norm", "eval_loss", "eval_f1"] {
        let want = series(&one, key);
        assert!(!want.is_empty(), "{key}");
        assert_close(&series(&two, key), &want, key);
    }
    // 3 steps on 2 ranks (sharded), the rest on 1 process with batch 4.
    let cut = dir.join("cut");
    let mut a = args(&cut, "2");
    a.extend(["--max-steps", "3", "--shard-optimizer"].map(String::from));
    ok(&run_mpi(2, &strs(&a)), "finetune, 2 ranks, 3 steps");
    let mut a = args(&cut, "4");
    a.push("--resume".into());
    ok(&lmkit(&strs(&a)), "finetune resumed on 1");
    assert_close(&series(&cut, "loss"), &series(&one, "loss"), "resumed loss");
}

#[test]
fn other_commands_refuse_several_processes() {
    let o = run_mpi(2, &["completions", "bash"]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("only `pretrain` and `finetune` train data-parallel"),
        "{err}"
    );
}

/// The PID of rank `rank` among `mpirun`'s children.
fn rank_pid(mpirun: &Child, rank: usize) -> Option<u32> {
    let pid = mpirun.id();
    let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).ok()?;
    children.split_whitespace().find_map(|c| {
        let env = std::fs::read(format!("/proc/{c}/environ")).ok()?;
        let want = format!("OMPI_COMM_WORLD_RANK={rank}");
        env.split(|&b| b == 0)
            .any(|v| v == want.as_bytes())
            .then(|| c.parse().ok())
            .flatten()
    })
}

/// Starts a long 2-rank run, waits for step `at` in its metrics, sends
/// `signal` to rank 1, and returns how long the job took to end after that,
/// its stderr and exit status.
fn disrupt(dir: &Path, name: &str, signal: &str, extra: &[&str]) -> (Duration, String, bool) {
    let tok = byte_tokenizer(dir);
    let data = corpus(dir);
    let out = dir.join(name);
    let mut args = base(
        tok.to_str().unwrap(),
        data.to_str().unwrap(),
        &out,
        "2",
        "100000",
    );
    args.extend(extra.iter().map(|s| s.to_string()));
    let mut child = mpirun(2, &strs(&args))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("mpirun");
    let t0 = Instant::now();
    while series_len(&out) < 9 {
        assert!(t0.elapsed() < Duration::from_secs(120), "no progress");
        std::thread::sleep(Duration::from_millis(100));
    }
    let pid = rank_pid(&child, 1).expect("rank 1's pid");
    let sent = Instant::now();
    let s = Command::new("kill")
        .args([signal, &pid.to_string()])
        .status()
        .unwrap();
    assert!(s.success());
    // The job must end on its own; past 90 s it hangs (then: kill it, fail).
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if sent.elapsed() > Duration::from_secs(90) {
            let _ = child.kill();
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
            panic!("the job still runs 90 s after rank 1 got {signal}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let took = sent.elapsed();
    let o = child.wait_with_output().unwrap();
    // The last checkpoint is whole: one process resumes from it.
    let ck = out.join("checkpoints");
    let steps: Vec<_> = std::fs::read_dir(&ck)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("step-"))
        .collect();
    assert!(!steps.is_empty(), "no checkpoint");
    let r = lmkit(&[
        "pretrain",
        "--output",
        out.to_str().unwrap(),
        "--resume",
        "--stop-after",
        "1",
    ]);
    ok(&r, "resume after the failure");
    (
        took,
        String::from_utf8_lossy(&o.stderr).into_owned(),
        o.status.success(),
    )
}

fn series_len(out: &Path) -> usize {
    std::fs::read_to_string(out.join("metrics.jsonl"))
        .map(|t| t.lines().filter(|l| l.contains("\"loss\"")).count())
        .unwrap_or(0)
}

#[test]
fn a_killed_rank_ends_the_job_with_the_checkpoint_intact() {
    let dir = tmpdir("mpi-kill");
    let (took, err, success) = disrupt(&dir, "killed", "-9", &[]);
    assert!(!success);
    // mpirun names the rank that died.
    assert!(err.contains("rank 1"), "{err}");
    // The survivor, ended by mpirun, says where the run was.
    assert!(
        err.contains("error: rank 0 of 2: ended by the launcher at step "),
        "{err}"
    );
    assert!(took < Duration::from_secs(30), "took {took:?}");
}

#[test]
fn a_stalled_rank_ends_the_job_after_the_timeout() {
    let dir = tmpdir("mpi-stall");
    // SIGSTOP: rank 1 is alive but never reaches the next collective.
    let (took, err, success) = disrupt(&dir, "stalled", "-STOP", &["--comm-timeout", "5"]);
    assert!(!success);
    // Rank 0's watchdog names itself, the collective and the step.
    assert!(
        err.contains("error: rank 0 of 2: ") && err.contains(" at step "),
        "the watchdog's message: {err}"
    );
    assert!(took >= Duration::from_secs(4), "took {took:?}");
    assert!(took < Duration::from_secs(60), "took {took:?}");
}
