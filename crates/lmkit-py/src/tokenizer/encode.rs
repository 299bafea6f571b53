//! What an encode call does once its Python arguments are read: free of
//! Python objects, so it runs with the GIL released.

use lmkit_tokenizers::bpe::BpeTokenizer;
use lmkit_tokenizers::wordpiece::{pad_encodings, Padding, TruncationDirection};
use lmkit_tokenizers::{Encoding, Tokenizer};
use pyo3::prelude::*;
use pyo3::types::{PyString, PyTuple};
use rayon::prelude::*;

use crate::errors::value_error;

/// Which special tokens written in a text count as special (tiktoken's
/// `allowed_special`) or make the call fail (`disallowed_special`).
#[derive(Clone, Debug)]
pub(super) enum Specials {
    All,
    Ids(Vec<u32>),
}

impl Specials {
    pub(super) fn contains(&self, id: u32) -> bool {
        match self {
            Specials::All => true,
            Specials::Ids(ids) => ids.contains(&id),
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        matches!(self, Specials::Ids(ids) if ids.is_empty())
    }
}

/// One input of a batch: a text or a pair of texts.
pub(super) enum Input {
    Pair(String, String),
    Text(String),
}

/// What one encode call needs, free of Python objects (runs without the GIL).
pub(super) struct EncodeJob<'a> {
    pub(super) tok: &'a Tokenizer,
    pub(super) add_special_tokens: bool,
    pub(super) allowed: Specials,
    pub(super) disallowed: Specials,
    pub(super) truncation: Option<(usize, TruncationDirection)>,
    pub(super) padding: Option<Padding>,
}

/// tiktoken's message for a disallowed special token found in the text.
fn disallowed_error(name: &str) -> String {
    format!(
        "Encountered text corresponding to disallowed special token {name:?}.\n\
         If you want this text to be encoded as a special token, pass it to `allowed_special`, \
         e.g. `allowed_special={{{name:?}, ...}}`.\n\
         If you want this text to be encoded as normal text, disable the check for this token \
         by passing `disallowed_special=(enc.special_tokens_set - {{{name:?}}})`.\n\
         To disable this check for all special tokens, pass `disallowed_special=()`."
    )
}

impl EncodeJob<'_> {
    fn check_disallowed(&self, bpe: &BpeTokenizer, text: &str) -> Result<(), String> {
        if self.disallowed.is_empty() {
            return Ok(());
        }
        match bpe.find_special_token(text.as_bytes(), |id| self.disallowed.contains(id)) {
            Some((_, id)) => Err(disallowed_error(bpe.id_to_token(id).unwrap_or_default())),
            None => Ok(()),
        }
    }

    /// Token ids only (tiktoken's `encode`).
    pub(super) fn ids(&self, text: &str) -> Result<Vec<u32>, String> {
        match self.tok {
            Tokenizer::Bpe(bpe) => {
                self.check_disallowed(bpe, text)?;
                Ok(match &self.allowed {
                    Specials::Ids(ids) if ids.is_empty() => bpe.encode_ordinary(text.as_bytes()),
                    Specials::All => bpe.encode_ids(text.as_bytes(), true),
                    a => bpe.encode_ids_allowing(text.as_bytes(), |id| a.contains(id)),
                })
            }
            Tokenizer::WordPiece(wp) => wp
                .encode(text, self.add_special_tokens)
                .map(|e| e.ids)
                .map_err(|e| e.to_string()),
        }
    }

    /// Full encodings of a batch, padded together.
    pub(super) fn encodings(&self, inputs: &[Input]) -> Result<Vec<Encoding>, String> {
        match self.tok {
            Tokenizer::Bpe(bpe) => {
                let mut encs = inputs
                    .par_iter()
                    .map(|input| {
                        let text = match input {
                            Input::Text(t) => t,
                            Input::Pair(..) => {
                                return Err("text pairs need a WordPiece (BERT) tokenizer: \
                                            byte-level BPE has no pair template"
                                    .to_string())
                            }
                        };
                        self.check_disallowed(bpe, text)?;
                        let mut e =
                            bpe.encode_allowing(text.as_bytes(), |id| self.allowed.contains(id));
                        if let Some((max, dir)) = self.truncation {
                            e.truncate(max, dir);
                        }
                        Ok(e)
                    })
                    .collect::<Result<Vec<_>, String>>()?;
                if let Some(p) = &self.padding {
                    pad_encodings(&mut encs, p);
                }
                Ok(encs)
            }
            Tokenizer::WordPiece(wp) => {
                let pairs: Vec<(&str, &str)> = inputs
                    .iter()
                    .filter_map(|i| match i {
                        Input::Pair(a, b) => Some((a.as_str(), b.as_str())),
                        Input::Text(_) => None,
                    })
                    .collect();
                let r = if pairs.is_empty() {
                    let texts: Vec<&str> = inputs
                        .iter()
                        .map(|i| match i {
                            Input::Text(t) => t.as_str(),
                            Input::Pair(a, _) => a.as_str(),
                        })
                        .collect();
                    wp.encode_batch(&texts, self.add_special_tokens)
                } else if pairs.len() == inputs.len() {
                    wp.encode_pair_batch(&pairs, self.add_special_tokens)
                } else {
                    return Err("a batch is all texts or all pairs, not both".into());
                };
                r.map_err(|e| e.to_string())
            }
        }
    }
}

pub(super) fn input_of(obj: &Bound<'_, PyAny>) -> PyResult<Input> {
    if let Ok(s) = obj.cast::<PyString>() {
        return Ok(Input::Text(s.to_cow()?.into_owned()));
    }
    if let Ok(t) = obj.cast::<PyTuple>() {
        if t.len() == 2 {
            return Ok(Input::Pair(
                t.get_item(0)?.extract()?,
                t.get_item(1)?.extract()?,
            ));
        }
    }
    if let Ok((a, b)) = obj.extract::<(String, String)>() {
        return Ok(Input::Pair(a, b));
    }
    Err(value_error("each input must be a str or a pair (str, str)"))
}

pub(super) fn decode_one(
    tok: &Tokenizer,
    ids: &[u32],
    skip_special_tokens: bool,
) -> Result<String, String> {
    let r = match tok {
        Tokenizer::WordPiece(t) => t.decode(ids, skip_special_tokens),
        Tokenizer::Bpe(t) if skip_special_tokens => {
            let specials: Vec<u32> = t.special_tokens().map(|(_, id)| id).collect();
            let kept: Vec<u32> = ids
                .iter()
                .copied()
                .filter(|id| !specials.contains(id))
                .collect();
            t.decode(&kept)
                .map(|b| String::from_utf8_lossy(&b).into_owned())
        }
        Tokenizer::Bpe(t) => t
            .decode(ids)
            .map(|b| String::from_utf8_lossy(&b).into_owned()),
    };
    r.map_err(|e| e.to_string())
}
