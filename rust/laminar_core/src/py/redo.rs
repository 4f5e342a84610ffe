//! Bindings of `redo`: Kafka records to redo-log blobs and back (GIL released for the bulk work).

use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;
use pyo3::types::{PyBytes, PyList, PyTuple};

use super::errors::IntoPyResult;
use crate::error::CoreError;
use crate::redo::{self, RecordRef, RedoRecord};
use crate::serialize::kafka_shape::Header;

fn check_len(what: &str, len: Option<usize>, values: usize) -> Result<(), CoreError> {
    match len {
        Some(n) if n != values => Err(CoreError::Config(format!(
            "encode_redo: {n} {what} for {values} values"
        ))),
        _ => Ok(()),
    }
}

/// Encodes one epoch's records into redo-log blobs of about 1 MiB each (at least one).
#[pyfunction]
#[pyo3(signature = (values, keys=None, topics=None, partitions=None, headers=None))]
fn encode_redo<'py>(
    py: Python<'py>,
    values: Vec<Option<PyBackedBytes>>,
    keys: Option<Vec<Option<PyBackedBytes>>>,
    topics: Option<Vec<Option<String>>>,
    partitions: Option<Vec<i32>>,
    headers: Option<Vec<Vec<Header>>>,
) -> PyResult<Bound<'py, PyList>> {
    let n = values.len();
    check_len("keys", keys.as_ref().map(Vec::len), n)
        .and_then(|()| check_len("topics", topics.as_ref().map(Vec::len), n))
        .and_then(|()| check_len("partitions", partitions.as_ref().map(Vec::len), n))
        .and_then(|()| check_len("header lists", headers.as_ref().map(Vec::len), n))
        .py_err(py)?;
    let blobs = py.detach(|| {
        let records: Vec<RecordRef<'_>> = (0..n)
            .map(|i| RecordRef {
                key: keys.as_ref().and_then(|k| k[i].as_deref()),
                value: values[i].as_deref(),
                topic: topics.as_ref().and_then(|t| t[i].as_deref()),
                partition: partitions.as_ref().map_or(-1, |p| p[i]),
                headers: headers.as_ref().map_or(&[][..], |h| &h[i]),
            })
            .collect();
        redo::encode_blobs(&records)
    });
    PyList::new(py, blobs.iter().map(|b| PyBytes::new(py, b)))
}

fn decode<'py>(py: Python<'py>, blob: &PyBackedBytes) -> PyResult<Vec<RedoRecord>> {
    Ok(py.detach(|| redo::decode_blob(blob)).py_err(py)?.0)
}

fn values_and_keys<'py>(
    py: Python<'py>,
    records: &[RedoRecord],
) -> PyResult<(Bound<'py, PyList>, Bound<'py, PyList>)> {
    let values = PyList::empty(py);
    let keys = PyList::empty(py);
    for r in records {
        keys.append(r.key.as_deref().map(|k| PyBytes::new(py, k)))?;
        values.append(r.value.as_deref().map(|v| PyBytes::new(py, v)))?;
    }
    Ok((values, keys))
}

/// Decodes one redo-log blob of key/value records into `(values, keys)`; a blob whose records
/// carry a topic, a partition or headers is an error here (`decode_redo_records` reads it).
#[pyfunction]
fn decode_redo<'py>(
    py: Python<'py>,
    blob: PyBackedBytes,
) -> PyResult<(Bound<'py, PyList>, Bound<'py, PyList>)> {
    let records = decode(py, &blob)?;
    if records
        .iter()
        .any(|r| r.topic.is_some() || r.partition >= 0 || !r.headers.is_empty())
    {
        return Err(CoreError::InvalidStateEncoding(
            "this redo log blob holds records with their own topic, partition or headers: read \
             it with decode_redo_records"
                .into(),
        ))
        .py_err(py);
    }
    values_and_keys(py, &records)
}

/// Decodes one redo-log blob of either version into `(values, keys, topics, partitions,
/// headers)`, one entry per record (topic `None`: the sink's; partition -1: the partitioner's).
#[pyfunction]
fn decode_redo_records<'py>(py: Python<'py>, blob: PyBackedBytes) -> PyResult<Bound<'py, PyTuple>> {
    let records = decode(py, &blob)?;
    let (values, keys) = values_and_keys(py, &records)?;
    let topics = PyList::new(py, records.iter().map(|r| r.topic.as_deref()))?;
    let partitions = PyList::new(py, records.iter().map(|r| r.partition))?;
    let headers = PyList::empty(py);
    for r in &records {
        let row = PyList::empty(py);
        for (k, v) in &r.headers {
            row.append((k, v.as_deref().map(|v| PyBytes::new(py, v))))?;
        }
        headers.append(row)?;
    }
    PyTuple::new(
        py,
        [
            values.into_any(),
            keys.into_any(),
            topics.into_any(),
            partitions.into_any(),
            headers.into_any(),
        ],
    )
}

/// Registers `encode_redo`, `decode_redo` and `decode_redo_records`.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(encode_redo, m)?)?;
    m.add_function(wrap_pyfunction!(decode_redo, m)?)?;
    m.add_function(wrap_pyfunction!(decode_redo_records, m)?)?;
    Ok(())
}
