//! The core's one way of saying no ([`Refusal`]), from the rules and from the machines alike,
//! and the fencing-token check of docs/protocol.md §6 ([`check_generation`]).
//!
//! Nothing here touches a socket or a clock. The error bridge (`py/errors.rs`) turns a refusal
//! into the `laminar.errors` class [`RefusalKind::error_class`] names.

use std::fmt;

use crate::protocol::state::Epoch;

/// Why the core refuses to act: recorded state the protocol cannot produce, an epoch that must not
/// be written, or an epoch that did not go through (yet). The bridge raises each kind as one
/// `laminar.errors` class ([`RefusalKind::error_class`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RefusalKind {
    /// A decision row whose prepared state does not decode (`InvalidStateEncoding`): no
    /// automatic decision is taken.
    CorruptDecision,
    /// Kafka's marker is behind the decided epoch by more than the one epoch the recipe can
    /// leave incomplete (`InDoubtError`): something outside the recipe moved it.
    KafkaBehind,
    /// Kafka's marker is ahead of the decision log (`FatalError`): the state belongs to another
    /// group, or the decision row was changed by hand.
    KafkaAhead,
    /// An epoch older than a committed one (`ConfigError`): Spark only replays the last batch, so
    /// it can only come from a reset or foreign checkpoint.
    EpochBackwards,
    /// An epoch other than the decided-but-incomplete one (`FatalError`): writing it would leave
    /// the incomplete epoch missing from Kafka forever.
    OtherEpochWhileIncomplete,
    /// Another instance took over (`FencedError`): a newer coordinator's generation, another
    /// writer holding the sink's epoch, a commit nobody answers.
    Fenced,
    /// A negative epoch (`IllegalStateError`).
    InvalidEpoch,
    /// The connection was lost during the decision and the decision did not commit
    /// (`AbortableError`): the epoch is written again.
    DecisionLost,
    /// The epoch is decided but some Kafka sink's part can only be completed by Spark's replay of
    /// it (`InDoubtError`).
    AwaitingReplay,
    /// A scale-out epoch was rolled back before its decision (`AbortableError`): a vote against,
    /// a watcher that won the race; it is written again.
    NotDecided,
    /// A decided distributed transaction is not completed yet (`InDoubtError`): it is completed
    /// before the next epoch.
    Incomplete,
    /// An in-doubt outcome is still unknown after every retry (`InDoubtError`).
    StillInDoubt,
    /// The sinks belong to another query (`ConfigError`).
    ForeignOwner,
    /// `laminar resolve` against a recorded decision, or a commit of an undecided transaction,
    /// without `--force` (`FatalError`; the CLI exits 4).
    AgainstDecision,
    /// `laminar resolve` of something that is not there (`FatalError`; the CLI exits 6).
    NotFound,
    /// A change of a decision record the transition tables do not allow (`IllegalStateError`).
    IllegalTransition,
}

impl RefusalKind {
    /// Every kind.
    pub const ALL: [RefusalKind; 16] = [
        RefusalKind::CorruptDecision,
        RefusalKind::KafkaBehind,
        RefusalKind::KafkaAhead,
        RefusalKind::EpochBackwards,
        RefusalKind::OtherEpochWhileIncomplete,
        RefusalKind::Fenced,
        RefusalKind::InvalidEpoch,
        RefusalKind::DecisionLost,
        RefusalKind::AwaitingReplay,
        RefusalKind::NotDecided,
        RefusalKind::Incomplete,
        RefusalKind::StillInDoubt,
        RefusalKind::ForeignOwner,
        RefusalKind::AgainstDecision,
        RefusalKind::NotFound,
        RefusalKind::IllegalTransition,
    ];

    /// The snake_case name Python sees.
    pub fn name(self) -> &'static str {
        match self {
            RefusalKind::CorruptDecision => "corrupt_decision",
            RefusalKind::KafkaBehind => "kafka_behind",
            RefusalKind::KafkaAhead => "kafka_ahead",
            RefusalKind::EpochBackwards => "epoch_backwards",
            RefusalKind::OtherEpochWhileIncomplete => "other_epoch_while_incomplete",
            RefusalKind::Fenced => "fenced",
            RefusalKind::InvalidEpoch => "invalid_epoch",
            RefusalKind::DecisionLost => "decision_lost",
            RefusalKind::AwaitingReplay => "awaiting_replay",
            RefusalKind::NotDecided => "not_decided",
            RefusalKind::Incomplete => "incomplete",
            RefusalKind::StillInDoubt => "still_in_doubt",
            RefusalKind::ForeignOwner => "foreign_owner",
            RefusalKind::AgainstDecision => "against_decision",
            RefusalKind::NotFound => "not_found",
            RefusalKind::IllegalTransition => "illegal_transition",
        }
    }

    /// Parses a name.
    pub fn from_name(name: &str) -> Option<RefusalKind> {
        RefusalKind::ALL.into_iter().find(|k| k.name() == name)
    }

    /// The `laminar.errors` class the error bridge raises for this kind.
    pub fn error_class(self) -> &'static str {
        match self {
            RefusalKind::CorruptDecision => "InvalidStateEncoding",
            RefusalKind::KafkaBehind
            | RefusalKind::AwaitingReplay
            | RefusalKind::Incomplete
            | RefusalKind::StillInDoubt => "InDoubtError",
            RefusalKind::KafkaAhead
            | RefusalKind::OtherEpochWhileIncomplete
            | RefusalKind::AgainstDecision
            | RefusalKind::NotFound => "FatalError",
            RefusalKind::EpochBackwards | RefusalKind::ForeignOwner => "ConfigError",
            RefusalKind::Fenced => "FencedError",
            RefusalKind::InvalidEpoch | RefusalKind::IllegalTransition => "IllegalStateError",
            RefusalKind::DecisionLost | RefusalKind::NotDecided => "AbortableError",
        }
    }

    /// Whether the writer may write the epoch again (its class is `AbortableError` or
    /// `InDoubtError`).
    pub fn retryable(self) -> bool {
        matches!(self.error_class(), "AbortableError" | "InDoubtError")
    }
}

/// A refusal: its kind and a message naming the sink, the values involved and the way out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// What kind of refusal.
    pub kind: RefusalKind,
    /// What is wrong and what to do.
    pub message: String,
    /// The sink it concerns, when one does (the error's `sink_id`).
    pub sink_id: Option<String>,
    /// The epoch it concerns, when one does (the error's `epoch`).
    pub epoch: Option<Epoch>,
}

impl Refusal {
    /// A new refusal.
    pub fn new(kind: RefusalKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            sink_id: None,
            epoch: None,
        }
    }

    /// The same refusal, about `sink_id`.
    pub fn for_sink(mut self, sink_id: impl Into<String>) -> Self {
        self.sink_id = Some(sink_id.into());
        self
    }

    /// The same refusal, about `epoch`.
    pub fn for_epoch(mut self, epoch: Epoch) -> Self {
        self.epoch = Some(epoch);
        self
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// Renders an optional epoch for messages (`none` when absent).
pub(crate) fn show(epoch: Option<Epoch>) -> String {
    epoch.map_or_else(|| "none".to_owned(), |e| e.to_string())
}

/// Checks a coordinator's fencing token (docs/protocol.md §6): the decision transaction reads
/// the group's stored generation under its row lock and must find its own.
pub fn check_generation(group: &str, mine: i64, stored: i64) -> Result<(), Refusal> {
    if mine == stored {
        return Ok(());
    }
    Err(Refusal::new(
        RefusalKind::Fenced,
        format!(
            "atomic group {group:?}: this coordinator holds generation {mine} but laminar.sinks \
             says {stored}: a newer coordinator took over the group (another process started \
             with the same sinks); this one stops without committing anything"
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generation_check() {
        assert_eq!(check_generation("g", 3, 3), Ok(()));
        let err = check_generation("g", 3, 4).unwrap_err();
        assert_eq!(err.kind, RefusalKind::Fenced);
        assert!(err.message.contains("generation 3"), "{err}");
        assert!(err.message.contains("says 4"), "{err}");
    }

    #[test]
    fn refusal_names_are_distinct() {
        let mut names: Vec<&str> = RefusalKind::ALL.iter().map(|k| k.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), RefusalKind::ALL.len());
        for kind in RefusalKind::ALL {
            assert_eq!(RefusalKind::from_name(kind.name()), Some(kind));
            assert!(
                kind.error_class().ends_with("Error") || kind.error_class().ends_with("Encoding")
            );
        }
        assert!(RefusalKind::DecisionLost.retryable());
        assert!(!RefusalKind::Fenced.retryable());
    }

    /// The cases tests/unit/test_recovery_decisions.py checked through the former binding.
    #[test]
    fn generation_check_of_generation_two() {
        assert_eq!(check_generation("g", 2, 2), Ok(()));
        let err = check_generation("g", 2, 3).unwrap_err();
        assert!(err.message.contains("generation 2"), "{err}");
    }
}
