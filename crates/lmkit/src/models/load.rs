//! Loading an inference model by name for a command: the folder or hub
//! name resolved, its family checked (a BERT folder given to `generate` is
//! named as such, before any tokenizer is read), the weights in the asked
//! format. The shells (CLI, Python) call these, so both load alike.

use std::path::Path;

use crate::checkpoint::{read_config, resolve_model_dir};
use crate::error::{Error, Result};
use crate::models::bert::{BertPipeline, LabelScore};
use crate::models::gpt2::{Gpt2Classifier, Gpt2Engine, WeightDtype};
use crate::spec::{Family, ModelConfig};
use lmkit_tokenizers::BpeTokenizer;

/// A GPT-2 model for `command` (`generate`, `perplexity`...): `model` is a
/// folder or a hub name, the tokenizer comes from `tokenizer` or the model's
/// folder, and the weights are held as `dtype`.
pub fn load_gpt2(
    command: &str,
    model: &str,
    tokenizer: Option<&Path>,
    dtype: WeightDtype,
) -> Result<(BpeTokenizer, Gpt2Engine)> {
    let dir = resolve_model_dir(model)?;
    read_config(&dir, Some((Family::Gpt2, command)))?;
    let tok_dir = tokenizer.unwrap_or(&dir);
    let tokenizer = BpeTokenizer::from_dir(tok_dir).map_err(|e| {
        Error::InvalidInput(format!(
            "loading the tokenizer from {}: {e}",
            tok_dir.display()
        ))
    })?;
    let engine = Gpt2Engine::load(&dir, dtype)?;
    Ok((tokenizer, engine))
}

/// A BERT pipeline for `command` (`embed`, `fill-mask`, `classify`, `qa`):
/// f32 weights, or the encoder's matmuls in bf16 or int8.
pub fn load_bert(command: &str, model: &str, dtype: WeightDtype) -> Result<BertPipeline> {
    let dir = resolve_model_dir(model)?;
    read_config(&dir, Some((Family::Bert, command)))?;
    let mut p = BertPipeline::from_dir(&dir)?;
    p.model.set_dtype(dtype)?;
    Ok(p)
}

/// A sequence classifier of either family (the family read from config.json).
pub enum Classifier {
    Bert(Box<BertPipeline>),
    Gpt2(Box<Gpt2Classifier>),
}

/// All labels with scores, best first, for each input.
pub type Ranked = Vec<Vec<LabelScore>>;

impl Classifier {
    /// Loads `model` (a folder or a hub name); GPT-2 classifiers run f32.
    pub fn load(model: &str, dtype: WeightDtype) -> Result<Self> {
        let dir = resolve_model_dir(model)?;
        match read_config(&dir, None)?.family() {
            Family::Bert => Ok(Classifier::Bert(Box::new(load_bert(
                "classify", model, dtype,
            )?))),
            Family::Gpt2 => {
                if dtype != WeightDtype::F32 {
                    return Err(Error::InvalidInput(format!(
                        "`dtype` {dtype}: GPT-2 classifiers run f32"
                    )));
                }
                Ok(Classifier::Gpt2(Box::new(Gpt2Classifier::from_dir(&dir)?)))
            }
        }
    }

    /// Labels with scores for each text (HF's text-classification pipeline).
    pub fn classify(
        &mut self,
        texts: &[&str],
        batch_size: usize,
        truncate: bool,
    ) -> Result<Ranked> {
        match self {
            Classifier::Bert(p) => p.classify(texts, batch_size, truncate),
            Classifier::Gpt2(c) => c.classify(texts, batch_size, truncate),
        }
    }

    /// [`Self::classify`] for text pairs.
    pub fn classify_pairs(
        &mut self,
        pairs: &[(&str, &str)],
        batch_size: usize,
        truncate: bool,
    ) -> Result<Ranked> {
        match self {
            Classifier::Bert(p) => p.classify_pairs(pairs, batch_size, truncate),
            Classifier::Gpt2(c) => c.classify_pairs(pairs, batch_size, truncate),
        }
    }

    /// Rows of texts and pairs (`(text, Some(pair))`) classified in input
    /// order: the texts and the pairs each in their own batches.
    pub fn classify_rows(
        &mut self,
        rows: &[(&str, Option<&str>)],
        batch_size: usize,
        truncate: bool,
    ) -> Result<Ranked> {
        match self {
            Classifier::Bert(p) => classify_rows_with(
                rows,
                |t| p.classify(t, batch_size, truncate),
                |ab| p.classify_pairs(ab, batch_size, truncate),
            ),
            Classifier::Gpt2(c) => {
                let c = std::cell::RefCell::new(c);
                classify_rows_with(
                    rows,
                    |t| c.borrow_mut().classify(t, batch_size, truncate),
                    |ab| c.borrow_mut().classify_pairs(ab, batch_size, truncate),
                )
            }
        }
    }
}

/// Classifies `rows` in input order with `texts` for the single texts and
/// `pairs` for the pairs.
pub fn classify_rows_with(
    rows: &[(&str, Option<&str>)],
    texts: impl FnOnce(&[&str]) -> Result<Ranked>,
    pairs: impl FnOnce(&[(&str, &str)]) -> Result<Ranked>,
) -> Result<Ranked> {
    let (paired, single): (Vec<usize>, Vec<usize>) =
        (0..rows.len()).partition(|&i| rows[i].1.is_some());
    let mut out = vec![Vec::new(); rows.len()];
    if !single.is_empty() {
        let t: Vec<&str> = single.iter().map(|&i| rows[i].0).collect();
        for (&i, r) in single.iter().zip(texts(&t)?) {
            out[i] = r;
        }
    }
    if !paired.is_empty() {
        let ab: Vec<(&str, &str)> = paired
            .iter()
            .map(|&i| (rows[i].0, rows[i].1.unwrap_or_default()))
            .collect();
        for (&i, r) in paired.iter().zip(pairs(&ab)?) {
            out[i] = r;
        }
    }
    Ok(out)
}
