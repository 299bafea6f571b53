//! The hand-written scanners of tiktoken's patterns (GPT-2's, cl100k's,
//! o200k's) against fancy-regex's evaluation of the same pattern text
//! (`Pattern::regex`, which is tiktoken's `pat_str`, the engine tiktoken
//! runs it on): the same pieces on random text of the patterns' corner
//! cases, on arbitrary Unicode, and on the books corpus.

mod bpe_common;

use std::ops::Range;

use lmkit_tokenizers::pretokenize::{split_cl100k, split_gpt2, split_o200k, Pattern};
use proptest::prelude::*;

const PATTERNS: [Pattern; 3] = [Pattern::Gpt2, Pattern::Cl100k, Pattern::O200k];

fn scanner(p: &Pattern, text: &[u8]) -> Vec<Range<usize>> {
    match p {
        Pattern::Gpt2 => split_gpt2(text).collect(),
        Pattern::Cl100k => split_cl100k(text).collect(),
        Pattern::O200k => split_o200k(text).collect(),
        Pattern::Custom(c) => c.pieces(text),
    }
}

fn reference(p: &Pattern, text: &str) -> Vec<Range<usize>> {
    use std::sync::OnceLock;
    static RES: OnceLock<Vec<fancy_regex::Regex>> = OnceLock::new();
    let res = RES.get_or_init(|| {
        PATTERNS
            .iter()
            .map(|p| fancy_regex::Regex::new(p.regex()).expect("tiktoken's pattern compiles"))
            .collect()
    });
    let re = &res[PATTERNS.iter().position(|q| q == p).unwrap()];
    re.find_iter(text)
        .map(|m| m.expect("no backtrack limit hit").range())
        .collect()
}

fn check(p: &Pattern, text: &str) -> Result<(), TestCaseError> {
    let got = scanner(p, text.as_bytes());
    let want = reference(p, text);
    if got != want {
        let at = got.iter().zip(&want).take_while(|(a, b)| a == b).count();
        let show = |v: &[Range<usize>]| -> Vec<String> {
            v.iter()
                .skip(at)
                .take(3)
                .map(|r| format!("{:?}", &text[r.clone()]))
                .collect()
        };
        let from = got.get(at).map_or(0, |r| r.start);
        let context: String = text[from..].chars().take(40).collect();
        return Err(TestCaseError::fail(format!(
            "{p:?} at byte {from} ({context:?}…): piece {at} is {:?}, the regex's {:?}",
            show(&got),
            show(&want)
        )));
    }
    Ok(())
}

/// Text of the patterns' corner cases: cased, modifier and other letters,
/// marks, the long s that `(?i)` folds to `s`, numbers of several scripts,
/// every kind of whitespace, `/`, contractions of both cases.
fn tricky_text() -> impl Strategy<Value = String> {
    let atoms = prop::sample::select(vec![
        "a",
        "Z",
        "é",
        "É",
        "ǅ",
        "ʰ",
        "漢",
        "か",
        "я",
        "Я",
        "ω",
        "\u{301}",
        "\u{903}",
        "\u{20dd}",
        "ſ",
        "K",
        "١",
        "7",
        "Ⅻ",
        "½",
        " ",
        "  ",
        "\n",
        "\r",
        "\r\n",
        "\t",
        "\u{b}",
        "\u{85}",
        "\u{a0}",
        "\u{3000}",
        "\u{2028}",
        "'",
        "'s",
        "'T",
        "'re",
        "'VE",
        "'m",
        "'Ll",
        "'d",
        "'ſ",
        "!",
        ".",
        "/",
        "//",
        "-",
        "😀",
        "\u{200d}",
        "\u{0}",
        "<|endoftext|>",
    ]);
    let any = any::<char>().prop_map(String::from);
    prop::collection::vec(
        prop_oneof![6 => atoms.prop_map(String::from), 1 => any],
        0..40,
    )
    .prop_map(|v| v.concat())
}

/// Mostly ASCII text, long enough to cross the o200k scanner's 64-byte
/// windows (and its 32-byte lookahead) with runs of every ASCII class, and
/// now and then a character that sends it to its character-at-a-time path.
fn ascii_text() -> impl Strategy<Value = String> {
    let atoms = prop::sample::select(vec![
        "a", "Z", "hello", "WORLD", "Camel", "aB", "'s", "'LL", "'ve", "'", " ", "  ", "\n",
        "\r\n", "\r", "\t", " \n ", "\u{b}", "7", "123", "4567", "!", ".", "/", "//", "-", "(",
        "\"", "\u{0}", "\u{7f}", "é", "\u{a0}", "\u{301}", "漢", "١", "ſ",
    ]);
    let run = (
        prop::sample::select(vec!["x", "X", "-", " ", "9", "\n"]),
        20..70usize,
    )
        .prop_map(|(a, n)| a.repeat(n));
    prop::collection::vec(
        prop_oneof![30 => atoms.prop_map(String::from), 1 => run],
        0..120,
    )
    .prop_map(|v| v.concat())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    #[test]
    fn scanners_equal_the_regex_on_ascii_text(text in ascii_text()) {
        for p in PATTERNS {
            check(&p, &text)?;
        }
    }

    #[test]
    fn scanners_equal_the_regex_on_tricky_text(text in tricky_text()) {
        for p in PATTERNS {
            check(&p, &text)?;
        }
    }

    #[test]
    fn scanners_equal_the_regex_on_any_text(text in any::<String>()) {
        for p in PATTERNS {
            check(&p, &text)?;
        }
    }

    /// Any bytes (invalid UTF-8 included): the pieces tile the input.
    #[test]
    fn pieces_tile_any_bytes(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
        for p in [Pattern::Cl100k, Pattern::O200k] {
            let mut at = 0;
            for r in scanner(&p, &bytes) {
                prop_assert_eq!(r.start, at);
                prop_assert!(r.end > r.start);
                at = r.end;
            }
            prop_assert_eq!(at, bytes.len());
        }
    }
}

#[test]
fn scanners_equal_the_regex_on_the_books() {
    let corpus = bpe_common::corpus_docs().concat();
    assert!(
        corpus.len() > 4_000_000,
        "corpus too small: {}",
        corpus.len()
    );
    for p in PATTERNS {
        check(&p, &corpus).unwrap_or_else(|e| panic!("{e}"));
    }
}

#[test]
fn scanners_equal_the_regex_on_the_adversarial_set() {
    for text in bpe_common::adversarial() {
        for p in PATTERNS {
            check(&p, &text).unwrap_or_else(|e| panic!("{e}"));
        }
    }
}

#[test]
fn safe_splits_are_piece_boundaries() {
    let text = bpe_common::corpus_docs().concat() + "a!\n/b\n/\n";
    for p in PATTERNS {
        let starts: std::collections::HashSet<usize> = scanner(&p, text.as_bytes())
            .iter()
            .map(|r| r.start)
            .collect();
        let (mut at, mut cuts) = (0, 0);
        while let Some(cut) = p.safe_split(text.as_bytes(), at + 1000) {
            assert!(
                starts.contains(&cut),
                "{p:?}: cut at {cut} is inside a piece"
            );
            let (left, right) = (&text.as_bytes()[..cut], &text.as_bytes()[cut..]);
            if cuts < 20 {
                let mut joined = scanner(&p, left);
                joined.extend(
                    scanner(&p, right)
                        .into_iter()
                        .map(|r| r.start + cut..r.end + cut),
                );
                assert_eq!(joined, scanner(&p, text.as_bytes()), "{p:?}: cut at {cut}");
            }
            at = cut;
            cuts += 1;
        }
        assert!(cuts > 100, "{p:?}: {cuts} cuts");
    }
}
