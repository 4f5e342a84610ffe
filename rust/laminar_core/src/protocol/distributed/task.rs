//! One attempt of one partition of a scale-out epoch (docs/protocol.md §4, "Task").
//!
//! ```text
//! a lock_partition
//!   [create_record (the data source's tasks run before any coordinator step, docs/spark.md):
//!    read_sink_epochs of the PostgreSQL sinks (Kafka only: read_decisions of the group) ->
//!    committed: nothing written (skipped, a replayed batch); else read_stop_fence (the
//!    group's fence lock, shared, held to the end of the transaction) -> a fence at or past
//!    the epoch (set by `resolve_stopped`; the next run's writer reserves it for its tasks):
//!    reserved for another writer -> commit, nothing written (skipped: a worker of the
//!    stopped run after the restart's writer); not reserved -> the record is not created,
//!    only read; else (no fence, or reserved for this task's writer) create_dt, the epoch's
//!    record if it is missing, commit (`stop_fence_rule`)]
//! b read_dt_state (for share): not `prepare` -> commit, nothing written (skipped; a missing
//!   record under a fence: the abandoned worker of a stopped batch)
//!   claim_participants                                  scaleout.task_after_claim
//! c list_prepared -> rollback_prepared of this partition's gids an earlier attempt left
//!   peek_partition: no row -> empty
//!   init_sink + known_epoch per Kafka participant (fences earlier attempts), init_sink per
//!   PostgreSQL participant
//! d read_dt_state (for share, held to the end of e): not `prepare` -> the epoch was rolled
//!   back (or concluded) since the claim: undo, nothing written (skipped); the Kafka inits
//!   came first, so a rollback after this read fences them
//!   sink_begin per participant (one that holds the epoch: abort the others, skipped)
//!   write_partition                                     scaleout.task_before_prepare
//! e sink_prepare per Kafka, then per PostgreSQL participant
//!                                                       scaleout.task_after_prepare
//!   commit (releases the record's share lock)
//! f release_participants (prepared transactions stay open); one result per participant
//! ```
//!
//! Commands name a participant by its participant name (`pg:<sink>:p<part>`,
//! `kafka:<tid>.p<part>`) in `sink_id`.

use crate::protocol::stalled;
use std::collections::BTreeMap;

use crate::protocol::command::{
    Command, DecisionSelection, Event, LogLevel, ParticipantKind, ParticipantResult,
    ParticipantRow, ResultStatus, unexpected,
};

use crate::protocol::crash::CrashPoint;
use crate::protocol::dt_state::{DtEvent, DtState};
use crate::protocol::failure::Failure;
use crate::protocol::names::{
    attempt_participant, kafka_participant, kafka_participant_id, participant_matches,
    partition_lock_key, postgres_participant,
};
use crate::protocol::records::{FenceRule, epoch_committed, stop_fence_rule};
use crate::protocol::transitions::dt_next;
use crate::protocol::{Core, End, Epoch, Idle, NoChild, Steps, core_accessors};

/// What one task attempt writes.
#[derive(Debug, Clone)]
pub struct TaskContext {
    pub dtid: String,
    pub epoch: Epoch,
    pub part: u32,
    /// The attempt's token (unique per attempt).
    pub attempt: String,
    /// The PostgreSQL sinks with this partition's gid.
    pub postgres: Vec<(String, String)>,
    /// The Kafka sinks (base transactional ids).
    pub kafka: Vec<String>,
    /// The group whose epoch record the attempt creates if it is missing (the data source's
    /// tasks, docs/spark.md); None: the coordinator created it.
    pub create_record: Option<String>,
    /// `create_record`: the token of the Spark writer (one per writer's creation on the driver)
    /// whose task this is; a stop fence the next run's writer reserved covers the tasks of
    /// every other writer (`stop_fence_rule`). None: not told apart from the reserving one.
    pub writer: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Participant {
    name: String,
    kind: ParticipantKind,
    resource: String,
}

/// A task attempt (module docs).
#[derive(Debug)]
pub struct ScaleOutTask {
    ctx: TaskContext,
    participants: Vec<Participant>,
    core: Core<NoChild>,
    opened: Vec<String>,
    markers: BTreeMap<String, Option<Epoch>>,
    prepared: BTreeMap<String, String>,
    rows: u64,
    status: Option<ResultStatus>,
    failure: Option<Failure>,
    /// The participants are initialised (a failure from here undoes them).
    writing: bool,
    undoing: bool,
    /// `create_record`: the group's stop fence covers the epoch (the record is not created).
    fenced_at: Option<Epoch>,
}

impl ScaleOutTask {
    /// The attempt, starting with the partition's lock.
    pub fn new(ctx: TaskContext) -> Self {
        let postgres = ctx.postgres.iter().map(|(sink, gid)| Participant {
            name: postgres_participant(sink, ctx.part),
            kind: ParticipantKind::Postgres,
            resource: gid.clone(),
        });
        let kafka = ctx.kafka.iter().map(|tid| {
            let id = kafka_participant_id(tid, ctx.part);
            Participant {
                name: kafka_participant(&id),
                kind: ParticipantKind::Kafka,
                resource: id,
            }
        });
        let participants = postgres.chain(kafka).collect();
        let mut core = Core::default();
        core.out.push(Command::LockPartition {
            key: partition_lock_key(&ctx.dtid, ctx.part),
        });
        match &ctx.create_record {
            Some(group_id) if ctx.postgres.is_empty() => core.out.push(Command::ReadDecisions {
                of: DecisionSelection::Group(group_id.clone()),
            }),
            Some(_) => core.out.push(Command::ReadSinkEpochs {
                sink_ids: ctx.postgres.iter().map(|(s, _)| s.clone()).collect(),
            }),
            None => core.out.push(Command::ReadDtState {
                dtid: ctx.dtid.clone(),
                for_share: true,
            }),
        }
        Self {
            ctx,
            participants,
            core,
            opened: Vec::new(),
            markers: BTreeMap::new(),
            prepared: BTreeMap::new(),
            rows: 0,
            status: None,
            failure: None,
            writing: false,
            undoing: false,
            fenced_at: None,
        }
    }

    /// The participant rows the claim upserts (the attempt row first).
    pub fn claim_rows(&self) -> Vec<ParticipantRow> {
        let mut rows = vec![ParticipantRow {
            participant: attempt_participant(self.ctx.part),
            kind: ParticipantKind::Attempt,
            resource: self.ctx.attempt.clone(),
        }];
        rows.extend(self.participants.iter().map(|p| ParticipantRow {
            participant: p.name.clone(),
            kind: p.kind,
            resource: p.resource.clone(),
        }));
        rows
    }

    /// One result per participant (after the machine ended `Ok`).
    pub fn results(&self) -> Vec<ParticipantResult> {
        let status = self.status.unwrap_or(ResultStatus::Skipped);
        self.participants
            .iter()
            .map(|p| {
                let prepared = status == ResultStatus::Prepared;
                ParticipantResult {
                    part: self.ctx.part,
                    attempt: self.ctx.attempt.clone(),
                    participant: p.name.clone(),
                    kind: p.kind,
                    resource: p.resource.clone(),
                    records: if prepared { self.rows } else { 0 },
                    prepared_state: if prepared {
                        self.prepared.get(&p.name).cloned().unwrap_or_default()
                    } else {
                        String::new()
                    },
                    marker: if prepared {
                        self.markers.get(&p.name).copied().flatten()
                    } else {
                        None
                    },
                    status,
                }
            })
            .collect()
    }

    fn names(&self, kind: ParticipantKind) -> Vec<String> {
        self.participants
            .iter()
            .filter(|p| p.kind == kind)
            .map(|p| p.name.clone())
            .collect()
    }

    fn finish(&mut self, status: ResultStatus) {
        self.status = Some(status);
    }

    /// `create_record`: a committed epoch (a replayed batch) is skipped; else the group's stop
    /// fence is read.
    fn on_progress(&mut self, committed: bool) {
        if committed {
            self.core.out.push(Command::log(
                LogLevel::Info,
                format!(
                    "{} partition {}: the epoch is committed already (a replay): nothing written",
                    self.ctx.dtid, self.ctx.part
                ),
            ));
            return self.finish(ResultStatus::Skipped);
        }
        match &self.ctx.create_record {
            Some(group_id) => self.core.out.push(Command::ReadStopFence {
                group_id: group_id.clone(),
            }),
            None => self.on_fence(None, None),
        }
    }

    /// `create_record`, under the group's fence lock: a fence at or past the epoch (its query
    /// was stopped mid-batch and resolved) leaves a missing record missing — the task is an
    /// abandoned worker of the stopped batch, and creating the record would prepare
    /// participants nobody decides; else the record is created if missing. Either way it is
    /// read next (a record that exists is claimed as always). A fence the next run's writer
    /// reserved for its own tasks ends a task of another writer here, before its claim: a
    /// worker of the stopped run arriving after the restart's tasks must not claim their
    /// partition last (the restart's vote would refuse the epoch: docs/protocol.md §4).
    fn on_fence(&mut self, fence: Option<Epoch>, reserved: Option<&str>) {
        let rule = stop_fence_rule(fence, reserved, self.ctx.epoch, self.ctx.writer.as_deref());
        match rule {
            FenceRule::Superseded => {
                self.core.out.push(Command::Commit); // ends the fence read's transaction
                self.core.out.push(Command::warn(format!(
                    "{} partition {}: the group is fenced up to epoch {} and reserved for the \
                     tasks of the next run's writer (its query was stopped mid-batch and \
                     resolved: resolve_stopped); a worker of an earlier writer: nothing written",
                    self.ctx.dtid,
                    self.ctx.part,
                    fence.unwrap_or(self.ctx.epoch)
                )));
                return self.finish(ResultStatus::Skipped);
            }
            FenceRule::Fenced => self.fenced_at = fence,
            FenceRule::Open => {
                if let (Some(group_id), Ok(_)) =
                    (&self.ctx.create_record, dt_next(None, DtEvent::Create))
                {
                    self.core.out.push(Command::CreateDt {
                        dtid: self.ctx.dtid.clone(),
                        group_id: group_id.clone(),
                        epoch: self.ctx.epoch,
                    });
                    self.core.out.push(Command::Commit); // ends the fence read's transaction
                }
            }
        }
        self.core.out.push(Command::ReadDtState {
            dtid: self.ctx.dtid.clone(),
            for_share: true,
        });
    }

    fn on_state(&mut self, state: Option<DtState>) {
        if state == Some(DtState::Prepare) {
            self.core.out.push(Command::ClaimParticipants {
                dtid: self.ctx.dtid.clone(),
                rows: self.claim_rows(),
            });
            self.core.out.push(Command::Reached {
                point: CrashPoint::ScaleoutTaskAfterClaim,
            });
            self.core.out.push(Command::ListPrepared);
            return;
        }
        self.core.out.push(Command::Commit);
        let line = match (state, self.fenced_at) {
            (None, Some(fence)) => format!(
                "{} partition {}: the epoch's record is missing and the group is fenced up to \
                 epoch {fence} (its query was stopped mid-batch and resolved: resolve_stopped); \
                 an abandoned worker of the stopped batch: nothing written",
                self.ctx.dtid, self.ctx.part
            ),
            _ => format!(
                "{} partition {}: the distributed transaction is {}: nothing written",
                self.ctx.dtid,
                self.ctx.part,
                state.map_or("gone", DtState::name)
            ),
        };
        self.core.out.push(Command::warn(line));
        self.finish(ResultStatus::Skipped);
    }

    fn on_prepared_list(&mut self, gids: Vec<String>) {
        for p in self
            .participants
            .iter()
            .filter(|p| p.kind == ParticipantKind::Postgres)
        {
            if gids.iter().any(|gid| participant_matches(&p.resource, gid)) {
                self.core.out.push(Command::warn(format!(
                    "{} partition {}: rolling back {} left by an earlier attempt",
                    self.ctx.dtid, self.ctx.part, p.resource
                )));
                self.core.out.push(Command::RollbackPrepared {
                    gid: p.resource.clone(),
                });
            }
        }
        self.core.out.push(Command::PeekPartition);
    }

    fn write(&mut self) {
        self.writing = true;
        for name in self.names(ParticipantKind::Kafka) {
            self.core.out.push(Command::InitSink {
                sink_id: name.clone(),
            });
            self.core.out.push(Command::KnownEpoch { sink_id: name });
        }
        for name in self.names(ParticipantKind::Postgres) {
            self.core.out.push(Command::InitSink { sink_id: name });
        }
        self.core.out.push(Command::ReadDtState {
            dtid: self.ctx.dtid.clone(),
            for_share: true,
        });
    }

    /// The record read again after the participants' inits (d): a rollback since the claim
    /// (the watcher, `resolve_stopped`, an abort) ends the attempt before it begins; else the
    /// share lock is held through the prepares, so a rollback waits for them and then finds
    /// every participant to undo.
    fn on_recheck(&mut self, state: Option<DtState>) {
        if state != Some(DtState::Prepare) {
            let line = format!(
                "{} partition {}: the distributed transaction is {} since the claim: nothing written",
                self.ctx.dtid,
                self.ctx.part,
                state.map_or("gone", DtState::name)
            );
            self.undo(Some(ResultStatus::Skipped), None);
            self.core.out.push_front(Command::warn(line));
            self.core.out.push_front(Command::Commit);
            return;
        }
        self.begin();
    }

    fn begin(&mut self) {
        let epoch = self.ctx.epoch;
        for p in &self.participants {
            self.core.out.push(Command::SinkBegin {
                sink_id: p.name.clone(),
                epoch,
            });
        }
        self.core.out.push(Command::WritePartition);
        self.core.out.push(Command::Reached {
            point: CrashPoint::ScaleoutTaskBeforePrepare,
        });
        let order = self
            .names(ParticipantKind::Kafka)
            .into_iter()
            .chain(self.names(ParticipantKind::Postgres));
        for sink_id in order {
            self.core.out.push(Command::SinkPrepare { sink_id, epoch });
        }
        self.core.out.push(Command::Reached {
            point: CrashPoint::ScaleoutTaskAfterPrepare,
        });
        self.core.out.push(Command::Commit);
        self.core
            .out
            .push(Command::ReleaseParticipants { prepared: true });
    }

    /// Undo the participants opened, then end (skipped, or failed).
    fn undo(&mut self, status: Option<ResultStatus>, failure: Option<Failure>) {
        self.core.out.clear();
        for sink_id in self.opened.drain(..) {
            self.core.out.push(Command::SinkAbort {
                sink_id,
                epoch: self.ctx.epoch,
            });
        }
        self.core
            .out
            .push(Command::ReleaseParticipants { prepared: false });
        self.status = status;
        self.failure = failure;
        self.undoing = true;
    }

    fn step(&mut self, command: Command, event: Event) {
        if self.undoing {
            return; // failing aborts change nothing: the next attempt's init fences them
        }
        match (command, event) {
            (Command::ReadSinkEpochs { sink_ids }, Event::Progress { epochs }) => {
                let epoch = self.ctx.epoch;
                let committed = sink_ids.iter().all(|s| {
                    let last = epochs.iter().find(|(id, _)| id == s).and_then(|(_, e)| *e);
                    epoch_committed(last, epoch)
                });
                self.on_progress(committed);
            }
            (Command::ReadDecisions { .. }, Event::Decisions { rows }) => {
                let last = rows.iter().map(|r| r.epoch).max();
                self.on_progress(epoch_committed(last, self.ctx.epoch));
            }
            (Command::ReadStopFence { .. }, Event::StopFence { epoch, writer }) => {
                self.on_fence(epoch, writer.as_deref());
            }
            (Command::ReadDtState { .. }, Event::DtState { state }) if self.writing => {
                self.on_recheck(state);
            }
            (Command::ReadDtState { .. }, Event::DtState { state }) => self.on_state(state),
            (Command::ListPrepared, Event::PreparedList { gids }) => {
                self.on_prepared_list(gids.into_iter().map(|g| g.gid).collect());
            }
            (Command::PeekPartition, Event::Found { found }) => {
                if found {
                    self.write();
                } else {
                    self.finish(ResultStatus::Empty);
                }
            }
            (Command::KnownEpoch { sink_id }, Event::Marker { epoch, .. }) => {
                self.markers.insert(sink_id, epoch);
            }
            (Command::SinkBegin { sink_id, .. }, Event::Began { opened }) => {
                if opened {
                    self.opened.push(sink_id);
                } else {
                    let line = format!(
                        "{}: participant {sink_id} already holds the epoch",
                        self.ctx.dtid
                    );
                    self.undo(Some(ResultStatus::Skipped), None);
                    self.core.out.push_front(Command::warn(line));
                }
            }
            (Command::WritePartition, Event::Rows { count }) => self.rows = count,
            (Command::SinkPrepare { sink_id, .. }, Event::Prepared { prepared_state }) => {
                self.prepared.insert(sink_id, prepared_state);
            }
            (Command::ReleaseParticipants { prepared: true }, Event::Ack) => {
                self.finish(ResultStatus::Prepared);
            }
            (_, Event::Failed(f)) if self.writing => self.undo(None, Some(f)),
            (_, Event::Failed(f)) => {
                self.core.out.clear();
                self.failure = Some(f);
            }
            (
                Command::LockPartition { .. }
                | Command::ClaimParticipants { .. }
                | Command::Commit
                | Command::Reached { .. }
                | Command::Log { .. }
                | Command::InitSink { .. }
                | Command::SinkAbort { .. }
                | Command::ReleaseParticipants { .. },
                Event::Ack,
            )
            | (Command::RollbackPrepared { .. }, Event::Found { .. })
            // created here, or by another task of the epoch first: either way it is read next
            | (Command::CreateDt { .. }, Event::Applied { .. }) => {}
            (command, event) => {
                let f = unexpected(&command, &event);
                self.undo(None, Some(f));
            }
        }
    }
}

impl Steps for ScaleOutTask {
    core_accessors!(NoChild);

    fn idle(&mut self) -> Idle {
        Idle::End(match (self.failure.take(), self.status) {
            (Some(f), _) => End::Failed(f),
            (None, Some(_)) => End::Ok,
            (None, None) => stalled("scale-out task"),
        })
    }
}

#[cfg(test)]
#[path = "task_tests.rs"]
mod tests;
