//! An atomic group's epoch: the plan, the epoch machine's result, and the writer's retries.

use crate::protocol::plan::{EpochPlan, SinkProgress, plan_epoch};

use crate::protocol::End;
use crate::protocol::atomic::{AtomicEpoch, AtomicGroup, Child, EpochContext, Stage, Then};
use crate::protocol::command::{Command, LogLevel};
use crate::protocol::distributed::{ScaleContext, ScaleOutEpoch};
use crate::protocol::failure::FailureKind;
use crate::protocol::records::epoch_committed;
use crate::protocol::retry::{refusal_failure, retry_delay_ms};

impl AtomicGroup {
    pub(super) fn plan(&mut self) {
        let Some(batch) = self.batch else {
            self.ending = Some(End::Ok);
            return;
        };
        self.stage = Stage::Epoch;
        let epoch = self.epoch_base + batch;
        if self.config.scale_out {
            let ctx = ScaleContext {
                group_id: self.config.group_id.clone(),
                generation: self.generation,
                epoch,
                postgres: self
                    .config
                    .postgres
                    .iter()
                    .map(|s| (s.clone(), self.last_committed(s)))
                    .collect(),
                refuse_backwards: self.config.owner.is_some(),
                pending: self.pending.clone(),
                collected: self.collected,
            };
            self.core
                .run(Child::Scaled(Box::new(ScaleOutEpoch::new(ctx))));
            return;
        }
        // An awaited epoch the sinks now hold ends the wait before the plan: a retry whose
        // failed Kafka commit turned out committed (the refresh read the epoch back) skips the
        // epoch without running it, and the wait would otherwise refuse every later epoch.
        self.release_awaiting();
        let progress: Vec<SinkProgress> = self
            .sink_ids()
            .into_iter()
            .map(|sink_id| SinkProgress {
                last: self.last_committed(&sink_id),
                sink_id,
            })
            .collect();
        let needs = match plan_epoch(
            epoch,
            &progress,
            &self.awaiting,
            self.config.owner.is_some(),
        ) {
            EpochPlan::Refuse(r) => return self.fail(End::Refused(r.for_epoch(epoch))),
            EpochPlan::Skip => {
                self.core.out.push(Command::log(
                    LogLevel::Info,
                    format!(
                        "atomic group {}: epoch {epoch} already committed, skipped",
                        self.config.group_id
                    ),
                ));
                self.ending = Some(End::Ok);
                return;
            }
            EpochPlan::Write { sinks } => sinks,
        };
        let n_pg = self.config.postgres.len();
        let ctx = EpochContext {
            group_id: self.config.group_id.clone(),
            generation: self.generation,
            epoch,
            postgres: self
                .config
                .postgres
                .iter()
                .zip(&needs)
                .filter(|(_, n)| **n)
                .map(|(s, _)| s.clone())
                .collect(),
            kafka: self
                .config
                .kafka
                .iter()
                .zip(&needs[n_pg..])
                .filter(|(_, n)| **n)
                .map(|(s, _)| {
                    (
                        s.clone(),
                        self.last_committed(s),
                        self.decided.get(s).copied(),
                    )
                })
                .collect(),
            redo_log: self.config.redo_log,
        };
        self.core.run(Child::Epoch(Box::new(AtomicEpoch::new(ctx))));
    }

    pub(super) fn after_epoch(&mut self, run: &AtomicEpoch, end: End) {
        let epoch = self.epoch_base + self.batch.unwrap_or_default();
        if run.decided() {
            for sink_id in &self.config.postgres {
                self.last.insert(sink_id.clone(), Some(epoch));
            }
            // every Kafka sink of the decision, whether its commit landed, failed or awaits
            // the replay: a retry's step 2 knows the epoch is its own
            for sink_id in run.decided_kafka() {
                self.decided.insert(sink_id.to_owned(), epoch);
            }
        }
        // committed at step 8, completed in process, or found holding its decided epoch at
        // step 2 (before any decision of this attempt)
        for sink_id in run.kafka_committed() {
            self.decided.insert(sink_id.clone(), epoch);
            self.last.insert(sink_id.clone(), Some(epoch));
        }
        self.release_awaiting();
        for (sink_id, e) in run.awaiting() {
            self.awaiting.retain(|(s, _)| s != sink_id);
            self.awaiting.push((sink_id.clone(), *e));
        }
        match end {
            End::Ok => {
                // a replay whose every sink turned out holding the epoch decided nothing: skipped
                self.committed = run.decided();
                self.ending = Some(End::Ok);
            }
            other => self.fail(other),
        }
    }

    /// A Spark replay that completed an awaited epoch ends the wait.
    pub(super) fn release_awaiting(&mut self) {
        let last = &self.last;
        let group = &self.config.group_id;
        let mut released = Vec::new();
        self.awaiting.retain(|(sink_id, awaited)| {
            let done = epoch_committed(last.get(sink_id).copied().flatten(), *awaited);
            if done {
                released.push(format!(
                    "atomic group {group}: Spark's replay completed epoch {awaited} in Kafka sink \
                     {sink_id}"
                ));
            }
            !done
        });
        for line in released {
            self.core.out.push(Command::warn(line));
        }
    }

    /// An attempt failed: refresh, then retry or end.
    pub(super) fn fail(&mut self, end: End) {
        let was_epoch = self.stage == Stage::Epoch;
        self.failure = Some(end);
        if was_epoch && self.started {
            self.stage = Stage::Refresh;
            self.last.clear();
            self.core.out.push(Command::ReadSinkEpochs {
                sink_ids: self.config.postgres.clone(),
            });
            if self.config.scale_out {
                self.read_kafka_progress();
            } else {
                for sink_id in &self.config.kafka {
                    self.core.out.push(Command::KnownEpoch {
                        sink_id: sink_id.clone(),
                    });
                }
            }
            self.then = Some(Then::Retry);
        } else {
            self.started = false;
            self.decide_retry();
        }
    }

    pub(super) fn decide_retry(&mut self) {
        let end = self.failure.take().unwrap_or(End::Ok);
        let (failure, why) = match &end {
            End::Failed(f) => (f.kind, f.message.clone()),
            End::Refused(r) => (refusal_failure(r.kind), r.message.clone()),
            End::Ok => (FailureKind::Fatal, String::new()),
        };
        let retries = self.config.retries;
        let Some(delay) = retry_delay_ms(
            self.attempt,
            retries,
            self.config.retry_backoff_ms,
            failure,
            !self.awaiting.is_empty(),
        ) else {
            self.stage = Stage::Idle;
            self.ending = Some(end);
            return;
        };
        self.core.out.push(Command::warn(format!(
            "atomic group {}: epoch {} not written ({why}); retry {}/{retries} in {:.1}s",
            self.config.group_id,
            self.batch.unwrap_or_default(),
            self.attempt,
            delay as f64 / 1000.0
        )));
        self.core.out.push(Command::Sleep { ms: delay });
        self.stage = Stage::Backoff;
        self.then = Some(Then::Attempt);
        self.attempt += 1;
    }
}
