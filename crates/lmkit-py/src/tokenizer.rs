//! `lmkit.Tokenizer` and `lmkit.Encoding`: byte-level BPE (GPT-2) and
//! WordPiece (BERT) over `lmkit_tokenizers`, shaped like HF tokenizers'
//! Python API, with tiktoken's `allowed_special` / `disallowed_special`.
//! Batches are encoded on all cores with the GIL released.

use std::path::PathBuf;
use std::sync::Arc;

use lmkit_tokenizers::train_bpe::{BpeTrainer, BpeTrainerOptions};
use lmkit_tokenizers::wordpiece::{
    train_wordpiece, train_wordpiece_files, Padding, PaddingDirection, PaddingLength, Truncation,
    TruncationDirection, TruncationStrategy, WordPieceTrainer,
};
use lmkit_tokenizers::Tokenizer;
use numpy::PyArray1;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyString};
use rayon::prelude::*;

use crate::errors::{value_error, PyResultExt};

mod encode;
mod encoding;
mod ids;
mod tiktoken;

use encode::{decode_one, input_of, EncodeJob, Input, Specials};
pub use encoding::PyEncoding;

/// The tokenizer; its encodings hold an `Arc` of it so that their tokens
/// can be spelled lazily.
#[pyclass(module = "lmkit", name = "Tokenizer")]
pub struct PyTokenizer {
    inner: Arc<Tokenizer>,
    /// BPE only (WordPiece keeps its own, HF's semantics for pairs).
    bpe_truncation: Option<(usize, TruncationDirection)>,
    bpe_padding: Option<Padding>,
    /// The Python ints of the ids, for the id lists returned.
    id_objects: ids::IdObjects,
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
            id_objects: ids::IdObjects::default(),
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

    /// OpenAI encoding `name` ("gpt2", "r50k_base", "p50k_base",
    /// "p50k_edit", "cl100k_base", "o200k_base", "o200k_harmony"), built
    /// in: no download.
    #[staticmethod]
    fn from_tiktoken(py: Python<'_>, name: &str) -> PyResult<Self> {
        Ok(PyTokenizer::new(py.detach(|| tiktoken::encoding(name))?))
    }

    /// The names [`Self::from_tiktoken`] takes, in tiktoken's order.
    #[staticmethod]
    fn tiktoken_encodings() -> Vec<&'static str> {
        lmkit_tokenizers::openai::ENCODINGS.to_vec()
    }

    /// The tokenizer of tiktoken ranks (`(bytes, rank)` pairs), special
    /// tokens (`(text, id)`) and `pat_str` (tiktoken's r50k/p50k, cl100k
    /// and o200k patterns by a scanner, any other by `fancy-regex`).
    #[staticmethod]
    fn from_tiktoken_ranks(
        py: Python<'_>,
        ranks: Vec<(Vec<u8>, u32)>,
        special_tokens: Vec<(String, u32)>,
        pat_str: &str,
    ) -> PyResult<Self> {
        let tok = py.detach(|| tiktoken::from_ranks(ranks, special_tokens, pat_str))?;
        Ok(PyTokenizer::new(tok))
    }

    /// tiktoken's `pat_str` of a BPE tokenizer.
    #[getter]
    fn tiktoken_pattern(&self) -> PyResult<String> {
        Ok(tiktoken::bpe(&self.inner)?.pattern().regex().to_string())
    }

    /// The bytes of token `id` (a special token's text), `None` where no
    /// token has that id.
    fn token_bytes<'py>(&self, py: Python<'py>, id: u32) -> PyResult<Option<Bound<'py, PyBytes>>> {
        let t = tiktoken::bpe(&self.inner)?;
        Ok(t.token_bytes(id).map(|b| PyBytes::new(py, b)))
    }

    /// Every ordinary token as `(bytes, id)`, in id order (tiktoken's
    /// `mergeable_ranks`).
    fn ordinary_tokens(&self) -> PyResult<Vec<(Vec<u8>, u32)>> {
        Ok(tiktoken::ordinary_tokens(tiktoken::bpe(&self.inner)?))
    }

    /// tiktoken's `special_tokens`: `(text, id)` of each (two texts may
    /// share an id).
    fn tiktoken_special_tokens(&self) -> PyResult<Vec<(String, u32)>> {
        let t = tiktoken::bpe(&self.inner)?;
        Ok(t.special_tokens()
            .map(|(s, id)| (s.to_string(), id))
            .collect())
    }

    /// The id of a token given by its bytes, special tokens included.
    fn bytes_to_id(&self, token: &[u8]) -> PyResult<Option<u32>> {
        let t = tiktoken::bpe(&self.inner)?;
        let special = t.special_tokens().find(|(s, _)| s.as_bytes() == token);
        Ok(special
            .map(|(_, id)| id)
            .or_else(|| match t.encode_single_piece(token)[..] {
                [id] if t.token_bytes(id) == Some(token) => Some(id),
                _ => None,
            }))
    }

    /// tiktoken's `_encode_single_piece`: BPE without pre-tokenization.
    fn encode_single_piece(&self, piece: &[u8]) -> PyResult<Vec<u32>> {
        Ok(tiktoken::bpe(&self.inner)?.encode_single_piece(piece))
    }

    /// tiktoken's `byte_pair_encode`: the merge loop alone.
    fn byte_pair_encode(&self, piece: &[u8]) -> PyResult<Vec<u32>> {
        Ok(tiktoken::bpe(&self.inner)?.byte_pair_encode(piece))
    }

    /// tiktoken's `last_piece_token_len` (see `encode_with_unstable`) of
    /// `text` encoded with the special tokens `allowed` (ids).
    fn tiktoken_last_piece_token_len(&self, text: &str, allowed: Vec<u32>) -> PyResult<usize> {
        let t = tiktoken::bpe(&self.inner)?;
        Ok(t.last_piece_token_len(text.as_bytes(), |id| allowed.contains(&id)))
    }

    /// tiktoken's `_encode_bytes` (its rule for bytes that are not UTF-8).
    fn encode_bytes_tiktoken(&self, py: Python<'_>, text: &[u8]) -> PyResult<Vec<u32>> {
        let t = tiktoken::bpe(&self.inner)?;
        Ok(py.detach(|| t.encode_bytes_tiktoken(text)))
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
    fn encode_ids<'py>(
        &self,
        py: Python<'py>,
        text: &Bound<'_, PyString>,
        add_special_tokens: bool,
        allowed_special: Option<&Bound<'_, PyAny>>,
        disallowed_special: Option<&Bound<'_, PyAny>>,
        tiktoken_defaults: bool,
    ) -> PyResult<Bound<'py, PyList>> {
        let job = self.ids_job(
            add_special_tokens,
            allowed_special,
            disallowed_special,
            tiktoken_defaults,
        )?;
        let ids = ids_of(py, &job, text)?;
        self.id_objects.list(py, self.inner.vocab_size(), &ids)
    }

    /// [`Self::encode_ids`] as a numpy array of uint32 that takes over the
    /// ids (tiktoken's `encode_to_numpy`: no Python list in between).
    #[pyo3(signature = (text, *, add_special_tokens = true, allowed_special = None, disallowed_special = None, tiktoken_defaults = false))]
    fn encode_ids_numpy<'py>(
        &self,
        py: Python<'py>,
        text: &Bound<'_, PyString>,
        add_special_tokens: bool,
        allowed_special: Option<&Bound<'_, PyAny>>,
        disallowed_special: Option<&Bound<'_, PyAny>>,
        tiktoken_defaults: bool,
    ) -> PyResult<Bound<'py, PyArray1<u32>>> {
        let job = self.ids_job(
            add_special_tokens,
            allowed_special,
            disallowed_special,
            tiktoken_defaults,
        )?;
        Ok(PyArray1::from_vec(py, ids_of(py, &job, text)?))
    }

    /// Token ids of many texts on all cores, the GIL released.
    #[pyo3(signature = (texts, *, add_special_tokens = true, allowed_special = None, disallowed_special = None, tiktoken_defaults = false))]
    fn encode_ids_batch<'py>(
        &self,
        py: Python<'py>,
        texts: Vec<Bound<'py, PyString>>,
        add_special_tokens: bool,
        allowed_special: Option<&Bound<'_, PyAny>>,
        disallowed_special: Option<&Bound<'_, PyAny>>,
        tiktoken_defaults: bool,
    ) -> PyResult<Bound<'py, PyList>> {
        let job = self.ids_job(
            add_special_tokens,
            allowed_special,
            disallowed_special,
            tiktoken_defaults,
        )?;
        let texts = texts.iter().map(ids::utf8).collect::<PyResult<Vec<_>>>()?;
        let seqs = py
            .detach(|| {
                texts
                    .par_iter()
                    .map(|t| job.ids(t))
                    .collect::<Result<Vec<_>, String>>()
            })
            .map_err(value_error)?;
        self.id_objects.lists(py, self.inner.vocab_size(), &seqs)
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

/// The ids of `text` by `job`, the GIL released for long texts.
fn ids_of(py: Python<'_>, job: &EncodeJob<'_>, text: &Bound<'_, PyString>) -> PyResult<Vec<u32>> {
    let text = ids::utf8(text)?;
    // Short texts are not worth a GIL round trip.
    if text.len() < 4096 {
        job.ids(text)
    } else {
        py.detach(|| job.ids(text))
    }
    .map_err(value_error)
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
