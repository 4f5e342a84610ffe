//! The resolution watcher's rules (docs/protocol.md §4b, Vitess): what to do with each unresolved
//! item ([`watcher_action`]) and when it lingers ([`is_lingering`]), as pure functions of its age.

use crate::protocol::dt_state::DtState;

/// How long the watcher leaves a transaction to its coordinator, and when it calls it lingering.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WatcherThresholds {
    /// Unresolved for at least this long (seconds): the watcher resolves it by the rules.
    pub resolve_after_s: f64,
    /// Still unresolved after at least this long (seconds): it lingers (metric, alert).
    pub lingering_after_s: f64,
}

impl Default for WatcherThresholds {
    fn default() -> Self {
        Self {
            resolve_after_s: 60.0,
            lingering_after_s: 300.0,
        }
    }
}

/// Something the watcher (or start-up recovery) found unresolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Unresolved {
    /// A decided epoch whose Kafka part is behind (`txn_state` ahead of the marker).
    KafkaBehind,
    /// A decision row that does not decode.
    CorruptDecision,
    /// A prepared participant (a Postgres gid, a Kafka participant) and its decision, if any.
    Participant(Option<DtState>),
    /// A decision record not concluded yet.
    Distributed(DtState),
}

/// What to do with one unresolved item.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WatcherAction {
    /// Too young: its coordinator may still be working on it.
    Wait,
    /// The decision is to commit: complete it (commit the participants, then conclude).
    Complete,
    /// The decision is to roll back, or there is none: roll back the participants, conclude.
    RollBack,
    /// No decision yet: record `set_rollback` (conditional on `Prepare`: if the coordinator won
    /// the race and decided to commit, read again and complete), then roll back.
    SetRollbackThenRollBack,
    /// Nothing can be decided automatically: report it (it lingers until an operator acts).
    ReportOnly,
}

impl WatcherAction {
    /// The action's name.
    pub fn name(self) -> &'static str {
        match self {
            WatcherAction::Wait => "wait",
            WatcherAction::Complete => "complete",
            WatcherAction::RollBack => "roll_back",
            WatcherAction::SetRollbackThenRollBack => "set_rollback_then_roll_back",
            WatcherAction::ReportOnly => "report_only",
        }
    }
}

/// The watcher's rules (Vitess): decision COMMIT → complete; no decision or ROLLBACK → roll back;
/// only once the item is older than `resolve_after_s`. `age_s` is the time since the item's
/// transaction was created (participants: since PREPARE; decisions: since the decision).
///
/// At start-up a coordinator that has just fenced its predecessor (docs/protocol.md §6) owns
/// its group's items and resolves them at once: pass `resolve_after_s = 0`.
pub fn watcher_action(
    item: Unresolved,
    age_s: f64,
    thresholds: WatcherThresholds,
) -> WatcherAction {
    if matches!(item, Unresolved::CorruptDecision) {
        return WatcherAction::ReportOnly;
    }
    if age_s.is_nan() || age_s < thresholds.resolve_after_s {
        return WatcherAction::Wait;
    }
    match item {
        Unresolved::KafkaBehind
        | Unresolved::Participant(Some(DtState::Commit))
        | Unresolved::Distributed(DtState::Commit) => WatcherAction::Complete,
        Unresolved::Participant(Some(DtState::Rollback) | None)
        | Unresolved::Distributed(DtState::Rollback) => WatcherAction::RollBack,
        Unresolved::Participant(Some(DtState::Prepare))
        | Unresolved::Distributed(DtState::Prepare) => WatcherAction::SetRollbackThenRollBack,
        Unresolved::CorruptDecision => WatcherAction::ReportOnly,
    }
}

/// Whether an item still unresolved at `age_s` lingers (counted by the metric, alerted on).
pub fn is_lingering(age_s: f64, thresholds: WatcherThresholds) -> bool {
    age_s >= thresholds.lingering_after_s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_watcher_follows_the_vitess_rules_after_the_threshold() {
        let t = WatcherThresholds {
            resolve_after_s: 30.0,
            lingering_after_s: 120.0,
        };
        use Unresolved::*;
        let cases = [
            (KafkaBehind, WatcherAction::Complete),
            (Participant(Some(DtState::Commit)), WatcherAction::Complete),
            (Distributed(DtState::Commit), WatcherAction::Complete),
            (Participant(None), WatcherAction::RollBack),
            (
                Participant(Some(DtState::Rollback)),
                WatcherAction::RollBack,
            ),
            (Distributed(DtState::Rollback), WatcherAction::RollBack),
            (
                Participant(Some(DtState::Prepare)),
                WatcherAction::SetRollbackThenRollBack,
            ),
            (
                Distributed(DtState::Prepare),
                WatcherAction::SetRollbackThenRollBack,
            ),
            (CorruptDecision, WatcherAction::ReportOnly),
        ];
        for (item, action) in cases {
            assert_eq!(watcher_action(item, 31.0, t), action, "{item:?}");
            let young = watcher_action(item, 5.0, t);
            if item == CorruptDecision {
                assert_eq!(young, WatcherAction::ReportOnly);
            } else {
                assert_eq!(young, WatcherAction::Wait, "{item:?}");
            }
        }
        assert_eq!(
            watcher_action(KafkaBehind, f64::NAN, t),
            WatcherAction::Wait
        );
        assert!(!is_lingering(119.0, t));
        assert!(is_lingering(120.0, t));
    }

    /// The cases tests/unit/test_recovery_decisions.py checked through the former binding, at
    /// the default thresholds (resolve after 60 s, lingering after 300 s).
    #[test]
    fn the_watcher_rules_at_the_default_thresholds() {
        let t = WatcherThresholds::default();
        use Unresolved::*;
        assert_eq!(
            watcher_action(Participant(Some(DtState::Commit)), 100.0, t),
            WatcherAction::Complete
        );
        assert_eq!(
            watcher_action(Participant(None), 100.0, t),
            WatcherAction::RollBack
        );
        assert_eq!(
            watcher_action(Distributed(DtState::Prepare), 100.0, t),
            WatcherAction::SetRollbackThenRollBack
        );
        assert_eq!(
            watcher_action(Participant(Some(DtState::Commit)), 5.0, t),
            WatcherAction::Wait
        );
        assert_eq!(
            watcher_action(CorruptDecision, 1.0, t),
            WatcherAction::ReportOnly
        );
        assert_eq!(
            watcher_action(CorruptDecision, 1.0, t).name(),
            "report_only"
        );
        assert!(!is_lingering(299.0, t));
        assert!(is_lingering(300.0, t));
    }
}
