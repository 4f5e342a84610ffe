//! Bindings of `recovery`: the protocol's decisions as plain functions returning small frozen
//! values; Python performs the I/O and turns refusals into `laminar.errors` classes.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use super::errors::IntoPyResult;
use crate::protocol::atomic::plan::{self, EpochPlan, SinkProgress};
use crate::protocol::distributed::{self, DtEvent, DtState, Vote};
use crate::protocol::kafka_recovery::{self, Completion, KafkaPart};
use crate::protocol::records::{DecisionRecord, ProducerIdentity};
use crate::protocol::watcher::{self, Unresolved, WatcherThresholds};
use crate::protocol::{Epoch, Refusal};

/// What to do to bring one Kafka sink level with the decision log (see `_core.pyi`).
#[pyclass(module = "laminar._core", name = "KafkaCompletion", frozen, eq)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PyKafkaCompletion {
    #[pyo3(get)]
    action: &'static str,
    #[pyo3(get)]
    epoch: Option<Epoch>,
    #[pyo3(get)]
    producer_id: Option<i64>,
    #[pyo3(get)]
    producer_epoch: Option<i32>,
    #[pyo3(get)]
    refusal: Option<&'static str>,
    #[pyo3(get)]
    message: Option<String>,
}

#[pymethods]
impl PyKafkaCompletion {
    fn __repr__(&self) -> String {
        match (self.action, &self.message) {
            ("refuse", Some(m)) => format!(
                "KafkaCompletion(refuse, {}: {m})",
                self.refusal.unwrap_or("?")
            ),
            (action, _) => format!(
                "KafkaCompletion({action}, epoch={:?}, producer_id={:?}, producer_epoch={:?})",
                self.epoch, self.producer_id, self.producer_epoch
            ),
        }
    }
}

fn refusal_fields(r: Refusal) -> (Option<&'static str>, Option<String>) {
    (Some(r.kind.name()), Some(r.message))
}

impl From<Completion> for PyKafkaCompletion {
    fn from(c: Completion) -> Self {
        let mut out = Self {
            action: "complete",
            epoch: None,
            producer_id: None,
            producer_epoch: None,
            refusal: None,
            message: None,
        };
        match c {
            Completion::Complete => {}
            Completion::EndTxn { epoch, producer } => {
                out.action = "end_txn";
                out.epoch = Some(epoch);
                out.producer_id = Some(producer.producer_id);
                out.producer_epoch = Some(producer.producer_epoch);
            }
            Completion::RedoFromLog { epoch } => {
                out.action = "redo_from_log";
                out.epoch = Some(epoch);
            }
            Completion::AwaitReplay { epoch } => {
                out.action = "await_replay";
                out.epoch = Some(epoch);
            }
            Completion::Refuse(r) => {
                out.action = "refuse";
                (out.refusal, out.message) = refusal_fields(r);
            }
        }
        out
    }
}

/// Decides how to complete one Kafka sink's part of its group's last decided epoch.
#[pyfunction]
#[pyo3(signature = (
    sink_id, *, decided_epoch, previous_epoch, producer_id=-1, producer_epoch=-1,
    corrupt=None, marker, redo_log=false, end_txn_refused=false,
))]
#[pyo3(
    text_signature = "(sink_id, *, decided_epoch, previous_epoch, producer_id=-1, \
                      producer_epoch=-1, corrupt=None, marker, redo_log=False, \
                      end_txn_refused=False)"
)]
#[allow(clippy::too_many_arguments)]
fn complete_kafka(
    sink_id: &str,
    decided_epoch: Option<Epoch>,
    previous_epoch: Option<Epoch>,
    producer_id: i64,
    producer_epoch: i32,
    corrupt: Option<String>,
    marker: Option<Epoch>,
    redo_log: bool,
    end_txn_refused: bool,
) -> PyKafkaCompletion {
    let decision = match (corrupt, decided_epoch) {
        (Some(reason), epoch) => DecisionRecord::Corrupt {
            epoch: epoch.unwrap_or(-1),
            reason,
        },
        (None, None) => DecisionRecord::None,
        (None, Some(epoch)) => DecisionRecord::Decided {
            epoch,
            previous: previous_epoch,
            producer: ProducerIdentity::known(producer_id, producer_epoch),
        },
    };
    let part = KafkaPart {
        decision,
        marker,
        redo_log,
        end_txn_refused,
    };
    kafka_recovery::complete_kafka(sink_id, &part).into()
}

/// Which sinks an incoming epoch goes to (see `_core.pyi`).
#[pyclass(module = "laminar._core", name = "EpochPlan", frozen, eq)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PyEpochPlan {
    #[pyo3(get)]
    action: &'static str,
    #[pyo3(get)]
    sinks: Vec<bool>,
    #[pyo3(get)]
    refusal: Option<&'static str>,
    #[pyo3(get)]
    message: Option<String>,
}

#[pymethods]
impl PyEpochPlan {
    fn __repr__(&self) -> String {
        match self.action {
            "refuse" => format!(
                "EpochPlan(refuse, {}: {})",
                self.refusal.unwrap_or("?"),
                self.message.as_deref().unwrap_or("")
            ),
            action => format!("EpochPlan({action}, sinks={:?})", self.sinks),
        }
    }
}

/// Decides which sinks `epoch` must be written to.
#[pyfunction]
#[pyo3(signature = (epoch, sinks, awaiting=Vec::new(), *, refuse_backwards=true))]
fn plan_epoch(
    epoch: Epoch,
    sinks: Vec<(String, Option<Epoch>)>,
    awaiting: Vec<(String, Epoch)>,
    refuse_backwards: bool,
) -> PyEpochPlan {
    let progress: Vec<SinkProgress> = sinks
        .into_iter()
        .map(|(sink_id, last)| SinkProgress { sink_id, last })
        .collect();
    match plan::plan_epoch(epoch, &progress, &awaiting, refuse_backwards) {
        EpochPlan::Skip => PyEpochPlan {
            action: "skip",
            sinks: vec![false; progress.len()],
            refusal: None,
            message: None,
        },
        EpochPlan::Write { sinks } => PyEpochPlan {
            action: "write",
            sinks,
            refusal: None,
            message: None,
        },
        EpochPlan::Refuse(r) => {
            let (refusal, message) = refusal_fields(r);
            PyEpochPlan {
                action: "refuse",
                sinks: vec![false; progress.len()],
                refusal,
                message,
            }
        }
    }
}

/// The fencing check: `None` if `mine` is the stored generation, else the refusal message.
#[pyfunction]
fn check_generation(group: &str, mine: i64, stored: i64) -> Option<String> {
    crate::protocol::refusal::check_generation(group, mine, stored)
        .err()
        .map(|r| r.message)
}

fn dt_state(name: Option<&str>) -> PyResult<Option<DtState>> {
    name.map(|n| {
        DtState::from_name(n).ok_or_else(|| {
            PyValueError::new_err(format!(
                "unknown distributed transaction state {n:?}; expected prepare, commit or rollback"
            ))
        })
    })
    .transpose()
}

fn dt_event(name: &str) -> PyResult<DtEvent> {
    DtEvent::ALL
        .into_iter()
        .find(|e| e.name() == name)
        .ok_or_else(|| {
            PyValueError::new_err(format!(
                "unknown distributed transaction event {name:?}; expected create, start_commit, \
                 set_rollback or conclude"
            ))
        })
}

/// The state of a decision record after `event` (None: no record); `IllegalStateError` if the
/// transition is not in the table.
#[pyfunction]
#[pyo3(signature = (state, event))]
fn dt_next(py: Python<'_>, state: Option<&str>, event: &str) -> PyResult<Option<&'static str>> {
    let next =
        crate::protocol::transitions::dt_next(dt_state(state)?, dt_event(event)?).py_err(py)?;
    Ok(next.map(DtState::name))
}

/// The coordinator's decision from the participants' votes (True = prepared).
#[pyfunction]
fn decide(votes: Vec<bool>, expected: usize) -> &'static str {
    let votes: Vec<Vote> = votes
        .into_iter()
        .map(|v| if v { Vote::Prepared } else { Vote::Failed })
        .collect();
    distributed::decide(&votes, expected).name()
}

/// The watcher's rule for one unresolved item.
#[pyfunction]
#[pyo3(signature = (item, age_s, *, decision=None, resolve_after_s=60.0, lingering_after_s=300.0))]
fn watcher_action(
    item: &str,
    age_s: f64,
    decision: Option<&str>,
    resolve_after_s: f64,
    lingering_after_s: f64,
) -> PyResult<&'static str> {
    let decision = dt_state(decision)?;
    let unresolved = match (item, decision) {
        ("kafka_behind", _) => Unresolved::KafkaBehind,
        ("corrupt_decision", _) => Unresolved::CorruptDecision,
        ("participant", d) => Unresolved::Participant(d),
        ("distributed", Some(d)) => Unresolved::Distributed(d),
        ("distributed", None) => {
            return Err(PyValueError::new_err(
                "a distributed item needs its decision state",
            ));
        }
        (other, _) => {
            return Err(PyValueError::new_err(format!(
                "unknown item {other:?}; expected kafka_behind, corrupt_decision, participant or \
                 distributed"
            )));
        }
    };
    let thresholds = WatcherThresholds {
        resolve_after_s,
        lingering_after_s,
    };
    Ok(watcher::watcher_action(unresolved, age_s, thresholds).name())
}

/// Whether an item still unresolved at `age_s` lingers.
#[pyfunction]
#[pyo3(signature = (age_s, lingering_after_s=300.0))]
fn is_lingering(age_s: f64, lingering_after_s: f64) -> bool {
    watcher::is_lingering(
        age_s,
        WatcherThresholds {
            resolve_after_s: 0.0,
            lingering_after_s,
        },
    )
}

/// Registers the recovery decisions.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyKafkaCompletion>()?;
    m.add_class::<PyEpochPlan>()?;
    m.add_function(wrap_pyfunction!(complete_kafka, m)?)?;
    m.add_function(wrap_pyfunction!(plan_epoch, m)?)?;
    m.add_function(wrap_pyfunction!(check_generation, m)?)?;
    m.add_function(wrap_pyfunction!(dt_next, m)?)?;
    m.add_function(wrap_pyfunction!(decide, m)?)?;
    m.add_function(wrap_pyfunction!(watcher_action, m)?)?;
    m.add_function(wrap_pyfunction!(is_lingering, m)?)?;
    Ok(())
}
