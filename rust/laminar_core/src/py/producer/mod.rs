//! `TransactionalProducer`: the Kafka sink's transactional producer, on librdkafka's C API in the
//! library confluent-kafka loaded (`ffi`), one handle each (`handle`). Its methods are the ones of
//! confluent-kafka's `Producer` the sink calls, with the same errors (`KafkaException` of a
//! `KafkaError` carrying librdkafka's fatal / retriable / abort flags, `BufferError` for a full
//! queue), so `laminar.kafka._errors.classify` stays the one classification; and `produce_arrow`,
//! which encodes an Arrow batch and hands every record to librdkafka without the GIL and without
//! a Python object per record (docs/kafka.md, "Producing").

mod ffi;
mod handle;

use std::ffi::{CString, c_int};
use std::mem::ManuallyDrop;
use std::time::{Duration, Instant};

use arrow_array::RecordBatch;
use pyo3::exceptions::{PyBufferError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple};

use super::serialize::plan_kafka_input;
use std::sync::mpsc;

use crate::serialize::kafka::{KafkaEncoder, RecordChunk};
use handle::{CallError, Handle, Header, Record, Reports};

static KAFKA_ERROR: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
static KAFKA_EXCEPTION: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

fn confluent<'py>(
    py: Python<'py>,
    cell: &PyOnceLock<Py<PyAny>>,
    name: &str,
) -> PyResult<Bound<'py, PyAny>> {
    cell.get_or_try_init(py, || {
        Ok(py.import("confluent_kafka")?.getattr(name)?.unbind())
    })
    .map(|c| c.bind(py).clone())
}

/// confluent-kafka's `KafkaError` for an error of librdkafka.
fn kafka_error<'py>(py: Python<'py>, e: &CallError) -> PyResult<Bound<'py, PyAny>> {
    let kwargs = PyDict::new(py);
    kwargs.set_item("fatal", e.fatal)?;
    kwargs.set_item("retriable", e.retriable)?;
    kwargs.set_item("txn_requires_abort", e.txn_requires_abort)?;
    confluent(py, &KAFKA_ERROR, "KafkaError")?.call((e.code, e.reason.as_str()), Some(&kwargs))
}

/// The `KafkaException` (or, for a full queue, the `BufferError`) confluent-kafka raises.
fn raise(py: Python<'_>, e: &CallError) -> PyErr {
    if e.code == ffi::ERR_QUEUE_FULL {
        return PyBufferError::new_err(e.reason.clone());
    }
    match kafka_error(py, e)
        .and_then(|err| confluent(py, &KAFKA_EXCEPTION, "KafkaException")?.call1((err,)))
    {
        Ok(exc) => PyErr::from_value(exc),
        Err(err) => err,
    }
}

/// A time-out in seconds as librdkafka's milliseconds (negative or None: wait forever).
fn millis(timeout_s: Option<f64>) -> c_int {
    match timeout_s {
        Some(s) if s >= 0.0 => (s * 1000.0).min(f64::from(c_int::MAX)) as c_int,
        _ => -1,
    }
}

/// A flush's wait: `timeout` seconds, or (None, negative, too large to count) as long as it
/// takes.
fn flush_wait(timeout: Option<f64>) -> Duration {
    const FOREVER: Duration = Duration::from_secs(u32::MAX as u64);
    match timeout {
        Some(s) if s >= 0.0 => Duration::try_from_secs_f64(s).map_or(FOREVER, |d| d.min(FOREVER)),
        _ => FOREVER,
    }
}

fn cstring(what: &str, value: String) -> PyResult<CString> {
    CString::new(value)
        .map_err(|_| PyValueError::new_err(format!("{what} contains a NUL character")))
}

/// A record's bytes: `bytes`, `str` (UTF-8) or None.
fn payload(value: &Bound<'_, PyAny>) -> PyResult<Option<Vec<u8>>> {
    if value.is_none() {
        Ok(None)
    } else if let Ok(b) = value.cast::<PyBytes>() {
        Ok(Some(b.as_bytes().to_vec()))
    } else if let Ok(s) = value.cast::<PyString>() {
        Ok(Some(s.to_str()?.as_bytes().to_vec()))
    } else {
        Err(PyTypeError::new_err(format!(
            "a record's key and value are bytes, str or None, not {}",
            value.get_type().name()?
        )))
    }
}

/// Headers as a list of `(name, value)` (value bytes, str or None), or a dict.
fn header_list(headers: Option<&Bound<'_, PyAny>>) -> PyResult<Vec<Header>> {
    let Some(headers) = headers.filter(|h| !h.is_none()) else {
        return Ok(Vec::new());
    };
    let items: Vec<Bound<'_, PyAny>> = match headers.cast::<PyDict>() {
        Ok(d) => d.items().iter().collect(),
        Err(_) => headers.try_iter()?.collect::<PyResult<_>>()?,
    };
    items
        .iter()
        .map(|item| {
            let (name, value): (String, Bound<'_, PyAny>) = item.extract()?;
            Ok((cstring("a header name", name)?, payload(&value)?))
        })
        .collect()
}

/// A record encoded beforehand: `bytes` or None.
fn record_bytes(item: Bound<'_, PyAny>) -> PyResult<Option<Bound<'_, PyBytes>>> {
    if item.is_none() {
        return Ok(None);
    }
    item.cast_into::<PyBytes>()
        .map(Some)
        .map_err(|_| PyTypeError::new_err("records are bytes or None"))
}

/// A refused record: librdkafka's error and the record (its offset in the call's rows).
type Refusal = (Py<PyAny>, usize, Option<Py<PyBytes>>, usize);

/// What `produce_encoded` did: the records handed over, their payload bytes, and the first one
/// librdkafka refused.
struct Produced {
    rows: usize,
    bytes: usize,
    refused: Option<Refused>,
}

/// A record librdkafka refused, for the sink's error (row, key, size).
struct Refused {
    error: CallError,
    row: usize,
    key: Option<Vec<u8>>,
    value_size: usize,
}

/// Encodes every row of `encoder` chunk by chunk (about 1 MiB each, two buffers reused) and
/// hands each record to librdkafka: the hot path of `produce_arrow`, run without the GIL. A slice
/// of more than one chunk is encoded on a second thread while this one hands the previous chunk
/// over (encoding is about a third of the work: docs/serialization.md, "Performance").
fn produce_encoded(
    handle: &Handle,
    mut encoder: KafkaEncoder,
    topic: &CString,
    headers: &[Header],
    deadline: Instant,
) -> crate::error::CoreResult<Produced> {
    let mut produced = Produced {
        rows: 0,
        bytes: 0,
        refused: None,
    };
    let mut args = Vec::with_capacity(5 + headers.len());
    let mut first = encoder.new_chunk();
    if !encoder.next_chunk(&mut first)? {
        return Ok(produced);
    }
    // the first chunk is encoded while the coordinator completes the last transaction: what is
    // left of SETTLE after it is waited out here, before its first record
    if let Some(left) = handle.settle() {
        std::thread::sleep(left);
    }
    if encoder.is_done() {
        hand_over(
            handle,
            &first,
            &mut args,
            topic,
            headers,
            deadline,
            &mut produced,
        );
        return Ok(produced);
    }
    std::thread::scope(|scope| {
        let (full_tx, full_rx) = mpsc::sync_channel::<crate::error::CoreResult<RecordChunk>>(1);
        let (empty_tx, empty_rx) = mpsc::sync_channel::<RecordChunk>(1);
        let _ = empty_tx.send(encoder.new_chunk());
        scope.spawn(move || {
            while let Ok(mut chunk) = empty_rx.recv() {
                let next = match encoder.next_chunk(&mut chunk) {
                    Ok(true) => Ok(chunk),
                    Ok(false) => break,
                    Err(e) => Err(e),
                };
                let failed = next.is_err();
                if full_tx.send(next).is_err() || failed {
                    break;
                }
            }
        });
        let mut chunk = first;
        loop {
            hand_over(
                handle,
                &chunk,
                &mut args,
                topic,
                headers,
                deadline,
                &mut produced,
            );
            if produced.refused.is_some() {
                return Ok(produced); // dropping the channels ends the encoder
            }
            let _ = empty_tx.send(chunk);
            match full_rx.recv() {
                Ok(next) => chunk = next?,
                Err(_) => return Ok(produced), // the encoder is done
            }
        }
    })
}

/// Hands one chunk's records to librdkafka, counting them into `produced`; stops at the first
/// one refused (recorded in `produced.refused`).
fn hand_over(
    handle: &Handle,
    chunk: &RecordChunk,
    args: &mut Vec<ffi::rd_kafka_vu_t>,
    topic: &CString,
    headers: &[Header],
    deadline: Instant,
    produced: &mut Produced,
) {
    for i in 0..chunk.values.len() {
        let value = chunk.values.get(i);
        let key = chunk.keys.as_ref().and_then(|k| k.get(i));
        let record = Record {
            topic,
            partition: -1,
            key,
            value,
            headers,
        };
        if let Err(error) = handle.produce(args, &record, Some(deadline)) {
            produced.refused = Some(Refused {
                error,
                row: produced.rows,
                key: key.map(<[u8]>::to_vec),
                value_size: value.map_or(0, <[u8]>::len),
            });
            return;
        }
        produced.rows += 1;
        produced.bytes += value.map_or(0, <[u8]>::len) + key.map_or(0, <[u8]>::len);
    }
}

/// What confluent-kafka takes besides librdkafka's properties, read out of the configuration.
#[derive(Default)]
struct Callables {
    error_cb: Option<Py<PyAny>>,
    stats_cb: Option<Py<PyAny>>,
    on_delivery: Option<Py<PyAny>>,
    logger: Option<Py<PyAny>>,
    oauth_cb: Option<Py<PyAny>>,
}

fn read_config(config: &Bound<'_, PyDict>) -> PyResult<(Vec<(CString, CString)>, Callables)> {
    let mut settings = Vec::new();
    let mut callables = Callables::default();
    let put = |key: String,
               value: &Bound<'_, PyAny>,
               settings: &mut Vec<(CString, CString)>|
     -> PyResult<()> {
        if value.is_none() {
            return Ok(());
        }
        let text = if let Ok(b) = value.extract::<bool>() {
            if value.is_instance_of::<pyo3::types::PyBool>() {
                (if b { "true" } else { "false" }).to_string()
            } else {
                value.str()?.to_string()
            }
        } else {
            value.str()?.to_string()
        };
        settings.push((cstring("a setting", key.clone())?, cstring(&key, text)?));
        Ok(())
    };
    for (key, value) in config.iter() {
        let key: String = key
            .extract()
            .map_err(|_| PyTypeError::new_err("configuration keys must be strings"))?;
        let callable = |v: &Bound<'_, PyAny>| -> PyResult<Option<Py<PyAny>>> {
            if v.is_none() {
                return Ok(None);
            }
            if !v.is_callable() {
                return Err(PyTypeError::new_err(format!("{key} must be a callable")));
            }
            Ok(Some(v.clone().unbind()))
        };
        match key.as_str() {
            "error_cb" => callables.error_cb = callable(&value)?,
            "stats_cb" => callables.stats_cb = callable(&value)?,
            "on_delivery" | "delivery.report.callback" => callables.on_delivery = callable(&value)?,
            "oauth_cb" => callables.oauth_cb = callable(&value)?,
            "logger" => callables.logger = (!value.is_none()).then(|| value.clone().unbind()),
            "throttle_cb" => {
                return Err(PyValueError::new_err(
                    "throttle_cb is not supported by Laminar's producer (docs/kafka.md, \
                     \"Producing\"); remove it",
                ));
            }
            "default.topic.config" => {
                let topic = value
                    .cast::<PyDict>()
                    .map_err(|_| PyTypeError::new_err("default.topic.config must be a dict"))?;
                for (k, v) in topic.iter() {
                    put(k.extract()?, &v, &mut settings)?;
                }
            }
            _ => put(key, &value, &mut settings)?,
        }
    }
    if callables.logger.is_some() {
        settings.push((c"log.queue".into(), c"true".into()));
    }
    Ok((settings, callables))
}

/// A record's delivery report as `on_delivery` receives it (confluent-kafka's `Message` methods
/// the sink and most callbacks use).
#[pyclass(module = "laminar._core", name = "DeliveredRecord", frozen)]
pub struct PyDeliveredRecord {
    topic: String,
    partition: i32,
    offset: i64,
    key: Option<Py<PyBytes>>,
    value: Option<Py<PyBytes>>,
}

#[pymethods]
impl PyDeliveredRecord {
    fn topic(&self) -> &str {
        &self.topic
    }
    fn partition(&self) -> i32 {
        self.partition
    }
    fn offset(&self) -> i64 {
        self.offset
    }
    fn key(&self, py: Python<'_>) -> Option<Py<PyBytes>> {
        self.key.as_ref().map(|k| k.clone_ref(py))
    }
    fn value(&self, py: Python<'_>) -> Option<Py<PyBytes>> {
        self.value.as_ref().map(|v| v.clone_ref(py))
    }
    fn __len__(&self, py: Python<'_>) -> usize {
        self.value
            .as_ref()
            .map_or(0, |v| v.bind(py).as_bytes().len())
    }
    fn __repr__(&self) -> String {
        format!(
            "DeliveredRecord(topic={:?}, partition={}, offset={})",
            self.topic, self.partition, self.offset
        )
    }
}

/// The Kafka sink's transactional producer (see the module's docs and `_core.pyi`).
#[pyclass(module = "laminar._core", name = "TransactionalProducer", frozen)]
pub struct PyProducer {
    handle: ManuallyDrop<Handle>,
    callables: Callables,
}

impl Drop for PyProducer {
    fn drop(&mut self) {
        // SAFETY: taken once, here; never used again.
        let handle = unsafe { ManuallyDrop::take(&mut self.handle) };
        // Destroying waits for librdkafka's threads, one of which may be waiting for the GIL
        // (an oauth_cb): destroy without it.
        Python::attach(|py| py.detach(move || drop(handle)));
    }
}

impl PyProducer {
    /// Hands what the callbacks queued to the Python callables, in this thread (as
    /// confluent-kafka's `poll`/`flush` do); the first exception a callable raised is raised.
    fn dispatch(&self, py: Python<'_>) -> PyResult<()> {
        let Reports {
            deliveries,
            errors,
            stats,
            logs,
        } = self.handle.shared().take();
        let mut first: Option<PyErr> = None;
        let mut keep = |r: PyResult<Bound<'_, PyAny>>| {
            if let Err(e) = r {
                first.get_or_insert(e);
            }
        };
        if let Some(logger) = &self.callables.logger {
            for (level, facility, line) in logs {
                let level = match level {
                    0..=2 => 50,
                    3 => 40,
                    4 => 30,
                    5 | 6 => 20,
                    _ => 10,
                };
                keep(
                    logger
                        .bind(py)
                        .call_method1("log", (level, "%s: %s", facility, line)),
                );
            }
        }
        for e in &errors {
            let error = CallError {
                code: e.code,
                reason: e.reason.clone(),
                fatal: e.fatal,
                retriable: false,
                txn_requires_abort: false,
            };
            if let Some(cb) = &self.callables.error_cb {
                keep(kafka_error(py, &error).and_then(|err| cb.bind(py).call1((err,))));
            }
        }
        if let (Some(cb), Some(json)) = (&self.callables.stats_cb, stats) {
            keep(cb.bind(py).call1((json,)));
        }
        if let Some(cb) = &self.callables.on_delivery {
            for d in deliveries {
                let error = if d.code == ffi::ERR_NO_ERROR {
                    Ok(py.None().into_bound(py))
                } else {
                    kafka_error(py, &CallError::plain(d.code, d.reason))
                };
                let record = PyDeliveredRecord {
                    topic: d.topic,
                    partition: d.partition,
                    offset: d.offset,
                    key: d.key.map(|k| PyBytes::new(py, &k).unbind()),
                    value: d.value.map(|v| PyBytes::new(py, &v).unbind()),
                };
                keep(error.and_then(|err| cb.bind(py).call1((err, record))));
            }
        }
        first.map_or(Ok(()), Err)
    }

    /// Runs a transactional call without the GIL, then dispatches what it reported.
    fn call(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&Handle) -> Result<(), CallError> + Send,
    ) -> PyResult<()> {
        let handle: &Handle = &self.handle;
        let result = py.detach(|| f(handle));
        self.dispatch(py)?;
        result.map_err(|e| raise(py, &e))
    }
}

#[pymethods]
impl PyProducer {
    #[new]
    fn new(py: Python<'_>, config: &Bound<'_, PyDict>) -> PyResult<Self> {
        let api = ffi::api(|| {
            py.import("confluent_kafka.cimpl")
                .and_then(|m| m.getattr("__file__"))
                .and_then(|f| f.extract::<String>())
                .map_err(|e| format!("confluent_kafka.cimpl could not be found: {e}"))
        })
        .map_err(|why| {
            super::errors::to_py_err(
                py,
                crate::error::CoreError::Config(format!("Laminar's Kafka producer: {why}")),
            )
        })?;
        let (settings, callables) = read_config(config)?;
        let oauth = callables.oauth_cb.as_ref().map(|c| c.clone_ref(py));
        let logging = callables.logger.is_some();
        let handle = py
            .detach(|| Handle::new(api, &settings, oauth, logging))
            .map_err(|e| raise(py, &e))?;
        Ok(Self {
            handle: ManuallyDrop::new(handle),
            callables,
        })
    }

    /// librdkafka's version (of the library confluent-kafka loaded).
    #[staticmethod]
    fn librdkafka_version(py: Python<'_>) -> PyResult<String> {
        let api = ffi::api(|| {
            py.import("confluent_kafka.cimpl")
                .and_then(|m| m.getattr("__file__"))
                .and_then(|f| f.extract::<String>())
                .map_err(|e| e.to_string())
        })
        .map_err(PyValueError::new_err)?;
        Ok(api.version_str())
    }

    #[pyo3(signature = (timeout = None))]
    fn init_transactions(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<()> {
        let ms = millis(timeout);
        self.call(py, |h| h.init_transactions(ms))
    }

    fn begin_transaction(&self, py: Python<'_>) -> PyResult<()> {
        self.call(py, Handle::begin_transaction)
    }

    #[pyo3(signature = (positions, group_id, timeout = None))]
    fn send_offsets_to_transaction(
        &self,
        py: Python<'_>,
        positions: Vec<(String, i32, i64)>,
        group_id: String,
        timeout: Option<f64>,
    ) -> PyResult<()> {
        let positions = positions
            .into_iter()
            .map(|(t, p, o)| Ok((cstring("a topic", t)?, p, o)))
            .collect::<PyResult<Vec<_>>>()?;
        let group = cstring("a group id", group_id)?;
        let ms = millis(timeout);
        self.call(py, |h| {
            if let Some(left) = h.settle() {
                std::thread::sleep(left);
            }
            h.send_offsets(&positions, &group, ms)
        })
    }

    #[pyo3(signature = (timeout = None))]
    fn commit_transaction(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<()> {
        let ms = millis(timeout);
        self.call(py, |h| h.commit_transaction(ms))
    }

    #[pyo3(signature = (timeout = None))]
    fn abort_transaction(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<()> {
        let ms = millis(timeout);
        self.call(py, |h| h.abort_transaction(ms))
    }

    /// One record, as confluent-kafka's `produce` (positional order included); per-record
    /// callbacks and timestamps are not supported.
    #[pyo3(signature = (topic, value = None, key = None, partition = -1, callback = None, on_delivery = None, timestamp = 0, headers = None))]
    #[allow(clippy::too_many_arguments)]
    fn produce(
        &self,
        py: Python<'_>,
        topic: String,
        value: Option<&Bound<'_, PyAny>>,
        key: Option<&Bound<'_, PyAny>>,
        partition: i32,
        callback: Option<&Bound<'_, PyAny>>,
        on_delivery: Option<&Bound<'_, PyAny>>,
        timestamp: i64,
        headers: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        if callback.is_some_and(|c| !c.is_none())
            || on_delivery.is_some_and(|c| !c.is_none())
            || timestamp != 0
        {
            return Err(PyValueError::new_err(
                "Laminar's producer takes no per-record callback or timestamp",
            ));
        }
        let topic = cstring("a topic", topic)?;
        let value = value.map(payload).transpose()?.flatten();
        let key = key.map(payload).transpose()?.flatten();
        let headers = header_list(headers)?;
        if let Some(left) = self.handle.settle() {
            py.detach(|| std::thread::sleep(left));
        }
        let mut args = Vec::with_capacity(8);
        let record = Record {
            topic: &topic,
            partition,
            key: key.as_deref(),
            value: value.as_deref(),
            headers: &headers,
        };
        self.handle
            .produce(&mut args, &record, None)
            .map_err(|e| raise(py, &e))
    }

    /// Encodes `data` (Arrow: a RecordBatch or Table slice) as the sink's records and hands each
    /// to librdkafka, without the GIL: the epoch's `headers` on each, partition chosen by the
    /// configured partitioner. A full queue is waited on (serving delivery reports) for up to
    /// `timeout` seconds. Returns `(records, payload_bytes, refused)`; `refused` is None or
    /// `(KafkaError, row, key, value_size)` for the first record librdkafka refused (the rows
    /// before it were produced).
    #[pyo3(signature = (data, *, topic, headers, value_format = "json", key = None, value_column = None, timeout = 60.0))]
    #[allow(clippy::too_many_arguments)]
    fn produce_arrow(
        &self,
        py: Python<'_>,
        data: &Bound<'_, PyAny>,
        topic: String,
        headers: Option<&Bound<'_, PyAny>>,
        value_format: &str,
        key: Option<String>,
        value_column: Option<String>,
        timeout: f64,
    ) -> PyResult<(usize, usize, Option<Refusal>)> {
        let (plan, batches) = plan_kafka_input(py, data, value_format, key, value_column)?;
        let topic = cstring("a topic", topic)?;
        let headers = header_list(headers)?;
        let handle: &Handle = &self.handle;
        let deadline = Instant::now() + Duration::from_secs_f64(timeout.max(0.0));
        let outcome = py.detach(move || {
            let batches = batches
                .into_iter()
                .filter(|b: &RecordBatch| b.num_rows() > 0);
            produce_encoded(
                handle,
                KafkaEncoder::new(plan, batches.collect()),
                &topic,
                &headers,
                deadline,
            )
        });
        let outcome = outcome.map_err(|e| super::errors::to_py_err(py, e));
        self.dispatch(py)?;
        let Produced {
            rows,
            bytes,
            refused,
        } = outcome?;
        let refused = match refused {
            Some(r) => Some((
                kafka_error(py, &r.error)?.unbind(),
                r.row,
                r.key.map(|k| PyBytes::new(py, &k).unbind()),
                r.value_size,
            )),
            None => None,
        };
        Ok((rows, bytes, refused))
    }

    /// Hands records encoded beforehand (lists of bytes or None, as `encode_kafka` and the
    /// Avro encoder return them) to librdkafka, to `topic` with `headers`, as `produce_arrow`
    /// does: the same result.
    #[pyo3(signature = (values, keys, *, topic, headers, timeout = 60.0))]
    fn produce_records(
        &self,
        py: Python<'_>,
        values: &Bound<'_, PyList>,
        keys: Option<&Bound<'_, PyList>>,
        topic: String,
        headers: Option<&Bound<'_, PyAny>>,
        timeout: f64,
    ) -> PyResult<(usize, usize, Option<Refusal>)> {
        if keys.is_some_and(|k| k.len() != values.len()) {
            return Err(PyValueError::new_err("values and keys differ in length"));
        }
        let topic = cstring("a topic", topic)?;
        let headers = header_list(headers)?;
        if let Some(left) = self.handle.settle() {
            py.detach(|| std::thread::sleep(left));
        }
        let deadline = Instant::now() + Duration::from_secs_f64(timeout.max(0.0));
        let mut args = Vec::with_capacity(5 + headers.len());
        let (mut rows, mut bytes) = (0usize, 0usize);
        let mut refused = None;
        for i in 0..values.len() {
            let value = record_bytes(values.get_item(i)?)?;
            let key = match keys {
                Some(k) => record_bytes(k.get_item(i)?)?,
                None => None,
            };
            let (v, k) = (
                value.as_ref().map(|b| b.as_bytes()),
                key.as_ref().map(|b| b.as_bytes()),
            );
            let record = Record {
                topic: &topic,
                partition: -1,
                key: k,
                value: v,
                headers: &headers,
            };
            if let Err(e) = self.handle.produce(&mut args, &record, Some(deadline)) {
                refused = Some((
                    kafka_error(py, &e)?.unbind(),
                    rows,
                    key.map(Bound::unbind),
                    v.map_or(0, <[u8]>::len),
                ));
                break;
            }
            rows += 1;
            bytes += v.map_or(0, <[u8]>::len) + k.map_or(0, <[u8]>::len);
        }
        self.dispatch(py)?;
        Ok((rows, bytes, refused))
    }

    /// Serves queued callbacks for up to `timeout` seconds; the number of events served.
    #[pyo3(signature = (timeout = None))]
    fn poll(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<i32> {
        let handle: &Handle = &self.handle;
        let ms = millis(timeout);
        let served = py.detach(|| handle.poll(ms));
        self.dispatch(py)?;
        Ok(served)
    }

    /// Waits up to `timeout` seconds for every record to be acknowledged; the number left.
    #[pyo3(signature = (timeout = None))]
    fn flush(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<i32> {
        let handle: &Handle = &self.handle;
        let wait = flush_wait(timeout);
        let left = py.detach(|| handle.flush(wait));
        self.dispatch(py)?;
        Ok(left)
    }

    /// Drops queued and/or in-flight records (their reports say purged).
    #[pyo3(signature = (in_queue = true, in_flight = true, blocking = true))]
    fn purge(&self, py: Python<'_>, in_queue: bool, in_flight: bool, blocking: bool) {
        let mut flags = 0;
        if in_queue {
            flags |= ffi::PURGE_F_QUEUE;
        }
        if in_flight {
            flags |= ffi::PURGE_F_INFLIGHT;
        }
        if !blocking {
            flags |= ffi::PURGE_F_NON_BLOCKING;
        }
        let handle: &Handle = &self.handle;
        py.detach(|| handle.purge(flags));
    }

    /// The cluster's topics: `{name: (partitions, KafkaError or None)}` (never creates one).
    #[pyo3(signature = (timeout = None))]
    fn list_topics<'py>(
        &self,
        py: Python<'py>,
        timeout: Option<f64>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let handle: &Handle = &self.handle;
        let ms = millis(timeout);
        let topics = py.detach(|| handle.topics(ms));
        self.dispatch(py)?;
        let topics = topics.map_err(|e| raise(py, &e))?;
        let out = PyDict::new(py);
        for (name, partitions, code) in topics {
            let error = if code == ffi::ERR_NO_ERROR {
                py.None().into_bound(py)
            } else {
                kafka_error(py, &CallError::plain(code, String::new()))?
            };
            out.set_item(
                name,
                PyTuple::new(py, [partitions.into_pyobject(py)?.into_any(), error])?,
            )?;
        }
        Ok(out)
    }

    /// Whether an OAUTHBEARER token was set by `oauth_cb` (always False without one).
    #[getter]
    fn token_set(&self) -> bool {
        self.handle
            .shared()
            .token_set
            .load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Records not acknowledged yet, and the callbacks and events waiting for a poll.
    fn __len__(&self) -> usize {
        self.handle.queued().max(0) as usize
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyProducer>()?;
    m.add_class::<PyDeliveredRecord>()?;
    Ok(())
}
