//! Conventions every command keeps (docs/cli.md): `--model` takes a hub
//! name on every model command (here against a fake local HF cache), and a
//! name that is nowhere says how to get it.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::tmpdir;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `lmkit args` with `HF_HUB_CACHE=cache` (and no other cache variable).
fn with_cache(cache: &Path, args: &[&str]) -> (bool, String, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_lmkit"))
        .args(args)
        .env("RAYON_NUM_THREADS", "2")
        .env("HF_HUB_CACHE", cache)
        .env_remove("HF_HOME")
        .env_remove("XDG_CACHE_HOME")
        .env("HOME", cache.join("home"))
        .output()
        .expect("run lmkit");
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// Copies `src` into the cache as hub model `org/name` (refs/main → a commit).
fn cache_model(cache: &Path, name: &str, src: &Path) {
    let repo = cache.join(format!("models--{}", name.replace('/', "--")));
    let commit = "0123456789abcdef0123456789abcdef01234567";
    let snap = repo.join("snapshots").join(commit);
    copy_dir(src, &snap);
    std::fs::create_dir_all(repo.join("refs")).unwrap();
    std::fs::write(repo.join("refs/main"), commit).unwrap();
}

fn copy_dir(src: &Path, dst: &Path) {
    std::fs::create_dir_all(dst).unwrap();
    for e in std::fs::read_dir(src).unwrap() {
        let p = e.unwrap().path();
        let to = dst.join(p.file_name().unwrap());
        if p.is_dir() {
            copy_dir(&p, &to);
        } else {
            std::fs::copy(&p, &to).unwrap();
        }
    }
}

#[test]
fn every_model_command_takes_a_hub_name() {
    let dir = tmpdir("conv-hub");
    let cache = dir.join("hub");
    let fx = |n: &str| root().join("tests/fixtures").join(n);
    cache_model(&cache, "test/minilm", &root().join("assets/minilm"));
    cache_model(&cache, "test/cls", &fx("bert-tiny-classify"));
    cache_model(&cache, "test/mlm", &fx("bert-tiny-mlm"));
    cache_model(&cache, "test/qa", &fx("bert-tiny-qa"));
    let input = dir.join("in.txt");
    std::fs::write(&input, "the dog was very old\n").unwrap();
    let context = dir.join("ctx.txt");
    std::fs::write(&context, "the old man saw the dog by the river").unwrap();
    let i = input.to_str().unwrap();
    let c = context.to_str().unwrap();
    let cases: Vec<(&str, Vec<&str>, PathBuf)> = vec![
        (
            "test/minilm",
            vec!["embed", "--input", i],
            root().join("assets/minilm"),
        ),
        (
            "test/cls",
            vec!["classify", "--input", i, "--json"],
            fx("bert-tiny-classify"),
        ),
        (
            "test/mlm",
            vec!["fill-mask", "--text", "the dog was [MASK] old", "--json"],
            fx("bert-tiny-mlm"),
        ),
        (
            "test/qa",
            vec![
                "qa",
                "--question",
                "who saw the dog",
                "--context",
                c,
                "--json",
            ],
            fx("bert-tiny-qa"),
        ),
    ];
    for (name, args, folder) in cases {
        let mut by_name = args.clone();
        by_name.extend(["--model", name]);
        let (ok, out, err) = with_cache(&cache, &by_name);
        assert!(ok, "{by_name:?}: {err}");
        let mut by_folder = args.clone();
        by_folder.extend(["--model", folder.to_str().unwrap()]);
        let (ok, want, err) = with_cache(&cache, &by_folder);
        assert!(ok, "{by_folder:?}: {err}");
        assert_eq!(out, want, "{} by hub name = by folder", args[0]);
    }
    // A name that is in no cache: the error says what to give instead.
    let (ok, _, err) = with_cache(&cache, &["embed", "--model", "test/absent", "--input", i]);
    assert!(!ok);
    assert!(
        err.contains("test/absent") && err.contains("HF layout"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn completions_and_exit_codes() {
    let run = |args: &[&str]| {
        let o = common::lmkit(args);
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stdout).into_owned(),
        )
    };
    for shell in ["bash", "zsh", "fish"] {
        let (code, out) = run(&["completions", shell]);
        assert_eq!(code, Some(0), "{shell}");
        assert!(
            out.contains("lmkit") && out.contains("overlap"),
            "{shell}: {out}"
        );
    }
    // 2: a usage error (clap); 1: a failure of the command itself.
    assert_eq!(run(&["completions", "nosuchshell"]).0, Some(2));
    assert_eq!(run(&["embed", "--no-such-flag"]).0, Some(2));
    assert_eq!(run(&["embed", "--model", "/nonexistent/model"]).0, Some(1));
    // --threads is taken by every command, before or after its name.
    let minilm = root().join("assets/minilm");
    let m = minilm.to_str().unwrap();
    for args in [
        vec!["--threads", "1", "embed", "--model", m],
        vec!["embed", "--model", m, "--threads", "1"],
    ] {
        let (code, out, err) = common::lmkit_stdin(&args, b"threads\n");
        assert_eq!(code, Some(0), "{args:?}: {err}");
        assert!(out.starts_with('['), "{out}");
    }
    assert_eq!(run(&["--threads", "0", "embed", "--model", m]).0, Some(2));
}

/// `-` is standard input on every file argument; `generate` also takes
/// `--prompt -` and `--prompt-file`.
#[test]
fn dash_reads_stdin() {
    let dir = tmpdir("conv-stdin");
    let tiny = common::gpt2_tiny(&dir);
    let t = tiny.to_str().unwrap();
    let text = "Hello, wor";
    let file = dir.join("prompt.txt");
    std::fs::write(&file, text).unwrap();
    let f = file.to_str().unwrap();
    let gen = [
        "generate",
        "--model",
        t,
        "--greedy",
        "--max-new-tokens",
        "6",
        "--json",
    ];
    let run = |extra: &[&str], stdin: &str| {
        let mut args: Vec<&str> = gen.to_vec();
        args.extend(extra);
        let (code, out, err) = common::lmkit_stdin(&args, stdin.as_bytes());
        assert_eq!(code, Some(0), "{args:?}: {err}");
        // Timings and the clock seed differ from run to run: compare the tokens.
        let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
        (
            v["ids"].clone(),
            v["text"].clone(),
            v["prompt_tokens"].clone(),
        )
    };
    let want = run(&["--prompt", text], "");
    assert_eq!(run(&["--prompt", "-"], text), want);
    assert_eq!(run(&["--prompt-file", f], ""), want);
    assert_eq!(run(&["--prompt-file", "-"], text), want);
    // tokenize --input -, embed --input -, qa --context -, perplexity --input -.
    let tok = tiny.to_str().unwrap();
    let by_file = common::lmkit_stdin(&["tokenize", "--tokenizer", tok, "--input", f], b"");
    let by_dash = common::lmkit_stdin(
        &["tokenize", "--tokenizer", tok, "--input", "-"],
        text.as_bytes(),
    );
    assert_eq!(
        (by_dash.0, &by_dash.1),
        (Some(0), &by_file.1),
        "{}",
        by_dash.2
    );
    let minilm = root().join("assets/minilm");
    let m = minilm.to_str().unwrap();
    let lines = dir.join("lines.txt");
    std::fs::write(&lines, "a first text\na second one\n").unwrap();
    let by_file = common::lmkit_stdin(
        &["embed", "--model", m, "--input", lines.to_str().unwrap()],
        b"",
    );
    let by_dash = common::lmkit_stdin(
        &["embed", "--model", m, "--input", "-"],
        b"a first text\na second one\n",
    );
    assert_eq!(
        (by_dash.0, &by_dash.1),
        (Some(0), &by_file.1),
        "{}",
        by_dash.2
    );
    let qa = root().join("tests/fixtures/bert-tiny-qa");
    let q = qa.to_str().unwrap();
    let ctx = "the old man saw the dog by the river";
    let cfile = dir.join("ctx.txt");
    std::fs::write(&cfile, ctx).unwrap();
    let qargs = |c: &str| -> Vec<String> {
        [
            "qa",
            "--model",
            q,
            "--question",
            "who saw the dog",
            "--json",
            "--context",
            c,
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    };
    let a1: Vec<String> = qargs(cfile.to_str().unwrap());
    let a2: Vec<String> = qargs("-");
    let r1 = common::lmkit_stdin(&a1.iter().map(String::as_str).collect::<Vec<_>>(), b"");
    let r2 = common::lmkit_stdin(
        &a2.iter().map(String::as_str).collect::<Vec<_>>(),
        ctx.as_bytes(),
    );
    assert_eq!((r2.0, &r2.1), (Some(0), &r1.1), "{}", r2.2);
    let ppl = |input: &str, stdin: &[u8]| {
        common::lmkit_stdin(
            &["perplexity", "--model", t, "--input", input, "--json"],
            stdin,
        )
    };
    let (p1, p2) = (ppl(f, b""), ppl("-", text.as_bytes()));
    assert_eq!((p2.0, &p2.1), (Some(0), &p1.1), "{}", p2.2);
    assert!(p2.2.contains(" tokens scored in "), "{}", p2.2);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `--dtype` on every model command: f32, bf16 and int8 on both families.
#[test]
fn dtype_on_every_model_command() {
    let dir = tmpdir("conv-dtype");
    let tiny = common::gpt2_tiny(&dir);
    let fx = |n: &str| root().join("tests/fixtures").join(n);
    let ctx = dir.join("ctx.txt");
    std::fs::write(&ctx, "the old man saw the dog by the river").unwrap();
    let (t, m) = (tiny.to_str().unwrap(), root().join("assets/minilm"));
    let (cls, mlm, qa) = (
        fx("bert-tiny-classify"),
        fx("bert-tiny-mlm"),
        fx("bert-tiny-qa"),
    );
    let bert: Vec<Vec<&str>> = vec![
        vec!["embed", "--model", m.to_str().unwrap()],
        vec!["classify", "--model", cls.to_str().unwrap()],
        vec![
            "fill-mask",
            "--model",
            mlm.to_str().unwrap(),
            "--text",
            "a [MASK] dog",
        ],
        vec![
            "qa",
            "--model",
            qa.to_str().unwrap(),
            "--question",
            "who",
            "--context",
            ctx.to_str().unwrap(),
        ],
    ];
    let gpt2: Vec<Vec<&str>> = vec![
        vec![
            "generate",
            "--model",
            t,
            "--prompt",
            "Hi",
            "--max-new-tokens",
            "3",
        ],
        vec!["perplexity", "--model", t, "--input", ctx.to_str().unwrap()],
    ];
    for c in bert.iter().chain(&gpt2) {
        for dtype in ["f32", "bf16", "int8", "auto"] {
            let mut args = c.clone();
            args.extend(["--dtype", dtype]);
            let (code, _, err) = common::lmkit_stdin(&args, b"a text\n");
            assert_eq!(code, Some(0), "{args:?}: {err}");
            // `auto` says what it chose and why, in one line; a fixed format says nothing.
            let said: Vec<_> = err
                .lines()
                .filter(|l| l.starts_with("dtype auto: "))
                .collect();
            if dtype == "auto" {
                assert_eq!(said.len(), 1, "{args:?}: {err}");
                let chosen = said[0]["dtype auto: ".len()..].split(' ').next().unwrap();
                assert!(["f32", "bf16", "int8"].contains(&chosen), "{err}");
                assert!(
                    said[0].contains("f32's speed") || said[0].contains("only format"),
                    "{err}"
                );
            } else {
                assert!(said.is_empty(), "{args:?}: {err}");
            }
        }
        // An unknown format is a clear error.
        let mut args = c.clone();
        args.extend(["--dtype", "f8"]);
        let (code, _, err) = common::lmkit_stdin(&args, b"a text\n");
        assert_eq!(code, Some(1), "{args:?}");
        assert!(err.contains("f8") && !err.contains("panicked"), "{err}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Compressed inputs (`.gz`, `.zst`) read as their text wherever a text
/// file is read: tokenize, overlap (training and evaluation, text and JSONL).
#[test]
fn compressed_inputs_read_as_their_text() {
    use std::io::Write;
    let dir = tmpdir("conv-compressed");
    let text = std::fs::read_to_string(root().join("assets/books/corpus.txt")).unwrap();
    let text: String = text.chars().take(200_000).collect();
    let gz = |name: &str, body: &str| {
        let p = dir.join(name);
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(body.as_bytes()).unwrap();
        std::fs::write(&p, e.finish().unwrap()).unwrap();
        p
    };
    let zst = |name: &str, body: &str| {
        let p = dir.join(name);
        let packed = ruzstd::encoding::compress_to_vec(
            body.as_bytes(),
            ruzstd::encoding::CompressionLevel::Fastest,
        );
        std::fs::write(&p, packed).unwrap();
        p
    };
    let plain = dir.join("train.txt");
    std::fs::write(&plain, &text).unwrap();
    let (tgz, tzst) = (gz("train.txt.gz", &text), zst("train.txt.zst", &text));
    let tok = root().join("assets/gpt2");
    let ids = |p: &Path| {
        let (code, out, err) = common::lmkit_stdin(
            &[
                "tokenize",
                "--tokenizer",
                tok.to_str().unwrap(),
                "--input",
                p.to_str().unwrap(),
            ],
            b"",
        );
        assert_eq!(code, Some(0), "{err}");
        out
    };
    let want = ids(&plain);
    assert_eq!(ids(&tgz), want);
    assert_eq!(ids(&tzst), want);
    // Evaluation documents as JSONL, compressed; the filter from compressed text.
    let rows: String = text
        .split("\n\n")
        .skip(100)
        .take(50)
        .map(|d| format!("{}\n", serde_json::json!({ "text": d })))
        .collect();
    let ev_plain = dir.join("eval.jsonl");
    std::fs::write(&ev_plain, &rows).unwrap();
    let ev_zst = zst("eval.jsonl.zst", &rows);
    let report = |train: &Path, eval: &Path| {
        let (code, out, err) = common::lmkit_stdin(
            &[
                "overlap",
                "--train",
                train.to_str().unwrap(),
                "--eval",
                eval.to_str().unwrap(),
                "--json",
            ],
            b"",
        );
        assert_eq!(code, Some(0), "{err}");
        let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
        v["eval"]["per_document"].clone()
    };
    let want = report(&plain, &ev_plain);
    assert_eq!(want.as_array().unwrap().len(), 50);
    assert_eq!(report(&tgz, &ev_zst), want);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `embed` takes JSONL (a text may span lines) and writes `.npy` on request
/// (float32, NumPy's format 1.0; checked by hand with `numpy.load`).
#[test]
fn embed_reads_jsonl_and_writes_npy() {
    let dir = tmpdir("conv-npy");
    let minilm = root().join("assets/minilm");
    let m = minilm.to_str().unwrap();
    let texts = ["A man\nis eating food.", "Someone is having a meal."];
    let jsonl = dir.join("in.jsonl");
    let rows: Vec<String> = texts
        .iter()
        .map(|t| serde_json::json!({ "text": t, "id": 1 }).to_string())
        .collect();
    std::fs::write(&jsonl, rows.join("\n")).unwrap();
    let (code, out, err) = common::lmkit_stdin(
        &["embed", "--model", m, "--input", jsonl.to_str().unwrap()],
        b"",
    );
    assert_eq!(code, Some(0), "{err}");
    // stderr is not a terminal: no bar, a summary line (no progress line
    // for a job shorter than 10 s).
    assert!(
        err.starts_with("[00:00:0")
            && err.contains("] 2 texts embedded in ")
            && err.contains(" texts/s)"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    let got: Vec<Vec<f32>> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let p = lmkit::models::bert::BertPipeline::from_dir(&minilm).unwrap();
    let want = p.embed(&texts, &Default::default()).unwrap();
    assert_eq!(got.len(), 2);
    for (g, w) in got.iter().zip(&want) {
        let d = g
            .iter()
            .zip(w)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        assert!(d < 1e-6, "the multi-line text is one text: {d}");
    }
    // stdin with --jsonl and another field.
    let (code, out2, err) = common::lmkit_stdin(
        &["embed", "--model", m, "--jsonl", "--text-field", "t"],
        format!("{}\n", serde_json::json!({ "t": texts[0] })).as_bytes(),
    );
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out2.lines().next(), out.lines().next());
    // .npy: header, shape, the same numbers; never over an existing file.
    let npy = dir.join("e.npy");
    let args = [
        "embed",
        "--model",
        m,
        "--input",
        jsonl.to_str().unwrap(),
        "--npy",
        npy.to_str().unwrap(),
    ];
    let (code, _, err) = common::lmkit_stdin(&args, b"");
    assert_eq!(code, Some(0), "{err}");
    assert!(
        err.contains("2 texts embedded in ")
            && err.contains("384 dimensions each, written to ")
            && err.contains("e.npy"),
        "{err}"
    );
    let bytes = std::fs::read(&npy).unwrap();
    assert_eq!(&bytes[..8], b"\x93NUMPY\x01\x00");
    let hlen = u16::from_le_bytes([bytes[8], bytes[9]]) as usize;
    assert_eq!((10 + hlen) % 64, 0, "the header is padded to 64 bytes");
    let header = std::str::from_utf8(&bytes[10..10 + hlen]).unwrap();
    assert!(
        header.contains("'descr': '<f4'") && header.contains("'shape': (2, 384)"),
        "{header}"
    );
    let data: Vec<f32> = bytes[10 + hlen..]
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    assert_eq!(data, got.concat());
    let (code, _, err) = common::lmkit_stdin(&args, b"");
    assert_eq!(code, Some(1));
    assert!(err.contains("exists"), "{err}");
    // `--npy -`: the same bytes on stdout (not a terminal here).
    let mut to_stdout = args;
    to_stdout[6] = "-";
    let o = common::lmkit(&to_stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(o.stdout, bytes);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `classify` reads JSONL rows `{"text", "text_pair"?}`: a row with a pair
/// is classified as the pair (`tokenizer(a, b)`), in input order.
#[test]
fn classify_reads_jsonl_pairs() {
    let dir = tmpdir("conv-pairs");
    let cls = root().join("tests/fixtures/bert-tiny-classify");
    let c = cls.to_str().unwrap();
    let rows = [
        serde_json::json!({"text": "the dog was very old"}),
        serde_json::json!({"text": "the king was good", "text_pair": "a bad day"}),
        serde_json::json!({"text": "paris is in france", "text_pair": null}),
    ];
    let jsonl = dir.join("in.jsonl");
    let body: Vec<String> = rows.iter().map(|r| r.to_string()).collect();
    std::fs::write(&jsonl, body.join("\n")).unwrap();
    let (code, out, err) = common::lmkit_stdin(
        &[
            "classify",
            "--model",
            c,
            "--input",
            jsonl.to_str().unwrap(),
            "--json",
        ],
        b"",
    );
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains("] 3 rows classified in "), "{err}");
    let got: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(got.len(), 3);
    let p = lmkit::models::bert::BertPipeline::from_dir(&cls).unwrap();
    let singles = p
        .classify(&["the dog was very old", "paris is in france"], 8, false)
        .unwrap();
    let pair = p
        .classify_pairs(&[("the king was good", "a bad day")], 8, false)
        .unwrap();
    for (g, w) in [
        (&got[0], &singles[0]),
        (&got[1], &pair[0]),
        (&got[2], &singles[1]),
    ] {
        assert_eq!(g["label"], serde_json::json!(w[0].label), "{g}");
        assert!(
            (g["score"].as_f64().unwrap() - w[0].score as f64).abs() < 1e-6,
            "{g}"
        );
    }
    // The pair's scores are the softmax of its logits (score_pairs).
    let logits = &p
        .score_pairs(&[("the king was good", "a bad day")], 8, false)
        .unwrap()[0];
    let max = logits.iter().cloned().fold(f32::MIN, f32::max);
    let z: f32 = logits.iter().map(|l| (l - max).exp()).sum();
    assert!((pair[0][0].score - 1.0 / z).abs() < 1e-5);
    // The same rows from stdin with --jsonl.
    let (code, out2, err) = common::lmkit_stdin(
        &["classify", "--model", c, "--jsonl", "--json"],
        body.join("\n").as_bytes(),
    );
    assert_eq!((code, &out2), (Some(0), &out), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}
