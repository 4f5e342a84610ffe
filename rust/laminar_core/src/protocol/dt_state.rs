//! The Vitess-style distributed transaction's decision record (docs/protocol.md §4):
//! `laminar.dt_state` of the scale-out mode and of Postgres participants on other databases, its
//! states and events, and its transitions.
//!
//! ```text
//! (none) --create--> Prepare --start_commit--> Commit --conclude--> (none)
//!                    Prepare --set_rollback--> Rollback --conclude--> (none)
//!                    Prepare --conclude_empty--> (none)          (every partition was empty)
//!          Prepare | Rollback --force_commit--> Commit          (`laminar resolve --commit --force`)
//!                      Commit --force_rollback--> Rollback      (`laminar resolve --rollback --force`)
//! ```
//!
//! `create` is committed before any participant prepares, so every prepared participant has a
//! record to be judged by; `start_commit` happens inside the decision transaction and is
//! conditional on the state still being `Prepare`, exactly like the watcher's `set_rollback`: the
//! row lock makes one of them win and the other see that it lost. `Commit` never becomes
//! `Rollback` and the other way round, and `Rollback` never becomes `Rollback` again (a
//! rollback that is already recorded is carried on, not recorded twice) — except through the
//! operator's explicit `--force`, which is its own event.

use std::fmt;

/// The state of a distributed transaction's decision record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DtState {
    /// Created; participants are preparing. No decision yet.
    Prepare,
    /// Decided to commit: only commits are allowed from here.
    Commit,
    /// Decided to roll back: only rollbacks are allowed from here.
    Rollback,
}

impl DtState {
    /// Every state.
    pub const ALL: [DtState; 3] = [DtState::Prepare, DtState::Commit, DtState::Rollback];

    /// The name stored in `laminar.dt_state.state`.
    pub fn name(self) -> &'static str {
        match self {
            DtState::Prepare => "prepare",
            DtState::Commit => "commit",
            DtState::Rollback => "rollback",
        }
    }

    /// Parses a stored name.
    pub fn from_name(name: &str) -> Option<DtState> {
        DtState::ALL.into_iter().find(|s| s.name() == name)
    }
}

impl fmt::Display for DtState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Something that happens to a decision record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DtEvent {
    /// Insert the record (state `Prepare`), committed before any participant prepares.
    Create,
    /// The decision to commit (in the decision transaction).
    StartCommit,
    /// The decision to roll back (a failed prepare, or the watcher/recovery giving up on it).
    SetRollback,
    /// Every participant completed: delete the record.
    Conclude,
    /// Every partition was empty: nothing was prepared, nothing to decide; delete the record.
    ConcludeEmpty,
    /// The operator commits against the record (`laminar resolve --commit --force`).
    ForceCommit,
    /// The operator rolls back against a decision to commit (`laminar resolve --rollback
    /// --force`).
    ForceRollback,
}

impl DtEvent {
    /// Every event.
    pub const ALL: [DtEvent; 7] = [
        DtEvent::Create,
        DtEvent::StartCommit,
        DtEvent::SetRollback,
        DtEvent::Conclude,
        DtEvent::ConcludeEmpty,
        DtEvent::ForceCommit,
        DtEvent::ForceRollback,
    ];

    /// The event's name.
    pub fn name(self) -> &'static str {
        match self {
            DtEvent::Create => "create",
            DtEvent::StartCommit => "start_commit",
            DtEvent::SetRollback => "set_rollback",
            DtEvent::Conclude => "conclude",
            DtEvent::ConcludeEmpty => "conclude_empty",
            DtEvent::ForceCommit => "force_commit",
            DtEvent::ForceRollback => "force_rollback",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for s in DtState::ALL {
            assert_eq!(DtState::from_name(s.name()), Some(s));
        }
        assert_eq!(DtState::from_name("COMMIT"), None);
    }
}
