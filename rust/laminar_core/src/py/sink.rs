//! `laminar.SinkTransaction` and `laminar.SinkAnswer`: the core's machine of one sink's own
//! transaction (`protocol::sink`), sharing its tracker with the sink's `EpochTracker` object.

use pyo3::prelude::*;

use crate::error::{CoreError, CoreResult};
use crate::protocol::epoch::EpochTracker;
use crate::protocol::sink::evidence::{self, History, LastCommitted};
use crate::protocol::sink::{
    AbortAnswer, AbortFailure, BeginAnswer, Client, CloseAnswer, CommitAnswer, CommitFailure,
    Decision, RecoverAnswer, SinkTxn,
};
use crate::py::epoch::{PyEpochTracker, now_or_clock};
use crate::py::errors::to_py_err;

/// One answer of the machine: `kind` says what to do, the other fields are None (or False) when
/// the kind does not use them.
#[pyclass(module = "laminar._core", name = "SinkAnswer", frozen, get_all)]
#[derive(Debug, Clone)]
pub struct PySinkAnswer {
    kind: &'static str,
    epoch: Option<i64>,
    last: Option<i64>,
    older: bool,
    commit: bool,
}

impl PySinkAnswer {
    fn of(kind: &'static str) -> Self {
        Self {
            kind,
            epoch: None,
            last: None,
            older: false,
            commit: false,
        }
    }

    fn begin(a: BeginAnswer) -> Self {
        match a {
            BeginAnswer::Recover => Self::of("recover"),
            BeginAnswer::Open => Self::of("open"),
            BeginAnswer::Skip { last, older } => Self {
                last: Some(last),
                older,
                ..Self::of("skip")
            },
        }
    }
}

#[pymethods]
impl PySinkAnswer {
    fn __repr__(&self) -> String {
        format!(
            "SinkAnswer(kind={:?}, epoch={:?}, last={:?}, older={}, commit={})",
            self.kind, self.epoch, self.last, self.older, self.commit
        )
    }
}

/// The machine of one sink's transaction; see `_core.pyi` for the calls and their answers.
#[pyclass(module = "laminar._core", name = "SinkTransaction")]
#[derive(Debug)]
pub struct PySinkTransaction {
    tracker: Py<PyEpochTracker>,
    core: SinkTxn,
}

impl PySinkTransaction {
    /// Runs `f` on the machine holding the shared tracker (moved in for the call, moved back
    /// after), so `sink.tracker` shows every transition. A refusal names the sink and `epoch`
    /// (the open epoch when `epoch` is None and `or_open`).
    fn with<T>(
        &mut self,
        py: Python<'_>,
        epoch: Option<i64>,
        or_open: bool,
        f: impl FnOnce(&mut SinkTxn) -> CoreResult<T>,
    ) -> PyResult<T> {
        let mut shared = self.tracker.bind(py).borrow_mut();
        std::mem::swap(&mut shared.inner, self.core.tracker_mut());
        let result = f(&mut self.core);
        std::mem::swap(&mut shared.inner, self.core.tracker_mut());
        let sink_id = shared.sink_id.clone();
        let open = shared.inner.current_epoch();
        drop(shared);
        result.map_err(|e| {
            let epoch = if or_open { epoch.or(open) } else { epoch };
            refusal(py, e, sink_id.as_deref(), epoch)
        })
    }

    fn read<T>(&mut self, py: Python<'_>, f: impl FnOnce(&SinkTxn) -> T) -> PyResult<T> {
        self.with(py, None, false, |m| Ok(f(m)))
    }
}

fn refusal(py: Python<'_>, e: CoreError, sink_id: Option<&str>, epoch: Option<i64>) -> PyErr {
    let err = to_py_err(py, e);
    let value = err.value(py);
    // Best effort: the error is raised either way.
    let _ = value.setattr("sink_id", sink_id);
    let _ = value.setattr("epoch", epoch);
    err
}

#[pymethods]
impl PySinkTransaction {
    #[new]
    #[pyo3(signature = (tracker, *, participant=None, durable_prepare=true))]
    fn new(tracker: Py<PyEpochTracker>, participant: Option<i64>, durable_prepare: bool) -> Self {
        Self {
            tracker,
            // A placeholder: the shared tracker is moved in for each call.
            core: SinkTxn::new(EpochTracker::new(1), participant).durable_prepare(durable_prepare),
        }
    }

    #[getter]
    fn tracker(&self, py: Python<'_>) -> Py<PyEpochTracker> {
        self.tracker.clone_ref(py)
    }

    #[getter]
    fn between_epochs(&mut self, py: Python<'_>) -> PyResult<bool> {
        self.read(py, SinkTxn::between_epochs)
    }

    #[getter]
    fn in_doubt(&mut self, py: Python<'_>) -> PyResult<Option<i64>> {
        self.read(py, SinkTxn::in_doubt)
    }

    #[getter]
    fn writing(&mut self, py: Python<'_>) -> PyResult<Option<i64>> {
        self.read(py, SinkTxn::writing)
    }

    #[getter]
    fn prepared_epoch(&mut self, py: Python<'_>) -> PyResult<Option<i64>> {
        self.read(py, SinkTxn::prepared_epoch)
    }

    fn init(&mut self, py: Python<'_>) -> PyResult<()> {
        self.with(py, None, false, |m| m.init())
    }

    fn learned_last(&mut self, py: Python<'_>, last: Option<i64>) -> PyResult<()> {
        self.with(py, last, false, |m| m.learned_last(last))
    }

    fn begin(&mut self, py: Python<'_>, epoch: i64) -> PyResult<PySinkAnswer> {
        self.with(py, Some(epoch), false, |m| m.begin(epoch))
            .map(PySinkAnswer::begin)
    }

    #[pyo3(signature = (epoch, now_us=None))]
    fn opened(&mut self, py: Python<'_>, epoch: i64, now_us: Option<u64>) -> PyResult<()> {
        let now = now_or_clock(py, now_us)?;
        self.with(py, Some(epoch), false, |m| m.opened(epoch, now))
    }

    fn store_holds(
        &mut self,
        py: Python<'_>,
        epoch: i64,
        last: Option<i64>,
    ) -> PyResult<PySinkAnswer> {
        self.with(py, Some(epoch), false, |m| m.store_holds(epoch, last))
            .map(PySinkAnswer::begin)
    }

    fn write(&mut self, py: Python<'_>) -> PyResult<i64> {
        self.with(py, None, false, |m| m.write())
    }

    #[pyo3(signature = (events, bytes=0))]
    fn wrote(&mut self, py: Python<'_>, events: u64, bytes: u64) -> PyResult<()> {
        self.with(py, None, true, |m| m.wrote(events, bytes))
    }

    fn prepare(&mut self, py: Python<'_>) -> PyResult<i64> {
        self.with(py, None, true, |m| m.prepare())
    }

    fn prepared(&mut self, py: Python<'_>, epoch: i64) -> PyResult<()> {
        self.with(py, Some(epoch), false, |m| m.prepared(epoch))
    }

    fn commit(&mut self, py: Python<'_>, epoch: i64) -> PyResult<PySinkAnswer> {
        let answer = self.with(py, Some(epoch), false, |m| m.commit(epoch))?;
        Ok(PySinkAnswer::of(match answer {
            CommitAnswer::Prepared => "commit_prepared",
            CommitAnswer::OnePhase => "commit",
        }))
    }

    #[pyo3(signature = (epoch, now_us=None))]
    fn commit_started(&mut self, py: Python<'_>, epoch: i64, now_us: Option<u64>) -> PyResult<()> {
        let now = now_or_clock(py, now_us)?;
        self.with(py, Some(epoch), false, |m| m.commit_started(epoch, now))
    }

    #[pyo3(signature = (now_us=None))]
    fn commit_ok(&mut self, py: Python<'_>, now_us: Option<u64>) -> PyResult<()> {
        let now = now_or_clock(py, now_us)?;
        self.with(py, None, true, |m| m.commit_ok(now))
    }

    #[pyo3(signature = (connection_lost, now_us=None))]
    fn commit_failed(
        &mut self,
        py: Python<'_>,
        connection_lost: bool,
        now_us: Option<u64>,
    ) -> PyResult<PySinkAnswer> {
        let now = now_or_clock(py, now_us)?;
        let failure = self.with(py, None, true, |m| m.commit_failed(connection_lost, now))?;
        Ok(PySinkAnswer::of(match failure {
            CommitFailure::InDoubt => "in_doubt",
            CommitFailure::RolledBack => "rolled_back",
        }))
    }

    #[pyo3(signature = (committed, now_us=None))]
    fn commit_overtaken(
        &mut self,
        py: Python<'_>,
        committed: bool,
        now_us: Option<u64>,
    ) -> PyResult<()> {
        let now = now_or_clock(py, now_us)?;
        self.with(py, None, true, |m| m.commit_overtaken(committed, now))
    }

    fn abort(&mut self, py: Python<'_>, epoch: i64) -> PyResult<PySinkAnswer> {
        let answer = self.with(py, Some(epoch), false, |m| m.abort(epoch))?;
        Ok(abort_answer(answer))
    }

    #[pyo3(signature = (epoch, client, now_us=None))]
    fn abort_via(
        &mut self,
        py: Python<'_>,
        epoch: i64,
        client: &str,
        now_us: Option<u64>,
    ) -> PyResult<PySinkAnswer> {
        let client = match client {
            "live" => Client::Live,
            "given_up" => Client::GivenUp,
            "fenced" => Client::Fenced,
            other => {
                return Err(to_py_err(
                    py,
                    CoreError::Config(format!(
                        "client must be 'live', 'given_up' or 'fenced', not {other:?}"
                    )),
                ));
            }
        };
        let now = now_or_clock(py, now_us)?;
        let answer = self.with(py, Some(epoch), false, |m| m.abort_via(epoch, client, now))?;
        Ok(abort_answer(answer))
    }

    fn abort_after_error(&mut self, py: Python<'_>) -> PyResult<Option<i64>> {
        self.with(py, None, true, SinkTxn::abort_after_error)
    }

    #[pyo3(signature = (now_us=None))]
    fn abort_ok(&mut self, py: Python<'_>, now_us: Option<u64>) -> PyResult<()> {
        let now = now_or_clock(py, now_us)?;
        self.with(py, None, true, |m| m.abort_ok(now))
    }

    fn abort_failed(&mut self, py: Python<'_>) -> PyResult<PySinkAnswer> {
        let failure = self.with(py, None, true, SinkTxn::abort_failed)?;
        Ok(PySinkAnswer::of(match failure {
            AbortFailure::InDoubt => "in_doubt",
            AbortFailure::Reopen => "reopen",
        }))
    }

    #[pyo3(signature = (now_us=None))]
    fn abort_reopened(&mut self, py: Python<'_>, now_us: Option<u64>) -> PyResult<()> {
        let now = now_or_clock(py, now_us)?;
        self.with(py, None, true, |m| m.abort_reopened(now))
    }

    fn saw_committed(&mut self, py: Python<'_>, last: Option<i64>) -> PyResult<()> {
        self.with(py, last, false, |m| m.saw_committed(last))
    }

    #[pyo3(signature = (last, now_us=None))]
    fn reopened(&mut self, py: Python<'_>, last: Option<i64>, now_us: Option<u64>) -> PyResult<()> {
        let now = now_or_clock(py, now_us)?;
        self.with(py, None, true, |m| m.reopened(last, now))
    }

    #[pyo3(signature = (committed, marker, now_us=None))]
    fn resolved_by_marker(
        &mut self,
        py: Python<'_>,
        committed: Option<bool>,
        marker: Option<i64>,
        now_us: Option<u64>,
    ) -> PyResult<()> {
        let now = now_or_clock(py, now_us)?;
        self.with(py, None, true, |m| {
            m.resolved_by_marker(committed, marker, now)
        })
    }

    #[pyo3(signature = (now_us=None))]
    fn abort_overtaken(&mut self, py: Python<'_>, now_us: Option<u64>) -> PyResult<()> {
        let now = now_or_clock(py, now_us)?;
        self.with(py, None, true, |m| m.abort_overtaken(now))
    }

    fn recover(&mut self, py: Python<'_>) -> PyResult<PySinkAnswer> {
        Ok(match self.read(py, SinkTxn::recover)? {
            RecoverAnswer::ReadLast => PySinkAnswer::of("read_last"),
            RecoverAnswer::Resolve { epoch, decision } => PySinkAnswer {
                epoch: Some(epoch),
                commit: decision == Decision::Commit,
                ..PySinkAnswer::of("resolve")
            },
        })
    }

    #[pyo3(signature = (committed, last, now_us=None))]
    fn resolved(
        &mut self,
        py: Python<'_>,
        committed: bool,
        last: Option<i64>,
        now_us: Option<u64>,
    ) -> PyResult<()> {
        let now = now_or_clock(py, now_us)?;
        self.with(py, None, true, |m| m.resolved(committed, last, now))
    }

    fn close(&mut self, py: Python<'_>) -> PyResult<PySinkAnswer> {
        Ok(match self.read(py, SinkTxn::close)? {
            CloseAnswer::AbortOpen(e) => PySinkAnswer {
                epoch: Some(e),
                ..PySinkAnswer::of("abort_open")
            },
            CloseAnswer::LeavePrepared(e) => PySinkAnswer {
                epoch: Some(e),
                ..PySinkAnswer::of("leave_prepared")
            },
            CloseAnswer::Nothing => PySinkAnswer::of("nothing"),
        })
    }
}

fn abort_answer(answer: AbortAnswer) -> PySinkAnswer {
    PySinkAnswer::of(match answer {
        AbortAnswer::Nothing => "nothing",
        AbortAnswer::RollbackPrepared => "rollback_prepared",
        AbortAnswer::Rollback => "rollback",
        AbortAnswer::Fenced => "fenced",
        AbortAnswer::Reopen => "reopen",
    })
}

/// Registers `SinkTransaction` and `SinkAnswer`.
/// Which evidence proves a Kafka sink's last committed epoch (`protocol::sink::evidence`):
/// `kind` is "marker" (`epoch` is the answer), "read_identity" (no marker: read the identity and
/// ask `last_committed_without_marker`), "witness" (`history` says what proves the sink wrote:
/// "identity", "decision_row" or "producer_epoch", with `producer_epoch`) or "new".
#[pyclass(module = "laminar._core", name = "LastCommitted", frozen, get_all)]
#[derive(Debug, Clone)]
pub struct PyLastCommitted {
    kind: &'static str,
    epoch: Option<i64>,
    history: Option<&'static str>,
    producer_epoch: Option<i64>,
}

impl From<LastCommitted> for PyLastCommitted {
    fn from(answer: LastCommitted) -> Self {
        let of = |kind| Self {
            kind,
            epoch: None,
            history: None,
            producer_epoch: None,
        };
        match answer {
            LastCommitted::Marker(epoch) => Self {
                epoch: Some(epoch),
                ..of("marker")
            },
            LastCommitted::ReadIdentity => of("read_identity"),
            LastCommitted::New => of("new"),
            LastCommitted::Witness(History::Identity) => Self {
                history: Some("identity"),
                ..of("witness")
            },
            LastCommitted::Witness(History::DecisionRow) => Self {
                history: Some("decision_row"),
                ..of("witness")
            },
            LastCommitted::Witness(History::ProducerEpoch(e)) => Self {
                history: Some("producer_epoch"),
                producer_epoch: Some(e),
                ..of("witness")
            },
        }
    }
}

#[pymethods]
impl PyLastCommitted {
    fn __repr__(&self) -> String {
        format!(
            "LastCommitted(kind={:?}, epoch={:?}, history={:?}, producer_epoch={:?})",
            self.kind, self.epoch, self.history, self.producer_epoch
        )
    }
}

/// The first question: the marker read and the epoch this instance committed itself.
#[pyfunction]
fn last_committed_after_marker(marker: Option<i64>, known: Option<i64>) -> PyLastCommitted {
    evidence::after_marker(marker, known).into()
}

/// The second question, without a marker.
#[pyfunction]
fn last_committed_without_marker(
    identity: bool,
    decision_row: bool,
    producer_epoch: Option<i64>,
) -> PyLastCommitted {
    evidence::without_marker(identity, decision_row, producer_epoch).into()
}

/// Whether an answer found without a marker may be reused instead of read again.
#[pyfunction]
fn reuse_without_marker(found_by_writer: bool, writer: bool) -> bool {
    evidence::reuse_without_marker(found_by_writer, writer)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PySinkTransaction>()?;
    m.add_class::<PySinkAnswer>()?;
    m.add_class::<PyLastCommitted>()?;
    m.add_function(wrap_pyfunction!(last_committed_after_marker, m)?)?;
    m.add_function(wrap_pyfunction!(last_committed_without_marker, m)?)?;
    m.add_function(wrap_pyfunction!(reuse_without_marker, m)?)
}
