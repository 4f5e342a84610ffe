//! Commits whose outcome is unknown, resolved from the durable record — never by guessing:
//! [`KafkaInDoubt`] (the marker) and [`PostgresInDoubt`] (`laminar.sink_epochs`).

use crate::protocol::command::{Command, Event, failure_of};

use crate::protocol::failure::{Failure, FailureKind};
use crate::protocol::records::epoch_committed;
use crate::protocol::{
    Core, End, Epoch, Idle, NoChild, Refusal, RefusalKind, Steps, core_accessors,
};

/// A Kafka sink's commit (or abort) whose outcome is unknown, resolved from the marker.
#[derive(Debug)]
pub struct KafkaInDoubt {
    sink_id: String,
    epoch: Epoch,
    core: Core<NoChild>,
    fenced: Option<Failure>,
    unanswered: Option<Failure>,
    committed: Option<bool>,
    marker: Option<Epoch>,
    /// The marker read next decides (after a reinit); else it is only checked for a later epoch.
    deciding: bool,
    ending: Option<End>,
}

impl KafkaInDoubt {
    /// `commit_in_flight`: the failed call was a commit and the producer is still there, so the
    /// commit can be retried to learn its outcome (librdkafka documents this).
    pub fn new(sink_id: impl Into<String>, epoch: Epoch, commit_in_flight: bool) -> Self {
        let sink_id = sink_id.into();
        let mut core = Core::default();
        core.out.push(if commit_in_flight {
            Command::RetryCommit {
                sink_id: sink_id.clone(),
                epoch,
            }
        } else {
            Command::ReadMarker {
                sink_id: sink_id.clone(),
            }
        });
        Self {
            sink_id,
            epoch,
            core,
            fenced: None,
            unanswered: None,
            committed: None,
            marker: None,
            deciding: false,
            ending: None,
        }
    }

    /// The outcome: Some(true) committed, Some(false) not, None unknown (a refusal).
    pub fn committed(&self) -> Option<bool> {
        self.committed
    }

    /// The marker as last read.
    pub fn marker(&self) -> Option<Epoch> {
        self.marker
    }

    fn read_marker(&mut self) {
        self.core.out.push(Command::ReadMarker {
            sink_id: self.sink_id.clone(),
        });
    }

    /// The outcome is known: a marker past the epoch means another instance wrote meanwhile.
    fn after_resolution(&mut self, marker: Option<Epoch>) {
        self.marker = marker;
        if marker.is_some_and(|m| m > self.epoch) {
            let refusal = Refusal::new(
                RefusalKind::Fenced,
                format!(
                    "another instance committed epoch {} while this one's epoch {} was in doubt: \
                     another writer uses this transactional id; stop this one",
                    marker.unwrap_or_default(),
                    self.epoch
                ),
            );
            self.ending = Some(End::Refused(
                refusal.for_sink(&self.sink_id).for_epoch(self.epoch),
            ));
        } else {
            self.ending = Some(End::Ok);
        }
    }

    fn step(&mut self, command: Command, event: Event) {
        match (command, event) {
            (Command::RetryCommit { .. }, Event::Ack) => {
                self.committed = Some(true);
                self.deciding = false;
                self.read_marker();
            }
            (Command::RetryCommit { .. }, Event::Failed(f)) => match f.kind {
                FailureKind::Fenced => {
                    self.fenced = Some(f);
                    self.read_marker();
                }
                FailureKind::Abortable { .. } => {
                    self.committed = Some(false);
                    self.core.out.push(Command::AbortProducer {
                        sink_id: self.sink_id.clone(),
                    });
                    self.read_marker();
                }
                _ => {
                    self.unanswered = Some(f);
                    self.read_marker();
                }
            },
            (Command::ReadMarker { .. }, Event::Marker { epoch: marker, .. }) => {
                if self.committed.is_some() && !self.deciding {
                    return self.after_resolution(marker);
                }
                let committed = epoch_committed(marker, self.epoch);
                if self.deciding {
                    self.committed = Some(committed);
                    return self.after_resolution(marker);
                }
                if self.fenced.is_some() || self.unanswered.is_some() {
                    // the brokers answer (the marker was read) but not this producer's commit:
                    // re-initialising would fence the instance that took over, so stop here
                    self.marker = marker;
                    self.committed = committed.then_some(true);
                    self.ending = Some(match (self.fenced.take(), self.unanswered.take()) {
                        (Some(f), _) => End::Failed(f),
                        (None, Some(u)) => End::Refused(
                            Refusal::new(
                                RefusalKind::Fenced,
                                format!(
                                    "the commit of epoch {} got no answer twice ({u}) while the \
                                     brokers answer other requests (the marker says epoch {} is \
                                     the last committed): another instance has most likely taken \
                                     over this transactional id; this one stops. If no other \
                                     writer runs, restart it: init_transactions resolves the epoch",
                                    self.epoch,
                                    marker.map_or_else(|| "None".to_owned(), |m| m.to_string())
                                ),
                            )
                            .for_sink(&self.sink_id)
                            .for_epoch(self.epoch),
                        ),
                        (None, None) => End::Ok,
                    });
                    return;
                }
                // no commit in flight: a new producer fences the old one, the marker is final
                self.deciding = true;
                self.core.out.push(Command::ReinitProducer {
                    sink_id: self.sink_id.clone(),
                });
                self.read_marker();
            }
            (Command::AbortProducer { .. } | Command::ReinitProducer { .. }, Event::Ack) => {}
            (command, event) => {
                self.core.out.clear();
                self.ending = Some(End::Failed(failure_of(&command, event)));
            }
        }
    }
}

/// A PostgreSQL sink's commit (or `COMMIT PREPARED`/`ROLLBACK PREPARED`) whose outcome is
/// unknown: the pending gid is finished with the decision that was being sent, then
/// `laminar.sink_epochs` decides.
#[derive(Debug)]
pub struct PostgresInDoubt {
    sink_id: String,
    epoch: Epoch,
    core: Core<NoChild>,
    committed: Option<bool>,
    last: Option<Epoch>,
    ending: Option<End>,
}

impl PostgresInDoubt {
    /// `pending`: the prepared gid and whether the decision being sent was to commit it.
    pub fn new(sink_id: impl Into<String>, epoch: Epoch, pending: Option<(String, bool)>) -> Self {
        let sink_id = sink_id.into();
        let mut core = Core::default();
        match pending {
            Some((gid, true)) => core.out.push(Command::CommitPrepared { gid }),
            Some((gid, false)) => core.out.push(Command::RollbackPrepared { gid }),
            None => {}
        }
        core.out.push(Command::ReadSinkEpochs {
            sink_ids: vec![sink_id.clone()],
        });
        Self {
            sink_id,
            epoch,
            core,
            committed: None,
            last: None,
            ending: None,
        }
    }

    /// Whether the epoch turned out committed.
    pub fn committed(&self) -> Option<bool> {
        self.committed
    }

    /// The sink's last committed epoch as read.
    pub fn last(&self) -> Option<Epoch> {
        self.last
    }

    fn step(&mut self, command: Command, event: Event) {
        let sink_id = self.sink_id.clone();
        match (command, event) {
            (
                Command::CommitPrepared { gid } | Command::RollbackPrepared { gid },
                Event::Found { found },
            ) => {
                if found {
                    self.core.out.push_front(Command::warn(format!(
                        "sink {sink_id}: completed the decision on prepared transaction {gid} in \
                         recovery"
                    )));
                }
            }
            (Command::ReadSinkEpochs { .. }, Event::Progress { epochs }) => {
                self.last = epochs
                    .into_iter()
                    .find(|(s, _)| *s == sink_id)
                    .and_then(|(_, e)| e);
                let committed = epoch_committed(self.last, self.epoch);
                self.committed = Some(committed);
                self.core.out.push(Command::warn(format!(
                    "sink {sink_id}: in-doubt epoch {} resolved from laminar.sink_epochs: {}",
                    self.epoch,
                    if committed {
                        "committed"
                    } else {
                        "not committed"
                    }
                )));
                self.ending = Some(End::Ok);
            }
            (Command::Log { .. }, Event::Ack) => {}
            (command, event) => {
                self.core.out.clear();
                self.ending = Some(End::Failed(failure_of(&command, event)));
            }
        }
    }
}

impl Steps for KafkaInDoubt {
    core_accessors!(NoChild);

    fn idle(&mut self) -> Idle {
        Idle::End(self.ending.take().unwrap_or_else(|| {
            End::Failed(Failure::new(
                FailureKind::Fatal,
                "Kafka in-doubt resolution stalled",
            ))
        }))
    }
}

impl Steps for PostgresInDoubt {
    core_accessors!(NoChild);

    fn idle(&mut self) -> Idle {
        Idle::End(self.ending.take().unwrap_or_else(|| {
            End::Failed(Failure::new(
                FailureKind::Fatal,
                "PostgreSQL in-doubt resolution stalled",
            ))
        }))
    }
}
