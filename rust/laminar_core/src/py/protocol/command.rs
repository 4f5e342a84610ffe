//! `Command`: one command of a machine, a class per kind (`Command.SinkBegin`, …) with the
//! fields that kind has, so that a performer matches them exhaustively (`match` and
//! `typing.assert_never`) instead of comparing names.

use pyo3::prelude::*;

use super::PyCrashPoint;
use crate::protocol::command::{Command, CommandKind, DecisionSelection, LogLevel};
use crate::protocol::{Epoch, dt_state as dt};

/// One command of a machine (see `_core.pyi`): one class per kind, as in the core's `Command`.
#[pyclass(module = "laminar._core", name = "Command", frozen)]
#[derive(Debug, Clone)]
pub enum PyCommand {
    Reached {
        point: PyCrashPoint,
    },
    Sleep {
        ms: u64,
    },
    Log {
        level: String,
        message: String,
    },
    InitSink {
        sink_id: String,
    },
    KnownEpoch {
        sink_id: String,
    },
    SinkBegin {
        sink_id: String,
        epoch: Epoch,
    },
    SinkWrite {
        sink_id: String,
        epoch: Epoch,
        keep: bool,
    },
    SinkPrepare {
        sink_id: String,
        epoch: Epoch,
    },
    SinkCommit {
        sink_id: String,
        epoch: Epoch,
    },
    SinkAbort {
        sink_id: String,
        epoch: Epoch,
    },
    SinkRecover {
        sink_id: String,
    },
    RetryCommit {
        sink_id: String,
        epoch: Epoch,
    },
    AbortProducer {
        sink_id: String,
    },
    ReinitProducer {
        sink_id: String,
    },
    ReadMarker {
        sink_id: String,
    },
    ProduceRedo {
        sink_id: String,
        epoch: Epoch,
        blob: u32,
    },
    EndTxn {
        transactional_id: String,
        producer_id: i64,
        producer_epoch: i32,
        epoch: Epoch,
    },
    FenceProducer {
        transactional_id: String,
    },
    RegisterGroup {
        group_id: String,
    },
    ReadSinkEpochs {
        sink_ids: Vec<String>,
    },
    ReadOwnership {
        registry_id: String,
        members: Vec<String>,
    },
    SetOwner {
        sink_ids: Vec<String>,
        owner: String,
        epoch_base: Epoch,
    },
    Commit {},
    Rollback {},
    BumpGeneration {
        group_id: String,
    },
    LockGroup {
        group_id: String,
    },
    ReadGeneration {
        group_id: String,
    },
    LockTable {
        sink_id: String,
        epoch: Epoch,
    },
    WriteRows {
        sink_id: String,
        epoch: Epoch,
    },
    ReplaceRedo {
        transactional_id: String,
        epoch: Epoch,
        keep: bool,
    },
    RecordDecision {
        transactional_id: String,
        epoch: Epoch,
        previous_epoch: Option<Epoch>,
        prepared_state: String,
        group_id: String,
    },
    RewriteDecision {
        transactional_id: String,
        epoch: Epoch,
        previous_epoch: Option<Epoch>,
        prepared_state: String,
    },
    CommitDecision {},
    ReadDecisions {
        sink_ids: Option<Vec<String>>,
        group_id: Option<String>,
    },
    RedoExists {
        transactional_id: String,
        epoch: Epoch,
    },
    ReadRedo {
        transactional_id: String,
        epoch: Epoch,
    },
    DeleteRedo {
        transactional_id: String,
        up_to: Epoch,
    },
    ReadStopFence {
        group_id: String,
    },
    CreateDt {
        dtid: String,
        group_id: String,
        epoch: Epoch,
    },
    SetDtState {
        dtid: String,
        from_state: String,
        to_state: String,
        message: String,
    },
    ReadDtState {
        dtid: String,
        for_share: bool,
    },
    ConcludeDt {
        dtid: String,
        from_state: Option<String>,
    },
    ReadDtStates {
        group_id: Option<String>,
    },
    ReadParticipants {
        dtid: String,
    },
    ReadParticipantDecisions {},
    RunTasks {
        dtid: String,
        epoch: Epoch,
    },
    ClaimEpoch {
        sink_id: String,
        epoch: Epoch,
        row_count: u64,
    },
    MarkParticipants {
        dtid: String,
        names: Vec<String>,
        state: String,
    },
    ListPrepared {},
    CommitPrepared {
        gid: String,
    },
    RollbackPrepared {
        gid: String,
    },
    LockPartition {
        key: String,
    },
    ClaimParticipants {
        dtid: String,
        participants: Vec<(String, String, String)>,
    },
    PeekPartition {},
    WritePartition {},
    ReleaseParticipants {
        prepared: bool,
    },
}

#[pymethods]
impl PyCommand {
    /// The command's name (`sink_begin`): what a crash point's `after` names.
    #[getter]
    fn kind(&self) -> &'static str {
        self.command_kind().name()
    }

    /// The step of an epoch the command is (the core's `CommandKind::step`).
    #[getter]
    fn step(&self) -> Option<&'static str> {
        self.command_kind().step()
    }

    fn __repr__(&self) -> String {
        format!("Command.{self:?}")
    }
}

impl PyCommand {
    fn command_kind(&self) -> CommandKind {
        match self {
            PyCommand::Reached { .. } => CommandKind::Reached,
            PyCommand::Sleep { .. } => CommandKind::Sleep,
            PyCommand::Log { .. } => CommandKind::Log,
            PyCommand::InitSink { .. } => CommandKind::InitSink,
            PyCommand::KnownEpoch { .. } => CommandKind::KnownEpoch,
            PyCommand::SinkBegin { .. } => CommandKind::SinkBegin,
            PyCommand::SinkWrite { .. } => CommandKind::SinkWrite,
            PyCommand::SinkPrepare { .. } => CommandKind::SinkPrepare,
            PyCommand::SinkCommit { .. } => CommandKind::SinkCommit,
            PyCommand::SinkAbort { .. } => CommandKind::SinkAbort,
            PyCommand::SinkRecover { .. } => CommandKind::SinkRecover,
            PyCommand::RetryCommit { .. } => CommandKind::RetryCommit,
            PyCommand::AbortProducer { .. } => CommandKind::AbortProducer,
            PyCommand::ReinitProducer { .. } => CommandKind::ReinitProducer,
            PyCommand::ReadMarker { .. } => CommandKind::ReadMarker,
            PyCommand::ProduceRedo { .. } => CommandKind::ProduceRedo,
            PyCommand::EndTxn { .. } => CommandKind::EndTxn,
            PyCommand::FenceProducer { .. } => CommandKind::FenceProducer,
            PyCommand::RegisterGroup { .. } => CommandKind::RegisterGroup,
            PyCommand::ReadSinkEpochs { .. } => CommandKind::ReadSinkEpochs,
            PyCommand::ReadOwnership { .. } => CommandKind::ReadOwnership,
            PyCommand::SetOwner { .. } => CommandKind::SetOwner,
            PyCommand::Commit {} => CommandKind::Commit,
            PyCommand::Rollback {} => CommandKind::Rollback,
            PyCommand::BumpGeneration { .. } => CommandKind::BumpGeneration,
            PyCommand::LockGroup { .. } => CommandKind::LockGroup,
            PyCommand::ReadGeneration { .. } => CommandKind::ReadGeneration,
            PyCommand::LockTable { .. } => CommandKind::LockTable,
            PyCommand::WriteRows { .. } => CommandKind::WriteRows,
            PyCommand::ReplaceRedo { .. } => CommandKind::ReplaceRedo,
            PyCommand::RecordDecision { .. } => CommandKind::RecordDecision,
            PyCommand::RewriteDecision { .. } => CommandKind::RewriteDecision,
            PyCommand::CommitDecision {} => CommandKind::CommitDecision,
            PyCommand::ReadDecisions { .. } => CommandKind::ReadDecisions,
            PyCommand::RedoExists { .. } => CommandKind::RedoExists,
            PyCommand::ReadRedo { .. } => CommandKind::ReadRedo,
            PyCommand::DeleteRedo { .. } => CommandKind::DeleteRedo,
            PyCommand::ReadStopFence { .. } => CommandKind::ReadStopFence,
            PyCommand::CreateDt { .. } => CommandKind::CreateDt,
            PyCommand::SetDtState { .. } => CommandKind::SetDtState,
            PyCommand::ReadDtState { .. } => CommandKind::ReadDtState,
            PyCommand::ConcludeDt { .. } => CommandKind::ConcludeDt,
            PyCommand::ReadDtStates { .. } => CommandKind::ReadDtStates,
            PyCommand::ReadParticipants { .. } => CommandKind::ReadParticipants,
            PyCommand::ReadParticipantDecisions {} => CommandKind::ReadParticipantDecisions,
            PyCommand::RunTasks { .. } => CommandKind::RunTasks,
            PyCommand::ClaimEpoch { .. } => CommandKind::ClaimEpoch,
            PyCommand::MarkParticipants { .. } => CommandKind::MarkParticipants,
            PyCommand::ListPrepared {} => CommandKind::ListPrepared,
            PyCommand::CommitPrepared { .. } => CommandKind::CommitPrepared,
            PyCommand::RollbackPrepared { .. } => CommandKind::RollbackPrepared,
            PyCommand::LockPartition { .. } => CommandKind::LockPartition,
            PyCommand::ClaimParticipants { .. } => CommandKind::ClaimParticipants,
            PyCommand::PeekPartition {} => CommandKind::PeekPartition,
            PyCommand::WritePartition {} => CommandKind::WritePartition,
            PyCommand::ReleaseParticipants { .. } => CommandKind::ReleaseParticipants,
        }
    }
}

impl From<Command> for PyCommand {
    fn from(command: Command) -> Self {
        match command {
            Command::Reached { point } => PyCommand::Reached {
                point: PyCrashPoint(point),
            },
            Command::Sleep { ms } => PyCommand::Sleep { ms },
            Command::Log { level, message } => PyCommand::Log {
                level: match level {
                    LogLevel::Info => "info",
                    LogLevel::Warning => "warning",
                }
                .to_string(),
                message,
            },
            Command::InitSink { sink_id } => PyCommand::InitSink { sink_id },
            Command::KnownEpoch { sink_id } => PyCommand::KnownEpoch { sink_id },
            Command::SinkBegin { sink_id, epoch } => PyCommand::SinkBegin { sink_id, epoch },
            Command::SinkWrite {
                sink_id,
                epoch,
                keep,
            } => PyCommand::SinkWrite {
                sink_id,
                epoch,
                keep,
            },
            Command::SinkPrepare { sink_id, epoch } => PyCommand::SinkPrepare { sink_id, epoch },
            Command::SinkCommit { sink_id, epoch } => PyCommand::SinkCommit { sink_id, epoch },
            Command::SinkAbort { sink_id, epoch } => PyCommand::SinkAbort { sink_id, epoch },
            Command::SinkRecover { sink_id } => PyCommand::SinkRecover { sink_id },
            Command::RetryCommit { sink_id, epoch } => PyCommand::RetryCommit { sink_id, epoch },
            Command::AbortProducer { sink_id } => PyCommand::AbortProducer { sink_id },
            Command::ReinitProducer { sink_id } => PyCommand::ReinitProducer { sink_id },
            Command::ReadMarker { sink_id } => PyCommand::ReadMarker { sink_id },
            Command::ProduceRedo {
                sink_id,
                epoch,
                blob,
            } => PyCommand::ProduceRedo {
                sink_id,
                epoch,
                blob,
            },
            Command::EndTxn {
                transactional_id,
                producer_id,
                producer_epoch,
                epoch,
            } => PyCommand::EndTxn {
                transactional_id,
                producer_id,
                producer_epoch,
                epoch,
            },
            Command::FenceProducer { transactional_id } => {
                PyCommand::FenceProducer { transactional_id }
            }
            Command::RegisterGroup { group_id } => PyCommand::RegisterGroup { group_id },
            Command::ReadSinkEpochs { sink_ids } => PyCommand::ReadSinkEpochs { sink_ids },
            Command::ReadOwnership {
                registry_id,
                members,
            } => PyCommand::ReadOwnership {
                registry_id,
                members,
            },
            Command::SetOwner {
                ids,
                owner,
                epoch_base,
            } => PyCommand::SetOwner {
                sink_ids: ids,
                owner,
                epoch_base,
            },
            Command::Commit => PyCommand::Commit {},
            Command::Rollback => PyCommand::Rollback {},
            Command::BumpGeneration { group_id } => PyCommand::BumpGeneration { group_id },
            Command::LockGroup { group_id } => PyCommand::LockGroup { group_id },
            Command::ReadGeneration { group_id } => PyCommand::ReadGeneration { group_id },
            Command::LockTable { sink_id, epoch } => PyCommand::LockTable { sink_id, epoch },
            Command::WriteRows { sink_id, epoch } => PyCommand::WriteRows { sink_id, epoch },
            Command::ReplaceRedo {
                transactional_id,
                epoch,
                keep,
            } => PyCommand::ReplaceRedo {
                transactional_id,
                epoch,
                keep,
            },
            Command::RecordDecision {
                transactional_id,
                epoch,
                previous_epoch,
                prepared_state,
                group_id,
            } => PyCommand::RecordDecision {
                transactional_id,
                epoch,
                previous_epoch,
                prepared_state,
                group_id,
            },
            Command::RewriteDecision {
                transactional_id,
                epoch,
                previous_epoch,
                prepared_state,
            } => PyCommand::RewriteDecision {
                transactional_id,
                epoch,
                previous_epoch,
                prepared_state,
            },
            Command::CommitDecision => PyCommand::CommitDecision {},
            Command::ReadDecisions { of } => match of {
                DecisionSelection::Sinks(ids) => PyCommand::ReadDecisions {
                    sink_ids: Some(ids),
                    group_id: None,
                },
                DecisionSelection::Group(g) => PyCommand::ReadDecisions {
                    sink_ids: None,
                    group_id: Some(g),
                },
                DecisionSelection::All => PyCommand::ReadDecisions {
                    sink_ids: None,
                    group_id: None,
                },
            },
            Command::RedoExists {
                transactional_id,
                epoch,
            } => PyCommand::RedoExists {
                transactional_id,
                epoch,
            },
            Command::ReadRedo {
                transactional_id,
                epoch,
            } => PyCommand::ReadRedo {
                transactional_id,
                epoch,
            },
            Command::DeleteRedo {
                transactional_id,
                up_to,
            } => PyCommand::DeleteRedo {
                transactional_id,
                up_to,
            },
            Command::ReadStopFence { group_id } => PyCommand::ReadStopFence { group_id },
            Command::CreateDt {
                dtid,
                group_id,
                epoch,
            } => PyCommand::CreateDt {
                dtid,
                group_id,
                epoch,
            },
            Command::SetDtState {
                dtid,
                from,
                to,
                message,
            } => PyCommand::SetDtState {
                dtid,
                from_state: from.name().to_string(),
                to_state: to.name().to_string(),
                message,
            },
            Command::ReadDtState { dtid, for_share } => PyCommand::ReadDtState { dtid, for_share },
            Command::ConcludeDt { dtid, from } => PyCommand::ConcludeDt {
                dtid,
                from_state: from.map(|s| dt::DtState::name(s).to_string()),
            },
            Command::ReadDtStates { group_id } => PyCommand::ReadDtStates { group_id },
            Command::ReadParticipants { dtid } => PyCommand::ReadParticipants { dtid },
            Command::ReadParticipantDecisions => PyCommand::ReadParticipantDecisions {},
            Command::RunTasks { dtid, epoch } => PyCommand::RunTasks { dtid, epoch },
            Command::ClaimEpoch {
                sink_id,
                epoch,
                rows,
            } => PyCommand::ClaimEpoch {
                sink_id,
                epoch,
                row_count: rows,
            },
            Command::MarkParticipants {
                dtid,
                participants,
                state,
            } => PyCommand::MarkParticipants {
                dtid,
                names: participants,
                state: state.name().to_string(),
            },
            Command::ListPrepared => PyCommand::ListPrepared {},
            Command::CommitPrepared { gid } => PyCommand::CommitPrepared { gid },
            Command::RollbackPrepared { gid } => PyCommand::RollbackPrepared { gid },
            Command::LockPartition { key } => PyCommand::LockPartition { key },
            Command::ClaimParticipants { dtid, rows } => PyCommand::ClaimParticipants {
                dtid,
                participants: rows
                    .into_iter()
                    .map(|r| (r.participant, r.kind.name().to_string(), r.resource))
                    .collect(),
            },
            Command::PeekPartition => PyCommand::PeekPartition {},
            Command::WritePartition => PyCommand::WritePartition {},
            Command::ReleaseParticipants { prepared } => {
                PyCommand::ReleaseParticipants { prepared }
            }
        }
    }
}
