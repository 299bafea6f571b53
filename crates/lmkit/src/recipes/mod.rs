//! Recipes: what to train, on top of the `train` layer — data + model +
//! loss for GPT-2 pretraining, BERT pretraining (MLM + NSP), and
//! fine-tuning generic over a task of the `tasks` layer (classification,
//! regression, token classification, span QA, multiple choice, causal LM).
//!
//! Errors name options by their field names in backticks (`` `seq_len` ``);
//! a front end maps them to its own spelling (the CLI: `--seq-len`).

pub mod bert_pretrain;
pub mod finetune;
pub mod gpt2_pretrain;
pub mod pretrain;
pub mod pretrain_options;
mod run_record;

use std::path::Path;

pub use crate::tasks::{check_vocab, invalid, RecipeError, Result};

/// A [`RecipeError::Io`] on `path`, for `map_err`.
pub(crate) fn io(path: &Path) -> impl FnOnce(std::io::Error) -> RecipeError + '_ {
    move |source| RecipeError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The run's `metrics.jsonl` in `out`, written by the root rank only: a
/// resumed run (`resume`) keeps the rows before `start_step`.
pub(crate) fn open_metrics(
    root: bool,
    out: &Path,
    resume: bool,
    start_step: u64,
) -> Result<Option<crate::train::MetricsWriter>> {
    if !root {
        return Ok(None);
    }
    let path = out.join("metrics.jsonl");
    crate::train::MetricsWriter::open(&path, resume.then_some(start_step))
        .map(Some)
        .map_err(io(&path))
}

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
