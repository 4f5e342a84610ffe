//! The transition tables of the core, in one place (docs/engine.md §4): each lists every legal
//! change of one record and is applied by one lookup function; anything not listed is illegal and
//! the lookup says why. The states and events themselves live beside the machines that use them.
//!
//! - a sink's own transaction ([`TRANSITIONS`], [`next_state`]; its states in `protocol::state`):
//!
//! ```text
//! Idle --begin(e)--> Active(e) --prepare--> Prepared(e) --commit_started--> Committing(e)
//! Active(e) --commit_started--> Committing(e)                  (one-phase commit)
//! Committing(e) --commit_ok--> Idle
//! Committing(e) --commit_failed--> Failed(e)                   (outcome unknown: never a blind abort)
//! Active(e)/Prepared(e) --abort_started--> Aborting(e) --abort_ok--> Idle
//! Aborting(e) --abort_failed--> Failed(e)
//! Failed(e) --resolve(committed|aborted)--> Idle               (recovery decides)
//! Active(e) --record_write--> Active(e)
//! ```
//!
//! - a distributed transaction's decision record `laminar.dt_state` ([`DT_TRANSITIONS`],
//!   [`dt_next`]; its states and events in `protocol::dt_state`);
//! - a Kafka sink's decision row `laminar.txn_state` ([`TXN_TRANSITIONS`], [`txn_next`]; the row
//!   and its events in `protocol::records`).
//!
//! Every change a command asks for is checked here first, and the command carries the state it
//! changes *from*, so the database applies it only if the row still is in that state.
//!
//! Over 500 lines with its tests on purpose: the three tables and their exhaustiveness tests are
//! kept in one file, so that one place lists every legal change.

use crate::error::{CoreError, CoreResult};
use crate::protocol::state::{EventKind, StateKind, TransactionEvent, TransactionState};

use crate::protocol::dt_state::{DtEvent, DtState};
use crate::protocol::records::{TxnEvent, TxnRow};

// -- a sink's transaction ---------------------------------------------------------------------

/// What a legal transition leads to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Target {
    /// [`TransactionState::Idle`].
    Idle,
    /// The event's epoch becomes the open epoch (only `begin`).
    ActiveWithEventEpoch,
    /// The same epoch, in the given kind of state.
    SameEpoch(StateKind),
}

/// Every legal transition: (from, event, to). Anything not listed is illegal.
pub const TRANSITIONS: &[(StateKind, EventKind, Target)] = &[
    (
        StateKind::Idle,
        EventKind::Begin,
        Target::ActiveWithEventEpoch,
    ),
    (
        StateKind::Active,
        EventKind::RecordWrite,
        Target::SameEpoch(StateKind::Active),
    ),
    (
        StateKind::Active,
        EventKind::Prepare,
        Target::SameEpoch(StateKind::Prepared),
    ),
    // One-phase commit: a sink that needs no separate prepare commits straight from Active.
    (
        StateKind::Active,
        EventKind::CommitStarted,
        Target::SameEpoch(StateKind::Committing),
    ),
    (
        StateKind::Prepared,
        EventKind::CommitStarted,
        Target::SameEpoch(StateKind::Committing),
    ),
    (StateKind::Committing, EventKind::CommitOk, Target::Idle),
    // The commit may or may not have happened: recovery decides, never a blind abort.
    (
        StateKind::Committing,
        EventKind::CommitFailed,
        Target::SameEpoch(StateKind::Failed),
    ),
    (
        StateKind::Active,
        EventKind::AbortStarted,
        Target::SameEpoch(StateKind::Aborting),
    ),
    (
        StateKind::Prepared,
        EventKind::AbortStarted,
        Target::SameEpoch(StateKind::Aborting),
    ),
    (StateKind::Aborting, EventKind::AbortOk, Target::Idle),
    (
        StateKind::Aborting,
        EventKind::AbortFailed,
        Target::SameEpoch(StateKind::Failed),
    ),
    (StateKind::Failed, EventKind::ResolveCommitted, Target::Idle),
    (StateKind::Failed, EventKind::ResolveAborted, Target::Idle),
];

/// Looks `(from, event)` up in [`TRANSITIONS`].
pub fn transition_target(from: StateKind, event: EventKind) -> Option<Target> {
    TRANSITIONS
        .iter()
        .find(|(f, e, _)| *f == from && *e == event)
        .map(|(_, _, to)| *to)
}

/// The events that are legal in a kind of state, in table order.
pub fn legal_events(from: StateKind) -> Vec<EventKind> {
    TRANSITIONS
        .iter()
        .filter(|(f, _, _)| *f == from)
        .map(|(_, e, _)| *e)
        .collect()
}

impl TransactionState {
    /// The state after `event`, or [`CoreError::IllegalState`] if the table has no such transition.
    pub fn next(self, event: TransactionEvent) -> CoreResult<TransactionState> {
        next_state(self, event)
    }

    /// Applies `event` in place; on error the state is unchanged.
    pub fn apply(&mut self, event: TransactionEvent) -> CoreResult<()> {
        *self = next_state(*self, event)?;
        Ok(())
    }
}

/// The one place that decides a transition: the state after `event`, from [`TRANSITIONS`].
pub fn next_state(
    state: TransactionState,
    event: TransactionEvent,
) -> CoreResult<TransactionState> {
    if let TransactionEvent::Begin(e) = event {
        if e < 0 {
            return Err(CoreError::IllegalState(format!(
                "cannot begin epoch {e}: epochs are Spark batch ids and must be >= 0 (state {state})"
            )));
        }
    }
    match transition_target(state.kind(), event.kind()) {
        Some(Target::Idle) => Ok(TransactionState::Idle),
        Some(Target::ActiveWithEventEpoch) => match event {
            TransactionEvent::Begin(e) => Ok(TransactionState::Active(e)),
            // Only `begin` carries an epoch; the table never pairs this target with another event.
            _ => Err(illegal_transaction(state, event)),
        },
        Some(Target::SameEpoch(kind)) => match state.epoch() {
            Some(e) => Ok(kind.with_epoch(e)),
            None => Err(illegal_transaction(state, event)),
        },
        None => Err(illegal_transaction(state, event)),
    }
}

fn illegal_transaction(state: TransactionState, event: TransactionEvent) -> CoreError {
    let legal: Vec<&str> = legal_events(state.kind())
        .into_iter()
        .map(EventKind::name)
        .collect();
    let hint = match (state, event) {
        (TransactionState::Failed(_), _) => {
            " (the outcome of the commit or abort is unknown: recovery must resolve it first)"
        }
        (TransactionState::Committing(_), TransactionEvent::AbortStarted) => {
            " (a commit in flight is never aborted blindly: wait for commit_ok or commit_failed)"
        }
        (_, TransactionEvent::Begin(e)) if state.epoch().is_some_and(|open| e < open) => {
            " (the epoch goes backwards while another transaction is open)"
        }
        _ => "",
    };
    CoreError::IllegalState(format!(
        "illegal transaction transition: cannot {event} in state {state}; legal here: {}{hint}",
        legal.join(", ")
    ))
}

// -- laminar.dt_state -----------------------------------------------------------------------------

/// Every legal transition (`None`: no record). Anything not listed is illegal.
pub const DT_TRANSITIONS: &[(Option<DtState>, DtEvent, Option<DtState>)] = &[
    (None, DtEvent::Create, Some(DtState::Prepare)),
    (
        Some(DtState::Prepare),
        DtEvent::StartCommit,
        Some(DtState::Commit),
    ),
    (
        Some(DtState::Prepare),
        DtEvent::SetRollback,
        Some(DtState::Rollback),
    ),
    (Some(DtState::Commit), DtEvent::Conclude, None),
    (Some(DtState::Rollback), DtEvent::Conclude, None),
    (Some(DtState::Prepare), DtEvent::ConcludeEmpty, None),
    (
        Some(DtState::Prepare),
        DtEvent::ForceCommit,
        Some(DtState::Commit),
    ),
    (
        Some(DtState::Rollback),
        DtEvent::ForceCommit,
        Some(DtState::Commit),
    ),
    (
        Some(DtState::Commit),
        DtEvent::ForceRollback,
        Some(DtState::Rollback),
    ),
];

/// The state after `event`, or [`CoreError::IllegalState`] naming both.
pub fn dt_next(state: Option<DtState>, event: DtEvent) -> CoreResult<Option<DtState>> {
    DT_TRANSITIONS
        .iter()
        .find(|(from, e, _)| *from == state && *e == event)
        .map(|(_, _, to)| *to)
        .ok_or_else(|| {
            let shown = state.map_or("no record", DtState::name);
            let hint = match (state, event) {
                (Some(DtState::Commit), DtEvent::SetRollback) => {
                    " (a decision to commit is final: the participants must be committed)"
                }
                (Some(DtState::Rollback), DtEvent::StartCommit) => {
                    " (a decision to roll back is final)"
                }
                (Some(DtState::Rollback), DtEvent::SetRollback) => {
                    " (the rollback is recorded already: carry it on)"
                }
                _ => "",
            };
            CoreError::IllegalState(format!(
                "distributed transaction: cannot {} in state {shown}{hint}",
                event.name()
            ))
        })
}

// -- laminar.txn_state ----------------------------------------------------------------------------

/// The kind of a [`TxnRow`] (the rows of the table).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TxnRowKind {
    /// [`TxnRow::None`].
    None,
    /// [`TxnRow::Decided`].
    Decided,
    /// [`TxnRow::Corrupt`].
    Corrupt,
}

/// The kind of a [`TxnEvent`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TxnEventKind {
    /// [`TxnEvent::Decide`].
    Decide,
    /// [`TxnEvent::Repair`].
    Repair,
    /// [`TxnEvent::ForceBack`].
    ForceBack,
}

/// Every legal change of a decision row; [`txn_next`] also keeps `Decide` from going back.
pub const TXN_TRANSITIONS: &[(TxnRowKind, TxnEventKind, TxnRowKind)] = &[
    (TxnRowKind::None, TxnEventKind::Decide, TxnRowKind::Decided),
    (
        TxnRowKind::Decided,
        TxnEventKind::Decide,
        TxnRowKind::Decided,
    ),
    (
        TxnRowKind::Corrupt,
        TxnEventKind::Repair,
        TxnRowKind::Decided,
    ),
    (
        TxnRowKind::Decided,
        TxnEventKind::ForceBack,
        TxnRowKind::Decided,
    ),
    (
        TxnRowKind::Corrupt,
        TxnEventKind::ForceBack,
        TxnRowKind::Decided,
    ),
];

impl TxnRow {
    /// The row's kind in [`TXN_TRANSITIONS`].
    pub fn kind(self) -> TxnRowKind {
        match self {
            TxnRow::None => TxnRowKind::None,
            TxnRow::Decided(_) => TxnRowKind::Decided,
            TxnRow::Corrupt(_) => TxnRowKind::Corrupt,
        }
    }
}

impl TxnEvent {
    /// The event's kind in [`TXN_TRANSITIONS`].
    pub fn kind(self) -> TxnEventKind {
        match self {
            TxnEvent::Decide(_) => TxnEventKind::Decide,
            TxnEvent::Repair => TxnEventKind::Repair,
            TxnEvent::ForceBack(_) => TxnEventKind::ForceBack,
        }
    }
}

/// The decision row after `event`, or [`CoreError::IllegalState`] naming both.
pub fn txn_next(row: TxnRow, event: TxnEvent) -> Result<TxnRow, CoreError> {
    let legal = TXN_TRANSITIONS
        .iter()
        .any(|(from, e, _)| *from == row.kind() && *e == event.kind());
    let illegal = |why: &str| {
        CoreError::IllegalState(format!(
            "decision row (laminar.txn_state): cannot {event:?} from {row:?}{why}"
        ))
    };
    if !legal {
        return Err(illegal(match row {
            TxnRow::Corrupt(_) => " (a corrupt decision is only changed by the operator)",
            _ => "",
        }));
    }
    Ok(match (row, event) {
        (TxnRow::Decided(d), TxnEvent::Decide(e)) if e < d => {
            return Err(illegal(" (a decision never goes back to an earlier epoch)"));
        }
        (_, TxnEvent::Decide(e)) => TxnRow::Decided(e),
        (TxnRow::Corrupt(d), TxnEvent::Repair) => TxnRow::Decided(d),
        (_, TxnEvent::ForceBack(marker)) => TxnRow::Decided(marker.unwrap_or(-1)),
        _ => return Err(illegal("")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::state::{Epoch, InDoubtOutcome};

    fn event_of(kind: EventKind, epoch: Epoch) -> TransactionEvent {
        match kind {
            EventKind::Begin => TransactionEvent::Begin(epoch),
            EventKind::RecordWrite => TransactionEvent::RecordWrite,
            EventKind::Prepare => TransactionEvent::Prepare,
            EventKind::CommitStarted => TransactionEvent::CommitStarted,
            EventKind::CommitOk => TransactionEvent::CommitOk,
            EventKind::CommitFailed => TransactionEvent::CommitFailed,
            EventKind::AbortStarted => TransactionEvent::AbortStarted,
            EventKind::AbortOk => TransactionEvent::AbortOk,
            EventKind::AbortFailed => TransactionEvent::AbortFailed,
            EventKind::ResolveCommitted => TransactionEvent::Resolve(InDoubtOutcome::Committed),
            EventKind::ResolveAborted => TransactionEvent::Resolve(InDoubtOutcome::Aborted),
        }
    }

    /// The transitions written out independently of the table, as the design lists them.
    fn expected(state: TransactionState, event: TransactionEvent) -> Option<TransactionState> {
        use TransactionEvent as E;
        use TransactionState as S;
        match (state, event) {
            (S::Idle, E::Begin(e)) => Some(S::Active(e)),
            (S::Active(e), E::RecordWrite) => Some(S::Active(e)),
            (S::Active(e), E::Prepare) => Some(S::Prepared(e)),
            (S::Active(e) | S::Prepared(e), E::CommitStarted) => Some(S::Committing(e)),
            (S::Committing(_), E::CommitOk) => Some(S::Idle),
            (S::Committing(e), E::CommitFailed) => Some(S::Failed(e)),
            (S::Active(e) | S::Prepared(e), E::AbortStarted) => Some(S::Aborting(e)),
            (S::Aborting(_), E::AbortOk) => Some(S::Idle),
            (S::Aborting(e), E::AbortFailed) => Some(S::Failed(e)),
            (S::Failed(_), E::Resolve(_)) => Some(S::Idle),
            _ => None,
        }
    }

    #[test]
    fn every_state_event_pair_matches_the_design_and_illegal_ones_change_nothing() {
        let mut legal = 0;
        let mut illegal_pairs = 0;
        for kind in StateKind::ALL {
            let state = kind.with_epoch(7);
            for event_kind in EventKind::ALL {
                let event = event_of(event_kind, 9);
                let mut s = state;
                let result = s.apply(event);
                match expected(state, event) {
                    Some(to) => {
                        legal += 1;
                        assert_eq!(result, Ok(()), "{state} --{event}--> should be legal");
                        assert_eq!(s, to, "{state} --{event}-->");
                    }
                    None => {
                        illegal_pairs += 1;
                        let Err(CoreError::IllegalState(msg)) = result else {
                            panic!("{state} --{event}--> should be illegal, got {result:?}");
                        };
                        assert_eq!(s, state, "an illegal event must leave the state unchanged");
                        assert!(msg.contains(&state.to_string()), "{msg}");
                        assert!(msg.contains(event_kind.name()), "{msg}");
                    }
                }
            }
        }
        assert_eq!(legal, TRANSITIONS.len());
        assert_eq!(
            legal + illegal_pairs,
            StateKind::ALL.len() * EventKind::ALL.len()
        );
    }

    #[test]
    fn the_sink_table_has_no_duplicate_rows() {
        for (i, (f, e, _)) in TRANSITIONS.iter().enumerate() {
            for (g, d, _) in &TRANSITIONS[i + 1..] {
                assert!(!(f == g && e == d), "duplicate row {f:?} {e:?}");
            }
        }
    }

    #[test]
    fn every_dt_state_event_pair_matches_the_design_and_illegal_ones_say_why() {
        let expected = |s: Option<DtState>, e: DtEvent| -> Option<Option<DtState>> {
            match (s, e) {
                (None, DtEvent::Create) => Some(Some(DtState::Prepare)),
                (Some(DtState::Prepare), DtEvent::StartCommit) => Some(Some(DtState::Commit)),
                (Some(DtState::Prepare), DtEvent::SetRollback) => Some(Some(DtState::Rollback)),
                (Some(DtState::Commit | DtState::Rollback), DtEvent::Conclude) => Some(None),
                (Some(DtState::Prepare), DtEvent::ConcludeEmpty) => Some(None),
                (Some(DtState::Prepare | DtState::Rollback), DtEvent::ForceCommit) => {
                    Some(Some(DtState::Commit))
                }
                (Some(DtState::Commit), DtEvent::ForceRollback) => Some(Some(DtState::Rollback)),
                _ => None,
            }
        };
        let states = [
            None,
            Some(DtState::Prepare),
            Some(DtState::Commit),
            Some(DtState::Rollback),
        ];
        let mut legal = 0;
        for s in states {
            for e in DtEvent::ALL {
                match (dt_next(s, e), expected(s, e)) {
                    (Ok(to), Some(want)) => {
                        legal += 1;
                        assert_eq!(to, want);
                    }
                    (Err(CoreError::IllegalState(m)), None) => {
                        assert!(m.contains(e.name()), "{m}");
                    }
                    (got, want) => panic!("{s:?} {e:?}: got {got:?}, want {want:?}"),
                }
            }
        }
        assert_eq!(legal, DT_TRANSITIONS.len());
        let Err(CoreError::IllegalState(m)) = dt_next(Some(DtState::Commit), DtEvent::SetRollback)
        else {
            panic!()
        };
        assert!(m.contains("final"), "{m}");
        // rollback -> rollback is not a transition: a recorded rollback is carried on
        let Err(CoreError::IllegalState(m)) =
            dt_next(Some(DtState::Rollback), DtEvent::SetRollback)
        else {
            panic!()
        };
        assert!(m.contains("carry it on"), "{m}");
    }

    #[test]
    fn txn_state_transitions() {
        assert_eq!(
            txn_next(TxnRow::None, TxnEvent::Decide(3)),
            Ok(TxnRow::Decided(3))
        );
        assert_eq!(
            txn_next(TxnRow::Decided(3), TxnEvent::Decide(3)),
            Ok(TxnRow::Decided(3))
        );
        assert_eq!(
            txn_next(TxnRow::Decided(3), TxnEvent::Decide(5)),
            Ok(TxnRow::Decided(5))
        );
        let Err(CoreError::IllegalState(m)) = txn_next(TxnRow::Decided(5), TxnEvent::Decide(4))
        else {
            panic!()
        };
        assert!(m.contains("never goes back"), "{m}");
        assert!(txn_next(TxnRow::Corrupt(5), TxnEvent::Decide(6)).is_err());
        assert!(txn_next(TxnRow::Decided(5), TxnEvent::Repair).is_err());
        assert!(txn_next(TxnRow::None, TxnEvent::ForceBack(None)).is_err());
        assert_eq!(
            txn_next(TxnRow::Corrupt(5), TxnEvent::Repair),
            Ok(TxnRow::Decided(5))
        );
        assert_eq!(
            txn_next(TxnRow::Decided(5), TxnEvent::ForceBack(Some(4))),
            Ok(TxnRow::Decided(4))
        );
        assert_eq!(
            txn_next(TxnRow::Corrupt(5), TxnEvent::ForceBack(None)),
            Ok(TxnRow::Decided(-1))
        );
    }

    /// The cases tests/unit/test_recovery_decisions.py and test_protocol_engine.py checked
    /// through the former `dt_next` binding.
    #[test]
    fn dt_state_cases_by_name() {
        assert_eq!(dt_next(None, DtEvent::Create), Ok(Some(DtState::Prepare)));
        assert_eq!(
            dt_next(Some(DtState::Prepare), DtEvent::StartCommit),
            Ok(Some(DtState::Commit))
        );
        assert_eq!(dt_next(Some(DtState::Commit), DtEvent::Conclude), Ok(None));
        let Err(CoreError::IllegalState(m)) = dt_next(Some(DtState::Commit), DtEvent::SetRollback)
        else {
            panic!("commit -> set_rollback must be illegal")
        };
        assert!(m.contains("final"), "{m}");
        // rollback -> rollback is not a transition; the forced paths are their own events
        assert!(matches!(
            dt_next(Some(DtState::Rollback), DtEvent::SetRollback),
            Err(CoreError::IllegalState(_))
        ));
        assert_eq!(
            dt_next(Some(DtState::Commit), DtEvent::ForceRollback),
            Ok(Some(DtState::Rollback))
        );
        assert_eq!(
            dt_next(Some(DtState::Prepare), DtEvent::ConcludeEmpty),
            Ok(None)
        );
    }
}
