//! Python lists of token ids built from one int object per vocabulary id.
//!
//! Making a fresh Python int for each id of a result (CPython keeps only
//! -5..=256) took as long as encoding the text: 4.9 ms for the 266k ids of
//! 1 MB of English (r50k_base, one Zen 5 core) against ~5 ms of encoding.
//! A list that shares the tokenizer's ints costs a reference count each.

use std::sync::OnceLock;

use pyo3::prelude::*;
use pyo3::types::{PyInt, PyList};

/// The ints `0..vocab` of a tokenizer, made on the first list (~4 ms and
/// ~8 MB for o200k_base's 200k ids).
#[derive(Default)]
pub(super) struct IdObjects(OnceLock<Vec<Py<PyInt>>>);

impl IdObjects {
    /// `ids` as a Python list; ids past `vocab` (none in a checked
    /// tokenizer's output) get ints of their own.
    pub(super) fn list<'py>(
        &self,
        py: Python<'py>,
        vocab: usize,
        ids: &[u32],
    ) -> PyResult<Bound<'py, PyList>> {
        // Made with the GIL held throughout, so no other thread can be
        // waiting on the cell meanwhile.
        let objs = self.0.get_or_init(|| {
            (0..vocab.min(u32::MAX as usize) as u32)
                .map(|i| {
                    let Ok(int) = i.into_pyobject(py);
                    int.unbind()
                })
                .collect()
        });
        let items = ids.iter().map(|&id| match objs.get(id as usize) {
            Some(int) => int.bind(py).clone(),
            None => {
                let Ok(int) = id.into_pyobject(py);
                int
            }
        });
        PyList::new(py, items)
    }

    /// [`Self::list`] of each id sequence, as a list of lists.
    pub(super) fn lists<'py>(
        &self,
        py: Python<'py>,
        vocab: usize,
        seqs: &[Vec<u32>],
    ) -> PyResult<Bound<'py, PyList>> {
        let lists = seqs
            .iter()
            .map(|ids| self.list(py, vocab, ids))
            .collect::<PyResult<Vec<_>>>()?;
        PyList::new(py, lists)
    }
}
