//! BERT's WordPiece tokenizer, matching Hugging Face `tokenizers`
//! (`BertNormalizer` + `BertPreTokenizer` + `WordPiece` model + BERT template +
//! `WordPiece` decoder), i.e. transformers' `BertTokenizerFast`.
//!
//! Pipeline per text: special tokens written in the text (`[SEP]`…) are cut
//! out first; the rest is cleaned (control characters dropped, whitespace
//! unified), CJK ideographs isolated, optionally accent-stripped (NFD, drop
//! Mn) and lowercased, split on whitespace and punctuation, and each word is
//! split greedily into the longest vocabulary pieces (`##` marks a piece that
//! continues a word; a word that cannot be split, or is over 100 chars, is
//! `[UNK]`). Offsets are byte ranges into the text given.

mod encode;
mod io;
mod normalizer;
mod post;
mod train;
mod trie;

use std::path::Path;

use rayon::prelude::*;

use crate::{Encoding, Error, Result};
use normalizer::{BertNormalizer, NormalizerConfig, WordBuf};
use post::{Piece, Template};
use trie::{Trie, WordMap};

pub use post::{
    pad_encodings, Padding, PaddingDirection, PaddingLength, Truncation, TruncationDirection,
    TruncationStrategy, Window,
};
pub use train::{train_wordpiece, train_wordpiece_files, TrainProgress, WordPieceTrainer};

/// Normalization and model settings of a WordPiece tokenizer. The default is
/// HF's `BertTokenizer` default (uncased BERT).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WordPieceOptions {
    /// Lowercase the text (`do_lower_case`).
    pub lowercase: bool,
    /// Strip accents (NFD, then drop nonspacing marks); `None` follows `lowercase`.
    pub strip_accents: Option<bool>,
    /// Put each CJK ideograph in a word of its own (`tokenize_chinese_chars`).
    pub handle_chinese_chars: bool,
    /// Drop control characters and turn all whitespace into spaces.
    pub clean_text: bool,
    pub unk_token: String,
    pub cls_token: String,
    pub sep_token: String,
    pub pad_token: String,
    pub mask_token: String,
    /// Marks pieces that continue a word (`##`).
    pub continuing_subword_prefix: String,
    /// Longer words (in chars) become `[UNK]`.
    pub max_input_chars_per_word: usize,
}

impl Default for WordPieceOptions {
    fn default() -> Self {
        Self {
            lowercase: true,
            strip_accents: None,
            handle_chinese_chars: true,
            clean_text: true,
            unk_token: "[UNK]".into(),
            cls_token: "[CLS]".into(),
            sep_token: "[SEP]".into(),
            pad_token: "[PAD]".into(),
            mask_token: "[MASK]".into(),
            continuing_subword_prefix: "##".into(),
            max_input_chars_per_word: 100,
        }
    }
}

impl WordPieceOptions {
    /// Settings of a cased BERT (no lowercasing, accents kept).
    pub fn cased() -> Self {
        Self {
            lowercase: false,
            ..Self::default()
        }
    }

    fn normalizer_config(&self) -> NormalizerConfig {
        NormalizerConfig {
            clean_text: self.clean_text,
            handle_chinese_chars: self.handle_chinese_chars,
            strip_accents: self.strip_accents.unwrap_or(self.lowercase),
            lowercase: self.lowercase,
        }
    }
}

/// A token matched verbatim in the input before normalization (HF "added
/// tokens", here normally the special tokens).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AddedToken {
    pub content: String,
    pub id: u32,
    pub special: bool,
    pub single_word: bool,
    pub lstrip: bool,
    pub rstrip: bool,
}

/// HF's WordPiece decoder settings; `None` in the tokenizer means tokens are
/// joined with spaces (HF without a decoder).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DecoderConfig {
    pub prefix: String,
    pub cleanup: bool,
}

/// A BERT WordPiece tokenizer. Cheap to share across threads (`&self` everywhere).
#[derive(Debug, Clone)]
pub struct WordPieceTokenizer {
    /// id -> token.
    vocab: Vec<String>,
    /// Longest-prefix lookup of whole-vocabulary tokens (a word's first piece)
    /// and of continuation pieces without their prefix (`##ing` as `ing`).
    initial: Trie,
    continuation: Trie,
    /// Exact lookup of a whole word (the common case: one piece), and of
    /// any token by its text.
    words: WordMap,
    options: WordPieceOptions,
    normalizer: BertNormalizer,
    unk_id: u32,
    cls_id: u32,
    sep_id: u32,
    pad_id: u32,
    mask_id: Option<u32>,
    added: Vec<AddedToken>,
    /// First bytes of the added tokens, to find them quickly.
    added_first_byte: [bool; 256],
    /// Per id: is it a special added token (skipped by `decode(.., true)`).
    special: Vec<bool>,
    template: Template,
    decoder: Option<DecoderConfig>,
    truncation: Option<Truncation>,
    padding: Option<Padding>,
}

/// Parts of a tokenizer that the loaders fill in.
pub(crate) struct Parts {
    pub vocab: Vec<String>,
    pub options: WordPieceOptions,
    /// `None`: the five BERT special tokens of `options`, if in the vocabulary.
    pub added: Option<Vec<AddedToken>>,
    /// `None`: the BERT template with `options`' CLS and SEP.
    pub template: Option<Template>,
    pub decoder: Option<DecoderConfig>,
    pub truncation: Option<Truncation>,
    pub padding: Option<Padding>,
}

impl WordPieceTokenizer {
    /// Loads a tokenizer directory: `tokenizer.json` if present, else
    /// `vocab.txt` with the settings of `tokenizer_config.json` /
    /// `special_tokens_map.json` (HF `BertTokenizer` defaults where absent).
    pub fn from_dir(dir: impl AsRef<Path>) -> Result<Self> {
        io::from_dir(dir.as_ref())
    }

    /// Loads a `vocab.txt` (one token per line, the line number is the id).
    pub fn from_vocab_file(path: impl AsRef<Path>, options: WordPieceOptions) -> Result<Self> {
        io::from_vocab_file(path.as_ref(), options)
    }

    /// Loads an HF `tokenizer.json` with a WordPiece model, honouring its
    /// normalizer, post-processor, decoder, truncation and padding.
    pub fn from_tokenizer_json(path: impl AsRef<Path>) -> Result<Self> {
        io::from_tokenizer_json(path.as_ref())
    }

    /// Builds a tokenizer from an in-memory vocabulary (id = index).
    pub fn from_vocab(vocab: Vec<String>, options: WordPieceOptions) -> Result<Self> {
        Self::from_parts(
            Parts {
                vocab,
                options,
                added: None,
                template: None,
                decoder: Some(DecoderConfig {
                    prefix: String::new(),
                    cleanup: true,
                }),
                truncation: None,
                padding: None,
            },
            Path::new("<vocabulary>"),
            &|id, _| id + 1,
        )
    }

    /// Writes `vocab.txt`, `tokenizer_config.json`, `special_tokens_map.json`
    /// and `tokenizer.json` into `dir` (created if needed), each atomically.
    /// HF `Tokenizer.from_file` and `BertTokenizerFast.from_pretrained` load it.
    pub fn save(&self, dir: impl AsRef<Path>) -> Result<()> {
        io::save(self, dir.as_ref())
    }

    /// `line_of(id, token)` is where the file being read has that token,
    /// for errors.
    pub(crate) fn from_parts(
        mut parts: Parts,
        path: &Path,
        line_of: &dyn Fn(usize, &str) -> usize,
    ) -> Result<Self> {
        let o = &parts.options;
        let missing = |what: &str, tok: &str| Error::Unsupported {
            path: path.to_path_buf(),
            message: format!("the vocabulary has no {what} token {tok:?}"),
        };
        if o.continuing_subword_prefix.is_empty() {
            return Err(Error::InvalidOption(
                "continuing_subword_prefix must not be empty".into(),
            ));
        }
        // Every token by its bytes: the whole-word lookup, and `token_to_id`.
        let mut words = WordMap::with_capacity(parts.vocab.len());
        for (id, tok) in parts.vocab.iter().enumerate() {
            if words.insert(tok.as_bytes(), id as u32).is_err() {
                return Err(Error::Parse {
                    path: path.to_path_buf(),
                    line: line_of(id, tok),
                    message: format!("duplicate token {tok:?}"),
                });
            }
        }
        let entries = || {
            parts
                .vocab
                .iter()
                .enumerate()
                .map(|(id, t)| (t.as_str(), id as u32))
        };
        let initial = Trie::new(entries());
        let prefix = o.continuing_subword_prefix.as_str();
        let continuation =
            Trie::new(entries().filter_map(|(t, id)| Some((t.strip_prefix(prefix)?, id))));
        let lookup = |t: &str| words.get(t.as_bytes());
        let unk_id = lookup(&o.unk_token).ok_or_else(|| missing("unknown", &o.unk_token))?;
        let cls_id = lookup(&o.cls_token).ok_or_else(|| missing("CLS", &o.cls_token))?;
        let sep_id = lookup(&o.sep_token).ok_or_else(|| missing("SEP", &o.sep_token))?;
        let pad_id = lookup(&o.pad_token).ok_or_else(|| missing("padding", &o.pad_token))?;
        let mask_id = lookup(&o.mask_token);
        let added = match parts.added.take() {
            Some(a) => a,
            None => [
                &o.pad_token,
                &o.unk_token,
                &o.cls_token,
                &o.sep_token,
                &o.mask_token,
            ]
            .into_iter()
            .filter_map(|t| {
                let id = lookup(t)?;
                Some(AddedToken {
                    content: t.clone(),
                    id,
                    special: true,
                    single_word: false,
                    lstrip: false,
                    rstrip: false,
                })
            })
            .collect(),
        };
        let mut added_first_byte = [false; 256];
        let mut special = vec![false; parts.vocab.len()];
        for a in &added {
            let Some(&b) = a.content.as_bytes().first() else {
                return Err(Error::Unsupported {
                    path: path.to_path_buf(),
                    message: "empty added token".into(),
                });
            };
            if a.id as usize >= parts.vocab.len() || parts.vocab[a.id as usize] != a.content {
                return Err(Error::Unsupported {
                    path: path.to_path_buf(),
                    message: format!(
                        "added token {:?} (id {}) is not that entry of the WordPiece vocabulary",
                        a.content, a.id
                    ),
                });
            }
            added_first_byte[b as usize] = true;
            special[a.id as usize] |= a.special;
        }
        let template = match parts.template.take() {
            Some(t) => t,
            None => Template::bert((&o.cls_token, cls_id), (&o.sep_token, sep_id)),
        };
        let check_id = |id: u32| {
            if (id as usize) < parts.vocab.len() {
                Ok(())
            } else {
                Err(Error::Unsupported {
                    path: path.to_path_buf(),
                    message: format!("token id {id} is outside the vocabulary"),
                })
            }
        };
        for p in template.single.iter().chain(&template.pair) {
            if let Piece::Special { ids, .. } = p {
                ids.iter().try_for_each(|&id| check_id(id))?;
            }
        }
        if let Some(p) = &parts.padding {
            check_id(p.pad_id)?;
        }
        let decoder = parts.decoder.take().map(|mut d| {
            if d.prefix.is_empty() {
                d.prefix = o.continuing_subword_prefix.clone();
            }
            d
        });
        let normalizer = BertNormalizer::new(o.normalizer_config());
        Ok(Self {
            vocab: parts.vocab,
            initial,
            continuation,
            words,
            normalizer,
            unk_id,
            cls_id,
            sep_id,
            pad_id,
            mask_id,
            added,
            added_first_byte,
            special,
            template,
            decoder,
            truncation: parts.truncation,
            padding: parts.padding,
            options: parts.options,
        })
    }

    // ---- accessors -------------------------------------------------------

    pub fn options(&self) -> &WordPieceOptions {
        &self.options
    }

    pub fn vocab_size(&self) -> usize {
        self.vocab.len()
    }

    /// The vocabulary, id = index.
    pub fn vocab(&self) -> &[String] {
        &self.vocab
    }

    pub fn id_to_token(&self, id: u32) -> Option<&str> {
        self.vocab.get(id as usize).map(String::as_str)
    }

    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        self.words.get(token.as_bytes())
    }

    pub fn unk_id(&self) -> u32 {
        self.unk_id
    }

    pub fn cls_id(&self) -> u32 {
        self.cls_id
    }

    pub fn sep_id(&self) -> u32 {
        self.sep_id
    }

    pub fn pad_id(&self) -> u32 {
        self.pad_id
    }

    /// `[MASK]`, if the vocabulary has it.
    pub fn mask_id(&self) -> Option<u32> {
        self.mask_id
    }

    /// Whether `id` is a special token (`[CLS]`, `[PAD]`…).
    pub fn is_special(&self, id: u32) -> bool {
        self.special.get(id as usize).copied().unwrap_or(false)
    }

    /// Truncation applied by every `encode*` call (HF `enable_truncation`);
    /// loaded from `tokenizer.json` when it sets one.
    pub fn truncation(&self) -> Option<&Truncation> {
        self.truncation.as_ref()
    }

    pub fn set_truncation(&mut self, truncation: Option<Truncation>) -> &mut Self {
        self.truncation = truncation;
        self
    }

    /// Padding applied by every `encode*` call (HF `enable_padding`); loaded
    /// from `tokenizer.json` when it sets one.
    pub fn padding(&self) -> Option<&Padding> {
        self.padding.as_ref()
    }

    pub fn set_padding(&mut self, padding: Option<Padding>) -> &mut Self {
        self.padding = padding;
        self
    }

    /// Padding to `to` with this tokenizer's `[PAD]`, type id 0, on the right.
    pub fn padding_to(&self, to: PaddingLength) -> Padding {
        Padding {
            to,
            pad_to_multiple_of: None,
            pad_id: self.pad_id,
            pad_type_id: 0,
            direction: PaddingDirection::Right,
        }
    }

    // ---- encoding --------------------------------------------------------

    /// Encodes one text: `[CLS] text [SEP]` when `add_special_tokens`.
    pub fn encode(&self, text: &str, add_special_tokens: bool) -> Result<Encoding> {
        let mut enc = self.encode_main(text, None, add_special_tokens, self.truncation.as_ref())?;
        self.pad_batch(std::slice::from_mut(&mut enc));
        Ok(enc)
    }

    /// Encodes UTF-8 bytes; invalid UTF-8 is an error (WordPiece works on text).
    pub fn encode_bytes(&self, bytes: &[u8], add_special_tokens: bool) -> Result<Encoding> {
        let text = std::str::from_utf8(bytes).map_err(|e| {
            Error::InvalidInput(format!("invalid UTF-8 at byte {}", e.valid_up_to()))
        })?;
        self.encode(text, add_special_tokens)
    }

    /// Encodes a pair: `[CLS] a [SEP] b [SEP]`, type ids 0 for `a`, 1 for `b`;
    /// offsets of `b`'s tokens are byte ranges into `b`.
    pub fn encode_pair(&self, a: &str, b: &str, add_special_tokens: bool) -> Result<Encoding> {
        let mut enc = self.encode_main(a, Some(b), add_special_tokens, self.truncation.as_ref())?;
        self.pad_batch(std::slice::from_mut(&mut enc));
        Ok(enc)
    }

    /// Encodes many texts in parallel; `Longest` padding pads to the longest.
    pub fn encode_batch(&self, texts: &[&str], add_special_tokens: bool) -> Result<Vec<Encoding>> {
        self.encode_batch_truncated(texts, add_special_tokens, self.truncation.as_ref())
    }

    /// [`Self::encode_batch`] truncated by `truncation` (`None`: not at all)
    /// instead of the tokenizer's own setting: for callers with a limit of
    /// their own, without a copy of the tokenizer to set it on.
    pub fn encode_batch_truncated(
        &self,
        texts: &[&str],
        add_special_tokens: bool,
        truncation: Option<&Truncation>,
    ) -> Result<Vec<Encoding>> {
        let mut encs = texts
            .par_iter()
            .with_min_len(32)
            .map(|t| self.encode_main(t, None, add_special_tokens, truncation))
            .collect::<Result<Vec<_>>>()?;
        self.pad_batch(&mut encs);
        Ok(encs)
    }

    /// Encodes many pairs in parallel; `Longest` padding pads to the longest.
    pub fn encode_pair_batch(
        &self,
        pairs: &[(&str, &str)],
        add_special_tokens: bool,
    ) -> Result<Vec<Encoding>> {
        self.encode_pair_batch_truncated(pairs, add_special_tokens, self.truncation.as_ref())
    }

    /// [`Self::encode_pair_batch`] truncated by `truncation` (see
    /// [`Self::encode_batch_truncated`]).
    pub fn encode_pair_batch_truncated(
        &self,
        pairs: &[(&str, &str)],
        add_special_tokens: bool,
        truncation: Option<&Truncation>,
    ) -> Result<Vec<Encoding>> {
        let mut encs = pairs
            .par_iter()
            .with_min_len(32)
            .map(|(a, b)| self.encode_main(a, Some(b), add_special_tokens, truncation))
            .collect::<Result<Vec<_>>>()?;
        self.pad_batch(&mut encs);
        Ok(encs)
    }

    fn pad_batch(&self, encs: &mut [Encoding]) {
        if let Some(p) = &self.padding {
            post::pad_encodings(encs, p);
        }
    }

    /// Question-answering windows over a long context, like transformers'
    /// `tokenizer(question, context, truncation="only_second", max_length=max_len,
    /// stride=stride, return_overflowing_tokens=True, return_offsets_mapping=True)`:
    /// every window is `[CLS] question [SEP] context-part [SEP]`, consecutive
    /// context parts overlapping by `stride` tokens. The tokenizer's padding,
    /// if set, applies to every window. Errors if the question leaves no room.
    pub fn encode_pair_windows(
        &self,
        question: &str,
        context: &str,
        max_len: usize,
        stride: usize,
    ) -> Result<Vec<Window>> {
        let trunc = Truncation {
            max_length: max_len,
            strategy: TruncationStrategy::OnlySecond,
            stride,
            direction: TruncationDirection::Right,
        };
        let mut windows =
            self.encode_all(question, Some(context), true, Some(&trunc), true, true)?;
        if let Some(p) = &self.padding {
            let len = post::padded_length(p, windows.iter().map(|w| w.encoding.len()));
            for w in &mut windows {
                post::pad(&mut w.encoding, Some(&mut w.sequence_ids), len, p);
            }
        }
        Ok(windows)
    }

    /// The words the normalizer and pre-tokenizer make of `text` (HF
    /// `pre_tokenize_str(normalize_str(text))`), each with the byte range of
    /// `text` it came from. Special tokens are not treated specially here.
    pub fn pre_tokenize(&self, text: &str) -> Vec<(String, (usize, usize))> {
        let mut out = Vec::new();
        let mut buf = WordBuf::default();
        self.normalizer.for_each_word(text, 0, &mut buf, |w, a| {
            out.push((w.to_string(), (a[0].0, a[a.len() - 1].1)));
        });
        out
    }

    // ---- decoding --------------------------------------------------------

    /// HF `Tokenizer::decode` with the WordPiece decoder: pieces joined with
    /// spaces, `##` pieces glued to the previous one, then HF's cleanup of
    /// spaces before punctuation and in contractions.
    pub fn decode(&self, ids: &[u32], skip_special_tokens: bool) -> Result<String> {
        let mut out = String::new();
        let mut first = true;
        let mut piece = String::new();
        for &id in ids {
            let tok = self.id_to_token(id).ok_or(Error::IdOutOfRange {
                id,
                vocab_size: self.vocab.len(),
            })?;
            if skip_special_tokens && self.is_special(id) {
                continue;
            }
            match &self.decoder {
                None => {
                    if !first {
                        out.push(' ');
                    }
                    out.push_str(tok);
                }
                Some(d) => {
                    piece.clear();
                    if first {
                        piece.push_str(tok);
                    } else if let Some(rest) = tok.strip_prefix(d.prefix.as_str()) {
                        piece.push_str(rest);
                    } else {
                        piece.push(' ');
                        piece.push_str(tok);
                    }
                    if d.cleanup {
                        out.push_str(&cleanup(&piece));
                    } else {
                        out.push_str(&piece);
                    }
                }
            }
            first = false;
        }
        Ok(out)
    }
}

/// HF's `decoders::wordpiece::cleanup`, applied to each decoded piece.
fn cleanup(s: &str) -> String {
    s.replace(" .", ".")
        .replace(" ?", "?")
        .replace(" !", "!")
        .replace(" ,", ",")
        .replace(" ' ", "'")
        .replace(" n't", "n't")
        .replace(" 'm", "'m")
        .replace(" do not", " don't")
        .replace(" 's", "'s")
        .replace(" 've", "'ve")
        .replace(" 're", "'re")
}

#[cfg(test)]
mod tests;
