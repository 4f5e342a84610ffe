//! The protocol machines as Python classes: each has `poll()`, `handle(event)`, `end`,
//! `refusal`, `failure` and `raise_refusal()` (one macro writes them), plus its own constructor
//! and results.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use super::super::errors::refusal_to_py_err;
use super::{PyCommand, PyEvent, ResultTuple, result_tuple};
use crate::protocol::atomic::{AtomicGroup, GroupConfig, RunStart};
use crate::protocol::distributed::{ScaleOutTask, TaskContext};
use crate::protocol::kafka_recovery::KafkaRecovery;
use crate::protocol::single::{SingleConfig, SingleEpoch};
use crate::protocol::sink::{KafkaInDoubt, PostgresInDoubt};
use crate::protocol::watcher::WatcherThresholds;
use crate::protocol::watcher::resolve::{Resolve, ResolveOutcome, ResolveTarget};
use crate::protocol::watcher::{Item, PassConfig, WatcherPass};
use crate::protocol::{End, Epoch, Machine};

macro_rules! machine_class {
    ($py:ident, $name:literal, $rust:ty, { $($extra:tt)* }) => {
        #[doc = concat!("The `", $name, "` machine (see `_core.pyi`).")]
        #[pyclass(module = "laminar._core", name = $name)]
        pub struct $py {
            inner: $rust,
        }

        #[pymethods]
        impl $py {
            /// The next command, or None once the machine has ended.
            fn poll(&mut self) -> Option<PyCommand> {
                self.inner.poll().map(PyCommand::from)
            }

            /// The result of the command `poll` returned last.
            fn handle(&mut self, event: PyRef<'_, PyEvent>) {
                self.inner.handle(event.0.clone());
            }

            /// "ok", "refused", "failed", or None while it runs.
            #[getter]
            fn end(&self) -> Option<&'static str> {
                self.inner.end().map(|e| match e {
                    End::Ok => "ok",
                    End::Refused(_) => "refused",
                    End::Failed(_) => "failed",
                })
            }

            /// The refusal's kind, if it ended refused.
            #[getter]
            fn refusal(&self) -> Option<&'static str> {
                match self.inner.end() {
                    Some(End::Refused(r)) => Some(r.kind.name()),
                    _ => None,
                }
            }

            /// `(kind, message)` of the failed command, if it ended failed.
            #[getter]
            fn failure(&self) -> Option<(&'static str, String)> {
                match self.inner.end() {
                    Some(End::Failed(f)) => Some((f.kind.name(), f.message.clone())),
                    _ => None,
                }
            }

            /// Raises the refusal through the error bridge, if it ended refused.
            fn raise_refusal(&self, py: Python<'_>) -> PyResult<()> {
                match self.inner.end() {
                    Some(End::Refused(r)) => Err(refusal_to_py_err(py, r)),
                    _ => Ok(()),
                }
            }

            $($extra)*
        }
    };
}

machine_class!(PyAtomicGroup, "AtomicGroupMachine", AtomicGroup, {
    #[new]
    #[pyo3(signature = (
        group_id, postgres, kafka, *, redo_log=false, owner=None, restart_on_new_query=false,
        retries=3, retry_backoff_ms=500, scale_out=false,
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        group_id: String,
        postgres: Vec<String>,
        kafka: Vec<String>,
        redo_log: bool,
        owner: Option<String>,
        restart_on_new_query: bool,
        retries: u32,
        retry_backoff_ms: u64,
        scale_out: bool,
    ) -> Self {
        Self {
            inner: AtomicGroup::new(GroupConfig {
                group_id,
                postgres,
                kafka,
                redo_log,
                owner,
                restart_on_new_query,
                retries,
                retry_backoff_ms,
                scale_out,
            }),
        }
    }

    /// Starts the group (register, owner guard, fence, recover).
    fn start(&mut self) {
        self.inner.start();
    }

    /// Writes Spark batch `batch` (epoch `epoch_base + batch`).
    fn write_epoch(&mut self, batch: Epoch) {
        self.inner.write_epoch(batch);
    }

    /// Scale-out: decides batch `batch` whose tasks ran already and created its record;
    /// `resume`: the run's start, `(generation, epoch_base)`, left by an earlier commit of the
    /// same query run (the start-up is skipped while the group still shows it).
    #[pyo3(signature = (batch, resume=None))]
    fn commit_collected(&mut self, batch: Epoch, resume: Option<(i64, Epoch)>) {
        match resume {
            Some((generation, epoch_base)) => self.inner.commit_collected_resumed(
                batch,
                RunStart {
                    generation,
                    epoch_base,
                },
            ),
            None => self.inner.commit_collected(batch),
        }
    }

    /// Whether the last operation resumed a run's start (no start-up ran).
    #[getter]
    fn resumed(&self) -> bool {
        self.inner.resumed()
    }

    #[getter]
    fn committed(&self) -> bool {
        self.inner.committed()
    }

    #[getter]
    fn attempts(&self) -> u32 {
        self.inner.attempts()
    }

    #[getter]
    fn started(&self) -> bool {
        self.inner.started()
    }

    #[getter]
    fn generation(&self) -> i64 {
        self.inner.generation()
    }

    #[getter]
    fn epoch_base(&self) -> Epoch {
        self.inner.epoch_base()
    }

    #[getter]
    fn awaiting(&self) -> Vec<(String, Epoch)> {
        self.inner.awaiting().to_vec()
    }

    #[getter]
    fn pending(&self) -> Vec<String> {
        self.inner.pending().map(str::to_owned).collect()
    }

    fn last_committed(&self, sink_id: &str) -> Option<Epoch> {
        self.inner.last_committed(sink_id)
    }
});

machine_class!(PyKafkaRecovery, "KafkaRecoveryMachine", KafkaRecovery, {
    #[new]
    fn new(sinks: Vec<String>) -> Self {
        Self {
            inner: KafkaRecovery::new(sinks),
        }
    }

    #[getter]
    fn awaiting(&self) -> Vec<(String, Epoch)> {
        self.inner.awaiting().to_vec()
    }
});

machine_class!(PyScaleOutTask, "ScaleOutTaskMachine", ScaleOutTask, {
    #[new]
    #[pyo3(signature = (dtid, epoch, part, attempt, postgres, kafka, *, group_id=None, writer=None))]
    #[allow(clippy::too_many_arguments)] // the task's context, as Python names it
    fn new(
        dtid: String,
        epoch: Epoch,
        part: u32,
        attempt: String,
        postgres: Vec<(String, String)>,
        kafka: Vec<String>,
        group_id: Option<String>,
        writer: Option<String>,
    ) -> Self {
        Self {
            inner: ScaleOutTask::new(TaskContext {
                dtid,
                epoch,
                part,
                attempt,
                postgres,
                kafka,
                create_record: group_id,
                writer,
            }),
        }
    }

    /// One result row per participant, in `result_schema()`'s order.
    #[getter]
    fn results(&self) -> Vec<ResultTuple> {
        self.inner.results().iter().map(result_tuple).collect()
    }
});

/// One item of a watcher pass (see `_core.pyi`).
#[pyclass(module = "laminar._core", name = "WatcherItem", frozen, get_all)]
#[derive(Debug, Clone)]
pub struct PyWatcherItem {
    kind: &'static str,
    id: String,
    epoch: Option<Epoch>,
    age_s: f64,
    decision: Option<&'static str>,
    dtid: Option<String>,
    detail: String,
    action: &'static str,
    outcome: &'static str,
    lingering: bool,
}

#[pymethods]
impl PyWatcherItem {
    fn __repr__(&self) -> String {
        format!("{self:?}").replacen("PyWatcherItem", "WatcherItem", 1)
    }
}

impl From<&Item> for PyWatcherItem {
    fn from(i: &Item) -> Self {
        Self {
            kind: i.kind.name(),
            id: i.id.clone(),
            epoch: i.epoch,
            age_s: i.age_s,
            decision: i.decision.map(|d| d.name()),
            dtid: i.dtid.clone(),
            detail: i.detail.clone(),
            action: i.action.name(),
            outcome: i.outcome.name(),
            lingering: i.lingering,
        }
    }
}

machine_class!(PyWatcherPass, "WatcherPassMachine", WatcherPass, {
    #[new]
    #[pyo3(signature = (
        *, group_id=None, sink_ids=None, check_kafka=true, resolve_after_s=60.0,
        lingering_after_s=300.0, act=true,
    ))]
    fn new(
        group_id: Option<String>,
        sink_ids: Option<Vec<String>>,
        check_kafka: bool,
        resolve_after_s: f64,
        lingering_after_s: f64,
        act: bool,
    ) -> Self {
        Self {
            inner: WatcherPass::new(PassConfig {
                group_id,
                sink_ids,
                check_kafka,
                thresholds: WatcherThresholds {
                    resolve_after_s,
                    lingering_after_s,
                },
                act,
                spare: None,
            }),
        }
    }

    #[getter]
    fn items(&self) -> Vec<PyWatcherItem> {
        self.inner.items().iter().map(PyWatcherItem::from).collect()
    }

    #[getter]
    fn lingering(&self) -> usize {
        self.inner.lingering()
    }
});

machine_class!(PyResolve, "ResolveMachine", Resolve, {
    #[new]
    #[pyo3(signature = (kind, target, *, commit, force=false))]
    fn new(kind: &str, target: String, commit: bool, force: bool) -> PyResult<Self> {
        let target = match kind {
            "kafka" => ResolveTarget::Kafka(target),
            "gid" => ResolveTarget::Gid(target),
            "dtid" => ResolveTarget::Dtid(target),
            other => {
                return Err(PyValueError::new_err(format!(
                    "unknown resolve target kind {other:?}; expected kafka, gid or dtid"
                )));
            }
        };
        Ok(Self {
            inner: Resolve::new(target, commit, force),
        })
    }

    /// `("resolved", done)`, `("kafka_committed", epoch)`, `("awaits_replay", epoch)` or
    /// `("moved_back", marker)`.
    #[getter]
    fn outcome(&self, py: Python<'_>) -> PyResult<Option<(&'static str, Py<PyAny>)>> {
        Ok(match self.inner.outcome() {
            None => None,
            Some(ResolveOutcome::Resolved { done }) => Some((
                "resolved",
                done.into_pyobject(py)?.to_owned().into_any().unbind(),
            )),
            Some(ResolveOutcome::KafkaCommitted { epoch }) => Some((
                "kafka_committed",
                epoch.into_pyobject(py)?.into_any().unbind(),
            )),
            Some(ResolveOutcome::AwaitsReplay { epoch }) => Some((
                "awaits_replay",
                epoch.into_pyobject(py)?.into_any().unbind(),
            )),
            Some(ResolveOutcome::MovedBack { marker }) => {
                Some(("moved_back", marker.into_pyobject(py)?.into_any().unbind()))
            }
        })
    }
});

machine_class!(PySingleEpoch, "SingleEpochMachine", SingleEpoch, {
    #[new]
    #[pyo3(signature = (
        sink_id, epoch, last, *, refuse_backwards, retries=3, retry_backoff_ms=500,
    ))]
    fn new(
        sink_id: String,
        epoch: Epoch,
        last: Option<Epoch>,
        refuse_backwards: bool,
        retries: u32,
        retry_backoff_ms: u64,
    ) -> Self {
        Self {
            inner: SingleEpoch::new(SingleConfig {
                sink_id,
                epoch,
                last,
                refuse_backwards,
                retries,
                retry_backoff_ms,
            }),
        }
    }

    #[getter]
    fn committed(&self) -> bool {
        self.inner.committed()
    }

    #[getter]
    fn attempts(&self) -> u32 {
        self.inner.attempts()
    }
});

machine_class!(PyKafkaInDoubt, "KafkaInDoubtMachine", KafkaInDoubt, {
    #[new]
    fn new(sink_id: String, epoch: Epoch, commit_in_flight: bool) -> Self {
        Self {
            inner: KafkaInDoubt::new(sink_id, epoch, commit_in_flight),
        }
    }

    #[getter]
    fn committed(&self) -> Option<bool> {
        self.inner.committed()
    }

    #[getter]
    fn marker(&self) -> Option<Epoch> {
        self.inner.marker()
    }
});

machine_class!(
    PyPostgresInDoubt,
    "PostgresInDoubtMachine",
    PostgresInDoubt,
    {
        #[new]
        #[pyo3(signature = (sink_id, epoch, pending_gid=None, *, commit=true))]
        fn new(sink_id: String, epoch: Epoch, pending_gid: Option<String>, commit: bool) -> Self {
            Self {
                inner: PostgresInDoubt::new(sink_id, epoch, pending_gid.map(|g| (g, commit))),
            }
        }

        #[getter]
        fn committed(&self) -> Option<bool> {
            self.inner.committed()
        }

        #[getter]
        fn last(&self) -> Option<Epoch> {
            self.inner.last()
        }
    }
);

/// Whether an item still unresolved at `age_s` lingers (the watcher's rule, `laminar status`).
#[pyfunction]
#[pyo3(signature = (age_s, lingering_after_s=300.0))]
fn is_lingering(age_s: f64, lingering_after_s: f64) -> bool {
    crate::protocol::watcher::is_lingering(
        age_s,
        WatcherThresholds {
            resolve_after_s: 0.0,
            lingering_after_s,
        },
    )
}

/// Registers the machine classes and the watcher's lingering rule.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(is_lingering, m)?)?;
    m.add_class::<PyAtomicGroup>()?;
    m.add_class::<PyKafkaRecovery>()?;
    m.add_class::<PyScaleOutTask>()?;
    m.add_class::<PyWatcherItem>()?;
    m.add_class::<PyWatcherPass>()?;
    m.add_class::<PyResolve>()?;
    m.add_class::<PySingleEpoch>()?;
    m.add_class::<PyKafkaInDoubt>()?;
    m.add_class::<PyPostgresInDoubt>()?;
    Ok(())
}
