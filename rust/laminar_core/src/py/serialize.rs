//! Bindings of `serialize`: Arrow data in through the PyCapsule interface (no copy), encoders run
//! with the GIL released, payloads out as Python `bytes`.

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use std::collections::HashMap;
use std::sync::Mutex;

use pyo3::exceptions::{PyRuntimeError, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyString, PyTuple};
use pyo3_arrow::PySchema;
use pyo3_arrow::input::AnyRecordBatch;

use super::errors::IntoPyResult;
use crate::error::{CoreError, CoreResult};
use crate::serialize::kafka::{self, KafkaOptions, Payloads, ValueFormat};
use crate::serialize::kafka_shape::{self, Header, Routing};
use crate::serialize::{check_batch, pgcopy};

/// The one way encoders run: with the GIL released, errors mapped to `laminar.errors`.
pub(super) fn run_detached<T, F>(py: Python<'_>, work: F) -> PyResult<T>
where
    F: FnOnce() -> CoreResult<T> + Send,
    T: Send,
{
    py.detach(work).py_err(py)
}

const ARROW_INPUT: &str = "a pyarrow Table, RecordBatch or RecordBatchReader, or any object \
                           with __arrow_c_stream__ or __arrow_c_array__";

/// Imports Arrow data without copying: the batches share the producer's buffers; batches
/// without rows are left out.
pub(super) fn import_batches(
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
    let mut batches = reader
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| CoreError::Data(format!("reading the Arrow stream failed: {e}")))
        .py_err(py)?;
    // A batch without rows has nothing to encode, and one sliced at a non-zero offset arrives
    // through the C data interface with its values buffer cut to nothing while its offsets
    // still point past it (pyarrow's `RecordBatch.slice(k, 0)`): dropped, not validated.
    batches.retain(|b| b.num_rows() > 0);
    Ok((schema, batches))
}

/// Reads a schema from a pyarrow Schema (`__arrow_c_schema__`) or from anything with `.schema`
/// (Table, RecordBatch, RecordBatchReader: their streams are not consumed).
pub(super) fn import_schema(data: &Bound<'_, PyAny>) -> PyResult<SchemaRef> {
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

/// Appends the chunk's payloads to `out` as `bytes` (or `None` for null): one allocation and one
/// copy per payload, in one pass over the chunk's offsets (`out` is reserved for the whole batch).
pub(super) fn push_payloads<'py>(
    py: Python<'py>,
    payloads: &Payloads,
    out: &mut Vec<Bound<'py, PyAny>>,
) {
    out.extend(payloads.iter().map(|payload| match payload {
        Some(bytes) => PyBytes::new(py, bytes).into_any(),
        None => py.None().into_bound(py),
    }));
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
    routed: Option<RoutedRows>,
}

impl PyKafkaRecords {
    /// Records without Spark's routing: what the Avro encoder returns (`py/avro.rs`).
    pub(super) fn plain(
        values: Py<PyList>,
        keys: Option<Py<PyList>>,
        num_rows: usize,
        value_bytes: usize,
        key_bytes: usize,
    ) -> Self {
        Self {
            values,
            keys,
            num_rows,
            value_bytes,
            key_bytes,
            routed: None,
        }
    }
}

/// Spark's shape: each row's topic, partition and headers as the producer takes them.
struct RoutedRows {
    topics: Py<PyList>,
    partitions: Option<Py<PyList>>,
    headers: Option<Py<PyList>>,
    topic_names: Py<PyList>,
    max_partitions: Py<PyList>,
}

/// Distinct header sets whose list rows share (beyond this, each row gets its own).
const SHARED_HEADER_SETS: usize = 1024;

/// Turns a [`Routing`] into Python lists: one `str` object per distinct topic shared by its
/// rows; per row, the user headers followed by `sink_headers` (the list object itself when the
/// row has none of its own).
fn routed_rows(
    py: Python<'_>,
    routing: Routing,
    sink_headers: Option<&Bound<'_, PyList>>,
) -> PyResult<RoutedRows> {
    let names: Vec<Bound<'_, PyString>> = routing
        .topics
        .iter()
        .map(|t| PyString::new(py, t))
        .collect();
    let topics = PyList::new(
        py,
        routing.topic_of_row.iter().map(|&id| {
            names
                .get(id as usize)
                .map_or_else(|| py.None().into_bound(py), |n| n.clone().into_any())
        }),
    )?;
    let partitions = match routing.partitions {
        Some(p) => Some(PyList::new(py, p)?.unbind()),
        None => None,
    };
    let headers = match routing.headers {
        Some(rows) => {
            let empty = match sink_headers {
                Some(h) => h.clone(),
                None => PyList::empty(py),
            };
            let tail: Vec<Bound<'_, PyAny>> = empty.iter().collect();
            // Header keys repeat from row to row: one `str` object per distinct key.
            let mut keys: HashMap<String, Bound<'_, PyString>> = HashMap::new();
            // Rows often carry the same headers (a constant `source`): they share one list,
            // which spares Python's collector a tracked object per row.
            let mut shared: HashMap<Vec<Header>, Bound<'_, PyList>> = HashMap::new();
            let mut out = Vec::with_capacity(rows.len());
            for row in rows {
                if row.is_empty() {
                    out.push(empty.clone());
                    continue;
                }
                if let Some(list) = shared.get(&row) {
                    out.push(list.clone());
                    continue;
                }
                let key_of_row = (shared.len() < SHARED_HEADER_SETS).then(|| row.clone());
                let mut items = Vec::with_capacity(row.len() + tail.len());
                for (key, value) in row {
                    let name = keys
                        .entry(key)
                        .or_insert_with_key(|k| PyString::new(py, k))
                        .clone()
                        .into_any();
                    let value = match value {
                        Some(v) => PyBytes::new(py, &v).into_any(),
                        None => py.None().into_bound(py),
                    };
                    items.push(PyTuple::new(py, [name, value])?.into_any());
                }
                items.extend(tail.iter().cloned());
                let list = PyList::new(py, items)?;
                if let Some(row) = key_of_row {
                    shared.insert(row, list.clone());
                }
                out.push(list);
            }
            Some(PyList::new(py, out)?.unbind())
        }
        None => None,
    };
    Ok(RoutedRows {
        topics: topics.unbind(),
        partitions,
        headers,
        topic_names: PyList::new(py, names)?.unbind(),
        max_partitions: PyList::new(py, routing.max_partition)?.unbind(),
    })
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

    /// Spark's shape: each row's topic (`None` for other formats).
    #[getter]
    fn topics(&self, py: Python<'_>) -> Option<Py<PyList>> {
        self.routed.as_ref().map(|r| r.topics.clone_ref(py))
    }

    /// Spark's shape with a `partition` column: each row's partition, -1 when null.
    #[getter]
    fn partitions(&self, py: Python<'_>) -> Option<Py<PyList>> {
        self.routed
            .as_ref()
            .and_then(|r| r.partitions.as_ref().map(|p| p.clone_ref(py)))
    }

    /// Spark's shape with a `headers` column: each row's headers, its own then the sink's.
    #[getter]
    fn headers(&self, py: Python<'_>) -> Option<Py<PyList>> {
        self.routed
            .as_ref()
            .and_then(|r| r.headers.as_ref().map(|h| h.clone_ref(py)))
    }

    /// Spark's shape: the distinct topics the rows name, in first-seen order (empty otherwise).
    #[getter]
    fn topic_names(&self, py: Python<'_>) -> Py<PyList> {
        match &self.routed {
            Some(r) => r.topic_names.clone_ref(py),
            None => PyList::empty(py).unbind(),
        }
    }

    /// Per topic of `topic_names`: the highest explicit partition of its rows (-1: none).
    #[getter]
    fn max_partitions(&self, py: Python<'_>) -> Py<PyList> {
        match &self.routed {
            Some(r) => r.max_partitions.clone_ref(py),
            None => PyList::empty(py).unbind(),
        }
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

/// The Kafka encoding plan for `data` and its record batches, every batch checked (with the GIL
/// released): what `encode_kafka` and `iter_kafka` share.
pub(super) fn plan_kafka_input(
    py: Python<'_>,
    data: &Bound<'_, PyAny>,
    value_format: &str,
    key: Option<String>,
    value_column: Option<String>,
) -> PyResult<(kafka::KafkaPlan, Vec<RecordBatch>)> {
    let options = kafka_options(value_format, key, value_column).py_err(py)?;
    let (schema, batches) = import_batches(py, data)?;
    let plan = run_detached(py, || {
        let plan = kafka::plan_kafka(&schema, &options)?;
        for batch in &batches {
            check_batch(batch)?;
        }
        Ok(plan)
    })?;
    Ok((plan, batches))
}

/// Encodes every row of `data` as a Kafka `(key, value)` payload (and, for Spark's shape, its
/// topic, partition and headers).
#[pyfunction]
#[pyo3(signature = (
    data, *, value_format = "json", key = None, value_column = None, topic = None,
    headers = None, first_row = 0
))]
#[allow(clippy::too_many_arguments)]
fn encode_kafka(
    py: Python<'_>,
    data: &Bound<'_, PyAny>,
    value_format: &str,
    key: Option<String>,
    value_column: Option<String>,
    topic: Option<String>,
    headers: Option<Bound<'_, PyList>>,
    first_row: usize,
) -> PyResult<PyKafkaRecords> {
    let (plan, batches) = plan_kafka_input(py, data, value_format, key, value_column)?;
    let routing = match plan.route() {
        Some(route) => {
            let route = *route;
            Some(run_detached(py, || {
                kafka_shape::route(&route, &batches, topic.as_deref(), first_row)
            })?)
        }
        None => None,
    };
    let num_rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
    let keyed = plan.has_key();
    let mut encoder = kafka::KafkaEncoder::new(plan, batches);
    let mut chunk = encoder.new_chunk();
    let mut values = Vec::with_capacity(num_rows);
    let mut keys = keyed.then(|| Vec::with_capacity(num_rows));
    let (mut value_bytes, mut key_bytes) = (0, 0);
    // Encode one chunk without the GIL, turn it into `bytes` with the GIL, reuse the buffer.
    while run_detached(py, || encoder.next_chunk(&mut chunk))? {
        value_bytes += chunk.values.data_len();
        push_payloads(py, &chunk.values, &mut values);
        if let (Some(out), Some(chunk_keys)) = (keys.as_mut(), chunk.keys.as_ref()) {
            key_bytes += chunk_keys.data_len();
            push_payloads(py, chunk_keys, out);
        }
    }
    let keys = match keys {
        Some(k) => Some(PyList::new(py, k)?.unbind()),
        None => None,
    };
    let routed = match routing {
        Some(r) => Some(routed_rows(py, r, headers.as_ref())?),
        None => None,
    };
    Ok(PyKafkaRecords {
        values: PyList::new(py, values)?.unbind(),
        keys,
        num_rows,
        value_bytes,
        key_bytes,
        routed,
    })
}

struct StreamState {
    encoder: kafka::KafkaEncoder,
    chunk: kafka::RecordChunk,
    pos: usize,
    remaining: usize,
}

/// `(key, value)` pairs of a batch, encoded one chunk at a time as they are consumed: only one
/// chunk (about 1 MiB) is ever buffered, whatever the batch size.
#[pyclass(module = "laminar._core", name = "KafkaRecordStream")]
pub struct PyKafkaRecordStream {
    state: Mutex<StreamState>,
    num_rows: usize,
}

#[pymethods]
impl PyKafkaRecordStream {
    /// Number of records in the whole stream.
    #[getter]
    fn num_rows(&self) -> usize {
        self.num_rows
    }

    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __length_hint__(&self) -> usize {
        self.state.try_lock().map_or(0, |s| s.remaining)
    }

    fn __next__<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyTuple>>> {
        // `try_lock`: a second thread blocking here while holding the GIL would deadlock with the
        // first one waiting for the GIL after its detached encode.
        let mut guard = self.state.try_lock().map_err(|_| {
            PyRuntimeError::new_err("a KafkaRecordStream cannot be iterated from two threads")
        })?;
        let state = &mut *guard;
        if state.pos >= state.chunk.values.len() {
            let StreamState { encoder, chunk, .. } = state;
            if !run_detached(py, || encoder.next_chunk(chunk))? {
                return Ok(None);
            }
            state.pos = 0;
        }
        let i = state.pos;
        state.pos += 1;
        state.remaining = state.remaining.saturating_sub(1);
        let object = |payload: Option<&[u8]>| match payload {
            Some(bytes) => PyBytes::new(py, bytes).into_any(),
            None => py.None().into_bound(py),
        };
        let key = object(state.chunk.keys.as_ref().and_then(|k| k.get(i)));
        let value = object(state.chunk.values.get(i));
        Ok(Some(PyTuple::new(py, [key, value])?))
    }
}

/// Streams every row of `data` as `(key, value)` pairs, encoding as they are consumed.
#[pyfunction]
#[pyo3(signature = (data, *, value_format = "json", key = None, value_column = None))]
fn iter_kafka(
    py: Python<'_>,
    data: &Bound<'_, PyAny>,
    value_format: &str,
    key: Option<String>,
    value_column: Option<String>,
) -> PyResult<PyKafkaRecordStream> {
    let (plan, batches) = plan_kafka_input(py, data, value_format, key, value_column)?;
    let encoder = kafka::KafkaEncoder::new(plan, batches);
    let num_rows = encoder.num_rows();
    let chunk = encoder.new_chunk();
    Ok(PyKafkaRecordStream {
        state: Mutex::new(StreamState {
            encoder,
            chunk,
            pos: 0,
            remaining: num_rows,
        }),
        num_rows,
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

/// Whether `schema` is exactly Spark's Kafka-sink shape (`value`, and optionally `key`, `topic`,
/// `partition`, `headers`, each of its type): what a sink with no value option writes as such.
#[pyfunction]
fn is_spark_kafka_shape(schema: &Bound<'_, PyAny>) -> PyResult<bool> {
    let schema = import_schema(schema)?;
    Ok(kafka_shape::is_spark_shape(&schema))
}

/// Shape detection for a sink with no value option given: `True` for exactly Spark's
/// Kafka-sink shape, `False` when a column is not one of its names (or there is no `value`), a
/// `DataError` naming the column when every column has the shape's names but one has not its
/// type (docs/kafka.md, "Which batches").
#[pyfunction]
fn detect_spark_kafka_shape(py: Python<'_>, schema: &Bound<'_, PyAny>) -> PyResult<bool> {
    let schema = import_schema(schema)?;
    kafka_shape::detect_spark_shape(&schema).py_err(py)
}

/// Whether `name` is one of Kafka's internal topics (`__consumer_offsets`,
/// `__transaction_state`, …), which no client may write.
#[pyfunction]
fn is_internal_kafka_topic(name: &str) -> bool {
    kafka_shape::is_internal_topic(name.as_bytes())
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

/// The COPY plan for `data` and its record batches, every batch checked (with the GIL released):
/// what `encode_pg_copy` and `iter_pg_copy` share.
fn plan_pg_input(
    py: Python<'_>,
    data: &Bound<'_, PyAny>,
    columns: Vec<(String, String, i32)>,
    source_columns: Option<Vec<String>>,
) -> PyResult<(pgcopy::CopyPlan, Vec<RecordBatch>)> {
    let targets = pg_columns(columns);
    let (schema, batches) = import_batches(py, data)?;
    let plan = run_detached(py, || {
        let plan = pgcopy::plan_pg_copy(&schema, &targets, source_columns.as_deref())?;
        for batch in &batches {
            check_batch(batch)?;
        }
        Ok(plan)
    })?;
    Ok((plan, batches))
}

fn target_columns(plan: &pgcopy::CopyPlan) -> Vec<String> {
    plan.target_columns()
        .into_iter()
        .map(String::from)
        .collect()
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
    let (plan, batches) = plan_pg_input(py, data, columns, source_columns)?;
    let mut encoder = pgcopy::CopyEncoder::new(&plan, &batches);
    let mut out = Vec::with_capacity(pgcopy::CHUNK_BYTES + pgcopy::CHUNK_BYTES / 8);
    let chunks = PyList::empty(py);
    let mut total_bytes = 0;
    // Encode one chunk without the GIL, copy it into `bytes` with the GIL, reuse the buffer. An
    // error in any row fails the whole call, so a partial stream never reaches the caller.
    while run_detached(py, || encoder.next_chunk(&mut out))? {
        total_bytes += out.len();
        chunks.append(PyBytes::new(py, &out))?;
    }
    Ok(PyPgCopyBuffer {
        chunks: chunks.unbind(),
        columns: target_columns(&plan),
        num_rows: batches.iter().map(RecordBatch::num_rows).sum(),
        total_bytes,
    })
}

struct CopyStreamState {
    encoder: pgcopy::CopyEncoder,
    out: Vec<u8>,
    total_bytes: usize,
}

/// A `COPY … FROM STDIN (FORMAT BINARY)` stream encoded one chunk (about 1 MiB) at a time, as
/// it is consumed: header in the first chunk, trailer at the end of the last. Each chunk is
/// encoded with the GIL released, so a thread can encode chunk n+1 while another sends chunk n
/// (docs/serialization.md, "Performance").
#[pyclass(frozen, module = "laminar._core", name = "PgCopyStream")]
pub struct PyPgCopyStream {
    state: Mutex<CopyStreamState>,
    columns: Vec<String>,
    num_rows: usize,
}

#[pymethods]
impl PyPgCopyStream {
    /// Target column names in stream order (for `COPY table (…)`).
    #[getter]
    fn columns(&self) -> Vec<String> {
        self.columns.clone()
    }

    /// Rows in the whole stream.
    #[getter]
    fn num_rows(&self) -> usize {
        self.num_rows
    }

    /// Bytes of the chunks handed out so far (the whole stream's once it is exhausted).
    #[getter]
    fn total_bytes(&self) -> usize {
        self.state.try_lock().map_or(0, |s| s.total_bytes)
    }

    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    /// The next chunk as `bytes`; `StopIteration` after the trailer. A value that does not fit
    /// its column raises `DataError` naming the column and the row (counted over the stream).
    fn __next__<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyBytes>>> {
        // `try_lock`, as in KafkaRecordStream: a second thread blocking here with the GIL held
        // would deadlock with the first one waiting for the GIL after its detached encode.
        let mut guard = self.state.try_lock().map_err(|_| {
            PyRuntimeError::new_err("a PgCopyStream cannot be iterated from two threads at once")
        })?;
        let CopyStreamState {
            encoder,
            out,
            total_bytes,
        } = &mut *guard;
        if !run_detached(py, || encoder.next_chunk(out))? {
            return Ok(None);
        }
        *total_bytes += out.len();
        Ok(Some(PyBytes::new(py, out)))
    }

    fn __repr__(&self) -> String {
        format!(
            "PgCopyStream(num_rows={}, columns={:?})",
            self.num_rows, self.columns
        )
    }
}

/// Like `encode_pg_copy`, but encodes the stream one chunk at a time as it is iterated.
#[pyfunction]
#[pyo3(signature = (data, columns, *, source_columns = None))]
fn iter_pg_copy(
    py: Python<'_>,
    data: &Bound<'_, PyAny>,
    columns: Vec<(String, String, i32)>,
    source_columns: Option<Vec<String>>,
) -> PyResult<PyPgCopyStream> {
    let (plan, batches) = plan_pg_input(py, data, columns, source_columns)?;
    let num_rows = batches.iter().map(RecordBatch::num_rows).sum();
    let columns = target_columns(&plan);
    Ok(PyPgCopyStream {
        state: Mutex::new(CopyStreamState {
            encoder: pgcopy::CopyEncoder::new(&plan, &batches),
            out: Vec::with_capacity(pgcopy::CHUNK_BYTES + pgcopy::CHUNK_BYTES / 8),
            total_bytes: 0,
        }),
        columns,
        num_rows,
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
    m.add_class::<PyKafkaRecordStream>()?;
    m.add_class::<PyPgCopyStream>()?;
    m.add_function(wrap_pyfunction!(encode_kafka, m)?)?;
    m.add_function(wrap_pyfunction!(check_kafka_schema, m)?)?;
    m.add_function(wrap_pyfunction!(is_spark_kafka_shape, m)?)?;
    m.add_function(wrap_pyfunction!(detect_spark_kafka_shape, m)?)?;
    m.add_function(wrap_pyfunction!(is_internal_kafka_topic, m)?)?;
    m.add_function(wrap_pyfunction!(iter_kafka, m)?)?;
    m.add_function(wrap_pyfunction!(encode_pg_copy, m)?)?;
    m.add_function(wrap_pyfunction!(iter_pg_copy, m)?)?;
    m.add_function(wrap_pyfunction!(check_pg_copy_schema, m)?)?;
    Ok(())
}
