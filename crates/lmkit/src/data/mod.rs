//! Training data: text → binary token shards (once), memory-mapped shards,
//! deterministic shuffled batches whose position is part of the training state.
//!
//! Shape legend: B batch, T sequence length.

pub mod batch;
pub mod classify_data;
pub mod html;
pub mod mlm;
pub mod multiple_choice;
pub mod nsp;
pub mod overlap;
pub mod parquet;
pub mod shards;
pub mod source;
pub mod squad;
pub mod tagging;
pub mod token_files;

pub use batch::{BatchSampler, DataPosition, TokenBatch};
pub use shards::{
    check_shards, open_shards, prepare_shards, PrepareOptions, PreparedData, ShardMeta, TokenData,
    TokenShard, DEFAULT_TEXT_FIELD,
};

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum DataError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// Malformed input; `line` is 1-based (0 when not line-oriented).
    #[error("{}:{line}: {message}", path.display())]
    Parse {
        path: PathBuf,
        line: usize,
        message: String,
    },
    /// Data that cannot be trained on (empty, too short, ids out of range...).
    #[error("{0}")]
    Invalid(String),
}

pub type Result<T, E = DataError> = std::result::Result<T, E>;

pub(crate) fn io_err(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> DataError {
    let path = path.into();
    move |source| DataError::Io { path, source }
}
