//! The coordinator's decision (docs/protocol.md §4, step 3): the tasks' results, the group's
//! lock and generation, `prepare -> commit`, the vote, the epoch claims, the participants and the
//! Kafka participants' decision rows, the commit; then the completion.

use std::collections::BTreeSet;

use crate::protocol::distributed::vote::decide;
use crate::protocol::refusal::check_generation;

use crate::protocol::command::{
    Command, ParticipantKind, ParticipantResult, ParticipantRow, ParticipantState, ResultStatus,
};
use crate::protocol::crash::CrashPoint;
use crate::protocol::distributed::coordinator::{Child, ScaleOutEpoch, Stage};
use crate::protocol::distributed::vote::vote;
use crate::protocol::dt_state::{DtEvent, DtState};
use crate::protocol::names::postgres_participant;
use crate::protocol::records::{TxnEvent, TxnRow, illegal};
use crate::protocol::resolution::Resolution;
use crate::protocol::transitions::{dt_next, txn_next};
use crate::protocol::{End, Refusal, RefusalKind};

impl ScaleOutEpoch {
    pub(super) fn on_results(&mut self, results: Vec<ParticipantResult>) {
        self.core.out.push(Command::Reached {
            point: CrashPoint::ScaleoutAfterTasks,
        });
        if results.iter().all(|r| r.status == ResultStatus::Empty) {
            // nothing prepared, nothing to decide (as the single-process path opens nothing)
            if dt_next(Some(DtState::Prepare), DtEvent::ConcludeEmpty).is_ok() {
                self.core.out.push(Command::ConcludeDt {
                    dtid: self.dtid.clone(),
                    from: Some(DtState::Prepare),
                });
            }
            self.ending = Some(End::Ok);
            return;
        }
        self.results = results;
        self.stage = Stage::Deciding;
        self.core.out.push(Command::LockGroup {
            group_id: self.ctx.group_id.clone(),
        });
    }

    pub(super) fn after_lock(&mut self, stored: Option<i64>) {
        if let Err(r) = check_generation(
            &self.ctx.group_id,
            self.ctx.generation,
            stored.unwrap_or(-1),
        ) {
            let why = r.message.clone();
            let end = End::Refused(r.for_epoch(self.ctx.epoch));
            return self.roll_back(end, why, Some(DtState::Prepare), true);
        }
        if let Err(e) = dt_next(Some(DtState::Prepare), DtEvent::StartCommit) {
            let refusal = illegal(e);
            let why = refusal.message.clone();
            return self.roll_back(End::Refused(refusal), why, None, true);
        }
        self.core.out.push(Command::SetDtState {
            dtid: self.dtid.clone(),
            from: DtState::Prepare,
            to: DtState::Commit,
            message: String::new(),
        });
    }

    pub(super) fn after_claims(&mut self, claims: Vec<ParticipantRow>) {
        let (votes, expected) = vote(&self.results, &claims);
        if decide(&votes, expected) != DtEvent::StartCommit {
            let parts: BTreeSet<u32> = self.results.iter().map(|r| r.part).collect();
            let message = format!(
                "scale-out epoch {} of group {:?}: a task attempt other than the collected one \
                 claimed a partition (Spark retry or speculation); the epoch was rolled back and \
                 is written again",
                self.ctx.epoch, self.ctx.group_id
            );
            let refusal =
                Refusal::new(RefusalKind::NotDecided, message.clone()).for_epoch(self.ctx.epoch);
            self.roll_back(End::Refused(refusal), message, Some(DtState::Prepare), true);
            self.core.out.push(Command::warn(format!(
                "{}: votes of partitions {parts:?} do not match the claims: rolling back",
                self.dtid
            )));
            return;
        }
        let epoch = self.ctx.epoch;
        for (sink_id, _) in &self.ctx.postgres {
            let rows = self
                .results
                .iter()
                .filter(|r| r.kind == ParticipantKind::Postgres)
                .filter(|r| r.participant == postgres_participant(sink_id, r.part))
                .map(|r| r.records)
                .sum();
            self.core.out.push(Command::ClaimEpoch {
                sink_id: sink_id.clone(),
                epoch,
                rows,
            });
        }
        let prepared: Vec<&ParticipantResult> = self
            .results
            .iter()
            .filter(|r| r.status == ResultStatus::Prepared)
            .collect();
        self.core.out.push(Command::MarkParticipants {
            dtid: self.dtid.clone(),
            participants: prepared.iter().map(|r| r.participant.clone()).collect(),
            state: ParticipantState::Prepared,
        });
        for r in prepared.iter().filter(|r| r.kind == ParticipantKind::Kafka) {
            // the participant's last decision is its marker (pending ones were completed before
            // this epoch), so the row goes from there; a participant ahead is refused
            let row = r.marker.map_or(TxnRow::None, TxnRow::Decided);
            if let Err(e) = txn_next(row, TxnEvent::Decide(epoch)) {
                let refusal = illegal(e).for_sink(r.resource.clone()).for_epoch(epoch);
                let why = refusal.message.clone();
                return self.roll_back(End::Refused(refusal), why, Some(DtState::Prepare), true);
            }
            self.core.out.push(Command::RecordDecision {
                transactional_id: r.resource.clone(),
                epoch,
                previous_epoch: r.marker,
                prepared_state: r.prepared_state.clone(),
                group_id: self.ctx.group_id.clone(),
            });
        }
        self.core.out.push(Command::CommitDecision);
    }

    pub(super) fn after_decision(&mut self) {
        self.core.out.push(Command::Reached {
            point: CrashPoint::ScaleoutAfterDecision,
        });
        for (_, last) in &mut self.ctx.postgres {
            *last = Some(self.ctx.epoch);
        }
        self.ctx.pending.insert(self.dtid.clone());
        self.stage = Stage::Completing;
        self.core
            .run(Child::Resolution(Box::new(Resolution::complete(
                self.dtid.clone(),
                self.ctx.epoch,
                Some(self.results.clone()),
            ))));
    }
}
