//! What the machines ask the drivers to do ([`Command`]) and what the drivers report back
//! ([`Event`], in `event`), with the rows the drivers read. docs/engine.md lists each command with the
//! statement or client call it stands for and the events that answer it.
//!
//! Names: `sink_id` is a sink's id (a Kafka sink's is its transactional id), `transactional_id`
//! names a Kafka transactional id in the decision records (a sink's or a scale-out participant's
//! `<tid>.p<part>`), a scale-out participant is named as in [`super::records`].

mod event;

pub use event::{
    DtRow, Event, ParticipantKind, ParticipantResult, ParticipantRow, PreparedGid, ResultStatus,
};

use crate::protocol::Epoch;
use crate::protocol::crash::CrashPoint;
use crate::protocol::dt_state::DtState;
use crate::protocol::failure::{Failure, FailureKind};

/// Which decision rows (`laminar.txn_state`) to read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecisionSelection {
    /// The rows of these transactional ids.
    Sinks(Vec<String>),
    /// The rows of one group.
    Group(String),
    /// Every row.
    All,
}

/// The state a task or a resolution gives a row of `laminar.dt_participant`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ParticipantState {
    /// Claimed by a task attempt.
    Claimed,
    /// Prepared, counted in the decision.
    Prepared,
    /// Committed by `resolve`.
    Committed,
    /// Rolled back by `resolve`.
    RolledBack,
}

impl ParticipantState {
    /// The name stored in `laminar.dt_participant.state`.
    pub fn name(self) -> &'static str {
        match self {
            ParticipantState::Claimed => "claimed",
            ParticipantState::Prepared => "prepared",
            ParticipantState::Committed => "committed",
            ParticipantState::RolledBack => "rolled_back",
        }
    }

    /// The state a stored name denotes, if any.
    pub fn from_name(name: &str) -> Option<ParticipantState> {
        [
            ParticipantState::Claimed,
            ParticipantState::Prepared,
            ParticipantState::Committed,
            ParticipantState::RolledBack,
        ]
        .into_iter()
        .find(|s| s.name() == name)
    }

    /// Whether a participant in this state may still hold its transaction open (claimed by a
    /// task attempt, or prepared), not yet committed or rolled back by its resolution.
    pub fn open(self) -> bool {
        match self {
            ParticipantState::Claimed | ParticipantState::Prepared => true,
            ParticipantState::Committed | ParticipantState::RolledBack => false,
        }
    }
}

/// How loud a [`Command::Log`] line is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LogLevel {
    /// Routine progress.
    Info,
    /// Something an operator should see (a recovery, a rollback, a refused `EndTxn`).
    Warning,
}

/// One thing for the driver to do. Every command is answered by one [`Event`]; a command that
/// fails is answered by [`Event::Failed`].
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    // -- any driver ------------------------------------------------------------------------------
    /// A crash point (`laminar._faults.crash_point(point.name())`): reached after the command
    /// [`CrashPoint::after`] names. → `Ack`.
    Reached { point: CrashPoint },
    /// Wait this long before the next command. → `Ack`.
    Sleep { ms: u64 },
    /// Log a line (logger `laminar.<protocol>`). → `Ack`.
    Log { level: LogLevel, message: String },

    // -- a sink's own operations -----------------------------------------------------------------
    /// `sink.init_transactions()` (PostgreSQL: connect, schema, table; Kafka: a new producer,
    /// which fences the previous one and aborts what it left open). → `Ack`.
    InitSink { sink_id: String },
    /// What the sink knows as its last committed epoch, without I/O (its tracker). → `Marker`.
    KnownEpoch { sink_id: String },
    /// `sink.begin_transaction(epoch)`. → `Began { opened }` (false: the sink holds the epoch).
    SinkBegin { sink_id: String, epoch: Epoch },
    /// `sink.write(batch)`; `keep`: also keep the encoded records for the redo log. → `Ack`.
    SinkWrite {
        sink_id: String,
        epoch: Epoch,
        keep: bool,
    },
    /// `sink.prepare_transaction()`. → `Prepared { prepared_state }`.
    SinkPrepare { sink_id: String, epoch: Epoch },
    /// `sink.commit_transaction(epoch)`. → `Ack`, or `Failed`.
    SinkCommit { sink_id: String, epoch: Epoch },
    /// `sink.abort_transaction(epoch)` if a transaction is open (best effort). → `Ack`.
    SinkAbort { sink_id: String, epoch: Epoch },
    /// `sink.recover()`: the last committed epoch, an in-doubt commit resolved. → `Marker`.
    SinkRecover { sink_id: String },
    /// Kafka: retry the commit whose outcome is unknown (librdkafka allows it). → `Ack`/`Failed`.
    RetryCommit { sink_id: String, epoch: Epoch },
    /// Kafka: abort the producer's transaction after a failed commit (re-init if that fails).
    AbortProducer { sink_id: String },
    /// Kafka: replace the producer (its `init_transactions` fences the old one). → `Ack`.
    ReinitProducer { sink_id: String },
    /// Kafka: read the epoch marker (or its witness). → `Marker`, `Missing` (no such sink).
    ReadMarker { sink_id: String },
    /// Kafka: produce blob number `blob` of the redo records read by `ReadRedo`. → `Ack`.
    ProduceRedo {
        sink_id: String,
        epoch: Epoch,
        blob: u32,
    },
    /// Kafka: `EndTxn(commit)` with a recorded producer identity over the wire client (the
    /// answer is not proof; the marker is). → `EndTxn { refused }`.
    EndTxn {
        transactional_id: String,
        producer_id: i64,
        producer_epoch: i32,
        epoch: Epoch,
    },
    /// Kafka: a fresh producer for `transactional_id` (`init_transactions`, then close): aborts
    /// what a participant left open. → `Ack`, `Missing`.
    FenceProducer { transactional_id: String },

    // -- the decision database (PostgreSQL, schema `laminar`) -----------------------------------
    /// Register the group and its Kafka sinks in `laminar.sinks` (one transaction). → `Ack`.
    RegisterGroup { group_id: String },
    /// `SELECT sink_id, epoch FROM laminar.sink_epochs WHERE sink_id = ANY(..)`. → `Progress`.
    ReadSinkEpochs { sink_ids: Vec<String> },
    /// Open a transaction: the registry row's owner and epoch base `FOR UPDATE`, and the owners
    /// of the members. → `Ownership`.
    ReadOwnership {
        registry_id: String,
        members: Vec<String>,
    },
    /// In that transaction: make `owner` the owner of `ids` with `epoch_base`; commit. → `Ack`.
    SetOwner {
        ids: Vec<String>,
        owner: String,
        epoch_base: Epoch,
    },
    /// Commit the open transaction (not a decision). → `Ack`.
    Commit,
    /// Roll back the open transaction. → `Ack`.
    Rollback,
    /// `UPDATE laminar.sinks SET generation = generation + 1 … RETURNING generation`,
    /// committed: waits for a decision in flight, then fences it. → `Generation`.
    BumpGeneration { group_id: String },
    /// Open the decision transaction: the group's row lock and generation (docs/protocol.md §3
    /// step 1). → `Generation` (`None`: no row).
    LockGroup { group_id: String },
    /// `SELECT generation FROM laminar.sinks WHERE sink_id = group_id`, in the open transaction
    /// (a resumed start, after `ReadOwnership`'s row lock: nothing moves it until the end of the
    /// transaction). → `Generation` (`None`: no row).
    ReadGeneration { group_id: String },
    /// In the decision transaction: lock the PostgreSQL sink's table and check its definition
    /// against the batch (and plan the COPY), so that a table that cannot take the batch is a
    /// `ConfigError` before any byte is sent to Kafka or PostgreSQL. → `Ack`.
    LockTable { sink_id: String, epoch: Epoch },
    /// In the decision transaction: claim `epoch` in `laminar.sink_epochs` and COPY the batch
    /// into the sink's table. → `Claimed` (false: the sink id holds the epoch).
    WriteRows { sink_id: String, epoch: Epoch },
    /// In the decision transaction: delete the redo rows of earlier epochs; with `keep`, insert
    /// this epoch's kept records. → `Ack`.
    ReplaceRedo {
        transactional_id: String,
        epoch: Epoch,
        keep: bool,
    },
    /// In the decision transaction: upsert `laminar.txn_state` (only over a row whose epoch is
    /// not later: the table's `decide` rule). → `Ack`.
    RecordDecision {
        transactional_id: String,
        epoch: Epoch,
        previous_epoch: Option<Epoch>,
        prepared_state: String,
        group_id: String,
    },
    /// `UPDATE laminar.txn_state SET epoch, previous_epoch, prepared_state`, committed: the
    /// operator's repair or forced rollback (checked by the table). → `Ack`.
    RewriteDecision {
        transactional_id: String,
        epoch: Epoch,
        previous_epoch: Option<Epoch>,
        prepared_state: String,
    },
    /// `COMMIT` of the decision transaction: the decision. → `Ack`, or `Failed` (`InDoubt`:
    /// the connection was lost, the outcome is unknown).
    CommitDecision,
    /// Read decision rows (`laminar.txn_state`), committed. → `Decisions`.
    ReadDecisions { of: DecisionSelection },
    /// Whether `laminar.redo` holds `epoch` of this sink. → `Found`.
    RedoExists {
        transactional_id: String,
        epoch: Epoch,
    },
    /// Read the redo blobs of `epoch` (kept by the driver for `ProduceRedo`). → `RedoRead`.
    ReadRedo {
        transactional_id: String,
        epoch: Epoch,
    },
    /// Delete the redo rows up to `up_to` (Kafka holds them), committed. → `Ack`.
    DeleteRedo {
        transactional_id: String,
        up_to: Epoch,
    },

    // -- distributed transactions (scale-out) ----------------------------------------------------
    /// Open a transaction: the group's stop-fence lock (a shared transaction-scoped advisory
    /// lock, which the fence's writer takes exclusively) and its `laminar.stop_fence` row. The
    /// transaction stays open for the commands that follow (the `CreateDt` and its `Commit`, or
    /// the claim), so a fence set meanwhile waits for them. → `StopFence`.
    ReadStopFence { group_id: String },
    /// `INSERT laminar.dt_state(dtid, 'prepare') ON CONFLICT DO NOTHING`, committed (unless a
    /// transaction is open: `ReadStopFence`'s, ended by the `Commit` that follows).
    /// → `Applied` (false: a row exists).
    CreateDt {
        dtid: String,
        group_id: String,
        epoch: Epoch,
    },
    /// `UPDATE laminar.dt_state SET state = to WHERE dtid AND state = from` (checked by the
    /// table); committed unless inside the decision transaction. → `Applied`.
    SetDtState {
        dtid: String,
        from: DtState,
        to: DtState,
        message: String,
    },
    /// `SELECT state FROM laminar.dt_state WHERE dtid` (`for_share`: `FOR SHARE`, in the task's
    /// claim transaction). → `DtState`.
    ReadDtState { dtid: String, for_share: bool },
    /// `DELETE FROM laminar.dt_state WHERE dtid AND state = from` (participants cascade),
    /// committed. `from = None`: delete whatever state (an empty epoch). → `Applied`.
    ConcludeDt { dtid: String, from: Option<DtState> },
    /// Every unconcluded `laminar.dt_state` row (of one group). → `DtRows`.
    ReadDtStates { group_id: Option<String> },
    /// The rows of `laminar.dt_participant` of `dtid`. → `Participants`.
    ReadParticipants { dtid: String },
    /// Every PostgreSQL participant with its decision, newest decision first. →
    /// `ParticipantDecisions`.
    ReadParticipantDecisions,
    /// Run the scale-out tasks of `epoch` and collect their result rows. → `TaskResults`.
    RunTasks { dtid: String, epoch: Epoch },
    /// In the decision transaction: claim `epoch` in `laminar.sink_epochs`, with `rows`.
    /// → `Claimed`.
    ClaimEpoch {
        sink_id: String,
        epoch: Epoch,
        rows: u64,
    },
    /// Set the state of some participants of `dtid`. → `Ack`.
    MarkParticipants {
        dtid: String,
        participants: Vec<String>,
        state: ParticipantState,
    },
    /// Laminar's prepared transactions (`pg_prepared_xacts`). → `PreparedList`.
    ListPrepared,
    /// `COMMIT PREPARED gid`. → `Found` (false: no such gid).
    CommitPrepared { gid: String },
    /// `ROLLBACK PREPARED gid`. → `Found` (false: no such gid).
    RollbackPrepared { gid: String },

    // -- a scale-out task -------------------------------------------------------------------------
    /// The session advisory lock of `(dtid, part)` on the task's control connection. → `Ack`.
    LockPartition { key: String },
    /// In the claim transaction: upsert these participant rows (state `claimed`); commit. → `Ack`.
    ClaimParticipants {
        dtid: String,
        rows: Vec<ParticipantRow>,
    },
    /// Whether the partition has a row to write. → `Found`.
    PeekPartition,
    /// Write the partition's batches to every participant begun. → `Rows`.
    WritePartition,
    /// Release the participants: with `prepared`, leave prepared transactions open (Kafka
    /// without abort) and close; else close (aborting what is open). → `Ack`.
    ReleaseParticipants { prepared: bool },
}

/// Which command a [`Command`] is, without its fields: its name and the step of an epoch it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CommandKind {
    Reached,
    Sleep,
    Log,
    InitSink,
    KnownEpoch,
    SinkBegin,
    SinkWrite,
    SinkPrepare,
    SinkCommit,
    SinkAbort,
    SinkRecover,
    RetryCommit,
    AbortProducer,
    ReinitProducer,
    ReadMarker,
    ProduceRedo,
    EndTxn,
    FenceProducer,
    RegisterGroup,
    ReadSinkEpochs,
    ReadOwnership,
    SetOwner,
    Commit,
    Rollback,
    BumpGeneration,
    LockGroup,
    ReadGeneration,
    LockTable,
    WriteRows,
    ReplaceRedo,
    RecordDecision,
    RewriteDecision,
    CommitDecision,
    ReadDecisions,
    RedoExists,
    ReadRedo,
    DeleteRedo,
    ReadStopFence,
    CreateDt,
    SetDtState,
    ReadDtState,
    ConcludeDt,
    ReadDtStates,
    ReadParticipants,
    ReadParticipantDecisions,
    RunTasks,
    ClaimEpoch,
    MarkParticipants,
    ListPrepared,
    CommitPrepared,
    RollbackPrepared,
    LockPartition,
    ClaimParticipants,
    PeekPartition,
    WritePartition,
    ReleaseParticipants,
}

impl CommandKind {
    /// The command's name (snake_case), as [`CrashPoint::after`] and the drivers use it.
    pub fn name(self) -> &'static str {
        match self {
            CommandKind::Reached => "reached",
            CommandKind::Sleep => "sleep",
            CommandKind::Log => "log",
            CommandKind::InitSink => "init_sink",
            CommandKind::KnownEpoch => "known_epoch",
            CommandKind::SinkBegin => "sink_begin",
            CommandKind::SinkWrite => "sink_write",
            CommandKind::SinkPrepare => "sink_prepare",
            CommandKind::SinkCommit => "sink_commit",
            CommandKind::SinkAbort => "sink_abort",
            CommandKind::SinkRecover => "sink_recover",
            CommandKind::RetryCommit => "retry_commit",
            CommandKind::AbortProducer => "abort_producer",
            CommandKind::ReinitProducer => "reinit_producer",
            CommandKind::ReadMarker => "read_marker",
            CommandKind::ProduceRedo => "produce_redo",
            CommandKind::EndTxn => "end_txn",
            CommandKind::FenceProducer => "fence_producer",
            CommandKind::RegisterGroup => "register_group",
            CommandKind::ReadSinkEpochs => "read_sink_epochs",
            CommandKind::ReadOwnership => "read_ownership",
            CommandKind::SetOwner => "set_owner",
            CommandKind::Commit => "commit",
            CommandKind::Rollback => "rollback",
            CommandKind::BumpGeneration => "bump_generation",
            CommandKind::LockGroup => "lock_group",
            CommandKind::ReadGeneration => "read_generation",
            CommandKind::LockTable => "lock_table",
            CommandKind::WriteRows => "write_rows",
            CommandKind::ReplaceRedo => "replace_redo",
            CommandKind::RecordDecision => "record_decision",
            CommandKind::RewriteDecision => "rewrite_decision",
            CommandKind::CommitDecision => "commit_decision",
            CommandKind::ReadDecisions => "read_decisions",
            CommandKind::RedoExists => "redo_exists",
            CommandKind::ReadRedo => "read_redo",
            CommandKind::DeleteRedo => "delete_redo",
            CommandKind::ReadStopFence => "read_stop_fence",
            CommandKind::CreateDt => "create_dt",
            CommandKind::SetDtState => "set_dt_state",
            CommandKind::ReadDtState => "read_dt_state",
            CommandKind::ConcludeDt => "conclude_dt",
            CommandKind::ReadDtStates => "read_dt_states",
            CommandKind::ReadParticipants => "read_participants",
            CommandKind::ReadParticipantDecisions => "read_participant_decisions",
            CommandKind::RunTasks => "run_tasks",
            CommandKind::ClaimEpoch => "claim_epoch",
            CommandKind::MarkParticipants => "mark_participants",
            CommandKind::ListPrepared => "list_prepared",
            CommandKind::CommitPrepared => "commit_prepared",
            CommandKind::RollbackPrepared => "rollback_prepared",
            CommandKind::LockPartition => "lock_partition",
            CommandKind::ClaimParticipants => "claim_participants",
            CommandKind::PeekPartition => "peek_partition",
            CommandKind::WritePartition => "write_partition",
            CommandKind::ReleaseParticipants => "release_participants",
        }
    }

    /// The step of an epoch the command is, for the spans a driver opens around it
    /// (docs/operations.md, "Tracing: OpenTelemetry"): `begin`, `write`, `prepare`, `decide`,
    /// `commit`, `abort` or `recover`; None for a command that is no step of its own (a read, a
    /// lock, a log line).
    /// Every kind is named here, so a new one is classified where it is added.
    pub fn step(self) -> Option<&'static str> {
        match self {
            CommandKind::SinkBegin
            | CommandKind::LockGroup
            | CommandKind::CreateDt
            | CommandKind::ClaimParticipants => Some("begin"),
            CommandKind::SinkWrite
            | CommandKind::WriteRows
            | CommandKind::WritePartition
            | CommandKind::ProduceRedo => Some("write"),
            CommandKind::SinkPrepare => Some("prepare"),
            CommandKind::CommitDecision => Some("decide"),
            CommandKind::SinkCommit
            | CommandKind::RetryCommit
            | CommandKind::CommitPrepared
            | CommandKind::EndTxn => Some("commit"),
            CommandKind::SinkAbort | CommandKind::RollbackPrepared | CommandKind::AbortProducer => {
                Some("abort")
            }
            CommandKind::SinkRecover => Some("recover"),
            CommandKind::Reached
            | CommandKind::Sleep
            | CommandKind::Log
            | CommandKind::InitSink
            | CommandKind::KnownEpoch
            | CommandKind::ReinitProducer
            | CommandKind::ReadMarker
            | CommandKind::FenceProducer
            | CommandKind::RegisterGroup
            | CommandKind::ReadSinkEpochs
            | CommandKind::ReadOwnership
            | CommandKind::SetOwner
            | CommandKind::Commit
            | CommandKind::Rollback
            | CommandKind::BumpGeneration
            | CommandKind::ReadGeneration
            | CommandKind::LockTable
            | CommandKind::ReplaceRedo
            | CommandKind::RecordDecision
            | CommandKind::RewriteDecision
            | CommandKind::ReadDecisions
            | CommandKind::RedoExists
            | CommandKind::ReadRedo
            | CommandKind::DeleteRedo
            | CommandKind::ReadStopFence
            | CommandKind::SetDtState
            | CommandKind::ReadDtState
            | CommandKind::ConcludeDt
            | CommandKind::ReadDtStates
            | CommandKind::ReadParticipants
            | CommandKind::ReadParticipantDecisions
            | CommandKind::RunTasks
            | CommandKind::ClaimEpoch
            | CommandKind::MarkParticipants
            | CommandKind::ListPrepared
            | CommandKind::LockPartition
            | CommandKind::PeekPartition
            | CommandKind::ReleaseParticipants => None,
        }
    }
}

impl Command {
    /// Which command this is.
    pub fn kind(&self) -> CommandKind {
        match self {
            Command::Reached { .. } => CommandKind::Reached,
            Command::Sleep { .. } => CommandKind::Sleep,
            Command::Log { .. } => CommandKind::Log,
            Command::InitSink { .. } => CommandKind::InitSink,
            Command::KnownEpoch { .. } => CommandKind::KnownEpoch,
            Command::SinkBegin { .. } => CommandKind::SinkBegin,
            Command::SinkWrite { .. } => CommandKind::SinkWrite,
            Command::SinkPrepare { .. } => CommandKind::SinkPrepare,
            Command::SinkCommit { .. } => CommandKind::SinkCommit,
            Command::SinkAbort { .. } => CommandKind::SinkAbort,
            Command::SinkRecover { .. } => CommandKind::SinkRecover,
            Command::RetryCommit { .. } => CommandKind::RetryCommit,
            Command::AbortProducer { .. } => CommandKind::AbortProducer,
            Command::ReinitProducer { .. } => CommandKind::ReinitProducer,
            Command::ReadMarker { .. } => CommandKind::ReadMarker,
            Command::ProduceRedo { .. } => CommandKind::ProduceRedo,
            Command::EndTxn { .. } => CommandKind::EndTxn,
            Command::FenceProducer { .. } => CommandKind::FenceProducer,
            Command::RegisterGroup { .. } => CommandKind::RegisterGroup,
            Command::ReadSinkEpochs { .. } => CommandKind::ReadSinkEpochs,
            Command::ReadOwnership { .. } => CommandKind::ReadOwnership,
            Command::SetOwner { .. } => CommandKind::SetOwner,
            Command::Commit => CommandKind::Commit,
            Command::Rollback => CommandKind::Rollback,
            Command::BumpGeneration { .. } => CommandKind::BumpGeneration,
            Command::LockGroup { .. } => CommandKind::LockGroup,
            Command::ReadGeneration { .. } => CommandKind::ReadGeneration,
            Command::LockTable { .. } => CommandKind::LockTable,
            Command::WriteRows { .. } => CommandKind::WriteRows,
            Command::ReplaceRedo { .. } => CommandKind::ReplaceRedo,
            Command::RecordDecision { .. } => CommandKind::RecordDecision,
            Command::RewriteDecision { .. } => CommandKind::RewriteDecision,
            Command::CommitDecision => CommandKind::CommitDecision,
            Command::ReadDecisions { .. } => CommandKind::ReadDecisions,
            Command::RedoExists { .. } => CommandKind::RedoExists,
            Command::ReadRedo { .. } => CommandKind::ReadRedo,
            Command::DeleteRedo { .. } => CommandKind::DeleteRedo,
            Command::ReadStopFence { .. } => CommandKind::ReadStopFence,
            Command::CreateDt { .. } => CommandKind::CreateDt,
            Command::SetDtState { .. } => CommandKind::SetDtState,
            Command::ReadDtState { .. } => CommandKind::ReadDtState,
            Command::ConcludeDt { .. } => CommandKind::ConcludeDt,
            Command::ReadDtStates { .. } => CommandKind::ReadDtStates,
            Command::ReadParticipants { .. } => CommandKind::ReadParticipants,
            Command::ReadParticipantDecisions => CommandKind::ReadParticipantDecisions,
            Command::RunTasks { .. } => CommandKind::RunTasks,
            Command::ClaimEpoch { .. } => CommandKind::ClaimEpoch,
            Command::MarkParticipants { .. } => CommandKind::MarkParticipants,
            Command::ListPrepared => CommandKind::ListPrepared,
            Command::CommitPrepared { .. } => CommandKind::CommitPrepared,
            Command::RollbackPrepared { .. } => CommandKind::RollbackPrepared,
            Command::LockPartition { .. } => CommandKind::LockPartition,
            Command::ClaimParticipants { .. } => CommandKind::ClaimParticipants,
            Command::PeekPartition => CommandKind::PeekPartition,
            Command::WritePartition => CommandKind::WritePartition,
            Command::ReleaseParticipants { .. } => CommandKind::ReleaseParticipants,
        }
    }

    /// The step of an epoch the command is ([`CommandKind::step`]).
    pub fn step(&self) -> Option<&'static str> {
        self.kind().step()
    }

    pub(crate) fn log(level: LogLevel, message: impl Into<String>) -> Command {
        Command::Log {
            level,
            message: message.into(),
        }
    }

    pub(crate) fn warn(message: impl Into<String>) -> Command {
        Command::log(LogLevel::Warning, message)
    }
}

/// An event that does not answer the command (a driver bug), as a failure.
pub(crate) fn unexpected(command: &Command, event: &Event) -> Failure {
    Failure::new(
        FailureKind::Fatal,
        format!(
            "protocol driver bug: command {} was answered by event {}",
            command.kind().name(),
            event.kind()
        ),
    )
}

/// How a command failed: the failure it reported, or, answered by anything else, a driver bug.
pub(crate) fn failure_of(command: &Command, event: Event) -> Failure {
    match event {
        Event::Failed(f) => f,
        other => unexpected(command, &other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_step_of_an_epoch_is_named_and_reads_and_locks_are_none() {
        let sink = || "kafka:tid".to_string();
        let cases = [
            (
                Command::SinkBegin {
                    sink_id: sink(),
                    epoch: 7,
                },
                Some("begin"),
            ),
            (
                Command::ClaimParticipants {
                    dtid: "d".into(),
                    rows: Vec::new(),
                },
                Some("begin"),
            ),
            (Command::WritePartition, Some("write")),
            (
                Command::SinkPrepare {
                    sink_id: sink(),
                    epoch: 7,
                },
                Some("prepare"),
            ),
            (Command::CommitDecision, Some("decide")),
            (
                Command::SinkCommit {
                    sink_id: sink(),
                    epoch: 7,
                },
                Some("commit"),
            ),
            (
                Command::SinkAbort {
                    sink_id: sink(),
                    epoch: 7,
                },
                Some("abort"),
            ),
            (Command::SinkRecover { sink_id: sink() }, Some("recover")),
            (Command::LockPartition { key: "k".into() }, None),
            (Command::ListPrepared, None),
            (Command::Commit, None),
        ];
        for (command, step) in cases {
            assert_eq!(command.step(), step, "{}", command.kind().name());
        }
    }

    #[test]
    fn a_participant_is_open_until_its_resolution_commits_or_rolls_it_back() {
        for state in ["claimed", "prepared", "committed", "rolled_back"] {
            let parsed = ParticipantState::from_name(state).expect("a stored name");
            assert_eq!(parsed.name(), state);
            assert_eq!(parsed.open(), matches!(state, "claimed" | "prepared"));
        }
        assert_eq!(ParticipantState::from_name("done"), None);
    }
}
