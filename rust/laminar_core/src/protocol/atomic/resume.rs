//! A resumed start (docs/protocol.md §4, "A run's start-up, once"): the data source's
//! driver-side `commit` of a query run whose start-up ran already, in an earlier `commit` of the
//! same run, skips it when the group still shows what that start-up left — and runs it as
//! always otherwise.
//!
//! ```text
//! read_sink_epochs, read_decisions (Kafka sinks), read_ownership (the registry row locked),
//! read_generation, read_dt_states of the group
//!   owner guard keeps the run's epoch base, the generation is the run's, no record but this
//!   batch's unconcluded  -> commit, started (no register, no bump, no recovery, no pass)
//!   anything else         -> rollback, the start-up (module docs of [`super`])
//! ```
//!
//! Why skipping is safe, each step of the start-up against what the reads prove:
//!
//! - **register, init**: the run's start-up registered the group and created the schema; rows
//!   of `laminar.sinks` are never deleted while the owner guard reads them (the read shows it).
//! - **owner guard**: read again here; it must *keep* the run's owner and epoch base.
//! - **generation + 1** (fencing older coordinators, §6): the generation is still the one this
//!   run's start-up took, so no coordinator started since; the coordinators before it were
//!   fenced then. Within a run, Spark calls one `commit` at a time and the next batch starts only
//!   after it returned, so no earlier `commit` of the run is still deciding. The decision's
//!   `lock_group` checks the generation again under the row lock, as always.
//! - **Kafka recovery and the watcher pass**: what they resolve is left by a `commit` or an
//!   `abort` that failed or died — which ends the run (Spark fails the query; the next run has
//!   another run id and starts up) — or is an unconcluded record of the group: any record other
//!   than this batch's sends the operation to the start-up, whose pass resolves it.

use crate::protocol::Epoch;
use crate::protocol::atomic::{AtomicGroup, Stage, Then};
use crate::protocol::command::{Command, DtRow, LogLevel};
use crate::protocol::names::dtid;
use crate::protocol::records::OwnerDecision;

/// What a run's start-up left, as the run remembers it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunStart {
    /// The generation the start-up took.
    pub generation: i64,
    /// The epoch base it found.
    pub epoch_base: Epoch,
}

/// A resumed start in progress: what is being checked, and the first thing found stale.
#[derive(Debug, Clone)]
pub(super) struct Resuming {
    start: RunStart,
    stale: Option<String>,
}

impl AtomicGroup {
    /// The reads that prove the run's start still holds (module docs).
    pub(super) fn begin_resume(&mut self, start: RunStart) {
        self.stage = Stage::Resuming;
        self.resuming = Some(Resuming { start, stale: None });
        self.core.out.push(Command::ReadSinkEpochs {
            sink_ids: self.config.postgres.clone(),
        });
        self.read_kafka_progress();
        self.core.out.push(Command::ReadOwnership {
            registry_id: self.config.group_id.clone(),
            members: self.sink_ids(),
        });
        self.core.out.push(Command::ReadGeneration {
            group_id: self.config.group_id.clone(),
        });
        self.core.out.push(Command::ReadDtStates {
            group_id: Some(self.config.group_id.clone()),
        });
        self.then = Some(Then::Resumed);
    }

    fn stale(&mut self, why: String) {
        if let Some(r) = &mut self.resuming {
            r.stale.get_or_insert(why);
        }
    }

    /// `read_ownership` of a resumed start: the guard must keep the run's epoch base.
    pub(super) fn resume_ownership(
        &mut self,
        owner: Option<String>,
        base: Epoch,
        owners: Vec<(String, String)>,
    ) {
        let Some(expected) = self.resuming.as_ref().map(|r| r.start.epoch_base) else {
            return;
        };
        match self.owner_guard(owner.as_deref(), base, &owners) {
            Ok(OwnerDecision::Keep { epoch_base }) if epoch_base == expected => {}
            Ok(OwnerDecision::Keep { epoch_base }) => {
                self.stale(format!(
                    "the epoch base moved from {expected} to {epoch_base}"
                ));
            }
            Ok(OwnerDecision::Claim { .. }) => self.stale("the owner changed".to_owned()),
            Err(r) => self.stale(r.message),
        }
    }

    /// `read_generation` of a resumed start: still the run's generation.
    pub(super) fn resume_generation(&mut self, generation: Option<i64>) {
        let Some(expected) = self.resuming.as_ref().map(|r| r.start.generation) else {
            return;
        };
        if generation != Some(expected) {
            let found = generation.map_or_else(|| "no row".to_owned(), |g| g.to_string());
            self.stale(format!(
                "the generation is {found}, not the run's {expected} (another coordinator started)"
            ));
        }
    }

    /// `read_dt_states` of a resumed start: no unconcluded record but this batch's.
    pub(super) fn resume_records(&mut self, rows: &[DtRow]) {
        let Some(start) = self.resuming.as_ref().map(|r| r.start) else {
            return;
        };
        let mine = self
            .batch
            .map(|b| dtid(&self.config.group_id, start.epoch_base + b));
        let left: Vec<&str> = rows
            .iter()
            .map(|r| r.dtid.as_str())
            .filter(|d| Some(*d) != mine.as_deref())
            .collect();
        if !left.is_empty() {
            self.stale(format!("unconcluded record(s) {left:?} to resolve"));
        }
    }

    /// Every read answered: started as the run left it, or the start-up.
    pub(super) fn after_resume_reads(&mut self) {
        let Some(Resuming { start, stale }) = self.resuming.take() else {
            return;
        };
        let group = self.config.group_id.clone();
        match stale {
            None => {
                self.core.out.push(Command::Commit);
                self.generation = start.generation;
                self.epoch_base = start.epoch_base;
                self.resumed = true;
                self.core.out.push(Command::log(
                    LogLevel::Info,
                    format!(
                        "atomic group {group}: resumed at generation {}, epoch base {} (the \
                         run's start-up holds)",
                        start.generation, start.epoch_base
                    ),
                ));
                self.then = Some(Then::Started);
            }
            Some(why) => {
                self.core.out.push(Command::Rollback);
                self.core.out.push(Command::log(
                    LogLevel::Info,
                    format!("atomic group {group}: starting up again ({why})"),
                ));
                self.last.clear();
                self.begin_attempt();
            }
        }
    }
}
