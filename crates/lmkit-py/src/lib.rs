//! `lmkit` for Python: a thin shell over the library, as the CLI is. Each
//! class or function calls the library entry point the CLI calls for the
//! same thing (`lmkit::models::load`, the pipelines, `recipes::pretrain`,
//! `recipes::finetune::finetune`, `tasks::evaluate`); heavy work runs with the GIL released.

mod convert;
mod errors;
mod models;
mod rerank;
mod tokenizer;
mod train;

use pyo3::prelude::*;

/// The compiled part of the `lmkit` package (`python/lmkit/__init__.py`
/// re-exports it with the pure-Python helpers).
#[pymodule]
fn _lmkit(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<tokenizer::PyTokenizer>()?;
    m.add_class::<tokenizer::PyEncoding>()?;
    m.add_class::<models::PyGpt2>()?;
    m.add_class::<models::GenerationStream>()?;
    m.add_class::<models::PyBert>()?;
    m.add_class::<models::PyClassifier>()?;
    m.add_class::<rerank::PyCrossEncoder>()?;
    m.add_function(wrap_pyfunction!(train::_pretrain, m)?)?;
    m.add_function(wrap_pyfunction!(train::_finetune, m)?)?;
    m.add_function(wrap_pyfunction!(train::_evaluate, m)?)?;
    m.add_function(wrap_pyfunction!(train::keep_freed_memory, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
