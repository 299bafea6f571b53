//! Tokenizers for lmkit: GPT-2's byte-level BPE and BERT's WordPiece.
//!
//! This crate has no tensor code; it turns text into token ids and back,
//! reads and writes the Hugging Face file formats, and trains new vocabularies.
//! Offsets are byte ranges into the text that was encoded.

pub mod bpe;
mod error;
pub mod openai;
pub mod pretokenize;
mod pretokenize_tables;
pub mod tokenizer;
pub mod train_bpe;
pub mod wordpiece;

pub use bpe::BpeTokenizer;

/// The largest vocabulary read or trained (ids `0..MAX_VOCAB_SIZE`): 2^21,
/// eight times the largest published vocabularies. It bounds the tables a
/// malformed file or option can make us allocate.
pub const MAX_VOCAB_SIZE: usize = 1 << 21;
pub use error::{Error, Result};
pub use tokenizer::Tokenizer;

/// The result of encoding one text (or one text pair).
///
/// All vectors have the same length, one entry per token.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Encoding {
    pub ids: Vec<u32>,
    /// Segment of each token: 0 for the first text (and `[CLS]`), 1 for the pair.
    pub type_ids: Vec<u32>,
    /// Byte range of each token in the text it came from; `(0, 0)` for
    /// special and padding tokens.
    pub offsets: Vec<(usize, usize)>,
    /// 1 for tokens the tokenizer added (`[CLS]`, `[SEP]`, padding), else 0.
    pub special_tokens_mask: Vec<u8>,
    /// 1 for real tokens, 0 for padding.
    pub attention_mask: Vec<u8>,
}

impl Encoding {
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// The offsets in characters instead of bytes, as HF's Python tokenizers
    /// report them: `a` is the text encoded, `b` the pair's second text
    /// (tokens of type id 1 point into it). Added and padding tokens stay
    /// `(0, 0)`; see [`char_offsets`] for tokens holding part of a character.
    pub fn char_offsets(&self, a: &str, b: Option<&str>) -> Vec<(usize, usize)> {
        let (ca, cb) = (CharIndex::new(a), b.map(CharIndex::new));
        self.offsets
            .iter()
            .zip(&self.type_ids)
            .map(|(&r, &t)| match (&cb, t) {
                _ if r == (0, 0) => r,
                (Some(cb), 1) => cb.range(r),
                _ => ca.range(r),
            })
            .collect()
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }
}

/// Byte ranges of `text` as character ranges: a range that starts or ends
/// inside a character (a byte-level token holding part of one) widens to the
/// whole character, as HF's tokenizers report it.
pub fn char_offsets(text: &str, bytes: &[(usize, usize)]) -> Vec<(usize, usize)> {
    let index = CharIndex::new(text);
    bytes.iter().map(|&r| index.range(r)).collect()
}

/// Characters before every byte position of a text.
struct CharIndex<'a> {
    text: &'a str,
    /// `chars_before[b]`: characters that start before byte `b`.
    chars_before: Vec<usize>,
}

impl<'a> CharIndex<'a> {
    fn new(text: &'a str) -> Self {
        let mut chars_before = vec![0usize; text.len() + 1];
        let mut n = 0;
        for (b, slot) in chars_before.iter_mut().enumerate() {
            *slot = n;
            if text.is_char_boundary(b) && b < text.len() {
                n += 1;
            }
        }
        CharIndex { text, chars_before }
    }

    fn range(&self, (s, e): (usize, usize)) -> (usize, usize) {
        let len = self.text.len();
        let s = s.min(len);
        // The character containing byte s.
        let start = if self.text.is_char_boundary(s) {
            self.chars_before[s]
        } else {
            self.chars_before[s] - 1
        };
        (start, self.chars_before[e.min(len)])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_ranges_become_character_ranges() {
        let text = "aé😀b"; // bytes: a 0, é 1..3, 😀 3..7, b 7
        assert_eq!(
            char_offsets(text, &[(0, 1), (1, 3), (3, 5), (5, 7), (7, 8)]),
            [(0, 1), (1, 2), (2, 3), (2, 3), (3, 4)]
        );
    }

    #[test]
    fn pair_offsets_point_into_their_own_text() {
        let enc = Encoding {
            ids: vec![1, 2, 3, 4, 5],
            type_ids: vec![0, 0, 0, 1, 1],
            offsets: vec![(0, 0), (0, 2), (0, 0), (0, 3), (0, 0)],
            special_tokens_mask: vec![1, 0, 1, 0, 1],
            attention_mask: vec![1; 5],
        };
        assert_eq!(
            enc.char_offsets("é", Some("a😀")),
            [(0, 0), (0, 1), (0, 0), (0, 2), (0, 0)]
        );
    }
}
