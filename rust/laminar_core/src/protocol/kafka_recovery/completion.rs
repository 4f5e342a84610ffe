//! The KIP-939 dual-write recipe's decisions (docs/protocol.md §3): Kafka prepared, then the
//! Postgres commit (the decision, which stores each Kafka sink's `PreparedTxnState` in
//! `laminar.txn_state`), then the Kafka commit.
//!
//! A crash between the decision and the Kafka commit leaves Postgres one epoch ahead of a Kafka
//! sink. [`complete_kafka`] says how to bring Kafka level from what is recorded: the decision row
//! (epoch `d`, the Kafka epoch before it `p`, the producer id/epoch of the prepared transaction),
//! the Kafka marker `k`, whether the redo log holds `d`, and whether protocol-level completion was
//! already refused. Which sinks an incoming epoch must be written to is
//! `protocol::plan::plan_epoch`'s.
//!
//! | recorded                | meaning                                 | decision                          |
//! | ----------------------- | --------------------------------------- | --------------------------------- |
//! | no decision, or `k = d` | Kafka holds every decided epoch         | [`Completion::Complete`]          |
//! | `k = p < d`             | crash/failure between decision and commit | `EndTxn`, else redo log, else replay |
//! | `k > d`                 | Kafka ahead of the decision log         | refuse ([`RefusalKind::KafkaAhead`]) |
//! | `k < d`, `k ≠ p`        | not a state the recipe leaves           | refuse ([`RefusalKind::KafkaBehind`]) |
//! | undecodable state       | corrupted decision                      | refuse ([`RefusalKind::CorruptDecision`]) |
//!
//! Recording `p` (rather than assuming `d - 1`) keeps the rule exact when epochs are not
//! consecutive for a sink: a Kafka sink added to an existing group, or a group restarted with a
//! new epoch base (`laminar reset`).

use crate::protocol::records::{DecisionRecord, ProducerIdentity};
use crate::protocol::refusal::show;
use crate::protocol::{Epoch, Refusal, RefusalKind};

/// Everything recorded about one Kafka sink of a group that recovery decides from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KafkaPart {
    /// The decision row.
    pub decision: DecisionRecord,
    /// The sink's Kafka marker `k` (last committed epoch; `None`: no marker).
    pub marker: Option<Epoch>,
    /// Whether `laminar.redo` holds the records of the decided epoch.
    pub redo_log: bool,
    /// Whether protocol-level completion was tried for the decided epoch and did not make the
    /// marker reach it (the broker refused `EndTxn`, or had aborted the transaction).
    pub end_txn_refused: bool,
}

/// What to do to bring a Kafka sink level with the decision log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Completion {
    /// Kafka holds every decided epoch: nothing to do.
    Complete,
    /// Commit the prepared transaction with `EndTxn(commit)` and the recorded producer identity,
    /// **before** any new producer's `init_transactions` (which would abort it); then read the
    /// marker again and ask again.
    EndTxn {
        /// The decided epoch.
        epoch: Epoch,
        /// The prepared transaction's producer identity.
        producer: ProducerIdentity,
    },
    /// Re-produce the redo log's records of `epoch` in a fresh transaction with marker `epoch`.
    RedoFromLog {
        /// The decided epoch.
        epoch: Epoch,
    },
    /// Only Spark's replay of `epoch` can complete Kafka: accept that epoch, and only it, next.
    AwaitReplay {
        /// The decided epoch.
        epoch: Epoch,
    },
    /// Recorded state the recipe cannot produce: decide nothing.
    Refuse(Refusal),
}

/// Decides how to complete one Kafka sink's part of the group's last decided epoch.
pub fn complete_kafka(sink_id: &str, part: &KafkaPart) -> Completion {
    let (d, p, producer) = match &part.decision {
        DecisionRecord::None => return Completion::Complete,
        DecisionRecord::Corrupt { reason, .. } => {
            return Completion::Refuse(Refusal::new(
                RefusalKind::CorruptDecision,
                format!(
                    "the decision row of Kafka sink {sink_id:?} in laminar.txn_state does not \
                     decode ({reason}); no automatic decision is taken. `laminar status` shows \
                     it; after checking the topic, `laminar resolve kafka:{sink_id} --commit` \
                     completes the epoch from a redo source, or `--rollback --force` accepts \
                     Kafka's state"
                ),
            ));
        }
        DecisionRecord::Decided {
            epoch,
            previous,
            producer,
        } => (*epoch, *previous, *producer),
    };
    let k = part.marker;
    match k {
        Some(k) if k == d => return Completion::Complete,
        Some(k) if k > d => {
            return Completion::Refuse(Refusal::new(
                RefusalKind::KafkaAhead,
                format!(
                    "Kafka sink {sink_id:?}: the epoch marker says epoch {k} is committed but \
                     the decision log (laminar.txn_state) has only decided epoch {d}: the sink \
                     was written outside this atomic group, or the row was changed by hand. \
                     Give the sink its own transactional_id, or start over with `laminar reset`"
                ),
            ));
        }
        _ => {}
    }
    if k != p {
        return Completion::Refuse(Refusal::new(
            RefusalKind::KafkaBehind,
            format!(
                "Kafka sink {sink_id:?}: epoch {d} is decided (laminar.txn_state) while Kafka's \
                 marker was at {} then, but the marker now says {}: something outside the \
                 recipe moved it (an expired marker group read back from the records, a reset \
                 topic?). Refusing to guess; `laminar status` shows the state and `laminar \
                 resolve` resolves it",
                show(p),
                show(k)
            ),
        ));
    }
    match producer {
        Some(producer) if !part.end_txn_refused => Completion::EndTxn { epoch: d, producer },
        _ if part.redo_log => Completion::RedoFromLog { epoch: d },
        _ => Completion::AwaitReplay { epoch: d },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PRODUCER: ProducerIdentity = ProducerIdentity {
        producer_id: 42,
        producer_epoch: 3,
    };

    fn part(decision: DecisionRecord, marker: Option<Epoch>) -> KafkaPart {
        KafkaPart {
            decision,
            marker,
            redo_log: false,
            end_txn_refused: false,
        }
    }

    fn decided(epoch: Epoch, previous: Option<Epoch>) -> DecisionRecord {
        DecisionRecord::Decided {
            epoch,
            previous,
            producer: Some(PRODUCER),
        }
    }

    #[test]
    fn nothing_decided_or_kafka_level_is_complete() {
        assert_eq!(
            complete_kafka("t", &part(DecisionRecord::None, None)),
            Completion::Complete
        );
        assert_eq!(
            complete_kafka("t", &part(DecisionRecord::None, Some(9))),
            Completion::Complete
        );
        assert_eq!(
            complete_kafka("t", &part(decided(5, Some(4)), Some(5))),
            Completion::Complete
        );
    }

    #[test]
    fn one_epoch_behind_is_completed_by_endtxn_then_redo_then_replay() {
        let mut p = part(decided(5, Some(4)), Some(4));
        assert_eq!(
            complete_kafka("t", &p),
            Completion::EndTxn {
                epoch: 5,
                producer: PRODUCER
            }
        );
        p.end_txn_refused = true;
        assert_eq!(
            complete_kafka("t", &p),
            Completion::AwaitReplay { epoch: 5 }
        );
        p.redo_log = true;
        assert_eq!(
            complete_kafka("t", &p),
            Completion::RedoFromLog { epoch: 5 }
        );
    }

    #[test]
    fn unknown_producer_identity_skips_endtxn() {
        let p = KafkaPart {
            decision: DecisionRecord::Decided {
                epoch: 0,
                previous: None,
                producer: ProducerIdentity::known(-1, -1),
            },
            marker: None,
            redo_log: true,
            end_txn_refused: false,
        };
        assert_eq!(
            complete_kafka("t", &p),
            Completion::RedoFromLog { epoch: 0 }
        );
    }

    #[test]
    fn the_first_decision_of_a_sink_added_late_is_completed_from_no_marker() {
        let p = part(decided(57, None), None);
        assert!(matches!(
            complete_kafka("t", &p),
            Completion::EndTxn { epoch: 57, .. }
        ));
    }

    #[test]
    fn impossible_states_are_refused_with_both_values() {
        let Completion::Refuse(r) = complete_kafka("orders", &part(decided(5, Some(4)), Some(2)))
        else {
            panic!("expected a refusal")
        };
        assert_eq!(r.kind, RefusalKind::KafkaBehind);
        assert!(
            r.message.contains("epoch 5") && r.message.contains("says 2"),
            "{r}"
        );
        let Completion::Refuse(r) = complete_kafka("orders", &part(decided(5, Some(4)), None))
        else {
            panic!("expected a refusal")
        };
        assert_eq!(r.kind, RefusalKind::KafkaBehind);
        let Completion::Refuse(r) = complete_kafka("orders", &part(decided(5, Some(4)), Some(6)))
        else {
            panic!("expected a refusal")
        };
        assert_eq!(r.kind, RefusalKind::KafkaAhead);
        assert!(
            r.message.contains("epoch 6") && r.message.contains("epoch 5"),
            "{r}"
        );
    }

    #[test]
    fn a_corrupt_decision_is_never_acted_on() {
        for marker in [None, Some(3), Some(100)] {
            let mut p = part(
                DecisionRecord::Corrupt {
                    epoch: 5,
                    reason: "bad crc".into(),
                },
                marker,
            );
            p.redo_log = true;
            let Completion::Refuse(r) = complete_kafka("t", &p) else {
                panic!("expected a refusal")
            };
            assert_eq!(r.kind, RefusalKind::CorruptDecision);
            assert!(r.message.contains("bad crc"));
        }
    }

    /// The cases tests/unit/test_recovery_decisions.py checked through the former binding.
    #[test]
    fn completion_prefers_endtxn_then_redo_then_replay_with_the_recorded_identity() {
        let decided = |producer| DecisionRecord::Decided {
            epoch: 5,
            previous: Some(4),
            producer,
        };
        let behind = |redo_log, end_txn_refused| KafkaPart {
            decision: decided(ProducerIdentity::known(-1, -1)),
            marker: Some(4),
            redo_log,
            end_txn_refused,
        };
        let with_producer = KafkaPart {
            decision: decided(ProducerIdentity::known(7, 2)),
            ..behind(false, false)
        };
        assert_eq!(
            complete_kafka("t", &with_producer),
            Completion::EndTxn {
                epoch: 5,
                producer: ProducerIdentity {
                    producer_id: 7,
                    producer_epoch: 2
                }
            }
        );
        assert_eq!(
            complete_kafka("t", &behind(true, true)),
            Completion::RedoFromLog { epoch: 5 }
        );
        assert_eq!(
            complete_kafka("t", &behind(false, true)),
            Completion::AwaitReplay { epoch: 5 }
        );
        let level = KafkaPart {
            marker: Some(5),
            ..behind(false, false)
        };
        assert_eq!(complete_kafka("t", &level), Completion::Complete);
    }

    #[test]
    fn a_corrupt_decision_is_refused_as_an_invalid_state_encoding() {
        let part = KafkaPart {
            decision: DecisionRecord::Corrupt {
                epoch: 5,
                reason: "bad crc".into(),
            },
            marker: Some(4),
            redo_log: true,
            end_txn_refused: false,
        };
        let Completion::Refuse(r) = complete_kafka("t", &part) else {
            panic!("expected a refusal")
        };
        assert_eq!(r.kind, RefusalKind::CorruptDecision);
        assert_eq!(r.kind.name(), "corrupt_decision");
        assert_eq!(r.kind.error_class(), "InvalidStateEncoding");
    }
}
