//! `lmkit.GPT2`, `lmkit.Bert` and `lmkit.Classifier`: the models loaded by
//! `lmkit::models::load` (as the CLI loads them) and the library's
//! generation, perplexity and BERT pipelines. Results are numpy arrays
//! (logits, embeddings) or dicts with the keys of HF's pipelines (the
//! CLI's `--json`).

use std::ops::ControlFlow;
use std::path::PathBuf;
use std::sync::mpsc::{channel, Receiver};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use lmkit::models::auto_dtype::DtypeRequest;
use lmkit::models::bert::{
    BertPipeline, Chunking, EmbedOptions, LabelScore, LongInputs, Pooling, QaOptions,
};
use lmkit::models::gpt2::{GenerationConfig, Gpt2Engine, SamplingParams, WeightDtype};
use lmkit::models::load::{load_bert, load_gpt2};
use lmkit::tasks::classify::{classify_rows_with, Classifier};
use lmkit_tokenizers::{BpeTokenizer, Tokenizer};
use numpy::PyArray2;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString, PyTuple};
use serde_json::json;

use crate::convert::{array2, from_py_json, json_to_py};
use crate::errors::{value_error, PyResultExt};
use crate::tokenizer::PyTokenizer;

/// A `dtype` argument: "f32", "bf16", "int8" or "auto" (the fastest on
/// this CPU, measured once and cached).
fn dtype(s: &str) -> PyResult<DtypeRequest<WeightDtype>> {
    s.parse::<DtypeRequest<WeightDtype>>().py()
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while generating leaves the engine as it was between steps.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A GPT-2 model with its tokenizer: generation, logits, perplexity.
#[pyclass(module = "lmkit", name = "GPT2")]
pub struct PyGpt2 {
    tokenizer: Arc<BpeTokenizer>,
    engine: Arc<Mutex<Gpt2Engine>>,
    /// What the `tokenizer` property hands out, made on first use.
    shared_tokenizer: OnceLock<Arc<Tokenizer>>,
}

/// A generation request, free of Python objects.
struct Request {
    prompt: Vec<u32>,
    cfg: GenerationConfig,
    stop: Vec<String>,
}

#[allow(clippy::too_many_arguments)]
fn request(
    engine: &Gpt2Engine,
    tokenizer: &BpeTokenizer,
    prompt: Vec<u32>,
    max_new_tokens: usize,
    temperature: f32,
    top_k: usize,
    top_p: f32,
    repetition_penalty: f32,
    seed: Option<u64>,
    stop: Option<Vec<String>>,
    ignore_eos: bool,
    truncate: bool,
) -> PyResult<Request> {
    if temperature.is_nan() || temperature < 0.0 {
        return Err(value_error("`temperature` must be >= 0 (0 is greedy)"));
    }
    let cfg = GenerationConfig {
        max_new_tokens,
        sampling: SamplingParams {
            // As the OpenAI API and the server: temperature 0 is greedy.
            greedy: temperature == 0.0,
            temperature: if temperature == 0.0 { 1.0 } else { temperature },
            top_k,
            top_p,
            repetition_penalty,
            ..SamplingParams::default()
        },
        seed: seed.unwrap_or_else(clock_seed),
        eos_token_id: engine.eos_token_id(tokenizer),
        ignore_eos,
        truncate,
    };
    Ok(Request {
        prompt,
        cfg,
        stop: stop.unwrap_or_default(),
    })
}

/// A seed from the clock, for calls that did not ask for reproducibility.
fn clock_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

#[pymethods]
impl PyGpt2 {
    /// Loads a GPT-2 folder in HF layout (or a hub name in the local HF
    /// cache) with its weights as `dtype`: "f32", "bf16", "int8" or "auto" (the
    /// fastest on this CPU, measured once and cached).
    #[staticmethod]
    #[pyo3(signature = (name_or_path, *, dtype = "f32", tokenizer = None))]
    fn from_pretrained(
        py: Python<'_>,
        name_or_path: &str,
        dtype: &str,
        tokenizer: Option<PathBuf>,
    ) -> PyResult<Self> {
        let d = self::dtype(dtype)?;
        let (tok, engine) = py
            .detach(|| {
                load_gpt2(
                    "GPT2.from_pretrained",
                    name_or_path,
                    tokenizer.as_deref(),
                    d,
                )
            })
            .py()?;
        Ok(PyGpt2 {
            tokenizer: Arc::new(tok),
            engine: Arc::new(Mutex::new(engine)),
            shared_tokenizer: OnceLock::new(),
        })
    }

    /// The model's tokenizer, as an `lmkit.Tokenizer` (its own copy once
    /// changed, e.g. by `enable_truncation`).
    #[getter]
    fn tokenizer(&self) -> PyTokenizer {
        // Shared, not copied per access: a copy of GPT-2's tables took
        // milliseconds, paid by every `model.tokenizer.encode(...)`.
        let t = self
            .shared_tokenizer
            .get_or_init(|| Arc::new(Tokenizer::from((*self.tokenizer).clone())));
        PyTokenizer::shared(t.clone())
    }

    /// The model's `config.json` values that shape it.
    #[getter]
    fn config<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let e = lock(&self.engine);
        let c = e.config();
        let d = PyDict::new(py);
        d.set_item("vocab_size", c.vocab_size)?;
        d.set_item("n_positions", c.n_positions)?;
        d.set_item("n_embd", c.n_embd)?;
        d.set_item("n_layer", c.n_layer)?;
        d.set_item("n_head", c.n_head)?;
        d.set_item("dtype", e.dtype().to_string())?;
        Ok(d)
    }

    /// Continues `prompt` and returns the new text (without the prompt).
    /// Sampling as HF's defaults (temperature 1, top-k 50); `temperature=0`
    /// is greedy. Stops at `max_new_tokens`, at end-of-text (unless
    /// `ignore_eos`) or before the first `stop` string.
    #[pyo3(signature = (prompt, max_new_tokens = 50, *, temperature = 1.0, top_k = 50, top_p = 1.0, repetition_penalty = 1.0, seed = None, stop = None, ignore_eos = false, truncate = false))]
    #[allow(clippy::too_many_arguments)]
    fn generate(
        &self,
        py: Python<'_>,
        prompt: &str,
        max_new_tokens: usize,
        temperature: f32,
        top_k: usize,
        top_p: f32,
        repetition_penalty: f32,
        seed: Option<u64>,
        stop: Option<Vec<String>>,
        ignore_eos: bool,
        truncate: bool,
    ) -> PyResult<String> {
        let req = {
            let e = lock(&self.engine);
            request(
                &e,
                &self.tokenizer,
                Gpt2Engine::prompt_ids(&self.tokenizer, prompt).py()?,
                max_new_tokens,
                temperature,
                top_k,
                top_p,
                repetition_penalty,
                seed,
                stop,
                ignore_eos,
                truncate,
            )?
        };
        let tok = &*self.tokenizer;
        let engine = &*self.engine;
        let mut interrupt = None;
        let done = py.detach(|| {
            let mut e = lock(engine);
            e.complete(tok, &req.prompt, &req.cfg, &req.stop, |_| {
                // Ctrl-C between tokens (signals are seen on the main thread).
                match Python::attach(|py| py.check_signals()) {
                    Ok(()) => ControlFlow::Continue(()),
                    Err(err) => {
                        interrupt = Some(err);
                        ControlFlow::Break(())
                    }
                }
            })
        });
        if let Some(err) = interrupt {
            return Err(err);
        }
        Ok(done.py()?.text)
    }

    /// [`Self::generate`] on token ids: the new ids (an end-of-text that
    /// ended generation included), as HF's `generate(...)[0, len(ids):]`.
    #[pyo3(signature = (ids, max_new_tokens = 50, *, temperature = 1.0, top_k = 50, top_p = 1.0, repetition_penalty = 1.0, seed = None, ignore_eos = false, truncate = false))]
    #[allow(clippy::too_many_arguments)]
    fn generate_ids(
        &self,
        py: Python<'_>,
        ids: Vec<u32>,
        max_new_tokens: usize,
        temperature: f32,
        top_k: usize,
        top_p: f32,
        repetition_penalty: f32,
        seed: Option<u64>,
        ignore_eos: bool,
        truncate: bool,
    ) -> PyResult<Vec<u32>> {
        let engine = &*self.engine;
        let req = request(
            &lock(engine),
            &self.tokenizer,
            ids,
            max_new_tokens,
            temperature,
            top_k,
            top_p,
            repetition_penalty,
            seed,
            None,
            ignore_eos,
            truncate,
        )?;
        let out = py
            .detach(|| lock(engine).generate(&req.prompt, &req.cfg, |_| ControlFlow::Continue(())))
            .py()?;
        Ok(out.ids)
    }

    /// [`Self::generate`] as an iterator of text pieces, each yielded as
    /// soon as it is decoded (the pieces add up to `generate`'s text).
    #[pyo3(signature = (prompt, max_new_tokens = 50, *, temperature = 1.0, top_k = 50, top_p = 1.0, repetition_penalty = 1.0, seed = None, stop = None, ignore_eos = false, truncate = false))]
    #[allow(clippy::too_many_arguments)]
    fn generate_stream(
        &self,
        prompt: &str,
        max_new_tokens: usize,
        temperature: f32,
        top_k: usize,
        top_p: f32,
        repetition_penalty: f32,
        seed: Option<u64>,
        stop: Option<Vec<String>>,
        ignore_eos: bool,
        truncate: bool,
    ) -> PyResult<GenerationStream> {
        let req = {
            let e = lock(&self.engine);
            request(
                &e,
                &self.tokenizer,
                Gpt2Engine::prompt_ids(&self.tokenizer, prompt).py()?,
                max_new_tokens,
                temperature,
                top_k,
                top_p,
                repetition_penalty,
                seed,
                stop,
                ignore_eos,
                truncate,
            )?
        };
        let (tx, rx) = channel();
        let (tok, engine) = (self.tokenizer.clone(), self.engine.clone());
        // Generation runs on its own thread; a dropped iterator closes the
        // channel and the next token ends it.
        std::thread::spawn(move || {
            let mut e = lock(&engine);
            let done = e.complete(&tok, &req.prompt, &req.cfg, &req.stop, |piece| {
                match tx.send(Ok(piece.to_string())) {
                    Ok(()) => ControlFlow::Continue(()),
                    Err(_) => ControlFlow::Break(()),
                }
            });
            if let Err(err) = done {
                let _ = tx.send(Err(err));
            }
        });
        Ok(GenerationStream { rx: Mutex::new(rx) })
    }

    /// The next-token logits at every position of `ids`: a float32 array
    /// `(len(ids), vocab_size)`.
    fn logits<'py>(&self, py: Python<'py>, ids: Vec<u32>) -> PyResult<Bound<'py, PyArray2<f32>>> {
        if ids.is_empty() {
            return Err(value_error("`ids` is empty"));
        }
        let engine = &*self.engine;
        let (out, v) = py
            .detach(|| {
                let mut e = lock(engine);
                let v = e.config().vocab_size;
                e.forward_all_logits(&ids, 1, None).map(|o| (o, v))
            })
            .py()?;
        array2(py, out, ids.len(), v)
    }

    /// Sliding-window perplexity of `text` (a str, encoded without special
    /// tokens, or token ids), HF's recipe: windows of `context` tokens
    /// (default: the model's), `stride` apart (default: half the window).
    /// Returns `{"perplexity", "nll", "tokens", "windows"}`.
    #[pyo3(signature = (text, *, context = None, stride = None))]
    fn perplexity(
        &self,
        py: Python<'_>,
        text: &Bound<'_, PyAny>,
        context: Option<usize>,
        stride: Option<usize>,
    ) -> PyResult<Py<PyAny>> {
        if context == Some(0) || stride == Some(0) {
            return Err(value_error("`context` and `stride` must be positive"));
        }
        let ids = match text.cast::<PyString>() {
            Ok(s) => self.tokenizer.encode_ordinary(s.to_cow()?.as_bytes()),
            Err(_) => text.extract::<Vec<u32>>()?,
        };
        let engine = &*self.engine;
        let report = py
            .detach(|| {
                lock(engine).perplexity(&ids, context.unwrap_or(0), stride.unwrap_or(0), |_, _| {})
            })
            .py()?;
        json_to_py(
            py,
            &json!({
                "perplexity": report.perplexity,
                "nll": report.mean_nll,
                "tokens": report.tokens,
                "windows": report.windows,
            }),
        )
    }

    fn __repr__(&self) -> String {
        let e = lock(&self.engine);
        let c = e.config();
        format!(
            "GPT2(n_layer={}, n_embd={}, vocab_size={}, dtype={:?})",
            c.n_layer,
            c.n_embd,
            c.vocab_size,
            e.dtype().to_string()
        )
    }
}

/// The text pieces of one generation, as they are decoded.
#[pyclass(module = "lmkit", name = "GenerationStream")]
pub struct GenerationStream {
    rx: Mutex<Receiver<lmkit::Result<String>>>,
}

#[pymethods]
impl GenerationStream {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<String>> {
        let rx = &self.rx;
        match py.detach(|| lock(rx).recv()) {
            Ok(Ok(piece)) => Ok(Some(piece)),
            Ok(Err(e)) => Err(e).py(),
            Err(_) => Ok(None), // the generation ended
        }
    }
}

/// A BERT model with its tokenizer and sentence-transformers settings:
/// embeddings, fill-mask, classification and extractive QA.
#[pyclass(module = "lmkit", name = "Bert")]
pub struct PyBert {
    p: Arc<BertPipeline>,
    /// What the `tokenizer` property hands out, made on first use.
    shared_tokenizer: OnceLock<Arc<Tokenizer>>,
}

/// `str` or a list of them; whether it was one.
fn texts_arg(obj: &Bound<'_, PyAny>) -> PyResult<(Vec<String>, bool)> {
    if let Ok(s) = obj.cast::<PyString>() {
        return Ok((vec![s.to_cow()?.into_owned()], true));
    }
    Ok((obj.extract()?, false))
}

/// A classification input: a text, a `(text, text_pair)` tuple or HF's
/// `{"text", "text_pair"}` dict.
fn classify_input(obj: &Bound<'_, PyAny>) -> PyResult<(String, Option<String>)> {
    if let Ok(s) = obj.cast::<PyString>() {
        return Ok((s.to_cow()?.into_owned(), None));
    }
    if let Ok(d) = obj.cast::<PyDict>() {
        let text: String = d
            .get_item("text")?
            .ok_or_else(|| value_error("a dict input needs \"text\""))?
            .extract()?;
        let pair = match d.get_item("text_pair")? {
            Some(p) if !p.is_none() => Some(p.extract()?),
            _ => None,
        };
        return Ok((text, pair));
    }
    if let Ok(t) = obj.cast::<PyTuple>() {
        let (a, b): (String, String) = t.extract()?;
        return Ok((a, Some(b)));
    }
    Err(value_error(
        "inputs are a str, a (text, text_pair) tuple or a {\"text\", \"text_pair\"} dict",
    ))
}

/// `{"label", "score", "scores": [...]}` per input (the CLI's `--json`):
/// one dict for one input, else a list.
fn classify_result(py: Python<'_>, ranked: Vec<Vec<LabelScore>>, one: bool) -> PyResult<Py<PyAny>> {
    let rows: Vec<serde_json::Value> = ranked
        .iter()
        .map(|r| {
            let all: Vec<_> = r
                .iter()
                .map(|s| json!({"label": s.label, "score": s.score}))
                .collect();
            json!({"label": r[0].label, "score": r[0].score, "scores": all})
        })
        .collect();
    if one {
        json_to_py(py, &rows[0])
    } else {
        json_to_py(py, &serde_json::Value::Array(rows))
    }
}

fn row_refs(rows: &[(String, Option<String>)]) -> Vec<(&str, Option<&str>)> {
    rows.iter()
        .map(|(a, b)| (a.as_str(), b.as_deref()))
        .collect()
}

/// Texts with their optional pairs.
type Rows = Vec<(String, Option<String>)>;

/// The inputs of `classify`, and whether it was one input (not a list).
fn classify_inputs(obj: &Bound<'_, PyAny>) -> PyResult<(Rows, bool)> {
    if obj.cast::<PyString>().is_ok()
        || obj.cast::<PyDict>().is_ok()
        || obj.cast::<PyTuple>().is_ok()
    {
        return Ok((vec![classify_input(obj)?], true));
    }
    let mut rows = Vec::new();
    for x in obj.try_iter()? {
        rows.push(classify_input(&x?)?);
    }
    if let Some(i) = rows.iter().position(|r| r.0.trim().is_empty()) {
        return Err(value_error(format!(
            "input {} is empty: nothing to classify",
            i + 1
        )));
    }
    Ok((rows, false))
}

#[pymethods]
impl PyBert {
    /// Loads a BERT folder in HF layout (sentence-transformers files read
    /// when present) or a hub name in the local HF cache; `dtype` "f32",
    /// "bf16" (bf16 matmuls: faster on CPUs whose bf16 dot outruns f32
    /// FMAs, ~1e-2 less exact) or "int8" (int8 matmuls, activations
    /// quantized per row: fastest) or "auto" (the fastest on this CPU,
    /// measured once and cached).
    #[staticmethod]
    #[pyo3(signature = (name_or_path, *, dtype = "f32"))]
    fn from_pretrained(py: Python<'_>, name_or_path: &str, dtype: &str) -> PyResult<Self> {
        let d = self::dtype(dtype)?;
        let p = py
            .detach(|| load_bert("Bert.from_pretrained", name_or_path, d))
            .py()?;
        Ok(PyBert {
            p: Arc::new(p),
            shared_tokenizer: OnceLock::new(),
        })
    }

    /// The model's tokenizer, as an `lmkit.Tokenizer` (its own copy once
    /// changed, e.g. by `enable_truncation`).
    #[getter]
    fn tokenizer(&self) -> PyTokenizer {
        // Shared, not copied per access (see `GPT2.tokenizer`).
        let t = self
            .shared_tokenizer
            .get_or_init(|| Arc::new(Tokenizer::from(self.p.tokenizer.clone())));
        PyTokenizer::shared(t.clone())
    }

    /// Sentence embeddings, a float32 array `(len(texts), hidden)`, pooled
    /// and normalized as the folder's sentence-transformers modules say
    /// (mean, no normalization for a plain BERT) unless `pooling` ("mean",
    /// "cls", "max", "mean_sqrt_len") or `normalize` say otherwise. Texts
    /// longer than the model's `max_seq_length` are truncated, refused with
    /// `truncate=False` (an error naming the limit), or with `chunking`
    /// (`{"max_tokens": N, "overlap": K}`, as `lmkit serve` takes it; or
    /// `window=True`: windows of the model's length) embedded in windows
    /// whose vectors are averaged, weighted by their tokens. `dimensions`
    /// keeps the first D of each (re-normalized when normalized).
    #[pyo3(signature = (texts, *, normalize = None, pooling = None, batch_size = 32, window = false, truncate = None, chunking = None, dimensions = None))]
    #[allow(clippy::too_many_arguments)]
    fn embed<'py>(
        &self,
        py: Python<'py>,
        texts: &Bound<'py, PyAny>,
        normalize: Option<bool>,
        pooling: Option<&str>,
        batch_size: usize,
        window: bool,
        truncate: Option<bool>,
        chunking: Option<&Bound<'py, PyAny>>,
        dimensions: Option<usize>,
    ) -> PyResult<Bound<'py, PyArray2<f32>>> {
        if batch_size == 0 {
            return Err(value_error("`batch_size` must be at least 1"));
        }
        let (texts, _) = texts_arg(texts)?;
        let chunking: Option<Chunking> = match chunking {
            Some(c) => Some(from_py_json(c).map_err(|e| value_error(format!("`chunking`: {e}")))?),
            None => window.then(Chunking::default),
        };
        let opts = EmbedOptions {
            pooling: pooling.map(Pooling::parse).transpose().py()?,
            normalize,
            batch_size,
            long: LongInputs::from_flags(truncate, chunking, true).py()?,
            dimensions,
        };
        let p = &*self.p;
        let dims = p.model.config.hidden_size;
        let flat = py
            .detach(|| -> lmkit::Result<Vec<f32>> {
                let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
                let rows = p.embed(&refs, &opts)?;
                let mut flat = Vec::with_capacity(rows.len() * dims);
                for r in rows {
                    flat.extend_from_slice(&r);
                }
                Ok(flat)
            })
            .py()?;
        let n = texts.len();
        let d = flat.len().checked_div(n).unwrap_or(dims);
        array2(py, flat, n, d)
    }

    /// The `top_k` most likely tokens at each `[MASK]` of `text`, as HF's
    /// fill-mask pipeline returns them: a list of `{"score", "token",
    /// "token_str", "sequence"}`, or a list of such lists for several masks.
    #[pyo3(signature = (text, *, top_k = 5))]
    fn fill_mask(&self, py: Python<'_>, text: &str, top_k: usize) -> PyResult<Py<PyAny>> {
        if top_k == 0 {
            return Err(value_error("`top_k` must be at least 1"));
        }
        let p = &*self.p;
        let masks = py.detach(|| p.fill_mask(text, top_k)).py()?;
        let v = if masks.len() == 1 {
            json!(masks[0])
        } else {
            json!(masks)
        };
        json_to_py(py, &v)
    }

    /// Sequence classification: `{"label", "score", "scores"}` (all labels,
    /// best first; HF's scores: softmax, sigmoid for one label, raw output
    /// for regression) for a text, a `(text, text_pair)` tuple or a
    /// `{"text", "text_pair"}` dict, or a list of them for a list.
    #[pyo3(signature = (inputs, *, batch_size = 32, truncate = false))]
    fn classify(
        &self,
        py: Python<'_>,
        inputs: &Bound<'_, PyAny>,
        batch_size: usize,
        truncate: bool,
    ) -> PyResult<Py<PyAny>> {
        let (rows, one) = classify_inputs(inputs)?;
        let p = &*self.p;
        let bs = batch_size.max(1);
        let ranked = py
            .detach(|| {
                let refs = row_refs(&rows);
                classify_rows_with(
                    &refs,
                    |t| p.classify(t, bs, truncate),
                    |ab| p.classify_pairs(ab, bs, truncate),
                )
            })
            .py()?;
        classify_result(py, ranked, one)
    }

    /// Extractive QA over `context` (windows of `max_seq_len` tokens
    /// overlapping by `doc_stride`, HF's pipeline defaults): a dict
    /// `{"score", "start", "end", "answer"}` (character offsets), or a list
    /// of `top_k` of them.
    #[pyo3(signature = (question, context, *, top_k = 1, max_answer_len = 15, max_seq_len = None, doc_stride = None, handle_impossible_answer = false))]
    #[allow(clippy::too_many_arguments)]
    fn qa(
        &self,
        py: Python<'_>,
        question: &str,
        context: &str,
        top_k: usize,
        max_answer_len: usize,
        max_seq_len: Option<usize>,
        doc_stride: Option<usize>,
        handle_impossible_answer: bool,
    ) -> PyResult<Py<PyAny>> {
        if top_k == 0 || max_answer_len == 0 {
            return Err(value_error(
                "`top_k` and `max_answer_len` must be at least 1",
            ));
        }
        let p = &*self.p;
        let (window, stride) = lmkit::models::bert::qa_windows(
            max_seq_len,
            doc_stride,
            p.model.config.max_position_embeddings,
        )
        .py()?;
        let opts = QaOptions {
            top_k,
            max_answer_len,
            handle_impossible_answer,
        };
        let answers = py
            .detach(|| p.answer(question, context, window, stride, opts))
            .py()?;
        if answers.is_empty() {
            return Err(value_error("no answer span found in the context"));
        }
        let rows: Vec<serde_json::Value> = answers
            .iter()
            .map(|a| json!({"score": a.score, "start": a.start, "end": a.end, "answer": a.answer}))
            .collect();
        if top_k == 1 {
            json_to_py(py, &rows[0])
        } else {
            json_to_py(py, &serde_json::Value::Array(rows))
        }
    }

    fn __repr__(&self) -> String {
        let c = &self.p.model.config;
        format!(
            "Bert(num_hidden_layers={}, hidden_size={}, vocab_size={})",
            c.num_hidden_layers, c.hidden_size, c.vocab_size
        )
    }
}

/// A sequence classifier of either family (`BertForSequenceClassification`
/// or `GPT2ForSequenceClassification`, read from config.json), as
/// `lmkit classify` loads it.
#[pyclass(module = "lmkit", name = "Classifier")]
pub struct PyClassifier {
    c: Mutex<Classifier>,
}

#[pymethods]
impl PyClassifier {
    #[staticmethod]
    #[pyo3(signature = (name_or_path, *, dtype = "f32"))]
    fn from_pretrained(py: Python<'_>, name_or_path: &str, dtype: &str) -> PyResult<Self> {
        let d = self::dtype(dtype)?;
        let c = py.detach(|| Classifier::load(name_or_path, d)).py()?;
        Ok(PyClassifier { c: Mutex::new(c) })
    }

    /// As `Bert.classify`.
    #[pyo3(signature = (inputs, *, batch_size = 32, truncate = false))]
    fn classify(
        &self,
        py: Python<'_>,
        inputs: &Bound<'_, PyAny>,
        batch_size: usize,
        truncate: bool,
    ) -> PyResult<Py<PyAny>> {
        let (rows, one) = classify_inputs(inputs)?;
        let bs = batch_size.max(1);
        let c = &self.c;
        let ranked = py
            .detach(|| lock(c).classify_rows(&row_refs(&rows), bs, truncate))
            .py()?;
        classify_result(py, ranked, one)
    }
}
