//! Reranking with a cross-encoder: a BERT sequence classifier with one label
//! (`BertForSequenceClassification`, as sentence-transformers' `CrossEncoder`
//! saves it) scores each `(query, text)` pair; the texts come back best
//! first. Scores are the classifier's logit through a sigmoid (what TEI's
//! `/rerank` and `CrossEncoder.predict` for one label apply by default), or
//! the raw logit with `raw_scores`. `lmkit rerank` and Python's
//! `CrossEncoder` default to the activation the model was saved with
//! ([`saved_activation`]), as `CrossEncoder.predict` does.
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

/// What `CrossEncoder.predict` applies to the logit unless told otherwise:
/// the `activation_fn` the cross-encoder was saved with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activation {
    /// The default for one label: scores in (0, 1).
    Sigmoid,
    /// The raw logit (ms-marco cross-encoders are saved so).
    Identity,
}

/// The activation `model` (a folder or hub name) was saved with:
/// `activation_fn` of `config_sentence_transformers.json` (sentence-
/// transformers 4 and later) or of `config.json`'s `sentence_transformers`
/// (earlier `CrossEncoder.save`); sigmoid when neither names one. Any other
/// activation is an error naming it (applying sigmoid instead would give
/// other scores than `CrossEncoder.predict`).
pub fn saved_activation(model: &str) -> Result<Activation> {
    let dir = crate::checkpoint::resolve_model_dir(model)?;
    let read = |name: &str| -> Result<Option<serde_json::Value>> {
        let path = dir.join(name);
        if !path.exists() {
            return Ok(None);
        }
        crate::spec::config::read_json_object(&path).map(|m| Some(serde_json::Value::Object(m)))
    };
    let st = read("config_sentence_transformers.json")?;
    let hf = read("config.json")?;
    let named = st
        .as_ref()
        .and_then(|v| v.get("activation_fn"))
        .or_else(|| {
            hf.as_ref()?
                .get("sentence_transformers")?
                .get("activation_fn")
        });
    let Some(name) = named.and_then(|v| v.as_str()) else {
        return Ok(Activation::Sigmoid);
    };
    match name.rsplit('.').next() {
        Some("Sigmoid") => Ok(Activation::Sigmoid),
        Some("Identity") => Ok(Activation::Identity),
        _ => Err(Error::InvalidInput(format!(
            "{model}: activation_fn {name} is not supported (Sigmoid and Identity are)"
        ))),
    }
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

    /// The saved activation from either file, sigmoid by default, an
    /// unknown one refused by name.
    #[test]
    fn saved_activation_reads_either_config() {
        let tmp = std::env::temp_dir().join(format!("lmkit-activation-{}", std::process::id()));
        std::fs::create_dir_all(&tmp).unwrap();
        let dir = tmp.to_str().unwrap();
        let st = tmp.join("config_sentence_transformers.json");
        let hf = tmp.join("config.json");
        std::fs::write(&hf, r#"{"model_type": "bert"}"#).unwrap();
        assert_eq!(saved_activation(dir).unwrap(), Activation::Sigmoid);
        let nested =
            r#"{"sentence_transformers": {"activation_fn": "torch.nn.modules.linear.Identity"}}"#;
        std::fs::write(&hf, nested).unwrap();
        assert_eq!(saved_activation(dir).unwrap(), Activation::Identity);
        let top = r#"{"activation_fn": "torch.nn.modules.activation.Sigmoid"}"#;
        std::fs::write(&st, top).unwrap();
        assert_eq!(saved_activation(dir).unwrap(), Activation::Sigmoid);
        std::fs::write(
            &st,
            r#"{"activation_fn": "torch.nn.modules.activation.Tanh"}"#,
        )
        .unwrap();
        let e = saved_activation(dir).unwrap_err().to_string();
        assert!(e.contains("Tanh"), "{e}");
        std::fs::remove_dir_all(&tmp).unwrap();
    }

    #[test]
    fn ranked_is_best_first_ties_by_index() {
        let r = ranked(&[0.5, 0.9, 0.5, -1.0]);
        let idx: Vec<usize> = r.iter().map(|s| s.index).collect();
        assert_eq!(idx, vec![1, 0, 2, 3]);
    }
}
