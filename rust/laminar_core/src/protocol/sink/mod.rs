//! `SinkTxn`: one sink's own transaction as a machine (docs/engine.md, "The sink's transaction").
//!
//! A sink (`PostgresSink`, `KafkaSink`) asks this machine at each call of the transactional-sink
//! contract what to do, performs the answer against its store, and reports the outcome back; the
//! machine holds the [`EpochTracker`] (state, history, metrics), the decision a failed COMMIT or
//! ROLLBACK left pending, and the rules: the replay rule ([`epoch_committed`], written once),
//! which commit an epoch takes (prepared or one phase), what an abort and a close do. What a
//! failed COMMIT or ROLLBACK means and how an epoch in doubt is resolved are the `in_doubt`
//! module's. Refusals are [`CoreError::IllegalState`] (raised as `IllegalStateError`) and change
//! nothing.
//!
//! A sink whose prepare is not durable (`KafkaSink`: a prepared Kafka transaction dies with its
//! producer) builds the machine with [`SinkTxn::durable_prepare`] false: a commit the broker
//! refused is rolled back even after prepare, `close()` aborts a prepared epoch, an abort while
//! idle is a no-op, and [`SinkTxn::abort_via`], [`SinkTxn::reopened`] and
//! [`SinkTxn::resolved_by_marker`] answer for its producer (docs/engine.md, "The sink's
//! transaction").

use crate::error::{CoreError, CoreResult};
use crate::protocol::epoch::{BeginDecision, EpochTracker, RecordState};
use crate::protocol::state::{Epoch, TransactionEvent, TransactionState};

use crate::protocol::records::epoch_committed;

pub mod evidence;
mod in_doubt;

pub use in_doubt::{
    AbortFailure, CommitFailure, Decision, KafkaInDoubt, PostgresInDoubt, RecoverAnswer,
};
#[cfg(test)]
mod tests;

/// What `begin(epoch)` asks the sink to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BeginAnswer {
    /// A commit or abort is in doubt: run recovery, then ask again.
    Recover,
    /// The epoch is committed already (a replay): write nothing. `older`: the epoch is older
    /// than the last committed one (Spark only replays its last batch: warn).
    Skip {
        /// The last committed epoch that makes this one a replay.
        last: Epoch,
        /// Whether the epoch is strictly older than `last`.
        older: bool,
    },
    /// Claim the epoch in the store; report [`SinkTxn::opened`] or [`SinkTxn::store_holds`].
    Open,
}

/// What `commit(epoch)` asks the sink to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommitAnswer {
    /// `COMMIT PREPARED` the epoch's gid.
    Prepared,
    /// Record the totals, then `COMMIT` the open transaction.
    OnePhase,
}

/// What `abort(epoch)` asks the sink to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AbortAnswer {
    /// The sink already rolled the epoch back itself: nothing.
    Nothing,
    /// `ROLLBACK PREPARED` the epoch's gid.
    RollbackPrepared,
    /// `ROLLBACK` the open transaction.
    Rollback,
    /// (`abort_via`) The client is fenced: raise its error, nothing changes.
    Fenced,
    /// (`abort_via`) The client was given up mid-call and the epoch is in doubt or ending: open
    /// a new client (its init settles the epoch, [`SinkTxn::reopened`]), then ask again.
    Reopen,
}

/// The client that would send an abort (`KafkaSink`'s producer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Client {
    /// Initialised and not fenced.
    Live,
    /// Given up after a call that did not return in time: it sends nothing more; the next
    /// client's init fences it and aborts what it left open.
    GivenUp,
    /// Fenced by a newer instance.
    Fenced,
}

/// What `close()` asks the sink to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloseAnswer {
    /// Abort the open (unprepared) epoch.
    AbortOpen(Epoch),
    /// Leave the prepared epoch for the coordinator to decide.
    LeavePrepared(Epoch),
    /// Nothing is open.
    Nothing,
}

/// One sink's transaction: the tracker, the pending decision, and the answers.
#[derive(Debug, Clone)]
pub struct SinkTxn {
    tracker: EpochTracker,
    pending: Option<Decision>,
    participant: Option<i64>,
    one_phase: bool,
    durable_prepare: bool,
}

impl SinkTxn {
    /// The machine of a sink; `participant`: the partition of a scale-out participant, which
    /// ends each epoch only by preparing.
    pub fn new(tracker: EpochTracker, participant: Option<i64>) -> Self {
        Self {
            tracker,
            pending: None,
            participant,
            one_phase: false,
            durable_prepare: true,
        }
    }

    /// Whether a prepared transaction outlives this process (PostgreSQL's `PREPARE
    /// TRANSACTION`: true, the default) or not (Kafka: false). False changes three answers: a
    /// commit the server refused is rolled back even after prepare, an abort while idle is a
    /// no-op, and `close()` aborts a prepared epoch.
    #[must_use]
    pub fn durable_prepare(mut self, durable: bool) -> Self {
        self.durable_prepare = durable;
        self
    }

    /// The tracker (state, history, metrics).
    pub fn tracker(&self) -> &EpochTracker {
        &self.tracker
    }

    /// The tracker, for the binding that shares it with Python's `EpochTracker`.
    pub fn tracker_mut(&mut self) -> &mut EpochTracker {
        &mut self.tracker
    }

    fn state(&self) -> TransactionState {
        self.tracker.state()
    }

    fn refuse<T>(&self, message: String) -> CoreResult<T> {
        Err(CoreError::IllegalState(message))
    }

    // -- between epochs -------------------------------------------------------------------------

    /// Whether no epoch is being written or ended here (idle, or in doubt awaiting recovery):
    /// start-up may run.
    pub fn between_epochs(&self) -> bool {
        matches!(
            self.state(),
            TransactionState::Idle | TransactionState::Failed(_)
        )
    }

    /// `init_transactions()`: go (then recover if [`SinkTxn::in_doubt`]) or refuse mid-epoch.
    pub fn init(&self) -> CoreResult<()> {
        if self.between_epochs() {
            return Ok(());
        }
        self.refuse(format!(
            "init_transactions() while the sink is {}: finish the epoch first",
            self.state().name()
        ))
    }

    /// The epoch being written (a transaction open on the sink's connection), if any.
    pub fn writing(&self) -> Option<Epoch> {
        match self.state() {
            TransactionState::Active(e) => Some(e),
            _ => None,
        }
    }

    /// The prepared epoch awaiting its decision, if any.
    pub fn prepared_epoch(&self) -> Option<Epoch> {
        match self.state() {
            TransactionState::Prepared(e) => Some(e),
            _ => None,
        }
    }

    /// The store says `last` is the last committed epoch: kept while idle (an open or in-doubt
    /// epoch keeps what it knew until it ends).
    pub fn learned_last(&mut self, last: Option<Epoch>) -> CoreResult<()> {
        if self.state().is_idle() {
            self.tracker.set_last_committed_epoch(last)?;
        }
        Ok(())
    }

    // -- begin ----------------------------------------------------------------------------------

    /// `begin_transaction(epoch)`: recover first, skip a replay, open, or refuse (a transaction is
    /// open).
    pub fn begin(&mut self, epoch: Epoch) -> CoreResult<BeginAnswer> {
        if self.in_doubt().is_some() {
            return Ok(BeginAnswer::Recover);
        }
        self.tracker.check(TransactionEvent::Begin(epoch), None)?;
        let last = self.tracker.last_committed_epoch();
        match last.filter(|&l| epoch_committed(Some(l), epoch)) {
            Some(last) => self.skip(epoch, last),
            None => Ok(BeginAnswer::Open),
        }
    }

    fn skip(&mut self, epoch: Epoch, last: Epoch) -> CoreResult<BeginAnswer> {
        // Counts the replay; nothing else changes.
        self.tracker.begin(epoch, 0)?;
        Ok(BeginAnswer::Skip {
            last,
            older: epoch < last,
        })
    }

    /// The store let this process claim `epoch`: its transaction is open.
    pub fn opened(&mut self, epoch: Epoch, now_us: u64) -> CoreResult<()> {
        match self.tracker.begin(epoch, now_us)? {
            BeginDecision::Write => Ok(()),
            BeginDecision::SkipReplayed {
                last_committed_epoch,
            } => self.refuse(format!(
                "epoch {epoch} was claimed, but epoch {last_committed_epoch} is committed already"
            )),
        }
    }

    /// The store refused the claim of `epoch`: it holds `last` (committed by another writer of
    /// the sink id): skip. A store that refuses an epoch it does not hold is refused in turn.
    pub fn store_holds(&mut self, epoch: Epoch, last: Option<Epoch>) -> CoreResult<BeginAnswer> {
        self.tracker.set_last_committed_epoch(last)?;
        match last.filter(|&l| epoch_committed(Some(l), epoch)) {
            Some(last) => self.skip(epoch, last),
            None => self.refuse(format!(
                "the store refused the claim of epoch {epoch} but holds {}",
                last.map_or_else(|| "no epoch".to_owned(), |l| format!("epoch {l}"))
            )),
        }
    }

    // -- write and prepare ----------------------------------------------------------------------

    /// `write()`: the open epoch, or refuse.
    pub fn write(&self) -> CoreResult<Epoch> {
        match self.writing() {
            Some(e) => Ok(e),
            None => self.refuse(format!(
                "write() needs an open transaction, but the sink is {}: call \
                 begin_transaction(epoch) first (and only write when it returned True)",
                self.state().name()
            )),
        }
    }

    /// Events and payload bytes written in the open epoch.
    pub fn wrote(&mut self, events: u64, bytes: u64) -> CoreResult<()> {
        self.tracker.record_write(events, bytes)
    }

    /// `prepare_transaction()`: the open epoch to prepare, or refuse.
    pub fn prepare(&self) -> CoreResult<Epoch> {
        self.tracker.check(TransactionEvent::Prepare, None)?;
        self.writing()
            .map_or_else(|| self.refuse("no open epoch to prepare".to_owned()), Ok)
    }

    /// `PREPARE TRANSACTION` of `epoch` succeeded.
    pub fn prepared(&mut self, epoch: Epoch) -> CoreResult<()> {
        self.tracker.prepare(Some(epoch))
    }

    // -- commit ---------------------------------------------------------------------------------

    /// `commit_transaction(epoch)`: which commit, or refuse (another epoch or state; a scale-out
    /// participant's one-phase commit).
    pub fn commit(&self, epoch: Epoch) -> CoreResult<CommitAnswer> {
        match self.state() {
            TransactionState::Prepared(e) if e == epoch => Ok(CommitAnswer::Prepared),
            TransactionState::Active(e) if e == epoch => match self.participant {
                Some(part) => self.refuse(format!(
                    "the sink is scale-out participant {part}: it commits only through \
                     prepare_transaction() and the coordinator's decision"
                )),
                None => Ok(CommitAnswer::OnePhase),
            },
            _ => {
                self.tracker
                    .check(TransactionEvent::CommitStarted, Some(epoch))?;
                self.refuse(format!(
                    "cannot commit epoch {epoch} in state {}",
                    self.state()
                ))
            }
        }
    }

    /// The COMMIT (or COMMIT PREPARED) of `epoch` is being sent.
    pub fn commit_started(&mut self, epoch: Epoch, now_us: u64) -> CoreResult<()> {
        let one_phase = self.writing().is_some();
        self.tracker.commit_started(now_us, Some(epoch))?;
        self.one_phase = one_phase;
        Ok(())
    }

    /// The commit is confirmed.
    pub fn commit_ok(&mut self, now_us: u64) -> CoreResult<()> {
        self.tracker.commit_ok(now_us)?;
        self.pending = None;
        Ok(())
    }

    // -- abort ----------------------------------------------------------------------------------

    /// `abort_transaction(epoch)`: nothing (the sink already rolled it back), `ROLLBACK PREPARED`
    /// or `ROLLBACK`; the abort has started. Refused in any other state.
    pub fn abort(&mut self, epoch: Epoch) -> CoreResult<AbortAnswer> {
        let state = self.state();
        if state.is_idle()
            && (!self.durable_prepare
                || self
                    .tracker
                    .record(epoch)
                    .is_some_and(|r| r.state == RecordState::Aborted))
        {
            return Ok(AbortAnswer::Nothing);
        }
        self.tracker.abort_started(Some(epoch))?;
        Ok(match state {
            TransactionState::Prepared(_) => AbortAnswer::RollbackPrepared,
            _ => AbortAnswer::Rollback,
        })
    }

    /// `abort_transaction(epoch)` of a sink whose `client` sends the abort (Kafka): nothing when
    /// idle (whatever the client); the fenced client's error; a given-up client's open or
    /// prepared epoch is aborted here without sending anything (answer `Nothing`), in any other
    /// state a new client is opened first (`Reopen`); a live client gets [`SinkTxn::abort`]'s
    /// answer.
    pub fn abort_via(
        &mut self,
        epoch: Epoch,
        client: Client,
        now_us: u64,
    ) -> CoreResult<AbortAnswer> {
        let state = self.state();
        if state.is_idle() && !self.durable_prepare {
            return Ok(AbortAnswer::Nothing);
        }
        match (client, state) {
            (Client::Fenced, _) => Ok(AbortAnswer::Fenced),
            (Client::GivenUp, TransactionState::Active(_) | TransactionState::Prepared(_)) => {
                self.tracker.abort_started(Some(epoch))?;
                self.tracker.abort_ok(now_us)?;
                Ok(AbortAnswer::Nothing)
            }
            (Client::GivenUp, _) => Ok(AbortAnswer::Reopen),
            (Client::Live, _) => self.abort(epoch),
        }
    }

    /// After a fatal error in a call: roll back the open epoch (the abort has started), if one
    /// is open.
    pub fn abort_after_error(&mut self) -> CoreResult<Option<Epoch>> {
        match self.writing() {
            Some(e) => {
                self.tracker.abort_started(Some(e))?;
                Ok(Some(e))
            }
            None => Ok(None),
        }
    }

    /// The abort is confirmed.
    pub fn abort_ok(&mut self, now_us: u64) -> CoreResult<()> {
        self.tracker.abort_ok(now_us)?;
        self.pending = None;
        Ok(())
    }

    // -- recovery and close ---------------------------------------------------------------------

    /// Evidence (a marker, this instance's own commit) that `last` is committed: raises the
    /// known last committed epoch while idle, never lowers it (Kafka's marker may read back
    /// later than this instance's own commit).
    pub fn saw_committed(&mut self, last: Option<Epoch>) -> CoreResult<()> {
        let known = self.tracker.last_committed_epoch();
        match last {
            Some(l) if self.state().is_idle() && known.is_none_or(|k| l > k) => {
                self.tracker.set_last_committed_epoch(Some(l))
            }
            _ => Ok(()),
        }
    }

    /// `close()`: abort the open epoch, leave the prepared one (abort it when the prepare is not
    /// durable), or nothing.
    pub fn close(&self) -> CloseAnswer {
        match self.state() {
            TransactionState::Active(e) => CloseAnswer::AbortOpen(e),
            TransactionState::Prepared(e) if !self.durable_prepare => CloseAnswer::AbortOpen(e),
            TransactionState::Prepared(e) => CloseAnswer::LeavePrepared(e),
            _ => CloseAnswer::Nothing,
        }
    }
}
