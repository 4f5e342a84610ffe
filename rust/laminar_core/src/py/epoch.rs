//! `laminar.EpochTracker` and `laminar.EpochRecord`: the per-sink driver of the transaction state
//! machine, as every sink calls it.

use std::sync::OnceLock;
use std::time::Instant;

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};

use crate::error::CoreError;
use crate::protocol::epoch::{BeginDecision, DEFAULT_HISTORY_LIMIT, EpochRecord, EpochTracker};
use crate::protocol::state::InDoubtOutcome;
use crate::py::errors::to_py_err;
use crate::py::metrics::PyTransactionalSinkMetrics;
use crate::py::state::PyTransactionState;

/// Microseconds on the clock of Python's `time.monotonic_ns() // 1000`.
///
/// The core never reads a clock; the shell does when the caller passes no `now_us`. The first call
/// pairs Python's monotonic clock with a Rust `Instant` (both CLOCK_MONOTONIC on Linux), later calls
/// read only the `Instant`, which costs no Python call.
fn monotonic_us(py: Python<'_>) -> PyResult<u64> {
    static ORIGIN: OnceLock<(Instant, u64)> = OnceLock::new();
    let (instant, base_us) = match ORIGIN.get() {
        Some(origin) => *origin,
        None => {
            let ns: u64 = py.import("time")?.call_method0("monotonic_ns")?.extract()?;
            *ORIGIN.get_or_init(|| (Instant::now(), ns / 1_000))
        }
    };
    let elapsed = u64::try_from(instant.elapsed().as_micros()).unwrap_or(u64::MAX);
    Ok(base_us.saturating_add(elapsed))
}

pub(crate) fn now_or_clock(py: Python<'_>, now_us: Option<u64>) -> PyResult<u64> {
    match now_us {
        Some(t) => Ok(t),
        None => monotonic_us(py),
    }
}

/// One epoch's transaction: where it is or how it ended, what it wrote, and when.
#[pyclass(module = "laminar._core", name = "EpochRecord", frozen, eq)]
#[derive(Debug, Clone, PartialEq)]
pub struct PyEpochRecord(pub EpochRecord);

#[pymethods]
impl PyEpochRecord {
    #[getter]
    fn epoch(&self) -> i64 {
        self.0.epoch
    }

    #[getter]
    fn state(&self) -> &'static str {
        self.0.state.name()
    }

    #[getter]
    fn events_written(&self) -> u64 {
        self.0.events_written
    }

    #[getter]
    fn bytes_written(&self) -> u64 {
        self.0.bytes_written
    }

    #[getter]
    fn opened_at_us(&self) -> u64 {
        self.0.opened_at_us
    }

    #[getter]
    fn commit_started_at_us(&self) -> Option<u64> {
        self.0.commit_started_at_us
    }

    #[getter]
    fn completed_at_us(&self) -> Option<u64> {
        self.0.completed_at_us
    }

    #[getter]
    fn commit_latency_us(&self) -> Option<u64> {
        self.0.commit_latency_us()
    }

    #[getter]
    fn resolved_by_recovery(&self) -> bool {
        self.0.resolved_by_recovery
    }

    #[getter]
    fn is_completed(&self) -> bool {
        self.0.state.is_completed()
    }

    /// The record as a plain dict (attribute name → value).
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let r = &self.0;
        let d = PyDict::new(py);
        d.set_item("epoch", r.epoch)?;
        d.set_item("state", r.state.name())?;
        d.set_item("events_written", r.events_written)?;
        d.set_item("bytes_written", r.bytes_written)?;
        d.set_item("opened_at_us", r.opened_at_us)?;
        d.set_item("commit_started_at_us", r.commit_started_at_us)?;
        d.set_item("completed_at_us", r.completed_at_us)?;
        d.set_item("commit_latency_us", r.commit_latency_us())?;
        d.set_item("resolved_by_recovery", r.resolved_by_recovery)?;
        Ok(d)
    }

    fn __repr__(&self) -> String {
        let r = &self.0;
        let opt = |v: Option<u64>| v.map_or_else(|| "None".to_owned(), |v| v.to_string());
        format!(
            "EpochRecord(epoch={}, state='{}', events_written={}, bytes_written={}, \
             opened_at_us={}, commit_started_at_us={}, completed_at_us={}, \
             resolved_by_recovery={})",
            r.epoch,
            r.state.name(),
            r.events_written,
            r.bytes_written,
            r.opened_at_us,
            opt(r.commit_started_at_us),
            opt(r.completed_at_us),
            if r.resolved_by_recovery {
                "True"
            } else {
                "False"
            },
        )
    }
}

/// Drives one sink's transaction state machine; see `_core.pyi` for the protocol.
#[pyclass(module = "laminar._core", name = "EpochTracker")]
#[derive(Debug)]
pub struct PyEpochTracker {
    pub(crate) inner: EpochTracker,
    pub(crate) sink_id: Option<String>,
}

impl PyEpochTracker {
    /// Converts a core error through the one bridge, then records which sink and epoch it is about
    /// (`LaminarError.sink_id` / `.epoch`, shown by its `__str__`).
    fn err(&self, py: Python<'_>, e: CoreError, epoch: Option<i64>) -> PyErr {
        let err = to_py_err(py, e);
        let value = err.value(py);
        let epoch = epoch.or(self.inner.current_epoch());
        // Best effort: the error is raised either way.
        let _ = value.setattr("sink_id", self.sink_id.as_deref());
        let _ = value.setattr("epoch", epoch);
        err
    }

    fn check(&self, py: Python<'_>, r: Result<(), CoreError>, epoch: Option<i64>) -> PyResult<()> {
        r.map_err(|e| self.err(py, e, epoch))
    }
}

#[pymethods]
impl PyEpochTracker {
    #[new]
    #[pyo3(signature = (sink_id=None, *, last_committed_epoch=None, history_limit=DEFAULT_HISTORY_LIMIT))]
    #[pyo3(text_signature = "(sink_id=None, *, last_committed_epoch=None, history_limit=1024)")]
    fn new(
        py: Python<'_>,
        sink_id: Option<String>,
        last_committed_epoch: Option<i64>,
        history_limit: usize,
    ) -> PyResult<Self> {
        let mut this = Self {
            inner: EpochTracker::new(history_limit),
            sink_id,
        };
        let r = this.inner.set_last_committed_epoch(last_committed_epoch);
        this.check(py, r, last_committed_epoch)?;
        Ok(this)
    }

    /// Opens the transaction of `epoch`; False means it was already committed: skip it.
    #[pyo3(signature = (epoch, now_us=None))]
    fn begin(&mut self, py: Python<'_>, epoch: i64, now_us: Option<u64>) -> PyResult<bool> {
        let now = now_or_clock(py, now_us)?;
        match self.inner.begin(epoch, now) {
            Ok(BeginDecision::Write) => Ok(true),
            Ok(BeginDecision::SkipReplayed { .. }) => Ok(false),
            Err(e) => Err(self.err(py, e, Some(epoch))),
        }
    }

    /// Counts events and payload bytes written in the open transaction.
    #[pyo3(signature = (events, bytes=0))]
    fn record_write(&mut self, py: Python<'_>, events: u64, bytes: u64) -> PyResult<()> {
        let r = self.inner.record_write(events, bytes);
        self.check(py, r, None)
    }

    /// Active → Prepared.
    #[pyo3(signature = (*, epoch=None))]
    fn prepare(&mut self, py: Python<'_>, epoch: Option<i64>) -> PyResult<()> {
        let r = self.inner.prepare(epoch);
        self.check(py, r, epoch)
    }

    /// Active or Prepared → Committing.
    #[pyo3(signature = (now_us=None, *, epoch=None))]
    fn commit_started(
        &mut self,
        py: Python<'_>,
        now_us: Option<u64>,
        epoch: Option<i64>,
    ) -> PyResult<()> {
        let now = now_or_clock(py, now_us)?;
        let r = self.inner.commit_started(now, epoch);
        self.check(py, r, epoch)
    }

    /// Committing → Idle.
    #[pyo3(signature = (now_us=None))]
    fn commit_ok(&mut self, py: Python<'_>, now_us: Option<u64>) -> PyResult<()> {
        let now = now_or_clock(py, now_us)?;
        let r = self.inner.commit_ok(now);
        self.check(py, r, None)
    }

    /// Committing → Failed.
    fn commit_failed(&mut self, py: Python<'_>) -> PyResult<()> {
        let r = self.inner.commit_failed();
        self.check(py, r, None)
    }

    /// Active or Prepared → Aborting.
    #[pyo3(signature = (*, epoch=None))]
    fn abort_started(&mut self, py: Python<'_>, epoch: Option<i64>) -> PyResult<()> {
        let r = self.inner.abort_started(epoch);
        self.check(py, r, epoch)
    }

    /// Aborting → Idle.
    #[pyo3(signature = (now_us=None))]
    fn abort_ok(&mut self, py: Python<'_>, now_us: Option<u64>) -> PyResult<()> {
        let now = now_or_clock(py, now_us)?;
        let r = self.inner.abort_ok(now);
        self.check(py, r, None)
    }

    /// Aborting → Failed.
    fn abort_failed(&mut self, py: Python<'_>) -> PyResult<()> {
        let r = self.inner.abort_failed();
        self.check(py, r, None)
    }

    /// Failed → Idle, with recovery's verdict.
    #[pyo3(signature = (committed, now_us=None, *, epoch=None))]
    fn resolve(
        &mut self,
        py: Python<'_>,
        committed: bool,
        now_us: Option<u64>,
        epoch: Option<i64>,
    ) -> PyResult<()> {
        let now = now_or_clock(py, now_us)?;
        let resolution = if committed {
            InDoubtOutcome::Committed
        } else {
            InDoubtOutcome::Aborted
        };
        let r = self.inner.resolve(resolution, now, epoch);
        self.check(py, r, epoch)
    }

    #[getter]
    fn state(&self) -> PyTransactionState {
        PyTransactionState(self.inner.state())
    }

    #[getter]
    fn current_epoch(&self) -> Option<i64> {
        self.inner.current_epoch()
    }

    #[getter]
    fn last_committed_epoch(&self) -> Option<i64> {
        self.inner.last_committed_epoch()
    }

    #[setter]
    fn set_last_committed_epoch(&mut self, py: Python<'_>, epoch: Option<i64>) -> PyResult<()> {
        let r = self.inner.set_last_committed_epoch(epoch);
        self.check(py, r, epoch)
    }

    #[getter]
    fn sink_id(&self) -> Option<&str> {
        self.sink_id.as_deref()
    }

    #[getter]
    fn history_limit(&self) -> usize {
        self.inner.history_limit()
    }

    /// The kept epoch records, oldest first.
    fn records(&self) -> Vec<PyEpochRecord> {
        self.inner
            .records()
            .map(|r| PyEpochRecord(r.clone()))
            .collect()
    }

    /// The most recent record of `epoch`, if still kept.
    fn record(&self, epoch: i64) -> Option<PyEpochRecord> {
        self.inner.record(epoch).map(|r| PyEpochRecord(r.clone()))
    }

    /// A snapshot of the counters and commit-latency statistics.
    fn metrics(&self) -> PyTransactionalSinkMetrics {
        PyTransactionalSinkMetrics(self.inner.metrics())
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let sink = match self.sink_id.as_deref() {
            Some(s) => PyString::new(py, s).repr()?.to_string(),
            None => "None".to_owned(),
        };
        let last = self
            .inner
            .last_committed_epoch()
            .map_or_else(|| "None".to_owned(), |e| e.to_string());
        Ok(format!(
            "EpochTracker(sink_id={sink}, state={}, last_committed_epoch={last})",
            PyTransactionState(self.inner.state()).repr()
        ))
    }
}

/// Registers `EpochTracker` and `EpochRecord`.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyEpochTracker>()?;
    m.add_class::<PyEpochRecord>()
}
