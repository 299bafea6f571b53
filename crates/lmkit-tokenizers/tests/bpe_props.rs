//! Property tests: arbitrary strings encode exactly like tiktoken; arbitrary
//! bytes (invalid UTF-8 included) round-trip; pre-tokenization tiles the input.

mod bpe_common;

use bpe_common::{gpt2, tiktoken};
use lmkit_tokenizers::pretokenize::split_gpt2;
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

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

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
