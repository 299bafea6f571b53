//! Property tests: arbitrary text never panics, offsets stay in bounds on
//! char boundaries and increase, truncation and windows respect their limits.

use std::path::Path;
use std::sync::OnceLock;

use lmkit_tokenizers::wordpiece::{Truncation, TruncationStrategy, WordPieceTokenizer};
use lmkit_tokenizers::Encoding;
use proptest::prelude::*;

fn tok() -> &'static WordPieceTokenizer {
    static T: OnceLock<WordPieceTokenizer> = OnceLock::new();
    T.get_or_init(|| {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../assets/minilm");
        let mut t = WordPieceTokenizer::from_dir(&dir)
            .unwrap_or_else(|e| panic!("{e}: run scripts/fetch-assets.sh first"));
        t.set_truncation(None).set_padding(None);
        t
    })
}

/// Text mixing any code point with the characters the normalizer treats specially.
fn text() -> impl Strategy<Value = String> {
    let pieces = prop_oneof![
        any::<char>().prop_map(String::from),
        "[a-zA-Z0-9 ,.!?'-]{1,8}",
        prop::sample::select(vec![
            "é", "e\u{301}", "\u{316}", "İ", "ß", "ﬁ", "野", "口", "한", "😀", "\u{0}", "\u{fffd}",
            "\u{200b}", "\u{ad}", "\t", "\n", "\u{a0}", "\u{3000}", "[SEP]", "[CLS]", "[MASK]",
            "[", "##", "“", "—", "\u{1734}", "\u{e000}",
        ])
        .prop_map(String::from),
    ];
    prop::collection::vec(pieces, 0..40).prop_map(|v| v.concat())
}

/// Offsets of a sequence's tokens: in bounds, on char boundaries, non-empty, increasing.
fn check_offsets(enc: &Encoding, text: &str, keep: impl Fn(usize) -> bool) {
    let mut last_end = 0;
    for (i, &(s, e)) in enc.offsets.iter().enumerate() {
        if enc.special_tokens_mask[i] == 1 {
            assert_eq!((s, e), (0, 0));
            continue;
        }
        if !keep(i) {
            continue;
        }
        assert!(
            s < e && e <= text.len(),
            "token {i}: {s}..{e} of {}",
            text.len()
        );
        assert!(text.is_char_boundary(s) && text.is_char_boundary(e));
        assert!(
            s >= last_end || s == enc.offsets[i.saturating_sub(1)].0,
            "token {i} goes back"
        );
        last_end = e;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn encode_never_panics_and_offsets_are_sane(s in text()) {
        let t = tok();
        let enc = t.encode(&s, true).unwrap();
        prop_assert_eq!(enc.ids.first(), Some(&t.cls_id()));
        prop_assert_eq!(enc.ids.last(), Some(&t.sep_id()));
        prop_assert!(enc.ids.iter().all(|&id| (id as usize) < t.vocab_size()));
        check_offsets(&enc, &s, |_| true);
        let _ = t.decode(&enc.ids, true).unwrap();
        prop_assert_eq!(t.encode_bytes(s.as_bytes(), true).unwrap(), enc);
    }

    #[test]
    fn pairs_respect_truncation(a in text(), b in text(), max in 3usize..40, strategy in 0..3) {
        let mut t = tok().clone();
        let strategy = [TruncationStrategy::LongestFirst, TruncationStrategy::OnlyFirst, TruncationStrategy::OnlySecond][strategy as usize];
        t.set_truncation(Some(Truncation::new(max).with_strategy(strategy)));
        if let Ok(enc) = t.encode_pair(&a, &b, true) {
            prop_assert!(enc.len() <= max);
            let first_len = enc.type_ids.iter().filter(|&&x| x == 0).count();
            check_offsets(&enc, &a, |i| i < first_len);
            check_offsets(&enc, &b, |i| i >= first_len);
        } else {
            // Only the only_* strategies can fail, when their sequence is too short.
            prop_assert!(strategy != TruncationStrategy::LongestFirst);
        }
    }

    #[test]
    fn windows_cover_the_context(q in "[a-z ]{0,30}", c in text(), max in 8usize..48, stride in 0usize..8) {
        let t = tok();
        if let Ok(windows) = t.encode_pair_windows(&q, &c, max, stride) {
            let context_tokens = t.encode(&c, false).unwrap().len();
            let mut seen = 0;
            for (k, w) in windows.iter().enumerate() {
                prop_assert!(w.encoding.len() <= max);
                let r = w.context_range();
                for p in r.clone() {
                    let (s, e) = w.encoding.offsets[p];
                    prop_assert!(c.is_char_boundary(s) && c.is_char_boundary(e) && s < e);
                }
                // Each window after the first repeats `stride` tokens of the previous one.
                seen += if k == 0 { r.len() } else { r.len() - stride.min(r.len()) };
            }
            prop_assert_eq!(seen, context_tokens);
        }
    }

    #[test]
    fn lowercase_words_decode_back(words in prop::collection::vec("[a-z]{1,12}", 0..20)) {
        let t = tok();
        let s = words.join(" ");
        let enc = t.encode(&s, true).unwrap();
        prop_assert_eq!(t.decode(&enc.ids, true).unwrap(), s);
    }
}
