//! Finishing one distributed transaction (docs/protocol.md §4): the one definition of
//! roll-back-and-conclude and of complete-and-conclude, used by the coordinator, the watcher,
//! start-up recovery and `laminar resolve`.
//!
//! Roll back ([`Resolution::roll_back`]):
//!
//! ```text
//! set_dt_state prepare -> rollback            scaleout.after_set_rollback
//!   (not applied: read_dt_state — commit: stop, the caller completes it; gone: stop;
//!    rollback: carry on — a recorded rollback is never recorded twice)
//! read_participants, list_prepared
//! rollback_prepared per PostgreSQL participant still prepared (exact gid)
//! fence_producer per Kafka participant (a fresh producer aborts what it left open)
//! conclude_dt from rollback
//! ```
//!
//! Complete ([`Resolution::complete`]; the record says `commit`):
//!
//! ```text
//! the prepared participants — from the coordinator's results, else read_participants,
//!   list_prepared, read_decisions of the Kafka participants
//! commit_prepared per PostgreSQL participant  scaleout.mid_completion after the first
//! end_txn per Kafka participant with its recorded producer; refused -> KafkaRecovery of those
//! conclude_dt from commit
//! ```

use std::collections::BTreeMap;

use crate::protocol::command::{
    Command, DecisionSelection, Event, ParticipantKind, ParticipantResult, ParticipantRow,
    ResultStatus, unexpected,
};

use crate::protocol::crash::CrashPoint;
use crate::protocol::dt_state::{DtEvent, DtState};
use crate::protocol::failure::{Failure, FailureKind};
use crate::protocol::kafka_recovery::KafkaRecovery;
use crate::protocol::names::participant_matches;
use crate::protocol::records::{DecisionRecord, decision_record};
use crate::protocol::transitions::dt_next;
use crate::protocol::{Core, End, Epoch, Idle, Steps, core_accessors};

/// How a resolution ended (when the machine ended `Ok`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResolutionOutcome {
    /// Every participant resolved and the record deleted; how many PostgreSQL participants this
    /// resolution committed or rolled back.
    Concluded { postgres: usize },
    /// The record says `commit`: it is not rolled back (complete it instead).
    DecidedCommit,
    /// The record is gone: it was concluded by someone else.
    Gone,
    /// Left unconcluded, and why (a Kafka participant that cannot be reached or committed).
    Unresolved(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Goal {
    RollBack,
    Complete,
}

/// One distributed transaction driven to its conclusion (module docs).
#[derive(Debug)]
pub struct Resolution {
    dtid: String,
    epoch: Option<Epoch>,
    goal: Goal,
    why: String,
    core: Core<KafkaRecovery>,
    known: Option<Vec<ParticipantResult>>,
    known_gids: Vec<String>,
    kafka: Vec<String>,
    then_recover: bool,
    behind: Vec<String>,
    handled: usize,
    first_commit: bool,
    outcome: Option<ResolutionOutcome>,
}

impl Resolution {
    fn new(dtid: String, epoch: Option<Epoch>, goal: Goal, why: String) -> Self {
        Self {
            dtid,
            epoch,
            goal,
            why,
            core: Core::default(),
            known: None,
            known_gids: Vec::new(),
            kafka: Vec::new(),
            then_recover: false,
            behind: Vec::new(),
            handled: 0,
            first_commit: true,
            outcome: None,
        }
    }

    /// Roll back `dtid` and conclude it. `state`: what the record is known to say (None: not
    /// known; `Rollback`: recorded already, so it is carried on without a transition).
    pub fn roll_back(
        dtid: impl Into<String>,
        state: Option<DtState>,
        why: impl Into<String>,
    ) -> Self {
        let mut me = Self::new(dtid.into(), None, Goal::RollBack, why.into());
        match state {
            Some(DtState::Commit) => me.outcome = Some(ResolutionOutcome::DecidedCommit),
            Some(DtState::Rollback) => me.read_participants(),
            Some(DtState::Prepare) | None => me.set_rollback(),
        }
        me
    }

    /// Complete `dtid` (its record says `commit`) and conclude it. `prepared`: the participants
    /// as the coordinator collected them (None: read them from the records).
    pub fn complete(
        dtid: impl Into<String>,
        epoch: Epoch,
        prepared: Option<Vec<ParticipantResult>>,
    ) -> Self {
        let mut me = Self::new(dtid.into(), Some(epoch), Goal::Complete, String::new());
        match prepared {
            Some(results) => {
                let results: Vec<ParticipantResult> = results
                    .into_iter()
                    .filter(|r| r.status == ResultStatus::Prepared)
                    .collect();
                me.known = Some(results.clone());
                let gids = results
                    .iter()
                    .filter(|r| r.kind == ParticipantKind::Postgres)
                    .map(|r| r.resource.clone())
                    .collect();
                me.commit_postgres(gids);
            }
            None => me.read_participants(),
        }
        me
    }

    /// How it ended (after the machine ended `Ok`).
    pub fn outcome(&self) -> Option<&ResolutionOutcome> {
        self.outcome.as_ref()
    }

    /// The transaction id.
    pub fn dtid(&self) -> &str {
        &self.dtid
    }

    fn set_rollback(&mut self) {
        if let Err(e) = dt_next(Some(DtState::Prepare), DtEvent::SetRollback) {
            self.core
                .finish(End::Failed(Failure::new(FailureKind::Fatal, e.to_string())));
            return;
        }
        self.core.out.push(Command::SetDtState {
            dtid: self.dtid.clone(),
            from: DtState::Prepare,
            to: DtState::Rollback,
            message: self.why.chars().take(500).collect(),
        });
    }

    fn read_participants(&mut self) {
        self.core.out.push(Command::ReadParticipants {
            dtid: self.dtid.clone(),
        });
    }

    fn on_participants(&mut self, rows: Vec<ParticipantRow>) {
        let mut postgres = Vec::new();
        for row in rows {
            match row.kind {
                ParticipantKind::Postgres => postgres.push(row.resource),
                ParticipantKind::Kafka => self.kafka.push(row.resource),
                ParticipantKind::Attempt => {}
            }
        }
        self.known_gids = postgres;
        self.core.out.push(Command::ListPrepared);
    }

    fn on_prepared(&mut self, prepared: Vec<String>) {
        let gids: Vec<String> = self
            .known_gids
            .iter()
            .filter(|r| prepared.iter().any(|gid| participant_matches(r, gid)))
            .cloned()
            .collect();
        match self.goal {
            Goal::RollBack => {
                for gid in gids {
                    self.core.out.push(Command::RollbackPrepared { gid });
                }
                for transactional_id in self.kafka.clone() {
                    self.core
                        .out
                        .push(Command::FenceProducer { transactional_id });
                }
                self.conclude(DtState::Rollback);
            }
            Goal::Complete => {
                self.commit_postgres(gids);
            }
        }
    }

    fn commit_postgres(&mut self, gids: Vec<String>) {
        for gid in gids {
            self.core.out.push(Command::CommitPrepared { gid });
        }
        if let Some(known) = &self.known {
            let kafka: Vec<ParticipantResult> = known
                .iter()
                .filter(|r| r.kind == ParticipantKind::Kafka)
                .cloned()
                .collect();
            let epoch = self.epoch;
            let decisions: Vec<(String, DecisionRecord)> = kafka
                .iter()
                .map(|r| (r.resource.clone(), decision_of_result(r, epoch)))
                .collect();
            self.end_txns(decisions.into_iter());
            self.after_end_txns();
        } else if self.kafka.is_empty() {
            self.conclude(DtState::Commit);
        } else {
            self.core.out.push(Command::ReadDecisions {
                of: DecisionSelection::Sinks(self.kafka.clone()),
            });
        }
    }

    /// `EndTxn` for every Kafka participant whose decision of this epoch names its producer;
    /// the others go straight to the recovery recipe.
    fn end_txns(&mut self, decisions: impl Iterator<Item = (String, DecisionRecord)>) {
        for (transactional_id, decision) in decisions {
            match decision {
                DecisionRecord::Decided {
                    epoch,
                    producer: Some(producer),
                    ..
                } if Some(epoch) == self.epoch => self.core.out.push(Command::EndTxn {
                    transactional_id,
                    producer_id: producer.producer_id,
                    producer_epoch: producer.producer_epoch,
                    epoch,
                }),
                _ => self.behind.push(transactional_id),
            }
        }
    }

    fn after_end_txns(&mut self) {
        self.then_recover = true;
    }

    fn conclude(&mut self, from: DtState) {
        let event = if from == DtState::Commit || from == DtState::Rollback {
            DtEvent::Conclude
        } else {
            DtEvent::ConcludeEmpty
        };
        if let Err(e) = dt_next(Some(from), event) {
            self.core.out.push(Command::warn(e.to_string()));
            return;
        }
        self.core.out.push(Command::ConcludeDt {
            dtid: self.dtid.clone(),
            from: Some(from),
        });
    }

    fn step(&mut self, command: Command, event: Event) {
        match (command, event) {
            (Command::SetDtState { .. }, Event::Applied { applied: true }) => {
                self.core.out.push(Command::Reached {
                    point: CrashPoint::ScaleoutAfterSetRollback,
                });
                self.read_participants();
            }
            (Command::SetDtState { dtid, .. }, Event::Applied { applied: false }) => {
                self.core.out.push(Command::ReadDtState {
                    dtid,
                    for_share: false,
                });
            }
            (Command::ReadDtState { .. }, Event::DtState { state }) => match state {
                Some(DtState::Commit) => self.outcome = Some(ResolutionOutcome::DecidedCommit),
                None => self.outcome = Some(ResolutionOutcome::Gone),
                Some(DtState::Rollback) => self.read_participants(),
                // set back to prepare? only a rolled-back decision transaction does that
                Some(DtState::Prepare) => self.set_rollback(),
            },
            (Command::ReadParticipants { .. }, Event::Participants { rows }) => {
                self.on_participants(rows);
            }
            (Command::ListPrepared, Event::PreparedList { gids }) => {
                self.on_prepared(gids.into_iter().map(|g| g.gid).collect());
            }
            (Command::RollbackPrepared { .. }, Event::Found { found }) => {
                self.handled += usize::from(found);
            }
            (Command::CommitPrepared { .. }, Event::Found { found }) => {
                self.handled += usize::from(found);
                if self.first_commit {
                    self.first_commit = false;
                    self.core.out.push_front(Command::Reached {
                        point: CrashPoint::ScaleoutMidCompletion,
                    });
                }
            }
            (Command::ReadDecisions { .. }, Event::Decisions { rows }) => {
                let by_tid: BTreeMap<String, DecisionRecord> = rows
                    .iter()
                    .map(|r| (r.transactional_id.clone(), decision_record(r)))
                    .collect();
                let kafka = self.kafka.clone();
                self.end_txns(kafka.into_iter().map(|tid| {
                    let d = by_tid.get(&tid).cloned().unwrap_or(DecisionRecord::None);
                    (tid, d)
                }));
                self.after_end_txns();
            }
            (
                Command::EndTxn {
                    transactional_id, ..
                },
                Event::EndTxn { refused },
            ) => {
                if let Some(why) = refused {
                    self.core.out.push_front(Command::warn(format!(
                        "{}: EndTxn of {transactional_id} refused ({why})",
                        self.dtid
                    )));
                    self.behind.push(transactional_id);
                }
            }
            (Command::FenceProducer { transactional_id }, Event::Missing) => {
                self.core.out.clear();
                self.outcome = Some(ResolutionOutcome::Unresolved(format!(
                    "Kafka participant {transactional_id} is not configured here: its open \
                     transaction cannot be aborted"
                )));
            }
            (Command::ConcludeDt { .. }, Event::Applied { .. }) => {
                if self.goal == Goal::RollBack {
                    self.core.out.push(Command::warn(format!(
                        "{} rolled back ({}): {} prepared participant(s)",
                        self.dtid, self.why, self.handled
                    )));
                }
                self.outcome = Some(ResolutionOutcome::Concluded {
                    postgres: self.handled,
                });
            }
            (
                Command::Reached { .. } | Command::Log { .. } | Command::FenceProducer { .. },
                Event::Ack,
            ) => {}
            (_, Event::Failed(f)) => {
                self.core.finish(End::Failed(f));
            }
            (command, event) => {
                self.core.finish(End::Failed(unexpected(&command, &event)));
            }
        }
    }

    fn on_recovered(&mut self, recovery: &KafkaRecovery, end: End) {
        match end {
            End::Ok if recovery.awaiting().is_empty() => self.conclude(DtState::Commit),
            End::Ok => {
                let mut waiting: Vec<&str> = recovery
                    .awaiting()
                    .iter()
                    .map(|(s, _)| s.as_str())
                    .collect();
                waiting.sort_unstable();
                self.outcome = Some(ResolutionOutcome::Unresolved(format!(
                    "Kafka participants {waiting:?} cannot be committed (the broker no longer \
                     holds their transactions)"
                )));
            }
            End::Refused(r) => self.outcome = Some(ResolutionOutcome::Unresolved(r.message)),
            End::Failed(f) => self.core.finish(End::Failed(f)),
        }
    }
}

/// A collected Kafka result as the decision it was recorded with.
fn decision_of_result(result: &ParticipantResult, epoch: Option<Epoch>) -> DecisionRecord {
    let row = crate::protocol::records::DecisionRow {
        transactional_id: result.resource.clone(),
        epoch: epoch.unwrap_or(-1),
        previous_epoch: result.marker,
        prepared_state: result.prepared_state.clone(),
        group_id: String::new(),
        age_s: 0.0,
    };
    decision_record(&row)
}

impl Steps for Resolution {
    core_accessors!(KafkaRecovery);

    fn on_child_end(&mut self, recovery: KafkaRecovery, end: End) {
        self.on_recovered(&recovery, end);
    }

    fn idle(&mut self) -> Idle {
        if std::mem::take(&mut self.then_recover) {
            if self.behind.is_empty() {
                self.conclude(DtState::Commit);
            } else {
                let behind = std::mem::take(&mut self.behind);
                self.core.run(KafkaRecovery::new(behind));
            }
            return Idle::Continue;
        }
        Idle::End(if self.outcome.is_some() {
            End::Ok
        } else {
            End::Failed(Failure::new(
                FailureKind::Fatal,
                format!("{}: resolution stalled", self.dtid),
            ))
        })
    }
}
