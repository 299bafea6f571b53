//! Finds the `.tiktoken` rank files of the `tiktoken-rs` crate (a
//! dependency, so cargo has unpacked its sources before this runs) for
//! `src/openai.rs` to build in; `LMKIT_TIKTOKEN_ASSETS` names another
//! folder holding them (vendored or offline builds).

use std::path::PathBuf;

/// The tiktoken-rs version whose files are built in (= Cargo.toml's pin).
const TIKTOKEN_RS: &str = "tiktoken-rs-0.12.1";
const FILES: [&str; 4] = [
    "r50k_base.tiktoken",
    "p50k_base.tiktoken",
    "cl100k_base.tiktoken",
    "o200k_base.tiktoken",
];

fn candidates() -> Vec<PathBuf> {
    if let Some(dir) = std::env::var_os("LMKIT_TIKTOKEN_ASSETS") {
        return vec![PathBuf::from(dir)];
    }
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")));
    let mut dirs = Vec::new();
    if let Some(home) = home {
        if let Ok(registries) = std::fs::read_dir(home.join("registry").join("src")) {
            for r in registries.flatten() {
                dirs.push(r.path().join(TIKTOKEN_RS).join("assets"));
            }
        }
    }
    // A `cargo vendor` tree beside the workspace.
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
    dirs.push(manifest.join("../../vendor/tiktoken-rs/assets"));
    dirs
}

fn main() {
    println!("cargo:rerun-if-env-changed=LMKIT_TIKTOKEN_ASSETS");
    println!("cargo:rerun-if-changed=build.rs");
    let tried = candidates();
    let Some(dir) = tried
        .iter()
        .find(|d| FILES.iter().all(|f| d.join(f).is_file()))
    else {
        panic!(
            "lmkit-tokenizers: the .tiktoken rank files of {TIKTOKEN_RS} were not found \
             (tried {tried:?}); set LMKIT_TIKTOKEN_ASSETS to a folder holding {FILES:?}"
        );
    };
    let dir = dir.canonicalize().unwrap_or_else(|_| dir.clone());
    println!("cargo:rustc-env=LMKIT_TIKTOKEN_ASSETS={}", dir.display());
}
