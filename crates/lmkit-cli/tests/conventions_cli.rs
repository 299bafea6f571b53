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
}
