//! Bringing Kafka sinks level with the decision log (docs/protocol.md §3, "Recovery"): the one
//! recipe the writer runs at start-up and after a failed step 8, the watcher runs for a decided
//! epoch whose Kafka part is behind, and `laminar resolve`/`recover` run on behalf of an operator.
//!
//! ```text
//! read_decisions
//! per sink:  read_marker [redo_exists] -> complete_kafka
//!              end_txn -> reached(recovery.after_end_txn) -> read_marker (until it moves, ≤ 3 s)
//!              -> complete_kafka again (EndTxn now counts as tried)
//! per sink:  init_sink                  -> reached(recovery.after_init)
//! per sink:  read_marker [redo_exists] -> complete_kafka
//!              redo_from_log: read_redo, sink_begin, produce_redo… (reached(recovery.mid_redo)
//!                             after the first), sink_commit, reached(recovery.after_redo_commit),
//!                             delete_redo
//!              await_replay:  the sink waits for Spark's replay of the epoch ([`KafkaRecovery::awaiting`])
//! ```
//!
//! Every decision is [`complete_kafka`]'s; this machine only orders the
//! I/O around it. `EndTxn` comes first because a new producer's `init_transactions` would abort
//! the prepared transaction; the marker, read again, is the only proof that it worked.

use std::collections::BTreeMap;

pub mod completion;

pub use completion::{Completion, KafkaPart, complete_kafka};

use crate::protocol::command::{Command, DecisionSelection, Event, LogLevel, unexpected};

use crate::protocol::crash::CrashPoint;
use crate::protocol::failure::Failure;
use crate::protocol::records::{DecisionRecord, decision_record, epoch_committed};
use crate::protocol::retry::{MARKER_POLL_MS, marker_wait_ms};
use crate::protocol::{
    Core, End, Epoch, Idle, NoChild, Refusal, RefusalKind, Steps, core_accessors,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Reading the decision rows.
    Decisions,
    /// Protocol-level completion, sink `i`.
    EndTxn,
    /// New producers.
    Init,
    /// Redo or wait, sink `i`.
    Redo,
}

/// The recovery recipe for some Kafka sinks of a group (module docs).
#[derive(Debug)]
pub struct KafkaRecovery {
    core: Core<NoChild>,
    sinks: Vec<String>,
    decisions: BTreeMap<String, DecisionRecord>,
    phase: Phase,
    i: usize,
    marker: Option<Epoch>,
    redo: bool,
    end_txn_tried: bool,
    end_txn_refusal: Option<String>,
    deadline_ms: Option<u64>,
    /// The marker read outstanding answers an `EndTxn`.
    after_end_txn: bool,
    blobs: u32,
    redo_failure: Option<Failure>,
    awaiting: Vec<(String, Epoch)>,
    ending: Option<End>,
    /// Only the sinks with a decision row are recovered ([`KafkaRecovery::decided_only`]).
    decided_only: bool,
}

impl KafkaRecovery {
    /// Recovery of these sinks (transactional ids), in this order.
    pub fn new(sinks: Vec<String>) -> Self {
        Self::with(sinks, false)
    }

    /// Recovery of those of these sinks that have a decision row (decided or corrupt): the
    /// others have nothing to complete, and neither their marker nor a producer is touched (a
    /// scale-out group's own sink, whose participants write: docs/protocol.md §4).
    pub fn decided_only(sinks: Vec<String>) -> Self {
        Self::with(sinks, true)
    }

    fn with(sinks: Vec<String>, decided_only: bool) -> Self {
        let mut core = Core::default();
        if !sinks.is_empty() {
            core.out.push(Command::ReadDecisions {
                of: DecisionSelection::Sinks(sinks.clone()),
            });
        }
        Self {
            core,
            sinks,
            decisions: BTreeMap::new(),
            phase: Phase::Decisions,
            i: 0,
            marker: None,
            redo: false,
            end_txn_tried: false,
            end_txn_refusal: None,
            deadline_ms: None,
            after_end_txn: false,
            blobs: 0,
            redo_failure: None,
            awaiting: Vec::new(),
            ending: None,
            decided_only,
        }
    }

    /// The sinks whose decided epoch only Spark's replay can complete (after the machine ended).
    pub fn awaiting(&self) -> &[(String, Epoch)] {
        &self.awaiting
    }

    /// The decided epoch of each sink, as read (sinks without a readable decision are absent).
    pub fn decided_epochs(&self) -> impl Iterator<Item = (&str, Epoch)> {
        self.decisions.iter().filter_map(|(sink, d)| match d {
            DecisionRecord::Decided { epoch, .. } => Some((sink.as_str(), *epoch)),
            _ => None,
        })
    }

    fn sink(&self) -> &str {
        &self.sinks[self.i]
    }

    fn decision(&self) -> DecisionRecord {
        self.decisions
            .get(self.sink())
            .cloned()
            .unwrap_or(DecisionRecord::None)
    }

    fn decided_epoch(&self) -> Option<Epoch> {
        match self.decision() {
            DecisionRecord::Decided { epoch, .. } => Some(epoch),
            _ => None,
        }
    }

    fn finish(&mut self, end: End) {
        self.core.finish(end);
    }

    /// Starts judging sink `i` of the current phase (or moves to the next phase).
    fn start_sink(&mut self) {
        self.marker = None;
        self.redo = false;
        self.end_txn_tried = self.phase == Phase::Redo;
        self.end_txn_refusal = None;
        self.deadline_ms = None;
        self.after_end_txn = false;
        if self.i < self.sinks.len() {
            self.core.out.push(Command::ReadMarker {
                sink_id: self.sink().to_owned(),
            });
            return;
        }
        match self.phase {
            Phase::Decisions | Phase::EndTxn => {
                self.phase = Phase::Init;
                for sink_id in &self.sinks {
                    self.core.out.push(Command::InitSink {
                        sink_id: sink_id.clone(),
                    });
                }
                self.core.out.push(Command::Reached {
                    point: CrashPoint::RecoveryAfterInit,
                });
            }
            Phase::Init | Phase::Redo => self.ending = Some(End::Ok),
        }
    }

    fn next_sink(&mut self) {
        self.i += 1;
        self.start_sink();
    }

    /// The marker (and redo) of the current sink are known: ask the core.
    fn judge(&mut self) {
        let sink_id = self.sink().to_owned();
        let part = KafkaPart {
            decision: self.decision(),
            marker: self.marker,
            redo_log: self.redo,
            end_txn_refused: self.end_txn_tried,
        };
        match complete_kafka(&sink_id, &part) {
            Completion::Refuse(r) => self.finish(End::Refused(r.for_sink(sink_id))),
            Completion::EndTxn { epoch, producer } if self.phase == Phase::EndTxn => {
                self.core.out.push(Command::EndTxn {
                    transactional_id: sink_id,
                    producer_id: producer.producer_id,
                    producer_epoch: producer.producer_epoch,
                    epoch,
                });
            }
            Completion::EndTxn { .. } => self.finish(End::Refused(Refusal::new(
                RefusalKind::IllegalTransition,
                format!("Kafka sink {sink_id:?}: EndTxn after the new producer's init"),
            ))),
            Completion::Complete => self.next_sink(),
            Completion::RedoFromLog { epoch } if self.phase == Phase::Redo => {
                self.core.out.push(Command::ReadRedo {
                    transactional_id: sink_id,
                    epoch,
                });
            }
            Completion::AwaitReplay { epoch } if self.phase == Phase::Redo => {
                self.core.out.push(Command::warn(format!(
                    "sink {sink_id}: decided epoch {epoch} is committed in PostgreSQL but not in \
                     Kafka, and the broker no longer holds its transaction: waiting for Spark's \
                     replay of batch {epoch}"
                )));
                self.awaiting.push((sink_id, epoch));
                self.next_sink();
            }
            // Before the init, redo and replay wait for the next phase.
            Completion::RedoFromLog { .. } | Completion::AwaitReplay { .. } => self.next_sink(),
        }
    }

    /// After `EndTxn`: the marker read again; wait for it a little when the broker accepted.
    fn after_end_txn_marker(&mut self, marker: Option<Epoch>, now_ms: u64) {
        let Some(d) = self.decided_epoch() else {
            return self.judge();
        };
        let wait = marker_wait_ms(self.end_txn_refusal.is_some());
        let deadline = *self.deadline_ms.get_or_insert(now_ms + wait);
        let sink_id = self.sink().to_owned();
        if epoch_committed(marker, d) {
            self.core.out.push(Command::warn(format!(
                "sink {sink_id}: decided epoch {d} committed in Kafka by EndTxn"
            )));
        } else if now_ms < deadline {
            self.core.out.push(Command::Sleep { ms: MARKER_POLL_MS });
            self.core.out.push(Command::ReadMarker { sink_id });
            return;
        } else {
            let why = self.end_txn_refusal.clone().unwrap_or_else(|| {
                "the marker did not move: the broker had aborted the transaction".to_owned()
            });
            self.core.out.push(Command::warn(format!(
                "sink {sink_id}: EndTxn could not complete decided epoch {d} ({why}); falling \
                 back to the redo log or Spark's replay"
            )));
        }
        self.end_txn_tried = true;
        self.deadline_ms = None;
        self.after_end_txn = false;
        self.judge();
    }

    fn step(&mut self, command: Command, event: Event) {
        if let Event::Failed(failure) = &event {
            return self.on_failure(command, failure.clone());
        }
        match (command, event) {
            (Command::ReadDecisions { .. }, Event::Decisions { rows }) => {
                for row in rows {
                    self.decisions
                        .insert(row.transactional_id.clone(), decision_record(&row));
                }
                if self.decided_only {
                    let decisions = &self.decisions;
                    self.sinks
                        .retain(|s| !matches!(decisions.get(s), None | Some(DecisionRecord::None)));
                }
                self.phase = Phase::EndTxn;
                self.start_sink();
            }
            (Command::ReadMarker { .. }, Event::Marker { epoch, now_ms }) => {
                self.marker = epoch;
                if self.after_end_txn {
                    return self.after_end_txn_marker(epoch, now_ms);
                }
                match self.decided_epoch() {
                    Some(d) => self.core.out.push(Command::RedoExists {
                        transactional_id: self.sink().to_owned(),
                        epoch: d,
                    }),
                    None => self.judge(),
                }
            }
            (Command::ReadMarker { sink_id }, Event::Missing) => self.finish(End::Refused(
                Refusal::new(
                    RefusalKind::NotFound,
                    format!(
                        "Kafka sink {sink_id:?} is not configured here: its marker cannot be read"
                    ),
                )
                .for_sink(sink_id),
            )),
            (Command::RedoExists { .. }, Event::Found { found }) => {
                self.redo = found;
                self.judge();
            }
            (Command::EndTxn { .. }, Event::EndTxn { refused }) => {
                self.end_txn_refusal = refused;
                self.after_end_txn = true;
                self.core.out.push(Command::Reached {
                    point: CrashPoint::RecoveryAfterEndTxn,
                });
                self.core.out.push(Command::ReadMarker {
                    sink_id: self.sink().to_owned(),
                });
            }
            (Command::InitSink { .. }, Event::Ack) => {}
            (
                Command::Reached {
                    point: CrashPoint::RecoveryAfterInit,
                },
                Event::Ack,
            ) => {
                self.phase = Phase::Redo;
                self.i = 0;
                self.start_sink();
            }
            (Command::ReadRedo { epoch, .. }, Event::RedoRead { blobs }) => {
                self.blobs = blobs;
                self.core.out.push(Command::SinkBegin {
                    sink_id: self.sink().to_owned(),
                    epoch,
                });
            }
            (Command::SinkBegin { epoch, .. }, Event::Began { opened }) => {
                if !opened {
                    return self.next_sink();
                }
                let sink_id = self.sink().to_owned();
                for blob in 0..self.blobs {
                    self.core.out.push(Command::ProduceRedo {
                        sink_id: sink_id.clone(),
                        epoch,
                        blob,
                    });
                    if blob == 0 {
                        self.core.out.push(Command::Reached {
                            point: CrashPoint::RecoveryMidRedo,
                        });
                    }
                }
                self.core.out.push(Command::SinkCommit { sink_id, epoch });
            }
            (Command::SinkCommit { sink_id, epoch }, Event::Ack) => {
                self.core.out.push(Command::Reached {
                    point: CrashPoint::RecoveryAfterRedoCommit,
                });
                self.core.out.push(Command::DeleteRedo {
                    transactional_id: sink_id,
                    up_to: epoch,
                });
            }
            (
                Command::DeleteRedo {
                    transactional_id,
                    up_to,
                },
                Event::Ack,
            ) => {
                self.core.out.push(Command::log(
                    LogLevel::Warning,
                    format!(
                        "sink {transactional_id}: epoch {up_to} completed in Kafka from the redo \
                         log ({} blob(s))",
                        self.blobs
                    ),
                ));
                self.next_sink();
            }
            (Command::SinkAbort { .. }, Event::Ack) => {
                let failure = self
                    .redo_failure
                    .take()
                    .unwrap_or_else(|| Failure::new(super::FailureKind::Fatal, "redo failed"));
                self.finish(End::Failed(failure));
            }
            (
                Command::Reached { .. }
                | Command::Sleep { .. }
                | Command::Log { .. }
                | Command::ProduceRedo { .. },
                Event::Ack,
            ) => {}
            (command, event) => self.finish(End::Refused(Refusal::new(
                RefusalKind::IllegalTransition,
                unexpected(&command, &event).message,
            ))),
        }
    }

    fn on_failure(&mut self, command: Command, failure: Failure) {
        match command {
            Command::ProduceRedo { sink_id, epoch, .. }
            | Command::SinkCommit { sink_id, epoch } => {
                self.core.out.clear();
                self.redo_failure = Some(failure);
                self.core.out.push(Command::SinkAbort { sink_id, epoch });
            }
            Command::SinkAbort { .. } => {
                let failure = self.redo_failure.take().unwrap_or(failure);
                self.finish(End::Failed(failure));
            }
            _ => self.finish(End::Failed(failure)),
        }
    }
}

impl Steps for KafkaRecovery {
    core_accessors!(NoChild);

    fn idle(&mut self) -> Idle {
        Idle::End(match self.ending.take() {
            Some(end) => end,
            None if self.sinks.is_empty() => End::Ok,
            None => End::Refused(Refusal::new(
                RefusalKind::IllegalTransition,
                "Kafka recovery stalled",
            )),
        })
    }
}
