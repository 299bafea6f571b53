//! `lmkit.Tokenizer` and `lmkit.Encoding`: byte-level BPE (GPT-2) and
//! WordPiece (BERT) over `lmkit_tokenizers`, shaped like HF tokenizers'
//! Python API, with tiktoken's `allowed_special` / `disallowed_special`.
//! Batches are encoded on all cores with the GIL released.

use std::path::PathBuf;
use std::sync::Arc;

use lmkit_tokenizers::bpe::BpeTokenizer;
use lmkit_tokenizers::train_bpe::{BpeTrainer, BpeTrainerOptions};
use lmkit_tokenizers::wordpiece::{
    pad_encodings, train_wordpiece, train_wordpiece_files, Padding, PaddingDirection,
    PaddingLength, Truncation, TruncationDirection, TruncationStrategy, WordPieceTrainer,
};
use lmkit_tokenizers::{Encoding, Tokenizer};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString, PyTuple};
use rayon::prelude::*;

use crate::errors::{value_error, PyResultExt};

/// Which special tokens written in a text count as special (tiktoken's
/// `allowed_special`) or make the call fail (`disallowed_special`).
#[derive(Clone, Debug)]
enum Specials {
    All,
    Ids(Vec<u32>),
}

impl Specials {
    fn contains(&self, id: u32) -> bool {
        match self {
            Specials::All => true,
            Specials::Ids(ids) => ids.contains(&id),
        }
    }

    fn is_empty(&self) -> bool {
        matches!(self, Specials::Ids(ids) if ids.is_empty())
    }
}

/// One input of a batch: a text or a pair of texts.
enum Input {
    Pair(String, String),
    Text(String),
}

/// The tokenizer; its encodings hold an `Arc` of it so that their tokens
/// can be spelled lazily.
#[pyclass(module = "lmkit", name = "Tokenizer")]
pub struct PyTokenizer {
    inner: Arc<Tokenizer>,
    /// BPE only (WordPiece keeps its own, HF's semantics for pairs).
    bpe_truncation: Option<(usize, TruncationDirection)>,
    bpe_padding: Option<Padding>,
}

impl PyTokenizer {
    pub fn new(inner: Tokenizer) -> Self {
        Self::shared(Arc::new(inner))
    }

    /// A tokenizer over `inner`, copied only when it is changed.
    pub fn shared(inner: Arc<Tokenizer>) -> Self {
        PyTokenizer {
            inner,
            bpe_truncation: None,
            bpe_padding: None,
        }
    }

    /// `"all"`, or an iterable of special-token strings, as ids.
    fn specials(&self, arg: &Bound<'_, PyAny>, what: &str) -> PyResult<Specials> {
        if let Ok(s) = arg.cast::<PyString>() {
            if s.to_cow()? == "all" {
                return Ok(Specials::All);
            }
            return Err(value_error(format!(
                "`{what}` must be \"all\" or a set of special-token strings"
            )));
        }
        let mut ids = Vec::new();
        for item in arg.try_iter()? {
            let name: String = item?.extract()?;
            let id = self
                .special_id(&name)
                .ok_or_else(|| value_error(format!("`{what}`: {name:?} is not a special token")))?;
            ids.push(id);
        }
        Ok(Specials::Ids(ids))
    }

    fn special_id(&self, name: &str) -> Option<u32> {
        match &*self.inner {
            Tokenizer::Bpe(t) => t
                .special_tokens()
                .find(|(s, _)| *s == name)
                .map(|(_, id)| id),
            Tokenizer::WordPiece(t) => t.token_to_id(name).filter(|&id| t.is_special(id)),
        }
    }

    /// The specials in force: `disallowed` "all" means every one not
    /// allowed. Absent arguments take HF's defaults (every special allowed)
    /// or, with `tiktoken`, tiktoken's (none allowed, the others disallowed).
    fn special_args(
        &self,
        allowed: Option<&Bound<'_, PyAny>>,
        disallowed: Option<&Bound<'_, PyAny>>,
        tiktoken: bool,
    ) -> PyResult<(Specials, Specials)> {
        let allowed = match allowed {
            Some(a) => self.specials(a, "allowed_special")?,
            None if tiktoken => Specials::Ids(Vec::new()),
            None => Specials::All,
        };
        let disallowed = match disallowed {
            Some(d) => self.specials(d, "disallowed_special")?,
            None if tiktoken => Specials::All,
            None => Specials::Ids(Vec::new()),
        };
        let disallowed = match (disallowed, &allowed) {
            (Specials::All, Specials::All) => Specials::Ids(Vec::new()),
            (Specials::All, Specials::Ids(a)) => Specials::Ids(
                self.all_special_ids()
                    .into_iter()
                    .filter(|id| !a.contains(id))
                    .collect(),
            ),
            (d, _) => d,
        };
        Ok((allowed, disallowed))
    }

    fn all_special_ids(&self) -> Vec<u32> {
        match &*self.inner {
            Tokenizer::Bpe(t) => t.special_tokens().map(|(_, id)| id).collect(),
            Tokenizer::WordPiece(t) => (0..t.vocab_size() as u32)
                .filter(|&id| t.is_special(id))
                .collect(),
        }
    }

    fn mutable(&mut self) -> &mut Tokenizer {
        Arc::make_mut(&mut self.inner)
    }
}

/// What one encode call needs, free of Python objects (runs without the GIL).
struct EncodeJob<'a> {
    tok: &'a Tokenizer,
    add_special_tokens: bool,
    allowed: Specials,
    disallowed: Specials,
    truncation: Option<(usize, TruncationDirection)>,
    padding: Option<Padding>,
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
    fn ids(&self, text: &str) -> Result<Vec<u32>, String> {
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
    fn encodings(&self, inputs: &[Input]) -> Result<Vec<Encoding>, String> {
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

fn input_of(obj: &Bound<'_, PyAny>) -> PyResult<Input> {
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

#[pymethods]
impl PyTokenizer {
    /// Loads a tokenizer file: an HF `tokenizer.json` (BPE or WordPiece), a
    /// `vocab.txt` (WordPiece, uncased BERT settings), or a folder holding
    /// either (or GPT-2's `vocab.json` + `merges.txt`).
    #[staticmethod]
    fn from_file(py: Python<'_>, path: PathBuf) -> PyResult<Self> {
        let tok = py.detach(|| {
            if path.is_dir() {
                Tokenizer::from_dir(&path)
            } else if path.file_name().is_some_and(|n| n == "vocab.txt") {
                lmkit_tokenizers::wordpiece::WordPieceTokenizer::from_vocab_file(
                    &path,
                    Default::default(),
                )
                .map(Tokenizer::from)
            } else {
                Tokenizer::from_tokenizer_json(&path)
            }
        });
        Ok(PyTokenizer::new(tok.py()?))
    }

    /// Loads the tokenizer of a model folder, or of a hub name found in the
    /// local HF cache (`gpt2`, `sentence-transformers/all-MiniLM-L6-v2`).
    #[staticmethod]
    fn from_pretrained(py: Python<'_>, name_or_path: &str) -> PyResult<Self> {
        let tok = py.detach(|| -> PyResult<Tokenizer> {
            let dir = lmkit::checkpoint::resolve_model_dir(name_or_path).py()?;
            Tokenizer::from_dir(&dir).py()
        })?;
        Ok(PyTokenizer::new(tok))
    }

    /// Trains a vocabulary on text files (`.gz` / `.zst` are decompressed):
    /// `kind` "bpe" (byte-level, GPT-2) or "wordpiece" (BERT, uncased).
    #[staticmethod]
    #[pyo3(signature = (files, *, kind = "bpe", vocab_size = None, min_frequency = 2, special_tokens = None))]
    fn train(
        py: Python<'_>,
        files: Vec<PathBuf>,
        kind: &str,
        vocab_size: Option<usize>,
        min_frequency: u64,
        special_tokens: Option<Vec<String>>,
    ) -> PyResult<Self> {
        let tok = py.detach(|| -> PyResult<Tokenizer> {
            match kind {
                "bpe" => {
                    let mut trainer = bpe_trainer(vocab_size, min_frequency, special_tokens)?;
                    for f in &files {
                        trainer.feed(&lmkit::data::source::read_source(f).py()?);
                    }
                    Ok(trainer.train(|_, _| {}).py()?.into())
                }
                "wordpiece" => {
                    let trainer = wordpiece_trainer(vocab_size, min_frequency, special_tokens)?;
                    Ok(train_wordpiece_files(&files, &trainer, |_| {}).py()?.into())
                }
                other => Err(value_error(format!(
                    "`kind` {other:?}: expected \"bpe\" or \"wordpiece\""
                ))),
            }
        })?;
        Ok(PyTokenizer::new(tok))
    }

    /// [`Self::train`] on texts in memory (any iterable of str).
    #[staticmethod]
    #[pyo3(signature = (texts, *, kind = "bpe", vocab_size = None, min_frequency = 2, special_tokens = None))]
    fn train_from_iterator(
        py: Python<'_>,
        texts: &Bound<'_, PyAny>,
        kind: &str,
        vocab_size: Option<usize>,
        min_frequency: u64,
        special_tokens: Option<Vec<String>>,
    ) -> PyResult<Self> {
        let mut all = Vec::new();
        for t in texts.try_iter()? {
            all.push(t?.extract::<String>()?);
        }
        let tok = py.detach(|| -> PyResult<Tokenizer> {
            match kind {
                "bpe" => {
                    let mut trainer = bpe_trainer(vocab_size, min_frequency, special_tokens)?;
                    for t in &all {
                        trainer.feed(t.as_bytes());
                    }
                    Ok(trainer.train(|_, _| {}).py()?.into())
                }
                "wordpiece" => {
                    let trainer = wordpiece_trainer(vocab_size, min_frequency, special_tokens)?;
                    let refs: Vec<&str> = all.iter().map(String::as_str).collect();
                    Ok(train_wordpiece(&refs, &trainer, |_| {}).py()?.into())
                }
                other => Err(value_error(format!(
                    "`kind` {other:?}: expected \"bpe\" or \"wordpiece\""
                ))),
            }
        })?;
        Ok(PyTokenizer::new(tok))
    }

    /// Writes the tokenizer's files (`tokenizer.json` and the vocabulary
    /// files transformers reads) into `folder`, created if needed.
    fn save(&self, py: Python<'_>, folder: PathBuf) -> PyResult<()> {
        let tok = self.inner.clone();
        py.detach(move || tok.save(&folder)).py()
    }

    /// "bpe" or "wordpiece".
    #[getter]
    fn kind(&self) -> &'static str {
        self.inner.kind()
    }

    /// Number of ids (one more than the largest).
    fn get_vocab_size(&self) -> usize {
        self.inner.vocab_size()
    }

    fn token_to_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    fn id_to_token(&self, id: u32) -> Option<String> {
        self.inner.id_to_token(id).map(str::to_owned)
    }

    /// The special tokens' strings.
    #[getter]
    fn special_tokens(&self) -> Vec<String> {
        self.all_special_ids()
            .into_iter()
            .filter_map(|id| self.inner.id_to_token(id).map(str::to_owned))
            .collect()
    }

    /// Encodes a text, or the pair `(text, pair)` (WordPiece), with HF's
    /// `add_special_tokens` (BERT's `[CLS]` / `[SEP]`) and tiktoken's special
    /// handling: special-token text is a special token when allowed (default
    /// "all", as HF), an error when disallowed, else ordinary text.
    #[pyo3(signature = (text, pair = None, *, add_special_tokens = true, allowed_special = None, disallowed_special = None))]
    fn encode(
        &self,
        py: Python<'_>,
        text: String,
        pair: Option<String>,
        add_special_tokens: bool,
        allowed_special: Option<&Bound<'_, PyAny>>,
        disallowed_special: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyEncoding> {
        let input = match pair {
            Some(b) => Input::Pair(text, b),
            None => Input::Text(text),
        };
        let mut out = self.encode_inputs(
            py,
            vec![input],
            add_special_tokens,
            allowed_special,
            disallowed_special,
        )?;
        Ok(out.pop().expect("one encoding per input"))
    }

    /// Encodes many texts (or `(text, pair)` tuples) on all cores, the GIL
    /// released; padding pads to the batch's longest.
    #[pyo3(signature = (inputs, *, add_special_tokens = true, allowed_special = None, disallowed_special = None))]
    fn encode_batch(
        &self,
        py: Python<'_>,
        inputs: &Bound<'_, PyAny>,
        add_special_tokens: bool,
        allowed_special: Option<&Bound<'_, PyAny>>,
        disallowed_special: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Vec<PyEncoding>> {
        let mut all = Vec::new();
        for x in inputs.try_iter()? {
            all.push(input_of(&x?)?);
        }
        self.encode_inputs(
            py,
            all,
            add_special_tokens,
            allowed_special,
            disallowed_special,
        )
    }

    /// Token ids of one text (no `Encoding`): tiktoken's `encode`, whose
    /// defaults (`allowed_special=set()`, `disallowed_special="all"`) this
    /// takes when `tiktoken_defaults`.
    #[pyo3(signature = (text, *, add_special_tokens = true, allowed_special = None, disallowed_special = None, tiktoken_defaults = false))]
    fn encode_ids(
        &self,
        py: Python<'_>,
        text: String,
        add_special_tokens: bool,
        allowed_special: Option<&Bound<'_, PyAny>>,
        disallowed_special: Option<&Bound<'_, PyAny>>,
        tiktoken_defaults: bool,
    ) -> PyResult<Vec<u32>> {
        let job = self.ids_job(
            add_special_tokens,
            allowed_special,
            disallowed_special,
            tiktoken_defaults,
        )?;
        // Short texts are not worth a GIL round trip.
        if text.len() < 4096 {
            return job.ids(&text).map_err(value_error);
        }
        py.detach(|| job.ids(&text)).map_err(value_error)
    }

    /// Token ids of many texts on all cores, the GIL released.
    #[pyo3(signature = (texts, *, add_special_tokens = true, allowed_special = None, disallowed_special = None, tiktoken_defaults = false))]
    fn encode_ids_batch(
        &self,
        py: Python<'_>,
        texts: Vec<String>,
        add_special_tokens: bool,
        allowed_special: Option<&Bound<'_, PyAny>>,
        disallowed_special: Option<&Bound<'_, PyAny>>,
        tiktoken_defaults: bool,
    ) -> PyResult<Vec<Vec<u32>>> {
        let job = self.ids_job(
            add_special_tokens,
            allowed_special,
            disallowed_special,
            tiktoken_defaults,
        )?;
        py.detach(|| {
            texts
                .par_iter()
                .map(|t| job.ids(t))
                .collect::<Result<Vec<_>, String>>()
        })
        .map_err(value_error)
    }

    /// The text of `ids` (bytes that are not UTF-8 become U+FFFD, as HF
    /// and tiktoken decode); special tokens are dropped unless
    /// `skip_special_tokens=False` (HF's default).
    #[pyo3(signature = (ids, skip_special_tokens = true))]
    fn decode(&self, ids: Vec<u32>, skip_special_tokens: bool) -> PyResult<String> {
        decode_one(&self.inner, &ids, skip_special_tokens).map_err(value_error)
    }

    /// The bytes of `ids` (BPE tokens may hold part of a character).
    fn decode_bytes<'py>(&self, py: Python<'py>, ids: Vec<u32>) -> PyResult<Bound<'py, PyBytes>> {
        let bytes = self.inner.decode(&ids).py()?;
        Ok(PyBytes::new(py, &bytes))
    }

    /// [`Self::decode`] of many id lists, on all cores.
    #[pyo3(signature = (sequences, skip_special_tokens = true))]
    fn decode_batch(
        &self,
        py: Python<'_>,
        sequences: Vec<Vec<u32>>,
        skip_special_tokens: bool,
    ) -> PyResult<Vec<String>> {
        let tok = &*self.inner;
        py.detach(|| {
            sequences
                .par_iter()
                .map(|ids| decode_one(tok, ids, skip_special_tokens))
                .collect::<Result<Vec<_>, String>>()
        })
        .map_err(value_error)
    }

    /// Truncates every encoding to `max_length` tokens (special tokens
    /// included). WordPiece follows HF for pairs: `strategy`
    /// "longest_first", "only_first" or "only_second", `stride`.
    #[pyo3(signature = (max_length, *, stride = 0, strategy = "longest_first", direction = "right"))]
    fn enable_truncation(
        &mut self,
        max_length: usize,
        stride: usize,
        strategy: &str,
        direction: &str,
    ) -> PyResult<()> {
        let direction = match direction {
            "right" => TruncationDirection::Right,
            "left" => TruncationDirection::Left,
            o => {
                return Err(value_error(format!(
                    "`direction` {o:?}: expected \"right\" or \"left\""
                )))
            }
        };
        let strategy = match strategy {
            "longest_first" => TruncationStrategy::LongestFirst,
            "only_first" => TruncationStrategy::OnlyFirst,
            "only_second" => TruncationStrategy::OnlySecond,
            o => {
                return Err(value_error(format!(
                "`strategy` {o:?}: expected \"longest_first\", \"only_first\" or \"only_second\""
            )))
            }
        };
        if max_length == 0 {
            return Err(value_error("`max_length` must be at least 1"));
        }
        match self.mutable() {
            Tokenizer::WordPiece(t) => {
                t.set_truncation(Some(Truncation {
                    max_length,
                    strategy,
                    stride,
                    direction,
                }));
            }
            Tokenizer::Bpe(_) => {
                if stride != 0 {
                    return Err(value_error("`stride` needs a WordPiece tokenizer"));
                }
                self.bpe_truncation = Some((max_length, direction));
            }
        }
        Ok(())
    }

    fn no_truncation(&mut self) {
        self.bpe_truncation = None;
        if let Tokenizer::WordPiece(t) = self.mutable() {
            t.set_truncation(None);
        }
    }

    /// Pads encodings of a batch to its longest (or to `length`), with
    /// `pad_token` / `pad_id` (default: the tokenizer's `[PAD]`; GPT-2 has
    /// none, so one must be given), on the `direction` side.
    #[pyo3(signature = (*, length = None, pad_to_multiple_of = None, pad_id = None, pad_token = None, pad_type_id = 0, direction = "right"))]
    fn enable_padding(
        &mut self,
        length: Option<usize>,
        pad_to_multiple_of: Option<usize>,
        pad_id: Option<u32>,
        pad_token: Option<&str>,
        pad_type_id: u32,
        direction: &str,
    ) -> PyResult<()> {
        let direction = match direction {
            "right" => PaddingDirection::Right,
            "left" => PaddingDirection::Left,
            o => {
                return Err(value_error(format!(
                    "`direction` {o:?}: expected \"right\" or \"left\""
                )))
            }
        };
        let pad_id = match (pad_id, pad_token) {
            (Some(id), _) => id,
            (None, Some(t)) => self
                .inner
                .token_to_id(t)
                .ok_or_else(|| value_error(format!("`pad_token` {t:?} is not in the vocabulary")))?,
            (None, None) => self.inner.pad_token_id().ok_or_else(|| {
                value_error(
                    "this tokenizer has no padding token: pass `pad_token` (e.g. \"<|endoftext|>\") or `pad_id`",
                )
            })?,
        };
        if pad_id as usize >= self.inner.vocab_size() {
            return Err(value_error(format!(
                "`pad_id` {pad_id} is outside the vocabulary of {}",
                self.inner.vocab_size()
            )));
        }
        let padding = Padding {
            to: length.map_or(PaddingLength::Longest, PaddingLength::Fixed),
            pad_to_multiple_of,
            pad_id,
            pad_type_id,
            direction,
        };
        match self.mutable() {
            Tokenizer::WordPiece(t) => {
                t.set_padding(Some(padding));
            }
            Tokenizer::Bpe(_) => self.bpe_padding = Some(padding),
        }
        Ok(())
    }

    fn no_padding(&mut self) {
        self.bpe_padding = None;
        if let Tokenizer::WordPiece(t) = self.mutable() {
            t.set_padding(None);
        }
    }

    fn __repr__(&self) -> String {
        format!(
            "Tokenizer(kind={:?}, vocab_size={})",
            self.inner.kind(),
            self.inner.vocab_size()
        )
    }
}

impl PyTokenizer {
    fn ids_job(
        &self,
        add_special_tokens: bool,
        allowed: Option<&Bound<'_, PyAny>>,
        disallowed: Option<&Bound<'_, PyAny>>,
        tiktoken_defaults: bool,
    ) -> PyResult<EncodeJob<'_>> {
        let (allowed, disallowed) = self.special_args(allowed, disallowed, tiktoken_defaults)?;
        Ok(EncodeJob {
            tok: &self.inner,
            add_special_tokens,
            allowed,
            disallowed,
            truncation: self.bpe_truncation,
            padding: self.bpe_padding.clone(),
        })
    }

    fn encode_inputs(
        &self,
        py: Python<'_>,
        inputs: Vec<Input>,
        add_special_tokens: bool,
        allowed: Option<&Bound<'_, PyAny>>,
        disallowed: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Vec<PyEncoding>> {
        let (allowed, disallowed) = self.special_args(allowed, disallowed, false)?;
        let job = EncodeJob {
            tok: &self.inner,
            add_special_tokens,
            allowed,
            disallowed,
            truncation: self.bpe_truncation,
            padding: self.bpe_padding.clone(),
        };
        let encs = py.detach(|| job.encodings(&inputs)).map_err(value_error)?;
        Ok(encs
            .into_iter()
            .zip(inputs)
            .map(|(enc, input)| {
                let (a, b) = match input {
                    Input::Text(a) => (a, None),
                    Input::Pair(a, b) => (a, Some(b)),
                };
                PyEncoding {
                    enc,
                    tok: self.inner.clone(),
                    text: a,
                    pair: b,
                }
            })
            .collect())
    }
}

fn decode_one(tok: &Tokenizer, ids: &[u32], skip_special_tokens: bool) -> Result<String, String> {
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

fn bpe_trainer(
    vocab_size: Option<usize>,
    min_frequency: u64,
    special_tokens: Option<Vec<String>>,
) -> PyResult<BpeTrainer> {
    let mut options = BpeTrainerOptions {
        min_frequency,
        ..Default::default()
    };
    if let Some(v) = vocab_size {
        options.vocab_size = v;
    }
    if let Some(s) = special_tokens {
        options.special_tokens = s;
    }
    BpeTrainer::new(options).py()
}

fn wordpiece_trainer(
    vocab_size: Option<usize>,
    min_frequency: u64,
    special_tokens: Option<Vec<String>>,
) -> PyResult<WordPieceTrainer> {
    if special_tokens.is_some() {
        return Err(value_error(
            "`special_tokens` is for BPE; WordPiece always has [PAD] [UNK] [CLS] [SEP] [MASK]",
        ));
    }
    let mut trainer = WordPieceTrainer {
        min_frequency,
        ..Default::default()
    };
    if let Some(v) = vocab_size {
        trainer.vocab_size = v;
    }
    Ok(trainer)
}

/// One encoded input, as HF tokenizers' `Encoding`: `ids`, `tokens`,
/// `offsets` (characters of the text it came from; a pair's second-text
/// tokens point into the pair), `attention_mask`, `type_ids`,
/// `special_tokens_mask`.
#[pyclass(module = "lmkit", name = "Encoding", frozen)]
pub struct PyEncoding {
    enc: Encoding,
    tok: Arc<Tokenizer>,
    text: String,
    pair: Option<String>,
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
