//! The error of fine-tuning and of the recipes above it.

use std::path::PathBuf;

use crate::data::DataError;
use crate::train::{StateError, StepError};

/// Everything that can stop a task or a recipe (pretraining or fine-tuning).
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
    /// The output folder holds files and replacing them was not asked for.
    #[error("{}: the output folder is not empty; refusing to overwrite it", path.display())]
    OutputNotEmpty { path: PathBuf },
}

pub type Result<T, E = RecipeError> = std::result::Result<T, E>;

impl From<crate::eval::benchmark::EvalError> for RecipeError {
    fn from(e: crate::eval::benchmark::EvalError) -> Self {
        use crate::eval::benchmark::EvalError;
        match e {
            EvalError::Model(e) => RecipeError::Model(e),
            EvalError::Data(e) => RecipeError::Data(e),
            EvalError::Tokenizer(e) => RecipeError::Tokenizer(e),
        }
    }
}

/// A [`RecipeError::Invalid`].
pub fn invalid(msg: impl Into<String>) -> RecipeError {
    RecipeError::Invalid(msg.into())
}

/// The tokenizer's ids fit the model's embeddings: no more tokens than its
/// `vocab_size` (a larger model vocabulary is fine: GPT-2 pads to 50304).
pub fn check_vocab(tokens: usize, vocab_size: usize) -> Result<()> {
    if tokens > vocab_size {
        return Err(invalid(format!(
            "the tokenizer has {tokens} tokens but the model's vocab_size is {vocab_size}: they do not belong together"
        )));
    }
    Ok(())
}
