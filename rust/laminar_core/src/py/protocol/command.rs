//! `Command`: one command of a machine, with the fields its kind uses.

use pyo3::prelude::*;

use super::PyCrashPoint;
use crate::protocol::command::{Command, DecisionSelection, LogLevel};
use crate::protocol::{Epoch, dt_state as dt};

/// One command of a machine (see `_core.pyi`): `kind` and the fields that kind uses.
#[pyclass(module = "laminar._core", name = "Command", frozen, get_all)]
#[derive(Debug, Clone, Default)]
pub struct PyCommand {
    kind: &'static str,
    step: Option<&'static str>,
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
            step: command.step(),
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
            | Command::LockTable { sink_id, epoch }
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
            | Command::LockGroup { group_id }
            | Command::ReadGeneration { group_id }
            | Command::ReadStopFence { group_id } => c.group_id = Some(group_id),
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
                c.from_state = from.map(dt::DtState::name);
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
