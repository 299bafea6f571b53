//! Library errors as Python exceptions, with the library's message:
//! `FileNotFoundError` for a missing file or model, `ValueError` for input
//! or options the library refuses, `RuntimeError` for the rest (I/O,
//! a diverged run).

use std::error::Error as StdError;

use pyo3::exceptions::{PyFileNotFoundError, PyRuntimeError, PyValueError};
use pyo3::PyErr;

/// The message of `e` followed by each cause whose text it does not
/// already hold (library errors often carry their source's text).
fn message(e: &(dyn StdError + 'static)) -> String {
    let mut msg = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !msg.contains(&text) {
            msg.push_str(": ");
            msg.push_str(&text);
        }
        source = s.source();
    }
    msg
}

/// Whether anything in `e`'s chain is an I/O error "not found".
fn not_found(e: &(dyn StdError + 'static)) -> bool {
    let mut cur: Option<&(dyn StdError + 'static)> = Some(e);
    while let Some(x) = cur {
        if let Some(io) = x.downcast_ref::<std::io::Error>() {
            if io.kind() == std::io::ErrorKind::NotFound {
                return true;
            }
        }
        cur = x.source();
    }
    false
}

#[derive(Clone, Copy)]
pub enum Kind {
    Value,
    Runtime,
}

/// `e` as a Python exception of `kind`, or `FileNotFoundError` when its
/// chain holds a missing file.
pub fn raise(e: &(dyn StdError + 'static), kind: Kind) -> PyErr {
    let msg = message(e);
    if not_found(e) {
        return PyFileNotFoundError::new_err(msg);
    }
    match kind {
        Kind::Value => PyValueError::new_err(msg),
        Kind::Runtime => PyRuntimeError::new_err(msg),
    }
}

/// Conversion of each library error type.
pub trait IntoPyErr {
    fn py(self) -> PyErr;
}

impl IntoPyErr for lmkit_tokenizers::Error {
    fn py(self) -> PyErr {
        let kind = match &self {
            lmkit_tokenizers::Error::Io { .. } => Kind::Runtime,
            _ => Kind::Value,
        };
        raise(&self, kind)
    }
}

impl IntoPyErr for lmkit::Error {
    fn py(self) -> PyErr {
        match self {
            lmkit::Error::ModelNotFound { .. } => PyFileNotFoundError::new_err(self.to_string()),
            lmkit::Error::Tokenizer(e) => e.py(),
            lmkit::Error::Io { .. } => raise(&self, Kind::Runtime),
            _ => raise(&self, Kind::Value),
        }
    }
}

impl IntoPyErr for lmkit::recipes::RecipeError {
    fn py(self) -> PyErr {
        use lmkit::recipes::RecipeError as E;
        match self {
            E::Model(e) => e.py(),
            E::Tokenizer(e) => e.py(),
            E::Step(_) | E::State(_) | E::Io { .. } => raise(&self, Kind::Runtime),
            _ => raise(&self, Kind::Value),
        }
    }
}

impl IntoPyErr for lmkit::data::DataError {
    fn py(self) -> PyErr {
        raise(&self, Kind::Value)
    }
}

/// `Result` of a library call → `PyResult`.
pub trait PyResultExt<T> {
    fn py(self) -> pyo3::PyResult<T>;
}

impl<T, E: IntoPyErr> PyResultExt<T> for Result<T, E> {
    fn py(self) -> pyo3::PyResult<T> {
        self.map_err(IntoPyErr::py)
    }
}

/// A `ValueError` with `msg`.
pub fn value_error(msg: impl Into<String>) -> PyErr {
    PyValueError::new_err(msg.into())
}
