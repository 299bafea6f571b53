//! Shared by the targets: a per-process scratch folder and a splitter that
//! turns one fuzz input into several files (parts separated by NUL bytes).
#![allow(dead_code)]

use std::path::PathBuf;

pub fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("lmkit-fuzz-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// The first `n` NUL-separated parts of `data` (missing parts are empty).
pub fn parts(data: &[u8], n: usize) -> Vec<&[u8]> {
    let mut out: Vec<&[u8]> = data.splitn(n, |&b| b == 0).collect();
    out.resize(n, &[]);
    out
}
