//! What the machines ask the drivers to do ([`Command`]) and what the drivers report back
//! ([`Event`]), with the rows the drivers read. docs/engine.md lists each command with the
//! statement or client call it stands for and the events that answer it.
//!
//! Names: `sink_id` is a sink's id (a Kafka sink's is its transactional id), `transactional_id`
//! names a Kafka transactional id in the decision records (a sink's or a scale-out participant's
//! `<tid>.p<part>`), a scale-out participant is named as in [`super::records`].

use std::fmt;

use super::crash::CrashPoint;
use super::{Epoch, records::DtState};

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
    /// `INSERT laminar.dt_state(dtid, 'prepare') ON CONFLICT DO NOTHING`, committed.
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
            Command::WriteRows { .. } => "write_rows",
            Command::ReplaceRedo { .. } => "replace_redo",
            Command::RecordDecision { .. } => "record_decision",
            Command::RewriteDecision { .. } => "rewrite_decision",
            Command::CommitDecision => "commit_decision",
            Command::ReadDecisions { .. } => "read_decisions",
            Command::RedoExists { .. } => "redo_exists",
            Command::ReadRedo { .. } => "read_redo",
            Command::DeleteRedo { .. } => "delete_redo",
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

/// How a command failed, classified as `laminar.errors` classifies the error the driver caught.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FailureKind {
    /// Nothing was committed (`AbortableError`); `retriable`: the same call may succeed again.
    Abortable { retriable: bool },
    /// The outcome is unknown (`InDoubtError`, or a connection lost during a commit).
    InDoubt,
    /// Another instance took over (`FencedError`).
    Fenced,
    /// Anything else (`FatalError`, a server error).
    Fatal,
}

impl FailureKind {
    /// The kind's name as the bindings spell it.
    pub fn name(self) -> &'static str {
        match self {
            FailureKind::Abortable { .. } => "abortable",
            FailureKind::InDoubt => "in_doubt",
            FailureKind::Fenced => "fenced",
            FailureKind::Fatal => "fatal",
        }
    }
}

/// A failed command: its kind and the error's message (for logs and details).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// How it failed.
    pub kind: FailureKind,
    /// The error's text.
    pub message: String,
}

impl Failure {
    /// A failure.
    pub fn new(kind: FailureKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// A row of `laminar.txn_state` as read (the prepared state as stored: the core decodes it).
#[derive(Debug, Clone, PartialEq)]
pub struct DecisionRow {
    pub transactional_id: String,
    pub epoch: Epoch,
    pub previous_epoch: Option<Epoch>,
    pub prepared_state: String,
    pub group_id: String,
    /// Seconds since `decided_at`.
    pub age_s: f64,
}

/// A prepared transaction of laminar's in `pg_prepared_xacts`.
#[derive(Debug, Clone, PartialEq)]
pub struct PreparedGid {
    pub gid: String,
    /// The sink id the gid names (None: a hashed over-long sink id).
    pub sink_id: Option<String>,
    pub epoch: Option<Epoch>,
    /// Seconds since `PREPARE`.
    pub age_s: f64,
}

/// An unconcluded row of `laminar.dt_state`.
#[derive(Debug, Clone, PartialEq)]
pub struct DtRow {
    pub dtid: String,
    pub epoch: Epoch,
    pub state: DtState,
    /// Seconds since `created_at`.
    pub age_s: f64,
}

/// The kind of a `laminar.dt_participant` row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ParticipantKind {
    /// The attempt that claimed a partition (resource: the attempt's token).
    Attempt,
    /// A PostgreSQL participant (resource: its gid).
    Postgres,
    /// A Kafka participant (resource: its transactional id).
    Kafka,
}

impl ParticipantKind {
    /// Every kind.
    pub const ALL: [ParticipantKind; 3] = [
        ParticipantKind::Attempt,
        ParticipantKind::Postgres,
        ParticipantKind::Kafka,
    ];

    /// The name stored in `laminar.dt_participant.kind`.
    pub fn name(self) -> &'static str {
        match self {
            ParticipantKind::Attempt => "attempt",
            ParticipantKind::Postgres => "postgres",
            ParticipantKind::Kafka => "kafka",
        }
    }

    /// Parses a stored name.
    pub fn from_name(name: &str) -> Option<ParticipantKind> {
        ParticipantKind::ALL.into_iter().find(|k| k.name() == name)
    }
}

/// A row of `laminar.dt_participant`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParticipantRow {
    pub participant: String,
    pub kind: ParticipantKind,
    pub resource: String,
}

/// A PostgreSQL participant with the decision it belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParticipantDecision {
    pub dtid: String,
    pub group_id: String,
    pub state: DtState,
    pub participant: String,
    /// The gid.
    pub resource: String,
}

/// What a task attempt did with one participant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ResultStatus {
    /// Prepared: waits for the decision.
    Prepared,
    /// The partition had no rows: nothing prepared.
    Empty,
    /// Nothing written (the epoch was decided already, or the participant holds it).
    Skipped,
}

impl ResultStatus {
    /// Every status.
    pub const ALL: [ResultStatus; 3] = [
        ResultStatus::Prepared,
        ResultStatus::Empty,
        ResultStatus::Skipped,
    ];

    /// The name in a result row.
    pub fn name(self) -> &'static str {
        match self {
            ResultStatus::Prepared => "prepared",
            ResultStatus::Empty => "empty",
            ResultStatus::Skipped => "skipped",
        }
    }

    /// Parses a name.
    pub fn from_name(name: &str) -> Option<ResultStatus> {
        ResultStatus::ALL.into_iter().find(|s| s.name() == name)
    }
}

/// One participant of one task attempt (a row of `laminar.scaleout.RESULT_SCHEMA`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParticipantResult {
    pub part: u32,
    /// The attempt's token.
    pub attempt: String,
    pub participant: String,
    pub kind: ParticipantKind,
    /// The gid or the transactional id.
    pub resource: String,
    pub records: u64,
    /// The `PreparedTxnState` text (empty unless prepared).
    pub prepared_state: String,
    /// Kafka: the participant's marker before this epoch.
    pub marker: Option<Epoch>,
    pub status: ResultStatus,
}

/// The result of a command, reported by the driver.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// Done, nothing to report.
    Ack,
    /// The command failed.
    Failed(Failure),
    /// The command names something the driver cannot reach (no such sink is configured).
    Missing,
    /// `SinkBegin`: whether a transaction was opened.
    Began { opened: bool },
    /// `WriteRows`, `ClaimEpoch`: whether this transaction claimed the epoch.
    Claimed { claimed: bool },
    /// `LockGroup`, `BumpGeneration`: the stored generation.
    Generation { generation: Option<i64> },
    /// `ReadSinkEpochs`: each sink's last committed epoch.
    Progress {
        epochs: Vec<(String, Option<Epoch>)>,
    },
    /// `ReadOwnership`.
    Ownership {
        owner: Option<String>,
        epoch_base: Epoch,
        member_owners: Vec<(String, String)>,
    },
    /// `ReadDecisions`.
    Decisions { rows: Vec<DecisionRow> },
    /// `ReadMarker`, `KnownEpoch`, `SinkRecover`: the last committed epoch; `now_ms`: the
    /// driver's monotonic clock.
    Marker { epoch: Option<Epoch>, now_ms: u64 },
    /// `RedoExists`, `CommitPrepared`, `RollbackPrepared`, `PeekPartition`.
    Found { found: bool },
    /// `CreateDt`, `SetDtState`, `ConcludeDt`: whether the row changed.
    Applied { applied: bool },
    /// `ReadRedo`: how many blobs were read.
    RedoRead { blobs: u32 },
    /// `SinkPrepare`: the `PreparedTxnState` text.
    Prepared { prepared_state: String },
    /// `EndTxn`: None if the broker accepted it, else why not.
    EndTxn { refused: Option<String> },
    /// `ReadDtState`.
    DtState { state: Option<DtState> },
    /// `ReadDtStates`.
    DtRows { rows: Vec<DtRow> },
    /// `ReadParticipants`.
    Participants { rows: Vec<ParticipantRow> },
    /// `ReadParticipantDecisions`.
    ParticipantDecisions { rows: Vec<ParticipantDecision> },
    /// `ListPrepared`.
    PreparedList { gids: Vec<PreparedGid> },
    /// `RunTasks`.
    TaskResults { results: Vec<ParticipantResult> },
    /// `WritePartition`: rows written.
    Rows { count: u64 },
}

impl Event {
    /// The event's name (snake_case).
    pub fn kind(&self) -> &'static str {
        match self {
            Event::Ack => "ack",
            Event::Failed(_) => "failed",
            Event::Missing => "missing",
            Event::Began { .. } => "began",
            Event::Claimed { .. } => "claimed",
            Event::Generation { .. } => "generation",
            Event::Progress { .. } => "progress",
            Event::Ownership { .. } => "ownership",
            Event::Decisions { .. } => "decisions",
            Event::Marker { .. } => "marker",
            Event::Found { .. } => "found",
            Event::Applied { .. } => "applied",
            Event::RedoRead { .. } => "redo_read",
            Event::Prepared { .. } => "prepared",
            Event::EndTxn { .. } => "end_txn",
            Event::DtState { .. } => "dt_state",
            Event::DtRows { .. } => "dt_rows",
            Event::Participants { .. } => "participants",
            Event::ParticipantDecisions { .. } => "participant_decisions",
            Event::PreparedList { .. } => "prepared_list",
            Event::TaskResults { .. } => "task_results",
            Event::Rows { .. } => "rows",
        }
    }
}

/// The message for an event that does not answer the command (a driver bug).
pub(crate) fn unexpected(command: &Command, event: &Event) -> String {
    format!(
        "protocol driver bug: command {} was answered by event {}",
        command.kind(),
        event.kind()
    )
}
