//! Tokenizers for lmkit: GPT-2's byte-level BPE and BERT's WordPiece.
//!
//! This crate has no tensor code; it turns text into token ids and back,
//! reads and writes the Hugging Face file formats, and trains new vocabularies.
//! Offsets are byte ranges into the text that was encoded.

pub mod bpe;
mod error;
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

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }
}
