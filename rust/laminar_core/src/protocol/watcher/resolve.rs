//! What `laminar resolve <id> --commit|--rollback [--force]` may do (docs/protocol.md §4b).
//!
//! Nobody goes against a recorded decision, or commits a transaction that has no decision,
//! without `--force` ([`check_resolve`], refusal `against_decision`); the forced change is its
//! own event of the transition table (`force_commit`, `force_rollback`, `txn_state`'s
//! `force_back`), never an ordinary one.
//!
//! ```text
//! kafka:<tid>  read_decisions, read_marker
//!              --commit: (corrupt: rewrite_decision = repair) KafkaRecovery of the sink
//!              --rollback --force: rewrite_decision back to the marker
//! <gid>        list_prepared, read_participant_decisions (exact match), check,
//!              commit_prepared | rollback_prepared, mark_participants
//! <dtid>       read_dt_states, check, set_dt_state (the table's event), then
//!              Resolution::complete | Resolution::roll_back
//! ```

use crate::protocol::stalled;

use crate::protocol::command::{Command, DecisionSelection, Event, ParticipantState, unexpected};
use crate::protocol::dt_state::{DtEvent, DtState};
use crate::protocol::kafka_recovery::KafkaRecovery;
use crate::protocol::names::decision_of;
use crate::protocol::records::{
    DecisionRecord, TxnEvent, TxnRow, anonymous_prepared_state, decision_record, illegal,
};
use crate::protocol::resolution::{Resolution, ResolutionOutcome};
use crate::protocol::transitions::{dt_next, txn_next};
use crate::protocol::{
    Core, End, Epoch, Idle, Refusal, RefusalKind, Steps, children, core_accessors,
};

/// What `resolve` is pointed at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResolveTarget {
    /// `kafka:<transactional_id>`: a Kafka sink's decided epoch.
    Kafka(String),
    /// A prepared gid.
    Gid(String),
    /// A distributed transaction id.
    Dtid(String),
}

/// What `resolve` did (when the machine ended `Ok`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResolveOutcome {
    /// A gid or a dtid: committed or rolled back (`done`: it was still there, and concluded).
    Resolved { done: bool },
    /// A Kafka sink's decided epoch is committed in Kafka.
    KafkaCommitted { epoch: Epoch },
    /// Only Spark's replay of `epoch` can complete it.
    AwaitsReplay { epoch: Epoch },
    /// The decision was moved back to Kafka's marker.
    MovedBack { marker: Option<Epoch> },
}

/// Whether the operator may commit (`commit`) or roll back a transaction whose record says
/// `state`; the message names `what`.
pub fn check_resolve(
    state: Option<DtState>,
    commit: bool,
    force: bool,
    what: &str,
) -> Result<(), Refusal> {
    if force {
        return Ok(());
    }
    if commit && state == Some(DtState::Prepare) {
        return Err(Refusal::new(
            RefusalKind::AgainstDecision,
            format!(
                "{what} has no decision yet (state PREPARE: its coordinator never collected every \
                 participant's vote, and its Kafka participants have no recorded producer \
                 identity to commit with): only --rollback is safe. Add --force to commit what \
                 PostgreSQL holds anyway"
            ),
        ));
    }
    let opposite = if commit {
        DtState::Rollback
    } else {
        DtState::Commit
    };
    if state == Some(opposite) {
        return Err(Refusal::new(
            RefusalKind::AgainstDecision,
            format!(
                "the recorded decision for {what} is {}: refusing to {} it (that breaks \
                 atomicity). Add --force if you know the decision is wrong",
                opposite.name().to_uppercase(),
                if commit { "commit" } else { "roll back" }
            ),
        ));
    }
    Ok(())
}

/// The transition a resolve of a record in `state` asks for (None: the record says so already).
pub fn resolve_event(state: DtState, commit: bool) -> Option<DtEvent> {
    match (state, commit) {
        (DtState::Commit, true) | (DtState::Rollback, false) => None,
        (DtState::Prepare | DtState::Rollback, true) => Some(DtEvent::ForceCommit),
        (DtState::Prepare, false) => Some(DtEvent::SetRollback),
        (DtState::Commit, false) => Some(DtEvent::ForceRollback),
    }
}

children!(
    /// What a resolve runs inside itself.
    Child {
        Recovery(KafkaRecovery),
        Resolution(Resolution),
    }
);

/// One `laminar resolve` (module docs).
#[derive(Debug)]
pub struct Resolve {
    target: ResolveTarget,
    commit: bool,
    force: bool,
    core: Core<Child>,
    decision: Option<(DecisionRecord, Epoch, Option<Epoch>)>,
    dt: Option<(DtState, Epoch)>,
    participant: Option<(String, String)>,
    outcome: Option<ResolveOutcome>,
}

impl Resolve {
    /// Resolve `target`: commit it (`commit`) or roll it back, `force` against the record.
    pub fn new(target: ResolveTarget, commit: bool, force: bool) -> Self {
        let mut core = Core::default();
        core.out.push(match &target {
            ResolveTarget::Kafka(tid) => Command::ReadDecisions {
                of: DecisionSelection::Sinks(vec![tid.clone()]),
            },
            ResolveTarget::Gid(_) => Command::ListPrepared,
            ResolveTarget::Dtid(_) => Command::ReadDtStates { group_id: None },
        });
        Self {
            target,
            commit,
            force,
            core,
            decision: None,
            dt: None,
            participant: None,
            outcome: None,
        }
    }

    /// What was done (after the machine ended `Ok`).
    pub fn outcome(&self) -> Option<&ResolveOutcome> {
        self.outcome.as_ref()
    }

    fn id(&self) -> &str {
        match &self.target {
            ResolveTarget::Kafka(s) | ResolveTarget::Gid(s) | ResolveTarget::Dtid(s) => s,
        }
    }

    fn refuse(&mut self, refusal: Refusal) {
        self.core.finish(End::Refused(refusal));
    }

    fn not_found(&mut self, message: String) {
        self.refuse(Refusal::new(RefusalKind::NotFound, message));
    }

    fn on_kafka_marker(&mut self, marker: Option<Epoch>) {
        let tid = self.id().to_owned();
        let Some((record, epoch, previous)) = self.decision.clone() else {
            return;
        };
        let row = record.txn_row();
        if self.commit {
            if matches!(record, DecisionRecord::Corrupt { .. }) {
                // keep the decided epoch, forget the unreadable producer identity: recovery
                // then completes it from the redo log or the replay
                if let Err(e) = txn_next(row, TxnEvent::Repair) {
                    return self.refuse(illegal(e));
                }
                self.core.out.push(Command::RewriteDecision {
                    transactional_id: tid.clone(),
                    epoch,
                    previous_epoch: previous,
                    prepared_state: anonymous_prepared_state(&tid, epoch),
                });
            }
            self.core
                .run(Child::Recovery(Box::new(KafkaRecovery::new(vec![tid]))));
            return;
        }
        if !self.force {
            return self.refuse(Refusal::new(
                RefusalKind::AgainstDecision,
                format!(
                    "the decision for Kafka sink {tid} is COMMIT of epoch {epoch} (PostgreSQL has \
                     it): rolling Kafka's part back leaves PostgreSQL ahead of Kafka for good. Add \
                     --force to accept Kafka's state"
                ),
            ));
        }
        let to = match txn_next(row, TxnEvent::ForceBack(marker)) {
            Ok(TxnRow::Decided(to)) => to,
            Ok(_) => -1,
            Err(e) => return self.refuse(illegal(e)),
        };
        self.core.out.push(Command::RewriteDecision {
            transactional_id: tid.clone(),
            epoch: to,
            previous_epoch: marker,
            prepared_state: anonymous_prepared_state(&tid, to),
        });
        self.outcome = Some(ResolveOutcome::MovedBack { marker });
    }

    fn on_dt(&mut self, state: DtState, epoch: Epoch) {
        let dtid = self.id().to_owned();
        if let Err(r) = check_resolve(Some(state), self.commit, self.force, &dtid) {
            return self.refuse(r);
        }
        self.dt = Some((state, epoch));
        let Some(event) = resolve_event(state, self.commit) else {
            return self.start_resolution();
        };
        match dt_next(Some(state), event) {
            Ok(Some(to)) => self.core.out.push(Command::SetDtState {
                dtid,
                from: state,
                to,
                message: "resolved by laminar resolve".to_owned(),
            }),
            Ok(None) => self.start_resolution(),
            Err(e) => self.refuse(illegal(e)),
        }
    }

    fn start_resolution(&mut self) {
        let (_, epoch) = self.dt.unwrap_or((DtState::Prepare, -1));
        let dtid = self.id().to_owned();
        let resolution = if self.commit {
            Resolution::complete(dtid, epoch, None)
        } else {
            Resolution::roll_back(dtid, Some(DtState::Rollback), "resolved by laminar resolve")
        };
        self.core.run(Child::Resolution(Box::new(resolution)));
    }

    fn step(&mut self, command: Command, event: Event) {
        if let Event::Failed(f) = event {
            self.core.finish(End::Failed(f));
            return;
        }
        let id = self.id().to_owned();
        match (command, event) {
            (Command::ReadDecisions { .. }, Event::Decisions { rows }) => {
                let Some(row) = rows.into_iter().next() else {
                    return self.not_found(format!(
                        "no decision for Kafka sink {id:?} in laminar.txn_state"
                    ));
                };
                self.decision = Some((decision_record(&row), row.epoch, row.previous_epoch));
                self.core.out.push(Command::ReadMarker { sink_id: id });
            }
            (Command::ReadMarker { .. }, Event::Missing) => {
                self.not_found(format!(
                    "Kafka sink {id:?} is not registered in laminar.sinks"
                ));
            }
            (Command::ReadMarker { .. }, Event::Marker { epoch, .. }) => {
                self.on_kafka_marker(epoch)
            }
            (Command::RewriteDecision { .. }, Event::Ack) => {}
            (Command::ListPrepared, Event::PreparedList { gids }) => {
                if !gids.iter().any(|g| g.gid == id) {
                    return self
                        .not_found(format!("no prepared transaction {id:?} in this database"));
                }
                self.core.out.push(Command::ReadParticipantDecisions);
            }
            (Command::ReadParticipantDecisions, Event::ParticipantDecisions { rows }) => {
                let decision = decision_of(&id, &rows);
                let what = format!(
                    "{id} (decision {})",
                    decision.map_or("None", |d| d.dtid.as_str())
                );
                if let Err(r) =
                    check_resolve(decision.map(|d| d.state), self.commit, self.force, &what)
                {
                    return self.refuse(r);
                }
                self.participant = decision.map(|d| (d.dtid.clone(), d.participant.clone()));
                self.core.out.push(if self.commit {
                    Command::CommitPrepared { gid: id }
                } else {
                    Command::RollbackPrepared { gid: id }
                });
            }
            (
                Command::CommitPrepared { .. } | Command::RollbackPrepared { .. },
                Event::Found { found },
            ) => {
                if let Some((dtid, participant)) = self.participant.clone() {
                    self.core.out.push(Command::MarkParticipants {
                        dtid,
                        participants: vec![participant],
                        state: if self.commit {
                            ParticipantState::Committed
                        } else {
                            ParticipantState::RolledBack
                        },
                    });
                }
                self.outcome = Some(ResolveOutcome::Resolved { done: found });
            }
            (Command::MarkParticipants { .. }, Event::Ack) => {}
            (Command::ReadDtStates { .. }, Event::DtRows { rows }) => {
                match rows.into_iter().find(|r| r.dtid == id) {
                    Some(row) => self.on_dt(row.state, row.epoch),
                    None => self.not_found(format!(
                        "{id:?} is not an in-doubt transaction here (see `laminar status`)"
                    )),
                }
            }
            (Command::SetDtState { .. }, Event::Applied { applied: true }) => {
                self.start_resolution()
            }
            (Command::SetDtState { .. }, Event::Applied { applied: false }) => {
                self.refuse(Refusal::new(
                    RefusalKind::IllegalTransition,
                    format!("{id}: its decision changed meanwhile; run `laminar status` and again"),
                ));
            }
            (command, event) => {
                self.core.finish(End::Failed(unexpected(&command, &event)));
            }
        }
    }

    fn child_ended(&mut self, child: Child, end: End) {
        match (child, end) {
            (Child::Recovery(recovery), End::Ok) => {
                let epoch = self.decision.as_ref().map_or(-1, |d| d.1);
                self.outcome = Some(match recovery.awaiting().first() {
                    Some((_, epoch)) => ResolveOutcome::AwaitsReplay { epoch: *epoch },
                    None => ResolveOutcome::KafkaCommitted { epoch },
                });
            }
            (Child::Resolution(resolution), End::Ok) => {
                let done = matches!(
                    resolution.outcome(),
                    Some(ResolutionOutcome::Concluded { .. })
                );
                if let Some(ResolutionOutcome::Unresolved(why)) = resolution.outcome() {
                    self.core
                        .out
                        .push(Command::warn(format!("{}: {why}", self.id())));
                }
                self.outcome = Some(ResolveOutcome::Resolved { done });
            }
            (_, other) => self.core.finish(other),
        }
    }
}

impl Steps for Resolve {
    core_accessors!(Child);

    fn on_child_end(&mut self, child: Child, end: End) {
        self.child_ended(child, end);
    }

    fn idle(&mut self) -> Idle {
        Idle::End(if self.outcome.is_some() {
            End::Ok
        } else {
            stalled("resolve")
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolve_never_goes_against_a_record_without_force() {
        use DtState::*;
        assert!(check_resolve(Some(Commit), true, false, "x").is_ok());
        assert!(check_resolve(Some(Rollback), false, false, "x").is_ok());
        assert!(check_resolve(Some(Prepare), false, false, "x").is_ok());
        assert!(check_resolve(None, true, false, "x").is_ok());
        for (state, commit) in [(Commit, false), (Rollback, true), (Prepare, true)] {
            let r = check_resolve(Some(state), commit, false, "x").unwrap_err();
            assert_eq!(r.kind, RefusalKind::AgainstDecision);
            assert!(r.message.contains("--force"), "{r}");
            assert!(check_resolve(Some(state), commit, true, "x").is_ok());
        }
        // every event resolve asks for is in the table
        for state in DtState::ALL {
            for commit in [true, false] {
                if let Some(event) = resolve_event(state, commit) {
                    assert!(dt_next(Some(state), event).is_ok(), "{state:?} {event:?}");
                }
            }
        }
        assert_eq!(
            resolve_event(Rollback, false),
            None,
            "rollback -> rollback is no change"
        );
    }
}
