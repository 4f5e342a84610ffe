//! The atomic group's start-up (module docs of [`super`]): register, the owner guard, fence,
//! recover.

use crate::protocol::command::{Command, DecisionSelection, LogLevel};

use crate::protocol::atomic::{AtomicGroup, Child, Stage, Then};
use crate::protocol::crash::CrashPoint;
use crate::protocol::kafka_recovery::KafkaRecovery;
use crate::protocol::names::{dtid, participant_base};
use crate::protocol::records::DecisionRow;
use crate::protocol::records::{OwnerDecision, OwnerRecords, owner_decision};
use crate::protocol::watcher::{PassConfig, WatcherPass};
use crate::protocol::{End, Epoch, Refusal, RefusalKind};

impl AtomicGroup {
    pub(super) fn begin_attempt(&mut self) {
        if self.started {
            self.resume = None;
            return self.plan();
        }
        if let Some(start) = self.resume.take() {
            return self.begin_resume(start);
        }
        self.stage = Stage::Starting;
        let c = &self.config;
        for sink_id in &c.postgres {
            self.core.out.push(Command::InitSink {
                sink_id: sink_id.clone(),
            });
        }
        self.core.out.push(Command::RegisterGroup {
            group_id: c.group_id.clone(),
        });
        self.core.out.push(Command::ReadSinkEpochs {
            sink_ids: c.postgres.clone(),
        });
        self.read_kafka_progress();
        self.core.out.push(Command::ReadOwnership {
            registry_id: self.config.group_id.clone(),
            members: self.sink_ids(),
        });
    }

    /// How the group learns its Kafka sinks' last committed epochs. A sink writes its own
    /// epochs: its marker (O(1) while it exists). In scale-out the tasks' participants
    /// (`<tid>.p<part>`) write and mark, never the sink itself, whose marker therefore never
    /// exists: the decision log has the answer, the group's participant rows in
    /// `laminar.txn_state` (one read, whatever the topic holds). Reading the sink's marker there
    /// fell back to the witness on every commit, which reads the topic back and grows with it
    /// (docs/protocol.md §4, "Progress").
    pub(super) fn read_kafka_progress(&mut self) {
        let c = &self.config;
        if c.scale_out {
            if !c.kafka.is_empty() {
                self.core.out.push(Command::ReadDecisions {
                    of: DecisionSelection::Group(c.group_id.clone()),
                });
            }
            return;
        }
        for sink_id in &c.kafka {
            self.core.out.push(Command::ReadMarker {
                sink_id: sink_id.clone(),
            });
        }
    }

    /// Scale-out: each Kafka sink's last decided epoch from the group's decision rows (its
    /// participants' rows, or its own from a run that was not scale-out).
    pub(super) fn on_group_decisions(&mut self, rows: &[DecisionRow]) {
        for sink_id in &self.config.kafka {
            let last = rows
                .iter()
                .filter(|r| {
                    r.transactional_id == *sink_id
                        || participant_base(&r.transactional_id).is_some_and(|(b, _)| b == sink_id)
                })
                .map(|r| r.epoch)
                .max();
            self.last.insert(sink_id.clone(), last);
        }
    }

    pub(super) fn sink_ids(&self) -> Vec<String> {
        let c = &self.config;
        c.postgres.iter().chain(&c.kafka).cloned().collect()
    }

    /// The owner guard (docs/protocol.md §5) on the group's rows as read: the group's owner and
    /// epoch base, its members' owners, and each member's last committed epoch.
    pub(super) fn owner_guard(
        &self,
        owner: Option<&str>,
        base: Epoch,
        owners: &[(String, String)],
    ) -> Result<OwnerDecision, Refusal> {
        let members = self.sink_ids();
        let last: Vec<Option<Epoch>> = members.iter().map(|s| self.last_committed(s)).collect();
        let records = OwnerRecords {
            registry_id: &self.config.group_id,
            members: &members,
            owner,
            epoch_base: base,
            member_owners: owners,
            last_committed: &last,
        };
        let mine = self.config.owner.as_deref();
        owner_decision(&records, mine, self.config.restart_on_new_query)
    }

    pub(super) fn on_ownership(
        &mut self,
        owner: Option<String>,
        base: Epoch,
        owners: Vec<(String, String)>,
    ) {
        match self.owner_guard(owner.as_deref(), base, &owners) {
            Err(r) => {
                self.core.out.push(Command::Rollback);
                self.fail(End::Refused(r));
                return;
            }
            Ok(OwnerDecision::Keep { epoch_base }) => {
                self.epoch_base = epoch_base;
                self.core.out.push(Command::Commit);
            }
            Ok(OwnerDecision::Claim {
                epoch_base,
                replaced,
            }) => {
                self.epoch_base = epoch_base;
                let members = self.sink_ids();
                let mine = self.config.owner.clone();
                if let Some(previous) = replaced {
                    self.core.out.push(Command::warn(format!(
                        "sinks {members:?}: query {:?} replaces query {previous:?} \
                         (on_new_query='restart'); epochs now start at {epoch_base}",
                        mine.as_deref().unwrap_or_default()
                    )));
                }
                let mut ids = vec![self.config.group_id.clone()];
                ids.extend(members);
                self.core.out.push(Command::SetOwner {
                    ids,
                    owner: mine.unwrap_or_default(),
                    epoch_base,
                });
            }
        }
        self.core.out.push(Command::BumpGeneration {
            group_id: self.config.group_id.clone(),
        });
        // Read again once fenced: the bump waited on the group row for the previous
        // coordinator's decision in flight, whose epoch the first read could not see (it would
        // look like another writer's claim when this coordinator writes that epoch).
        self.core.out.push(Command::ReadSinkEpochs {
            sink_ids: self.config.postgres.clone(),
        });
        self.core.out.push(Command::Reached {
            point: CrashPoint::AtomicAfterFence,
        });
    }

    pub(super) fn after_recovery(&mut self, recovery: &KafkaRecovery) {
        self.awaiting = recovery.awaiting().to_vec();
        self.decided = recovery
            .decided_epochs()
            .map(|(s, e)| (s.to_owned(), e))
            .collect();
        if self.config.scale_out {
            if let Some((sink_id, epoch)) = self.awaiting.first() {
                // the scale-out tasks skip a decided epoch: they cannot write its Kafka part
                let refusal = awaited_in_one_process(sink_id, *epoch, self.epoch_base);
                return self.fail(End::Refused(refusal));
            }
            // the sinks never write themselves (module docs of `read_kafka_progress`): what the
            // decision rows said stands, and a decision of the sink's own that recovery
            // completed counts too
            for (sink_id, epoch) in &self.decided {
                let known = self.last_committed(sink_id);
                self.last.insert(sink_id.clone(), known.max(Some(*epoch)));
            }
        } else {
            for sink_id in &self.config.kafka {
                self.core.out.push(Command::KnownEpoch {
                    sink_id: sink_id.clone(),
                });
            }
        }
        if self.config.scale_out {
            let mut pass = PassConfig::owned_group(&self.config.group_id, &self.config.postgres);
            if let (true, Some(batch)) = (self.collected, self.batch) {
                // the record the tasks created for this batch is decided by the operation
                pass.spare = Some(dtid(&self.config.group_id, self.epoch_base + batch));
            }
            self.core.run(Child::Pass(Box::new(WatcherPass::new(pass))));
        } else {
            self.started_log();
        }
    }

    pub(super) fn started_log(&mut self) {
        let waiting = if self.awaiting.is_empty() {
            String::new()
        } else {
            format!(", awaiting Spark's replay of {:?}", self.awaiting)
        };
        self.core.out.push(Command::log(
            LogLevel::Info,
            format!(
                "atomic group {}: generation {}, epoch base {}, sinks {:?}{waiting}",
                self.config.group_id,
                self.generation,
                self.epoch_base,
                self.sink_ids()
            ),
        ));
        self.then = Some(Then::Started);
    }

    /// Started: write the batch if there is one.
    pub(super) fn on_started(&mut self) {
        self.started = true;
        match self.batch {
            Some(_) => self.plan(),
            None => self.ending = Some(End::Ok),
        }
    }
}

/// Why a scale-out commit (`format("laminar")`) refuses to run while an epoch written by one
/// process (`foreachBatch`) awaits Spark's replay: only a replay through that way can write the
/// epoch's Kafka part, and counting the epoch complete would leave it missing from Kafka.
fn awaited_in_one_process(sink_id: &str, epoch: Epoch, epoch_base: Epoch) -> Refusal {
    let batch = epoch - epoch_base;
    Refusal::new(
        RefusalKind::OtherEpochWhileIncomplete,
        format!(
            "epoch {epoch} (batch {batch}) is committed in PostgreSQL (the decision) but not in \
             Kafka sink {sink_id:?}, whose transaction the broker no longer holds: it was \
             written by foreachBatch(laminar), and only Spark's replay of batch {batch} through \
             foreachBatch(laminar) can write Kafka's part (format('laminar')'s tasks skip a \
             decided epoch). Run the query from the same checkpoint with foreachBatch(laminar) \
             until batch {batch} is written, then go back to format('laminar'); `laminar status` \
             shows the incomplete epoch"
        ),
    )
    .for_sink(sink_id)
    .for_epoch(epoch)
}
