//! The per-sink transaction state machine (F-E2E-002 plus KIP-939's prepared state).
//!
//! Every legal transition is listed in [`TRANSITIONS`] and applied by [`next_state`]; nothing else
//! decides whether an event is legal. An illegal event returns [`CoreError::IllegalState`] naming the
//! current state, the attempted event and the events that would have been legal, and the state is
//! left unchanged.
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

use std::fmt;

use crate::error::{CoreError, CoreResult};

/// Spark's `batch_id`: monotonic per query, replayed with the same value after a restart. Never
/// negative in a live transaction.
pub type Epoch = i64;

/// Where one sink's transaction is in its lifecycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TransactionState {
    /// No transaction open; ready to begin one.
    Idle,
    /// A transaction is open for the epoch and records are being written.
    Active(Epoch),
    /// Everything is flushed and the transaction is ready to commit (the 2PC vote is "yes").
    Prepared(Epoch),
    /// The commit has been sent and its outcome is not known yet.
    Committing(Epoch),
    /// The abort has been sent and its outcome is not known yet.
    Aborting(Epoch),
    /// A commit or abort failed with an unknown outcome; recovery must resolve it.
    Failed(Epoch),
}

/// How recovery resolved a [`TransactionState::Failed`] transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Resolution {
    /// The transaction turned out to be committed.
    Committed,
    /// The transaction turned out to be aborted (or was rolled back by recovery).
    Aborted,
}

/// Something that happens to a transaction. The names are the `EpochTracker` method names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TransactionEvent {
    /// Open the transaction of an epoch.
    Begin(Epoch),
    /// Records were written inside the open transaction.
    RecordWrite,
    /// Everything is flushed; the transaction is ready to commit.
    Prepare,
    /// The commit request was sent.
    CommitStarted,
    /// The commit is known to have succeeded.
    CommitOk,
    /// The commit failed with an unknown outcome.
    CommitFailed,
    /// The abort request was sent.
    AbortStarted,
    /// The abort is known to have succeeded.
    AbortOk,
    /// The abort failed with an unknown outcome.
    AbortFailed,
    /// Recovery decided the outcome of a failed transaction.
    Resolve(Resolution),
}

/// The kind of a state, without its epoch (the rows of the transition table).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StateKind {
    /// [`TransactionState::Idle`].
    Idle,
    /// [`TransactionState::Active`].
    Active,
    /// [`TransactionState::Prepared`].
    Prepared,
    /// [`TransactionState::Committing`].
    Committing,
    /// [`TransactionState::Aborting`].
    Aborting,
    /// [`TransactionState::Failed`].
    Failed,
}

/// The kind of an event, without its argument (the columns of the transition table).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventKind {
    /// [`TransactionEvent::Begin`].
    Begin,
    /// [`TransactionEvent::RecordWrite`].
    RecordWrite,
    /// [`TransactionEvent::Prepare`].
    Prepare,
    /// [`TransactionEvent::CommitStarted`].
    CommitStarted,
    /// [`TransactionEvent::CommitOk`].
    CommitOk,
    /// [`TransactionEvent::CommitFailed`].
    CommitFailed,
    /// [`TransactionEvent::AbortStarted`].
    AbortStarted,
    /// [`TransactionEvent::AbortOk`].
    AbortOk,
    /// [`TransactionEvent::AbortFailed`].
    AbortFailed,
    /// [`TransactionEvent::Resolve`] with [`Resolution::Committed`].
    ResolveCommitted,
    /// [`TransactionEvent::Resolve`] with [`Resolution::Aborted`].
    ResolveAborted,
}

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

impl StateKind {
    /// Every kind of state, in lifecycle order.
    pub const ALL: [StateKind; 6] = [
        StateKind::Idle,
        StateKind::Active,
        StateKind::Prepared,
        StateKind::Committing,
        StateKind::Aborting,
        StateKind::Failed,
    ];

    /// The state's name as Python shows it (`TransactionState.name`).
    pub fn name(self) -> &'static str {
        match self {
            StateKind::Idle => "Idle",
            StateKind::Active => "Active",
            StateKind::Prepared => "Prepared",
            StateKind::Committing => "Committing",
            StateKind::Aborting => "Aborting",
            StateKind::Failed => "Failed",
        }
    }

    /// The state of this kind with the given epoch (`Idle` ignores it).
    pub fn with_epoch(self, epoch: Epoch) -> TransactionState {
        match self {
            StateKind::Idle => TransactionState::Idle,
            StateKind::Active => TransactionState::Active(epoch),
            StateKind::Prepared => TransactionState::Prepared(epoch),
            StateKind::Committing => TransactionState::Committing(epoch),
            StateKind::Aborting => TransactionState::Aborting(epoch),
            StateKind::Failed => TransactionState::Failed(epoch),
        }
    }

    /// Parses a name produced by [`StateKind::name`].
    pub fn from_name(name: &str) -> Option<StateKind> {
        StateKind::ALL.into_iter().find(|k| k.name() == name)
    }
}

impl EventKind {
    /// Every kind of event.
    pub const ALL: [EventKind; 11] = [
        EventKind::Begin,
        EventKind::RecordWrite,
        EventKind::Prepare,
        EventKind::CommitStarted,
        EventKind::CommitOk,
        EventKind::CommitFailed,
        EventKind::AbortStarted,
        EventKind::AbortOk,
        EventKind::AbortFailed,
        EventKind::ResolveCommitted,
        EventKind::ResolveAborted,
    ];

    /// The name of the `EpochTracker` method that reports this event.
    pub fn name(self) -> &'static str {
        match self {
            EventKind::Begin => "begin",
            EventKind::RecordWrite => "record_write",
            EventKind::Prepare => "prepare",
            EventKind::CommitStarted => "commit_started",
            EventKind::CommitOk => "commit_ok",
            EventKind::CommitFailed => "commit_failed",
            EventKind::AbortStarted => "abort_started",
            EventKind::AbortOk => "abort_ok",
            EventKind::AbortFailed => "abort_failed",
            EventKind::ResolveCommitted => "resolve(committed)",
            EventKind::ResolveAborted => "resolve(aborted)",
        }
    }
}

impl TransactionState {
    /// The kind of this state (its row in the transition table).
    pub fn kind(self) -> StateKind {
        match self {
            TransactionState::Idle => StateKind::Idle,
            TransactionState::Active(_) => StateKind::Active,
            TransactionState::Prepared(_) => StateKind::Prepared,
            TransactionState::Committing(_) => StateKind::Committing,
            TransactionState::Aborting(_) => StateKind::Aborting,
            TransactionState::Failed(_) => StateKind::Failed,
        }
    }

    /// The epoch of the open transaction; `None` when idle.
    pub fn epoch(self) -> Option<Epoch> {
        match self {
            TransactionState::Idle => None,
            TransactionState::Active(e)
            | TransactionState::Prepared(e)
            | TransactionState::Committing(e)
            | TransactionState::Aborting(e)
            | TransactionState::Failed(e) => Some(e),
        }
    }

    /// The state's name (`"Idle"`, `"Active"`, ...).
    pub fn name(self) -> &'static str {
        self.kind().name()
    }

    /// Whether no transaction is open.
    pub fn is_idle(self) -> bool {
        self == TransactionState::Idle
    }

    /// Whether the sink holds an epoch's transaction that an abort discards (`Active`, or
    /// `Prepared`): what a driver's best-effort abort checks first.
    pub fn holds_transaction(self) -> bool {
        matches!(
            self,
            TransactionState::Active(_) | TransactionState::Prepared(_)
        )
    }

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

impl TransactionEvent {
    /// The kind of this event (its column in the transition table).
    pub fn kind(self) -> EventKind {
        match self {
            TransactionEvent::Begin(_) => EventKind::Begin,
            TransactionEvent::RecordWrite => EventKind::RecordWrite,
            TransactionEvent::Prepare => EventKind::Prepare,
            TransactionEvent::CommitStarted => EventKind::CommitStarted,
            TransactionEvent::CommitOk => EventKind::CommitOk,
            TransactionEvent::CommitFailed => EventKind::CommitFailed,
            TransactionEvent::AbortStarted => EventKind::AbortStarted,
            TransactionEvent::AbortOk => EventKind::AbortOk,
            TransactionEvent::AbortFailed => EventKind::AbortFailed,
            TransactionEvent::Resolve(Resolution::Committed) => EventKind::ResolveCommitted,
            TransactionEvent::Resolve(Resolution::Aborted) => EventKind::ResolveAborted,
        }
    }
}

impl fmt::Display for TransactionState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.epoch() {
            None => f.write_str(self.name()),
            Some(e) => write!(f, "{}(epoch={e})", self.name()),
        }
    }
}

impl fmt::Display for TransactionEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TransactionEvent::Begin(e) => write!(f, "begin(epoch={e})"),
            other => f.write_str(other.kind().name()),
        }
    }
}

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
            _ => Err(illegal(state, event)),
        },
        Some(Target::SameEpoch(kind)) => match state.epoch() {
            Some(e) => Ok(kind.with_epoch(e)),
            None => Err(illegal(state, event)),
        },
        None => Err(illegal(state, event)),
    }
}

fn illegal(state: TransactionState, event: TransactionEvent) -> CoreError {
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

#[cfg(test)]
mod tests {
    use super::*;

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
            EventKind::ResolveCommitted => TransactionEvent::Resolve(Resolution::Committed),
            EventKind::ResolveAborted => TransactionEvent::Resolve(Resolution::Aborted),
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
    fn only_active_and_prepared_hold_a_transaction() {
        let held: Vec<StateKind> = StateKind::ALL
            .into_iter()
            .filter(|k| k.with_epoch(3).holds_transaction())
            .collect();
        assert_eq!(held, vec![StateKind::Active, StateKind::Prepared]);
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
    fn the_table_has_no_duplicate_rows() {
        for (i, (f, e, _)) in TRANSITIONS.iter().enumerate() {
            for (g, d, _) in &TRANSITIONS[i + 1..] {
                assert!(!(f == g && e == d), "duplicate row {f:?} {e:?}");
            }
        }
    }

    #[test]
    fn idle_to_active() {
        assert_eq!(
            TransactionState::Idle.next(TransactionEvent::Begin(3)),
            Ok(TransactionState::Active(3))
        );
    }

    #[test]
    fn active_to_committing_is_one_phase_commit() {
        assert_eq!(
            TransactionState::Active(3).next(TransactionEvent::CommitStarted),
            Ok(TransactionState::Committing(3))
        );
    }

    #[test]
    fn active_to_aborting() {
        assert_eq!(
            TransactionState::Active(3).next(TransactionEvent::AbortStarted),
            Ok(TransactionState::Aborting(3))
        );
    }

    #[test]
    fn begin_while_active_is_rejected_and_says_why() {
        let err = TransactionState::Active(5)
            .next(TransactionEvent::Begin(4))
            .unwrap_err();
        let CoreError::IllegalState(msg) = err else {
            panic!("wrong kind: {err:?}")
        };
        assert!(
            msg.contains("cannot begin(epoch=4) in state Active(epoch=5)"),
            "{msg}"
        );
        assert!(msg.contains("goes backwards"), "{msg}");
        assert!(msg.contains("legal here: record_write, prepare, commit_started, abort_started"));
    }

    #[test]
    fn commit_while_idle_is_rejected() {
        let err = TransactionState::Idle.next(TransactionEvent::CommitStarted);
        assert!(matches!(err, Err(CoreError::IllegalState(m)) if m.contains("state Idle")));
    }

    #[test]
    fn a_failed_commit_is_never_aborted() {
        let err = TransactionState::Failed(2).next(TransactionEvent::AbortStarted);
        assert!(
            matches!(err, Err(CoreError::IllegalState(m)) if m.contains("recovery must resolve"))
        );
        let err = TransactionState::Committing(2).next(TransactionEvent::AbortStarted);
        assert!(
            matches!(err, Err(CoreError::IllegalState(m)) if m.contains("never aborted blindly"))
        );
    }

    #[test]
    fn negative_epoch_is_rejected() {
        let err = TransactionState::Idle.next(TransactionEvent::Begin(-1));
        assert!(matches!(err, Err(CoreError::IllegalState(m)) if m.contains(">= 0")));
    }

    #[test]
    fn names_round_trip() {
        for kind in StateKind::ALL {
            assert_eq!(StateKind::from_name(kind.name()), Some(kind));
        }
        assert_eq!(StateKind::from_name("idle"), None);
        assert_eq!(TransactionState::Idle.to_string(), "Idle");
        assert_eq!(TransactionState::Failed(4).to_string(), "Failed(epoch=4)");
    }
}
