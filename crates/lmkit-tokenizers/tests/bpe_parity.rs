//! Parity with tiktoken's GPT-2 encoding (r50k_base), id for id, on the real
//! vocabulary: the Rust books corpus, adversarial strings, every code point.

mod bpe_common;

use bpe_common::{adversarial, corpus_docs, gpt2, tiktoken};

fn check(text: &str) {
    let want = tiktoken().encode_ordinary(text);
    let got = gpt2().encode_ordinary(text.as_bytes());
    if got != want {
        let at = got.iter().zip(&want).take_while(|(a, b)| a == b).count();
        panic!(
            "differs from tiktoken at token {at} of {:?}…: got {:?}, want {:?}",
            text.chars().take(80).collect::<String>(),
            &got[at..(at + 8).min(got.len())],
            &want[at..(at + 8).min(want.len())]
        );
    }
    assert_eq!(gpt2().decode(&got).expect("valid ids"), text.as_bytes());
}

#[test]
fn corpus_equals_tiktoken() {
    let docs = corpus_docs();
    assert!(
        docs.len() > 100,
        "corpus too small: {} documents",
        docs.len()
    );
    let total: usize = docs.iter().map(String::len).sum();
    assert!(total > 4_000_000, "corpus too small: {total} bytes");
    for doc in &docs {
        check(doc);
    }
    // And the whole corpus as one text, through the batch path too.
    let batch = gpt2().encode_batch(&docs, false);
    for (doc, ids) in docs.iter().zip(batch) {
        assert_eq!(ids, tiktoken().encode_ordinary(doc));
    }
}

#[test]
fn parallel_encode_of_one_large_text_is_exact() {
    let corpus = corpus_docs().join("\n<|endoftext|>\n");
    for special in [false, true] {
        let sequential = gpt2().encode_ids(corpus.as_bytes(), special);
        assert_eq!(
            gpt2().encode_ids_parallel(corpus.as_bytes(), special),
            sequential
        );
        // Issue 13 item 7: counting holds no ids, and counts the same.
        assert_eq!(
            gpt2().count_tokens_parallel(corpus.as_bytes(), special),
            sequential.len()
        );
    }
    // Every cut it makes is a piece boundary of the whole text.
    let bytes = corpus.as_bytes();
    let boundaries: std::collections::HashSet<usize> =
        lmkit_tokenizers::pretokenize::split_gpt2(bytes)
            .map(|r| r.start)
            .collect();
    let mut at = 0;
    let mut cuts = 0;
    while let Some(cut) = lmkit_tokenizers::bpe::safe_split(bytes, at + 1000) {
        assert!(boundaries.contains(&cut), "cut at {cut} is inside a piece");
        at = cut;
        cuts += 1;
    }
    assert!(cuts > 100);
}

#[test]
fn adversarial_equals_tiktoken() {
    for text in adversarial() {
        check(&text);
    }
}

#[test]
fn every_code_point_in_context_equals_tiktoken() {
    let chars: Vec<char> = (0..=0x10FFFFu32).filter_map(char::from_u32).collect();
    for chunk in chars.chunks(512) {
        let mut text = String::new();
        for &c in chunk {
            text.push_str(&format!(
                "a{c}b {c}{c}1 {c}\u{3000}'{c}s\t{c}\n{c}  {c}9{c}!"
            ));
        }
        check(&text);
    }
}

#[test]
fn special_tokens_only_when_asked() {
    let text = "a<|endoftext|>b <|endoftext|><|endoftext|> c<|endoftext";
    let ordinary = gpt2().encode_ids(text.as_bytes(), false);
    assert_eq!(ordinary, tiktoken().encode_ordinary(text));
    assert!(!ordinary.contains(&50256));
    let special = gpt2().encode_ids(text.as_bytes(), true);
    assert_eq!(special, tiktoken().encode_with_special_tokens(text));
    assert_eq!(special.iter().filter(|&&id| id == 50256).count(), 3);
    assert_eq!(gpt2().decode(&special).unwrap(), text.as_bytes());
    assert_eq!(gpt2().endoftext_id(), Some(50256));
}

#[test]
fn long_word_is_not_quadratic() {
    // tiktoken's merge loop is quadratic here; ours must not be. 1 MB of
    // letters without a space, plus a 1 MB run of one byte.
    let word: String = (0..1_000_000u32)
        .map(|i| char::from(b'a' + (i.wrapping_mul(2654435761) >> 27) as u8 % 26))
        .collect();
    for text in [word, "x".repeat(1_000_000)] {
        let start = std::time::Instant::now();
        let ids = gpt2().encode_ordinary(text.as_bytes());
        let took = start.elapsed();
        assert_eq!(gpt2().decode(&ids).unwrap(), text.as_bytes());
        assert!(took.as_secs_f64() < 5.0, "1 MB word took {took:?}");
        // Same merges as tiktoken on a prefix it can still afford.
        let prefix = &text[..20_000];
        assert_eq!(
            gpt2().encode_ordinary(prefix.as_bytes()),
            tiktoken().encode_ordinary(prefix)
        );
    }
}

#[test]
fn offsets_tile_the_text() {
    let text = "Hello <|endoftext|> wörld 😀!";
    let enc = gpt2().encode(text.as_bytes(), true);
    assert_eq!(enc.len(), enc.offsets.len());
    let mut at = 0;
    for (i, &(s, e)) in enc.offsets.iter().enumerate() {
        assert_eq!(s, at);
        assert_eq!(
            &text.as_bytes()[s..e],
            gpt2().token_bytes(enc.ids[i]).unwrap()
        );
        at = e;
    }
    assert_eq!(at, text.len());
    let specials: Vec<u8> = enc.special_tokens_mask.clone();
    assert_eq!(specials.iter().filter(|&&m| m == 1).count(), 1);
}
