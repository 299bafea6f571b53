//! Library values as Python objects: JSON values (summaries, metric rows,
//! pipeline results with HF's keys) as dicts and lists, float32 buffers as
//! numpy arrays that take the buffer over (no copy).

use numpy::ndarray::{Array2, ShapeError};
use numpy::{IntoPyArray, PyArray2};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use pyo3::IntoPyObjectExt;
use serde_json::Value;

/// A JSON value as the Python object `json.loads` would give.
pub fn json_to_py(py: Python<'_>, v: &Value) -> PyResult<Py<PyAny>> {
    Ok(match v {
        Value::Null => py.None(),
        Value::Bool(b) => b.into_py_any(py)?,
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => i.into_py_any(py)?,
            (None, Some(u)) => u.into_py_any(py)?,
            _ => n.as_f64().unwrap_or(f64::NAN).into_py_any(py)?,
        },
        Value::String(s) => s.into_py_any(py)?,
        Value::Array(a) => {
            let items = a
                .iter()
                .map(|x| json_to_py(py, x))
                .collect::<PyResult<Vec<_>>>()?;
            PyList::new(py, items)?.into_any().unbind()
        }
        Value::Object(m) => {
            let d = PyDict::new(py);
            for (k, x) in m {
                d.set_item(k, json_to_py(py, x)?)?;
            }
            d.into_any().unbind()
        }
    })
}

/// `data` (`[rows, cols]`, row-major) as a numpy float32 array owning it.
pub fn array2(
    py: Python<'_>,
    data: Vec<f32>,
    rows: usize,
    cols: usize,
) -> PyResult<Bound<'_, PyArray2<f32>>> {
    let a = Array2::from_shape_vec((rows, cols), data)
        .map_err(|e: ShapeError| pyo3::exceptions::PyRuntimeError::new_err(e.to_string()))?;
    Ok(a.into_pyarray(py))
}

/// A Python value (a dict...) read as `T` through JSON, so that the
/// library's serde options (unknown keys refused) apply as in a request.
pub fn from_py_json<T: serde::de::DeserializeOwned>(obj: &Bound<'_, PyAny>) -> PyResult<T> {
    let text: String = obj
        .py()
        .import("json")?
        .call_method1("dumps", (obj,))?
        .extract()?;
    serde_json::from_str(&text).map_err(|e| pyo3::exceptions::PyValueError::new_err(e.to_string()))
}
