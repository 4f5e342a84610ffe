//! Which sinks an incoming epoch must be written to ([`plan_epoch`]), and the epochs the recipes
//! must not write (docs/protocol.md §3, §5): the one rule the atomic group, one sink's epoch and
//! the scale-out coordinator all ask.

use crate::protocol::records::epoch_committed;
use crate::protocol::refusal::show;
use crate::protocol::{Epoch, Refusal, RefusalKind};

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

    /// The cases tests/unit/test_recovery_decisions.py checked through the former binding
    /// (whose `refuse_backwards` defaulted to true).
    #[test]
    fn refusals_and_plans_of_an_atomic_pair() {
        let pair = |pg: Epoch, k: Epoch| {
            vec![
                SinkProgress {
                    sink_id: "pg".into(),
                    last: Some(pg),
                },
                SinkProgress {
                    sink_id: "k".into(),
                    last: Some(k),
                },
            ]
        };
        let EpochPlan::Refuse(r) = plan_epoch(1, &pair(3, 3), &[], true) else {
            panic!("expected a refusal")
        };
        assert_eq!(r.kind.name(), "epoch_backwards");
        let EpochPlan::Refuse(r) = plan_epoch(5, &pair(4, 3), &[("k".into(), 4)], true) else {
            panic!("expected a refusal")
        };
        assert_eq!(r.kind.name(), "other_epoch_while_incomplete");
        assert_eq!(
            plan_epoch(4, &pair(4, 3), &[("k".into(), 4)], true),
            EpochPlan::Write {
                sinks: vec![false, true]
            }
        );
        assert_eq!(plan_epoch(4, &pair(4, 4), &[], true), EpochPlan::Skip);
    }
}
