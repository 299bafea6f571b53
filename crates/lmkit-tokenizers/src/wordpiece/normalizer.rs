//! HF `BertNormalizer` followed by HF `BertPreTokenizer`, fused into one pass
//! over the input that hands out words together with their original offsets.
//!
//! HF works on a whole `NormalizedString` (every step rewrites the text and an
//! alignment table); every step it applies is per character, so we apply the
//! steps to each input character in turn and split words as the characters
//! come out. Each normalized character keeps the byte range of the input
//! character it came from, which is how HF maps offsets back too.
//!
//! The Unicode tables are the ones HF uses: `unicode_categories` (Cc/Cf/Co,
//! Mn, P*), the standard library (`char::is_whitespace`, `char::to_lowercase`)
//! and canonical decomposition (NFD).

use std::sync::OnceLock;

use unicode_categories::UnicodeCategories;

/// Which BertNormalizer steps are on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct NormalizerConfig {
    pub clean_text: bool,
    pub handle_chinese_chars: bool,
    pub strip_accents: bool,
    pub lowercase: bool,
}

/// What the normalizer + pre-tokenizer do with one ASCII byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ascii {
    /// Removed by `clean_text` (control characters, NUL).
    Drop,
    /// Whitespace: ends the current word.
    Space,
    /// Punctuation: a word of its own.
    Punct,
    /// Part of a word, after lowercasing if that is on.
    Char(u8),
}

#[derive(Debug, Clone)]
pub(crate) struct BertNormalizer {
    cfg: NormalizerConfig,
    ascii: [Ascii; 128],
}

/// A reusable buffer holding the word being built: its normalized text and,
/// for each normalized byte, the byte range of the input character it came
/// from (absolute, i.e. with the caller's base offset added).
#[derive(Debug, Default)]
pub(crate) struct WordBuf {
    pub norm: String,
    pub align: Vec<(usize, usize)>,
}

impl WordBuf {
    #[inline]
    fn flush<F: FnMut(&str, &[(usize, usize)])>(&mut self, f: &mut F) {
        if !self.norm.is_empty() {
            f(&self.norm, &self.align);
            self.norm.clear();
            self.align.clear();
        }
    }

    #[inline]
    fn push_char(&mut self, c: char, start: usize, end: usize) {
        self.norm.push(c);
        for _ in 0..c.len_utf8() {
            self.align.push((start, end));
        }
    }
}

/// Characters given a canonical decomposition by Unicode 13 and later: HF's
/// NFD tables (crate `unicode-normalization-alignments`) predate them and
/// leave them whole, so we do too. Found by the exhaustive code-point test.
const NFD_NEWER_THAN_HF: [u32; 21] = [
    0x105C9, 0x105E4, 0x11383, 0x11385, 0x1138E, 0x11391, 0x113C5, 0x113C7, 0x113C8, 0x11938,
    0x16121, 0x16122, 0x16123, 0x16124, 0x16125, 0x16126, 0x16127, 0x16128, 0x16D68, 0x16D69,
    0x16D6A,
];

/// Canonical decomposition as HF computes it.
#[inline]
fn decompose_like_hf(c: char, emit: impl FnMut(char)) {
    let mut emit = emit;
    if (c as u32) >= NFD_NEWER_THAN_HF[0] && NFD_NEWER_THAN_HF.binary_search(&(c as u32)).is_ok() {
        emit(c);
    } else {
        unicode_normalization::char::decompose_canonical(c, emit);
    }
}

/// `BertNormalizer`'s whitespace: `\t`, `\n`, `\r` and Unicode White_Space.
#[inline]
fn is_whitespace(c: char) -> bool {
    c.is_whitespace()
}

const OTHER: u8 = 1;
const PUNCT: u8 = 2;
const NONSPACING_MARK: u8 = 4;

/// The `unicode_categories` properties we need, computed from its tables
/// (binary searches, slow in the hot loop).
fn slow_class(c: char) -> u8 {
    let mut k = 0;
    if c.is_other() {
        k |= OTHER;
    }
    if c.is_ascii_punctuation() || c.is_punctuation() {
        k |= PUNCT;
    }
    if c.is_mark_nonspacing() {
        k |= NONSPACING_MARK;
    }
    k
}

/// Properties of a character; the Basic Multilingual Plane's come from
/// tables of 256 code points, each built the first time one of its
/// characters is asked about. (One table of the whole plane took ~5 ms to
/// build, a quarter of a `lmkit tokenize` process on a BERT tokenizer.)
#[inline]
fn class(c: char) -> u8 {
    static BMP: [OnceLock<[u8; 256]>; 256] = [const { OnceLock::new() }; 256];
    let cp = c as u32;
    if cp < 0x10000 {
        let page = BMP[(cp >> 8) as usize].get_or_init(|| {
            std::array::from_fn(|i| char::from_u32(cp & !0xFF | i as u32).map_or(0, slow_class))
        });
        page[(cp & 0xFF) as usize]
    } else {
        slow_class(c)
    }
}

/// `BertNormalizer`'s control characters: Cc, Cf and Co, except `\t\n\r`.
#[inline]
fn is_control(c: char) -> bool {
    !matches!(c, '\t' | '\n' | '\r') && class(c) & OTHER != 0
}

/// `BertPreTokenizer`'s punctuation: ASCII punctuation or Unicode P*.
#[inline]
pub(crate) fn is_bert_punc(c: char) -> bool {
    class(c) & PUNCT != 0
}

#[inline]
fn is_nonspacing_mark(c: char) -> bool {
    class(c) & NONSPACING_MARK != 0
}

/// The CJK ideograph blocks, exactly as HF `is_chinese_char`.
#[inline]
pub(crate) fn is_chinese_char(c: char) -> bool {
    matches!(c as u32,
        0x4E00..=0x9FFF
        | 0x3400..=0x4DBF
        | 0x20000..=0x2A6DF
        | 0x2A700..=0x2B73F
        | 0x2B740..=0x2B81F
        | 0x2B920..=0x2CEAF
        | 0xF900..=0xFAFF
        | 0x2F800..=0x2FA1F)
}

impl BertNormalizer {
    pub(crate) fn new(cfg: NormalizerConfig) -> Self {
        let mut ascii = [Ascii::Drop; 128];
        for (b, slot) in ascii.iter_mut().enumerate() {
            let c = b as u8 as char;
            *slot = if cfg.clean_text && (b == 0 || is_control(c)) {
                Ascii::Drop
            } else if is_whitespace(c) {
                Ascii::Space
            } else if is_bert_punc(c) {
                Ascii::Punct
            } else if cfg.lowercase {
                Ascii::Char(c.to_ascii_lowercase() as u8)
            } else {
                Ascii::Char(b as u8)
            };
        }
        Self { cfg, ascii }
    }

    /// Normalizes and pre-tokenizes `text`, calling `f(word, alignments)` for
    /// each word in order. `base` is added to every offset.
    pub(crate) fn for_each_word<F: FnMut(&str, &[(usize, usize)])>(
        &self,
        text: &str,
        base: usize,
        buf: &mut WordBuf,
        mut f: F,
    ) {
        buf.norm.clear();
        buf.align.clear();
        let bytes = text.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            let b = bytes[i];
            if b < 0x80 {
                match self.ascii[b as usize] {
                    Ascii::Drop => {}
                    Ascii::Space => buf.flush(&mut f),
                    Ascii::Punct => {
                        buf.flush(&mut f);
                        buf.norm.push(b as char);
                        buf.align.push((base + i, base + i + 1));
                        buf.flush(&mut f);
                    }
                    Ascii::Char(m) => {
                        buf.norm.push(m as char);
                        buf.align.push((base + i, base + i + 1));
                    }
                }
                i += 1;
            } else {
                // `i` is a char boundary of a valid `str`, so a char follows.
                let Some(c) = text[i..].chars().next() else {
                    break;
                };
                let len = c.len_utf8();
                self.push_non_ascii(c, base + i, base + i + len, buf, &mut f);
                i += len;
            }
        }
        buf.flush(&mut f);
    }

    /// The normalized text alone (what HF's `normalize_str` returns), for tests
    /// and training.
    #[cfg(test)]
    pub(crate) fn words(&self, text: &str) -> Vec<(String, (usize, usize))> {
        let mut out = Vec::new();
        let mut buf = WordBuf::default();
        self.for_each_word(text, 0, &mut buf, |w, a| {
            out.push((w.to_string(), (a[0].0, a[a.len() - 1].1)));
        });
        out
    }

    fn push_non_ascii<F: FnMut(&str, &[(usize, usize)])>(
        &self,
        c: char,
        start: usize,
        end: usize,
        buf: &mut WordBuf,
        f: &mut F,
    ) {
        let cfg = &self.cfg;
        if cfg.clean_text {
            if c == '\u{fffd}' || is_control(c) {
                return;
            }
            if is_whitespace(c) {
                buf.flush(f);
                return;
            }
        }
        // Spaces inserted around CJK ideographs make each one a word.
        let chinese = cfg.handle_chinese_chars && is_chinese_char(c);
        if chinese {
            buf.flush(f);
        }
        match (cfg.strip_accents, cfg.lowercase) {
            (false, false) => emit(c, start, end, buf, f),
            (false, true) => c.to_lowercase().for_each(|l| emit(l, start, end, buf, f)),
            (true, lower) => decompose_like_hf(c, |d| {
                if is_nonspacing_mark(d) {
                    return;
                }
                if lower {
                    d.to_lowercase().for_each(|l| emit(l, start, end, buf, f));
                } else {
                    emit(d, start, end, buf, f);
                }
            }),
        }
        if chinese {
            buf.flush(f);
        }
    }
}

/// Pre-tokenizes one normalized character.
#[inline]
fn emit<F: FnMut(&str, &[(usize, usize)])>(
    c: char,
    start: usize,
    end: usize,
    buf: &mut WordBuf,
    f: &mut F,
) {
    if is_whitespace(c) {
        buf.flush(f);
    } else if is_bert_punc(c) {
        buf.flush(f);
        buf.push_char(c, start, end);
        buf.flush(f);
    } else {
        buf.push_char(c, start, end);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uncased() -> BertNormalizer {
        BertNormalizer::new(NormalizerConfig {
            clean_text: true,
            handle_chinese_chars: true,
            strip_accents: true,
            lowercase: true,
        })
    }

    /// The paged table gives `unicode_categories`' answer for every code
    /// point (each page's index arithmetic, the surrogate gap, past the BMP).
    #[test]
    fn class_table_matches_the_categories() {
        for c in (0..=0x10FFFFu32)
            .step_by(7)
            .chain(0..0x10000)
            .filter_map(char::from_u32)
        {
            assert_eq!(class(c), slow_class(c), "{:x}", c as u32);
        }
    }

    #[test]
    fn hf_pretokenizer_example() {
        // The example from HF's BertPreTokenizer tests (cased, so no lowercasing).
        let n = BertNormalizer::new(NormalizerConfig {
            clean_text: true,
            handle_chinese_chars: true,
            strip_accents: false,
            lowercase: false,
        });
        let got = n.words("Hey friend!     How are you?!?");
        let want = [
            ("Hey", (0, 3)),
            ("friend", (4, 10)),
            ("!", (10, 11)),
            ("How", (16, 19)),
            ("are", (20, 23)),
            ("you", (24, 27)),
            ("?", (27, 28)),
            ("!", (28, 29)),
            ("?", (29, 30)),
        ];
        assert_eq!(got.len(), want.len());
        for ((w, o), (ww, wo)) in got.iter().zip(want) {
            assert_eq!((w.as_str(), *o), (ww, wo));
        }
    }

    #[test]
    fn chinese_accents_controls() {
        let got = uncased().words("野口 Été x\u{0}y\u{7}z\tW\u{fffd}");
        let words: Vec<_> = got.iter().map(|(w, o)| (w.as_str(), *o)).collect();
        assert_eq!(
            words,
            [
                ("野", (0, 3)),
                ("口", (3, 6)),
                ("ete", (7, 12)),
                ("xyz", (13, 18)),
                ("w", (19, 20))
            ]
        );
    }
}
