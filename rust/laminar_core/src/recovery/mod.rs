//! The decisions of the commit protocols (docs/protocol.md §3–§6), as pure functions of recorded
//! state.
//!
//! Python reads the records (the decision rows in PostgreSQL, the Kafka epoch markers, what redo
//! sources exist, the ages of unresolved transactions), asks one of these functions what to do,
//! performs the I/O and reports back by reading the records again. Nothing here touches a socket
//! or a clock: ages and epochs come in as arguments, so the Rust tests walk every crash point of
//! every protocol on an in-memory two-participant harness (`sim`).
//!
//! - [`atomic`]: the KIP-939 dual-write recipe — what to do at start-up and before each epoch for
//!   each Kafka sink of an atomic group (nothing / complete by `EndTxn` / redo from the log /
//!   await the Spark replay / refuse), and which sinks an incoming epoch must be written to.
//! - [`distributed`]: the Vitess-style distributed transaction of the scale-out mode and of
//!   Postgres participants on other databases: the `dt_state` transitions, and the resolution
//!   watcher's rules.

pub mod atomic;
pub mod distributed;

#[cfg(test)]
mod sim;

use std::fmt;

/// A Spark batch id (the protocol's epoch).
pub type Epoch = i64;

/// Why a decision function refuses to act: recorded state the protocol cannot produce, or an
/// epoch that must not be written. Python turns each kind into one `laminar.errors` class.
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
    /// The coordinator's generation is not the stored one (`FencedError`): a newer coordinator
    /// took over the group.
    Fenced,
    /// A negative epoch (`IllegalStateError`).
    InvalidEpoch,
}

impl RefusalKind {
    /// Every kind.
    pub const ALL: [RefusalKind; 7] = [
        RefusalKind::CorruptDecision,
        RefusalKind::KafkaBehind,
        RefusalKind::KafkaAhead,
        RefusalKind::EpochBackwards,
        RefusalKind::OtherEpochWhileIncomplete,
        RefusalKind::Fenced,
        RefusalKind::InvalidEpoch,
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
        }
    }
}

/// A refusal: its kind and a message naming the sink, the values involved and the way out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// What kind of refusal.
    pub kind: RefusalKind,
    /// What is wrong and what to do.
    pub message: String,
}

impl Refusal {
    /// A new refusal.
    pub fn new(kind: RefusalKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
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
    }
}
