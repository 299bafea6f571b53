//! Python lists of token ids built from one int object per vocabulary id,
//! and the UTF-8 of the texts they come from, borrowed from the `str`.
//!
//! Making a fresh Python int for each id of a result (CPython keeps only
//! -5..=256) took as long as encoding the text: 4.9 ms for the 266k ids of
//! 1 MB of English (r50k_base, one Zen 5 core) against ~5 ms of encoding.
//! A list that shares the tokenizer's ints costs a reference count each.

use std::os::raw::c_char;
use std::sync::OnceLock;

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyInt, PyList, PyString};

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
        let item = |id: u32| match objs.get(id as usize) {
            Some(int) => {
                let p = int.as_ptr();
                // SAFETY: a live int of the tokenizer's, with the GIL held.
                unsafe { incref(p) };
                p
            }
            None => {
                let Ok(int) = id.into_pyobject(py);
                int.into_ptr()
            }
        };
        let n = ffi::Py_ssize_t::try_from(ids.len())
            .map_err(|_| pyo3::exceptions::PyOverflowError::new_err("too many ids"))?;
        // SAFETY: `PyList_New` returns a new list of `n` empty slots (or
        // NULL with an exception set, which `from_owned_ptr_or_err` turns
        // into the error). Each slot is set once, at an index below `n`,
        // to a new (strong) reference the list takes over.
        unsafe {
            let list = Bound::from_owned_ptr_or_err(py, ffi::PyList_New(n))?;
            let Some((&first, rest)) = ids.split_first() else {
                return Ok(list.cast_into_unchecked());
            };
            let first = item(first);
            // Cannot fail: a list, an index in range.
            ffi::PyList_SetItem(list.as_ptr(), 0, first);
            match list_items(list.as_ptr(), n, first) {
                Some(slots) => {
                    for (i, &id) in rest.iter().enumerate() {
                        if let Some(ahead) = rest
                            .get(i + PREFETCH_IDS)
                            .and_then(|&a| objs.get(a as usize))
                        {
                            prefetch(ahead.as_ptr());
                        }
                        slots.add(i + 1).write(item(id));
                    }
                }
                None => {
                    for (i, &id) in rest.iter().enumerate() {
                        ffi::PyList_SetItem(list.as_ptr(), i as ffi::Py_ssize_t + 1, item(id));
                    }
                }
            }
            Ok(list.cast_into_unchecked())
        }
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

/// CPython's list object (`Include/cpython/listobject.h`, the same from
/// 2.x through 3.14 on the builds the stable ABI serves).
#[repr(C)]
struct ListObject {
    ob_base: ffi::PyVarObject,
    ob_item: *mut *mut ffi::PyObject,
    allocated: ffi::Py_ssize_t,
}

/// The item slots of `list`, a new list of `n` slots whose slot 0 was just
/// set to `first`, where its layout is [`ListObject`]'s: the list is then
/// filled by plain stores. The stable ABI has only `PyList_SetItem`, a call
/// per id that also reads each empty slot before writing it, so the fresh
/// pages of a long list fault twice (a read maps the zero page, the write
/// copies it): ~7% of an r50k_base `encode_ordinary` through Python. `None`
/// (fill by `PyList_SetItem`) where the object does not read back as such a
/// list.
///
/// # Safety
/// `list` is a live list made by `PyList_New(n)`, `n >= 1`, and the GIL is
/// held.
unsafe fn list_items(
    list: *mut ffi::PyObject,
    n: ffi::Py_ssize_t,
    first: *mut ffi::PyObject,
) -> Option<*mut *mut ffi::PyObject> {
    // SAFETY: every CPython list object is at least a `ListObject` (the GIL
    // build's layout; a different one fails the checks below before any
    // slot is written), and a list of `n >= 1` slots has `ob_item[0]`.
    unsafe {
        let l = list.cast::<ListObject>();
        let items = (*l).ob_item;
        let ours = (*l).ob_base.ob_size == n
            && (*l).allocated == n
            && !items.is_null()
            && ffi::PyList_GetItem(list, 0) == first
            && *items == first;
        ours.then_some(items)
    }
}

/// Ids ahead whose int object is prefetched while a list is built: the
/// increments miss the cache otherwise (o200k_base's 200k ints are ~6 MB).
const PREFETCH_IDS: usize = 16;

/// A prefetch of the cache line at `p` (a hint: no effect on memory).
#[inline(always)]
fn prefetch(p: *mut ffi::PyObject) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: _mm_prefetch has no memory effects and does not fault.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast::<i8>())
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// `Py_INCREF` as CPython 3.9's limited-API header has it (this wheel's
/// ABI, abi3-py39): the count in the object, without pyo3's call into
/// `Py_IncRef` (a tenth of an r50k_base `encode_ordinary` through Python:
/// one call per id). Later CPythons keep running such extensions: the
/// objects they make immortal (small ints among these) tolerate the plain
/// increment (PEP 683), and the free-threaded build has no stable ABI.
///
/// # Safety
/// `p` is a live object and the GIL is held.
#[inline(always)]
unsafe fn incref(p: *mut ffi::PyObject) {
    // SAFETY: as the caller promises; `ob_refcnt` is the stable ABI's
    // first field of every object.
    unsafe { (*p).ob_refcnt += 1 }
}

extern "C" {
    /// Exported by every CPython 3 (in the stable ABI from 3.10; this
    /// wheel's abi3-py39 build leaves it out of pyo3's bindings).
    fn PyUnicode_AsUTF8AndSize(
        unicode: *mut ffi::PyObject,
        size: *mut ffi::Py_ssize_t,
    ) -> *const c_char;
}

/// The UTF-8 of `text`, borrowed from the `str` (which keeps it: ASCII
/// text's own bytes, others' encoded once and cached, as tiktoken's
/// `&str` arguments are). pyo3's `String` on the abi3-py39 build encoded
/// into a new `bytes` and copied that (two passes over the text and their
/// page faults: ~6% of an o200k_base `encode_ordinary`, with the
/// `_utf8_safe` check before it). Lone surrogates are a `UnicodeEncodeError`,
/// as they were.
pub(super) fn utf8<'a>(text: &'a Bound<'_, PyString>) -> PyResult<&'a str> {
    let mut size: ffi::Py_ssize_t = 0;
    // SAFETY: `text` is a live `str`; the call returns its UTF-8 buffer
    // (owned by the `str`, valid while it lives: `'a`) and its length, or
    // NULL with an exception set.
    let data = unsafe { PyUnicode_AsUTF8AndSize(text.as_ptr(), &mut size) };
    if data.is_null() {
        return Err(PyErr::fetch(text.py()));
    }
    let len = usize::try_from(size).expect("a str's UTF-8 length is not negative");
    // SAFETY: `data` holds `len` bytes, which CPython wrote as valid UTF-8
    // (a text it cannot encode so, one with lone surrogates, is the error
    // above); `str`s are immutable, so they stay as they are.
    Ok(
        unsafe {
            std::str::from_utf8_unchecked(std::slice::from_raw_parts(data.cast::<u8>(), len))
        },
    )
}
