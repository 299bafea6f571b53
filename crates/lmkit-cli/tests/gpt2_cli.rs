//! The `lmkit generate` / `lmkit perplexity` contract scripts depend on: the
//! JSON fields, reproducible sampling, and clear errors. Runs the committed
//! tiny GPT-2 (vocabulary 128, 32 positions) with a byte-level tokenizer:
//! ASCII bytes are ids below 128.

mod common;

use std::path::{Path, PathBuf};

use common::{byte_tokenizer, lmkit, tmpdir};
use serde_json::Value;

fn tiny_gpt2() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/gpt2-tiny")
        .display()
        .to_string()
}

fn run_json(args: &[&str]) -> Value {
    let o = lmkit(args);
    assert!(
        o.status.success(),
        "lmkit {args:?} failed:\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let out = String::from_utf8(o.stdout).unwrap();
    serde_json::from_str(out.trim().lines().last().unwrap()).unwrap()
}

fn generate(tok: &Path, extra: &[&str]) -> Value {
    let model = tiny_gpt2();
    let tok = tok.display().to_string();
    let mut args = vec![
        "generate",
        "--model",
        &model,
        "--tokenizer",
        &tok,
        "--prompt",
        "Hello",
        "--max-new-tokens",
        "8",
        "--ignore-eos",
        "--json",
    ];
    args.extend_from_slice(extra);
    run_json(&args)
}

fn setup(name: &str) -> (PathBuf, PathBuf) {
    let dir = tmpdir(name);
    let tok = byte_tokenizer(&dir);
    (dir, tok)
}

#[test]
fn generate_json_fields_and_reproducible_sampling() {
    let (dir, tok) = setup("gen");
    for dtype in ["f32", "bf16", "int8"] {
        let g = generate(&tok, &["--greedy", "--dtype", dtype]);
        let ids = g["ids"].as_array().unwrap();
        assert_eq!(ids.len(), 8, "{g}");
        assert!(ids.iter().all(|i| i.as_u64().unwrap() < 128), "{g}");
        assert_eq!(g["prompt_tokens"], 5, "{g}");
        assert!(g["prefill_ms"].as_f64().unwrap() >= 0.0, "{g}");
        assert!(g["decode_tokens_per_s"].as_f64().unwrap() > 0.0, "{g}");
        // The text is the bytes of the new ids.
        let bytes: Vec<u8> = ids.iter().map(|i| i.as_u64().unwrap() as u8).collect();
        assert_eq!(g["text"], String::from_utf8_lossy(&bytes).as_ref(), "{g}");
    }
    // Sampling with a seed repeats; another seed (almost surely) differs.
    let sample = |seed: &str| {
        generate(
            &tok,
            &["--temperature", "1.5", "--top-k", "0", "--seed", seed],
        )["ids"]
            .clone()
    };
    assert_eq!(sample("7"), sample("7"));
    assert_ne!(sample("7"), sample("8"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn perplexity_json_scores_every_token_after_the_first() {
    let (dir, tok) = setup("ppl");
    let text = dir.join("text.txt");
    // 100 ASCII bytes = 100 tokens; windows of 32 positions.
    let text_bytes = "the cat sat on the mat. ".repeat(5).into_bytes();
    std::fs::write(&text, &text_bytes[..100]).unwrap();
    let p = run_json(&[
        "perplexity",
        "--model",
        &tiny_gpt2(),
        "--tokenizer",
        &tok.display().to_string(),
        "--input",
        &text.display().to_string(),
        "--stride",
        "16",
        "--json",
    ]);
    assert_eq!(p["tokens"], 99, "{p}");
    let (nll, ppl) = (
        p["nll"].as_f64().unwrap(),
        p["perplexity"].as_f64().unwrap(),
    );
    assert!(nll > 0.0 && (ppl - nll.exp()).abs() <= 1e-9 * ppl, "{p}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bad_generate_input_is_a_clear_error() {
    let (dir, tok) = setup("bad");
    let tok = tok.display().to_string();
    let model = tiny_gpt2();
    let err = |args: &[&str]| {
        let o = lmkit(args);
        assert!(!o.status.success(), "lmkit {args:?} should fail");
        String::from_utf8_lossy(&o.stderr).into_owned()
    };
    let long = "x".repeat(40);
    let base = ["generate", "--model", &model, "--tokenizer", &tok];
    let e = err(&[&base[..], &["--prompt", "hi", "--dtype", "f16"]].concat());
    assert!(e.contains("f16"), "{e}");
    let e = err(&[&base[..], &["--prompt", &long]].concat());
    assert!(e.contains("32"), "names the context size: {e}");
    // --truncate keeps the end of the prompt instead.
    let g = run_json(
        &[
            &base[..],
            &[
                "--prompt",
                &long,
                "--truncate",
                "--max-new-tokens",
                "4",
                "--json",
            ],
        ]
        .concat(),
    );
    assert_eq!(g["ids"].as_array().unwrap().len(), 4, "{g}");
    let e = err(&[
        "generate",
        "--model",
        &dir.join("missing").display().to_string(),
        "--prompt",
        "hi",
    ]);
    assert!(e.contains("missing"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}
