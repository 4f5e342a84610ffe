//! The data source's coordinator (`collected`, docs/spark.md): the tasks ran first and created
//! the epoch's record; step 1 reads it instead of creating it (module docs of [`super`]).

use crate::protocol::command::{
    Command, DecisionSelection, LogLevel, ParticipantResult, ResultStatus,
};
use crate::protocol::distributed::coordinator::{ScaleOutEpoch, Stage};
use crate::protocol::dt_state::DtState;
use crate::protocol::{End, Refusal, RefusalKind};

impl ScaleOutEpoch {
    /// `collected`, step 1: the record the tasks created.
    pub(super) fn read_record(&mut self) {
        self.stage = Stage::Creating;
        self.core.out.push(Command::ReadDtState {
            dtid: self.dtid.clone(),
            for_share: false,
        });
    }

    /// `collected`: the record the tasks created, as read in step 1.
    pub(super) fn on_record(&mut self, state: Option<DtState>) {
        match state {
            Some(DtState::Prepare) => self.run_tasks(),
            Some(DtState::Commit) => {
                // decided by a commit that died before completing it: complete it now
                self.ctx.pending.insert(self.dtid.clone());
                self.skip_after_resolving = true;
                self.resolve_pending();
            }
            Some(DtState::Rollback) => {
                let message = self.not_decided("was rolled back");
                let refusal = Refusal::new(RefusalKind::NotDecided, message.clone())
                    .for_epoch(self.ctx.epoch);
                self.roll_back(
                    End::Refused(refusal),
                    message,
                    Some(DtState::Rollback),
                    false,
                );
            }
            None => {
                self.gone = true;
                self.run_tasks();
            }
        }
    }

    /// `collected`, the record gone: a repeated commit, or rolled back by someone else.
    pub(super) fn on_gone(&mut self, results: &[ParticipantResult], decided: Option<bool>) {
        let empty = results.iter().all(|r| r.status == ResultStatus::Empty);
        match decided {
            _ if empty => self.ending = Some(End::Ok),
            None => self.core.out.push(Command::ReadDecisions {
                of: DecisionSelection::Group(self.ctx.group_id.clone()),
            }),
            Some(true) => {
                self.core.out.push(Command::log(
                    LogLevel::Info,
                    format!("{}: decided and concluded already, skipped", self.dtid),
                ));
                self.ending = Some(End::Ok);
            }
            Some(false) => {
                let message = self.not_decided("was rolled back and concluded");
                let refusal =
                    Refusal::new(RefusalKind::NotDecided, message).for_epoch(self.ctx.epoch);
                self.ending = Some(End::Refused(refusal));
            }
        }
    }

    fn not_decided(&self, what: &str) -> String {
        format!(
            "{} {what} before the driver's commit (the watcher, `laminar recover`, `laminar \
             resolve` or an abort); the batch is written again when the query runs it again",
            self.dtid
        )
    }
}
