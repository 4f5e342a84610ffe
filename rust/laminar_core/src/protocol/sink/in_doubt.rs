//! A sink's epoch whose outcome is unknown, in one place (docs/engine.md, "The sink's
//! transaction"; docs/protocol.md §1, §2): how [`SinkTxn`] enters doubt — a COMMIT or ROLLBACK
//! that failed ([`SinkTxn::commit_failed`], [`SinkTxn::abort_failed`]) — and how it leaves it,
//! from the durable record and never by guessing: [`SinkTxn::recover`] and [`SinkTxn::resolved`]
//! (PostgreSQL's recovery), [`SinkTxn::resolved_by_marker`] and [`SinkTxn::reopened`] (Kafka's
//! marker, a new producer's init); and the machines that find the outcome:
//!
//! ```text
//! KafkaInDoubt:    [retry_commit (librdkafka allows it) | abort_producer] -> read_marker
//!                  -> reinit_producer -> read_marker; a marker past the epoch: fenced
//! PostgresInDoubt: [commit_prepared | rollback_prepared of the pending gid] -> read_sink_epochs
//! ```
//!
//! Whether a failed call is retried first, and until when, is the retry module's
//! (`protocol::retry::after_attempt`).

use super::SinkTxn;
use crate::error::CoreResult;
use crate::protocol::command::{Command, Event, failure_of};
use crate::protocol::failure::{Failure, FailureKind};
use crate::protocol::records::epoch_committed;
use crate::protocol::state::{InDoubtOutcome, TransactionState};
use crate::protocol::{
    Core, End, Epoch, Idle, NoChild, Refusal, RefusalKind, Steps, core_accessors,
};

/// The decision a failed COMMIT or ROLLBACK was sending: recovery finishes a pending prepared
/// transaction with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// `COMMIT` / `COMMIT PREPARED` was being sent.
    Commit,
    /// `ROLLBACK PREPARED` was being sent.
    Abort,
}

/// What a failed COMMIT leaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommitFailure {
    /// The outcome is unknown (the transaction is `Failed` with the commit pending): recovery
    /// decides from the store, never a blind abort.
    InDoubt,
    /// The server answered: the transaction is rolled back, the epoch can be written again.
    RolledBack,
}

/// What a failed abort leaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AbortFailure {
    /// In doubt with the abort pending (`Failed`): recovery finishes it.
    InDoubt,
    /// (prepare not durable) Replace the client: its init aborts the transaction; then report
    /// [`SinkTxn::abort_reopened`].
    Reopen,
}

/// What `recover()` asks the sink to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecoverAnswer {
    /// Nothing is in doubt: read the last committed epoch (and report it by
    /// [`SinkTxn::learned_last`]).
    ReadLast,
    /// Resolve the in-doubt epoch (finish a pending gid with `decision`, then read the store),
    /// and report it by [`SinkTxn::resolved`].
    Resolve {
        /// The epoch in doubt.
        epoch: Epoch,
        /// The decision that was being sent.
        decision: Decision,
    },
}

/// How the sink's transaction enters doubt and leaves it.
impl SinkTxn {
    /// The decision a failed COMMIT or ROLLBACK left pending, if any.
    pub fn pending(&self) -> Option<Decision> {
        self.pending
    }

    /// The epoch whose commit or abort is in doubt, if any.
    pub fn in_doubt(&self) -> Option<Epoch> {
        match self.state() {
            TransactionState::Failed(e) => Some(e),
            _ => None,
        }
    }

    /// The COMMIT failed. A one-phase COMMIT whose connection was lost (the outcome is unknown)
    /// is in doubt; one the server answered is rolled back. A COMMIT PREPARED that failed is in
    /// doubt either way when the prepare is durable: the gid may still be there, and recovery
    /// finishes it; when it is not (Kafka), a commit the broker refused (an abortable error) is
    /// rolled back too.
    pub fn commit_failed(
        &mut self,
        connection_lost: bool,
        now_us: u64,
    ) -> CoreResult<CommitFailure> {
        self.tracker.commit_failed()?;
        if !connection_lost && (self.one_phase || !self.durable_prepare) {
            self.tracker
                .resolve(InDoubtOutcome::Aborted, now_us, None)?;
            return Ok(CommitFailure::RolledBack);
        }
        self.pending = Some(Decision::Commit);
        Ok(CommitFailure::InDoubt)
    }

    /// COMMIT PREPARED found no gid: another process ended it, and the store says whether it
    /// `committed`.
    pub fn commit_overtaken(&mut self, committed: bool, now_us: u64) -> CoreResult<()> {
        self.tracker.commit_failed()?;
        self.tracker.resolve(resolution(committed), now_us, None)?;
        self.pending = None;
        Ok(())
    }

    /// The ROLLBACK (PREPARED) failed: in doubt, with the abort pending. When the prepare is
    /// not durable (Kafka), replacing the client makes the abort final (`Reopen`), unless the
    /// client is fenced (the sink raises and the epoch stays in doubt).
    pub fn abort_failed(&mut self) -> CoreResult<AbortFailure> {
        self.tracker.abort_failed()?;
        self.pending = Some(Decision::Abort);
        Ok(if self.durable_prepare {
            AbortFailure::InDoubt
        } else {
            AbortFailure::Reopen
        })
    }

    /// The client that failed to abort was replaced: its init aborted the epoch.
    pub fn abort_reopened(&mut self, now_us: u64) -> CoreResult<()> {
        self.tracker
            .resolve(InDoubtOutcome::Aborted, now_us, None)?;
        self.pending = None;
        Ok(())
    }

    /// ROLLBACK PREPARED found no gid and the store says the epoch committed: another process
    /// committed it first (the epoch is committed).
    pub fn abort_overtaken(&mut self, now_us: u64) -> CoreResult<()> {
        self.tracker.abort_failed()?;
        self.tracker
            .resolve(InDoubtOutcome::Committed, now_us, None)?;
        self.pending = None;
        Ok(())
    }

    /// `recover()`: read the last committed epoch, or resolve the epoch in doubt with the
    /// pending decision (a commit when none was recorded).
    pub fn recover(&self) -> RecoverAnswer {
        match self.in_doubt() {
            Some(epoch) => RecoverAnswer::Resolve {
                epoch,
                decision: self.pending.unwrap_or(Decision::Commit),
            },
            None => RecoverAnswer::ReadLast,
        }
    }

    /// Recovery resolved the epoch in doubt: `committed` or not, and the store's last committed
    /// epoch.
    pub fn resolved(
        &mut self,
        committed: bool,
        last: Option<Epoch>,
        now_us: u64,
    ) -> CoreResult<()> {
        self.tracker.resolve(resolution(committed), now_us, None)?;
        self.tracker.set_last_committed_epoch(last)?;
        self.pending = None;
        Ok(())
    }

    /// A new client's init fenced the previous one (Kafka's `init_transactions`), and `last` is
    /// the last committed epoch it read: an open or prepared epoch is aborted (the init aborted
    /// it), an abort under way is done, a commit under way or in doubt committed exactly when
    /// `last` covers it ([`epoch_committed`]); then [`SinkTxn::saw_committed`].
    pub fn reopened(&mut self, last: Option<Epoch>, now_us: u64) -> CoreResult<()> {
        match self.state() {
            TransactionState::Active(_) | TransactionState::Prepared(_) => {
                self.tracker.abort_started(None)?;
                self.tracker.abort_ok(now_us)?;
            }
            TransactionState::Aborting(_) => self.tracker.abort_ok(now_us)?,
            TransactionState::Committing(_) => self.tracker.commit_failed()?,
            _ => {}
        }
        if let TransactionState::Failed(e) = self.state() {
            let committed = epoch_committed(last, e);
            self.tracker.resolve(resolution(committed), now_us, None)?;
        }
        self.pending = None;
        self.saw_committed(last)
    }

    /// Kafka's in-doubt resolution ended: `committed` (when the marker decided) resolves the
    /// epoch still in doubt; `marker` is then evidence of the last committed epoch.
    pub fn resolved_by_marker(
        &mut self,
        committed: Option<bool>,
        marker: Option<Epoch>,
        now_us: u64,
    ) -> CoreResult<()> {
        if let (Some(c), Some(_)) = (committed, self.in_doubt()) {
            self.tracker.resolve(resolution(c), now_us, None)?;
            self.pending = None;
        }
        self.saw_committed(marker)
    }
}

fn resolution(committed: bool) -> InDoubtOutcome {
    if committed {
        InDoubtOutcome::Committed
    } else {
        InDoubtOutcome::Aborted
    }
}

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
