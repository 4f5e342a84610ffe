//! One epoch of an atomic group: docs/protocol.md §3, steps 1–8, each followed by its crash
//! point, then the in-process completion of a Kafka commit that failed after the decision.
//!
//! ```text
//! 1 lock_group (check_generation),
//!   lock_table per PostgreSQL sink             atomic.after_lock
//! 2 sink_begin per Kafka sink                atomic.after_kafka_begin
//!   (a sink holding exactly the epoch it was decided for, known_epoch: a failed commit
//!   that landed — done; with no sink left, rollback and no decision)
//! 3 sink_write (keep records for redo)       atomic.after_produce
//! 4 sink_prepare (marker + flush)            atomic.after_kafka_prepare
//! 5 write_rows per PostgreSQL sink,
//!   replace_redo per Kafka sink              atomic.after_rows
//! 6 record_decision per Kafka sink           atomic.after_decision_rows
//! 7 commit_decision (a lost answer is read
//!   back: read_decisions / read_sink_epochs)  atomic.after_decision
//! 8 sink_commit per Kafka sink               atomic.after_kafka_commit
//!   a failed commit → lock_group (still this group's coordinator? else stop: fenced, the new
//!   coordinator completes the epoch), rollback, KafkaRecovery of those sinks, in process
//! ```
//!
//! Before the decision any failure aborts: `rollback` of the decision transaction and
//! `sink_abort` of every Kafka transaction opened. After it nothing is aborted: what failed is
//! completed from the decision.

use crate::protocol::stalled;
use std::collections::BTreeMap;

use crate::protocol::refusal::check_generation;

use crate::protocol::command::{Command, DecisionSelection, Event, unexpected};

use crate::protocol::crash::CrashPoint;
use crate::protocol::failure::FailureKind;
use crate::protocol::kafka_recovery::KafkaRecovery;
use crate::protocol::records::{TxnEvent, TxnRow, epoch_committed, illegal};
use crate::protocol::refusal::show;
use crate::protocol::transitions::txn_next;
use crate::protocol::{Core, End, Epoch, Idle, Refusal, RefusalKind, Steps, core_accessors};

/// What one epoch starts from.
#[derive(Debug, Clone)]
pub struct EpochContext {
    pub group_id: String,
    pub generation: i64,
    pub epoch: Epoch,
    /// The PostgreSQL sinks that need the epoch.
    pub postgres: Vec<String>,
    /// The Kafka sinks that need the epoch, with their last committed epoch (the decision
    /// records it as `previous_epoch`) and their decided epoch as last read.
    pub kafka: Vec<(String, Option<Epoch>, Option<Epoch>)>,
    pub redo_log: bool,
}

/// One epoch (module docs).
#[derive(Debug)]
pub struct AtomicEpoch {
    ctx: EpochContext,
    core: Core<KafkaRecovery>,
    prepared: BTreeMap<String, String>,
    opened: Vec<String>,
    decided: bool,
    /// Kafka sinks whose step 8 committed.
    committed: Vec<String>,
    incomplete: Vec<String>,
    awaiting: Vec<(String, Epoch)>,
    aborting: Option<End>,
    ending: Option<End>,
}

impl AtomicEpoch {
    /// Starts the epoch at step 1.
    pub fn new(ctx: EpochContext) -> Self {
        let mut core = Core::default();
        core.out.push(Command::LockGroup {
            group_id: ctx.group_id.clone(),
        });
        Self {
            ctx,
            core,
            prepared: BTreeMap::new(),
            opened: Vec::new(),
            decided: false,
            committed: Vec::new(),
            incomplete: Vec::new(),
            awaiting: Vec::new(),
            aborting: None,
            ending: None,
        }
    }

    /// Whether the decision committed.
    pub fn decided(&self) -> bool {
        self.decided
    }

    /// The Kafka sinks that hold the epoch now (committed at step 8 or completed in process).
    pub fn kafka_committed(&self) -> &[String] {
        &self.committed
    }

    /// Kafka sinks whose decided epoch only Spark's replay can complete.
    pub fn awaiting(&self) -> &[(String, Epoch)] {
        &self.awaiting
    }

    fn epoch(&self) -> Epoch {
        self.ctx.epoch
    }

    /// Before the decision: undo everything, then end with `end`.
    fn abort(&mut self, end: End, rollback: bool) {
        self.core.out.clear();
        if rollback {
            self.core.out.push(Command::Rollback);
        }
        for sink_id in self.opened.drain(..) {
            self.core.out.push(Command::SinkAbort {
                sink_id,
                epoch: self.ctx.epoch,
            });
        }
        self.aborting = Some(end);
    }

    fn refuse(&mut self, kind: RefusalKind, message: String, sink_id: Option<&str>) {
        let mut refusal = Refusal::new(kind, message).for_epoch(self.epoch());
        if let Some(sink_id) = sink_id {
            refusal = refusal.for_sink(sink_id);
        }
        self.abort(End::Refused(refusal), true);
    }

    fn step_done(&mut self, point: CrashPoint) {
        self.core.out.push(Command::Reached { point });
    }

    fn after_lock(&mut self, stored: Option<i64>) {
        if let Err(r) = check_generation(
            &self.ctx.group_id,
            self.ctx.generation,
            stored.unwrap_or(-1),
        ) {
            return self.abort(End::Refused(r.for_epoch(self.epoch())), true);
        }
        let epoch = self.epoch();
        for sink_id in &self.ctx.postgres {
            self.core.out.push(Command::LockTable {
                sink_id: sink_id.clone(),
                epoch,
            });
        }
        self.step_done(CrashPoint::AtomicAfterLock);
        for (sink_id, _, _) in &self.ctx.kafka {
            self.core.out.push(Command::SinkBegin {
                sink_id: sink_id.clone(),
                epoch,
            });
        }
        self.step_done(CrashPoint::AtomicAfterKafkaBegin);
        for (sink_id, _, _) in &self.ctx.kafka {
            self.core.out.push(Command::SinkWrite {
                sink_id: sink_id.clone(),
                epoch,
                keep: self.ctx.redo_log,
            });
        }
        self.step_done(CrashPoint::AtomicAfterProduce);
        for (sink_id, _, _) in &self.ctx.kafka {
            self.core.out.push(Command::SinkPrepare {
                sink_id: sink_id.clone(),
                epoch,
            });
        }
        self.step_done(CrashPoint::AtomicAfterKafkaPrepare);
        for sink_id in &self.ctx.postgres {
            self.core.out.push(Command::WriteRows {
                sink_id: sink_id.clone(),
                epoch,
            });
        }
        for (sink_id, _, _) in &self.ctx.kafka {
            self.core.out.push(Command::ReplaceRedo {
                transactional_id: sink_id.clone(),
                epoch,
                keep: self.ctx.redo_log,
            });
        }
        self.step_done(CrashPoint::AtomicAfterRows);
    }

    /// Whether the decision log holds this epoch for Kafka sink `sink_id` already: a retry of
    /// an epoch decided by an earlier attempt (its Kafka commit failed, or only the replay
    /// could complete it).
    fn decided_before(&self, sink_id: &str) -> bool {
        let epoch = self.epoch();
        self.ctx
            .kafka
            .iter()
            .any(|(s, _, decided)| s == sink_id && *decided == Some(epoch))
    }

    /// Step 2 found `sink_id` holding the epoch it was decided for: the earlier attempt's
    /// commit, which answered a failure, landed (read back when the sink began). Its part is
    /// done, not another writer's: it leaves this attempt, counted committed.
    fn landed(&mut self, sink_id: String) {
        self.core.out.retain(|c| match c {
            Command::SinkWrite { sink_id: s, .. } | Command::SinkPrepare { sink_id: s, .. } => {
                *s != sink_id
            }
            Command::ReplaceRedo {
                transactional_id: s,
                ..
            } => *s != sink_id,
            _ => true,
        });
        self.ctx.kafka.retain(|(s, _, _)| *s != sink_id);
        if self.ctx.kafka.is_empty() && self.ctx.postgres.is_empty() {
            // nothing left to write: no decision (the epoch is a replay every sink holds)
            self.abort(End::Ok, true);
        }
        self.core.out.push_front(Command::warn(format!(
            "atomic group {}: Kafka sink {sink_id} holds decided epoch {} already: the commit \
             that answered a failure landed",
            self.ctx.group_id,
            self.epoch()
        )));
        self.committed.push(sink_id);
    }

    /// The Kafka sinks the decision records (those this attempt wrote).
    pub fn decided_kafka(&self) -> impl Iterator<Item = &str> {
        self.ctx.kafka.iter().map(|(s, _, _)| s.as_str())
    }

    /// Step 6: the decision rows, each checked by the `txn_state` table.
    fn record_decisions(&mut self) {
        let epoch = self.epoch();
        for (sink_id, last, decided) in self.ctx.kafka.clone() {
            let row = decided.map_or(TxnRow::None, TxnRow::Decided);
            if let Err(e) = txn_next(row, TxnEvent::Decide(epoch)) {
                let refusal = illegal(e).for_sink(sink_id).for_epoch(epoch);
                return self.abort(End::Refused(refusal), true);
            }
            let Some(prepared_state) = self.prepared.get(&sink_id).cloned() else {
                return self.refuse(
                    RefusalKind::IllegalTransition,
                    format!("Kafka sink {sink_id:?} has no prepared state at step 6"),
                    Some(&sink_id),
                );
            };
            self.core.out.push(Command::RecordDecision {
                transactional_id: sink_id,
                epoch,
                previous_epoch: last,
                prepared_state,
                group_id: self.ctx.group_id.clone(),
            });
        }
        self.step_done(CrashPoint::AtomicAfterDecisionRows);
        self.core.out.push(Command::CommitDecision);
    }

    /// After the decision: step 8.
    fn after_decision(&mut self) {
        self.decided = true;
        self.opened.clear();
        self.step_done(CrashPoint::AtomicAfterDecision);
        let epoch = self.epoch();
        for (sink_id, _, _) in &self.ctx.kafka {
            self.core.out.push(Command::SinkCommit {
                sink_id: sink_id.clone(),
                epoch,
            });
        }
        self.step_done(CrashPoint::AtomicAfterKafkaCommit);
    }

    /// The decision's answer was lost: read it back on a new connection.
    fn read_back(&mut self) {
        self.core.out.clear();
        match (self.ctx.kafka.first(), self.ctx.postgres.first()) {
            (Some((sink_id, _, _)), _) => self.core.out.push(Command::ReadDecisions {
                of: DecisionSelection::Sinks(vec![sink_id.clone()]),
            }),
            (None, Some(sink_id)) => self.core.out.push(Command::ReadSinkEpochs {
                sink_ids: vec![sink_id.clone()],
            }),
            (None, None) => self.read_back_done(None),
        }
    }

    fn read_back_done(&mut self, found: Option<Epoch>) {
        if epoch_committed(found, self.epoch()) {
            return self.after_decision();
        }
        let message = format!(
            "the connection was lost during the decision of epoch {}; it did not commit: the \
             epoch is written again",
            self.epoch()
        );
        let refusal = Refusal::new(RefusalKind::DecisionLost, message).for_epoch(self.epoch());
        self.abort(End::Refused(refusal), false);
    }

    /// After step 8: complete what failed, in process — once the generation says this is
    /// still the group's coordinator (a zombie that resumed here would otherwise fence the new
    /// coordinator's producers with its recovery's `init_transactions`).
    fn after_commits(&mut self) {
        if self.incomplete.is_empty() {
            self.ending = Some(End::Ok);
        } else {
            self.core.out.push(Command::LockGroup {
                group_id: self.ctx.group_id.clone(),
            });
        }
    }

    fn check_before_completion(&mut self, stored: Option<i64>) {
        self.core.out.push(Command::Rollback);
        match check_generation(
            &self.ctx.group_id,
            self.ctx.generation,
            stored.unwrap_or(-1),
        ) {
            Ok(()) => self.core.run(KafkaRecovery::new(self.incomplete.clone())),
            Err(r) => self.ending = Some(End::Refused(r.for_epoch(self.epoch()))),
        }
    }

    fn on_recovered(&mut self, recovery: &KafkaRecovery, end: End) {
        if !end.is_ok() {
            self.ending = Some(end);
            return;
        }
        self.awaiting = recovery.awaiting().to_vec();
        let waiting: Vec<&str> = self.awaiting.iter().map(|(s, _)| s.as_str()).collect();
        let done: Vec<String> = self
            .incomplete
            .iter()
            .filter(|s| !waiting.contains(&s.as_str()))
            .cloned()
            .collect();
        self.committed.extend(done);
        if self.awaiting.is_empty() {
            self.ending = Some(End::Ok);
            return;
        }
        let mut sinks: Vec<&str> = waiting;
        sinks.sort_unstable();
        self.ending = Some(End::Refused(
            Refusal::new(
                RefusalKind::AwaitingReplay,
                format!(
                    "epoch {} is decided (committed in PostgreSQL) but Kafka sinks {sinks:?} could \
                     not commit it and the broker no longer holds the transaction: Spark's retry \
                     of this batch completes it",
                    self.epoch()
                ),
            )
            .for_epoch(self.epoch()),
        ));
    }

    fn step(&mut self, command: Command, event: Event) {
        if self.aborting.is_some() {
            // undoing: a failing rollback or abort changes nothing (fencing cleans up)
            return;
        }
        match (command, event) {
            (Command::LockGroup { .. }, Event::Generation { generation }) if self.decided => {
                self.check_before_completion(generation);
            }
            (Command::LockGroup { .. }, Event::Generation { generation }) => {
                self.after_lock(generation);
            }
            (Command::SinkBegin { sink_id, epoch }, Event::Began { opened }) => {
                if opened {
                    self.opened.push(sink_id);
                } else if self.decided_before(&sink_id) {
                    // the sink's own evidence says which epoch it holds: exactly this one, or
                    // another writer went past it
                    self.core.out.push_front(Command::KnownEpoch { sink_id });
                } else {
                    self.refuse(
                        RefusalKind::Fenced,
                        format!(
                            "Kafka sink {sink_id:?} already holds epoch {epoch}: another writer \
                             uses its transactional id"
                        ),
                        Some(&sink_id),
                    );
                }
            }
            (Command::KnownEpoch { sink_id }, Event::Marker { epoch: held, .. }) => {
                if held == Some(self.epoch()) {
                    self.landed(sink_id);
                } else {
                    self.refuse(
                        RefusalKind::Fenced,
                        format!(
                            "Kafka sink {sink_id:?} holds epoch {} past decided epoch {}: \
                             another writer uses its transactional id",
                            show(held),
                            self.epoch()
                        ),
                        Some(&sink_id),
                    );
                }
            }
            (Command::SinkPrepare { sink_id, .. }, Event::Prepared { prepared_state }) => {
                self.prepared.insert(sink_id, prepared_state);
            }
            (Command::WriteRows { sink_id, epoch }, Event::Claimed { claimed }) => {
                if !claimed {
                    self.refuse(
                        RefusalKind::Fenced,
                        format!(
                            "PostgreSQL sink {sink_id:?} already holds epoch {epoch}: another \
                             writer uses its sink id outside this group"
                        ),
                        Some(&sink_id),
                    );
                }
            }
            (
                Command::Reached {
                    point: CrashPoint::AtomicAfterRows,
                },
                Event::Ack,
            ) => self.record_decisions(),
            (Command::CommitDecision, Event::Ack) => self.after_decision(),
            (Command::CommitDecision, Event::Failed(f)) if f.kind == FailureKind::InDoubt => {
                self.read_back();
            }
            (Command::ReadDecisions { .. }, Event::Decisions { rows }) => {
                self.read_back_done(rows.first().map(|r| r.epoch));
            }
            (Command::ReadSinkEpochs { .. }, Event::Progress { epochs }) => {
                self.read_back_done(epochs.first().and_then(|(_, e)| *e));
            }
            (Command::SinkCommit { sink_id, .. }, Event::Ack) => self.committed.push(sink_id),
            (Command::SinkCommit { sink_id, epoch }, Event::Failed(f)) => {
                self.core.out.push(Command::warn(format!(
                    "atomic group {}: Kafka commit of decided epoch {epoch} failed for sink \
                     {sink_id} ({f}); completing it from the decision",
                    self.ctx.group_id
                )));
                self.incomplete.push(sink_id);
            }
            (
                Command::Reached {
                    point: CrashPoint::AtomicAfterKafkaCommit,
                },
                Event::Ack,
            ) => self.after_commits(),
            (_, Event::Failed(f)) if !self.decided => self.abort(End::Failed(f), true),
            (_, Event::Failed(f)) => self.ending = Some(End::Failed(f)),
            (
                Command::Reached { .. }
                | Command::Log { .. }
                | Command::SinkWrite { .. }
                | Command::LockTable { .. }
                | Command::ReplaceRedo { .. }
                | Command::RecordDecision { .. }
                | Command::Rollback,
                Event::Ack,
            ) => {}
            (command, event) => {
                let failure = unexpected(&command, &event);
                if self.decided {
                    self.ending = Some(End::Failed(failure));
                } else {
                    self.abort(End::Failed(failure), true);
                }
            }
        }
    }
}

impl Steps for AtomicEpoch {
    core_accessors!(KafkaRecovery);

    fn on_child_end(&mut self, recovery: KafkaRecovery, end: End) {
        self.on_recovered(&recovery, end);
    }

    fn idle(&mut self) -> Idle {
        Idle::End(
            self.aborting
                .take()
                .or_else(|| self.ending.take())
                .unwrap_or_else(|| stalled("atomic epoch")),
        )
    }
}
