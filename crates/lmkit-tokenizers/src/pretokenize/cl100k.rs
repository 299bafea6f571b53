//! cl100k_base's pre-tokenizer, hand-written: the pieces of tiktoken's
//! pattern
//! `'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s`
//! one character at a time, with GPT-2's classes ([`super::char_class`])
//! and its rule for invalid UTF-8 (a lone byte is an "other" character).
//! `tests/openai_pretokenize.rs` checks it against fancy-regex's evaluation
//! of the pattern.

use std::ops::Range;

use super::class_at;
use super::scan::{contraction_len, space_run, up_to_three};

const LETTER: u8 = 0;
const NUMBER: u8 = 1;
const SPACE: u8 = 2;
const OTHER: u8 = 3;

/// Splits `text` into cl100k_base pre-tokenization pieces (byte ranges
/// that tile it).
pub fn split_cl100k(text: &[u8]) -> Cl100kPieces<'_> {
    Cl100kPieces { text, pos: 0 }
}

/// Iterator over the pieces of [`split_cl100k`].
pub struct Cl100kPieces<'a> {
    text: &'a [u8],
    pos: usize,
}

impl Cl100kPieces<'_> {
    /// Length of the character at `j` if it is of `class`.
    #[inline(always)]
    fn len_if(&self, j: usize, class: u8) -> Option<usize> {
        let (c, len) = class_at(self.text, j);
        (c == class).then_some(len)
    }

    /// End of the maximal run of `class` from `j`.
    #[inline(always)]
    fn run(&self, mut j: usize, class: u8) -> usize {
        while j < self.text.len() {
            let (c, len) = class_at(self.text, j);
            if c != class {
                break;
            }
            j += len;
        }
        j
    }

    /// End of the piece starting at `i < text.len()`: the pattern's
    /// alternatives in order.
    #[inline(always)]
    fn piece_end(&self, i: usize) -> usize {
        let (text, n) = (self.text, self.text.len());
        let contraction = contraction_len(text, i);
        if contraction > 0 {
            return i + contraction;
        }
        let (class, len) = class_at(text, i);
        match class {
            LETTER => return self.run(i + len, LETTER),
            NUMBER => return up_to_three(n, i, len, |j| self.len_if(j, NUMBER)),
            _ => {}
        }
        let b = text[i];
        let next = (i + len < n).then(|| class_at(text, i + len));
        // `[^\r\n\p{L}\p{N}]?+\p{L}++`: one space or other character
        // (not CR or LF) before letters joins them.
        if let Some((LETTER, l)) = next {
            if b != b'\r' && b != b'\n' {
                return self.run(i + len + l, LETTER);
            }
        }
        // ` ?[^\s\p{L}\p{N}]++[\r\n]*+`
        let others_from = match (class, next) {
            (OTHER, _) => Some(i),
            (_, Some((OTHER, _))) if b == b' ' => Some(i + 1),
            _ => None,
        };
        if let Some(s) = others_from {
            let mut j = self.run(s, OTHER);
            while j < n && (text[j] == b'\r' || text[j] == b'\n') {
                j += 1;
            }
            return j;
        }
        // Whitespace: `\s++$`, `\s*[\r\n]`, `\s+(?!\S)`, `\s`.
        let run = space_run(text, i, |j| self.len_if(j, SPACE));
        match run.crlf_end {
            _ if run.end == n => run.end,
            Some(e) => e,
            None if run.chars >= 2 => run.last,
            None => i + len,
        }
    }
}

impl Iterator for Cl100kPieces<'_> {
    type Item = Range<usize>;

    #[inline(always)]
    fn next(&mut self) -> Option<Range<usize>> {
        if self.pos >= self.text.len() {
            return None;
        }
        let start = self.pos;
        self.pos = self.piece_end(start);
        Some(start..self.pos)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pieces(s: &str) -> Vec<&str> {
        split_cl100k(s.as_bytes()).map(|r| &s[r]).collect()
    }

    #[test]
    fn splits_like_the_cl100k_pattern() {
        assert_eq!(
            pieces("Hello world, it'S 12345!  \n\nI'LL  go\n"),
            [
                "Hello", " world", ",", " it", "'S", " ", "123", "45", "!", "  \n\n", "I", "'LL",
                " ", " go", "\n"
            ]
        );
        assert_eq!(
            pieces("(hello) ...x\r\n y"),
            ["(hello", ")", " ...", "x", "\r\n", " y"]
        );
        assert_eq!(
            pieces("x\u{3000}y '\u{17f}"),
            ["x", "\u{3000}y", " '", "\u{17f}"]
        );
        assert_eq!(pieces("'\u{17f}x"), ["'\u{17f}", "x"]);
        assert_eq!(pieces("a \n\t "), ["a", " \n\t "]);
        assert_eq!(pieces(""), Vec::<&str>::new());
    }
}
