//! GPT-2's pre-tokenizer, hand-written (no regex engine on the hot path).
//!
//! It splits text exactly like tiktoken's r50k/gpt2 pattern
//! `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
//! under the `regex` crate's Unicode tables (`\p{L}`, `\p{N}`, `\s` = White_Space),
//! which `tests/bpe_unicode_tables.rs` checks for every code point.
//!
//! It works on bytes so that any byte string can be encoded. Rule for invalid
//! UTF-8 (neither tiktoken nor HF can take it): at each position a valid UTF-8
//! character is taken if one starts there, else the single byte is a character
//! of the "other" class (`[^\s\p{L}\p{N}]`), like punctuation. On valid UTF-8
//! this is exactly the pattern above; on any input the pieces tile the text.

use std::ops::Range;
use std::sync::OnceLock;

use crate::pretokenize_tables::{LETTER, NUMBER, WHITE_SPACE};

/// The character classes the GPT-2 pattern distinguishes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum CharClass {
    /// `\p{L}`
    Letter = 0,
    /// `\p{N}`
    Number = 1,
    /// `\s` (Unicode White_Space)
    Space = 2,
    /// everything else, including bytes that are not valid UTF-8
    Other = 3,
}

const CLASSES: [CharClass; 4] = [
    CharClass::Letter,
    CharClass::Number,
    CharClass::Space,
    CharClass::Other,
];

const fn in_ranges(ranges: &[(u32, u32)], c: u32) -> bool {
    let mut i = 0;
    while i < ranges.len() {
        if ranges[i].0 <= c && c <= ranges[i].1 {
            return true;
        }
        i += 1;
    }
    false
}

const fn slow_class(c: u32) -> u8 {
    if in_ranges(LETTER, c) {
        0
    } else if in_ranges(NUMBER, c) {
        1
    } else if in_ranges(WHITE_SPACE, c) {
        2
    } else {
        3
    }
}

/// Class of each ASCII byte; 0x80.. are marked 4 = "decode first".
static BYTE_CLASS: [u8; 256] = {
    let mut t = [4u8; 256];
    let mut b = 0;
    while b < 128 {
        t[b] = slow_class(b as u32);
        b += 1;
    }
    t
};

/// Two-level lookup table over all code points: `blocks[index[c >> 8]][c & 255]`.
struct ClassTrie {
    index: Vec<u16>,
    blocks: Vec<[u8; 256]>,
}

fn trie() -> &'static ClassTrie {
    static TRIE: OnceLock<ClassTrie> = OnceLock::new();
    TRIE.get_or_init(|| {
        let mut flat = vec![3u8; 0x11_0000];
        for (ranges, class) in [(WHITE_SPACE, 2u8), (NUMBER, 1), (LETTER, 0)] {
            for &(lo, hi) in ranges {
                flat[lo as usize..=hi as usize].fill(class);
            }
        }
        let mut blocks: Vec<[u8; 256]> = Vec::new();
        let mut seen = std::collections::HashMap::new();
        let index = flat
            .chunks_exact(256)
            .map(|chunk| {
                let block: [u8; 256] = chunk.try_into().expect("chunk of 256");
                *seen.entry(block).or_insert_with(|| {
                    blocks.push(block);
                    (blocks.len() - 1) as u16
                })
            })
            .collect();
        ClassTrie { index, blocks }
    })
}

impl ClassTrie {
    #[inline]
    fn class(&self, c: u32) -> u8 {
        self.blocks[self.index[(c >> 8) as usize] as usize][(c & 255) as usize]
    }
}

/// The class of one character under the GPT-2 pattern.
pub fn char_class(c: char) -> CharClass {
    let c = c as u32;
    if c < 128 {
        CLASSES[BYTE_CLASS[c as usize] as usize]
    } else {
        CLASSES[trie().class(c) as usize]
    }
}

#[inline]
fn is_cont(b: u8) -> bool {
    (b as i8) < -64
}

/// Decodes the character at `text[i]` (`text[i] >= 0x80`): its code point and
/// length, or `None` when no valid UTF-8 sequence starts there.
#[inline]
fn decode_multibyte(text: &[u8], i: usize) -> Option<(u32, usize)> {
    let b0 = text[i];
    let b1 = *text.get(i + 1)?;
    match b0 {
        0xC2..=0xDF if is_cont(b1) => Some((((b0 as u32 & 0x1F) << 6) | (b1 as u32 & 0x3F), 2)),
        0xE0..=0xEF => {
            let ok1 = match b0 {
                0xE0 => (0xA0..=0xBF).contains(&b1),
                0xED => (0x80..=0x9F).contains(&b1),
                _ => is_cont(b1),
            };
            let b2 = *text.get(i + 2)?;
            (ok1 && is_cont(b2)).then_some({
                (
                    ((b0 as u32 & 0x0F) << 12) | ((b1 as u32 & 0x3F) << 6) | (b2 as u32 & 0x3F),
                    3,
                )
            })
        }
        0xF0..=0xF4 => {
            let ok1 = match b0 {
                0xF0 => (0x90..=0xBF).contains(&b1),
                0xF4 => (0x80..=0x8F).contains(&b1),
                _ => is_cont(b1),
            };
            let b2 = *text.get(i + 2)?;
            let b3 = *text.get(i + 3)?;
            (ok1 && is_cont(b2) && is_cont(b3)).then_some({
                (
                    ((b0 as u32 & 0x07) << 18)
                        | ((b1 as u32 & 0x3F) << 12)
                        | ((b2 as u32 & 0x3F) << 6)
                        | (b3 as u32 & 0x3F),
                    4,
                )
            })
        }
        _ => None,
    }
}

/// Splits `text` into GPT-2 pre-tokenization pieces (byte ranges that tile it).
pub fn split_gpt2(text: &[u8]) -> Gpt2Pieces<'_> {
    Gpt2Pieces {
        text,
        pos: 0,
        trie: trie(),
    }
}

/// Iterator over the pieces of [`split_gpt2`].
pub struct Gpt2Pieces<'a> {
    text: &'a [u8],
    pos: usize,
    trie: &'static ClassTrie,
}

impl Gpt2Pieces<'_> {
    /// Class and byte length of the character at `i < text.len()`.
    #[inline(always)]
    fn class_at(&self, i: usize) -> (u8, usize) {
        let b = self.text[i];
        let c = BYTE_CLASS[b as usize];
        if c != 4 {
            return (c, 1);
        }
        match decode_multibyte(self.text, i) {
            Some((cp, len)) => (self.trie.class(cp), len),
            None => (3, 1),
        }
    }

    /// End of the maximal run of class `class` starting at `j`.
    #[inline(always)]
    fn run(&self, mut j: usize, class: u8) -> usize {
        let text = self.text;
        while j < text.len() {
            let c = BYTE_CLASS[text[j] as usize];
            if c == class {
                j += 1;
            } else if c == 4 {
                let (c, len) = self.class_at(j);
                if c != class {
                    break;
                }
                j += len;
            } else {
                break;
            }
        }
        j
    }

    /// End of the piece starting at `i < text.len()`.
    #[inline]
    fn piece_end(&self, i: usize) -> usize {
        let text = self.text;
        let b = text[i];
        if b == b'\'' {
            match (text.get(i + 1), text.get(i + 2)) {
                (Some(b's' | b't' | b'm' | b'd'), _) => return i + 2,
                (Some(b'r'), Some(b'e')) | (Some(b'v'), Some(b'e')) | (Some(b'l'), Some(b'l')) => {
                    return i + 3
                }
                _ => {}
            }
        }
        let (class, len) = self.class_at(i);
        if class != 2 {
            return self.run(i + len, class);
        }
        // ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+`: a single space joins what follows.
        if b == b' ' && i + 1 < text.len() {
            let (next, next_len) = self.class_at(i + 1);
            if next != 2 {
                return self.run(i + 1 + next_len, next);
            }
        }
        // Whitespace run: `\s+(?!\S)` leaves its last character to the next
        // piece when a non-space follows; `\s+` takes a lone one.
        let mut j = i + len;
        let mut last = i;
        while j < text.len() {
            let (c, l) = self.class_at(j);
            if c != 2 {
                break;
            }
            last = j;
            j += l;
        }
        if j == text.len() || last == i {
            j
        } else {
            last
        }
    }
}

impl Iterator for Gpt2Pieces<'_> {
    type Item = Range<usize>;

    #[inline]
    fn next(&mut self) -> Option<Range<usize>> {
        if self.pos >= self.text.len() {
            return None;
        }
        let start = self.pos;
        let end = self.piece_end(start);
        self.pos = end;
        Some(start..end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pieces(s: &str) -> Vec<&str> {
        split_gpt2(s.as_bytes()).map(|r| &s[r]).collect()
    }

    #[test]
    fn splits_like_the_gpt2_pattern() {
        assert_eq!(
            pieces("Hello world, it's 2024!  \n\nI'LL  go"),
            [
                "Hello", " world", ",", " it", "'s", " 2024", "!", "  \n", "\n", "I", "'", "LL",
                " ", " go"
            ]
        );
        assert_eq!(pieces("don't''s"), ["don", "'t", "''", "s"]);
        assert_eq!(pieces(" 's"), [" '", "s"]);
        assert_eq!(pieces("a   "), ["a", "   "]);
        assert_eq!(pieces("\tx"), ["\t", "x"]);
        assert_eq!(pieces("x \u{3000}y"), ["x", " ", "\u{3000}", "y"]);
        assert_eq!(pieces("héllo wörld١٢"), ["héllo", " wörld", "١٢"]);
        assert_eq!(pieces(""), Vec::<&str>::new());
    }

    #[test]
    fn invalid_utf8_bytes_are_other_characters() {
        let text = b"a\xff\xfe! \x80b\xe2\x82";
        let got: Vec<&[u8]> = split_gpt2(text).map(|r| &text[r]).collect();
        assert_eq!(got, [&b"a"[..], b"\xff\xfe!", b" \x80", b"b", b"\xe2\x82"]);
    }

    #[test]
    fn classes() {
        assert_eq!(char_class('a'), CharClass::Letter);
        assert_eq!(char_class('é'), CharClass::Letter);
        assert_eq!(char_class('漢'), CharClass::Letter);
        assert_eq!(char_class('٣'), CharClass::Number);
        assert_eq!(char_class('Ⅻ'), CharClass::Number);
        assert_eq!(char_class('\u{85}'), CharClass::Space);
        assert_eq!(char_class('\u{200b}'), CharClass::Other);
        assert_eq!(char_class('😀'), CharClass::Other);
        assert_eq!(char_class('\u{301}'), CharClass::Other);
    }
}
