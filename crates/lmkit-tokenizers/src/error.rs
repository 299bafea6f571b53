use std::path::PathBuf;

/// Everything that can go wrong when loading, training or using a tokenizer.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A malformed vocabulary, merges or tokenizer.json file; `line` is 1-based
    /// (0 when the format has no lines, e.g. a JSON syntax error without position).
    #[error("{}:{line}: {message}", path.display())]
    Parse {
        path: PathBuf,
        line: usize,
        message: String,
    },
    /// A tokenizer file that parses but describes something we do not support.
    #[error("{}: unsupported tokenizer: {message}", path.display())]
    Unsupported { path: PathBuf, message: String },
    /// A token id outside the vocabulary.
    #[error("token id {id} is out of range for a vocabulary of {vocab_size}")]
    IdOutOfRange { id: u32, vocab_size: usize },
    /// Input the tokenizer cannot take, e.g. invalid UTF-8 for WordPiece.
    #[error("invalid input: {0}")]
    InvalidInput(String),
    /// Bad training or encoding options.
    #[error("invalid option: {0}")]
    InvalidOption(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
