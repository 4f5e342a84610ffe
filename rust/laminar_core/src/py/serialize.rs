//! Bindings of `serialize`: Arrow data in through the PyCapsule interface (no copy), encoders run
//! with the GIL released, payloads out as Python `bytes`.

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};
use pyo3_arrow::PySchema;
use pyo3_arrow::input::AnyRecordBatch;

use super::errors::IntoPyResult;
use crate::error::{CoreError, CoreResult};
use crate::serialize::kafka::{self, KafkaOptions, Payloads, ValueFormat};
use crate::serialize::{check_batch, pgcopy};

/// The one way encoders run: with the GIL released, errors mapped to `laminar.errors`.
fn run_detached<T, F>(py: Python<'_>, work: F) -> PyResult<T>
where
    F: FnOnce() -> CoreResult<T> + Send,
    T: Send,
{
    py.detach(work).py_err(py)
}

const ARROW_INPUT: &str = "a pyarrow Table, RecordBatch or RecordBatchReader, or any object \
                           with __arrow_c_stream__ or __arrow_c_array__";

/// Imports Arrow data without copying: the batches share the producer's buffers.
fn import_batches(
    py: Python<'_>,
    data: &Bound<'_, PyAny>,
) -> PyResult<(SchemaRef, Vec<RecordBatch>)> {
    let input: AnyRecordBatch = data.extract().map_err(|e| {
        let type_name = data
            .get_type()
            .name()
            .map_or_else(|_| "?".to_string(), |n| n.to_string());
        let err = PyTypeError::new_err(format!("expected {ARROW_INPUT}, got {type_name}"));
        err.set_cause(py, Some(e));
        err
    })?;
    let reader = input.into_reader()?;
    let schema = reader.schema();
    let batches = reader
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| CoreError::Data(format!("reading the Arrow stream failed: {e}")))
        .py_err(py)?;
    Ok((schema, batches))
}

/// Reads a schema from a pyarrow Schema (`__arrow_c_schema__`) or from anything with `.schema`
/// (Table, RecordBatch, RecordBatchReader: their streams are not consumed).
fn import_schema(data: &Bound<'_, PyAny>) -> PyResult<SchemaRef> {
    let py = data.py();
    if data.hasattr(pyo3::intern!(py, "__arrow_c_schema__"))? {
        if let Ok(schema) = data.extract::<PySchema>() {
            return Ok(schema.into_inner());
        }
    }
    if let Ok(inner) = data.getattr(pyo3::intern!(py, "schema")) {
        if let Ok(schema) = inner.extract::<PySchema>() {
            return Ok(schema.into_inner());
        }
    }
    let type_name = data
        .get_type()
        .name()
        .map_or_else(|_| "?".to_string(), |n| n.to_string());
    Err(PyTypeError::new_err(format!(
        "expected a pyarrow Schema (or an object with __arrow_c_schema__ or a .schema), got \
         {type_name}"
    )))
}

fn kafka_options(
    value_format: &str,
    key: Option<String>,
    value_column: Option<String>,
) -> CoreResult<KafkaOptions> {
    Ok(KafkaOptions {
        value_format: ValueFormat::parse(value_format)?,
        value_column,
        key_column: key,
    })
}

/// Yields the payloads of all chunks as `bytes` (or `None` for null), dropping each chunk as soon
/// as it has been copied so that the peak extra memory stays near the output size.
struct PayloadObjects<'py> {
    py: Python<'py>,
    chunks: std::vec::IntoIter<Payloads>,
    current: Payloads,
    pos: usize,
    remaining: usize,
}

impl<'py> Iterator for PayloadObjects<'py> {
    type Item = Bound<'py, PyAny>;

    fn next(&mut self) -> Option<Self::Item> {
        while self.pos >= self.current.len() {
            self.current = self.chunks.next()?;
            self.pos = 0;
        }
        let item = match self.current.get(self.pos) {
            Some(bytes) => PyBytes::new(self.py, bytes).into_any(),
            None => self.py.None().into_bound(self.py),
        };
        self.pos += 1;
        self.remaining = self.remaining.saturating_sub(1);
        Some(item)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.remaining, Some(self.remaining))
    }
}

impl ExactSizeIterator for PayloadObjects<'_> {}

fn payload_list<'py>(py: Python<'py>, chunks: Vec<Payloads>) -> PyResult<Bound<'py, PyList>> {
    let remaining = chunks.iter().map(Payloads::len).sum();
    PyList::new(
        py,
        PayloadObjects {
            py,
            chunks: chunks.into_iter(),
            current: Payloads::default(),
            pos: 0,
            remaining,
        },
    )
}

/// The Kafka payloads of one batch: `values[i]` and `keys[i]` feed
/// `Producer.produce(topic, value=values[i], key=keys[i])`.
#[pyclass(frozen, module = "laminar._core", name = "KafkaRecords")]
pub struct PyKafkaRecords {
    values: Py<PyList>,
    keys: Option<Py<PyList>>,
    num_rows: usize,
    value_bytes: usize,
    key_bytes: usize,
}

#[pymethods]
impl PyKafkaRecords {
    /// One `bytes` per row (`None` for a null raw value).
    #[getter]
    fn values(&self, py: Python<'_>) -> Py<PyList> {
        self.values.clone_ref(py)
    }

    /// One key per row (`None` for a null key), or `None` when no key column was given.
    #[getter]
    fn keys(&self, py: Python<'_>) -> Option<Py<PyList>> {
        self.keys.as_ref().map(|k| k.clone_ref(py))
    }

    /// Number of records.
    #[getter]
    fn num_rows(&self) -> usize {
        self.num_rows
    }

    /// Bytes of all values and keys.
    #[getter]
    fn total_bytes(&self) -> usize {
        self.value_bytes + self.key_bytes
    }

    /// Bytes of all values.
    #[getter]
    fn value_bytes(&self) -> usize {
        self.value_bytes
    }

    /// Bytes of all keys.
    #[getter]
    fn key_bytes(&self) -> usize {
        self.key_bytes
    }

    fn __len__(&self) -> usize {
        self.num_rows
    }

    fn __repr__(&self) -> String {
        format!(
            "KafkaRecords(num_rows={}, total_bytes={}, keyed={})",
            self.num_rows,
            self.value_bytes + self.key_bytes,
            self.keys.is_some()
        )
    }
}

/// Encodes every row of `data` as a Kafka `(key, value)` payload.
#[pyfunction]
#[pyo3(signature = (data, *, value_format = "json", key = None, value_column = None))]
fn encode_kafka(
    py: Python<'_>,
    data: &Bound<'_, PyAny>,
    value_format: &str,
    key: Option<String>,
    value_column: Option<String>,
) -> PyResult<PyKafkaRecords> {
    let options = kafka_options(value_format, key, value_column).py_err(py)?;
    let (schema, batches) = import_batches(py, data)?;
    let records = run_detached(py, move || {
        let plan = kafka::plan_kafka(&schema, &options)?;
        for batch in &batches {
            check_batch(batch)?;
        }
        kafka::encode_kafka(&plan, &batches)
    })?;
    let num_rows = records.num_rows;
    let (value_bytes, key_bytes) = (records.value_bytes, records.key_bytes);
    let mut value_chunks = Vec::with_capacity(records.chunks.len());
    let mut key_chunks = Vec::with_capacity(records.chunks.len());
    let keyed = records.chunks.iter().any(|c| c.keys.is_some());
    for chunk in records.chunks {
        value_chunks.push(chunk.values);
        if let Some(keys) = chunk.keys {
            key_chunks.push(keys);
        }
    }
    let values = payload_list(py, value_chunks)?.unbind();
    let keys = if keyed {
        Some(payload_list(py, key_chunks)?.unbind())
    } else {
        None
    };
    Ok(PyKafkaRecords {
        values,
        keys,
        num_rows,
        value_bytes,
        key_bytes,
    })
}

/// Validates Kafka encoding options against a schema without encoding anything.
#[pyfunction]
#[pyo3(signature = (schema, *, value_format = "json", key = None, value_column = None))]
fn check_kafka_schema(
    py: Python<'_>,
    schema: &Bound<'_, PyAny>,
    value_format: &str,
    key: Option<String>,
    value_column: Option<String>,
) -> PyResult<()> {
    let options = kafka_options(value_format, key, value_column).py_err(py)?;
    let schema = import_schema(schema)?;
    kafka::plan_kafka(&schema, &options).py_err(py)?;
    Ok(())
}

fn pg_columns(columns: Vec<(String, String, i32)>) -> Vec<pgcopy::PgColumn> {
    columns
        .into_iter()
        .map(|(name, type_name, typmod)| pgcopy::PgColumn {
            name,
            type_name,
            typmod,
        })
        .collect()
}

/// A complete `COPY … FROM STDIN (FORMAT BINARY)` stream, in chunks to pass to `copy.write`.
#[pyclass(frozen, module = "laminar._core", name = "PgCopyBuffer")]
pub struct PyPgCopyBuffer {
    chunks: Py<PyList>,
    columns: Vec<String>,
    num_rows: usize,
    total_bytes: usize,
}

#[pymethods]
impl PyPgCopyBuffer {
    /// The stream as `bytes` chunks of about 1 MiB, in order.
    #[getter]
    fn chunks(&self, py: Python<'_>) -> Py<PyList> {
        self.chunks.clone_ref(py)
    }

    /// Target column names in stream order (for `COPY table (…)`).
    #[getter]
    fn columns(&self) -> Vec<String> {
        self.columns.clone()
    }

    /// Rows in the stream.
    #[getter]
    fn num_rows(&self) -> usize {
        self.num_rows
    }

    /// Total bytes over all chunks.
    #[getter]
    fn total_bytes(&self) -> usize {
        self.total_bytes
    }

    /// The whole stream as one `bytes` (a copy; prefer writing `chunks` one by one).
    fn to_bytes<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        let chunks = self.chunks.bind(py);
        let mut all = Vec::with_capacity(self.total_bytes);
        for chunk in chunks.iter() {
            all.extend_from_slice(chunk.cast::<PyBytes>()?.as_bytes());
        }
        Ok(PyBytes::new(py, &all))
    }

    fn __repr__(&self) -> String {
        format!(
            "PgCopyBuffer(num_rows={}, total_bytes={}, columns={:?})",
            self.num_rows, self.total_bytes, self.columns
        )
    }
}

/// Encodes every row of `data` as a COPY BINARY stream for the target `columns`.
#[pyfunction]
#[pyo3(signature = (data, columns, *, source_columns = None))]
fn encode_pg_copy(
    py: Python<'_>,
    data: &Bound<'_, PyAny>,
    columns: Vec<(String, String, i32)>,
    source_columns: Option<Vec<String>>,
) -> PyResult<PyPgCopyBuffer> {
    let targets = pg_columns(columns);
    let (schema, batches) = import_batches(py, data)?;
    let (plan, copy) = run_detached(py, move || {
        let plan = pgcopy::plan_pg_copy(&schema, &targets, source_columns.as_deref())?;
        for batch in &batches {
            check_batch(batch)?;
        }
        let copy = pgcopy::encode_pg_copy(&plan, &batches)?;
        Ok((plan, copy))
    })?;
    let list = PyList::empty(py);
    for chunk in copy.chunks {
        list.append(PyBytes::new(py, &chunk))?;
    }
    Ok(PyPgCopyBuffer {
        chunks: list.unbind(),
        columns: plan
            .target_columns()
            .into_iter()
            .map(String::from)
            .collect(),
        num_rows: copy.num_rows,
        total_bytes: copy.total_bytes,
    })
}

/// Validates the mapping of an Arrow schema onto target columns without encoding anything.
#[pyfunction]
#[pyo3(signature = (schema, columns, *, source_columns = None))]
fn check_pg_copy_schema(
    py: Python<'_>,
    schema: &Bound<'_, PyAny>,
    columns: Vec<(String, String, i32)>,
    source_columns: Option<Vec<String>>,
) -> PyResult<()> {
    let schema = import_schema(schema)?;
    pgcopy::plan_pg_copy(&schema, &pg_columns(columns), source_columns.as_deref()).py_err(py)?;
    Ok(())
}

/// Registers the serialization classes and functions.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyKafkaRecords>()?;
    m.add_class::<PyPgCopyBuffer>()?;
    m.add_function(wrap_pyfunction!(encode_kafka, m)?)?;
    m.add_function(wrap_pyfunction!(check_kafka_schema, m)?)?;
    m.add_function(wrap_pyfunction!(encode_pg_copy, m)?)?;
    m.add_function(wrap_pyfunction!(check_pg_copy_schema, m)?)?;
    Ok(())
}
