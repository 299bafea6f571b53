//! The cache of compiled tokenizers: used, refreshed when damaged, keyed by
//! the sources' bytes, skipped for small vocabularies, off when
//! `LMKIT_CACHE_DIR` is empty, and where the docs say it is. One test: it
//! sets the environment.

mod bpe_common;

use std::path::{Path, PathBuf};

use bpe_common::{assets, corpus_docs};
use lmkit_tokenizers::bpe::cache_dir;
use lmkit_tokenizers::train_bpe::{BpeTrainer, BpeTrainerOptions};
use lmkit_tokenizers::{BpeTokenizer, Tokenizer};

fn entries(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|r| r.map(|e| e.unwrap().path()).collect())
        .unwrap_or_default();
    v.sort();
    v
}

#[test]
fn cache_is_used_refreshed_and_bypassed() {
    let root = std::env::temp_dir().join(format!("lmkit-cache-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let cache = root.join("cache");
    std::env::set_var("LMKIT_CACHE_DIR", &cache);
    assert_eq!(cache_dir(), Some(cache.clone()));
    let gpt2_dir = assets().join("gpt2");
    let first = BpeTokenizer::from_dir(&gpt2_dir).unwrap();
    let made = entries(&cache);
    assert_eq!(made.len(), 1, "{made:?}");
    let text = corpus_docs().swap_remove(3);
    let written = std::fs::metadata(&made[0]).unwrap().modified().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(20));
    let again = BpeTokenizer::from_dir(&gpt2_dir).unwrap();
    let modified = std::fs::metadata(&made[0]).unwrap().modified().unwrap();
    assert_eq!(modified, written, "a hit does not write the entry again");
    assert_eq!(
        again.encode_ordinary(text.as_bytes()),
        first.encode_ordinary(text.as_bytes())
    );
    // A damaged entry is passed over and written anew.
    let mut data = std::fs::read(&made[0]).unwrap();
    let mid = data.len() / 2;
    data[mid] ^= 0xFF;
    std::fs::write(&made[0], &data).unwrap();
    let mended = BpeTokenizer::from_dir(&gpt2_dir).unwrap();
    assert_eq!(
        mended.encode_ordinary(text.as_bytes()),
        first.encode_ordinary(text.as_bytes())
    );
    assert_ne!(std::fs::read(&made[0]).unwrap(), data, "rewritten");
    assert!(BpeTokenizer::from_compiled(&made[0]).is_ok());
    // Edited sources are a new entry, never the old one.
    let edited = root.join("edited");
    std::fs::create_dir_all(&edited).unwrap();
    std::fs::copy(gpt2_dir.join("vocab.json"), edited.join("vocab.json")).unwrap();
    let merges = std::fs::read_to_string(gpt2_dir.join("merges.txt")).unwrap();
    let cut: Vec<&str> = merges.lines().take(30_000).collect();
    std::fs::write(edited.join("merges.txt"), cut.join("\n")).unwrap();
    let fewer = BpeTokenizer::from_dir(&edited).unwrap();
    assert_eq!(
        fewer.merges().len(),
        30_000 - 1,
        "the header line is not a merge"
    );
    assert_eq!(entries(&cache).len(), 2);
    // tokenizer.json: cached too, through `Tokenizer` as well.
    let saved = root.join("saved");
    first.save(&saved).unwrap();
    let json = saved.join("tokenizer.json");
    let via_json = Tokenizer::from_tokenizer_json(&json).unwrap();
    assert_eq!(entries(&cache).len(), 3);
    let via_json_again = BpeTokenizer::from_tokenizer_json(&json).unwrap();
    assert_eq!(entries(&cache).len(), 3);
    let ids = first.encode_ordinary(text.as_bytes());
    assert_eq!(via_json.encode_ids(text.as_bytes(), false).unwrap(), ids);
    assert_eq!(via_json_again.encode_ordinary(text.as_bytes()), ids);
    // Small vocabularies are not cached.
    let tiny = root.join("tiny");
    std::fs::create_dir_all(&tiny).unwrap();
    let mut trainer = BpeTrainer::new(BpeTrainerOptions {
        vocab_size: 300,
        ..Default::default()
    })
    .unwrap();
    trainer.feed(text.as_bytes());
    let small = trainer.train(|_, _| {}).unwrap();
    small.save(&tiny).unwrap();
    BpeTokenizer::from_dir(&tiny).unwrap();
    assert_eq!(entries(&cache).len(), 3);
    // Empty: off.
    std::env::set_var("LMKIT_CACHE_DIR", "");
    assert_eq!(cache_dir(), None);
    std::fs::remove_dir_all(&cache).unwrap();
    BpeTokenizer::from_dir(&gpt2_dir).unwrap();
    assert!(!cache.exists(), "nothing written with the cache off");
    // Unset: $XDG_CACHE_HOME/lmkit, else ~/.cache/lmkit.
    std::env::remove_var("LMKIT_CACHE_DIR");
    std::env::set_var("XDG_CACHE_HOME", root.join("xdg"));
    assert_eq!(cache_dir(), Some(root.join("xdg/lmkit")));
    std::env::remove_var("XDG_CACHE_HOME");
    std::env::set_var("HOME", root.join("home"));
    assert_eq!(cache_dir(), Some(root.join("home/.cache/lmkit")));
    std::fs::remove_dir_all(&root).unwrap();
}
