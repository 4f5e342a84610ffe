//! The decision records and the rules every machine shares (docs/engine.md, "Records"):
//!
//! - a Kafka sink's decision row as its transitions see it ([`TxnRow`], [`TxnEvent`]; the table
//!   and `txn_next` are in [`super::transitions`], with every other transition table);
//! - [`epoch_committed`]: the one "already committed" rule (`last >= epoch`);
//! - [`next_epoch_base`]: the one epoch-base rule (past every committed epoch);
//! - [`owner_decision`]: the checkpoint-reset guard (docs/protocol.md §5).
//!
//! The names of distributed transactions and their participants, and the one
//! participant-matching rule, are in [`super::names`].

use crate::error::CoreError;
use crate::prepared::PreparedTxnState;

use crate::protocol::{Epoch, Refusal, RefusalKind};

/// A row of `laminar.txn_state` as read (the prepared state as stored: the core decodes it).
#[derive(Debug, Clone, PartialEq)]
pub struct DecisionRow {
    pub transactional_id: String,
    pub epoch: Epoch,
    pub previous_epoch: Option<Epoch>,
    pub prepared_state: String,
    pub group_id: String,
    /// Seconds since `decided_at`.
    pub age_s: f64,
}

/// Whether a sink whose last committed epoch is `last` holds `epoch` (docs/protocol.md §1: a
/// replayed epoch is skipped). The one place this rule is written.
pub fn epoch_committed(last: Option<Epoch>, epoch: Epoch) -> bool {
    last.is_some_and(|last| last >= epoch)
}

/// Whether a stop fence at `fence` (`laminar.stop_fence`, set by `resolve_stopped` for a query
/// stopped mid-batch, lifted by the next run's writer) covers `epoch`: a task of the data source
/// that finds `epoch`'s record missing then writes nothing instead of creating it
/// (docs/protocol.md §4, task step a). The one place this rule is written.
pub fn stop_fenced(fence: Option<Epoch>, epoch: Epoch) -> bool {
    fence.is_some_and(|fence| fence >= epoch)
}

/// What a data-source task may do with its epoch's record under the group's stop fence
/// (docs/protocol.md §4, task step a).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FenceRule {
    /// No fence covers the epoch, or the fence is reserved for the task's own writer: the
    /// record is created if missing, then claimed.
    Open,
    /// A fence nobody reserved yet (set by `resolve_stopped` or Spark's `abort`): a missing
    /// record stays missing (the task writes nothing); one that exists is claimed.
    Fenced,
    /// A fence the next run's writer reserved for its own tasks, and this task is of another
    /// writer (a worker of the stopped run, arriving after the restart's writer): it writes
    /// nothing and claims nothing, the record missing or not.
    Superseded,
}

/// The rule of a stop fence at `fence`, reserved for the writer `reserved` (None: not yet,
/// the stopped run's resolution set it), for a task of `epoch` created by the writer `writer`
/// (None: a caller that names no writer, not told apart from the reserving one). The one place
/// this rule is written.
pub fn stop_fence_rule(
    fence: Option<Epoch>,
    reserved: Option<&str>,
    epoch: Epoch,
    writer: Option<&str>,
) -> FenceRule {
    if !stop_fenced(fence, epoch) {
        return FenceRule::Open;
    }
    match (reserved, writer) {
        (None, _) => FenceRule::Fenced,
        (Some(r), Some(w)) if r != w => FenceRule::Superseded,
        (Some(_), _) => FenceRule::Open,
    }
}

/// The epoch `resolve_stopped` fences a group up to: the highest epoch a late task of the
/// stopped batch can carry (its batch id plus the epoch base) — the highest of the group's
/// unconcluded records (`in_flight`: the batch's tasks that created one), and the epoch after
/// the group's last committed one (a batch stopped before any of its tasks created its record:
/// Spark runs batch `b + 1` only after `b` committed). 0 for a group with neither.
pub fn stop_fence_epoch(
    in_flight: impl IntoIterator<Item = Epoch>,
    last_committed: Option<Epoch>,
) -> Epoch {
    let next = last_committed.map_or(0, |last| last.saturating_add(1));
    in_flight.into_iter().fold(next, Epoch::max)
}

/// The epoch base that starts sinks over past every committed epoch: `max(base, top + 1)` with
/// `top` the highest of `committed` (docs/protocol.md §5).
pub fn next_epoch_base(base: Epoch, committed: impl IntoIterator<Item = Option<Epoch>>) -> Epoch {
    let top = committed.into_iter().flatten().max().unwrap_or(-1);
    base.max(top + 1)
}

/// What the owner guard decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OwnerDecision {
    /// Nothing to record: the sinks are this query's (or the writer knows no query).
    Keep {
        /// The epoch base.
        epoch_base: Epoch,
    },
    /// Record this query as the owner (first owner, or a restart replacing `replaced`).
    Claim {
        /// The epoch base to record.
        epoch_base: Epoch,
        /// The owner this query replaces (`on_new_query="restart"`).
        replaced: Option<String>,
    },
}

/// What the owner guard reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnerRecords<'a> {
    /// The registry row's id (a group, or a lone PostgreSQL sink).
    pub registry_id: &'a str,
    /// The member sinks' ids.
    pub members: &'a [String],
    /// The registry row's owner.
    pub owner: Option<&'a str>,
    /// The registry row's epoch base.
    pub epoch_base: Epoch,
    /// The members that have an owner, with it.
    pub member_owners: &'a [(String, String)],
    /// Each member's last committed epoch.
    pub last_committed: &'a [Option<Epoch>],
}

/// The checkpoint-reset guard (docs/protocol.md §5): `mine` is the writer's query (None: it
/// knows none), `restart` is `on_new_query="restart"`.
pub fn owner_decision(
    records: &OwnerRecords<'_>,
    mine: Option<&str>,
    restart: bool,
) -> Result<OwnerDecision, Refusal> {
    let Some(mine) = mine else {
        return Ok(OwnerDecision::Keep {
            epoch_base: records.epoch_base,
        });
    };
    let registry_foreign = records.owner.filter(|o| *o != mine);
    let member_foreign = records
        .member_owners
        .iter()
        .find(|(_, o)| o != mine)
        .map(|(_, o)| o.as_str());
    let Some(previous) = registry_foreign.or(member_foreign) else {
        return Ok(if records.owner == Some(mine) {
            OwnerDecision::Keep {
                epoch_base: records.epoch_base,
            }
        } else {
            OwnerDecision::Claim {
                epoch_base: records.epoch_base,
                replaced: None,
            }
        });
    };
    if !restart {
        let mut members = records.members.to_vec();
        members.sort();
        return Err(Refusal::new(
            RefusalKind::ForeignOwner,
            format!(
                "sinks {members:?} are owned by query {previous:?}, not by {mine:?}: their \
                 committed epochs belong to that query (a query restarted from a new checkpoint \
                 starts again at batch 0, and every batch would be taken for a replay and \
                 skipped). To make this query the owner and start over, run `laminar reset {}` \
                 or pass exactly_once(..., on_new_query=\"restart\"); to continue the old query, \
                 restart it from its own checkpoint",
                records.registry_id
            ),
        ));
    }
    Ok(OwnerDecision::Claim {
        epoch_base: next_epoch_base(records.epoch_base, records.last_committed.iter().copied()),
        replaced: Some(previous.to_owned()),
    })
}

// -- laminar.txn_state ------------------------------------------------------------------------------

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

/// A Kafka sink's row in `laminar.txn_state`, parsed: the core's one parsed decision row. The
/// driver reports the row as stored ([`DecisionRow`], the wire event: the columns as read, the
/// prepared state undecoded); [`decision_record`] parses it into this, and [`DecisionRecord::txn_row`]
/// is its key in the transition table.
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
        /// The row's epoch column (it still reads).
        epoch: Epoch,
        /// What the decoder said.
        reason: String,
    },
}

impl DecisionRecord {
    /// The row's place in the transition table (`protocol::transitions::TXN_TRANSITIONS`).
    pub fn txn_row(&self) -> TxnRow {
        match self {
            DecisionRecord::None => TxnRow::None,
            DecisionRecord::Decided { epoch, .. } => TxnRow::Decided(*epoch),
            DecisionRecord::Corrupt { epoch, .. } => TxnRow::Corrupt(*epoch),
        }
    }
}

/// A Kafka sink's decision row, as far as its transitions go: its kind and epoch, the key of
/// `protocol::transitions::TXN_TRANSITIONS` ([`DecisionRecord::txn_row`] of a parsed row; the
/// epoch a machine read or wrote, for its own decisions).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TxnRow {
    /// No row.
    None,
    /// The last decided epoch.
    Decided(Epoch),
    /// A row whose prepared state does not decode (its epoch column still reads).
    Corrupt(Epoch),
}

/// A change of a decision row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TxnEvent {
    /// The decision transaction records epoch `e` (never behind the row's epoch: a replay of an
    /// incomplete epoch records it again).
    Decide(Epoch),
    /// `laminar resolve kafka:<tid> --commit` of a corrupt row: same epoch, the unreadable
    /// producer identity forgotten (recovery then completes it from the redo log or the replay).
    Repair,
    /// `laminar resolve kafka:<tid> --rollback --force`: the decision moves back to Kafka's
    /// marker (None: no marker).
    ForceBack(Option<Epoch>),
}

/// What a decision row says, decoded (its prepared state parsed by the core): the wire event
/// ([`DecisionRow`]) made the one parsed row ([`DecisionRecord`]).
pub fn decision_record(row: &DecisionRow) -> DecisionRecord {
    match PreparedTxnState::parse(&row.prepared_state) {
        Ok(state) => DecisionRecord::Decided {
            epoch: row.epoch,
            previous: row.previous_epoch,
            producer: ProducerIdentity::known(state.producer_id, state.producer_epoch),
        },
        Err(e) => DecisionRecord::Corrupt {
            epoch: row.epoch,
            reason: e.to_string(),
        },
    }
}

/// The prepared-state text of a decision that knows no producer (`resolve`'s repair and forced
/// rollback): recovery can only complete it from the redo log or the replay.
pub fn anonymous_prepared_state(transactional_id: &str, epoch: Epoch) -> String {
    PreparedTxnState::new(Some(transactional_id.to_owned()), epoch).to_text()
}

/// Why a refusal or a failure from a transition check: an illegal change is a refusal.
pub(crate) fn illegal(e: CoreError) -> Refusal {
    Refusal::new(RefusalKind::IllegalTransition, e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn committed_and_base_rules() {
        assert!(!epoch_committed(None, 0));
        assert!(epoch_committed(Some(3), 3));
        assert!(epoch_committed(Some(4), 3));
        assert!(!epoch_committed(Some(2), 3));
        assert_eq!(next_epoch_base(0, [None, None]), 0);
        assert_eq!(next_epoch_base(0, [Some(4), None, Some(9)]), 10);
        assert_eq!(next_epoch_base(20, [Some(4)]), 20);
    }

    #[test]
    fn the_stop_fence_rules() {
        // the fenced epoch: the highest record in flight, else the epoch after the last commit
        assert_eq!(stop_fence_epoch([], None), 0);
        assert_eq!(stop_fence_epoch([], Some(6)), 7);
        assert_eq!(stop_fence_epoch([7], Some(6)), 7);
        assert_eq!(stop_fence_epoch([9, 8], Some(6)), 9);
        assert_eq!(stop_fence_epoch([3], None), 3);
        assert_eq!(stop_fence_epoch([], Some(Epoch::MAX)), Epoch::MAX);
        // a fence covers its epoch and every earlier one, nothing later
        assert!(stop_fenced(Some(7), 7));
        assert!(stop_fenced(Some(7), 2));
        assert!(!stop_fenced(Some(7), 8));
        assert!(!stop_fenced(None, 0));
        use FenceRule::*;
        assert_eq!(stop_fence_rule(None, None, 3, Some("w")), Open);
        assert_eq!(stop_fence_rule(Some(2), Some("w0"), 3, Some("w")), Open);
        assert_eq!(stop_fence_rule(Some(3), None, 3, Some("w")), Fenced);
        assert_eq!(stop_fence_rule(Some(3), None, 3, None), Fenced);
        assert_eq!(stop_fence_rule(Some(3), Some("w"), 3, Some("w")), Open);
        assert_eq!(stop_fence_rule(Some(3), Some("w"), 2, None), Open);
        assert_eq!(
            stop_fence_rule(Some(3), Some("w1"), 3, Some("w0")),
            Superseded
        );
    }

    fn records<'a>(
        owner: Option<&'a str>,
        member_owners: &'a [(String, String)],
        members: &'a [String],
        last: &'a [Option<Epoch>],
    ) -> OwnerRecords<'a> {
        OwnerRecords {
            registry_id: "g",
            members,
            owner,
            epoch_base: 2,
            member_owners,
            last_committed: last,
        }
    }

    #[test]
    fn the_owner_guard() {
        let members = vec!["a".to_owned(), "b".to_owned()];
        let last = [Some(7), None];
        let none: Vec<(String, String)> = vec![];
        let keep = OwnerDecision::Keep { epoch_base: 2 };
        assert_eq!(
            owner_decision(&records(Some("q"), &none, &members, &last), None, false),
            Ok(keep.clone())
        );
        assert_eq!(
            owner_decision(
                &records(Some("q"), &none, &members, &last),
                Some("q"),
                false
            ),
            Ok(keep)
        );
        assert_eq!(
            owner_decision(&records(None, &none, &members, &last), Some("q"), false),
            Ok(OwnerDecision::Claim {
                epoch_base: 2,
                replaced: None
            })
        );
        let err = owner_decision(
            &records(Some("old"), &none, &members, &last),
            Some("q"),
            false,
        )
        .unwrap_err();
        assert_eq!(err.kind, RefusalKind::ForeignOwner);
        assert!(err.message.contains("\"old\"") && err.message.contains("laminar reset g"));
        let foreign_member = vec![("b".to_owned(), "other".to_owned())];
        assert_eq!(
            owner_decision(
                &records(None, &foreign_member, &members, &last),
                Some("q"),
                true
            ),
            Ok(OwnerDecision::Claim {
                epoch_base: 8,
                replaced: Some("other".into())
            })
        );
    }

    #[test]
    fn decision_rows_decode_in_the_core() {
        let mut state = PreparedTxnState::new(Some("t".into()), 4);
        state.producer_id = 7;
        state.producer_epoch = 2;
        let row = DecisionRow {
            transactional_id: "t".into(),
            epoch: 4,
            previous_epoch: Some(3),
            prepared_state: state.to_text(),
            group_id: "g".into(),
            age_s: 0.0,
        };
        assert_eq!(
            decision_record(&row),
            DecisionRecord::Decided {
                epoch: 4,
                previous: Some(3),
                producer: ProducerIdentity::known(7, 2)
            }
        );
        let bad = DecisionRow {
            prepared_state: "lm1.garbage".into(),
            ..row.clone()
        };
        assert!(matches!(
            decision_record(&bad),
            DecisionRecord::Corrupt { .. }
        ));
        let anon = DecisionRow {
            prepared_state: anonymous_prepared_state("t", 4),
            ..row
        };
        assert!(matches!(
            decision_record(&anon),
            DecisionRecord::Decided { producer: None, .. }
        ));
    }
}
