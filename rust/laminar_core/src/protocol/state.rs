//! The per-sink transaction state machine (F-E2E-002 plus KIP-939's prepared state).
//!
//! Every legal transition is listed in `protocol::transitions::TRANSITIONS` and applied by
//! `protocol::transitions::next_state` (and [`TransactionState::apply`], written beside the
//! table); nothing else decides whether an event is legal. An illegal
//! event returns [`CoreError::IllegalState`] naming the current state, the attempted event and the
//! events that would have been legal, and the state is left unchanged.

use std::fmt;

#[cfg(test)]
use crate::error::CoreError;

/// An epoch: a micro-batch's number as the sinks store it (Spark's `batch_id` plus the group's
/// epoch base, docs/engine.md §9): monotonic per query, replayed with the same value after a
/// restart. Never negative in a live transaction. The core's one definition (`protocol::Epoch`
/// re-exports it).
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
pub enum InDoubtOutcome {
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
    Resolve(InDoubtOutcome),
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
    /// [`TransactionEvent::Resolve`] with [`InDoubtOutcome::Committed`].
    ResolveCommitted,
    /// [`TransactionEvent::Resolve`] with [`InDoubtOutcome::Aborted`].
    ResolveAborted,
}

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
            TransactionEvent::Resolve(InDoubtOutcome::Committed) => EventKind::ResolveCommitted,
            TransactionEvent::Resolve(InDoubtOutcome::Aborted) => EventKind::ResolveAborted,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_active_and_prepared_hold_a_transaction() {
        let held: Vec<StateKind> = StateKind::ALL
            .into_iter()
            .filter(|k| k.with_epoch(3).holds_transaction())
            .collect();
        assert_eq!(held, vec![StateKind::Active, StateKind::Prepared]);
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
