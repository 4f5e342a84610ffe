//! `EpochTracker`: drives one sink's [`TransactionState`] and keeps what happened to each epoch.
//!
//! Every sink reports its lifecycle here (begin, writes, prepare, commit, abort, recovery's
//! resolution) and asks it one question before writing: has this epoch already been committed? A
//! replayed epoch (`protocol::records::epoch_committed`, the one replay rule) is answered with [`BeginDecision::SkipReplayed`] and
//! nothing changes, so the same micro-batch is never written twice.
//!
//! The tracker is sans-io: time comes in as `now_us` arguments (microseconds on any clock that
//! does not go backwards; latencies are differences of those values).

use std::collections::VecDeque;

use crate::error::{CoreError, CoreResult};
use crate::protocol::records::epoch_committed;
use crate::protocol::state::{Epoch, InDoubtOutcome, TransactionEvent, TransactionState};
use crate::stats::LatencyStats;

/// How many epoch records a tracker keeps by default.
pub const DEFAULT_HISTORY_LIMIT: usize = 1024;

/// What the sink should do with an epoch it was asked to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BeginDecision {
    /// A transaction is now open for the epoch: write it.
    Write,
    /// The epoch was already committed (a Spark replay after a restart): write nothing.
    SkipReplayed {
        /// The last committed epoch that makes this one a replay.
        last_committed_epoch: Epoch,
    },
}

/// Where one epoch's transaction is, or how it ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RecordState {
    /// Open, being written.
    Active,
    /// Flushed and ready to commit.
    Prepared,
    /// Commit sent, outcome pending.
    Committing,
    /// Abort sent, outcome pending.
    Aborting,
    /// Commit or abort outcome unknown: recovery must resolve it.
    Failed,
    /// Committed (by `commit_ok` or by recovery's resolution).
    Committed,
    /// Aborted (by `abort_ok` or by recovery's resolution).
    Aborted,
}

impl RecordState {
    /// Every record state.
    pub const ALL: [RecordState; 7] = [
        RecordState::Active,
        RecordState::Prepared,
        RecordState::Committing,
        RecordState::Aborting,
        RecordState::Failed,
        RecordState::Committed,
        RecordState::Aborted,
    ];

    /// The name Python shows (`EpochRecord.state`).
    pub fn name(self) -> &'static str {
        match self {
            RecordState::Active => "Active",
            RecordState::Prepared => "Prepared",
            RecordState::Committing => "Committing",
            RecordState::Aborting => "Aborting",
            RecordState::Failed => "Failed",
            RecordState::Committed => "Committed",
            RecordState::Aborted => "Aborted",
        }
    }

    /// Whether the epoch's transaction has ended (committed or aborted).
    pub fn is_completed(self) -> bool {
        matches!(self, RecordState::Committed | RecordState::Aborted)
    }

    fn of_open(state: TransactionState) -> Option<RecordState> {
        match state {
            TransactionState::Idle => None,
            TransactionState::Active(_) => Some(RecordState::Active),
            TransactionState::Prepared(_) => Some(RecordState::Prepared),
            TransactionState::Committing(_) => Some(RecordState::Committing),
            TransactionState::Aborting(_) => Some(RecordState::Aborting),
            TransactionState::Failed(_) => Some(RecordState::Failed),
        }
    }
}

/// What happened to one epoch's transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EpochRecord {
    /// The epoch (Spark batch id).
    pub epoch: Epoch,
    /// Where the transaction is, or how it ended.
    pub state: RecordState,
    /// Events (rows, records) written in this transaction.
    pub events_written: u64,
    /// Payload bytes written in this transaction.
    pub bytes_written: u64,
    /// When the transaction began.
    pub opened_at_us: u64,
    /// When the commit was sent, if it was.
    pub commit_started_at_us: Option<u64>,
    /// When the transaction ended (committed or aborted), if it has.
    pub completed_at_us: Option<u64>,
    /// Whether the outcome came from recovery's resolution of a failed commit or abort.
    pub resolved_by_recovery: bool,
}

impl EpochRecord {
    /// Commit latency (commit sent → commit confirmed), if the commit was confirmed by
    /// `commit_ok` (a commit resolved by recovery has no meaningful latency).
    pub fn commit_latency_us(&self) -> Option<u64> {
        match (self.state, self.commit_started_at_us, self.completed_at_us) {
            (RecordState::Committed, Some(start), Some(end)) if !self.resolved_by_recovery => {
                Some(end.saturating_sub(start))
            }
            _ => None,
        }
    }
}

/// Counters of one sink (F-E2E-002 `TransactionalSinkMetrics`, plus a few more).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TransactionalSinkMetrics {
    /// Transactions committed (including those recovery resolved as committed).
    pub commits: u64,
    /// Transactions aborted (including those recovery resolved as aborted).
    pub aborts: u64,
    /// Events written across all transactions, committed or not.
    pub events_written: u64,
    /// Payload bytes written across all transactions, committed or not.
    pub bytes_written: u64,
    /// Commits whose outcome was unknown (`commit_failed`).
    pub commit_failures: u64,
    /// Mean commit latency (commit sent → confirmed); 0.0 before the first commit.
    pub avg_commit_latency_us: f64,
    /// Largest commit latency; 0 before the first commit.
    pub max_commit_latency_us: u64,
    /// Median commit latency (within 1%); 0 before the first commit.
    pub p50_commit_latency_us: u64,
    /// 99th-percentile commit latency (within 1%); 0 before the first commit.
    pub p99_commit_latency_us: u64,
    /// Events of committed transactions (what consumers see).
    pub events_committed: u64,
    /// Payload bytes of committed transactions.
    pub bytes_committed: u64,
    /// Aborts whose outcome was unknown (`abort_failed`).
    pub abort_failures: u64,
    /// Epochs skipped because they were already committed (Spark replays).
    pub replays_skipped: u64,
}

/// Drives one sink's transaction state machine and keeps a bounded history of epoch records.
#[derive(Debug, Clone)]
pub struct EpochTracker {
    state: TransactionState,
    last_committed_epoch: Option<Epoch>,
    history: VecDeque<EpochRecord>,
    history_limit: usize,
    metrics: Counters,
    latency: LatencyStats,
}

#[derive(Debug, Clone, Default)]
struct Counters {
    commits: u64,
    aborts: u64,
    events_written: u64,
    bytes_written: u64,
    commit_failures: u64,
    events_committed: u64,
    bytes_committed: u64,
    abort_failures: u64,
    replays_skipped: u64,
}

impl Default for EpochTracker {
    fn default() -> Self {
        Self::new(DEFAULT_HISTORY_LIMIT)
    }
}

impl EpochTracker {
    /// An idle tracker that keeps the last `history_limit` epoch records (at least 1) and knows of
    /// no committed epoch yet.
    pub fn new(history_limit: usize) -> Self {
        let history_limit = history_limit.max(1);
        Self {
            state: TransactionState::Idle,
            last_committed_epoch: None,
            history: VecDeque::with_capacity(history_limit.min(64)),
            history_limit,
            metrics: Counters::default(),
            latency: LatencyStats::new(),
        }
    }

    /// The sink's transaction state.
    pub fn state(&self) -> TransactionState {
        self.state
    }

    /// The epoch of the open transaction (`None` when idle).
    pub fn current_epoch(&self) -> Option<Epoch> {
        self.state.epoch()
    }

    /// The last epoch known to be committed (`None`: nothing committed yet).
    pub fn last_committed_epoch(&self) -> Option<Epoch> {
        self.last_committed_epoch
    }

    /// How many epoch records are kept.
    pub fn history_limit(&self) -> usize {
        self.history_limit
    }

    /// Sets the last committed epoch from what recovery read back at start-up. Only legal while
    /// idle; `None` means nothing was ever committed.
    pub fn set_last_committed_epoch(&mut self, epoch: Option<Epoch>) -> CoreResult<()> {
        if !self.state.is_idle() {
            return Err(CoreError::IllegalState(format!(
                "cannot set the last committed epoch in state {}: set it at start-up, before the \
                 first begin, or after the open transaction has ended",
                self.state
            )));
        }
        if let Some(e) = epoch {
            if e < 0 {
                return Err(CoreError::IllegalState(format!(
                    "cannot set the last committed epoch to {e}: epochs are Spark batch ids and \
                     must be >= 0 (use None for \"nothing committed yet\")"
                )));
            }
        }
        self.last_committed_epoch = epoch;
        Ok(())
    }

    /// Opens the transaction of `epoch`, or says to skip it because it was already committed.
    ///
    /// A replayed epoch changes nothing but the `replays_skipped` counter. Beginning while another
    /// transaction is open (including an epoch that goes backwards) is [`CoreError::IllegalState`].
    pub fn begin(&mut self, epoch: Epoch, now_us: u64) -> CoreResult<BeginDecision> {
        // The state check comes first: a begin while a transaction is open is a bug whatever the
        // epoch, and must not be mistaken for a replay.
        let next = self.state.next(TransactionEvent::Begin(epoch))?;
        let replayed_over = self
            .last_committed_epoch
            .filter(|&last| epoch_committed(Some(last), epoch));
        if let Some(last) = replayed_over {
            self.metrics.replays_skipped = self.metrics.replays_skipped.saturating_add(1);
            return Ok(BeginDecision::SkipReplayed {
                last_committed_epoch: last,
            });
        }
        self.state = next;
        if self.history.len() >= self.history_limit {
            self.history.pop_front();
        }
        self.history.push_back(EpochRecord {
            epoch,
            state: RecordState::Active,
            events_written: 0,
            bytes_written: 0,
            opened_at_us: now_us,
            commit_started_at_us: None,
            completed_at_us: None,
            resolved_by_recovery: false,
        });
        Ok(BeginDecision::Write)
    }

    /// Counts events and payload bytes written in the open transaction (legal while Active).
    pub fn record_write(&mut self, events: u64, bytes: u64) -> CoreResult<()> {
        self.transition(TransactionEvent::RecordWrite, None)?;
        self.metrics.events_written = self.metrics.events_written.saturating_add(events);
        self.metrics.bytes_written = self.metrics.bytes_written.saturating_add(bytes);
        if let Some(r) = self.history.back_mut() {
            r.events_written = r.events_written.saturating_add(events);
            r.bytes_written = r.bytes_written.saturating_add(bytes);
        }
        Ok(())
    }

    /// Everything is flushed; the transaction is ready to commit (Active → Prepared).
    /// With `expected_epoch`, also checks that it is the open epoch.
    pub fn prepare(&mut self, expected_epoch: Option<Epoch>) -> CoreResult<()> {
        self.transition(TransactionEvent::Prepare, expected_epoch)
    }

    /// The commit was sent (Active or Prepared → Committing); the commit latency starts now.
    pub fn commit_started(&mut self, now_us: u64, expected_epoch: Option<Epoch>) -> CoreResult<()> {
        self.transition(TransactionEvent::CommitStarted, expected_epoch)?;
        if let Some(r) = self.history.back_mut() {
            r.commit_started_at_us = Some(now_us);
        }
        Ok(())
    }

    /// The commit is confirmed (Committing → Idle); the epoch becomes the last committed one.
    pub fn commit_ok(&mut self, now_us: u64) -> CoreResult<()> {
        let epoch = self.open_epoch();
        self.transition(TransactionEvent::CommitOk, None)?;
        let latency = self
            .history
            .back()
            .and_then(|r| r.commit_started_at_us)
            .map(|start| now_us.saturating_sub(start));
        if let Some(latency) = latency {
            self.latency.record(latency);
        }
        self.finish_committed(epoch, now_us);
        Ok(())
    }

    /// The commit failed and its outcome is unknown (Committing → Failed): recovery decides.
    pub fn commit_failed(&mut self) -> CoreResult<()> {
        self.transition(TransactionEvent::CommitFailed, None)?;
        self.metrics.commit_failures = self.metrics.commit_failures.saturating_add(1);
        self.set_record_state(RecordState::Failed);
        Ok(())
    }

    /// The abort was sent (Active or Prepared → Aborting).
    pub fn abort_started(&mut self, expected_epoch: Option<Epoch>) -> CoreResult<()> {
        self.transition(TransactionEvent::AbortStarted, expected_epoch)
    }

    /// The abort is confirmed (Aborting → Idle).
    pub fn abort_ok(&mut self, now_us: u64) -> CoreResult<()> {
        self.transition(TransactionEvent::AbortOk, None)?;
        self.finish_aborted(now_us);
        Ok(())
    }

    /// The abort failed and its outcome is unknown (Aborting → Failed): recovery decides.
    pub fn abort_failed(&mut self) -> CoreResult<()> {
        self.transition(TransactionEvent::AbortFailed, None)?;
        self.metrics.abort_failures = self.metrics.abort_failures.saturating_add(1);
        self.set_record_state(RecordState::Failed);
        Ok(())
    }

    /// Recovery decided the outcome of the failed transaction (Failed → Idle).
    pub fn resolve(
        &mut self,
        resolution: InDoubtOutcome,
        now_us: u64,
        expected_epoch: Option<Epoch>,
    ) -> CoreResult<()> {
        let epoch = self.open_epoch();
        self.transition(TransactionEvent::Resolve(resolution), expected_epoch)?;
        if let Some(r) = self.history.back_mut() {
            r.resolved_by_recovery = true;
        }
        match resolution {
            InDoubtOutcome::Committed => self.finish_committed(epoch, now_us),
            InDoubtOutcome::Aborted => self.finish_aborted(now_us),
        }
        Ok(())
    }

    /// The kept epoch records, oldest first (at most [`EpochTracker::history_limit`]).
    pub fn records(&self) -> impl ExactSizeIterator<Item = &EpochRecord> + DoubleEndedIterator {
        self.history.iter()
    }

    /// The most recent record of `epoch`, if it is still kept.
    pub fn record(&self, epoch: Epoch) -> Option<&EpochRecord> {
        self.history.iter().rev().find(|r| r.epoch == epoch)
    }

    /// A snapshot of the sink's counters and commit-latency statistics.
    pub fn metrics(&self) -> TransactionalSinkMetrics {
        let m = &self.metrics;
        TransactionalSinkMetrics {
            commits: m.commits,
            aborts: m.aborts,
            events_written: m.events_written,
            bytes_written: m.bytes_written,
            commit_failures: m.commit_failures,
            avg_commit_latency_us: self.latency.mean(),
            max_commit_latency_us: self.latency.max(),
            p50_commit_latency_us: self.latency.p50(),
            p99_commit_latency_us: self.latency.p99(),
            events_committed: m.events_committed,
            bytes_committed: m.bytes_committed,
            abort_failures: m.abort_failures,
            replays_skipped: m.replays_skipped,
        }
    }

    /// Whether `event` (for `expected_epoch`, if given) is legal now: the error the call would
    /// raise, without changing anything.
    pub fn check(&self, event: TransactionEvent, expected_epoch: Option<Epoch>) -> CoreResult<()> {
        self.checked_next(event, expected_epoch).map(|_| ())
    }

    fn checked_next(
        &self,
        event: TransactionEvent,
        expected_epoch: Option<Epoch>,
    ) -> CoreResult<TransactionState> {
        let next = self.state.next(event)?;
        if let (Some(expected), Some(open)) = (expected_epoch, self.state.epoch()) {
            if expected != open {
                return Err(CoreError::IllegalState(format!(
                    "cannot {} epoch {expected}: the open transaction is for epoch {open} \
                     (state {})",
                    event.kind().name(),
                    self.state
                )));
            }
        }
        Ok(next)
    }

    /// Applies `event` to the state (unchanged on error), checks `expected_epoch` first, and
    /// mirrors the new state into the open epoch's record.
    fn transition(
        &mut self,
        event: TransactionEvent,
        expected_epoch: Option<Epoch>,
    ) -> CoreResult<()> {
        let next = self.checked_next(event, expected_epoch)?;
        self.state = next;
        if let Some(s) = RecordState::of_open(next) {
            self.set_record_state(s);
        }
        Ok(())
    }

    fn open_epoch(&self) -> Option<Epoch> {
        self.state.epoch()
    }

    fn set_record_state(&mut self, state: RecordState) {
        if let Some(r) = self.history.back_mut() {
            r.state = state;
        }
    }

    fn finish_committed(&mut self, epoch: Option<Epoch>, now_us: u64) {
        self.metrics.commits = self.metrics.commits.saturating_add(1);
        if let Some(e) = epoch {
            self.last_committed_epoch = Some(self.last_committed_epoch.map_or(e, |l| l.max(e)));
        }
        if let Some(r) = self.history.back_mut() {
            r.state = RecordState::Committed;
            r.completed_at_us = Some(now_us);
            self.metrics.events_committed = self
                .metrics
                .events_committed
                .saturating_add(r.events_written);
            self.metrics.bytes_committed =
                self.metrics.bytes_committed.saturating_add(r.bytes_written);
        }
    }

    fn finish_aborted(&mut self, now_us: u64) {
        self.metrics.aborts = self.metrics.aborts.saturating_add(1);
        if let Some(r) = self.history.back_mut() {
            r.state = RecordState::Aborted;
            r.completed_at_us = Some(now_us);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::state::StateKind;
    use proptest::prelude::*;

    fn committed_cycle(t: &mut EpochTracker, epoch: Epoch, start: u64, latency: u64) {
        assert_eq!(t.begin(epoch, start), Ok(BeginDecision::Write));
        t.record_write(10, 100).unwrap();
        t.prepare(Some(epoch)).unwrap();
        t.commit_started(start + 5, Some(epoch)).unwrap();
        t.commit_ok(start + 5 + latency).unwrap();
    }

    #[test]
    fn records_the_transaction_lifecycle() {
        let mut t = EpochTracker::default();
        assert_eq!(t.begin(0, 1_000), Ok(BeginDecision::Write));
        assert_eq!(t.state(), TransactionState::Active(0));
        assert_eq!(t.current_epoch(), Some(0));
        t.record_write(3, 30).unwrap();
        t.record_write(2, 20).unwrap();
        t.prepare(None).unwrap();
        assert_eq!(t.record(0).map(|r| r.state), Some(RecordState::Prepared));
        t.commit_started(1_100, Some(0)).unwrap();
        assert_eq!(t.record(0).map(|r| r.state), Some(RecordState::Committing));
        t.commit_ok(1_350).unwrap();
        assert_eq!(t.state(), TransactionState::Idle);
        assert_eq!(t.last_committed_epoch(), Some(0));
        let r = t.record(0).unwrap();
        assert_eq!(
            r,
            &EpochRecord {
                epoch: 0,
                state: RecordState::Committed,
                events_written: 5,
                bytes_written: 50,
                opened_at_us: 1_000,
                commit_started_at_us: Some(1_100),
                completed_at_us: Some(1_350),
                resolved_by_recovery: false,
            }
        );
        assert_eq!(r.commit_latency_us(), Some(250));
        let m = t.metrics();
        assert_eq!(
            (m.commits, m.aborts, m.events_written, m.bytes_written),
            (1, 0, 5, 50)
        );
        assert_eq!((m.events_committed, m.bytes_committed), (5, 50));
        assert_eq!(m.max_commit_latency_us, 250);
        assert_eq!(m.avg_commit_latency_us, 250.0);
    }

    #[test]
    fn replayed_epoch_is_skipped_and_changes_nothing() {
        let mut t = EpochTracker::default();
        t.set_last_committed_epoch(Some(5)).unwrap();
        for e in [0, 4, 5] {
            let before = (t.state(), t.records().count(), t.last_committed_epoch());
            assert_eq!(
                t.begin(e, 0),
                Ok(BeginDecision::SkipReplayed {
                    last_committed_epoch: 5
                })
            );
            assert_eq!(
                before,
                (t.state(), t.records().count(), t.last_committed_epoch())
            );
        }
        assert_eq!(t.metrics().replays_skipped, 3);
        assert_eq!(t.begin(6, 0), Ok(BeginDecision::Write));
    }

    #[test]
    fn begin_while_open_is_illegal_even_for_a_replayed_epoch() {
        let mut t = EpochTracker::default();
        t.set_last_committed_epoch(Some(2)).unwrap();
        t.begin(5, 0).unwrap();
        for e in [1, 4, 5, 6] {
            let err = t.begin(e, 0).unwrap_err();
            assert!(matches!(&err, CoreError::IllegalState(m) if m.contains("Active(epoch=5)")));
        }
        let CoreError::IllegalState(msg) = t.begin(4, 0).unwrap_err() else {
            unreachable!()
        };
        assert!(msg.contains("goes backwards"), "{msg}");
        assert_eq!(t.state(), TransactionState::Active(5));
        assert_eq!(t.records().count(), 1);
    }

    #[test]
    fn wrong_expected_epoch_is_illegal_and_changes_nothing() {
        let mut t = EpochTracker::default();
        t.begin(3, 0).unwrap();
        let err = t.commit_started(1, Some(4)).unwrap_err();
        assert!(matches!(&err, CoreError::IllegalState(m) if m.contains("commit_started epoch 4")));
        assert_eq!(t.state(), TransactionState::Active(3));
        assert_eq!(t.record(3).unwrap().commit_started_at_us, None);
    }

    #[test]
    fn abort_then_retry_the_same_epoch() {
        let mut t = EpochTracker::default();
        t.begin(1, 0).unwrap();
        t.record_write(4, 40).unwrap();
        t.abort_started(Some(1)).unwrap();
        t.abort_ok(10).unwrap();
        assert_eq!(t.last_committed_epoch(), None);
        assert_eq!(t.record(1).unwrap().state, RecordState::Aborted);
        committed_cycle(&mut t, 1, 20, 7);
        assert_eq!(t.records().count(), 2);
        assert_eq!(t.record(1).unwrap().state, RecordState::Committed);
        let m = t.metrics();
        assert_eq!(
            (m.commits, m.aborts, m.events_written, m.events_committed),
            (1, 1, 14, 10)
        );
    }

    #[test]
    fn failed_commit_waits_for_recovery() {
        let mut t = EpochTracker::default();
        t.begin(7, 0).unwrap();
        t.commit_started(1, None).unwrap();
        t.commit_failed().unwrap();
        assert_eq!(t.state(), TransactionState::Failed(7));
        assert!(t.begin(8, 2).is_err());
        assert!(t.abort_started(None).is_err());
        assert!(t.set_last_committed_epoch(Some(7)).is_err());
        assert!(t.resolve(InDoubtOutcome::Committed, 3, Some(6)).is_err());
        t.resolve(InDoubtOutcome::Committed, 3, Some(7)).unwrap();
        assert_eq!(t.last_committed_epoch(), Some(7));
        let m = t.metrics();
        assert_eq!((m.commits, m.commit_failures), (1, 1));
        // Recovery's commit carries no latency sample: the commit was not confirmed here.
        assert_eq!(m.max_commit_latency_us, 0);
        assert_eq!(t.record(7).unwrap().commit_latency_us(), None);
        assert!(t.record(7).unwrap().resolved_by_recovery);
    }

    #[test]
    fn failed_abort_resolved_as_aborted() {
        let mut t = EpochTracker::default();
        t.begin(2, 0).unwrap();
        t.prepare(None).unwrap();
        t.abort_started(None).unwrap();
        t.abort_failed().unwrap();
        assert_eq!(t.record(2).unwrap().state, RecordState::Failed);
        t.resolve(InDoubtOutcome::Aborted, 9, None).unwrap();
        assert_eq!(t.state(), TransactionState::Idle);
        assert_eq!(t.last_committed_epoch(), None);
        let m = t.metrics();
        assert_eq!((m.aborts, m.abort_failures), (1, 1));
    }

    #[test]
    fn history_is_bounded() {
        let mut t = EpochTracker::new(4);
        for e in 0..10 {
            committed_cycle(&mut t, e, e as u64 * 100, 1);
        }
        let kept: Vec<Epoch> = t.records().map(|r| r.epoch).collect();
        assert_eq!(kept, vec![6, 7, 8, 9]);
        assert!(t.record(5).is_none());
        assert_eq!(t.metrics().commits, 10);
        assert_eq!(EpochTracker::new(0).history_limit(), 1);
    }

    #[test]
    fn setting_a_negative_last_committed_epoch_is_refused() {
        let mut t = EpochTracker::default();
        assert!(t.set_last_committed_epoch(Some(-1)).is_err());
        assert_eq!(t.last_committed_epoch(), None);
    }

    #[test]
    fn latency_quantiles() {
        let mut t = EpochTracker::default();
        for e in 0..100 {
            committed_cycle(&mut t, e, 1_000_000 * e as u64, 1_000 + e as u64 * 10);
        }
        let m = t.metrics();
        assert_eq!(m.max_commit_latency_us, 1_990);
        assert!((m.avg_commit_latency_us - 1_495.0).abs() < 1e-9);
        assert!(m.p50_commit_latency_us.abs_diff(1_490) <= 15, "{m:?}");
        assert!(m.p99_commit_latency_us.abs_diff(1_980) <= 20, "{m:?}");
    }

    #[derive(Debug, Clone, Copy)]
    enum Op {
        Begin(Epoch),
        Write(u64),
        Prepare,
        CommitStarted,
        CommitOk,
        CommitFailed,
        AbortStarted,
        AbortOk,
        AbortFailed,
        Resolve(bool),
        SetLast(Epoch),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0i64..20).prop_map(Op::Begin),
            (0u64..5).prop_map(Op::Write),
            Just(Op::Prepare),
            Just(Op::CommitStarted),
            Just(Op::CommitOk),
            Just(Op::CommitFailed),
            Just(Op::AbortStarted),
            Just(Op::AbortOk),
            Just(Op::AbortFailed),
            any::<bool>().prop_map(Op::Resolve),
            (0i64..20).prop_map(Op::SetLast),
        ]
    }

    proptest! {
        /// Any sequence of calls: failures change nothing, the last committed epoch never goes
        /// backwards except by an explicit set, and counters add up.
        #[test]
        fn random_call_sequences_keep_the_invariants(ops in proptest::collection::vec(op(), 0..60)) {
            let mut t = EpochTracker::new(8);
            let mut now = 0u64;
            for op in ops {
                now += 3;
                let before = t.clone();
                let result = match op {
                    Op::Begin(e) => t.begin(e, now).map(|_| ()),
                    Op::Write(n) => t.record_write(n, n * 10),
                    Op::Prepare => t.prepare(None),
                    Op::CommitStarted => t.commit_started(now, None),
                    Op::CommitOk => t.commit_ok(now),
                    Op::CommitFailed => t.commit_failed(),
                    Op::AbortStarted => t.abort_started(None),
                    Op::AbortOk => t.abort_ok(now),
                    Op::AbortFailed => t.abort_failed(),
                    Op::Resolve(c) => t.resolve(
                        if c { InDoubtOutcome::Committed } else { InDoubtOutcome::Aborted }, now, None),
                    Op::SetLast(e) => t.set_last_committed_epoch(Some(e)),
                };
                match result {
                    Err(CoreError::IllegalState(_)) => {
                        prop_assert_eq!(t.state(), before.state());
                        prop_assert_eq!(t.records().collect::<Vec<_>>(), before.records().collect::<Vec<_>>());
                        prop_assert_eq!(t.metrics(), before.metrics());
                        prop_assert_eq!(t.last_committed_epoch(), before.last_committed_epoch());
                    }
                    Err(other) => prop_assert!(false, "unexpected error {other:?}"),
                    Ok(()) => {
                        if !matches!(op, Op::SetLast(_)) {
                            prop_assert!(t.last_committed_epoch() >= before.last_committed_epoch());
                        }
                    }
                }
                prop_assert!(t.records().count() <= 8);
                // The open transaction, if any, is the newest record and mirrors the state.
                if let Some(open) = t.current_epoch() {
                    let newest = t.records().next_back();
                    prop_assert_eq!(newest.map(|r| r.epoch), Some(open));
                    prop_assert_eq!(
                        newest.map(|r| r.state.name()),
                        Some(t.state().kind().name())
                    );
                    prop_assert!(t.state().kind() != StateKind::Idle);
                }
                let m = t.metrics();
                prop_assert!(m.events_committed <= m.events_written);
                prop_assert!(m.p50_commit_latency_us <= m.max_commit_latency_us);
                prop_assert!(m.p99_commit_latency_us <= m.max_commit_latency_us);
            }
        }
    }
}
