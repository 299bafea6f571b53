//! lmkit's compiled tokenizer form: a compiled GPT-2 is the same tokenizer
//! as the one read from its text files (ids on real and adversarial text,
//! every token both ways, the files it saves). The cache is off in this
//! binary, so the reference is always parsed from the text files
//! (`bpe_cache.rs` tests the cache).

mod bpe_common;

use std::path::{Path, PathBuf};

use bpe_common::{adversarial, assets, corpus_docs};
use lmkit_tokenizers::bpe::byte_level;
use lmkit_tokenizers::BpeTokenizer;

/// Turns the cache off (every test here calls it first; all set the same).
fn uncached() {
    std::env::set_var("LMKIT_CACHE_DIR", "");
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("lmkit-compiled-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A vocab.json of the 256 bytes at ids `first..`, then `extra`, and a merges.txt.
fn write_tokenizer(dir: &Path, first: u32, extra: &[(&str, u32)], merges: &str) {
    let vocab: std::collections::BTreeMap<String, u32> = (0..=255u8)
        .map(|b| (byte_level::bytes_to_token(&[b]), first + b as u32))
        .chain(extra.iter().map(|&(t, id)| (t.to_string(), id)))
        .collect();
    std::fs::write(
        dir.join("vocab.json"),
        serde_json::to_string(&vocab).unwrap(),
    )
    .unwrap();
    std::fs::write(dir.join("merges.txt"), merges).unwrap();
}

/// `a` and `b` are the same tokenizer: ids of every text (with and without
/// special tokens), each id's token and bytes both ways, the merges, and the
/// files each saves.
fn assert_same(name: &str, a: &BpeTokenizer, b: &BpeTokenizer, texts: &[String]) {
    for t in texts {
        for special in [false, true] {
            assert_eq!(
                a.encode(t.as_bytes(), special),
                b.encode(t.as_bytes(), special),
                "{:?}",
                &t[..t.len().min(80)]
            );
        }
    }
    assert_eq!(a.vocab_size(), b.vocab_size());
    assert_eq!(a.merges(), b.merges());
    assert_eq!(
        a.special_tokens().collect::<Vec<_>>(),
        b.special_tokens().collect::<Vec<_>>()
    );
    for id in 0..a.vocab_size() as u32 + 2 {
        assert_eq!(a.id_to_token(id), b.id_to_token(id), "{id}");
        assert_eq!(a.token_bytes(id), b.token_bytes(id), "{id}");
        if let Some(t) = a.id_to_token(id) {
            assert_eq!(b.token_to_id(t), Some(id), "{t:?}");
        }
    }
    let (da, db) = (scratch(&format!("{name}-a")), scratch(&format!("{name}-b")));
    a.save(&da).unwrap();
    b.save(&db).unwrap();
    for f in ["vocab.json", "merges.txt", "tokenizer.json"] {
        assert!(
            std::fs::read(da.join(f)).unwrap() == std::fs::read(db.join(f)).unwrap(),
            "{f} differs"
        );
    }
}

#[test]
fn compiled_gpt2_is_the_same_tokenizer() {
    uncached();
    let gpt2 = BpeTokenizer::from_dir(assets().join("gpt2")).unwrap();
    let mut texts = corpus_docs();
    texts.truncate(40);
    texts.extend(adversarial());
    let dir = scratch("gpt2");
    let path = dir.join("gpt2.lmbpe");
    gpt2.save_compiled(&path).unwrap();
    let compiled = BpeTokenizer::from_compiled(&path).unwrap();
    assert_same("gpt2", &gpt2, &compiled, &texts);
    let from_memory = BpeTokenizer::from_compiled_bytes(&std::fs::read(&path).unwrap()).unwrap();
    assert_eq!(
        from_memory.encode_ordinary(texts[0].as_bytes()),
        gpt2.encode_ordinary(texts[0].as_bytes())
    );
    // The fuzz target's seed: a small tokenizer in the current format.
    let tiny = scratch("tiny");
    write_tokenizer(&tiny, 0, &[("ab", 256), ("<|endoftext|>", 257)], "a b\n");
    let t = BpeTokenizer::from_dir(&tiny).unwrap();
    let seed = assets().join("../fuzz/corpus/bpe_parse_compiled/tiny.lmbpe");
    let mut written = tiny.join("tiny.lmbpe");
    t.save_compiled(&written).unwrap();
    if std::env::var_os("LMKIT_WRITE_FUZZ_SEED").is_some() {
        std::fs::create_dir_all(seed.parent().unwrap()).unwrap();
        std::fs::copy(&written, &seed).unwrap();
        written = seed.clone();
    }
    assert_eq!(
        std::fs::read(&written).unwrap(),
        std::fs::read(&seed).unwrap_or_default(),
        "fuzz/corpus/bpe_parse_compiled/tiny.lmbpe is not in the current format: \
         rerun this test with LMKIT_WRITE_FUZZ_SEED=1"
    );
}

/// Holes in the ids and added special tokens (from a tokenizer.json) keep
/// their places in the compiled form.
#[test]
fn holes_and_added_tokens_survive_compiling() {
    uncached();
    let dir = scratch("holes");
    write_tokenizer(&dir, 3, &[("ab", 300), ("abc", 261)], "a b\nab c\n");
    let mut t = BpeTokenizer::from_dir(&dir).unwrap();
    t.save(&dir).unwrap();
    // Add two special tokens to its tokenizer.json, one past the end.
    let json_path = dir.join("tokenizer.json");
    let mut json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json_path).unwrap()).unwrap();
    json["added_tokens"] = serde_json::json!([
        {"id": 0, "content": "<|pad|>", "single_word": false, "lstrip": false,
         "rstrip": false, "normalized": false, "special": true},
        {"id": 400, "content": "<|end|>", "single_word": false, "lstrip": false,
         "rstrip": false, "normalized": false, "special": true},
    ]);
    std::fs::write(&json_path, json.to_string()).unwrap();
    t = BpeTokenizer::from_tokenizer_json(&json_path).unwrap();
    assert_eq!(t.vocab_size(), 401);
    let path = dir.join("t.lmbpe");
    t.save_compiled(&path).unwrap();
    let c = BpeTokenizer::from_compiled(&path).unwrap();
    let texts: Vec<String> = ["abc<|end|>ab <|pad|>x\u{e9}", "", "<|end|><|end|>"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_same("holes", &t, &c, &texts);
    assert_eq!(c.encode_ids(b"<|pad|>abc<|end|>", true), [0, 261, 400]);
    assert_eq!(c.id_to_token(2), None, "a hole");
}
