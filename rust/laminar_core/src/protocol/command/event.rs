//! What the drivers report back: [`Event`], the rows they read, and how a command failed
//! ([`Failure`]).

use crate::protocol::Epoch;
use crate::protocol::dt_state::DtState;
use crate::protocol::failure::Failure;
use crate::protocol::names::ParticipantDecision;
use crate::protocol::records::DecisionRow;

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

/// One participant of one task attempt (a row of `laminar.protocol.scaleout.result_schema()`).
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
    /// `ReadStopFence`: the group's fenced epoch (None: no fence) and the writer the next run
    /// reserved it for (None: not reserved yet).
    StopFence {
        epoch: Option<Epoch>,
        writer: Option<String>,
    },
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
            Event::StopFence { .. } => "stop_fence",
            Event::DtRows { .. } => "dt_rows",
            Event::Participants { .. } => "participants",
            Event::ParticipantDecisions { .. } => "participant_decisions",
            Event::PreparedList { .. } => "prepared_list",
            Event::TaskResults { .. } => "task_results",
            Event::Rows { .. } => "rows",
        }
    }
}
