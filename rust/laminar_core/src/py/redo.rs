//! Bindings of `redo`: Kafka records to redo-log blobs and back (GIL released for the bulk work).

use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;
use pyo3::types::{PyBytes, PyList};

use super::errors::IntoPyResult;
use crate::error::CoreError;
use crate::redo;

/// Encodes one epoch's records into redo-log blobs of about 1 MiB each (at least one).
#[pyfunction]
#[pyo3(signature = (values, keys=None))]
fn encode_redo<'py>(
    py: Python<'py>,
    values: Vec<Option<PyBackedBytes>>,
    keys: Option<Vec<Option<PyBackedBytes>>>,
) -> PyResult<Bound<'py, PyList>> {
    if let Some(k) = &keys {
        if k.len() != values.len() {
            return Err(CoreError::Config(format!(
                "encode_redo: {} keys for {} values",
                k.len(),
                values.len()
            )))
            .py_err(py);
        }
    }
    let blobs = py.detach(|| {
        let vals: Vec<Option<&[u8]>> = values.iter().map(|v| v.as_deref()).collect();
        let ks: Option<Vec<Option<&[u8]>>> = keys
            .as_ref()
            .map(|k| k.iter().map(|v| v.as_deref()).collect());
        redo::encode_blobs(ks.as_deref(), &vals)
    });
    PyList::new(py, blobs.iter().map(|b| PyBytes::new(py, b)))
}

/// Decodes one redo-log blob into `(values, keys)`.
#[pyfunction]
fn decode_redo<'py>(
    py: Python<'py>,
    blob: PyBackedBytes,
) -> PyResult<(Bound<'py, PyList>, Bound<'py, PyList>)> {
    let (records, _tags) = py.detach(|| redo::decode_blob(&blob)).py_err(py)?;
    let values = PyList::empty(py);
    let keys = PyList::empty(py);
    for (key, value) in &records {
        keys.append(key.as_deref().map(|k| PyBytes::new(py, k)))?;
        values.append(value.as_deref().map(|v| PyBytes::new(py, v)))?;
    }
    Ok((values, keys))
}

/// Registers `encode_redo` and `decode_redo`.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(encode_redo, m)?)?;
    m.add_function(wrap_pyfunction!(decode_redo, m)?)?;
    Ok(())
}
