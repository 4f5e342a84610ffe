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
//! init_sink per PostgreSQL sink, register_group, read_sink_epochs, read_marker per Kafka sink,
//! read_ownership -> owner_decision -> commit | set_owner (or refuse: foreign_owner),
//! bump_generation                                   atomic.after_fence
//! KafkaRecovery of every Kafka sink, known_epoch per Kafka sink,
//! (scale-out: a WatcherPass of the group with resolve_after_s = 0)
//! ```
//!
//! An epoch: [`plan_epoch`] (skip / refuse / the sinks that need it), then [`AtomicEpoch`] (steps
//! 1–8), or the scale-out coordinator ([`crate::protocol::distributed::ScaleOutEpoch`]).

mod epoch;

pub use epoch::{AtomicEpoch, EpochContext};

use std::collections::{BTreeMap, BTreeSet};

use crate::recovery::atomic::{EpochPlan, SinkProgress, plan_epoch};

use super::command::{Command, Event, Failure, FailureKind, LogLevel, unexpected};
use super::crash::CrashPoint;
use super::distributed::{ScaleContext, ScaleOutEpoch};
use super::kafka_recovery::KafkaRecovery;
use super::records::{OwnerDecision, OwnerRecords, owner_decision};
use super::watcher::{PassConfig, WatcherPass};
use super::{End, Epoch, Machine, Outbox, Refusal};

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

#[derive(Debug)]
enum Child {
    Recovery(Box<KafkaRecovery>),
    Epoch(Box<AtomicEpoch>),
    Scaled(Box<ScaleOutEpoch>),
    Pass(Box<WatcherPass>),
}

impl Child {
    fn machine(&mut self) -> &mut dyn Machine {
        match self {
            Child::Recovery(m) => m.as_mut(),
            Child::Epoch(m) => m.as_mut(),
            Child::Scaled(m) => m.as_mut(),
            Child::Pass(m) => m.as_mut(),
        }
    }
}

/// What to do once every queued command is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Then {
    Started,
    Retry,
    Attempt,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    Idle,
    Starting,
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
    out: Outbox,
    child: Option<Child>,
    from_child: bool,
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
    attempt: u32,
    committed: bool,
    failure: Option<End>,
    ending: Option<End>,
    end: Option<End>,
}

impl AtomicGroup {
    /// A group that has not started.
    pub fn new(config: GroupConfig) -> Self {
        Self {
            config,
            out: Outbox::default(),
            child: None,
            from_child: false,
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
            attempt: 0,
            committed: false,
            failure: None,
            ending: None,
            end: None,
        }
    }

    /// Starts the group (register, owner guard, fence, recover); poll until it ends.
    pub fn start(&mut self) {
        self.begin_operation(None);
    }

    /// Writes Spark batch `batch` (epoch `epoch_base + batch`), starting the group first if it
    /// is not started and retrying as configured; poll until it ends, then read
    /// [`AtomicGroup::committed`].
    pub fn write_epoch(&mut self, batch: Epoch) {
        self.begin_operation(Some(batch));
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
        self.out.clear();
        self.child = None;
        self.then = None;
        self.end = None;
        self.ending = None;
        self.failure = None;
        self.batch = batch;
        self.attempt = 1;
        self.committed = false;
        self.begin_attempt();
    }

    fn begin_attempt(&mut self) {
        if self.started {
            return self.plan();
        }
        self.stage = Stage::Starting;
        let c = &self.config;
        for sink_id in &c.postgres {
            self.out.push(Command::InitSink {
                sink_id: sink_id.clone(),
            });
        }
        self.out.push(Command::RegisterGroup {
            group_id: c.group_id.clone(),
        });
        self.out.push(Command::ReadSinkEpochs {
            sink_ids: c.postgres.clone(),
        });
        for sink_id in &c.kafka {
            self.out.push(Command::ReadMarker {
                sink_id: sink_id.clone(),
            });
        }
        self.out.push(Command::ReadOwnership {
            registry_id: c.group_id.clone(),
            members: self.sink_ids(),
        });
    }

    fn sink_ids(&self) -> Vec<String> {
        let c = &self.config;
        c.postgres.iter().chain(&c.kafka).cloned().collect()
    }

    fn on_ownership(&mut self, owner: Option<String>, base: Epoch, owners: Vec<(String, String)>) {
        let members = self.sink_ids();
        let last: Vec<Option<Epoch>> = members.iter().map(|s| self.last_committed(s)).collect();
        let records = OwnerRecords {
            registry_id: &self.config.group_id,
            members: &members,
            owner: owner.as_deref(),
            epoch_base: base,
            member_owners: &owners,
            last_committed: &last,
        };
        let mine = self.config.owner.clone();
        match owner_decision(&records, mine.as_deref(), self.config.restart_on_new_query) {
            Err(r) => {
                self.out.push(Command::Rollback);
                self.fail(End::Refused(r));
                return;
            }
            Ok(OwnerDecision::Keep { epoch_base }) => {
                self.epoch_base = epoch_base;
                self.out.push(Command::Commit);
            }
            Ok(OwnerDecision::Claim {
                epoch_base,
                replaced,
            }) => {
                self.epoch_base = epoch_base;
                if let Some(previous) = replaced {
                    self.out.push(Command::warn(format!(
                        "sinks {members:?}: query {:?} replaces query {previous:?} \
                         (on_new_query='restart'); epochs now start at {epoch_base}",
                        mine.as_deref().unwrap_or_default()
                    )));
                }
                let mut ids = vec![self.config.group_id.clone()];
                ids.extend(members);
                self.out.push(Command::SetOwner {
                    ids,
                    owner: mine.unwrap_or_default(),
                    epoch_base,
                });
            }
        }
        self.out.push(Command::BumpGeneration {
            group_id: self.config.group_id.clone(),
        });
        self.out.push(Command::Reached {
            point: CrashPoint::AtomicAfterFence,
        });
    }

    fn after_recovery(&mut self, recovery: &KafkaRecovery) {
        self.awaiting = recovery.awaiting().to_vec();
        self.decided = recovery
            .decided_epochs()
            .map(|(s, e)| (s.to_owned(), e))
            .collect();
        for sink_id in &self.config.kafka {
            self.out.push(Command::KnownEpoch {
                sink_id: sink_id.clone(),
            });
        }
        if self.config.scale_out {
            self.child = Some(Child::Pass(Box::new(WatcherPass::new(
                PassConfig::owned_group(&self.config.group_id, &self.config.postgres),
            ))));
        } else {
            self.started_log();
        }
    }

    fn started_log(&mut self) {
        let waiting = if self.awaiting.is_empty() {
            String::new()
        } else {
            format!(", awaiting Spark's replay of {:?}", self.awaiting)
        };
        self.out.push(Command::log(
            LogLevel::Info,
            format!(
                "atomic group {}: generation {}, epoch base {}, sinks {:?}{waiting}",
                self.config.group_id,
                self.generation,
                self.epoch_base,
                self.sink_ids()
            ),
        ));
        self.then = Some(Then::Started);
    }

    /// Started: write the batch if there is one.
    fn on_started(&mut self) {
        self.started = true;
        match self.batch {
            Some(_) => self.plan(),
            None => self.ending = Some(End::Ok),
        }
    }

    fn plan(&mut self) {
        let Some(batch) = self.batch else {
            self.ending = Some(End::Ok);
            return;
        };
        self.stage = Stage::Epoch;
        let epoch = self.epoch_base + batch;
        if self.config.scale_out {
            let ctx = ScaleContext {
                group_id: self.config.group_id.clone(),
                generation: self.generation,
                epoch,
                postgres: self
                    .config
                    .postgres
                    .iter()
                    .map(|s| (s.clone(), self.last_committed(s)))
                    .collect(),
                refuse_backwards: self.config.owner.is_some(),
                pending: self.pending.clone(),
            };
            self.child = Some(Child::Scaled(Box::new(ScaleOutEpoch::new(ctx))));
            return;
        }
        let progress: Vec<SinkProgress> = self
            .sink_ids()
            .into_iter()
            .map(|sink_id| SinkProgress {
                last: self.last_committed(&sink_id),
                sink_id,
            })
            .collect();
        let needs = match plan_epoch(
            epoch,
            &progress,
            &self.awaiting,
            self.config.owner.is_some(),
        ) {
            EpochPlan::Refuse(r) => return self.fail(End::Refused(r.for_epoch(epoch))),
            EpochPlan::Skip => {
                self.out.push(Command::log(
                    LogLevel::Info,
                    format!(
                        "atomic group {}: epoch {epoch} already committed, skipped",
                        self.config.group_id
                    ),
                ));
                self.ending = Some(End::Ok);
                return;
            }
            EpochPlan::Write { sinks } => sinks,
        };
        let n_pg = self.config.postgres.len();
        let ctx = EpochContext {
            group_id: self.config.group_id.clone(),
            generation: self.generation,
            epoch,
            postgres: self
                .config
                .postgres
                .iter()
                .zip(&needs)
                .filter(|(_, n)| **n)
                .map(|(s, _)| s.clone())
                .collect(),
            kafka: self
                .config
                .kafka
                .iter()
                .zip(&needs[n_pg..])
                .filter(|(_, n)| **n)
                .map(|(s, _)| {
                    (
                        s.clone(),
                        self.last_committed(s),
                        self.decided.get(s).copied(),
                    )
                })
                .collect(),
            redo_log: self.config.redo_log,
        };
        self.child = Some(Child::Epoch(Box::new(AtomicEpoch::new(ctx))));
    }

    fn after_epoch(&mut self, run: &AtomicEpoch, end: End) {
        let epoch = self.epoch_base + self.batch.unwrap_or_default();
        if run.decided() {
            for sink_id in &self.config.postgres {
                self.last.insert(sink_id.clone(), Some(epoch));
            }
            for (sink_id, _) in run.awaiting() {
                self.decided.insert(sink_id.clone(), epoch);
            }
            for sink_id in run.kafka_committed() {
                self.decided.insert(sink_id.clone(), epoch);
                self.last.insert(sink_id.clone(), Some(epoch));
            }
        }
        self.release_awaiting();
        for (sink_id, e) in run.awaiting() {
            self.awaiting.retain(|(s, _)| s != sink_id);
            self.awaiting.push((sink_id.clone(), *e));
        }
        match end {
            End::Ok => {
                self.committed = true;
                self.ending = Some(End::Ok);
            }
            other => self.fail(other),
        }
    }

    /// A Spark replay that completed an awaited epoch ends the wait.
    fn release_awaiting(&mut self) {
        let last = &self.last;
        let group = &self.config.group_id;
        let mut released = Vec::new();
        self.awaiting.retain(|(sink_id, awaited)| {
            let done =
                super::records::epoch_committed(last.get(sink_id).copied().flatten(), *awaited);
            if done {
                released.push(format!(
                    "atomic group {group}: Spark's replay completed epoch {awaited} in Kafka sink \
                     {sink_id}"
                ));
            }
            !done
        });
        for line in released {
            self.out.push(Command::warn(line));
        }
    }

    /// An attempt failed: refresh, then retry or end.
    fn fail(&mut self, end: End) {
        let was_epoch = self.stage == Stage::Epoch;
        self.failure = Some(end);
        if was_epoch && self.started {
            self.stage = Stage::Refresh;
            self.last.clear();
            self.out.push(Command::ReadSinkEpochs {
                sink_ids: self.config.postgres.clone(),
            });
            for sink_id in &self.config.kafka {
                self.out.push(Command::KnownEpoch {
                    sink_id: sink_id.clone(),
                });
            }
            self.then = Some(Then::Retry);
        } else {
            self.started = false;
            self.decide_retry();
        }
    }

    fn decide_retry(&mut self) {
        let end = self.failure.take().unwrap_or(End::Ok);
        let (retryable, in_doubt, why) = match &end {
            End::Failed(f) => (
                matches!(f.kind, FailureKind::Abortable { .. } | FailureKind::InDoubt),
                f.kind == FailureKind::InDoubt,
                f.message.clone(),
            ),
            End::Refused(r) => (
                r.kind.retryable(),
                r.kind.error_class() == "InDoubtError",
                r.message.clone(),
            ),
            End::Ok => (false, false, String::new()),
        };
        let retries = self.config.retries;
        if !retryable || self.attempt > retries || (in_doubt && !self.awaiting.is_empty()) {
            self.stage = Stage::Idle;
            self.ending = Some(end);
            return;
        }
        let delay = self
            .config
            .retry_backoff_ms
            .saturating_mul(1 << (self.attempt - 1).min(20));
        self.out.push(Command::warn(format!(
            "atomic group {}: epoch {} not written ({why}); retry {}/{retries} in {:.1}s",
            self.config.group_id,
            self.batch.unwrap_or_default(),
            self.attempt,
            delay as f64 / 1000.0
        )));
        self.out.push(Command::Sleep { ms: delay });
        self.stage = Stage::Backoff;
        self.then = Some(Then::Attempt);
        self.attempt += 1;
    }

    fn on_child_end(&mut self, child: Child, end: End) {
        match child {
            Child::Recovery(recovery) => match end {
                End::Ok => self.after_recovery(&recovery),
                other => self.fail(other),
            },
            Child::Pass(pass) => {
                if let Some(line) = pass.startup_summary(&self.config.group_id) {
                    self.out.push(Command::warn(line));
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

    fn on(&mut self, command: Command, event: Event) {
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
            (Command::BumpGeneration { .. }, Event::Generation { generation }) => {
                self.generation = generation.unwrap_or_default();
            }
            (
                Command::Reached {
                    point: CrashPoint::AtomicAfterFence,
                },
                Event::Ack,
            ) => {
                let recovery = KafkaRecovery::new(self.config.kafka.clone());
                self.child = Some(Child::Recovery(Box::new(recovery)));
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
                let failure = Failure::new(FailureKind::Fatal, unexpected(&command, &event));
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
            (_, Command::Rollback | Command::Log { .. }) => {}
            _ => {
                self.out.clear();
                self.fail(End::Failed(failure));
            }
        }
    }
}

impl Machine for AtomicGroup {
    fn poll(&mut self) -> Option<Command> {
        loop {
            if self.end.is_some() {
                return None;
            }
            if let Some(command) = self.out.next() {
                self.from_child = false;
                return Some(command);
            }
            if let Some(child) = self.child.as_mut() {
                if let Some(command) = child.machine().poll() {
                    self.from_child = true;
                    return Some(command);
                }
                let mut child = self.child.take().expect("checked above");
                let end = child.machine().end().cloned().unwrap_or(End::Ok);
                self.on_child_end(child, end);
                continue;
            }
            if let Some(then) = self.then.take() {
                match then {
                    Then::Started => self.on_started(),
                    Then::Retry => self.decide_retry(),
                    Then::Attempt => self.begin_attempt(),
                }
                continue;
            }
            let end = self.ending.take().unwrap_or_else(|| {
                End::Refused(Refusal::new(
                    super::RefusalKind::IllegalTransition,
                    "atomic group: nothing to do (call start() or write_epoch() first)",
                ))
            });
            self.end = Some(end);
        }
    }

    fn handle(&mut self, event: Event) {
        if self.from_child {
            if let Some(child) = self.child.as_mut() {
                child.machine().handle(event);
            }
            return;
        }
        if let Some(command) = self.out.answered() {
            self.on(command, event);
        }
    }

    fn end(&self) -> Option<&End> {
        self.end.as_ref()
    }
}
