//! The tokenizer CLI contract: `tokenize` / `detokenize` / `train-tokenizer`.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

fn lmkit(args: &[&str], stdin: &[u8]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_lmkit"))
        .args(args)
        .env("RUST_BACKTRACE", "0")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run lmkit");
    // The command may exit (on an error) before reading its input.
    let _ = child.stdin.take().expect("stdin").write_all(stdin);
    child.wait_with_output().expect("lmkit output")
}

fn gpt2_dir() -> String {
    let dir = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../assets/gpt2"));
    assert!(
        dir.join("vocab.json").is_file(),
        "{} is missing: run scripts/fetch-assets.sh first",
        dir.display()
    );
    dir.display().to_string()
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("lmkit-cli-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn tokenize_detokenize_round_trip_any_bytes() {
    let dir = gpt2_dir();
    let text = b"Hello world<|endoftext|> \xff\xfe it's";
    let out = lmkit(&["tokenize", "--tokenizer", &dir], text);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        out.stdout,
        b"15496 995 27 91 437 1659 5239 91 29 220 187 186 340 338\n"
    );
    let special = lmkit(&["tokenize", "--tokenizer", &dir, "--special"], text);
    assert_eq!(special.stdout, b"15496 995 50256 220 187 186 340 338\n");
    let count = lmkit(&["tokenize", "--tokenizer", &dir, "--count"], text);
    assert_eq!(count.stdout, b"14\n");
    let back = lmkit(&["detokenize", "--tokenizer", &dir], &out.stdout);
    assert!(back.status.success());
    assert_eq!(back.stdout, text);

    let json = lmkit(&["tokenize", "--tokenizer", &dir, "--json"], b"Hi there");
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(v["ids"], serde_json::json!([17250, 612]));
    assert_eq!(v["tokens"], serde_json::json!(["Hi", "Ġthere"]));
    assert_eq!(v["offsets"], serde_json::json!([[0, 2], [2, 8]]));

    // Offsets count characters (as HF's Python tokenizers), or bytes with
    // --byte-offsets; a token holding part of a character covers all of it.
    // detokenize reads the JSON back.
    let text = "café 😀!";
    let chars: Vec<char> = text.chars().collect();
    let json = lmkit(
        &["tokenize", "--tokenizer", &dir, "--json"],
        text.as_bytes(),
    );
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    let offs: Vec<(usize, usize)> = serde_json::from_value(v["offsets"].clone()).unwrap();
    let bytes = lmkit(
        &["tokenize", "--tokenizer", &dir, "--json", "--byte-offsets"],
        text.as_bytes(),
    );
    let b: serde_json::Value = serde_json::from_slice(&bytes.stdout).unwrap();
    let boffs: Vec<(usize, usize)> = serde_json::from_value(b["offsets"].clone()).unwrap();
    assert_eq!(offs.len(), boffs.len());
    assert_eq!(offs.last().unwrap().1, chars.len());
    assert_eq!(boffs.last().unwrap().1, text.len());
    for ((s, e), (bs, be)) in offs.iter().zip(&boffs) {
        let piece: String = chars[*s..*e].iter().collect();
        // The character range holds the token's bytes.
        let start = text.char_indices().nth(*s).unwrap().0;
        assert!(
            start <= *bs && *be <= start + piece.len(),
            "{piece:?} {bs}..{be}"
        );
    }
    // HF: GPT2TokenizerFast(...)("café 😀!", return_offsets_mapping=True).
    assert_eq!(v["ids"], serde_json::json!([66, 1878, 2634, 30325, 222, 0]));
    assert_eq!(offs, [(0, 1), (1, 3), (3, 4), (4, 6), (5, 6), (6, 7)]);
    let back = lmkit(&["detokenize", "--tokenizer", &dir], &json.stdout);
    assert!(
        back.status.success(),
        "{}",
        String::from_utf8_lossy(&back.stderr)
    );
    assert_eq!(back.stdout, text.as_bytes());
}

#[test]
fn bad_input_is_a_clear_error() {
    let dir = gpt2_dir();
    let out = lmkit(&["detokenize", "--tokenizer", &dir], b"1 2 x");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("\"x\" (item 3) is not a token id"));
    let out = lmkit(&["detokenize", "--tokenizer", &dir], b"99999");
    assert!(String::from_utf8_lossy(&out.stderr).contains("out of range"));

    let bad = scratch("bad");
    std::fs::write(bad.join("vocab.json"), "{\n  \"a\": 0,\n  \"b\": x\n}\n").unwrap();
    std::fs::write(bad.join("merges.txt"), "").unwrap();
    let out = lmkit(&["tokenize", "--tokenizer", bad.to_str().unwrap()], b"hi");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("vocab.json:3:"), "{err}");
}

#[test]
fn train_tokenizer_writes_a_loadable_round_tripping_bpe() {
    let dir = scratch("train");
    let corpus = dir.join("corpus.txt");
    let text = "The quick brown fox jumps over the lazy dog. It's 2024!\n".repeat(300)
        + "Pack my box with five dozen liquor jugs; héllo wörld 漢字\n";
    std::fs::write(&corpus, &text).unwrap();
    let out_dir = dir.join("tok");
    let out = lmkit(
        &[
            "train-tokenizer",
            "--kind",
            "bpe",
            "--vocab-size",
            "300",
            "--output",
            out_dir.to_str().unwrap(),
            corpus.to_str().unwrap(),
        ],
        b"",
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for f in ["vocab.json", "merges.txt", "tokenizer.json"] {
        assert!(out_dir.join(f).is_file(), "{f} missing");
    }
    let tok = out_dir.to_str().unwrap();
    let ids = lmkit(
        &[
            "tokenize",
            "--tokenizer",
            tok,
            "--input",
            corpus.to_str().unwrap(),
        ],
        b"",
    );
    let n: usize = String::from_utf8_lossy(&ids.stdout)
        .split_whitespace()
        .count();
    assert!(n * 3 < text.len(), "{n} tokens for {} bytes", text.len());
    let back = lmkit(&["detokenize", "--tokenizer", tok], &ids.stdout);
    assert_eq!(back.stdout, text.as_bytes());
}

/// `--tokenizer NAME` of an OpenAI encoding: built in, tiktoken's ids
/// (cl100k's and o200k's own pre-tokenization: `HELLOworld` is one piece of
/// o200k), and detokenize reads them back.
#[test]
fn openai_encodings_by_name() {
    let text = b"HELLOworld it's <|endoftext|>";
    for (name, ordinary, special) in [
        (
            "cl100k_base",
            "51812 1623 14957 433 596 83739 8862 728 428 91 29\n",
            "51812 1623 14957 433 596 220 100257\n",
        ),
        (
            "o200k_base",
            "111642 2699 24169 4275 464 91 419 1440 919 91 29\n",
            "111642 2699 24169 4275 220 199999\n",
        ),
    ] {
        let out = lmkit(&["tokenize", "--tokenizer", name], text);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(String::from_utf8_lossy(&out.stdout), ordinary, "{name}");
        let out = lmkit(&["tokenize", "--tokenizer", name, "--special"], text);
        assert_eq!(String::from_utf8_lossy(&out.stdout), special, "{name}");
        let back = lmkit(&["detokenize", "--tokenizer", name], special.as_bytes());
        assert_eq!(back.stdout, text, "{name}");
    }
    let bad = lmkit(&["tokenize", "--tokenizer", "cl200k_base"], b"x");
    assert!(!bad.status.success());
}
