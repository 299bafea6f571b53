//! The library's error type: every variant names the file, key or field at fault.

use std::path::PathBuf;

/// What a missing model's error adds: how this build can get one.
#[cfg(feature = "hub-download")]
const HUB_HINT: &str =
    " (a hub name is downloaded into the first of these caches unless HF_HUB_OFFLINE is set)";
#[cfg(not(feature = "hub-download"))]
const HUB_HINT: &str =
    ". Give a folder in HF layout (config.json, model.safetensors, tokenizer files), \
     or a hub name already in the HF cache; this build does not download (build lmkit with \
     the `hub-download` feature to fetch hub names)";

/// Everything that can go wrong in lmkit (loading, saving, running models).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An I/O failure on `path` (open, read, write, fsync, rename).
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A JSON file that does not parse; `line`/`col` are 1-based (0 if unknown).
    #[error("{}:{line}:{col}: invalid JSON: {msg}", path.display())]
    Json {
        path: PathBuf,
        line: usize,
        col: usize,
        msg: String,
    },
    /// A configuration value that is missing, mistyped, out of range or unsupported.
    #[error("{}config field `{field}`: {msg}", path.as_ref().map(|p| format!("{}: ", p.display())).unwrap_or_default())]
    Config {
        path: Option<PathBuf>,
        field: String,
        msg: String,
    },
    /// A parameter the model needs is absent from the checkpoint.
    #[error("{}: missing tensor `{key}`", file.display())]
    MissingTensor { file: PathBuf, key: String },
    /// The checkpoint holds a tensor the model has no place for.
    #[error("{}: unexpected tensor `{key}` (not a parameter of this model)", file.display())]
    UnexpectedTensor { file: PathBuf, key: String },
    /// A tensor whose shape differs from the one the configuration implies.
    #[error("{}: tensor `{key}` has shape {found:?}, expected {expected:?}", file.display())]
    ShapeMismatch {
        file: PathBuf,
        key: String,
        expected: Vec<usize>,
        found: Vec<usize>,
    },
    /// A tensor stored in a dtype we cannot convert to f32.
    #[error("{}: tensor `{key}` has unsupported dtype {dtype} (F32, F16, BF16, F64 are supported)", file.display())]
    Dtype {
        file: PathBuf,
        key: String,
        dtype: String,
    },
    /// A malformed safetensors file (bad header, truncated data, bad offsets).
    #[error("{}: invalid safetensors file: {msg}", path.display())]
    Safetensors { path: PathBuf, msg: String },
    /// A PyTorch checkpoint (`pytorch_model.bin`) that is malformed, hostile
    /// (a pickle naming a global other than tensor storage) or unsupported.
    #[error("{}: cannot read PyTorch checkpoint: {msg}", path.display())]
    TorchBin { path: PathBuf, msg: String },
    /// A model name that is neither a directory nor in the local HF hub cache.
    #[error("model `{name}` not found; looked in: {}{}", searched.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", "), HUB_HINT)]
    ModelNotFound {
        name: String,
        searched: Vec<PathBuf>,
    },
    /// A checkpoint of the other family (read from its `config.json`).
    #[error("{what} needs a {needed} checkpoint, but {} holds a {found} model ({architectures})", dir.display())]
    WrongFamily {
        dir: PathBuf,
        what: String,
        /// "GPT-2" or "BERT".
        needed: &'static str,
        found: &'static str,
        architectures: String,
    },
    /// A token id outside the model's vocabulary.
    #[error("token id {id} is out of range for a vocabulary of {vocab}")]
    TokenIdOutOfRange { id: u32, vocab: usize },
    /// An input longer than the model's context (position embeddings).
    #[error("sequence of {len} tokens exceeds the model's maximum of {max}")]
    ContextTooLong { len: usize, max: usize },
    /// Any other invalid argument or input, described in words.
    #[error("invalid input: {0}")]
    InvalidInput(String),
    /// A tokenizer error (loading vocabularies, encoding, decoding).
    #[error(transparent)]
    Tokenizer(#[from] lmkit_tokenizers::Error),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// Wraps an I/O error with the path it concerns.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }

    /// A [`Error::Config`] for `field`, without a file.
    pub fn config(field: impl Into<String>, msg: impl Into<String>) -> Self {
        Error::Config {
            path: None,
            field: field.into(),
            msg: msg.into(),
        }
    }

    /// Attaches `path` to a [`Error::Config`] that has none; other variants pass through.
    pub fn with_config_path(self, p: &std::path::Path) -> Self {
        match self {
            Error::Config {
                path: None,
                field,
                msg,
            } => Error::Config {
                path: Some(p.to_path_buf()),
                field,
                msg,
            },
            other => other,
        }
    }
}
