//! `lmkit.CrossEncoder`: a cross-encoder (a BERT sequence classifier with one
//! label) with sentence-transformers' `CrossEncoder.predict` and `.rank`,
//! over `lmkit::tasks::rerank` as `lmkit rerank` and `/rerank` call it.

use lmkit::models::bert::BertPipeline;
use lmkit::tasks::rerank::{self, RerankOptions};
use numpy::PyArray1;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::errors::{value_error, PyResultExt};

/// The options of a call, `batch_size` checked.
fn options(batch_size: usize, raw_scores: bool, truncate: bool) -> PyResult<RerankOptions> {
    if batch_size == 0 {
        return Err(value_error("`batch_size` must be at least 1"));
    }
    Ok(RerankOptions {
        raw_scores,
        truncate,
    })
}

/// A cross-encoder: scores of `(query, text)` pairs.
#[pyclass(module = "lmkit", name = "CrossEncoder")]
pub struct PyCrossEncoder {
    p: BertPipeline,
    /// The activation it was saved with: `raw_scores`' default.
    activation: rerank::Activation,
}

impl PyCrossEncoder {
    /// `raw_scores` as given, else as `CrossEncoder.predict` applies the
    /// saved activation (Identity: the logits).
    fn raw(&self, raw_scores: Option<bool>) -> bool {
        raw_scores.unwrap_or(self.activation == rerank::Activation::Identity)
    }
}

#[pymethods]
impl PyCrossEncoder {
    /// Loads a cross-encoder folder (as `CrossEncoder.save` writes it, or a
    /// `BertForSequenceClassification` with one label) or a hub name in the
    /// local HF cache; `dtype` as `Bert.from_pretrained`.
    #[staticmethod]
    #[pyo3(signature = (name_or_path, *, dtype = "f32"))]
    fn from_pretrained(py: Python<'_>, name_or_path: &str, dtype: &str) -> PyResult<Self> {
        let d = dtype.parse().py()?;
        let (p, activation) = py
            .detach(|| {
                let p = rerank::load(name_or_path, d)?;
                Ok::<_, lmkit::Error>((p, rerank::saved_activation(name_or_path)?))
            })
            .py()?;
        Ok(PyCrossEncoder { p, activation })
    }

    /// The score of each `(query, text)` pair, a float32 array in input
    /// order: the logit through the activation the model was saved with
    /// (`CrossEncoder.predict`'s default: sigmoid unless saved as
    /// Identity), the sigmoid with `raw_scores=False`, the logit with
    /// `raw_scores=True`. Pairs longer than the model's positions are an
    /// error unless `truncate`.
    #[pyo3(signature = (pairs, *, batch_size = 32, raw_scores = None, truncate = false))]
    fn predict<'py>(
        &self,
        py: Python<'py>,
        pairs: Vec<(String, String)>,
        batch_size: usize,
        raw_scores: Option<bool>,
        truncate: bool,
    ) -> PyResult<Bound<'py, PyArray1<f32>>> {
        let opts = options(batch_size, self.raw(raw_scores), truncate)?;
        let p = &self.p;
        let scores = py
            .detach(|| {
                let refs: Vec<(&str, &str)> = pairs
                    .iter()
                    .map(|(a, b)| (a.as_str(), b.as_str()))
                    .collect();
                rerank::predict(p, &refs, &opts, batch_size)
            })
            .py()?;
        Ok(PyArray1::from_vec(py, scores))
    }

    /// `documents` scored against `query`, best first, as
    /// `CrossEncoder.rank`: a list of `{"corpus_id", "score"}` (and
    /// `"text"` with `return_documents`), the first `top_k` if given.
    #[pyo3(signature = (query, documents, *, top_k = None, return_documents = false, batch_size = 32, raw_scores = None, truncate = false))]
    #[allow(clippy::too_many_arguments)]
    fn rank<'py>(
        &self,
        py: Python<'py>,
        query: &str,
        documents: Vec<String>,
        top_k: Option<usize>,
        return_documents: bool,
        batch_size: usize,
        raw_scores: Option<bool>,
        truncate: bool,
    ) -> PyResult<Vec<Bound<'py, PyDict>>> {
        let opts = options(batch_size, self.raw(raw_scores), truncate)?;
        let p = &self.p;
        let ranked = py
            .detach(|| {
                let refs: Vec<&str> = documents.iter().map(String::as_str).collect();
                rerank::rank(p, query, &refs, &opts, batch_size)
            })
            .py()?;
        let keep = top_k.unwrap_or(ranked.len());
        ranked
            .iter()
            .take(keep)
            .map(|s| {
                let d = PyDict::new(py);
                d.set_item("corpus_id", s.index)?;
                d.set_item("score", s.score)?;
                if return_documents {
                    d.set_item("text", &documents[s.index])?;
                }
                Ok(d)
            })
            .collect()
    }
}
