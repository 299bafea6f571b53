//! Parity with HF `tokenizers` / transformers on the real all-MiniLM-L6-v2
//! vocabulary. The expected outputs were written by
//! `scripts/make_wordpiece_fixtures.py` (HF char offsets converted to bytes).

use std::path::{Path, PathBuf};

use lmkit_tokenizers::wordpiece::{
    Padding, PaddingDirection, PaddingLength, Truncation, TruncationDirection, TruncationStrategy,
    WordPieceOptions, WordPieceTokenizer,
};
use serde_json::Value;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn minilm() -> PathBuf {
    let dir = root().join("assets/minilm");
    assert!(
        dir.join("tokenizer.json").is_file() && dir.join("vocab.txt").is_file(),
        "{} is missing: run scripts/fetch-assets.sh first",
        dir.display()
    );
    dir
}

fn fixture(name: &str) -> Vec<Value> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/wordpiece")
        .join(name);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read fixture {}: {e}", path.display()));
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{name}: {e}")))
        .collect()
}

fn u32s(v: &Value) -> Vec<u32> {
    v.as_array()
        .expect("array")
        .iter()
        .map(|x| x.as_u64().expect("int") as u32)
        .collect()
}

fn pairs(v: &Value) -> Vec<(usize, usize)> {
    let flat: Vec<usize> = u32s(v).into_iter().map(|x| x as usize).collect();
    flat.chunks(2).map(|c| (c[0], c[1])).collect()
}

/// The uncased MiniLM tokenizer from tokenizer.json, without the truncation
/// and padding the file sets (the fixtures were made without them).
fn uncased() -> WordPieceTokenizer {
    let mut t = WordPieceTokenizer::from_tokenizer_json(minilm().join("tokenizer.json")).unwrap();
    t.set_truncation(None).set_padding(None);
    t
}

fn with_options(options: WordPieceOptions) -> WordPieceTokenizer {
    WordPieceTokenizer::from_vocab_file(minilm().join("vocab.txt"), options).unwrap()
}

fn config(name: &str) -> WordPieceTokenizer {
    match name {
        "uncased" => uncased(),
        "cased" => with_options(WordPieceOptions::cased()),
        "lower_keep_accents" => with_options(WordPieceOptions {
            strip_accents: Some(false),
            ..Default::default()
        }),
        "strip_only_raw" => with_options(WordPieceOptions {
            clean_text: false,
            handle_chinese_chars: false,
            strip_accents: Some(true),
            lowercase: false,
            ..Default::default()
        }),
        _ => unreachable!(),
    }
}

fn check_encodings(name: &str) {
    let t = config(name);
    let mut failures = Vec::new();
    let records = fixture(&format!("encode_{name}.jsonl"));
    for r in &records {
        let text = r["text"].as_str().unwrap();
        let e = t.encode(text, true).unwrap();
        let (ids, offsets) = (u32s(&r["ids"]), pairs(&r["offsets"]));
        if e.ids != ids || e.offsets != offsets {
            failures.push(format!(
                "{text:?}\n  want {ids:?} {offsets:?}\n  got  {:?} {:?}",
                e.ids, e.offsets
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{name}: {} of {} texts differ from HF:\n{}",
        failures.len(),
        records.len(),
        failures[..failures.len().min(5)].join("\n")
    );
}

#[test]
fn encode_uncased_matches_hf() {
    check_encodings("uncased");
}

#[test]
fn encode_cased_matches_hf() {
    check_encodings("cased");
}

#[test]
fn encode_lowercase_keeping_accents_matches_hf() {
    check_encodings("lower_keep_accents");
}

#[test]
fn encode_strip_accents_without_cleaning_matches_hf() {
    check_encodings("strip_only_raw");
}

/// Every code point through normalizer + pre-tokenizer, as `x{c}x`.
fn check_unicode(name: &str) {
    let t = config(name);
    // Expected words per code point; absent = `x{c}x` unchanged.
    let mut expected: std::collections::HashMap<u32, Vec<String>> = Default::default();
    for row in fixture(&format!("unicode_{name}.jsonl")) {
        let kind = row[0].as_str().unwrap();
        let first = row[1].as_u64().unwrap() as u32;
        if kind == "M" {
            let words = row[2]
                .as_array()
                .unwrap()
                .iter()
                .map(|w| w.as_str().unwrap().to_string());
            expected.insert(first, words.collect());
            continue;
        }
        for cp in first..=row[2].as_u64().unwrap() as u32 {
            let c = char::from_u32(cp).unwrap();
            let words = match kind {
                "R" => vec!["xx".to_string()],
                "S" => vec!["x".into(), "x".into()],
                "I" => vec!["x".into(), c.to_string(), "x".into()],
                "H" => {
                    // Unicode's algorithmic Hangul decomposition.
                    let s = cp - 0xAC00;
                    let mut w = String::from("x");
                    w.push(char::from_u32(0x1100 + s / 588).unwrap());
                    w.push(char::from_u32(0x1161 + (s % 588) / 28).unwrap());
                    if s % 28 != 0 {
                        w.push(char::from_u32(0x11A7 + s % 28).unwrap());
                    }
                    w.push('x');
                    vec![w]
                }
                _ => panic!("unknown row kind {kind}"),
            };
            expected.insert(cp, words);
        }
    }
    let mut failures = Vec::new();
    let mut probe = String::new();
    for c in (0..=0x10FFFF).filter_map(char::from_u32) {
        probe.clear();
        probe.push('x');
        probe.push(c);
        probe.push('x');
        let got: Vec<String> = t.pre_tokenize(&probe).into_iter().map(|(w, _)| w).collect();
        let ok = match expected.get(&(c as u32)) {
            Some(want) => &got == want,
            None => got.len() == 1 && got[0] == probe,
        };
        if !ok {
            failures.push(format!(
                "U+{:04X}: got {got:?}, HF {:?}",
                c as u32,
                expected.get(&(c as u32))
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{name}: {} code points differ from HF:\n{}",
        failures.len(),
        failures[..failures.len().min(40)].join("\n")
    );
}

#[test]
fn every_code_point_uncased_matches_hf() {
    check_unicode("uncased");
}

#[test]
fn every_code_point_cased_matches_hf() {
    check_unicode("cased");
}

#[test]
fn every_code_point_lowercase_keeping_accents_matches_hf() {
    check_unicode("lower_keep_accents");
}

#[test]
fn every_code_point_strip_accents_without_cleaning_matches_hf() {
    check_unicode("strip_only_raw");
}

fn truncation_of(v: &Value) -> Option<Truncation> {
    if v.is_null() {
        return None;
    }
    Some(Truncation {
        max_length: v["max_length"].as_u64().unwrap() as usize,
        strategy: match v["strategy"].as_str().unwrap() {
            "longest_first" => TruncationStrategy::LongestFirst,
            "only_first" => TruncationStrategy::OnlyFirst,
            "only_second" => TruncationStrategy::OnlySecond,
            s => panic!("strategy {s}"),
        },
        stride: 0,
        direction: match v["direction"].as_str() {
            Some("left") => TruncationDirection::Left,
            _ => TruncationDirection::Right,
        },
    })
}

fn padding_of(t: &WordPieceTokenizer, v: &Value) -> Option<Padding> {
    if v.is_null() {
        return None;
    }
    let to = match v["length"].as_u64() {
        Some(n) => PaddingLength::Fixed(n as usize),
        None => PaddingLength::Longest,
    };
    let mut p = t.padding_to(to);
    p.pad_to_multiple_of = v["pad_to_multiple_of"].as_u64().map(|n| n as usize);
    p.pad_type_id = v["pad_type_id"].as_u64().unwrap_or(0) as u32;
    if v["direction"].as_str() == Some("left") {
        p.direction = PaddingDirection::Left;
    }
    Some(p)
}

#[test]
fn pairs_truncation_padding_match_hf() {
    let mut t = uncased();
    // The same truncation handed to each call instead of set: same encodings.
    let mut untruncated = uncased();
    let records = fixture("pairs.jsonl");
    let mut failures = Vec::new();
    for (i, r) in records.iter().enumerate() {
        t.set_truncation(truncation_of(&r["truncation"]));
        let padding = padding_of(&t, &r["padding"]);
        t.set_padding(padding.clone());
        untruncated.set_padding(padding);
        let (a, b) = (r["a"].as_str().unwrap(), r["b"].as_str().unwrap());
        let add = r["add_special"].as_bool().unwrap();
        let got = t.encode_pair(a, b, add);
        let handed = untruncated.encode_pair_batch_truncated(&[(a, b)], add, t.truncation());
        if got.as_ref().ok() != handed.as_ref().ok().and_then(|v| v.first()) {
            failures.push(format!(
                "#{i}: truncation handed to the call differs from set"
            ));
        }
        match (got, r.get("error")) {
            (Err(_), Some(_)) => {}
            (Ok(e), None) => {
                let want = (
                    u32s(&r["ids"]),
                    u32s(&r["type_ids"]),
                    pairs(&r["offsets"]),
                    u32s(&r["special"]),
                    u32s(&r["attention"]),
                );
                let widen = |v: &[u8]| v.iter().map(|&x| x as u32).collect::<Vec<_>>();
                let have = (
                    e.ids.clone(),
                    e.type_ids.clone(),
                    e.offsets.clone(),
                    widen(&e.special_tokens_mask),
                    widen(&e.attention_mask),
                );
                if have != want {
                    failures.push(format!(
                        "#{i} {:?} {:?}\n  want {want:?}\n  got  {have:?}",
                        r["truncation"], r["padding"]
                    ));
                }
            }
            (got, want) => failures.push(format!("#{i}: got {got:?}, HF error {want:?}")),
        }
    }
    assert!(
        failures.is_empty(),
        "{} pairs differ:\n{}",
        failures.len(),
        failures[..failures.len().min(5)].join("\n")
    );
}

#[test]
fn batch_padding_to_longest_matches_hf() {
    let mut t = uncased();
    let padding = t.padding_to(PaddingLength::Longest);
    t.set_padding(Some(padding));
    for r in fixture("batch.jsonl") {
        let texts: Vec<&str> = r["texts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_str().unwrap())
            .collect();
        let encs = t.encode_batch(&texts, true).unwrap();
        let want_ids: Vec<Vec<u32>> = r["ids"].as_array().unwrap().iter().map(u32s).collect();
        let want_att: Vec<Vec<u32>> = r["attention"]
            .as_array()
            .unwrap()
            .iter()
            .map(u32s)
            .collect();
        let ids: Vec<Vec<u32>> = encs.iter().map(|e| e.ids.clone()).collect();
        let att: Vec<Vec<u32>> = encs
            .iter()
            .map(|e| e.attention_mask.iter().map(|&x| x as u32).collect())
            .collect();
        assert_eq!((ids, att), (want_ids, want_att));
    }
}

#[test]
fn qa_windows_match_transformers() {
    let t = uncased();
    for (i, r) in fixture("windows.jsonl").iter().enumerate() {
        let (q, c) = (
            r["question"].as_str().unwrap(),
            r["context"].as_str().unwrap(),
        );
        let (max_len, stride) = (
            r["max_len"].as_u64().unwrap() as usize,
            r["stride"].as_u64().unwrap() as usize,
        );
        let windows = t.encode_pair_windows(q, c, max_len, stride).unwrap();
        let want = r["windows"].as_array().unwrap();
        assert_eq!(windows.len(), want.len(), "case {i}: number of windows");
        for (k, (w, h)) in windows.iter().zip(want).enumerate() {
            let seq: Vec<Option<u8>> = h["seq_ids"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s.as_u64().map(|x| x as u8))
                .collect();
            assert_eq!(w.encoding.ids, u32s(&h["ids"]), "case {i} window {k}: ids");
            assert_eq!(
                w.encoding.type_ids,
                u32s(&h["type_ids"]),
                "case {i} window {k}: type ids"
            );
            assert_eq!(
                w.encoding.offsets,
                pairs(&h["offsets"]),
                "case {i} window {k}: offsets"
            );
            assert_eq!(w.sequence_ids, seq, "case {i} window {k}: sequence ids");
            // The context tokens' offsets point into the context.
            for p in w.context_range() {
                let (s, e) = w.encoding.offsets[p];
                assert!(c.get(s..e).is_some());
            }
        }
    }
}

#[test]
fn decode_matches_hf() {
    let t = uncased();
    for r in fixture("decode.jsonl") {
        let ids = u32s(&r["ids"]);
        assert_eq!(
            t.decode(&ids, true).unwrap(),
            r["skip"].as_str().unwrap(),
            "{ids:?}"
        );
        assert_eq!(
            t.decode(&ids, false).unwrap(),
            r["keep"].as_str().unwrap(),
            "{ids:?}"
        );
    }
}

/// The whole corpus: tokenizer.json and vocab.txt (with the defaults
/// matching tokenizer_config.json) must give the same encodings.
#[test]
fn whole_corpus_json_and_vocab_txt_agree() {
    let corpus = root().join("assets/books/corpus.txt");
    let text = std::fs::read_to_string(&corpus).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; run scripts/fetch-assets.sh first",
            corpus.display()
        )
    });
    let from_json = uncased();
    let from_vocab =
        WordPieceTokenizer::from_vocab_file(minilm().join("vocab.txt"), Default::default())
            .unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let a = from_json.encode_batch(&lines, true).unwrap();
    let b = from_vocab.encode_batch(&lines, true).unwrap();
    let mut tokens = 0;
    for ((x, y), line) in a.iter().zip(&b).zip(&lines) {
        assert_eq!(x, y, "{line:?}");
        tokens += x.len();
    }
    assert!(
        tokens > 1_000_000,
        "only {tokens} tokens: is the corpus complete?"
    );
}

#[test]
fn from_dir_reads_tokenizer_json_settings() {
    let t = WordPieceTokenizer::from_dir(minilm()).unwrap();
    // MiniLM's tokenizer.json asks for truncation and padding to 128.
    assert_eq!(t.truncation().map(|t| t.max_length), Some(128));
    let e = t.encode("hello world", true).unwrap();
    assert_eq!(e.len(), 128);
    assert_eq!(&e.ids[..4], [101, 7592, 2088, 102]);
    assert_eq!(e.attention_mask.iter().filter(|&&m| m == 1).count(), 4);
    assert_eq!(
        (t.cls_id(), t.sep_id(), t.pad_id(), t.unk_id(), t.mask_id()),
        (101, 102, 0, 100, Some(103))
    );
    assert_eq!(t.vocab_size(), 30522);
}

/// Issue 13 item 7: `count_tokens` of one large text (cut at whitespace and
/// counted in parallel, holding no ids) equals the length of its encoding.
#[test]
fn count_of_a_large_text_equals_its_encoding() {
    let books = root().join("assets/books/corpus.txt");
    let text = std::fs::read_to_string(&books).unwrap_or_else(|_| {
        panic!(
            "{} is missing: run scripts/fetch-assets.sh",
            books.display()
        )
    });
    // One long line, as `tokenize --count` met it, and the text as it is.
    let line = text[..text.len().min(3 << 20)].replace('\n', " ");
    let tok = lmkit_tokenizers::Tokenizer::WordPiece(Box::new(uncased()));
    for t in [line.as_str(), &text[..text.len().min(5 << 20)]] {
        for special in [false, true] {
            assert!(t.len() > 2 << 20);
            assert_eq!(
                tok.count_tokens(t.as_bytes(), special).unwrap(),
                tok.encode_ids(t.as_bytes(), special).unwrap().len()
            );
        }
    }
}

#[test]
fn truncation_handed_to_a_batch_call_equals_the_set_one() {
    let plain = uncased();
    let texts = [
        "Short.",
        "A longer sentence, with punctuation, that is cut to a handful of tokens here.",
        "unaffable unbelievably 東京 naïve café — words split into many word pieces",
    ];
    for max in [2, 3, 7, 16, 512] {
        for direction in [TruncationDirection::Right, TruncationDirection::Left] {
            let mut trunc = Truncation::new(max);
            trunc.direction = direction;
            let mut set = uncased();
            set.set_truncation(Some(trunc.clone()));
            let want = set.encode_batch(&texts, true).unwrap();
            let got = plain
                .encode_batch_truncated(&texts, true, Some(&trunc))
                .unwrap();
            assert_eq!(got, want, "max {max}, {direction:?}");
            assert!(got.iter().all(|e| e.ids.len() <= max));
        }
    }
    // `None` means no truncation, whatever the tokenizer's own setting.
    let mut set = uncased();
    set.set_truncation(Some(Truncation::new(3)));
    assert_eq!(
        set.encode_batch_truncated(&texts, true, None).unwrap(),
        plain.encode_batch(&texts, true).unwrap()
    );
}
