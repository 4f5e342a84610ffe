//! `Event`: the result of a command, built by the driver.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::protocol::command::{
    DtRow, Event, ParticipantKind, ParticipantResult, ParticipantRow, PreparedGid, ResultStatus,
};

use crate::protocol::records::DecisionRow;

use crate::protocol::failure::{Failure, FailureKind};

use crate::protocol::names::ParticipantDecision;
use crate::protocol::{Epoch, dt_state as dt};

fn dt_state(name: Option<&str>) -> PyResult<Option<dt::DtState>> {
    name.map(|n| {
        dt::DtState::from_name(n).ok_or_else(|| {
            PyValueError::new_err(format!(
                "unknown distributed transaction state {n:?}; expected prepare, commit or rollback"
            ))
        })
    })
    .transpose()
}

/// A failure's kind as the bindings spell it (`abortable` with `retriable`, `in_doubt`,
/// `fenced`, `fatal`).
pub(super) fn failure_kind(kind: &str, retriable: bool) -> PyResult<FailureKind> {
    Ok(match kind {
        "abortable" => FailureKind::Abortable { retriable },
        "in_doubt" => FailureKind::InDoubt,
        "fenced" => FailureKind::Fenced,
        "fatal" => FailureKind::Fatal,
        other => {
            return Err(PyValueError::new_err(format!(
                "unknown failure kind {other:?}; expected abortable, in_doubt, fenced or fatal"
            )));
        }
    })
}

fn participant_kind(name: &str) -> PyResult<ParticipantKind> {
    ParticipantKind::from_name(name).ok_or_else(|| {
        PyValueError::new_err(format!(
            "unknown participant kind {name:?}; expected attempt, postgres or kafka"
        ))
    })
}

/// A result row of a task: `(part, attempt, participant, kind, resource, records,
/// prepared_state, marker, status)`.
pub type ResultTuple = (
    u32,
    String,
    String,
    String,
    String,
    u64,
    String,
    Option<Epoch>,
    String,
);

pub fn result_tuple(r: &ParticipantResult) -> ResultTuple {
    (
        r.part,
        r.attempt.clone(),
        r.participant.clone(),
        r.kind.name().to_owned(),
        r.resource.clone(),
        r.records,
        r.prepared_state.clone(),
        r.marker,
        r.status.name().to_owned(),
    )
}

/// The result of a command, reported by the driver (see `_core.pyi`).
#[pyclass(module = "laminar._core", name = "Event", frozen)]
#[derive(Debug, Clone)]
pub struct PyEvent(pub Event);

#[pymethods]
impl PyEvent {
    #[staticmethod]
    fn ack() -> Self {
        Self(Event::Ack)
    }

    #[staticmethod]
    #[pyo3(signature = (kind, message, *, retriable=true))]
    fn failed(kind: &str, message: String, retriable: bool) -> PyResult<Self> {
        Ok(Self(Event::Failed(Failure::new(
            failure_kind(kind, retriable)?,
            message,
        ))))
    }

    #[staticmethod]
    fn missing() -> Self {
        Self(Event::Missing)
    }

    #[staticmethod]
    fn began(opened: bool) -> Self {
        Self(Event::Began { opened })
    }

    #[staticmethod]
    fn claimed(claimed: bool) -> Self {
        Self(Event::Claimed { claimed })
    }

    #[staticmethod]
    fn generation(generation: Option<i64>) -> Self {
        Self(Event::Generation { generation })
    }

    #[staticmethod]
    fn progress(epochs: Vec<(String, Option<Epoch>)>) -> Self {
        Self(Event::Progress { epochs })
    }

    #[staticmethod]
    fn ownership(
        owner: Option<String>,
        epoch_base: Epoch,
        member_owners: Vec<(String, String)>,
    ) -> Self {
        Self(Event::Ownership {
            owner,
            epoch_base,
            member_owners,
        })
    }

    /// Rows `(transactional_id, epoch, previous_epoch, prepared_state, group_id, age_s)`.
    #[staticmethod]
    fn decisions(rows: Vec<(String, Epoch, Option<Epoch>, String, String, f64)>) -> Self {
        let rows = rows
            .into_iter()
            .map(|(t, e, p, s, g, a)| DecisionRow {
                transactional_id: t,
                epoch: e,
                previous_epoch: p,
                prepared_state: s,
                group_id: g,
                age_s: a,
            })
            .collect();
        Self(Event::Decisions { rows })
    }

    #[staticmethod]
    fn marker(epoch: Option<Epoch>, now_ms: u64) -> Self {
        Self(Event::Marker { epoch, now_ms })
    }

    #[staticmethod]
    fn found(found: bool) -> Self {
        Self(Event::Found { found })
    }

    #[staticmethod]
    fn applied(applied: bool) -> Self {
        Self(Event::Applied { applied })
    }

    #[staticmethod]
    fn redo_read(blobs: u32) -> Self {
        Self(Event::RedoRead { blobs })
    }

    #[staticmethod]
    fn prepared(prepared_state: String) -> Self {
        Self(Event::Prepared { prepared_state })
    }

    #[staticmethod]
    #[pyo3(signature = (refused=None))]
    fn end_txn(refused: Option<String>) -> Self {
        Self(Event::EndTxn { refused })
    }

    #[staticmethod]
    #[pyo3(signature = (state=None))]
    fn dt_state(state: Option<&str>) -> PyResult<Self> {
        Ok(Self(Event::DtState {
            state: dt_state(state)?,
        }))
    }

    /// The group's fenced epoch (None: no fence) and the writer it is reserved for (None: not
    /// reserved).
    #[staticmethod]
    #[pyo3(signature = (epoch=None, writer=None))]
    fn stop_fence(epoch: Option<Epoch>, writer: Option<String>) -> Self {
        Self(Event::StopFence { epoch, writer })
    }

    /// Rows `(dtid, epoch, state, age_s)`.
    #[staticmethod]
    fn dt_rows(rows: Vec<(String, Epoch, String, f64)>) -> PyResult<Self> {
        let rows = rows
            .into_iter()
            .map(|(dtid, epoch, state, age_s)| {
                Ok(DtRow {
                    dtid,
                    epoch,
                    state: dt_state(Some(&state))?.unwrap_or(dt::DtState::Prepare),
                    age_s,
                })
            })
            .collect::<PyResult<_>>()?;
        Ok(Self(Event::DtRows { rows }))
    }

    /// Rows `(participant, kind, resource)`.
    #[staticmethod]
    fn participants(rows: Vec<(String, String, String)>) -> PyResult<Self> {
        let rows = rows
            .into_iter()
            .map(|(participant, kind, resource)| {
                Ok(ParticipantRow {
                    participant,
                    kind: participant_kind(&kind)?,
                    resource,
                })
            })
            .collect::<PyResult<_>>()?;
        Ok(Self(Event::Participants { rows }))
    }

    /// Rows `(dtid, group_id, state, participant, resource)`, newest decision first.
    #[staticmethod]
    fn participant_decisions(
        rows: Vec<(String, String, String, String, String)>,
    ) -> PyResult<Self> {
        let rows = rows
            .into_iter()
            .map(|(dtid, group_id, state, participant, resource)| {
                Ok(ParticipantDecision {
                    dtid,
                    group_id,
                    state: dt_state(Some(&state))?.unwrap_or(dt::DtState::Prepare),
                    participant,
                    resource,
                })
            })
            .collect::<PyResult<_>>()?;
        Ok(Self(Event::ParticipantDecisions { rows }))
    }

    /// Gids `(gid, sink_id, epoch, age_s)`.
    #[staticmethod]
    fn prepared_list(gids: Vec<(String, Option<String>, Option<Epoch>, f64)>) -> Self {
        let gids = gids
            .into_iter()
            .map(|(gid, sink_id, epoch, age_s)| PreparedGid {
                gid,
                sink_id,
                epoch,
                age_s,
            })
            .collect();
        Self(Event::PreparedList { gids })
    }

    /// Result rows in `result_schema()`'s order.
    #[staticmethod]
    fn task_results(results: Vec<ResultTuple>) -> PyResult<Self> {
        let results = results
            .into_iter()
            .map(
                |(part, attempt, participant, kind, resource, records, state, marker, status)| {
                    Ok(ParticipantResult {
                    part,
                    attempt,
                    participant,
                    kind: participant_kind(&kind)?,
                    resource,
                    records,
                    prepared_state: state,
                    marker,
                    status: ResultStatus::from_name(&status).ok_or_else(|| {
                        PyValueError::new_err(format!(
                            "unknown result status {status:?}; expected prepared, empty or skipped"
                        ))
                    })?,
                })
                },
            )
            .collect::<PyResult<_>>()?;
        Ok(Self(Event::TaskResults { results }))
    }

    #[staticmethod]
    fn rows(count: u64) -> Self {
        Self(Event::Rows { count })
    }

    #[getter]
    fn kind(&self) -> &'static str {
        self.0.kind()
    }

    fn __repr__(&self) -> String {
        format!("Event.{:?}", self.0)
    }
}
