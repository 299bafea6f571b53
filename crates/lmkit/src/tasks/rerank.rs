//! Reranking with a cross-encoder: a BERT sequence classifier with one label
//! (`BertForSequenceClassification`, as sentence-transformers' `CrossEncoder`
//! saves it) scores each `(query, text)` pair; the texts come back best
//! first. Scores are the classifier's logit through a sigmoid (what
//! `CrossEncoder.predict` applies by default for one label, and TEI's
//! `/rerank`), or the raw logit with `raw_scores`.
//!
//! The inference is the classify task's ([`Classifier`], whose BERT variant
//! is a [`BertPipeline`]); `lmkit rerank`, `lmkit serve`'s `/rerank` and
//! Python's `lmkit.CrossEncoder` call these functions.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::models::auto_dtype::DtypeRequest;
use crate::models::bert::{BertPipeline, HeadKind};
use crate::models::gpt2::WeightDtype;

use super::classify::Classifier;

/// Options of a rerank, as TEI's `/rerank` request names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RerankOptions {
    /// The logits, not their sigmoid.
    #[serde(default)]
    pub raw_scores: bool,
    /// Cut pairs longer than the model's positions (longest first, as HF)
    /// instead of refusing them.
    #[serde(default)]
    pub truncate: bool,
}

/// A text's place in the input and its score.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Scored {
    pub index: usize,
    pub score: f32,
}

/// Loads a cross-encoder (a folder or a hub name) through the classify
/// task's loader, checked to be one.
pub fn load(model: &str, dtype: DtypeRequest<WeightDtype>) -> Result<BertPipeline> {
    match Classifier::load(model, dtype)? {
        Classifier::Bert(p) => {
            check(&p)?;
            Ok(*p)
        }
        Classifier::Gpt2(_) => Err(Error::InvalidInput(format!(
            "{model}: a cross-encoder is a BERT sequence classifier with one label; this is GPT-2"
        ))),
    }
}

/// `p` is a cross-encoder: a classifier head with one label.
pub fn check(p: &BertPipeline) -> Result<()> {
    p.model.require(HeadKind::Classifier)?;
    let n = p.model.config.num_labels();
    if n != 1 {
        return Err(Error::InvalidInput(format!(
            "reranking needs a cross-encoder (a classifier with one label); this classifier has \
             {n} labels"
        )));
    }
    Ok(())
}

/// The score of each pair, in input order (`CrossEncoder.predict`).
pub fn predict(
    p: &BertPipeline,
    pairs: &[(&str, &str)],
    opts: &RerankOptions,
    batch_size: usize,
) -> Result<Vec<f32>> {
    check(p)?;
    let logits = p.score_pairs(pairs, batch_size.max(1), opts.truncate)?;
    Ok(logits
        .iter()
        .map(|l| {
            if opts.raw_scores {
                l[0]
            } else {
                1.0 / (1.0 + (-l[0]).exp())
            }
        })
        .collect())
}

/// `texts` scored against `query`, best first (ties in input order).
pub fn rank(
    p: &BertPipeline,
    query: &str,
    texts: &[&str],
    opts: &RerankOptions,
    batch_size: usize,
) -> Result<Vec<Scored>> {
    let pairs: Vec<(&str, &str)> = texts.iter().map(|t| (query, *t)).collect();
    Ok(ranked(&predict(p, &pairs, opts, batch_size)?))
}

/// Scores in input order → best first, ties by index.
pub fn ranked(scores: &[f32]) -> Vec<Scored> {
    let mut out: Vec<Scored> = scores
        .iter()
        .enumerate()
        .map(|(index, &score)| Scored { index, score })
        .collect();
    out.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.index.cmp(&b.index)));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranked_is_best_first_ties_by_index() {
        let r = ranked(&[0.5, 0.9, 0.5, -1.0]);
        let idx: Vec<usize> = r.iter().map(|s| s.index).collect();
        assert_eq!(idx, vec![1, 0, 2, 3]);
    }
}
