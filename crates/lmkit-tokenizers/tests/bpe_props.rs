//! Property tests: arbitrary strings encode exactly like tiktoken; arbitrary
//! bytes (invalid UTF-8 included) round-trip; pre-tokenization tiles the input;
//! the fast paths (the block-mask pre-tokenizer, SIMD block classification,
//! the per-thread word cache) give the same pieces and ids as the plain ones.

mod bpe_common;

use bpe_common::{gpt2, tiktoken};
use lmkit_tokenizers::pretokenize::{
    classify_block, classify_block_scalar, split_gpt2, split_gpt2_with,
};
use lmkit_tokenizers::BpeTokenizer;
use proptest::prelude::*;

/// Text biased towards the pattern's corner cases: contractions, runs of
/// spaces, mixed scripts, combining marks, digits, emoji.
fn tricky_text() -> impl Strategy<Value = String> {
    let atoms = prop::sample::select(vec![
        "a",
        "Z",
        "é",
        "e\u{301}",
        "\u{301}",
        "漢",
        "か",
        "한",
        "я",
        "ω",
        "١",
        "7",
        "Ⅻ",
        "½",
        " ",
        "  ",
        "\n",
        "\r\n",
        "\t",
        "\u{a0}",
        "\u{3000}",
        "'",
        "'s",
        "'t",
        "'re",
        "'ve",
        "'m",
        "'ll",
        "'d",
        "'S",
        "!",
        ".",
        ",",
        "😀",
        "👍🏽",
        "\u{200d}",
        "\u{0}",
        "\u{7f}",
        "<|endoftext|>",
        "-",
    ]);
    prop::collection::vec(atoms, 0..40).prop_map(|v| v.concat())
}

/// Runs longer than a 64-byte block, of every class, with non-ASCII
/// characters (and invalid bytes) inside and at their edges.
fn long_runs_text() -> impl Strategy<Value = Vec<u8>> {
    let atom = prop::sample::select(vec![
        "a", "Q", "é", "漢", "7", "١", " ", "\t", "\n", "\u{a0}", "\u{3000}", "!", "-", "😀",
        "\u{301}", "'s", "\u{85}",
    ]);
    let run = (atom, 1usize..150).prop_map(|(a, n)| a.repeat(n).into_bytes());
    let junk = prop::sample::select(vec![vec![0xffu8], vec![0x80], vec![0xe2, 0x82], vec![0xc3]]);
    prop::collection::vec(prop_oneof![4 => run, 1 => junk], 0..12).prop_map(|v| v.concat())
}

/// GPT-2 without the word cache, and a small trained tokenizer with and without.
fn uncached() -> &'static (BpeTokenizer, BpeTokenizer, BpeTokenizer) {
    static TOKS: std::sync::OnceLock<(BpeTokenizer, BpeTokenizer, BpeTokenizer)> =
        std::sync::OnceLock::new();
    TOKS.get_or_init(|| {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/bpe_hf_trained");
        let trained = BpeTokenizer::from_dir(dir).expect("trained fixture");
        let trained_off = trained.clone().with_word_cache(false);
        (gpt2().clone().with_word_cache(false), trained, trained_off)
    })
}

fn pieces(text: &[u8], fast: bool) -> Vec<std::ops::Range<usize>> {
    split_gpt2_with(text, fast).collect()
}

#[test]
fn word_cache_on_and_off_equal_on_the_corpus() {
    let off = gpt2().clone().with_word_cache(false);
    let docs = bpe_common::corpus_docs();
    let text = docs.concat();
    // Twice with the cache: cold, then warm from the first pass.
    for _ in 0..2 {
        assert_eq!(
            gpt2().encode_ordinary(text.as_bytes()),
            off.encode_ordinary(text.as_bytes())
        );
    }
    assert_eq!(
        gpt2().encode_batch(&docs, false),
        off.encode_batch(&docs, false)
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn simd_blocks_equal_scalar(bytes in prop::collection::vec(any::<u8>(), 0..=64)) {
        prop_assert_eq!(classify_block(&bytes), classify_block_scalar(&bytes));
    }

    #[test]
    fn fast_pieces_equal_reference_pieces(text in long_runs_text()) {
        prop_assert_eq!(pieces(&text, true), pieces(&text, false));
    }

    #[test]
    fn fast_pieces_equal_reference_on_arbitrary_bytes(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
        prop_assert_eq!(pieces(&bytes, true), pieces(&bytes, false));
    }

    /// The pattern's corner cases (contractions, whitespace runs ending in
    /// multi-byte spaces, a ' ' before them) at every offset from the fast
    /// path's 52-byte regions and 64-byte windows.
    #[test]
    fn fast_pieces_equal_reference_at_every_offset(
        pad in 0usize..120,
        filler in prop::sample::select(vec!["x", " ", "\n", "é", "'"]),
        text in tricky_text(),
    ) {
        let text = format!("{}{text}", filler.repeat(pad));
        prop_assert_eq!(pieces(text.as_bytes(), true), pieces(text.as_bytes(), false));
    }

    #[test]
    fn long_runs_equal_tiktoken(text in long_runs_text()) {
        if let Ok(text) = std::str::from_utf8(&text) {
            prop_assert_eq!(gpt2().encode_ordinary(text.as_bytes()), tiktoken().encode_ordinary(text));
        }
        let ids = gpt2().encode_ordinary(&text);
        prop_assert_eq!(gpt2().decode(&ids).unwrap(), text);
    }

    #[test]
    fn word_cache_on_and_off_equal(text in tricky_text(), other in long_runs_text()) {
        // A second tokenizer in the same thread shares the cache's slots.
        let (off, trained, trained_off) = uncached();
        for t in [text.as_bytes(), &other] {
            prop_assert_eq!(gpt2().encode_ordinary(t), off.encode_ordinary(t));
            prop_assert_eq!(trained.encode_ordinary(t), trained_off.encode_ordinary(t));
        }
    }

    #[test]
    fn tricky_strings_equal_tiktoken(text in tricky_text()) {
        prop_assert_eq!(gpt2().encode_ordinary(text.as_bytes()), tiktoken().encode_ordinary(&text));
        prop_assert_eq!(
            gpt2().encode_ids(text.as_bytes(), true),
            tiktoken().encode_with_special_tokens(&text)
        );
    }

    #[test]
    fn arbitrary_strings_equal_tiktoken(text in any::<String>()) {
        prop_assert_eq!(gpt2().encode_ordinary(text.as_bytes()), tiktoken().encode_ordinary(&text));
    }

    #[test]
    fn arbitrary_bytes_round_trip(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
        for special in [false, true] {
            let ids = gpt2().encode_ids(&bytes, special);
            prop_assert_eq!(gpt2().decode(&ids).unwrap(), bytes.clone());
        }
        let enc = gpt2().encode(&bytes, false);
        let mut at = 0;
        for &(s, e) in &enc.offsets {
            prop_assert_eq!(s, at);
            at = e;
        }
        prop_assert_eq!(at, bytes.len());
    }

    #[test]
    fn pieces_tile_arbitrary_bytes(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
        let mut at = 0;
        for r in split_gpt2(&bytes) {
            prop_assert_eq!(r.start, at);
            prop_assert!(r.end > r.start);
            at = r.end;
        }
        prop_assert_eq!(at, bytes.len());
    }
}
