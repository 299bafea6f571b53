//! What `lmkit.tiktoken_compat` needs beyond the HF-shaped API: the OpenAI
//! encodings by name, tokenizers of tiktoken ranks, and tiktoken's
//! token-level helpers, all on `lmkit_tokenizers`' byte-level BPE.

use lmkit_tokenizers::pretokenize::Pattern;
use lmkit_tokenizers::{BpeTokenizer, Tokenizer};
use pyo3::prelude::*;

use crate::errors::{value_error, PyResultExt};

/// OpenAI encoding `name` (`cl100k_base`, ...), built in.
pub(super) fn encoding(name: &str) -> PyResult<Tokenizer> {
    Ok(Tokenizer::Bpe(Box::new(
        lmkit_tokenizers::openai::encoding(name).py()?,
    )))
}

/// The tokenizer of tiktoken's `Encoding(pat_str=, mergeable_ranks=,
/// special_tokens=)`: a pattern with no scanner is compiled by
/// `fancy-regex` (slower); one that does not compile is a `ValueError`,
/// as in tiktoken.
pub(super) fn from_ranks(
    ranks: Vec<(Vec<u8>, u32)>,
    specials: Vec<(String, u32)>,
    pat_str: &str,
) -> PyResult<Tokenizer> {
    let pattern = Pattern::from_regex_or_custom(pat_str).py()?;
    let path = std::path::Path::new("<mergeable_ranks>");
    let t = BpeTokenizer::from_tiktoken_ranks(path, &ranks, &specials, pattern).py()?;
    Ok(Tokenizer::Bpe(Box::new(t)))
}

/// The BPE tokenizer, or a `ValueError` for WordPiece.
pub(super) fn bpe(t: &Tokenizer) -> PyResult<&BpeTokenizer> {
    match t {
        Tokenizer::Bpe(b) => Ok(b),
        Tokenizer::WordPiece(_) => Err(value_error(
            "this is a WordPiece tokenizer; tiktoken's API needs byte-level BPE".to_string(),
        )),
    }
}

/// Every ordinary token's bytes with its id, in id order.
pub(super) fn ordinary_tokens(t: &BpeTokenizer) -> Vec<(Vec<u8>, u32)> {
    let specials: Vec<u32> = t.special_tokens().map(|(_, id)| id).collect();
    (0..t.vocab_size() as u32)
        .filter(|id| !specials.contains(id))
        .filter_map(|id| t.token_bytes(id).map(|b| (b.to_vec(), id)))
        .collect()
}
