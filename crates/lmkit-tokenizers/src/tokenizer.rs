//! [`Tokenizer`]: the one type the CLI and the models use, whatever the kind.
//!
//! Each kind is a variant; adding one means a variant, an arm in each method
//! and a case in [`Tokenizer::from_dir`] / [`Tokenizer::from_tokenizer_json`].

use std::path::Path;

use serde::Deserialize;

use crate::bpe::BpeTokenizer;
use crate::wordpiece::WordPieceTokenizer;
use crate::{Encoding, Error, Result};

/// A loaded tokenizer of any supported kind.
#[derive(Debug, Clone)]
pub enum Tokenizer {
    /// GPT-2 byte-level BPE. Both variants are boxed: each holds large inline tables.
    Bpe(Box<BpeTokenizer>),
    /// BERT WordPiece.
    WordPiece(Box<WordPieceTokenizer>),
}

impl From<BpeTokenizer> for Tokenizer {
    fn from(t: BpeTokenizer) -> Self {
        Tokenizer::Bpe(Box::new(t))
    }
}

impl From<WordPieceTokenizer> for Tokenizer {
    fn from(t: WordPieceTokenizer) -> Self {
        Tokenizer::WordPiece(Box::new(t))
    }
}

impl Tokenizer {
    /// Loads the tokenizer in `dir` (a tokenizer directory or an HF model
    /// directory): `tokenizer.json` if present, else `vocab.json` +
    /// `merges.txt` (BPE), else `vocab.txt` (WordPiece).
    pub fn from_dir(dir: impl AsRef<Path>) -> Result<Self> {
        let dir = dir.as_ref();
        if !dir.is_dir() {
            return Err(Error::Io {
                path: dir.to_path_buf(),
                source: std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "not a directory holding a tokenizer",
                ),
            });
        }
        let json = dir.join("tokenizer.json");
        if json.is_file() {
            return Self::from_tokenizer_json(json);
        }
        let (vocab, merges) = (dir.join("vocab.json"), dir.join("merges.txt"));
        if vocab.is_file() || merges.is_file() {
            return Ok(BpeTokenizer::from_files(vocab, merges)?.into());
        }
        if dir.join("vocab.txt").is_file() {
            return Ok(WordPieceTokenizer::from_dir(dir)?.into());
        }
        Err(Error::Io {
            path: dir.to_path_buf(),
            source: std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "no tokenizer.json, vocab.json + merges.txt, or vocab.txt here",
            ),
        })
    }

    /// Loads an HF `tokenizer.json`, dispatching on its model type.
    pub fn from_tokenizer_json(path: impl AsRef<Path>) -> Result<Self> {
        #[derive(Deserialize)]
        struct Head {
            model: Model,
        }
        #[derive(Deserialize)]
        struct Model {
            #[serde(rename = "type")]
            kind: Option<String>,
            merges: Option<serde::de::IgnoredAny>,
        }
        let path = path.as_ref();
        let key = BpeTokenizer::json_cache_key(path)?;
        if let Some(t) = BpeTokenizer::from_cache(key) {
            return Ok(t.into());
        }
        let text = crate::bpe::text_of(path, crate::bpe::read_bytes(path)?)?;
        let head: Head = serde_json::from_str(&text).map_err(|e| Error::Parse {
            path: path.to_path_buf(),
            line: e.line(),
            message: e.to_string(),
        })?;
        // Older files may omit the type; BPE is the model with merges.
        let kind = head.model.kind.unwrap_or_else(|| {
            if head.model.merges.is_some() {
                "BPE"
            } else {
                ""
            }
            .into()
        });
        match kind.as_str() {
            "BPE" => Ok(BpeTokenizer::from_json_text(path, text, key)?.into()),
            "WordPiece" => Ok(WordPieceTokenizer::from_tokenizer_json(path)?.into()),
            other => Err(Error::Unsupported {
                path: path.to_path_buf(),
                message: format!("model type {other:?} is not supported in this build"),
            }),
        }
    }

    /// Turns off the truncation and padding a `tokenizer.json` may carry (MiniLM's
    /// pads and truncates to 128), so a whole text encodes to all its tokens.
    pub fn without_truncation_and_padding(mut self) -> Self {
        if let Tokenizer::WordPiece(t) = &mut self {
            t.set_truncation(None).set_padding(None);
        }
        self
    }

    /// Short name of the kind: `"bpe"`.
    pub fn kind(&self) -> &'static str {
        match self {
            Tokenizer::Bpe(_) => "bpe",
            Tokenizer::WordPiece(_) => "wordpiece",
        }
    }

    /// Encodes `text` (bytes; BPE takes any bytes). `add_special_tokens`:
    /// for BPE, recognise special-token strings such as `<|endoftext|>` in the
    /// text (GPT-2 adds no BOS/EOS of its own).
    pub fn encode(&self, text: &[u8], add_special_tokens: bool) -> Result<Encoding> {
        match self {
            Tokenizer::Bpe(t) => Ok(t.encode(text, add_special_tokens)),
            Tokenizer::WordPiece(t) => t.encode_bytes(text, add_special_tokens),
        }
    }

    /// Token ids only (faster than [`Self::encode`] for BPE: no offsets).
    pub fn encode_ids(&self, text: &[u8], add_special_tokens: bool) -> Result<Vec<u32>> {
        match self {
            Tokenizer::Bpe(t) => Ok(t.encode_ids(text, add_special_tokens)),
            Tokenizer::WordPiece(t) => Ok(t.encode_bytes(text, add_special_tokens)?.ids),
        }
    }

    /// [`Self::encode_ids`] of one large text using all cores (same ids).
    pub fn encode_ids_parallel(&self, text: &[u8], add_special_tokens: bool) -> Result<Vec<u32>> {
        match self {
            Tokenizer::Bpe(t) => Ok(t.encode_ids_parallel(text, add_special_tokens)),
            // WordPiece texts are sentences or passages, not corpora: one call is enough.
            Tokenizer::WordPiece(_) => self.encode_ids(text, add_special_tokens),
        }
    }

    /// The number of ids [`Self::encode_ids_parallel`] gives, without
    /// holding them all (BPE: one chunk's ids per thread).
    pub fn count_tokens(&self, text: &[u8], add_special_tokens: bool) -> Result<usize> {
        match self {
            Tokenizer::Bpe(t) => Ok(t.count_tokens_parallel(text, add_special_tokens)),
            Tokenizer::WordPiece(t) => {
                const CHUNK: usize = 1 << 20;
                let plain = t.truncation().is_none() && t.padding().is_none();
                if text.len() < 2 * CHUNK || !plain || std::str::from_utf8(text).is_err() {
                    return Ok(self.encode_ids(text, add_special_tokens)?.len());
                }
                // No WordPiece token spans ASCII whitespace, so ~1 MB pieces cut
                // there count the same; the specials of one sequence come on top.
                let specials = t.encode_bytes(b"", add_special_tokens)?.ids.len();
                use rayon::prelude::*;
                let counts = whitespace_pieces(text, CHUNK)
                    .par_iter()
                    .map(|p| t.encode_bytes(p, false).map(|e| e.ids.len()))
                    .collect::<Result<Vec<usize>>>()?;
                Ok(specials + counts.iter().sum::<usize>())
            }
        }
    }

    /// [`Self::encode`] over many texts in parallel.
    pub fn encode_batch<T: AsRef<[u8]> + Sync>(
        &self,
        texts: &[T],
        add_special_tokens: bool,
    ) -> Result<Vec<Encoding>> {
        use rayon::prelude::*;
        texts
            .par_iter()
            .map(|t| self.encode(t.as_ref(), add_special_tokens))
            .collect()
    }

    /// The text of `ids` as bytes (BPE tokens may split UTF-8 characters).
    pub fn decode(&self, ids: &[u32]) -> Result<Vec<u8>> {
        match self {
            Tokenizer::Bpe(t) => t.decode(ids),
            Tokenizer::WordPiece(t) => Ok(t.decode(ids, false)?.into_bytes()),
        }
    }

    /// The token's spelling in the vocabulary file.
    pub fn id_to_token(&self, id: u32) -> Option<&str> {
        match self {
            Tokenizer::Bpe(t) => t.id_to_token(id),
            Tokenizer::WordPiece(t) => t.id_to_token(id),
        }
    }

    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        match self {
            Tokenizer::Bpe(t) => t.token_to_id(token),
            Tokenizer::WordPiece(t) => t.token_to_id(token),
        }
    }

    /// Number of ids (one more than the largest).
    pub fn vocab_size(&self) -> usize {
        match self {
            Tokenizer::Bpe(t) => t.vocab_size(),
            Tokenizer::WordPiece(t) => t.vocab_size(),
        }
    }

    /// End-of-sequence id (GPT-2: `<|endoftext|>`; BERT: `[SEP]`).
    pub fn eos_token_id(&self) -> Option<u32> {
        match self {
            Tokenizer::Bpe(t) => t.endoftext_id(),
            Tokenizer::WordPiece(t) => Some(t.sep_id()),
        }
    }

    /// Beginning-of-sequence id (GPT-2: `<|endoftext|>`; BERT: `[CLS]`).
    pub fn bos_token_id(&self) -> Option<u32> {
        match self {
            Tokenizer::Bpe(t) => t.endoftext_id(),
            Tokenizer::WordPiece(t) => Some(t.cls_id()),
        }
    }

    /// Padding id (GPT-2 has none; BERT: `[PAD]`).
    pub fn pad_token_id(&self) -> Option<u32> {
        match self {
            Tokenizer::Bpe(_) => None,
            Tokenizer::WordPiece(t) => Some(t.pad_id()),
        }
    }

    /// Writes the tokenizer's files into `dir`.
    pub fn save(&self, dir: impl AsRef<Path>) -> Result<()> {
        match self {
            Tokenizer::Bpe(t) => t.save(dir),
            Tokenizer::WordPiece(t) => t.save(dir),
        }
    }
}

/// `text` cut into pieces of about `size` bytes just after an ASCII
/// whitespace byte (never inside a UTF-8 sequence); a piece without
/// whitespace stays whole.
fn whitespace_pieces(text: &[u8], size: usize) -> Vec<&[u8]> {
    let mut pieces = Vec::new();
    let mut rest = text;
    while rest.len() > 2 * size {
        match rest[size..].iter().position(u8::is_ascii_whitespace) {
            Some(i) => {
                let (a, b) = rest.split_at(size + i + 1);
                pieces.push(a);
                rest = b;
            }
            None => break,
        }
    }
    pieces.push(rest);
    pieces
}
