//! The resolution watcher's pass (docs/protocol.md §4b): find what is unresolved, decide per
//! item by the core's rules ([`watcher_action`]), act, report. The same pass serves the writer's
//! background thread, start-up recovery of a scale-out group (`resolve_after_s = 0`),
//! `laminar recover` and — inspecting only — `laminar status`. [`resolve`] is what `laminar
//! resolve` may do.
//!
//! ```text
//! read_decisions -> corrupt_decision items; read_marker per decision -> kafka_behind items
//! list_prepared, read_participant_decisions -> participant items (exact gid match)
//! read_dt_states -> distributed items
//! per item, by watcher_action:
//!   kafka_behind, complete       KafkaRecovery of the sink
//!   participant                  [set_dt_state prepare -> rollback, read_dt_state]
//!                                commit_prepared | rollback_prepared
//!   distributed                  Resolution::complete | Resolution::roll_back
//! log the summary line
//! ```

mod item;
pub mod resolve;
pub mod rules;

pub use item::{Item, ItemKind, ItemOutcome};

pub use rules::{Unresolved, WatcherAction, WatcherThresholds, is_lingering, watcher_action};

use crate::protocol::command::{
    Command, DecisionSelection, Event, LogLevel, PreparedGid, unexpected,
};
use crate::protocol::dt_state::{DtEvent, DtState};
use crate::protocol::kafka_recovery::KafkaRecovery;
use crate::protocol::names::ParticipantDecision;
use crate::protocol::names::decision_of;
use crate::protocol::records::DecisionRow;
use crate::protocol::records::{DecisionRecord, decision_record, epoch_committed};
use crate::protocol::resolution::{Resolution, ResolutionOutcome};
use crate::protocol::transitions::dt_next;
use crate::protocol::{Core, End, Epoch, Idle, Steps, children, core_accessors};

/// What a pass looks at and how it acts.
#[derive(Debug, Clone, PartialEq)]
pub struct PassConfig {
    /// Only this group's decisions and distributed transactions.
    pub group_id: Option<String>,
    /// Only prepared gids of these PostgreSQL sinks.
    pub sink_ids: Option<Vec<String>>,
    /// Read Kafka markers (needs the sinks' configuration).
    pub check_kafka: bool,
    pub thresholds: WatcherThresholds,
    /// Resolve what the rules say (false: inspect only, for `laminar status`).
    pub act: bool,
    /// A distributed transaction left out, with its participants, while it is `prepare`: the
    /// one a scale-out coordinator is about to decide (the data source's tasks created it,
    /// docs/spark.md). Decided, it is completed or rolled back as any other.
    pub spare: Option<String>,
}

impl PassConfig {
    /// The pass of a coordinator that has just fenced its predecessor: it owns its group's
    /// leftovers and resolves them at once.
    pub fn owned_group(group_id: &str, postgres: &[String]) -> Self {
        Self {
            group_id: Some(group_id.to_owned()),
            sink_ids: Some(postgres.to_vec()),
            check_kafka: true,
            thresholds: WatcherThresholds {
                resolve_after_s: 0.0,
                ..WatcherThresholds::default()
            },
            act: true,
            spare: None,
        }
    }

    fn spared(&self, dtid: Option<&str>, state: Option<DtState>) -> bool {
        state == Some(DtState::Prepare) && dtid.is_some_and(|d| self.spare.as_deref() == Some(d))
    }
}

children!(
    /// What a pass runs inside itself.
    Child {
        Recovery(KafkaRecovery),
        Resolution(Resolution),
    }
);

/// One pass (module docs).
#[derive(Debug)]
pub struct WatcherPass {
    config: PassConfig,
    core: Core<Child>,
    items: Vec<Item>,
    /// Decision rows waiting for their marker.
    marker_rows: Vec<(String, Epoch, f64)>,
    prepared: Vec<PreparedGid>,
    acting: Option<usize>,
}

impl WatcherPass {
    /// A pass, starting with the decision rows.
    pub fn new(config: PassConfig) -> Self {
        let mut core = Core::default();
        core.out.push(Command::ReadDecisions {
            of: match &config.group_id {
                Some(g) => DecisionSelection::Group(g.clone()),
                None => DecisionSelection::All,
            },
        });
        Self {
            config,
            core,
            items: Vec::new(),
            marker_rows: Vec::new(),
            prepared: Vec::new(),
            acting: None,
        }
    }

    /// The items found, with what was done (after the machine ended).
    pub fn items(&self) -> &[Item] {
        &self.items
    }

    /// Items still unresolved.
    pub fn unresolved(&self) -> impl Iterator<Item = &Item> {
        self.items
            .iter()
            .filter(|i| i.outcome != ItemOutcome::Resolved)
    }

    /// Unresolved items older than the lingering threshold (the alerting metric).
    pub fn lingering(&self) -> usize {
        self.unresolved().filter(|i| i.lingering).count()
    }

    /// The start-up warning of a coordinator that could not resolve everything.
    pub fn startup_summary(&self, group_id: &str) -> Option<String> {
        let ids: Vec<&str> = self.unresolved().map(|i| i.id.as_str()).collect();
        (!ids.is_empty()).then(|| {
            format!(
                "scale-out {group_id}: {} item(s) unresolved at start-up: {ids:?}",
                ids.len()
            )
        })
    }

    fn on_decisions(&mut self, rows: Vec<DecisionRow>) {
        for row in rows {
            let id = format!("kafka:{}", row.transactional_id);
            match decision_record(&row) {
                DecisionRecord::Corrupt { reason, .. } => {
                    let mut item =
                        Item::new(ItemKind::CorruptDecision, id, Some(row.epoch), row.age_s);
                    item.decision = Some(DtState::Commit);
                    item.detail = reason;
                    self.items.push(item);
                }
                _ if self.config.check_kafka => {
                    self.core.out.push(Command::ReadMarker {
                        sink_id: row.transactional_id.clone(),
                    });
                    self.marker_rows
                        .push((row.transactional_id, row.epoch, row.age_s));
                }
                _ => {}
            }
        }
        self.core.out.push(Command::ListPrepared);
    }

    fn kafka_item(&mut self, tid: &str, epoch: Epoch, age_s: f64, detail: String) {
        let mut item = Item::new(
            ItemKind::KafkaBehind,
            format!("kafka:{tid}"),
            Some(epoch),
            age_s,
        );
        item.decision = Some(DtState::Commit);
        item.detail = detail;
        self.items.push(item);
    }

    fn on_participant_decisions(&mut self, rows: Vec<ParticipantDecision>) {
        for prepared in std::mem::take(&mut self.prepared) {
            if let Some(sinks) = &self.config.sink_ids {
                if !prepared.sink_id.as_ref().is_some_and(|s| sinks.contains(s)) {
                    continue;
                }
            }
            let decision = decision_of(&prepared.gid, &rows);
            if self
                .config
                .spared(decision.map(|d| d.dtid.as_str()), decision.map(|d| d.state))
            {
                continue;
            }
            if let (Some(group), None) = (&self.config.group_id, &self.config.sink_ids) {
                if decision.is_none_or(|d| &d.group_id != group) {
                    continue;
                }
            }
            let mut item = Item::new(
                ItemKind::Participant,
                prepared.gid.clone(),
                prepared.epoch,
                prepared.age_s,
            );
            item.decision = decision.map(|d| d.state);
            item.dtid = decision.map(|d| d.dtid.clone());
            item.detail = format!(
                "prepared transaction of sink {} (decision {})",
                prepared.sink_id.as_deref().unwrap_or("?"),
                decision.map_or("none", |d| d.dtid.as_str())
            );
            self.items.push(item);
        }
        self.core.out.push(Command::ReadDtStates {
            group_id: self.config.group_id.clone(),
        });
    }

    /// Acts on the next item (or ends with the summary line).
    fn next_item(&mut self) {
        let i = self.acting.map_or(0, |i| i + 1);
        if i >= self.items.len() || !self.config.act {
            self.acting = Some(self.items.len());
            return self.summary();
        }
        self.acting = Some(i);
        let thresholds = self.config.thresholds;
        let item = &mut self.items[i];
        item.action = watcher_action(item.unresolved(), item.age_s, thresholds);
        let why = "rolled back by the resolution watcher";
        match (item.kind, item.action) {
            (_, WatcherAction::Wait | WatcherAction::ReportOnly) => self.next_item(),
            (ItemKind::KafkaBehind, _) => {
                let tid = item.id.trim_start_matches("kafka:").to_owned();
                self.core
                    .run(Child::Recovery(Box::new(KafkaRecovery::new(vec![tid]))));
            }
            (ItemKind::Participant, WatcherAction::SetRollbackThenRollBack) => {
                match item.dtid.clone() {
                    Some(dtid) if dt_next(Some(DtState::Prepare), DtEvent::SetRollback).is_ok() => {
                        self.core.out.push(Command::SetDtState {
                            dtid,
                            from: DtState::Prepare,
                            to: DtState::Rollback,
                            message: why.to_owned(),
                        });
                    }
                    _ => {
                        let gid = item.id.clone();
                        self.core.out.push(Command::RollbackPrepared { gid });
                    }
                }
            }
            (ItemKind::Participant, WatcherAction::Complete) => {
                let gid = item.id.clone();
                self.core.out.push(Command::CommitPrepared { gid });
            }
            (ItemKind::Participant, _) => {
                let gid = item.id.clone();
                self.core.out.push(Command::RollbackPrepared { gid });
            }
            (ItemKind::Distributed, action) => {
                let dtid = item.id.clone();
                let resolution = match action {
                    WatcherAction::Complete => {
                        Resolution::complete(dtid, item.epoch.unwrap_or(-1), None)
                    }
                    WatcherAction::RollBack => {
                        Resolution::roll_back(dtid, Some(DtState::Rollback), why)
                    }
                    _ => Resolution::roll_back(dtid, Some(DtState::Prepare), why),
                };
                self.core.run(Child::Resolution(Box::new(resolution)));
            }
            (ItemKind::CorruptDecision, _) => self.next_item(),
        }
    }

    fn current(&mut self) -> Option<&mut Item> {
        let i = self.acting?;
        self.items.get_mut(i)
    }

    fn item_failed(&mut self, message: &str) {
        if let Some(item) = self.current() {
            item.outcome = ItemOutcome::Failed;
            let action = item.action.name();
            item.note(&format!("{action} failed: {message}"));
        }
        self.core.out.clear();
        self.core.out.push(Command::Rollback);
    }

    fn child_ended(&mut self, child: Child, end: End) {
        let Some(item) = self.current() else { return };
        match (child, end) {
            (Child::Recovery(recovery), End::Ok) => match recovery.awaiting().first() {
                Some((_, epoch)) => item.note(&format!("awaits Spark's replay of epoch {epoch}")),
                None => item.outcome = ItemOutcome::Resolved,
            },
            (Child::Resolution(resolution), End::Ok) => {
                let how = if item.action == WatcherAction::Complete {
                    "committed"
                } else {
                    "rolled back"
                };
                match resolution.outcome() {
                    Some(ResolutionOutcome::Concluded { postgres }) => {
                        item.outcome = ItemOutcome::Resolved;
                        item.note(&format!("{postgres} participant(s) {how}, concluded"));
                    }
                    Some(ResolutionOutcome::Gone) => {
                        item.outcome = ItemOutcome::Resolved;
                        item.note("already concluded");
                    }
                    Some(ResolutionOutcome::DecidedCommit) => {
                        item.note("decided to commit meanwhile: the next pass completes it");
                    }
                    Some(ResolutionOutcome::Unresolved(why)) => item.note(why),
                    None => {}
                }
            }
            (_, End::Refused(r)) => return self.item_failed(&r.message),
            (_, End::Failed(f)) => return self.item_failed(&f.message),
        }
        self.next_item();
    }

    fn summary(&mut self) {
        let thresholds = self.config.thresholds;
        for item in &mut self.items {
            item.lingering =
                item.outcome != ItemOutcome::Resolved && is_lingering(item.age_s, thresholds);
        }
        if !self.config.act {
            return;
        }
        let unresolved: Vec<&Item> = self.unresolved().collect();
        let oldest = unresolved.iter().map(|i| i.age_s).fold(0.0_f64, f64::max);
        let resolved = self.items.len() - unresolved.len();
        let lingering: Vec<String> = unresolved
            .iter()
            .filter(|i| i.lingering)
            .take(10)
            .map(|i| format!("{}({},{:.0}s)", i.id, i.kind.name(), i.age_s))
            .collect();
        let mut line = format!(
            "laminar.watcher lingering={} oldest_age_s={oldest:.1} unresolved={} resolved={resolved}",
            self.lingering(),
            unresolved.len()
        );
        if let Some(group) = &self.config.group_id {
            line.push_str(&format!(" group={group}"));
        }
        if lingering.is_empty() {
            self.core.out.push(Command::log(LogLevel::Info, line));
        } else {
            self.core.out.push(Command::warn(format!(
                "{line} items={}",
                lingering.join(",")
            )));
        }
    }

    fn step(&mut self, command: Command, event: Event) {
        if let Event::Failed(f) = &event {
            if matches!(command, Command::Rollback) {
                return self.next_item();
            }
            if self.acting.is_some() {
                return self.item_failed(&f.message.clone());
            }
            if let Command::ReadMarker { sink_id } = &command {
                let (tid, epoch, age) = self.marker_rows.remove(0);
                debug_assert_eq!(&tid, sink_id);
                self.kafka_item(
                    &tid,
                    epoch,
                    age,
                    format!("the marker could not be read: {f}"),
                );
                if let Some(item) = self.items.last_mut() {
                    item.outcome = ItemOutcome::Unreadable;
                }
                return;
            }
            self.core.finish(End::Failed(f.clone()));
            return;
        }
        match (command, event) {
            (Command::ReadDecisions { .. }, Event::Decisions { rows }) => self.on_decisions(rows),
            (Command::ReadMarker { .. }, event @ (Event::Marker { .. } | Event::Missing)) => {
                let (tid, epoch, age) = self.marker_rows.remove(0);
                if let Event::Marker { epoch: marker, .. } = event {
                    if !epoch_committed(marker, epoch) {
                        let shown = marker.map_or_else(|| "None".to_owned(), |m| m.to_string());
                        self.kafka_item(
                            &tid,
                            epoch,
                            age,
                            format!("decided epoch {epoch}, Kafka marker {shown}"),
                        );
                    }
                }
            }
            (Command::ListPrepared, Event::PreparedList { gids }) => {
                self.prepared = gids;
                self.core.out.push(Command::ReadParticipantDecisions);
            }
            (Command::ReadParticipantDecisions, Event::ParticipantDecisions { rows }) => {
                self.on_participant_decisions(rows);
            }
            (Command::ReadDtStates { .. }, Event::DtRows { rows }) => {
                for row in rows {
                    if self.config.spared(Some(&row.dtid), Some(row.state)) {
                        continue;
                    }
                    let mut item =
                        Item::new(ItemKind::Distributed, row.dtid, Some(row.epoch), row.age_s);
                    item.decision = Some(row.state);
                    self.items.push(item);
                }
                self.next_item();
            }
            (Command::SetDtState { dtid, .. }, Event::Applied { applied }) => {
                let gid = self.current().map(|i| i.id.clone()).unwrap_or_default();
                if applied {
                    self.core.out.push(Command::RollbackPrepared { gid });
                } else {
                    self.core.out.push(Command::ReadDtState {
                        dtid,
                        for_share: false,
                    });
                }
            }
            (Command::ReadDtState { .. }, Event::DtState { state }) => {
                let gid = self.current().map(|i| i.id.clone()).unwrap_or_default();
                if state == Some(DtState::Commit) {
                    // the coordinator decided to commit first
                    if let Some(item) = self.current() {
                        item.action = WatcherAction::Complete;
                    }
                    self.core.out.push(Command::CommitPrepared { gid });
                } else {
                    self.core.out.push(Command::RollbackPrepared { gid });
                }
            }
            (
                Command::CommitPrepared { .. } | Command::RollbackPrepared { .. },
                Event::Found { found },
            ) => {
                if let Some(item) = self.current() {
                    item.outcome = ItemOutcome::Resolved;
                    let how = if item.action == WatcherAction::Complete {
                        "committed"
                    } else {
                        "rolled back"
                    };
                    item.detail = format!("{how}{}", if found { "" } else { " (already gone)" });
                }
                self.next_item();
            }
            (Command::Rollback, Event::Ack) => self.next_item(),
            (Command::Log { .. }, Event::Ack) => {}
            (command, event) => {
                let message = unexpected(&command, &event).message;
                self.item_failed(&message);
            }
        }
    }
}

impl Steps for WatcherPass {
    core_accessors!(Child);

    fn on_child_end(&mut self, child: Child, end: End) {
        self.child_ended(child, end);
    }

    fn idle(&mut self) -> Idle {
        Idle::End(End::Ok)
    }
}
