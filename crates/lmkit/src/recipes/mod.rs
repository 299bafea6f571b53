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

use std::path::{Path, PathBuf};

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
    /// The output folder holds files and replacing them was not asked for.
    #[error("{}: the output folder is not empty; refusing to overwrite it", path.display())]
    OutputNotEmpty { path: PathBuf },
}

pub type Result<T, E = RecipeError> = std::result::Result<T, E>;

/// Checks an output folder before anything is written: never the input
/// model's own folder, and absent or empty unless `overwrite`.
pub(crate) fn check_output(input: &Path, output: &Path, overwrite: bool) -> Result<()> {
    if let (Ok(a), Ok(b)) = (input.canonicalize(), output.canonicalize()) {
        if a == b {
            return Err(invalid(format!(
                "{}: the output folder is the input model's folder; write elsewhere",
                output.display()
            )));
        }
    }
    match std::fs::read_dir(output) {
        Ok(mut entries) => match entries.next() {
            Some(_) if !overwrite => Err(RecipeError::OutputNotEmpty {
                path: output.to_path_buf(),
            }),
            _ => Ok(()),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(RecipeError::Io {
            path: output.to_path_buf(),
            source,
        }),
    }
}

/// The tokenizer's ids fit the model's embeddings: no more tokens than its
/// `vocab_size` (a larger model vocabulary is fine: GPT-2 pads to 50304).
pub(crate) fn check_vocab(tokens: usize, vocab_size: usize) -> Result<()> {
    if tokens > vocab_size {
        return Err(invalid(format!(
            "the tokenizer has {tokens} tokens but the model's vocab_size is {vocab_size}: they do not belong together"
        )));
    }
    Ok(())
}

/// A [`RecipeError::Invalid`].
pub(crate) fn invalid(msg: impl Into<String>) -> RecipeError {
    RecipeError::Invalid(msg.into())
}

/// `keep` checkpoints: at least the newest one (0 would delete the
/// checkpoint a resume needs).
pub(crate) fn check_keep(keep: usize) -> Result<usize> {
    if keep == 0 {
        return Err(invalid(
            "`keep` must be at least 1: the newest checkpoint is always kept",
        ));
    }
    Ok(keep)
}
