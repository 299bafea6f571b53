//! Recipes: what to train, on top of the `train` layer — data + model +
//! loss for GPT-2 pretraining, BERT pretraining (MLM + NSP) and
//! fine-tuning (classification, span QA, causal LM).
//!
//! Errors name options by their field names in backticks (`` `seq_len` ``);
//! a front end maps them to its own spelling (the CLI: `--seq-len`).

pub mod bert_pretrain;
pub mod finetune;
pub mod gpt2_pretrain;
pub mod pretrain;
pub mod pretrain_options;

use std::path::PathBuf;

use crate::data::DataError;
use crate::train::{StateError, StepError};

/// Everything that can stop a recipe (pretraining or fine-tuning).
#[derive(Debug, thiserror::Error)]
pub enum RecipeError {
    #[error(transparent)]
    Model(#[from] crate::Error),
    #[error(transparent)]
    Data(#[from] DataError),
    #[error(transparent)]
    Tokenizer(#[from] lmkit_tokenizers::Error),
    #[error(transparent)]
    Step(#[from] StepError),
    #[error(transparent)]
    State(#[from] StateError),
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{0}")]
    Invalid(String),
}

pub type Result<T, E = RecipeError> = std::result::Result<T, E>;

/// A [`RecipeError::Invalid`].
pub(crate) fn invalid(msg: impl Into<String>) -> RecipeError {
    RecipeError::Invalid(msg.into())
}
