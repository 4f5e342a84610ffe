//! The scale-out coordinator's epoch (docs/protocol.md §4, "Coordinator").
//!
//! ```text
//! (decided transactions pending: a WatcherPass of the group, read_dt_states, read_sink_epochs;
//!  refuse `incomplete` while one remains)
//! plan_epoch over the PostgreSQL sinks: skip / refuse
//! 1 create_dt (a row left by an earlier run: roll it back first, or complete it)
//!                                                         scaleout.after_create
//! 2 run_tasks                                             scaleout.after_tasks
//!   every partition empty: conclude_dt (conclude_empty), nothing written
//! 3 lock_group (check_generation), set_dt_state prepare -> commit, read_participants,
//!   the vote, claim_epoch per PostgreSQL sink, mark_participants, record_decision per
//!   prepared Kafka participant, commit_decision           scaleout.after_decision
//! 4-5 Resolution::complete with the collected results (commit_prepared …, end_txn …,
//!     conclude_dt)
//! ```
//!
//! With `collected` (the data source's driver-side `commit`, docs/spark.md) the tasks ran first
//! and created the record themselves: step 1 reads it instead of creating it, and step 2's
//! `run_tasks` hands over the results the tasks sent.
//!
//! ```text
//! 1 read_dt_state: prepare -> 2 run_tasks, 3 ...
//!                  commit  -> complete it (a commit that died after its decision), skipped
//!                  rollback-> Resolution::roll_back, refusal not_decided
//!                  gone    -> run_tasks: every partition empty, or read_decisions finds the
//!                             epoch decided (a repeated commit): skipped; else not_decided
//! ```
//!
//! Anything that fails before the decision rolls the epoch back with [`Resolution::roll_back`]
//! (the one definition) and ends; the epoch is written again.

mod collected;
mod decision;

use crate::protocol::stalled;
use std::collections::BTreeSet;

use crate::protocol::plan::{EpochPlan, SinkProgress, plan_epoch};

use crate::protocol::command::{Command, Event, LogLevel, ParticipantResult, unexpected};
use crate::protocol::crash::CrashPoint;
use crate::protocol::dt_state::{DtEvent, DtState};
use crate::protocol::names::dtid;
use crate::protocol::records::{epoch_committed, illegal};
use crate::protocol::resolution::{Resolution, ResolutionOutcome};
use crate::protocol::transitions::dt_next;
use crate::protocol::watcher::{PassConfig, WatcherPass};
use crate::protocol::{
    Core, End, Epoch, Idle, Refusal, RefusalKind, Steps, children, core_accessors,
};

/// What the coordinator's epoch starts from.
#[derive(Debug, Clone)]
pub struct ScaleContext {
    pub group_id: String,
    pub generation: i64,
    pub epoch: Epoch,
    /// The PostgreSQL sinks with their last committed epochs.
    pub postgres: Vec<(String, Option<Epoch>)>,
    /// The writer knows its query (refuse epochs going backwards).
    pub refuse_backwards: bool,
    /// Decided transactions of the group not concluded yet.
    pub pending: BTreeSet<String>,
    /// The tasks ran before and created the record (module docs).
    pub collected: bool,
}

children!(
    /// What the coordinator runs inside itself.
    Child {
        Pass(WatcherPass),
        Resolution(Resolution),
    }
);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    Resolving,
    Creating,
    /// Rolling back a row an earlier run left.
    Clearing,
    Deciding,
    /// Rolling back before the decision; end with the failure kept.
    RollingBack,
    Completing,
}

/// The coordinator's side of one scale-out epoch (module docs).
#[derive(Debug)]
pub struct ScaleOutEpoch {
    ctx: ScaleContext,
    dtid: String,
    core: Core<Child>,
    stage: Stage,
    results: Vec<ParticipantResult>,
    committed: bool,
    /// After resolving the pending transactions: skip the epoch (an earlier call decided it).
    skip_after_resolving: bool,
    /// A row left by an earlier run was rolled back once already.
    cleared: bool,
    after_rollback: Option<End>,
    ending: Option<End>,
    /// `collected`: the record was gone when read.
    gone: bool,
}

impl ScaleOutEpoch {
    /// The epoch, starting with the pending transactions (if any) or the plan.
    pub fn new(ctx: ScaleContext) -> Self {
        let dtid = dtid(&ctx.group_id, ctx.epoch);
        let mut me = Self {
            dtid,
            ctx,
            core: Core::default(),
            stage: Stage::Resolving,
            results: Vec::new(),
            committed: false,
            skip_after_resolving: false,
            cleared: false,
            after_rollback: None,
            ending: None,
            gone: false,
        };
        if me.ctx.pending.is_empty() {
            me.plan();
        } else {
            me.resolve_pending();
        }
        me
    }

    /// Whether the epoch was committed (false: skipped, or every partition was empty).
    pub fn committed(&self) -> bool {
        self.committed
    }

    /// The decided transactions still not concluded.
    pub fn pending(&self) -> &BTreeSet<String> {
        &self.ctx.pending
    }

    /// The PostgreSQL sinks' last committed epochs as this epoch leaves them.
    pub fn postgres_last(&self) -> &[(String, Option<Epoch>)] {
        &self.ctx.postgres
    }

    pub(super) fn resolve_pending(&mut self) {
        self.stage = Stage::Resolving;
        let sinks = self
            .ctx
            .postgres
            .iter()
            .map(|(s, _)| s.clone())
            .collect::<Vec<_>>();
        let mut config = PassConfig::owned_group(&self.ctx.group_id, &sinks);
        if self.ctx.collected && !self.skip_after_resolving {
            // the tasks' record of this epoch is in flight: it is decided here, not rolled back
            config.spare = Some(self.dtid.clone());
        }
        self.core
            .run(Child::Pass(Box::new(WatcherPass::new(config))));
    }

    fn plan(&mut self) {
        let epoch = self.ctx.epoch;
        if self.ctx.collected && self.ctx.postgres.is_empty() {
            // Kafka only: no sink progress to plan from (the record and the decision rows say)
            return self.read_record();
        }
        let progress: Vec<SinkProgress> = self
            .ctx
            .postgres
            .iter()
            .map(|(sink_id, last)| SinkProgress {
                sink_id: sink_id.clone(),
                last: *last,
            })
            .collect();
        match plan_epoch(epoch, &progress, &[], self.ctx.refuse_backwards) {
            EpochPlan::Refuse(r) => self.ending = Some(End::Refused(r.for_epoch(epoch))),
            EpochPlan::Skip => {
                self.core.out.push(Command::log(
                    LogLevel::Info,
                    format!(
                        "scale-out {}: epoch {epoch} already committed, skipped",
                        self.ctx.group_id
                    ),
                ));
                self.ending = Some(End::Ok);
            }
            EpochPlan::Write { .. } if self.ctx.collected => self.read_record(),
            EpochPlan::Write { .. } => self.create(),
        }
    }

    pub(super) fn run_tasks(&mut self) {
        self.core.out.push(Command::RunTasks {
            dtid: self.dtid.clone(),
            epoch: self.ctx.epoch,
        });
    }

    fn create(&mut self) {
        self.stage = Stage::Creating;
        if let Err(e) = dt_next(None, DtEvent::Create) {
            self.ending = Some(End::Refused(illegal(e)));
            return;
        }
        self.core.out.push(Command::CreateDt {
            dtid: self.dtid.clone(),
            group_id: self.ctx.group_id.clone(),
            epoch: self.ctx.epoch,
        });
    }

    /// Before the decision: roll back, then end with `end`.
    /// `rollback_txn`: the decision transaction is open and is rolled back first (its
    /// `prepare -> commit` with it).
    pub(super) fn roll_back(
        &mut self,
        end: End,
        why: String,
        state: Option<DtState>,
        rollback_txn: bool,
    ) {
        self.core.out.clear();
        if rollback_txn {
            self.core.out.push(Command::Rollback);
        }
        self.stage = Stage::RollingBack;
        self.after_rollback = Some(end);
        self.core
            .run(Child::Resolution(Box::new(Resolution::roll_back(
                self.dtid.clone(),
                state,
                why,
            ))));
    }

    fn refuse(&mut self, kind: RefusalKind, message: String) {
        let why = message.clone();
        let refusal = Refusal::new(kind, message).for_epoch(self.ctx.epoch);
        self.roll_back(End::Refused(refusal), why, Some(DtState::Prepare), true);
    }

    fn child_ended(&mut self, child: Child, end: End) {
        match (self.stage, child) {
            (Stage::Resolving, Child::Pass(pass)) => {
                if let Some(line) = pass.startup_summary(&self.ctx.group_id) {
                    self.core.out.push(Command::warn(line));
                }
                if let End::Failed(f) = end {
                    self.ending = Some(End::Failed(f));
                    return;
                }
                self.core.out.push(Command::ReadDtStates {
                    group_id: Some(self.ctx.group_id.clone()),
                });
                let sinks = self.ctx.postgres.iter().map(|(s, _)| s.clone()).collect();
                self.core
                    .out
                    .push(Command::ReadSinkEpochs { sink_ids: sinks });
            }
            (Stage::Clearing, Child::Resolution(r)) => match (end, r.outcome()) {
                (End::Ok, Some(ResolutionOutcome::DecidedCommit)) => {
                    // decided by an earlier call whose answer was lost: complete it instead
                    self.ctx.pending.insert(self.dtid.clone());
                    self.skip_after_resolving = true;
                    self.resolve_pending();
                }
                (End::Ok, Some(ResolutionOutcome::Unresolved(why))) => {
                    let refusal = Refusal::new(
                        RefusalKind::Incomplete,
                        format!(
                            "{} left by an earlier run cannot be rolled back: {why}",
                            self.dtid
                        ),
                    );
                    self.ending = Some(End::Refused(refusal.for_epoch(self.ctx.epoch)));
                }
                (End::Ok, _) => self.create(),
                (other, _) => self.ending = Some(other),
            },
            (Stage::RollingBack, Child::Resolution(r)) => {
                if let (End::Ok, Some(ResolutionOutcome::DecidedCommit)) = (&end, r.outcome()) {
                    // the decision committed although its answer was lost
                    self.ctx.pending.insert(self.dtid.clone());
                }
                if !end.is_ok() {
                    self.core.out.push(Command::warn(format!(
                        "{}: rollback failed ({end:?}); the watcher or the next start resolves it",
                        self.dtid
                    )));
                }
                self.ending = self.after_rollback.take();
            }
            (Stage::Completing, Child::Resolution(r)) => {
                let problem = match (end, r.outcome()) {
                    (
                        End::Ok,
                        Some(ResolutionOutcome::Concluded { .. } | ResolutionOutcome::Gone),
                    ) => {
                        self.ctx.pending.remove(&self.dtid);
                        self.committed = true;
                        self.ending = Some(End::Ok);
                        return;
                    }
                    (End::Ok, Some(ResolutionOutcome::Unresolved(why))) => why.clone(),
                    (End::Failed(f), _) => format!("its completion failed ({f})"),
                    (End::Refused(r), _) => format!("its completion failed ({})", r.message),
                    (End::Ok, _) => "its completion did not conclude".to_owned(),
                };
                self.ending = Some(End::Refused(
                    Refusal::new(
                        RefusalKind::Incomplete,
                        format!(
                            "{} is decided (committed in PostgreSQL) but {problem}; it is \
                             completed before the next epoch is written (or by the watcher, \
                             `laminar recover`), and stays in laminar.dt_state for `laminar \
                             status` until then",
                            self.dtid
                        ),
                    )
                    .for_epoch(self.ctx.epoch),
                ));
            }
            (_, _) => self.ending = Some(end),
        }
    }

    fn step(&mut self, command: Command, event: Event) {
        match (command, event) {
            (Command::ReadDtStates { .. }, Event::DtRows { rows }) => {
                let left: BTreeSet<String> = rows.into_iter().map(|r| r.dtid).collect();
                self.ctx.pending.retain(|d| left.contains(d));
            }
            (Command::ReadSinkEpochs { .. }, Event::Progress { epochs }) => {
                for (sink_id, last) in &mut self.ctx.postgres {
                    *last = epochs
                        .iter()
                        .find(|(s, _)| s == sink_id)
                        .and_then(|(_, e)| *e);
                }
                if !self.ctx.pending.is_empty() {
                    let refusal = Refusal::new(
                        RefusalKind::Incomplete,
                        format!(
                            "decided distributed transaction(s) {:?} of group {:?} could not be \
                             completed yet; see `laminar status`",
                            self.ctx.pending, self.ctx.group_id
                        ),
                    );
                    self.ending = Some(End::Refused(refusal.for_epoch(self.ctx.epoch)));
                } else if self.skip_after_resolving {
                    self.ending = Some(End::Ok);
                } else {
                    self.plan();
                }
            }
            (Command::CreateDt { .. }, Event::Applied { applied: true }) => {
                self.core.out.push(Command::Reached {
                    point: CrashPoint::ScaleoutAfterCreate,
                });
                self.core.out.push(Command::RunTasks {
                    dtid: self.dtid.clone(),
                    epoch: self.ctx.epoch,
                });
            }
            (Command::CreateDt { .. }, Event::Applied { applied: false })
                if self.stage == Stage::Creating && !self.cleared =>
            {
                self.stage = Stage::Clearing;
                self.cleared = true;
                self.core
                    .run(Child::Resolution(Box::new(Resolution::roll_back(
                        self.dtid.clone(),
                        None,
                        "left by an earlier run",
                    ))));
            }
            (Command::ReadDtState { .. }, Event::DtState { state }) => self.on_record(state),
            (Command::RunTasks { .. }, Event::TaskResults { results }) if self.gone => {
                self.on_gone(&results, None);
                self.results = results;
            }
            (Command::ReadDecisions { .. }, Event::Decisions { rows }) if self.gone => {
                let epoch = self.ctx.epoch;
                // a decision of this epoch or a later one: the replay rule
                let decided = rows.iter().any(|r| epoch_committed(Some(r.epoch), epoch));
                let results = std::mem::take(&mut self.results);
                self.on_gone(&results, Some(decided));
            }
            (Command::RunTasks { .. }, Event::TaskResults { results }) => self.on_results(results),
            (Command::RunTasks { .. }, Event::Failed(f)) => {
                let why = f.message.clone();
                self.roll_back(End::Failed(f), why, Some(DtState::Prepare), false);
            }
            (Command::LockGroup { .. }, Event::Generation { generation }) => {
                self.after_lock(generation)
            }
            (Command::SetDtState { .. }, Event::Applied { applied: true }) => {
                self.core.out.push(Command::ReadParticipants {
                    dtid: self.dtid.clone(),
                });
            }
            (Command::SetDtState { .. }, Event::Applied { applied: false }) => {
                let message = format!(
                    "scale-out epoch {} of group {:?}: the resolution watcher rolled it back \
                     before its decision; it is written again",
                    self.ctx.epoch, self.ctx.group_id
                );
                let refusal = Refusal::new(RefusalKind::NotDecided, message.clone())
                    .for_epoch(self.ctx.epoch);
                self.roll_back(End::Refused(refusal), message, None, true);
            }
            (Command::ReadParticipants { .. }, Event::Participants { rows }) => {
                self.after_claims(rows)
            }
            (Command::ClaimEpoch { sink_id, epoch, .. }, Event::Claimed { claimed: false }) => self
                .refuse(
                    RefusalKind::Fenced,
                    format!(
                        "PostgreSQL sink {sink_id:?} already holds epoch {epoch}: another writer \
                         uses its sink id outside this group"
                    ),
                ),
            (Command::CommitDecision, Event::Ack) => self.after_decision(),
            (Command::CommitDecision, Event::Failed(f)) => {
                let why = f.message.clone();
                self.roll_back(End::Failed(f), why, None, true);
            }
            (_, Event::Failed(f)) if self.stage == Stage::Deciding => {
                let why = f.message.clone();
                self.roll_back(End::Failed(f), why, Some(DtState::Prepare), true);
            }
            (_, Event::Failed(f)) => {
                self.core.out.clear();
                self.ending = Some(End::Failed(f));
            }
            (
                Command::Reached { .. }
                | Command::Log { .. }
                | Command::Rollback
                | Command::ConcludeDt { .. }
                | Command::ClaimEpoch { .. }
                | Command::MarkParticipants { .. }
                | Command::RecordDecision { .. },
                Event::Ack | Event::Claimed { .. } | Event::Applied { .. },
            ) => {}
            (command, event) => {
                self.core.out.clear();
                self.ending = Some(End::Failed(unexpected(&command, &event)));
            }
        }
    }
}

impl Steps for ScaleOutEpoch {
    core_accessors!(Child);

    fn on_child_end(&mut self, child: Child, end: End) {
        self.child_ended(child, end);
    }

    fn idle(&mut self) -> Idle {
        Idle::End(
            self.ending
                .take()
                .unwrap_or_else(|| stalled("scale-out epoch")),
        )
    }
}
