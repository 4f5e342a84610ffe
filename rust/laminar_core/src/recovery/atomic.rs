//! The KIP-939 dual-write recipe's decisions (docs/protocol.md §3): Kafka prepared, then the
//! Postgres commit (the decision, which stores each Kafka sink's `PreparedTxnState` in
//! `laminar.txn_state`), then the Kafka commit.
//!
//! A crash between the decision and the Kafka commit leaves Postgres one epoch ahead of a Kafka
//! sink. [`complete_kafka`] says how to bring Kafka level from what is recorded: the decision row
//! (epoch `d`, the Kafka epoch before it `p`, the producer id/epoch of the prepared transaction),
//! the Kafka marker `k`, whether the redo log holds `d`, and whether protocol-level completion was
//! already refused. [`plan_epoch`] says which sinks an incoming epoch must be written to, and
//! refuses epochs the recipe must not write.
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

use super::{Epoch, Refusal, RefusalKind, show};
use crate::protocol::records::epoch_committed;

/// The Kafka producer identity of a prepared transaction (from its `PreparedTxnState`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ProducerIdentity {
    /// The producer id.
    pub producer_id: i64,
    /// The producer epoch.
    pub producer_epoch: i32,
}

impl ProducerIdentity {
    /// The identity, or `None` when either part is unknown (negative, as `PreparedTxnState`
    /// records an identity librdkafka did not report).
    pub fn known(producer_id: i64, producer_epoch: i32) -> Option<Self> {
        (producer_id >= 0 && producer_epoch >= 0).then_some(Self {
            producer_id,
            producer_epoch,
        })
    }
}

/// A Kafka sink's row in `laminar.txn_state`, as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecisionRecord {
    /// No row: no epoch of this sink was ever decided in the group.
    None,
    /// The last decided epoch.
    Decided {
        /// The decided epoch `d`.
        epoch: Epoch,
        /// The sink's Kafka marker when `d` was decided (`p`; `None`: no marker then).
        previous: Option<Epoch>,
        /// The prepared transaction's producer id/epoch, when known.
        producer: Option<ProducerIdentity>,
    },
    /// The row's `prepared_state` does not decode: nothing about it can be trusted.
    Corrupt {
        /// What the decoder said.
        reason: String,
    },
}

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
        DecisionRecord::Corrupt { reason } => {
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

/// One sink's progress: its last committed epoch (Postgres: `laminar.sink_epochs`; Kafka: the
/// marker).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SinkProgress {
    /// The sink id.
    pub sink_id: String,
    /// The last committed epoch, `None` if none.
    pub last: Option<Epoch>,
}

/// What to do with an incoming epoch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EpochPlan {
    /// Every sink holds the epoch (a replay): write nothing.
    Skip,
    /// Write the epoch to the sinks marked `true` (in the order given), atomically.
    Write {
        /// Per sink: whether it needs the epoch.
        sinks: Vec<bool>,
    },
    /// Do not write this epoch.
    Refuse(Refusal),
}

/// Decides which sinks `epoch` must be written to.
///
/// `awaiting` lists the Kafka sinks whose decided epoch can only be completed by Spark's replay
/// (from [`Completion::AwaitReplay`]): any other epoch is refused while one is pending. With
/// `refuse_backwards` (the writer knows its query, i.e. Spark, which only ever replays its last
/// batch) an epoch older than a sink's last committed epoch is refused as a reset or foreign
/// checkpoint; without it (`write_epoch` callers replaying on purpose) such an epoch is skipped for
/// that sink, as the replay rule says (docs/protocol.md §5). An epoch equal to a sink's last committed epoch is
/// that sink's legitimate replay and is skipped for it.
pub fn plan_epoch(
    epoch: Epoch,
    sinks: &[SinkProgress],
    awaiting: &[(String, Epoch)],
    refuse_backwards: bool,
) -> EpochPlan {
    if epoch < 0 {
        return EpochPlan::Refuse(Refusal::new(
            RefusalKind::InvalidEpoch,
            format!("epoch {epoch} is negative: epochs are Spark batch ids (>= 0)"),
        ));
    }
    if let Some((sink_id, d)) = awaiting.iter().find(|(_, d)| *d != epoch) {
        return EpochPlan::Refuse(Refusal::new(
            RefusalKind::OtherEpochWhileIncomplete,
            format!(
                "epoch {epoch} arrived while epoch {d} is committed in PostgreSQL (the decision) \
                 but not in Kafka sink {sink_id:?}, whose prepared transaction the broker no \
                 longer holds: only Spark's replay of batch {d} can complete it, and writing \
                 epoch {epoch} first would lose it. Restart the query from the same checkpoint \
                 (Spark replays batch {d}), or write groups with redo=\"log\"; `laminar status` \
                 shows the incomplete epoch"
            ),
        ));
    }
    if let Some(ahead) = sinks
        .iter()
        .filter(|s| refuse_backwards && s.last.is_some_and(|last| last > epoch))
        .max_by_key(|s| s.last)
    {
        return EpochPlan::Refuse(Refusal::new(
            RefusalKind::EpochBackwards,
            format!(
                "epoch {epoch} is older than epoch {} already committed by sink {:?}: Spark only \
                 replays its last batch, so this batch comes from a query restarted from a new \
                 or another checkpoint, and skipping it silently would lose its data. To start \
                 the sinks over for this query on purpose, run `laminar reset` or pass \
                 exactly_once(..., on_new_query=\"restart\")",
                show(ahead.last),
                ahead.sink_id
            ),
        ));
    }
    let needs: Vec<bool> = sinks
        .iter()
        .map(|s| !epoch_committed(s.last, epoch))
        .collect();
    if needs.iter().any(|n| *n) {
        EpochPlan::Write { sinks: needs }
    } else {
        EpochPlan::Skip
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

    fn progress(last: &[Option<Epoch>]) -> Vec<SinkProgress> {
        last.iter()
            .enumerate()
            .map(|(i, l)| SinkProgress {
                sink_id: format!("s{i}"),
                last: *l,
            })
            .collect()
    }

    #[test]
    fn epochs_are_written_where_missing_and_skipped_where_present() {
        assert_eq!(
            plan_epoch(0, &progress(&[None, None]), &[], true),
            EpochPlan::Write {
                sinks: vec![true, true]
            }
        );
        assert_eq!(
            plan_epoch(4, &progress(&[Some(3), Some(3)]), &[], true),
            EpochPlan::Write {
                sinks: vec![true, true]
            }
        );
        assert_eq!(
            plan_epoch(4, &progress(&[Some(4), Some(4)]), &[], true),
            EpochPlan::Skip
        );
        // the replay that completes Kafka: Postgres holds it already
        assert_eq!(
            plan_epoch(4, &progress(&[Some(4), Some(3)]), &[("s1".into(), 4)], true),
            EpochPlan::Write {
                sinks: vec![false, true]
            }
        );
    }

    #[test]
    fn older_epochs_and_other_epochs_while_incomplete_are_refused() {
        let EpochPlan::Refuse(r) = plan_epoch(2, &progress(&[Some(4), Some(4)]), &[], true) else {
            panic!("expected a refusal")
        };
        assert_eq!(r.kind, RefusalKind::EpochBackwards);
        assert!(r.message.contains("laminar reset"), "{r}");
        let EpochPlan::Refuse(r) =
            plan_epoch(5, &progress(&[Some(4), Some(3)]), &[("s1".into(), 4)], true)
        else {
            panic!("expected a refusal")
        };
        assert_eq!(r.kind, RefusalKind::OtherEpochWhileIncomplete);
        assert!(
            r.message.contains("epoch 5") && r.message.contains("batch 4"),
            "{r}"
        );
        let EpochPlan::Refuse(r) = plan_epoch(-1, &progress(&[None]), &[], false) else {
            panic!("expected a refusal")
        };
        assert_eq!(r.kind, RefusalKind::InvalidEpoch);
    }

    #[test]
    fn without_a_known_query_older_epochs_are_skipped_per_sink() {
        // write_epoch callers (no owner) may replay any committed epoch: it is skipped.
        assert_eq!(
            plan_epoch(2, &progress(&[Some(4), Some(4)]), &[], false),
            EpochPlan::Skip
        );
        // A sink that is behind (e.g. added to the group later) still gets the epoch.
        assert_eq!(
            plan_epoch(2, &progress(&[Some(4), Some(1)]), &[], false),
            EpochPlan::Write {
                sinks: vec![false, true]
            }
        );
        // An epoch other than the awaited replay is refused whatever the caller.
        let EpochPlan::Refuse(r) = plan_epoch(
            2,
            &progress(&[Some(4), Some(3)]),
            &[("s1".into(), 4)],
            false,
        ) else {
            panic!("expected a refusal")
        };
        assert_eq!(r.kind, RefusalKind::OtherEpochWhileIncomplete);
    }
}
