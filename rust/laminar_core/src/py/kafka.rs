//! Bindings of `kafka` (records and scans): `LogRecord`, `decode_record_batches` and
//! `PartitionScan`. Decoding and the replay run with the GIL released; Python objects are made
//! only for what the caller asks to see (a witness scan makes none).

use bytes::Bytes;
use kafka_protocol::messages::FetchRequest;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::Record;
use pyo3::basic::CompareOp;
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyList, PyString, PyTuple};

use crate::kafka::batch::ControlType;
use crate::kafka::batch::{Batch, Place, decode_batches};
use crate::kafka::replay::Replay;
use crate::kafka::scan::{Finished, PartitionScan};
use crate::kafka::{KafkaError, wire};

static KAFKA_LOG_ERROR: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

/// A core Kafka error as `laminar.kafka.log.KafkaLogError`.
pub fn to_py_err(py: Python<'_>, err: KafkaError) -> PyErr {
    let class = KAFKA_LOG_ERROR.get_or_try_init(py, || {
        Ok::<_, PyErr>(
            py.import("laminar.kafka.log")?
                .getattr("KafkaLogError")?
                .unbind(),
        )
    });
    match class.and_then(|c| c.bind(py).call1((err.0,))) {
        Ok(instance) => PyErr::from_value(instance),
        Err(e) => e,
    }
}

/// Bytes that Rust shares with a Python `bytes` object, without a copy.
pub fn shared(data: PyBackedBytes) -> Bytes {
    Bytes::from_owner(data)
}

/// One record as it sits in the log (`laminar.kafka.log.LogRecord`).
#[pyclass(module = "laminar._core", name = "LogRecord", frozen)]
pub struct LogRecord {
    #[pyo3(get)]
    topic: Py<PyString>,
    #[pyo3(get)]
    partition: i32,
    #[pyo3(get)]
    offset: i64,
    #[pyo3(get)]
    timestamp_ms: i64,
    key: Option<Bytes>,
    value: Option<Bytes>,
    headers: Vec<(StrBytes, Option<Bytes>)>,
    #[pyo3(get)]
    producer_id: i64,
    #[pyo3(get)]
    producer_epoch: i16,
    #[pyo3(get)]
    transactional: bool,
}

impl LogRecord {
    fn from_record(py: Python<'_>, topic: &Py<PyString>, partition: i32, r: Record) -> Self {
        Self {
            topic: topic.clone_ref(py),
            partition,
            offset: r.offset,
            timestamp_ms: r.timestamp,
            key: r.key,
            value: r.value,
            headers: r.headers.into_iter().collect(),
            producer_id: r.producer_id,
            producer_epoch: r.producer_epoch,
            transactional: r.transactional,
        }
    }

    fn fields<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        (
            self.topic.bind(py),
            self.partition,
            self.offset,
            self.timestamp_ms,
            self.key(py),
            self.value(py),
            self.headers(py)?,
            self.producer_id,
            self.producer_epoch,
            self.transactional,
        )
            .into_pyobject(py)
    }
}

fn bytes_or_none<'py>(py: Python<'py>, data: Option<&Bytes>) -> Option<Bound<'py, PyBytes>> {
    data.map(|b| PyBytes::new(py, b))
}

#[pymethods]
impl LogRecord {
    #[new]
    #[pyo3(signature = (topic, partition, offset, timestamp_ms, key, value, headers, producer_id, producer_epoch, transactional))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        topic: Py<PyString>,
        partition: i32,
        offset: i64,
        timestamp_ms: i64,
        key: Option<Vec<u8>>,
        value: Option<Vec<u8>>,
        headers: Vec<(String, Option<Vec<u8>>)>,
        producer_id: i64,
        producer_epoch: i16,
        transactional: bool,
    ) -> Self {
        Self {
            topic,
            partition,
            offset,
            timestamp_ms,
            key: key.map(Bytes::from),
            value: value.map(Bytes::from),
            headers: headers
                .into_iter()
                .map(|(k, v)| (StrBytes::from_string(k), v.map(Bytes::from)))
                .collect(),
            producer_id,
            producer_epoch,
            transactional,
        }
    }

    /// The record key.
    #[getter]
    fn key<'py>(&self, py: Python<'py>) -> Option<Bound<'py, PyBytes>> {
        bytes_or_none(py, self.key.as_ref())
    }

    /// The record value.
    #[getter]
    fn value<'py>(&self, py: Python<'py>) -> Option<Bound<'py, PyBytes>> {
        bytes_or_none(py, self.value.as_ref())
    }

    /// The headers, in order: `((name, value), ...)`.
    #[getter]
    fn headers<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(
            py,
            self.headers
                .iter()
                .map(|(k, v)| (k.as_str(), bytes_or_none(py, v.as_ref()))),
        )
    }

    /// The value of the last header called `name` (`None` if absent).
    fn header<'py>(&self, py: Python<'py>, name: &str) -> Option<Bound<'py, PyBytes>> {
        let found = self
            .headers
            .iter()
            .rev()
            .find(|(k, _)| k.as_str() == name)?;
        bytes_or_none(py, found.1.as_ref())
    }

    fn __richcmp__(&self, other: &Bound<'_, PyAny>, op: CompareOp) -> PyResult<Py<PyAny>> {
        let py = other.py();
        let Ok(other) = other.cast::<LogRecord>() else {
            return Ok(py.NotImplemented());
        };
        let equal = self.fields(py)?.eq(other.get().fields(py)?)?;
        match op {
            CompareOp::Eq => Ok(equal.into_pyobject(py)?.to_owned().into_any().unbind()),
            CompareOp::Ne => Ok((!equal).into_pyobject(py)?.to_owned().into_any().unbind()),
            _ => Ok(py.NotImplemented()),
        }
    }

    fn __hash__(&self, py: Python<'_>) -> PyResult<isize> {
        self.fields(py)?.hash()
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let f = self.fields(py)?;
        Ok(format!(
            "LogRecord(topic={}, partition={}, offset={}, timestamp_ms={}, key={}, value={}, \
             headers={}, producer_id={}, producer_epoch={}, transactional={})",
            f.get_item(0)?.repr()?,
            self.partition,
            self.offset,
            self.timestamp_ms,
            f.get_item(4)?.repr()?,
            f.get_item(5)?.repr()?,
            f.get_item(6)?.repr()?,
            self.producer_id,
            self.producer_epoch,
            if self.transactional { "True" } else { "False" }
        ))
    }
}

/// A batch as the tuple `laminar.kafka.log.RecordBatch` is built from.
fn batch_tuple<'py>(
    py: Python<'py>,
    topic: &Py<PyString>,
    partition: i32,
    batch: Batch,
) -> PyResult<Bound<'py, PyTuple>> {
    let records = PyList::empty(py);
    for r in batch.records {
        records.append(LogRecord::from_record(py, topic, partition, r))?;
    }
    (
        batch.base_offset,
        batch.last_offset,
        batch.producer_id,
        batch.producer_epoch,
        batch.base_sequence,
        batch.compression as i8,
        batch.transactional,
        batch.control.map(|c| c as i8),
        records,
    )
        .into_pyobject(py)
}

/// Decodes the record batches of a Fetch answer's `records`: a list of `(base_offset,
/// last_offset, producer_id, producer_epoch, base_sequence, compression, transactional,
/// control, records)` (a trailing partial batch left out).
#[pyfunction]
#[pyo3(signature = (data, *, topic="", partition=0, verify_crc=true))]
fn decode_record_batches<'py>(
    py: Python<'py>,
    data: PyBackedBytes,
    topic: &str,
    partition: i32,
    verify_crc: bool,
) -> PyResult<Bound<'py, PyList>> {
    let data = shared(data);
    let place = Place { topic, partition };
    let (batches, _) = py
        .detach(|| decode_batches(&data, place, verify_crc))
        .map_err(|e| to_py_err(py, e))?;
    let name = PyString::new(py, topic).unbind();
    let out = PyList::empty(py);
    for batch in batches {
        out.append(batch_tuple(py, &name, partition, batch)?)?;
    }
    Ok(out)
}

/// One partition read fetch by fetch (`kafka::scan`): Python sends `fetch_request()` and feeds
/// the answer back until `next_offset()` is `None`.
#[pyclass(module = "laminar._core", name = "PartitionScan")]
pub struct PyPartitionScan {
    scan: Option<PartitionScan>,
    topic: Py<PyString>,
    partition: i32,
}

impl PyPartitionScan {
    fn scan(&mut self) -> PyResult<&mut PartitionScan> {
        self.scan
            .as_mut()
            .ok_or_else(|| pyo3::exceptions::PyRuntimeError::new_err("the scan is finished"))
    }
}

#[pymethods]
impl PyPartitionScan {
    #[new]
    #[pyo3(signature = (topic, partition, start, end, high_watermark, *, replay=true, sink_id=None, verify_crc=true))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        topic: &str,
        partition: i32,
        start: i64,
        end: Option<i64>,
        high_watermark: i64,
        replay: bool,
        sink_id: Option<&str>,
        verify_crc: bool,
    ) -> Self {
        let scan = PartitionScan::new(
            topic,
            partition,
            start,
            end,
            high_watermark,
            replay,
            sink_id,
        )
        .verify_crc(verify_crc);
        Self {
            scan: Some(scan),
            topic: PyString::new(py, topic).unbind(),
            partition,
        }
    }

    /// The offset to fetch next; `None` once the scan is complete.
    fn next_offset(&mut self) -> PyResult<Option<i64>> {
        Ok(self.scan()?.next_offset())
    }

    /// The Fetch request frame for the next offset.
    fn fetch_request<'py>(
        &mut self,
        py: Python<'py>,
        version: i16,
        correlation_id: i32,
        client_id: &str,
        max_bytes: i32,
        max_wait_ms: i32,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let partition = self.partition;
        let topic = self.topic.bind(py).to_str()?.to_owned();
        let offset = self.scan()?.next_offset().unwrap_or_default();
        let request = wire::fetch(&topic, partition, offset, max_bytes, max_wait_ms);
        let frame = wire::frame(&request, version, correlation_id, client_id)
            .map_err(|e| to_py_err(py, e))?;
        Ok(PyBytes::new(py, &frame))
    }

    /// Feeds a Fetch answer: `(error code, high watermark, batches)`; the batches (tuples as
    /// from `decode_record_batches`) only in mode `replay=False` without a sink id. A non-zero
    /// error code feeds nothing.
    fn feed<'py>(
        &mut self,
        py: Python<'py>,
        response: PyBackedBytes,
        version: i16,
        correlation_id: i32,
    ) -> PyResult<(i16, i64, Bound<'py, PyList>)> {
        let topic = self.topic.bind(py).to_str()?.to_owned();
        let partition = self.partition;
        let scan = self.scan()?;
        let data = shared(response);
        let fed = py.detach(|| {
            let answer = wire::response::<FetchRequest>(data, version, correlation_id)?;
            let part = wire::fetched(answer, &topic, partition)?;
            if part.error_code != 0 {
                return Ok((part.error_code, part.high_watermark, Vec::new()));
            }
            let batches = scan.feed(&part.records, part.high_watermark)?;
            Ok((0, part.high_watermark, batches))
        });
        let (error, high_watermark, batches) = fed.map_err(|e| to_py_err(py, e))?;
        let out = PyList::empty(py);
        for batch in batches {
            out.append(batch_tuple(py, &self.topic, partition, batch)?)?;
        }
        Ok((error, high_watermark, out))
    }

    /// What was read: `(fetches, bytes, batches, records)`.
    #[getter]
    fn stats(&mut self) -> PyResult<(u64, u64, u64, u64)> {
        let s = self.scan()?.stats;
        Ok((s.fetches, s.bytes, s.batches, s.records))
    }

    /// Ends the scan. Mode replay: `(committed, aborted, open, commit_markers, abort_markers,
    /// end_offset)` with `LogRecord` lists; mode witness: `(highest epoch, earliest timestamp
    /// of its records)` or `None`; mode batches: `None`.
    fn finish<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let scan = self
            .scan
            .take()
            .ok_or_else(|| pyo3::exceptions::PyRuntimeError::new_err("the scan is finished"))?;
        match py.detach(|| scan.finish()) {
            Finished::Batches => Ok(py.None().into_bound(py)),
            Finished::Witness(epoch) => Ok(epoch.into_pyobject(py)?.into_any()),
            Finished::Replay(outcome) => {
                let make = |list: Vec<(i64, Record)>| -> PyResult<Bound<'py, PyList>> {
                    let out = PyList::empty(py);
                    for (_, r) in list {
                        out.append(LogRecord::from_record(py, &self.topic, self.partition, r))?;
                    }
                    Ok(out)
                };
                let tuple = (
                    make(outcome.committed)?,
                    make(outcome.aborted)?,
                    make(outcome.open)?,
                    outcome.commit_markers,
                    outcome.abort_markers,
                    outcome.end_offset,
                );
                Ok(tuple.into_pyobject(py)?.into_any())
            }
        }
    }
}

/// One batch for `replay_batches`: `(control (0 abort, 1 commit, None: data), producer_id,
/// producer_epoch, transactional, base_offset, last_offset, [(offset, record), ...])`.
type PyBatch = (Option<i8>, i64, i16, bool, i64, i64, Vec<(i64, Py<PyAny>)>);

/// The committed-only replay (`kafka::replay`) of batches decoded earlier, whatever objects
/// stand for their records: `(committed, aborted, open, commit_markers, abort_markers,
/// end_offset)`.
#[pyfunction]
#[pyo3(signature = (batches, start_offset=0))]
#[allow(clippy::type_complexity)]
fn replay_batches(
    batches: Vec<PyBatch>,
    start_offset: i64,
) -> (
    Vec<Py<PyAny>>,
    Vec<Py<PyAny>>,
    Vec<Py<PyAny>>,
    Vec<i64>,
    Vec<i64>,
    i64,
) {
    let mut replay = Replay::new(start_offset);
    for (control, pid, epoch, transactional, base, last, records) in batches {
        match control {
            Some(kind) => {
                let kind = if kind == 1 {
                    ControlType::Commit
                } else {
                    ControlType::Abort
                };
                replay.control(base, last, pid, epoch, kind);
            }
            None => replay.data(pid, epoch, transactional, last, records),
        }
    }
    let out = replay.finish();
    let items = |list: Vec<(i64, Py<PyAny>)>| list.into_iter().map(|(_, r)| r).collect();
    (
        items(out.committed),
        items(out.aborted),
        items(out.open),
        out.commit_markers,
        out.abort_markers,
        out.end_offset,
    )
}

/// Registers `LogRecord`, `decode_record_batches`, `replay_batches` and `PartitionScan`.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<LogRecord>()?;
    m.add_function(wrap_pyfunction!(replay_batches, m)?)?;
    m.add_class::<PyPartitionScan>()?;
    m.add_function(wrap_pyfunction!(decode_record_batches, m)?)?;
    Ok(())
}
