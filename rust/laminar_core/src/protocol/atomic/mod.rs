//! The atomic group (docs/protocol.md §3, §5, §6): Kafka and PostgreSQL sinks written together,
//! PostgreSQL as the decision log. [`AtomicGroup`] keeps the group's state across epochs (its
//! generation, epoch base, last committed epochs, the epochs awaiting Spark's replay) and runs
//! one operation at a time: [`AtomicGroup::start`] or [`AtomicGroup::write_epoch`] (which starts
//! the group first when needed, and retries an epoch that may be written again, as the writer
//! does).
//!
//! Start-up:
//!
//! ```text
//! init_sink per PostgreSQL sink, register_group, read_sink_epochs, read_marker per Kafka sink
//! (scale-out: read_decisions of the group instead, O(1) in the topic),
//! read_ownership -> owner_decision -> commit | set_owner (or refuse: foreign_owner),
//! bump_generation                                   atomic.after_fence
//! KafkaRecovery of every Kafka sink, known_epoch per Kafka sink
//! (scale-out: KafkaRecovery of the sinks with a decision of their own only, no known_epoch,
//! then a WatcherPass of the group with resolve_after_s = 0)
//! ```
//!
//! Or, for the data source's driver-side `commit` of a run that started up already, a resumed
//! start ([`resume`]): the reads that prove the run's start-up still holds, else the start-up.
//!
//! An epoch: `plan_epoch` (skip / refuse / the sinks that need it), then [`AtomicEpoch`] (steps
//! 1–8), or the scale-out coordinator ([`crate::protocol::distributed::ScaleOutEpoch`]).

mod epoch;
mod resume;
mod run;
mod start;
#[cfg(test)]
mod start_tests;

pub use epoch::{AtomicEpoch, EpochContext};
pub use resume::RunStart;

use std::collections::{BTreeMap, BTreeSet};

use crate::protocol::command::{Command, Event, unexpected};

use crate::protocol::crash::CrashPoint;
use crate::protocol::distributed::ScaleOutEpoch;
use crate::protocol::failure::Failure;
use crate::protocol::kafka_recovery::KafkaRecovery;
use crate::protocol::watcher::WatcherPass;
use crate::protocol::{
    Core, End, Epoch, Idle, Refusal, RefusalKind, Steps, children, core_accessors,
};

/// An atomic group's configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupConfig {
    pub group_id: String,
    /// The PostgreSQL sinks (they share the decision database).
    pub postgres: Vec<String>,
    /// The Kafka sinks (transactional ids).
    pub kafka: Vec<String>,
    /// `redo="log"`.
    pub redo_log: bool,
    /// The query that owns the sinks (None: the writer knows none).
    pub owner: Option<String>,
    /// `on_new_query="restart"`.
    pub restart_on_new_query: bool,
    /// How often an epoch that may be written again is retried.
    pub retries: u32,
    /// The first retry's delay; each next one doubles it.
    pub retry_backoff_ms: u64,
    /// Scale-out mode (docs/protocol.md §4).
    pub scale_out: bool,
}

children!(
    /// What the group runs inside itself.
    Child {
        Recovery(KafkaRecovery),
        Epoch(AtomicEpoch),
        Scaled(ScaleOutEpoch),
        Pass(WatcherPass),
    }
);

/// What to do once every queued command is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Then {
    Started,
    /// A resumed start's reads are answered.
    Resumed,
    Retry,
    Attempt,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    Idle,
    Starting,
    /// Checking that a run's start-up still holds ([`resume`]).
    Resuming,
    Epoch,
    /// Reading the progress back after a failed epoch.
    Refresh,
    /// Waiting before the next attempt.
    Backoff,
}

/// The atomic group's coordinator (module docs).
#[derive(Debug)]
pub struct AtomicGroup {
    config: GroupConfig,
    core: Core<Child>,
    stage: Stage,
    then: Option<Then>,
    started: bool,
    generation: i64,
    epoch_base: Epoch,
    awaiting: Vec<(String, Epoch)>,
    last: BTreeMap<String, Option<Epoch>>,
    decided: BTreeMap<String, Epoch>,
    pending: BTreeSet<String>,
    batch: Option<Epoch>,
    /// The operation decides an epoch whose tasks ran before ([`AtomicGroup::commit_collected`]).
    collected: bool,
    /// The next start resumes this run start instead of starting up ([`resume`]).
    resume: Option<RunStart>,
    resuming: Option<resume::Resuming>,
    /// The last operation resumed a run's start instead of starting up.
    resumed: bool,
    attempt: u32,
    committed: bool,
    failure: Option<End>,
    ending: Option<End>,
}

impl AtomicGroup {
    /// A group that has not started.
    pub fn new(config: GroupConfig) -> Self {
        Self {
            config,
            core: Core::default(),
            stage: Stage::Idle,
            then: None,
            started: false,
            generation: 0,
            epoch_base: 0,
            awaiting: Vec::new(),
            last: BTreeMap::new(),
            decided: BTreeMap::new(),
            pending: BTreeSet::new(),
            batch: None,
            collected: false,
            resume: None,
            resuming: None,
            resumed: false,
            attempt: 0,
            committed: false,
            failure: None,
            ending: None,
        }
    }

    /// Starts the group (register, owner guard, fence, recover); poll until it ends.
    pub fn start(&mut self) {
        self.resume = None;
        self.begin_operation(None);
    }

    /// Writes Spark batch `batch` (epoch `epoch_base + batch`), starting the group first if it
    /// is not started and retrying as configured; poll until it ends, then read
    /// [`AtomicGroup::committed`].
    pub fn write_epoch(&mut self, batch: Epoch) {
        self.collected = false;
        self.resume = None;
        self.begin_operation(Some(batch));
    }

    /// Scale-out: decides and completes Spark batch `batch` whose tasks ran already and created
    /// the epoch's record (the data source's driver-side `commit`, docs/spark.md): `run_tasks`
    /// asks for the results they sent. The start-up's watcher pass spares that record.
    pub fn commit_collected(&mut self, batch: Epoch) {
        self.collected = self.config.scale_out;
        self.resume = None;
        self.begin_operation(Some(batch));
    }

    /// [`AtomicGroup::commit_collected`] in a query run whose start-up ran already (an earlier
    /// `commit` of the same run, in another process: `start` is what it left): the start-up is
    /// skipped when the group still shows `start` and nothing to resolve, and runs otherwise
    /// ([`resume`]). Read [`AtomicGroup::resumed`] after.
    pub fn commit_collected_resumed(&mut self, batch: Epoch, start: RunStart) {
        self.collected = self.config.scale_out;
        self.resume = self.config.scale_out.then_some(start);
        self.begin_operation(Some(batch));
    }

    /// Whether the last operation resumed a run's start (no start-up ran).
    pub fn resumed(&self) -> bool {
        self.resumed
    }

    /// Whether the last `write_epoch` committed (false: skipped, every sink held it).
    pub fn committed(&self) -> bool {
        self.committed
    }

    /// Attempts the last operation took.
    pub fn attempts(&self) -> u32 {
        self.attempt.max(1)
    }

    /// Whether the group is started.
    pub fn started(&self) -> bool {
        self.started
    }

    /// The group's generation (its fencing token).
    pub fn generation(&self) -> i64 {
        self.generation
    }

    /// What is added to Spark's batch id to give the epoch written.
    pub fn epoch_base(&self) -> Epoch {
        self.epoch_base
    }

    /// Kafka sinks whose decided epoch only Spark's replay can complete.
    pub fn awaiting(&self) -> &[(String, Epoch)] {
        &self.awaiting
    }

    /// A sink's last committed epoch as the group knows it.
    pub fn last_committed(&self, sink_id: &str) -> Option<Epoch> {
        self.last.get(sink_id).copied().flatten()
    }

    /// Decided distributed transactions not concluded yet (scale-out).
    pub fn pending(&self) -> impl Iterator<Item = &str> {
        self.pending.iter().map(String::as_str)
    }

    fn begin_operation(&mut self, batch: Option<Epoch>) {
        self.core.restart();
        if batch.is_none() {
            self.collected = false;
        }
        self.then = None;
        self.ending = None;
        self.failure = None;
        self.resuming = None;
        self.resumed = false;
        self.batch = batch;
        self.attempt = 1;
        self.committed = false;
        self.begin_attempt();
    }

    fn child_ended(&mut self, child: Child, end: End) {
        match child {
            Child::Recovery(recovery) => match end {
                End::Ok => self.after_recovery(&recovery),
                other => self.fail(other),
            },
            Child::Pass(pass) => {
                if let Some(line) = pass.startup_summary(&self.config.group_id) {
                    self.core.out.push(Command::warn(line));
                }
                match end {
                    End::Ok => self.started_log(),
                    other => self.fail(other),
                }
            }
            Child::Epoch(run) => self.after_epoch(&run, end),
            Child::Scaled(run) => {
                self.pending = run.pending().clone();
                for (sink_id, last) in run.postgres_last() {
                    self.last.insert(sink_id.clone(), *last);
                }
                match end {
                    End::Ok => {
                        self.committed = run.committed();
                        self.ending = Some(End::Ok);
                    }
                    other => self.fail(other),
                }
            }
        }
    }

    fn step(&mut self, command: Command, event: Event) {
        if let Event::Failed(failure) = event {
            return self.on_failure(command, failure);
        }
        match (command, event) {
            (Command::ReadSinkEpochs { .. }, Event::Progress { epochs }) => {
                for (sink_id, epoch) in epochs {
                    self.last.insert(sink_id, epoch);
                }
                for sink_id in &self.config.postgres {
                    self.last.entry(sink_id.clone()).or_insert(None);
                }
            }
            (
                Command::ReadMarker { sink_id } | Command::KnownEpoch { sink_id },
                Event::Marker { epoch, .. },
            ) => {
                self.last.insert(sink_id, epoch);
            }
            (Command::ReadDecisions { .. }, Event::Decisions { rows }) => {
                self.on_group_decisions(&rows);
            }
            (
                Command::ReadOwnership { .. },
                Event::Ownership {
                    owner,
                    epoch_base,
                    member_owners,
                },
            ) if self.stage == Stage::Resuming => {
                self.resume_ownership(owner, epoch_base, member_owners);
            }
            (
                Command::ReadOwnership { .. },
                Event::Ownership {
                    owner,
                    epoch_base,
                    member_owners,
                },
            ) => {
                self.on_ownership(owner, epoch_base, member_owners);
            }
            (Command::ReadGeneration { .. }, Event::Generation { generation })
                if self.stage == Stage::Resuming =>
            {
                self.resume_generation(generation);
            }
            (Command::ReadDtStates { .. }, Event::DtRows { rows })
                if self.stage == Stage::Resuming =>
            {
                self.resume_records(&rows);
            }
            (Command::BumpGeneration { .. }, Event::Generation { generation }) => {
                self.generation = generation.unwrap_or_default();
            }
            (
                Command::Reached {
                    point: CrashPoint::AtomicAfterFence,
                },
                Event::Ack,
            ) => {
                let kafka = self.config.kafka.clone();
                let recovery = if self.config.scale_out {
                    // only a decision of the sink's own (a run that was not scale-out) has
                    // anything to complete; the participants are the watcher pass's
                    KafkaRecovery::decided_only(kafka)
                } else {
                    KafkaRecovery::new(kafka)
                };
                self.core.run(Child::Recovery(Box::new(recovery)));
            }
            (
                Command::InitSink { .. }
                | Command::RegisterGroup { .. }
                | Command::Commit
                | Command::Rollback
                | Command::SetOwner { .. }
                | Command::Log { .. }
                | Command::Sleep { .. }
                | Command::Reached { .. },
                Event::Ack,
            ) => {}
            (command, event) => {
                let failure = unexpected(&command, &event);
                self.fail(End::Failed(failure));
            }
        }
    }

    fn on_failure(&mut self, command: Command, failure: Failure) {
        match (self.stage, command) {
            // the refresh after a failed epoch: unreadable progress means starting over
            (Stage::Refresh, _) => {
                self.started = false;
            }
            // a resumed start's read failed: the operation fails (no start-up on top of it)
            (Stage::Resuming, _) => {
                self.resuming = None;
                self.then = None;
                self.core.out.clear();
                self.fail(End::Failed(failure));
            }
            (_, Command::Rollback | Command::Log { .. }) => {}
            _ => {
                self.core.out.clear();
                self.fail(End::Failed(failure));
            }
        }
    }
}

impl Steps for AtomicGroup {
    core_accessors!(Child);

    fn on_child_end(&mut self, child: Child, end: End) {
        self.child_ended(child, end);
    }

    fn idle(&mut self) -> Idle {
        match self.then.take() {
            Some(Then::Started) => self.on_started(),
            Some(Then::Resumed) => self.after_resume_reads(),
            Some(Then::Retry) => self.decide_retry(),
            Some(Then::Attempt) => self.begin_attempt(),
            None => {
                return Idle::End(self.ending.take().unwrap_or_else(|| {
                    End::Refused(Refusal::new(
                        RefusalKind::IllegalTransition,
                        "atomic group: nothing to do (call start() or write_epoch() first)",
                    ))
                }));
            }
        }
        Idle::Continue
    }
}
