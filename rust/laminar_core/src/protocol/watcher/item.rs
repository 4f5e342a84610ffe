//! The items a watcher pass finds, and what came of them.

use crate::protocol::watcher::rules::{Unresolved, WatcherAction};

use crate::protocol::Epoch;
use crate::protocol::dt_state::DtState;

/// What kind of unresolved item.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ItemKind {
    KafkaBehind,
    CorruptDecision,
    Participant,
    Distributed,
}

impl ItemKind {
    /// The name in reports.
    pub fn name(self) -> &'static str {
        match self {
            ItemKind::KafkaBehind => "kafka_behind",
            ItemKind::CorruptDecision => "corrupt_decision",
            ItemKind::Participant => "participant",
            ItemKind::Distributed => "distributed",
        }
    }
}

/// What came of an item.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ItemOutcome {
    Unresolved,
    Resolved,
    Failed,
    /// A decided Kafka epoch whose marker could not be read (a missing ACL, the cluster down):
    /// unresolved, and what the operator must fix before anything can resolve it.
    Unreadable,
}

impl ItemOutcome {
    /// The name in reports.
    pub fn name(self) -> &'static str {
        match self {
            ItemOutcome::Unresolved => "unresolved",
            ItemOutcome::Resolved => "resolved",
            ItemOutcome::Failed => "failed",
            ItemOutcome::Unreadable => "unreadable",
        }
    }
}

/// One unresolved transaction.
#[derive(Debug, Clone, PartialEq)]
pub struct Item {
    pub kind: ItemKind,
    /// How `laminar resolve` names it: `kafka:<transactional_id>`, a gid, or a dtid.
    pub id: String,
    pub epoch: Option<Epoch>,
    pub age_s: f64,
    /// The recorded decision (`commit` for a decided Kafka epoch; None: none).
    pub decision: Option<DtState>,
    /// A participant's distributed transaction.
    pub dtid: Option<String>,
    pub detail: String,
    pub action: WatcherAction,
    pub outcome: ItemOutcome,
    pub lingering: bool,
}

impl Item {
    pub(super) fn new(kind: ItemKind, id: String, epoch: Option<Epoch>, age_s: f64) -> Self {
        Self {
            kind,
            id,
            epoch,
            age_s,
            decision: None,
            dtid: None,
            detail: String::new(),
            action: WatcherAction::Wait,
            outcome: ItemOutcome::Unresolved,
            lingering: false,
        }
    }

    pub(super) fn unresolved(&self) -> Unresolved {
        match self.kind {
            ItemKind::KafkaBehind => Unresolved::KafkaBehind,
            ItemKind::CorruptDecision => Unresolved::CorruptDecision,
            ItemKind::Participant => Unresolved::Participant(self.decision),
            ItemKind::Distributed => {
                Unresolved::Distributed(self.decision.unwrap_or(DtState::Prepare))
            }
        }
    }

    pub(super) fn note(&mut self, text: &str) {
        if self.detail.is_empty() {
            self.detail = text.to_owned();
        } else {
            self.detail = format!("{}; {text}", self.detail);
        }
    }
}
