//! Every OpenAI encoding built from its rank file equals tiktoken (the
//! tiktoken-rs crate, which runs tiktoken's own core) id for id, on 1 MB
//! of the books and on the adversarial set, with and without special
//! tokens; decode inverts encode.

mod bpe_common;

use bpe_common::tiktoken_of as oracle;
use lmkit_tokenizers::openai::{self, ENCODINGS};

fn first_difference(got: &[u32], want: &[u32]) -> String {
    let at = got.iter().zip(want).take_while(|(a, b)| a == b).count();
    format!(
        "token {at}: got {:?}, want {:?}",
        &got[at..(at + 6).min(got.len())],
        &want[at..(at + 6).min(want.len())]
    )
}

#[test]
fn every_encoding_equals_tiktoken() {
    // 1 MB of real prose and code: the corpus's documents from the middle.
    let docs = bpe_common::corpus_docs();
    let mut sample = String::new();
    for d in docs.iter().skip(docs.len() / 3) {
        if sample.len() > 1 << 20 {
            break;
        }
        sample.push_str(d);
    }
    let mut texts = bpe_common::adversarial();
    texts.push(sample);
    for name in ENCODINGS {
        let ours = openai::encoding(name).unwrap_or_else(|e| panic!("{name}: {e}"));
        let theirs = oracle(name);
        for text in &texts {
            let want = theirs.encode_ordinary(text);
            let got = ours.encode_ordinary(text.as_bytes());
            assert!(got == want, "{name}: {}", first_difference(&got, &want));
            let want = theirs.encode_with_special_tokens(text);
            let got = ours.encode_ids(text.as_bytes(), true);
            assert!(
                got == want,
                "{name}, specials: {}",
                first_difference(&got, &want)
            );
            assert_eq!(ours.decode(&got).unwrap(), text.as_bytes(), "{name}");
        }
        // One large text on all cores: the same ids.
        let big = texts.concat().repeat(2);
        assert_eq!(
            ours.encode_ids_parallel(big.as_bytes(), true),
            ours.encode_ids(big.as_bytes(), true),
            "{name}"
        );
    }
}

#[test]
fn vocabularies_and_specials_match_tiktoken() {
    for name in ENCODINGS {
        let ours = openai::encoding(name).unwrap();
        let theirs = oracle(name);
        let mut want: Vec<&str> = theirs.special_tokens().into_iter().collect();
        if name == "o200k_harmony" {
            // Python tiktoken 0.14 keeps o200k_base's specials here
            // (`**base_enc["special_tokens"]`); tiktoken-rs drops this one.
            want.push("<|endofprompt|>");
        }
        let mut got: Vec<&str> = ours.special_tokens().map(|(t, _)| t).collect();
        want.sort();
        got.sort();
        let extra: Vec<_> = got.iter().filter(|t| !want.contains(t)).take(5).collect();
        let missing: Vec<_> = want.iter().filter(|t| !got.contains(t)).take(5).collect();
        assert!(got == want, "{name}: extra {extra:?}, missing {missing:?}");
        for (t, id) in ours.special_tokens() {
            if t != "<|endofprompt|>" || name != "o200k_harmony" {
                assert_eq!(theirs.encode_with_special_tokens(t), [id], "{name}: {t}");
            }
        }
        // Every ordinary token decodes to tiktoken's bytes.
        for id in 0..ours.vocab_size() as u32 {
            if ours.special_tokens().any(|(_, s)| s == id) {
                continue;
            }
            match (ours.token_bytes(id), theirs.decode_bytes(&[id])) {
                (Some(a), Ok(b)) => assert_eq!(a, &b[..], "{name}: id {id}"),
                (None, Err(_)) => {}
                (a, b) => panic!("{name}: id {id}: ours {a:?}, theirs {b:?}"),
            }
        }
    }
}

#[test]
fn unknown_names_are_errors() {
    let e = openai::encoding("cl200k").unwrap_err().to_string();
    assert!(e.contains("cl100k_base"), "{e}");
}

/// The general path: a pattern with no scanner is run by fancy-regex.
/// cl100k's and o200k's pattern text given as a custom pattern gives the
/// scanner's ids (and tiktoken's); a simple `\S+|\s+` cuts where it says.
#[test]
fn custom_patterns_equal_the_scanners() {
    use lmkit_tokenizers::pretokenize::{CustomPattern, Pattern};
    use lmkit_tokenizers::BpeTokenizer;
    use std::path::Path;
    let mut texts = bpe_common::adversarial();
    texts.push(bpe_common::corpus_docs().concat()[..200_000].to_string());
    for name in ["cl100k_base", "o200k_base"] {
        let spec = openai::spec(name).unwrap();
        let path = Path::new(name);
        let ranks =
            lmkit_tokenizers::bpe::parse_tiktoken(path, openai::rank_file(spec.file).unwrap())
                .unwrap();
        let custom = Pattern::Custom(CustomPattern::new(spec.pattern.regex()).unwrap());
        let slow = BpeTokenizer::from_tiktoken_ranks(path, &ranks, &spec.specials, custom).unwrap();
        let fast = openai::encoding(name).unwrap();
        for text in &texts {
            let want = fast.encode_ids(text.as_bytes(), true);
            let got = slow.encode_ids(text.as_bytes(), true);
            assert!(got == want, "{name}: {}", first_difference(&got, &want));
        }
        let simple = Pattern::from_regex_or_custom(r"\S+|\s+").unwrap();
        assert!(matches!(simple, Pattern::Custom(_)));
        let t = BpeTokenizer::from_tiktoken_ranks(path, &ranks, &spec.specials, simple).unwrap();
        let ids = t.encode_ordinary(b"hello  world");
        assert_eq!(t.decode(&ids).unwrap(), b"hello  world");
        let want: Vec<u32> = [&b"hello"[..], b"  ", b"world"]
            .iter()
            .flat_map(|p| t.encode_single_piece(p))
            .collect();
        assert_eq!(ids, want);
        // `\s+` keeps the two spaces one piece: not cl100k's " world".
        assert_ne!(ids, fast.encode_ordinary(b"hello  world"));
    }
    let e = Pattern::from_regex_or_custom(r"(?<!")
        .unwrap_err()
        .to_string();
    assert!(e.contains("invalid") && e.contains("(?<!"), "{e}");
}
