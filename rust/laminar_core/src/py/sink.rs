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

/// One answer of the machine: a class per answer (`SinkAnswer.Skip(last, older)`, …), so
/// the sink matches each method's answers exhaustively (`_core.pyi` types each method's union).
#[pyclass(module = "laminar._core", name = "SinkAnswer", frozen)]
#[derive(Debug, Clone)]
pub enum PySinkAnswer {
    Recover {},
    Open {},
    Skip { last: i64, older: bool },
    CommitPrepared {},
    Commit {},
    InDoubt {},
    RolledBack {},
    Nothing {},
    RollbackPrepared {},
    Rollback {},
    Fenced {},
    Reopen {},
    AbortOpen { epoch: i64 },
    LeavePrepared { epoch: i64 },
    ReadLast {},
    Resolve { epoch: i64, commit: bool },
}

impl PySinkAnswer {
    fn begin(a: BeginAnswer) -> Self {
        match a {
            BeginAnswer::Recover => Self::Recover {},
            BeginAnswer::Open => Self::Open {},
            BeginAnswer::Skip { last, older } => Self::Skip { last, older },
        }
    }
}

#[pymethods]
impl PySinkAnswer {
    /// The answer's name (snake_case), for logs and tests.
    #[getter]
    fn kind(&self) -> &'static str {
        match self {
            Self::Recover {} => "recover",
            Self::Open {} => "open",
            Self::Skip { .. } => "skip",
            Self::CommitPrepared {} => "commit_prepared",
            Self::Commit {} => "commit",
            Self::InDoubt {} => "in_doubt",
            Self::RolledBack {} => "rolled_back",
            Self::Nothing {} => "nothing",
            Self::RollbackPrepared {} => "rollback_prepared",
            Self::Rollback {} => "rollback",
            Self::Fenced {} => "fenced",
            Self::Reopen {} => "reopen",
            Self::AbortOpen { .. } => "abort_open",
            Self::LeavePrepared { .. } => "leave_prepared",
            Self::ReadLast {} => "read_last",
            Self::Resolve { .. } => "resolve",
        }
    }

    fn __repr__(&self) -> String {
        format!("SinkAnswer.{self:?}")
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

    /// The decision a failed commit or abort left pending (the epoch is in doubt until it is
    /// resolved): "commit", "abort", or None.
    #[getter]
    fn pending(&mut self, py: Python<'_>) -> PyResult<Option<&'static str>> {
        self.read(py, |m| {
            m.pending().map(|d| match d {
                Decision::Commit => "commit",
                Decision::Abort => "abort",
            })
        })
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
        Ok(match answer {
            CommitAnswer::Prepared => PySinkAnswer::CommitPrepared {},
            CommitAnswer::OnePhase => PySinkAnswer::Commit {},
        })
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
        Ok(match failure {
            CommitFailure::InDoubt => PySinkAnswer::InDoubt {},
            CommitFailure::RolledBack => PySinkAnswer::RolledBack {},
        })
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
        Ok(match failure {
            AbortFailure::InDoubt => PySinkAnswer::InDoubt {},
            AbortFailure::Reopen => PySinkAnswer::Reopen {},
        })
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
            RecoverAnswer::ReadLast => PySinkAnswer::ReadLast {},
            RecoverAnswer::Resolve { epoch, decision } => PySinkAnswer::Resolve {
                epoch,
                commit: decision == Decision::Commit,
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
            CloseAnswer::AbortOpen(epoch) => PySinkAnswer::AbortOpen { epoch },
            CloseAnswer::LeavePrepared(epoch) => PySinkAnswer::LeavePrepared { epoch },
            CloseAnswer::Nothing => PySinkAnswer::Nothing {},
        })
    }
}

fn abort_answer(answer: AbortAnswer) -> PySinkAnswer {
    match answer {
        AbortAnswer::Nothing => PySinkAnswer::Nothing {},
        AbortAnswer::RollbackPrepared => PySinkAnswer::RollbackPrepared {},
        AbortAnswer::Rollback => PySinkAnswer::Rollback {},
        AbortAnswer::Fenced => PySinkAnswer::Fenced {},
        AbortAnswer::Reopen => PySinkAnswer::Reopen {},
    }
}

/// Which evidence proves a Kafka sink's last committed epoch (`protocol::sink::evidence`), a
/// class each: `Marker` (`epoch` is the answer), `ReadIdentity` (no marker: read the identity and
/// ask `last_committed_without_marker`), `Witness` (`history` says what proves the sink wrote:
/// "identity", "decision_row" or "producer_epoch", with `producer_epoch`) or `New`.
#[pyclass(module = "laminar._core", name = "LastCommitted", frozen)]
#[derive(Debug, Clone)]
pub enum PyLastCommitted {
    Marker {
        epoch: i64,
    },
    ReadIdentity {},
    Witness {
        history: String,
        producer_epoch: Option<i64>,
    },
    New {},
}

impl From<LastCommitted> for PyLastCommitted {
    fn from(answer: LastCommitted) -> Self {
        let witness = |history: &str, producer_epoch| Self::Witness {
            history: history.to_string(),
            producer_epoch,
        };
        match answer {
            LastCommitted::Marker(epoch) => Self::Marker { epoch },
            LastCommitted::ReadIdentity => Self::ReadIdentity {},
            LastCommitted::New => Self::New {},
            LastCommitted::Witness(History::Identity) => witness("identity", None),
            LastCommitted::Witness(History::DecisionRow) => witness("decision_row", None),
            LastCommitted::Witness(History::ProducerEpoch(e)) => witness("producer_epoch", Some(e)),
        }
    }
}

#[pymethods]
impl PyLastCommitted {
    /// The evidence's name (snake_case), for logs and tests.
    #[getter]
    fn kind(&self) -> &'static str {
        match self {
            Self::Marker { .. } => "marker",
            Self::ReadIdentity {} => "read_identity",
            Self::Witness { .. } => "witness",
            Self::New {} => "new",
        }
    }

    fn __repr__(&self) -> String {
        format!("LastCommitted.{self:?}")
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

/// Registers `SinkTransaction`, `SinkAnswer`, `LastCommitted` and the evidence rules.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PySinkTransaction>()?;
    m.add_class::<PySinkAnswer>()?;
    m.add_class::<PyLastCommitted>()?;
    m.add_function(wrap_pyfunction!(last_committed_after_marker, m)?)?;
    m.add_function(wrap_pyfunction!(last_committed_without_marker, m)?)?;
    m.add_function(wrap_pyfunction!(reuse_without_marker, m)?)
}
