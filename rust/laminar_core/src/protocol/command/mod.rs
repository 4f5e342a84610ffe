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

impl Command {
    /// The command's name (snake_case), as [`CrashPoint::after`] and the drivers use it.
    pub fn kind(&self) -> &'static str {
        match self {
            Command::Reached { .. } => "reached",
            Command::Sleep { .. } => "sleep",
            Command::Log { .. } => "log",
            Command::InitSink { .. } => "init_sink",
            Command::KnownEpoch { .. } => "known_epoch",
            Command::SinkBegin { .. } => "sink_begin",
            Command::SinkWrite { .. } => "sink_write",
            Command::SinkPrepare { .. } => "sink_prepare",
            Command::SinkCommit { .. } => "sink_commit",
            Command::SinkAbort { .. } => "sink_abort",
            Command::SinkRecover { .. } => "sink_recover",
            Command::RetryCommit { .. } => "retry_commit",
            Command::AbortProducer { .. } => "abort_producer",
            Command::ReinitProducer { .. } => "reinit_producer",
            Command::ReadMarker { .. } => "read_marker",
            Command::ProduceRedo { .. } => "produce_redo",
            Command::EndTxn { .. } => "end_txn",
            Command::FenceProducer { .. } => "fence_producer",
            Command::RegisterGroup { .. } => "register_group",
            Command::ReadSinkEpochs { .. } => "read_sink_epochs",
            Command::ReadOwnership { .. } => "read_ownership",
            Command::SetOwner { .. } => "set_owner",
            Command::Commit => "commit",
            Command::Rollback => "rollback",
            Command::BumpGeneration { .. } => "bump_generation",
            Command::LockGroup { .. } => "lock_group",
            Command::ReadGeneration { .. } => "read_generation",
            Command::LockTable { .. } => "lock_table",
            Command::WriteRows { .. } => "write_rows",
            Command::ReplaceRedo { .. } => "replace_redo",
            Command::RecordDecision { .. } => "record_decision",
            Command::RewriteDecision { .. } => "rewrite_decision",
            Command::CommitDecision => "commit_decision",
            Command::ReadDecisions { .. } => "read_decisions",
            Command::RedoExists { .. } => "redo_exists",
            Command::ReadRedo { .. } => "read_redo",
            Command::DeleteRedo { .. } => "delete_redo",
            Command::ReadStopFence { .. } => "read_stop_fence",
            Command::CreateDt { .. } => "create_dt",
            Command::SetDtState { .. } => "set_dt_state",
            Command::ReadDtState { .. } => "read_dt_state",
            Command::ConcludeDt { .. } => "conclude_dt",
            Command::ReadDtStates { .. } => "read_dt_states",
            Command::ReadParticipants { .. } => "read_participants",
            Command::ReadParticipantDecisions => "read_participant_decisions",
            Command::RunTasks { .. } => "run_tasks",
            Command::ClaimEpoch { .. } => "claim_epoch",
            Command::MarkParticipants { .. } => "mark_participants",
            Command::ListPrepared => "list_prepared",
            Command::CommitPrepared { .. } => "commit_prepared",
            Command::RollbackPrepared { .. } => "rollback_prepared",
            Command::LockPartition { .. } => "lock_partition",
            Command::ClaimParticipants { .. } => "claim_participants",
            Command::PeekPartition => "peek_partition",
            Command::WritePartition => "write_partition",
            Command::ReleaseParticipants { .. } => "release_participants",
        }
    }

    /// The step of an epoch the command is, for the spans a driver opens around it
    /// (docs/operations.md, "Tracing: OpenTelemetry"): `begin`, `write`, `prepare`, `decide`,
    /// `commit`, `abort` or `recover`; None for a command that is no step of its own (a read, a
    /// lock, a log line).
    /// Every kind is named here, so a new one is classified where it is added.
    pub fn step(&self) -> Option<&'static str> {
        match self {
            Command::SinkBegin { .. }
            | Command::LockGroup { .. }
            | Command::CreateDt { .. }
            | Command::ClaimParticipants { .. } => Some("begin"),
            Command::SinkWrite { .. }
            | Command::WriteRows { .. }
            | Command::WritePartition
            | Command::ProduceRedo { .. } => Some("write"),
            Command::SinkPrepare { .. } => Some("prepare"),
            Command::CommitDecision => Some("decide"),
            Command::SinkCommit { .. }
            | Command::RetryCommit { .. }
            | Command::CommitPrepared { .. }
            | Command::EndTxn { .. } => Some("commit"),
            Command::SinkAbort { .. }
            | Command::RollbackPrepared { .. }
            | Command::AbortProducer { .. } => Some("abort"),
            Command::SinkRecover { .. } => Some("recover"),
            Command::Reached { .. }
            | Command::Sleep { .. }
            | Command::Log { .. }
            | Command::InitSink { .. }
            | Command::KnownEpoch { .. }
            | Command::ReinitProducer { .. }
            | Command::ReadMarker { .. }
            | Command::FenceProducer { .. }
            | Command::RegisterGroup { .. }
            | Command::ReadSinkEpochs { .. }
            | Command::ReadOwnership { .. }
            | Command::SetOwner { .. }
            | Command::Commit
            | Command::Rollback
            | Command::BumpGeneration { .. }
            | Command::ReadGeneration { .. }
            | Command::LockTable { .. }
            | Command::ReplaceRedo { .. }
            | Command::RecordDecision { .. }
            | Command::RewriteDecision { .. }
            | Command::ReadDecisions { .. }
            | Command::RedoExists { .. }
            | Command::ReadRedo { .. }
            | Command::DeleteRedo { .. }
            | Command::ReadStopFence { .. }
            | Command::SetDtState { .. }
            | Command::ReadDtState { .. }
            | Command::ConcludeDt { .. }
            | Command::ReadDtStates { .. }
            | Command::ReadParticipants { .. }
            | Command::ReadParticipantDecisions
            | Command::RunTasks { .. }
            | Command::ClaimEpoch { .. }
            | Command::MarkParticipants { .. }
            | Command::ListPrepared
            | Command::LockPartition { .. }
            | Command::PeekPartition
            | Command::ReleaseParticipants { .. } => None,
        }
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
            command.kind(),
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
            assert_eq!(command.step(), step, "{}", command.kind());
        }
    }
}
