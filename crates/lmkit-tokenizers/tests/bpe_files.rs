//! Loading and saving: errors name the file and line; saved files load back
//! (ours and HF's formats); training writes a tokenizer that round-trips.

mod bpe_common;

use std::path::{Path, PathBuf};

use bpe_common::{assets, corpus_docs, gpt2};
use lmkit_tokenizers::train_bpe::{BpeTrainer, BpeTrainerOptions};
use lmkit_tokenizers::{BpeTokenizer, Error, Tokenizer};

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("lmkit-bpe-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A tiny valid vocabulary: all 256 bytes, then "ab", then "abc".
fn tiny(dir: &Path, extra_vocab: &str, merges: &str) {
    let mut vocab = String::from("{\n");
    for (i, b) in lmkit_tokenizers::bpe::byte_level::BYTE_ORDER
        .iter()
        .enumerate()
    {
        let t = lmkit_tokenizers::bpe::byte_level::bytes_to_token(&[*b]);
        vocab.push_str(&format!("  {}: {i},\n", serde_json::to_string(&t).unwrap()));
    }
    vocab.push_str(&format!(
        "  \"ab\": 256,\n  \"abc\": 257{extra_vocab}\n}}\n"
    ));
    std::fs::write(dir.join("vocab.json"), vocab).unwrap();
    std::fs::write(dir.join("merges.txt"), merges).unwrap();
}

fn parse_error(r: Result<BpeTokenizer, Error>) -> (PathBuf, usize, String) {
    match r {
        Err(Error::Parse {
            path,
            line,
            message,
        }) => (path, line, message),
        other => panic!("expected a parse error, got {other:?}"),
    }
}

#[test]
fn tiny_vocabulary_loads_and_merges() {
    let dir = scratch("tiny");
    tiny(&dir, "", "#version: 0.2\na b\nab c\n");
    let t = BpeTokenizer::from_dir(&dir).unwrap();
    assert_eq!(t.encode_ordinary(b"abc abcab"), [257, 220, 257, 256]);
    assert_eq!(t.vocab_size(), 258);
}

#[test]
fn errors_name_file_and_line() {
    let dir = scratch("errors");
    tiny(&dir, ",\n  \"a b\": 258", "a b\n");
    let (path, line, msg) = parse_error(BpeTokenizer::from_dir(&dir));
    assert!(path.ends_with("vocab.json"));
    assert_eq!(line, 260, "{msg}");
    assert!(msg.contains("byte-level alphabet"), "{msg}");

    tiny(&dir, ",\n  \"x\": oops", "a b\n");
    let (path, line, _) = parse_error(BpeTokenizer::from_dir(&dir));
    assert!(path.ends_with("vocab.json"));
    assert_eq!(line, 260);

    tiny(&dir, "", "#version: 0.2\na b\nab c d\n");
    let (path, line, msg) = parse_error(BpeTokenizer::from_dir(&dir));
    assert!(path.ends_with("merges.txt"));
    assert_eq!((line, msg.contains("two tokens")), (3, true), "{msg}");

    tiny(&dir, "", "a b\nab zz\n");
    let (path, line, msg) = parse_error(BpeTokenizer::from_dir(&dir));
    assert!(
        path.ends_with("merges.txt") && msg.contains("\"zz\""),
        "{msg}"
    );
    assert_eq!(line, 2);

    tiny(&dir, "", "a b\nb c\n");
    let (_, line, msg) = parse_error(BpeTokenizer::from_dir(&dir));
    assert_eq!(line, 2);
    assert!(msg.contains("\"bc\" is not in the vocabulary"), "{msg}");

    // A token twice (the error names its first line): of 2 bytes, of more
    // than the short table's 12, of one byte, and the special token.
    let line_of_a = 2 + lmkit_tokenizers::bpe::byte_level::BYTE_ORDER
        .iter()
        .position(|&b| b == b'a')
        .unwrap();
    for (extra, at) in [
        (",\n  \"ab\": 300", 258),
        (
            ",\n  \"abcdefghijklmnop\": 300,\n  \"abcdefghijklmnop\": 301",
            260,
        ),
        (",\n  \"a\": 300", line_of_a),
        (
            ",\n  \"<|endoftext|>\": 300,\n  \"<|endoftext|>\": 301",
            260,
        ),
    ] {
        tiny(&dir, extra, "a b\n");
        let (_, line, msg) = parse_error(BpeTokenizer::from_dir(&dir));
        assert!(msg.contains("twice"), "{extra}: {msg}");
        assert_eq!(line, at, "{extra}");
    }

    std::fs::remove_file(dir.join("merges.txt")).unwrap();
    match Tokenizer::from_dir(&dir) {
        Err(Error::Io { path, .. }) => assert!(path.ends_with("merges.txt")),
        other => panic!("expected an io error naming merges.txt, got {other:?}"),
    }
    std::fs::write(
        dir.join("tokenizer.json"),
        "{\"model\": {\"type\": \"BPE\",\n \"vocab\": [1, 2]}}",
    )
    .unwrap();
    match Tokenizer::from_dir(&dir) {
        Err(Error::Parse { path, line, .. }) => {
            assert!(path.ends_with("tokenizer.json"));
            assert_eq!(line, 2);
        }
        other => panic!("expected a parse error in tokenizer.json, got {other:?}"),
    }
    assert!(matches!(
        Tokenizer::from_dir(dir.join("absent")),
        Err(Error::Io { .. })
    ));
}

#[test]
fn unsupported_tokenizer_json_is_an_error() {
    let dir = scratch("unsupported");
    gpt2().save(&dir).unwrap();
    let path = dir.join("tokenizer.json");
    let json = std::fs::read_to_string(&path).unwrap();
    let patched = json.replacen(
        "\"add_prefix_space\": false",
        "\"add_prefix_space\": true",
        1,
    );
    assert_ne!(json, patched);
    std::fs::write(&path, patched).unwrap();
    match BpeTokenizer::from_tokenizer_json(&path) {
        Err(Error::Unsupported { message, .. }) => assert!(message.contains("pre_tokenizer")),
        other => panic!("expected unsupported, got {other:?}"),
    }

    // transformers writes a no-op TemplateProcessing: accepted; one that adds
    // a token is not (we would silently drop it).
    let mut v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let seq = |id: &str| serde_json::json!({"Sequence": {"id": id, "type_id": 0}});
    v["post_processor"] = serde_json::json!({
        "type": "TemplateProcessing", "single": [seq("A")], "pair": [seq("A"), seq("B")],
        "special_tokens": {}
    });
    std::fs::write(&path, v.to_string()).unwrap();
    assert!(BpeTokenizer::from_tokenizer_json(&path).is_ok());
    v["post_processor"]["single"] = serde_json::json!([
        {"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}}, seq("A")
    ]);
    std::fs::write(&path, v.to_string()).unwrap();
    match BpeTokenizer::from_tokenizer_json(&path) {
        Err(Error::Unsupported { message, .. }) => assert!(message.contains("post_processor")),
        other => panic!("expected unsupported, got {other:?}"),
    }
}

#[test]
fn saved_files_load_back_identically() {
    let dir = scratch("save");
    gpt2().save(&dir).unwrap();
    let from_json = BpeTokenizer::from_tokenizer_json(dir.join("tokenizer.json")).unwrap();
    let from_files =
        BpeTokenizer::from_files(dir.join("vocab.json"), dir.join("merges.txt")).unwrap();
    let docs = corpus_docs();
    let text = docs[..20].concat();
    let want = gpt2().encode_ids(text.as_bytes(), true);
    assert_eq!(from_json.encode_ids(text.as_bytes(), true), want);
    assert_eq!(from_files.encode_ids(text.as_bytes(), true), want);
    assert_eq!(from_json.endoftext_id(), Some(50256));
    assert_eq!(from_json.vocab_size(), 50257);
    // The saved vocabulary is GPT-2's, token for token.
    let original = std::fs::read_to_string(assets().join("gpt2/vocab.json")).unwrap();
    let original: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(&original).unwrap();
    let saved = std::fs::read_to_string(dir.join("vocab.json")).unwrap();
    let saved: serde_json::Map<String, serde_json::Value> = serde_json::from_str(&saved).unwrap();
    assert_eq!(original, saved);
}

#[test]
fn trained_tokenizer_round_trips_and_loads_back() {
    let docs = corpus_docs();
    let text = docs[..200].join("\n");
    let mut trainer = BpeTrainer::new(BpeTrainerOptions {
        vocab_size: 2000,
        ..Default::default()
    })
    .unwrap();
    trainer.feed(text.as_bytes());
    let trained = trainer.train(|_, _| {}).unwrap();
    assert_eq!(trained.vocab_size(), 2000);
    assert_eq!(trained.endoftext_id(), Some(1999));
    let dir = scratch("trained");
    trained.save(&dir).unwrap();
    let loaded = Tokenizer::from_dir(&dir).unwrap();
    let sample = docs[300].as_bytes();
    let ids = loaded.encode_ids(sample, false).unwrap();
    assert_eq!(ids, trained.encode_ordinary(sample));
    assert_eq!(loaded.decode(&ids).unwrap(), sample);
    // Learned merges compress English well beyond bytes.
    assert!(
        ids.len() * 5 < sample.len() * 2,
        "{} tokens for {} bytes",
        ids.len(),
        sample.len()
    );
    let from_files =
        BpeTokenizer::from_files(dir.join("vocab.json"), dir.join("merges.txt")).unwrap();
    assert_eq!(from_files.encode_ordinary(sample), ids);
}

/// A vocab.json not in id order, or with ids no token has, loads to the
/// same tokenizer (the tables are reordered by id; in id order they are
/// taken as read).
#[test]
fn vocabulary_out_of_order_or_with_holes_loads_the_same() {
    let original = std::fs::read_to_string(assets().join("gpt2/vocab.json")).unwrap();
    let vocab: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(&original).unwrap();
    let mut entries: Vec<(String, u64)> = vocab
        .iter()
        .map(|(t, id)| (t.clone(), id.as_u64().unwrap()))
        .collect();
    entries.sort_by_key(|&(_, id)| id);
    let merges = assets().join("gpt2/merges.txt");
    let docs = corpus_docs();
    let text = docs[..20].concat();
    let want = gpt2().encode_ids(text.as_bytes(), true);
    let write = |dir: &Path, entries: &[(String, u64)]| {
        let body: Vec<String> = entries
            .iter()
            .map(|(t, id)| format!("{}: {id}", serde_json::to_string(t).unwrap()))
            .collect();
        std::fs::write(dir.join("vocab.json"), format!("{{{}}}", body.join(",\n"))).unwrap();
        std::fs::copy(&merges, dir.join("merges.txt")).unwrap();
        BpeTokenizer::from_dir(dir).unwrap()
    };

    let dir = scratch("reordered");
    let mut reversed = entries.clone();
    reversed.reverse();
    let tok = write(&dir, &reversed);
    assert_eq!(tok.encode_ids(text.as_bytes(), true), want);
    assert_eq!(tok.vocab_size(), 50257);
    for (t, id) in entries.iter().step_by(97) {
        assert_eq!(tok.id_to_token(*id as u32), Some(t.as_str()));
        assert_eq!(tok.token_to_id(t), Some(*id as u32));
    }

    // Two merge results trade ids (" the" 262 <-> " and" 290): merge
    // results no longer take consecutive ids, so those are looked up by bytes.
    let mut swapped = entries.clone();
    swapped[262].1 = 290;
    swapped[290].1 = 262;
    let tok = write(&dir, &swapped);
    let trade = |id: u32| match id {
        262 => 290,
        290 => 262,
        id => id,
    };
    let traded: Vec<u32> = want.iter().map(|&id| trade(id)).collect();
    assert!(traded != want, "the text has neither token");
    assert!(tok.encode_ids(text.as_bytes(), true) == traded);
    let remap = |(l, r): (u32, u32)| (trade(l), trade(r));
    let want_merges: Vec<(u32, u32)> = gpt2().merges().iter().map(|&m| remap(m)).collect();
    assert_eq!(tok.merges(), &want_merges[..]);

    // <|endoftext|> moved to 50300: ids 50257..50300 are holes.
    let mut holes = entries.clone();
    holes.last_mut().unwrap().1 = 50300;
    let tok = write(&dir, &holes);
    let want: Vec<u32> = want
        .iter()
        .map(|&id| if id == 50256 { 50300 } else { id })
        .collect();
    assert_eq!(tok.encode_ids(text.as_bytes(), true), want);
    assert_eq!(tok.vocab_size(), 50301);
    assert_eq!(tok.endoftext_id(), Some(50300));
    assert_eq!(tok.id_to_token(50256), None);
    assert_eq!(tok.token_bytes(50299), None);
    assert_eq!(tok.token_to_id("<|endoftext|>"), Some(50300));
    assert_eq!(tok.token_to_id(""), None);
}

/// merges.txt is read as bytes and its tokens checked to be UTF-8 as they
/// are spelled out: invalid UTF-8 is still an error naming the line.
#[test]
fn invalid_utf8_in_merges_txt_names_the_line() {
    let dir = scratch("utf8");
    tiny(&dir, "", "");
    for (merges, line) in [
        (&b"#version: 0.2\na b\nab \xC3\n"[..], 3),
        (b"a b\n\xFFb c\n", 2),
        (b"#version \xFF\na b\n", 1),
    ] {
        std::fs::write(dir.join("merges.txt"), merges).unwrap();
        let (path, got, msg) = parse_error(BpeTokenizer::from_dir(&dir));
        assert!(path.ends_with("merges.txt"), "{msg}");
        assert_eq!(got, line, "{msg}");
        assert!(msg.contains("UTF-8"), "{msg}");
    }
    // The space cuts "Ġ" in two: joined, the line spells the next token
    // ("aĠb"), and the halves' bytes cut at the character count would be
    // tokens ("aĠ", "b"), but the line is not UTF-8 where it is cut.
    tiny(&dir, ",\n  \"aĠ\": 258,\n  \"aĠb\": 259", "");
    std::fs::write(dir.join("merges.txt"), "a b\nab c\na Ġ\naĠ b\n").unwrap();
    let tok = BpeTokenizer::from_dir(&dir).unwrap();
    let b = tok.token_to_id("b").unwrap();
    assert_eq!(tok.merges()[3], (258, b));
    std::fs::write(
        dir.join("merges.txt"),
        b"a b\nab c\na \xC4\xA0\na\xC4 \xA0b\n",
    )
    .unwrap();
    let (_, line, msg) = parse_error(BpeTokenizer::from_dir(&dir));
    assert_eq!(line, 4, "{msg}");
    assert!(msg.contains("UTF-8"), "{msg}");
}

/// Every entry of GPT-2's vocab.json maps both ways (the packed spellings'
/// reverse lookup), and what is not a token is not found.
#[test]
fn every_vocab_json_entry_maps_both_ways() {
    let text = std::fs::read_to_string(assets().join("gpt2/vocab.json")).unwrap();
    let vocab: std::collections::HashMap<String, u32> = serde_json::from_str(&text).unwrap();
    let tok = gpt2();
    assert_eq!(vocab.len(), tok.vocab_size());
    for (spelling, &id) in &vocab {
        assert_eq!(tok.token_to_id(spelling), Some(id), "{spelling:?}");
        assert_eq!(tok.id_to_token(id), Some(spelling.as_str()));
    }
    assert_eq!(tok.token_to_id("<|endoftext|>"), Some(50256));
    for absent in ["", "Ġthe Ġcat", "<|endoftext|", "\u{0}"] {
        assert_eq!(tok.token_to_id(absent), None, "{absent:?}");
    }
}

/// Hostile `tokenizer.json` files: an added token's id that would size the
/// tables at 2^32 entries is refused before allocating (it aborted on a
/// ~100 GB allocation), and a large file loads in linear time (a line search
/// per merge made a 7 MB file take minutes).
#[test]
fn hostile_tokenizer_json_is_refused_or_loads_fast() {
    let dir = scratch("hostile");
    gpt2().save(&dir).unwrap();
    let path = dir.join("tokenizer.json");
    let json = std::fs::read_to_string(&path).unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let good = v.clone();

    let mut hostile = v["added_tokens"][0].clone();
    hostile["id"] = serde_json::json!(4294967295u64);
    hostile["content"] = serde_json::json!("<|hostile|>");
    v["added_tokens"].as_array_mut().unwrap().push(hostile);
    std::fs::write(&path, serde_json::to_string_pretty(&v).unwrap()).unwrap();
    let (_, line, msg) = parse_error(BpeTokenizer::from_tokenizer_json(&path));
    assert!(msg.contains("larger than"), "{msg}");
    assert!(line > 0, "{msg}");

    // Pad every merge onto its own line behind spaces: ~6 MB, all valid.
    let merges: Vec<String> = good["model"]["merges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| format!("{}{}", " ".repeat(64), m))
        .collect();
    let mut padded = good.clone();
    padded["model"]["merges"] = serde_json::json!([]);
    let text = serde_json::to_string_pretty(&padded).unwrap().replacen(
        "\"merges\": []",
        &format!("\"merges\": [\n{}\n]", merges.join(",\n")),
        1,
    );
    assert!(text.len() > 5_000_000, "{}", text.len());
    std::fs::write(&path, &text).unwrap();
    let t0 = std::time::Instant::now();
    let tok = BpeTokenizer::from_tokenizer_json(&path).unwrap();
    let secs = t0.elapsed().as_secs_f64();
    assert!(
        secs < 10.0,
        "a 6 MB tokenizer.json took {secs:.1} s to load"
    );
    assert_eq!(tok.vocab_size(), 50257);

    // An error in a merge still names its line.
    let bad = text.replacen("[\"Ġ\",\"t\"]", "[\"Ġ\", \"zz\"]", 1);
    assert_ne!(bad, text);
    std::fs::write(&path, &bad).unwrap();
    let want = 1 + bad[..bad.find("[\"Ġ\", \"zz\"]").unwrap()]
        .matches('\n')
        .count();
    let (_, line, msg) = parse_error(BpeTokenizer::from_tokenizer_json(&path));
    assert!(msg.contains("Ġzz"), "{msg}");
    assert_eq!(line, want, "{msg}");
}

/// A vocabulary size past the limit is an option error, before any table is
/// sized by it (`train-tokenizer --vocab-size 4000000000`).
#[test]
fn training_vocab_size_is_bounded() {
    let huge = 4_000_000_000usize;
    match BpeTrainer::new(BpeTrainerOptions {
        vocab_size: huge,
        ..Default::default()
    }) {
        Err(Error::InvalidOption(m)) => assert!(m.contains("above the limit"), "{m}"),
        other => panic!("expected an option error, got {:?}", other.err()),
    }
    let trainer = lmkit_tokenizers::wordpiece::WordPieceTrainer {
        vocab_size: huge,
        ..Default::default()
    };
    match lmkit_tokenizers::wordpiece::train_wordpiece(&["a b c"], &trainer, |_| {}) {
        Err(Error::InvalidOption(m)) => assert!(m.contains("above the limit"), "{m}"),
        other => panic!("expected an option error, got {:?}", other.err()),
    }
}
