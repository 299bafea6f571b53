//! `lmkit.Encoding`.

use std::sync::Arc;

use lmkit_tokenizers::{Encoding, Tokenizer};
use pyo3::prelude::*;

/// One encoded input, as HF tokenizers' `Encoding`: `ids`, `tokens`,
/// `offsets` (characters of the text it came from; a pair's second-text
/// tokens point into the pair), `attention_mask`, `type_ids`,
/// `special_tokens_mask`.
#[pyclass(module = "lmkit", name = "Encoding", frozen)]
pub struct PyEncoding {
    pub(super) enc: Encoding,
    pub(super) tok: Arc<Tokenizer>,
    pub(super) text: String,
    pub(super) pair: Option<String>,
}

#[pymethods]
impl PyEncoding {
    #[getter]
    fn ids(&self) -> Vec<u32> {
        self.enc.ids.clone()
    }

    #[getter]
    fn type_ids(&self) -> Vec<u32> {
        self.enc.type_ids.clone()
    }

    #[getter]
    fn attention_mask(&self) -> Vec<u32> {
        self.enc
            .attention_mask
            .iter()
            .map(|&x| u32::from(x))
            .collect()
    }

    #[getter]
    fn special_tokens_mask(&self) -> Vec<u32> {
        self.enc
            .special_tokens_mask
            .iter()
            .map(|&x| u32::from(x))
            .collect()
    }

    /// Character ranges `(start, end)` of each token in its text.
    #[getter]
    fn offsets(&self) -> Vec<(usize, usize)> {
        self.enc.char_offsets(&self.text, self.pair.as_deref())
    }

    /// Byte ranges of each token in its text (UTF-8).
    #[getter]
    fn byte_offsets(&self) -> Vec<(usize, usize)> {
        self.enc.offsets.clone()
    }

    /// Each token's spelling in the vocabulary (`Ġworld`, `##ing`).
    #[getter]
    fn tokens(&self) -> Vec<String> {
        self.enc
            .ids
            .iter()
            .map(|&id| self.tok.id_to_token(id).unwrap_or_default().to_owned())
            .collect()
    }

    fn __len__(&self) -> usize {
        self.enc.len()
    }

    fn __repr__(&self) -> String {
        format!(
            "Encoding(num_tokens={}, ids={:?})",
            self.enc.len(),
            self.enc.ids
        )
    }
}
