//! Bindings of `protocol`: the crash points, the commands and events of the driver loop, the
//! machines (`protocol/machines.rs`) and the shared rules. Typed in `_core.pyi`; the driver loop
//! is described in docs/engine.md.

mod machines;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use super::errors::refusal_to_py_err;
use crate::protocol::command::{
    Command, DecisionRow, DecisionSelection, DtRow, Event, Failure, FailureKind, LogLevel,
    ParticipantDecision, ParticipantKind, ParticipantResult, ParticipantRow, PreparedGid,
    ResultStatus,
};
use crate::protocol::crash::{CrashPoint, Position, Protocol};
use crate::protocol::{Epoch, names, records};
use crate::recovery::{Refusal, RefusalKind};

/// A crash point (see `_core.pyi`).
#[pyclass(module = "laminar._core", name = "CrashPoint", frozen, eq, hash)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PyCrashPoint(pub CrashPoint);

fn protocol_of(name: &str) -> PyResult<Protocol> {
    Protocol::from_name(name).ok_or_else(|| {
        let known: Vec<&str> = Protocol::ALL.iter().map(|p| p.name()).collect();
        PyValueError::new_err(format!(
            "unknown protocol {name:?}; expected one of {known:?}"
        ))
    })
}

#[pymethods]
impl PyCrashPoint {
    /// Every crash point, protocol by protocol.
    #[staticmethod]
    fn all() -> Vec<PyCrashPoint> {
        CrashPoint::ALL.iter().map(|p| PyCrashPoint(*p)).collect()
    }

    /// The points of one protocol.
    #[staticmethod]
    fn for_protocol(protocol: &str) -> PyResult<Vec<PyCrashPoint>> {
        Ok(CrashPoint::for_protocol(protocol_of(protocol)?)
            .into_iter()
            .map(PyCrashPoint)
            .collect())
    }

    /// The point a name or a legacy name (`atomic.step7`) denotes.
    #[staticmethod]
    fn parse(name: &str) -> PyResult<PyCrashPoint> {
        CrashPoint::from_name(name)
            .map(PyCrashPoint)
            .ok_or_else(|| {
                PyValueError::new_err(format!(
                    "unknown crash point {name:?}; CrashPoint.all() lists them"
                ))
            })
    }

    /// Legacy name → name.
    #[staticmethod]
    fn legacy_names() -> std::collections::BTreeMap<&'static str, &'static str> {
        CrashPoint::ALL
            .iter()
            .filter_map(|p| Some((p.legacy_name()?, p.name())))
            .collect()
    }

    #[getter]
    fn name(&self) -> &'static str {
        self.0.name()
    }

    #[getter]
    fn protocol(&self) -> &'static str {
        self.0.protocol().name()
    }

    #[getter]
    fn after(&self) -> &'static str {
        self.0.after()
    }

    #[getter]
    fn position(&self) -> &'static str {
        match self.0.position() {
            Position::After => "after",
            Position::Within => "within",
        }
    }

    #[getter]
    fn legacy_name(&self) -> Option<&'static str> {
        self.0.legacy_name()
    }

    #[getter]
    fn in_task(&self) -> bool {
        self.0.in_task()
    }

    fn __repr__(&self) -> String {
        format!("CrashPoint({:?})", self.0.name())
    }

    fn __str__(&self) -> &'static str {
        self.0.name()
    }
}

/// One command of a machine (see `_core.pyi`): `kind` and the fields that kind uses.
#[pyclass(module = "laminar._core", name = "Command", frozen, get_all)]
#[derive(Debug, Clone, Default)]
pub struct PyCommand {
    kind: &'static str,
    sink_id: Option<String>,
    transactional_id: Option<String>,
    epoch: Option<Epoch>,
    group_id: Option<String>,
    dtid: Option<String>,
    gid: Option<String>,
    key: Option<String>,
    ms: Option<u64>,
    level: Option<&'static str>,
    message: Option<String>,
    point: Option<PyCrashPoint>,
    keep: Option<bool>,
    prepared: Option<bool>,
    for_share: Option<bool>,
    previous_epoch: Option<Epoch>,
    prepared_state: Option<String>,
    producer_id: Option<i64>,
    producer_epoch: Option<i32>,
    from_state: Option<&'static str>,
    to_state: Option<&'static str>,
    blob: Option<u32>,
    up_to: Option<Epoch>,
    row_count: Option<u64>,
    sink_ids: Option<Vec<String>>,
    registry_id: Option<String>,
    owner: Option<String>,
    epoch_base: Option<Epoch>,
    participants: Option<Vec<(String, &'static str, String)>>,
    names: Option<Vec<String>>,
    state: Option<&'static str>,
}

#[pymethods]
impl PyCommand {
    fn __repr__(&self) -> String {
        format!("{self:?}").replacen("PyCommand", "Command", 1)
    }
}

impl From<Command> for PyCommand {
    fn from(command: Command) -> Self {
        let mut c = PyCommand {
            kind: command.kind(),
            ..PyCommand::default()
        };
        match command {
            Command::Reached { point } => c.point = Some(PyCrashPoint(point)),
            Command::Sleep { ms } => c.ms = Some(ms),
            Command::Log { level, message } => {
                c.level = Some(match level {
                    LogLevel::Info => "info",
                    LogLevel::Warning => "warning",
                });
                c.message = Some(message);
            }
            Command::InitSink { sink_id }
            | Command::KnownEpoch { sink_id }
            | Command::SinkRecover { sink_id }
            | Command::AbortProducer { sink_id }
            | Command::ReinitProducer { sink_id }
            | Command::ReadMarker { sink_id } => c.sink_id = Some(sink_id),
            Command::SinkBegin { sink_id, epoch }
            | Command::SinkPrepare { sink_id, epoch }
            | Command::SinkCommit { sink_id, epoch }
            | Command::SinkAbort { sink_id, epoch }
            | Command::RetryCommit { sink_id, epoch }
            | Command::WriteRows { sink_id, epoch } => {
                c.sink_id = Some(sink_id);
                c.epoch = Some(epoch);
            }
            Command::SinkWrite {
                sink_id,
                epoch,
                keep,
            } => {
                c.sink_id = Some(sink_id);
                c.epoch = Some(epoch);
                c.keep = Some(keep);
            }
            Command::ProduceRedo {
                sink_id,
                epoch,
                blob,
            } => {
                c.sink_id = Some(sink_id);
                c.epoch = Some(epoch);
                c.blob = Some(blob);
            }
            Command::EndTxn {
                transactional_id,
                producer_id,
                producer_epoch,
                epoch,
            } => {
                c.transactional_id = Some(transactional_id);
                c.producer_id = Some(producer_id);
                c.producer_epoch = Some(producer_epoch);
                c.epoch = Some(epoch);
            }
            Command::FenceProducer { transactional_id } => {
                c.transactional_id = Some(transactional_id);
            }
            Command::RegisterGroup { group_id }
            | Command::BumpGeneration { group_id }
            | Command::LockGroup { group_id } => c.group_id = Some(group_id),
            Command::ReadSinkEpochs { sink_ids } => c.sink_ids = Some(sink_ids),
            Command::ReadOwnership {
                registry_id,
                members,
            } => {
                c.registry_id = Some(registry_id);
                c.sink_ids = Some(members);
            }
            Command::SetOwner {
                ids,
                owner,
                epoch_base,
            } => {
                c.sink_ids = Some(ids);
                c.owner = Some(owner);
                c.epoch_base = Some(epoch_base);
            }
            Command::Commit
            | Command::Rollback
            | Command::CommitDecision
            | Command::ReadParticipantDecisions
            | Command::ListPrepared
            | Command::PeekPartition
            | Command::WritePartition => {}
            Command::ReplaceRedo {
                transactional_id,
                epoch,
                keep,
            } => {
                c.transactional_id = Some(transactional_id);
                c.epoch = Some(epoch);
                c.keep = Some(keep);
            }
            Command::RecordDecision {
                transactional_id,
                epoch,
                previous_epoch,
                prepared_state,
                group_id,
            } => {
                c.transactional_id = Some(transactional_id);
                c.epoch = Some(epoch);
                c.previous_epoch = previous_epoch;
                c.prepared_state = Some(prepared_state);
                c.group_id = Some(group_id);
            }
            Command::RewriteDecision {
                transactional_id,
                epoch,
                previous_epoch,
                prepared_state,
            } => {
                c.transactional_id = Some(transactional_id);
                c.epoch = Some(epoch);
                c.previous_epoch = previous_epoch;
                c.prepared_state = Some(prepared_state);
            }
            Command::ReadDecisions { of } => match of {
                DecisionSelection::Sinks(ids) => c.sink_ids = Some(ids),
                DecisionSelection::Group(g) => c.group_id = Some(g),
                DecisionSelection::All => {}
            },
            Command::RedoExists {
                transactional_id,
                epoch,
            }
            | Command::ReadRedo {
                transactional_id,
                epoch,
            } => {
                c.transactional_id = Some(transactional_id);
                c.epoch = Some(epoch);
            }
            Command::DeleteRedo {
                transactional_id,
                up_to,
            } => {
                c.transactional_id = Some(transactional_id);
                c.up_to = Some(up_to);
            }
            Command::CreateDt {
                dtid,
                group_id,
                epoch,
            } => {
                c.dtid = Some(dtid);
                c.group_id = Some(group_id);
                c.epoch = Some(epoch);
            }
            Command::SetDtState {
                dtid,
                from,
                to,
                message,
            } => {
                c.dtid = Some(dtid);
                c.from_state = Some(from.name());
                c.to_state = Some(to.name());
                c.message = Some(message);
            }
            Command::ReadDtState { dtid, for_share } => {
                c.dtid = Some(dtid);
                c.for_share = Some(for_share);
            }
            Command::ConcludeDt { dtid, from } => {
                c.dtid = Some(dtid);
                c.from_state = from.map(records::DtState::name);
            }
            Command::ReadDtStates { group_id } => c.group_id = group_id,
            Command::ReadParticipants { dtid } => c.dtid = Some(dtid),
            Command::RunTasks { dtid, epoch } => {
                c.dtid = Some(dtid);
                c.epoch = Some(epoch);
            }
            Command::ClaimEpoch {
                sink_id,
                epoch,
                rows,
            } => {
                c.sink_id = Some(sink_id);
                c.epoch = Some(epoch);
                c.row_count = Some(rows);
            }
            Command::MarkParticipants {
                dtid,
                participants,
                state,
            } => {
                c.dtid = Some(dtid);
                c.names = Some(participants);
                c.state = Some(state.name());
            }
            Command::CommitPrepared { gid } | Command::RollbackPrepared { gid } => {
                c.gid = Some(gid);
            }
            Command::LockPartition { key } => c.key = Some(key),
            Command::ClaimParticipants { dtid, rows } => {
                c.dtid = Some(dtid);
                c.participants = Some(
                    rows.into_iter()
                        .map(|r| (r.participant, r.kind.name(), r.resource))
                        .collect(),
                );
            }
            Command::ReleaseParticipants { prepared } => c.prepared = Some(prepared),
        }
        c
    }
}

fn dt_state(name: Option<&str>) -> PyResult<Option<records::DtState>> {
    name.map(|n| {
        records::DtState::from_name(n).ok_or_else(|| {
            PyValueError::new_err(format!(
                "unknown distributed transaction state {n:?}; expected prepare, commit or rollback"
            ))
        })
    })
    .transpose()
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

pub(crate) fn result_tuple(r: &ParticipantResult) -> ResultTuple {
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
        let kind = match kind {
            "abortable" => FailureKind::Abortable { retriable },
            "in_doubt" => FailureKind::InDoubt,
            "fenced" => FailureKind::Fenced,
            "fatal" => FailureKind::Fatal,
            other => {
                return Err(PyValueError::new_err(format!(
                    "unknown failure kind {other:?}; expected abortable, in_doubt, fenced or fatal"
                )));
            }
        };
        Ok(Self(Event::Failed(Failure::new(kind, message))))
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

    /// Rows `(dtid, epoch, state, age_s)`.
    #[staticmethod]
    fn dt_rows(rows: Vec<(String, Epoch, String, f64)>) -> PyResult<Self> {
        let rows = rows
            .into_iter()
            .map(|(dtid, epoch, state, age_s)| {
                Ok(DtRow {
                    dtid,
                    epoch,
                    state: dt_state(Some(&state))?.unwrap_or(records::DtState::Prepare),
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
                    state: dt_state(Some(&state))?.unwrap_or(records::DtState::Prepare),
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

    /// Result rows in `RESULT_SCHEMA`'s order.
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

/// The `laminar.errors` exception for a refusal kind (the one bridge; replaces a table in
/// Python).
#[pyfunction]
#[pyo3(signature = (kind, message, *, sink_id=None, epoch=None))]
fn refusal_error(
    py: Python<'_>,
    kind: &str,
    message: String,
    sink_id: Option<String>,
    epoch: Option<Epoch>,
) -> PyResult<Py<PyAny>> {
    let kind = RefusalKind::from_name(kind)
        .ok_or_else(|| PyValueError::new_err(format!("unknown refusal kind {kind:?}")))?;
    let refusal = Refusal {
        kind,
        message,
        sink_id,
        epoch,
    };
    Ok(refusal_to_py_err(py, &refusal).into_value(py).into_any())
}

/// Whether a sink whose last committed epoch is `last` holds `epoch`.
#[pyfunction]
fn epoch_committed(last: Option<Epoch>, epoch: Epoch) -> bool {
    records::epoch_committed(last, epoch)
}

/// The epoch base past every committed epoch.
#[pyfunction]
fn next_epoch_base(base: Epoch, committed: Vec<Option<Epoch>>) -> Epoch {
    records::next_epoch_base(base, committed)
}

/// The distributed transaction id of one epoch of a group.
#[pyfunction]
fn dtid(group_id: &str, epoch: Epoch) -> String {
    names::dtid(group_id, epoch)
}

/// The transactional id of Kafka sink `transactional_id` in partition `part`.
#[pyfunction]
fn kafka_participant_id(transactional_id: &str, part: u32) -> String {
    names::kafka_participant_id(transactional_id, part)
}

/// `(base transactional id, part)` of a participant id, or None.
#[pyfunction]
fn participant_base(participant_id: &str) -> Option<(String, u32)> {
    names::participant_base(participant_id).map(|(b, p)| (b.to_owned(), p))
}

/// Whether a prepared gid is the participant a `dt_participant` row names (exact).
#[pyfunction]
fn participant_matches(resource: &str, gid: &str) -> bool {
    names::participant_matches(resource, gid)
}

/// Registers the protocol engine.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyCrashPoint>()?;
    m.add_class::<PyCommand>()?;
    m.add_class::<PyEvent>()?;
    m.add_function(wrap_pyfunction!(refusal_error, m)?)?;
    m.add_function(wrap_pyfunction!(epoch_committed, m)?)?;
    m.add_function(wrap_pyfunction!(next_epoch_base, m)?)?;
    m.add_function(wrap_pyfunction!(dtid, m)?)?;
    m.add_function(wrap_pyfunction!(kafka_participant_id, m)?)?;
    m.add_function(wrap_pyfunction!(participant_base, m)?)?;
    m.add_function(wrap_pyfunction!(participant_matches, m)?)?;
    machines::register(m)
}
