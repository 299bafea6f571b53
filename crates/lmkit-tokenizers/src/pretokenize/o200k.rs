//! o200k_base's pre-tokenizer, hand-written: the pieces of tiktoken's
//! pattern (its alternatives, in order)
//!
//! ```text
//! [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?
//! [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?
//! \p{N}{1,3}
//!  ?[^\s\p{L}\p{N}]+[\r\n/]*
//! \s*[\r\n]+
//! \s+(?!\S)
//! \s+
//! ```
//!
//! with the backtracking of a regex engine worked out by hand (the
//! "upper" run gives back its last characters to the "lower" one). Marks
//! (`\p{M}`) are in both word classes and also "other" (they are not
//! `\p{L}`). Invalid UTF-8 bytes are "other" characters, as for GPT-2.
//! `tests/openai_pretokenize.rs` checks it against fancy-regex's evaluation
//! of the pattern.

use std::ops::Range;
use std::sync::OnceLock;

use super::scan::{contraction_len, space_run, up_to_three};
use super::{classify_block, decode_multibyte, page_of_classes};
use crate::pretokenize_tables::{LOWER, MARK, MODIFIER_OTHER, NUMBER, UPPER, WHITE_SPACE};

/// `\p{Lu}`, `\p{Lt}`: the upper word class only.
const UPPER_ONLY: u8 = 0;
/// `\p{Ll}`: the lower word class only.
const LOWER_ONLY: u8 = 1;
/// `\p{Lm}`, `\p{Lo}`: both word classes.
const BOTH: u8 = 2;
/// `\p{M}`: both word classes, and not `\p{L}`.
const MARK_C: u8 = 3;
const NUMBER_C: u8 = 4;
const SPACE: u8 = 5;
const OTHER: u8 = 6;

#[inline(always)]
fn upper(c: u8) -> bool {
    matches!(c, UPPER_ONLY | BOTH | MARK_C)
}

#[inline(always)]
fn lower(c: u8) -> bool {
    matches!(c, LOWER_ONLY | BOTH | MARK_C)
}

/// `[^\s\p{L}\p{N}]`
#[inline(always)]
fn other(c: u8) -> bool {
    matches!(c, MARK_C | OTHER)
}

/// Class of each ASCII byte; 0x80.. are 7 = "decode first".
static ASCII: [u8; 256] = {
    let mut t = [7u8; 256];
    let mut b = 0;
    while b < 128 {
        t[b] = match b as u8 {
            b'A'..=b'Z' => UPPER_ONLY,
            b'a'..=b'z' => LOWER_ONLY,
            b'0'..=b'9' => NUMBER_C,
            b'\t'..=b'\r' | b' ' => SPACE,
            _ => OTHER,
        };
        b += 1;
    }
    t
};

/// Class of a code point, from its page of 256 built on first use (as
/// GPT-2's classes are).
#[inline]
fn class_of(c: u32) -> u8 {
    static PAGES: [OnceLock<[u8; 256]>; 0x1100] = [const { OnceLock::new() }; 0x1100];
    PAGES[(c >> 8) as usize].get_or_init(|| {
        let classes: [(&[(u32, u32)], u8); 6] = [
            (WHITE_SPACE, SPACE),
            (NUMBER, NUMBER_C),
            (MARK, MARK_C),
            (MODIFIER_OTHER, BOTH),
            (LOWER, LOWER_ONLY),
            (UPPER, UPPER_ONLY),
        ];
        page_of_classes(c >> 8, &classes, OTHER)
    })[(c & 255) as usize]
}

/// Class and byte length of the character at `text[i]`.
#[inline(always)]
fn class_at(text: &[u8], i: usize) -> (u8, usize) {
    let c = ASCII[text[i] as usize];
    if c != 7 {
        return (c, 1);
    }
    match decode_multibyte(text, i) {
        Some((cp, len)) => (class_of(cp), len),
        None => (OTHER, 1),
    }
}

/// Splits `text` into o200k_base pre-tokenization pieces (byte ranges
/// that tile it).
pub fn split_o200k(text: &[u8]) -> O200kPieces<'_> {
    O200kPieces {
        text,
        pos: 0,
        // Read at the first piece (`base` past any start).
        window: Window {
            base: usize::MAX,
            ..Window::default()
        },
    }
}

/// Iterator over the pieces of [`split_o200k`].
pub struct O200kPieces<'a> {
    text: &'a [u8],
    pos: usize,
    window: Window,
}

/// Class masks of up to 64 bytes of text from `base` ([`classify_block`]):
/// bit `j` is byte `base + j`. `unknown` marks the bytes whose class the
/// masks do not give: non-ASCII ones (and, see [`unknown_at`], those past
/// the window; past the text's end, bits are in no class).
#[derive(Default)]
struct Window {
    base: usize,
    upper: u64,
    lower: u64,
    digit: u64,
    white: u64,
    other: u64,
    unknown: u64,
    /// The text goes on past the window.
    more: bool,
}

/// A window is read again from a piece's start when fewer of its bytes are
/// left (and when the piece runs past it: see [`O200kPieces::next`]).
const LOOKAHEAD: usize = 16;

impl Window {
    /// Whether a piece from `i` (in the window) that the fast path left
    /// ran past the window: no byte of it from `i` on is non-ASCII, and
    /// the text goes on.
    #[inline(always)]
    fn past_edge(&self, i: usize) -> bool {
        self.more && self.base != i && self.unknown >> (i - self.base) == 0
    }

    fn at(text: &[u8], base: usize) -> Self {
        // The scanner is the first to read the text: ask for it ahead.
        #[cfg(target_arch = "x86_64")]
        // SAFETY: SSE is in every x86_64 CPU, and a prefetch never faults,
        // whatever the address (here possibly past the text).
        unsafe {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            _mm_prefetch::<_MM_HINT_T0>(text.as_ptr().wrapping_add(base + 512).cast());
        }
        let end = text.len().min(base + 64);
        let m = classify_block(&text[base..end]);
        Window {
            base,
            upper: m.class[0] & !m.lower,
            lower: m.lower,
            digit: m.class[1],
            white: m.class[2],
            other: m.class[3],
            unknown: m.non_ascii,
            more: end < text.len(),
        }
    }
}

/// End of the run from bit `s` of the bits in `m`.
#[inline(always)]
fn run_end(m: u64, s: u32) -> u32 {
    if s >= 64 {
        return s;
    }
    s + (!(m >> s)).trailing_zeros()
}

/// Whether bit `j` of `unknown` is set, or `j` is past its 64 bits.
#[inline(always)]
fn unknown_at(unknown: u64, j: u32) -> bool {
    j >= 64 || (unknown >> j) & 1 != 0
}

impl O200kPieces<'_> {
    /// End of the maximal run from `j` of characters whose class `is` takes.
    #[inline(always)]
    fn run(&self, mut j: usize, is: impl Fn(u8) -> bool) -> usize {
        while j < self.text.len() {
            let (c, len) = class_at(self.text, j);
            if !is(c) {
                break;
            }
            j += len;
        }
        j
    }

    /// The first alternative from `p` (after the optional prefix):
    /// `U*L+` where the upper run `U*` gives back characters until a
    /// lower one follows it. Its end, before any contraction.
    fn upper_then_lower(&self, p: usize) -> Option<usize> {
        let text = self.text;
        let (mut u, mut last_lower) = (p, None);
        while u < text.len() {
            let (c, len) = class_at(text, u);
            if !upper(c) {
                break;
            }
            if lower(c) {
                last_lower = Some(u + len);
            }
            u += len;
        }
        match (u < text.len()).then(|| class_at(text, u)) {
            Some((c, len)) if lower(c) => Some(self.run(u + len, lower)),
            // The lower run starts at the last upper-run character that is
            // also lower; the next one is not lower, so it is that one only.
            _ => last_lower,
        }
    }

    /// The second alternative from `p`: `U+L*`, before any contraction.
    fn upper_then_maybe_lower(&self, p: usize) -> Option<usize> {
        let u = self.run(p, upper);
        (u > p).then(|| self.run(u, lower))
    }

    /// End of the piece starting at `i < text.len()` from the window's
    /// masks, or `None` where a byte it depends on is not ASCII or not in
    /// the window: the alternatives of [`Self::piece_end`] on ASCII
    /// characters, with each run's end a count of trailing zeros.
    #[inline(always)]
    fn piece_end_ascii(&mut self, i: usize) -> Option<usize> {
        if i < self.window.base || i - self.window.base > 64 - LOOKAHEAD {
            self.window = Window::at(self.text, i);
        }
        let w = &self.window;
        let k = i - w.base;
        let [upper, lower, digit, white, other, mut unknown] =
            [w.upper, w.lower, w.digit, w.white, w.other, w.unknown].map(|m| m >> k);
        if w.more {
            // The top `k` bits are past the window.
            unknown |= !(u64::MAX >> k);
        }
        if unknown & 1 != 0 {
            return None;
        }
        let b = self.text[i];
        let letter = upper | lower;
        let prefix = (white | other) & 1 != 0 && b != b'\r' && b != b'\n';
        if prefix && unknown & 2 != 0 {
            return None;
        }
        let p = if letter & 1 != 0 {
            Some(0)
        } else {
            (prefix && letter & 2 != 0).then_some(1)
        };
        if let Some(p) = p {
            // `U*L+`, else `U+L*` (ASCII letters are of one case).
            let u = run_end(upper, p);
            let l = run_end(lower, u);
            if unknown_at(unknown, u) || unknown_at(unknown, l) {
                return None;
            }
            let e = i + l as usize;
            return Some(e + contraction_len(self.text, e));
        }
        if digit & 1 != 0 {
            let r = run_end(digit, 0);
            return match r {
                3.. => Some(i + 3),
                _ if unknown_at(unknown, r) => None,
                _ => Some(i + r as usize),
            };
        }
        // ` ?[^\s\p{L}\p{N}]+[\r\n/]*`
        let others_from = if other & 1 != 0 {
            Some(0)
        } else if b == b' ' {
            if unknown & 2 != 0 {
                return None;
            }
            (other & 2 != 0).then_some(1)
        } else {
            None
        };
        let text = self.text;
        if let Some(s) = others_from {
            let e = run_end(other, s);
            if unknown_at(unknown, e) {
                return None;
            }
            let mut j = i + e as usize;
            while j < text.len() && matches!(text[j], b'\r' | b'\n' | b'/') {
                j += 1;
            }
            return Some(j);
        }
        // Whitespace: `\s*[\r\n]+`, `\s+(?!\S)`, `\s+`.
        let e = run_end(white, 0);
        if unknown_at(unknown, e) {
            return None;
        }
        let end = i + e as usize;
        Some(
            match (i..end).rev().find(|&j| matches!(text[j], b'\r' | b'\n')) {
                Some(c) => c + 1,
                None if end < text.len() && e >= 2 => end - 1,
                None => end,
            },
        )
    }

    /// End of the piece starting at `i < text.len()`.
    #[inline(always)]
    fn piece_end(&self, i: usize) -> usize {
        let (text, n) = (self.text, self.text.len());
        let (class, len) = class_at(text, i);
        let b = text[i];
        // `[^\r\n\p{L}\p{N}]?`: taken first, given back if the rest fails.
        let prefix = matches!(class, MARK_C | SPACE | OTHER) && b != b'\r' && b != b'\n';
        let word = upper(class) || lower(class);
        let word_end = (prefix.then(|| self.upper_then_lower(i + len)).flatten())
            .or_else(|| word.then(|| self.upper_then_lower(i)).flatten())
            .or_else(|| {
                prefix
                    .then(|| self.upper_then_maybe_lower(i + len))
                    .flatten()
            })
            .or_else(|| word.then(|| self.upper_then_maybe_lower(i)).flatten());
        if let Some(e) = word_end {
            return e + contraction_len(text, e);
        }
        let len_if = |j: usize, class: u8| {
            let (c, l) = class_at(text, j);
            (c == class).then_some(l)
        };
        if class == NUMBER_C {
            return up_to_three(n, i, len, |j| len_if(j, NUMBER_C));
        }
        // ` ?[^\s\p{L}\p{N}]+[\r\n/]*`
        let others_from = if other(class) {
            Some(i)
        } else if b == b' ' && i + 1 < n && other(class_at(text, i + 1).0) {
            Some(i + 1)
        } else {
            None
        };
        if let Some(s) = others_from {
            let mut j = self.run(s, other);
            while j < n && matches!(text[j], b'\r' | b'\n' | b'/') {
                j += 1;
            }
            return j;
        }
        // Whitespace: `\s*[\r\n]+`, `\s+(?!\S)`, `\s+`.
        let run = space_run(text, i, |j| len_if(j, SPACE));
        match run.crlf_end {
            Some(e) => e,
            None if run.end < n && run.chars >= 2 => run.last,
            None => run.end,
        }
    }
}

impl Iterator for O200kPieces<'_> {
    type Item = Range<usize>;

    #[inline(always)]
    fn next(&mut self) -> Option<Range<usize>> {
        if self.pos >= self.text.len() {
            return None;
        }
        let start = self.pos;
        self.pos = match self.piece_end_ascii(start) {
            Some(end) => end,
            // No byte of the window from `start` on is non-ASCII: the piece
            // ran past it, so again from a window at its start.
            None if self.window.past_edge(start) => {
                self.window = Window::at(self.text, start);
                self.piece_end_ascii(start)
                    .unwrap_or_else(|| self.piece_end(start))
            }
            None => self.piece_end(start),
        };
        Some(start..self.pos)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pieces(s: &str) -> Vec<&str> {
        split_o200k(s.as_bytes()).map(|r| &s[r]).collect()
    }

    #[test]
    fn splits_like_the_o200k_pattern() {
        assert_eq!(
            pieces("HELLOworld helloWorld I'M 12345!/\n/ x \n  "),
            [
                "HELLOworld",
                " hello",
                "World",
                " I'M",
                " ",
                "123",
                "45",
                "!/\n/",
                " x",
                " \n",
                "  "
            ]
        );
        assert_eq!(pieces("a\u{301}b \u{301}1"), ["a\u{301}b", " \u{301}", "1"]);
        assert_eq!(pieces(""), Vec::<&str>::new());
    }
}
