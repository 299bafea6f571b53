//! Helpers shared by the CLI integration tests.
#![allow(dead_code)] // each test binary uses a part of these

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Runs the `lmkit` binary on 2 threads.
pub fn lmkit(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lmkit"))
        .args(args)
        .env("RAYON_NUM_THREADS", "2")
        .output()
        .expect("run lmkit")
}

/// A fresh, empty scratch folder for one test.
pub fn tmpdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("lmkit-cli-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A byte-level GPT-2 tokenizer with no merges in `dir/tok`: the 256 byte
/// tokens (spelt with GPT-2's bytes_to_unicode) + `<|endoftext|>`.
pub fn byte_tokenizer(dir: &Path) -> PathBuf {
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
    tok
}

/// `dir/tiny`: the committed tiny GPT-2 fixture (vocab 128) with the byte
/// tokenizer above (its ids below 128 are the ASCII bytes).
pub fn gpt2_tiny(dir: &Path) -> PathBuf {
    let m = dir.join("tiny");
    std::fs::create_dir_all(&m).unwrap();
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/gpt2-tiny");
    for f in ["config.json", "model.safetensors"] {
        std::fs::copy(fixture.join(f), m.join(f)).unwrap();
    }
    let tok = byte_tokenizer(dir);
    for f in ["vocab.json", "merges.txt"] {
        std::fs::copy(tok.join(f), m.join(f)).unwrap();
    }
    m
}

/// `lmkit args` with `stdin` on its standard input: (exit code, stdout, stderr).
pub fn lmkit_stdin(args: &[&str], stdin: &[u8]) -> (Option<i32>, String, String) {
    use std::io::Write;
    use std::process::Stdio;
    let mut child = Command::new(env!("CARGO_BIN_EXE_lmkit"))
        .args(args)
        .env("RAYON_NUM_THREADS", "2")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run lmkit");
    // A command that does not read stdin may exit before it is written
    // (a broken pipe): that is not the test's failure.
    let _ = child.stdin.take().unwrap().write_all(stdin);
    let o = child.wait_with_output().unwrap();
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// Removes a test's scratch folder when the test ends (kept when it fails,
/// for a look at what it left).
pub struct Cleanup(pub PathBuf);

impl Drop for Cleanup {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}
