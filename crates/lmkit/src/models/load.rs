//! Loading an inference model by name for a command: the folder or hub
//! name resolved, its family checked (a BERT folder given to `generate` is
//! named as such, before any tokenizer is read), the weights in the asked
//! format. The shells (CLI, Python) call these, so both load alike. (A
//! sequence classifier of either family is the classify task's:
//! `tasks::classify::Classifier`.)

use std::path::Path;

use crate::checkpoint::{read_config, resolve_model_dir};
use crate::error::{Error, Result};
use crate::models::auto_dtype::DtypeRequest;
use crate::models::bert::BertPipeline;
use crate::models::gpt2::{Gpt2Engine, WeightDtype};
use crate::spec::Family;
use lmkit_tokenizers::BpeTokenizer;

/// A GPT-2 model for `command` (`generate`, `perplexity`...): `model` is a
/// folder or a hub name, the tokenizer comes from `tokenizer` or the model's
/// folder, and the weights are held as `dtype` (`auto`: the fastest on
/// this CPU, [`crate::models::auto_dtype`]).
pub fn load_gpt2(
    command: &str,
    model: &str,
    tokenizer: Option<&Path>,
    dtype: DtypeRequest<WeightDtype>,
) -> Result<(BpeTokenizer, Gpt2Engine)> {
    let dir = resolve_model_dir(model)?;
    let config = read_config(&dir, Some((Family::Gpt2, command)))?;
    let tok_dir = tokenizer.unwrap_or(&dir);
    let tokenizer = BpeTokenizer::from_dir(tok_dir).map_err(|e| {
        Error::InvalidInput(format!(
            "loading the tokenizer from {}: {e}",
            tok_dir.display()
        ))
    })?;
    let engine = Gpt2Engine::load(&dir, dtype.resolve_for(&config))?;
    Ok((tokenizer, engine))
}

/// A BERT pipeline for `command` (`embed`, `fill-mask`, `classify`, `qa`):
/// f32 weights, or the encoder's matmuls in bf16 or int8 (`auto`: the
/// fastest on this CPU).
pub fn load_bert(
    command: &str,
    model: &str,
    dtype: DtypeRequest<WeightDtype>,
) -> Result<BertPipeline> {
    let dir = resolve_model_dir(model)?;
    let config = read_config(&dir, Some((Family::Bert, command)))?;
    let mut p = BertPipeline::from_dir(&dir)?;
    p.model.set_dtype(dtype.resolve_for(&config))?;
    Ok(p)
}
