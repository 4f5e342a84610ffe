//! A simulated two-participant world for the protocol tests: an in-memory Kafka (transactional
//! ids, producer epochs, fencing, prepared transactions that time out on a simulated clock,
//! `EndTxn`, epoch markers) and an in-memory PostgreSQL (atomic transactions over the rows, the
//! epoch records, `txn_state`, the redo log, the group's generation), driven by a coordinator
//! that follows docs/protocol.md §3 step by step and asks [`super::atomic`] every question.
//!
//! The tests crash the coordinator at every step of every epoch (and at every step of its
//! recovery), restart it as Spark would (replaying the batch whose `foreachBatch` did not
//! return), and check the invariant after every step: each epoch's rows are in each store at most
//! once, Kafka is never ahead of the decision log, and after a restart's recovery Postgres is
//! never ahead of Kafka for longer than the one replay; at the end every epoch is in every store
//! exactly once.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;

use super::atomic::{
    Completion, DecisionRecord, EpochPlan, KafkaPart, ProducerIdentity, SinkProgress,
    complete_kafka, plan_epoch,
};
use super::{Epoch, RefusalKind, check_generation};

const ROWS: u32 = 3;

/// Where the coordinator can die.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Point {
    /// After step N of an epoch (1..=8).
    Step(u8),
    /// After the start-up's generation bump.
    AfterFence,
    /// After a recovery `EndTxn`.
    AfterEndTxn,
    /// After the new producers' `init_transactions`.
    AfterInit,
    /// Halfway through re-producing the redo log.
    MidRedo,
    /// After the redo transaction's commit, before the redo rows are deleted.
    AfterRedoCommit,
}

const STEP_POINTS: [Point; 8] = [
    Point::Step(1),
    Point::Step(2),
    Point::Step(3),
    Point::Step(4),
    Point::Step(5),
    Point::Step(6),
    Point::Step(7),
    Point::Step(8),
];
const RECOVERY_POINTS: [Point; 5] = [
    Point::AfterFence,
    Point::AfterEndTxn,
    Point::AfterInit,
    Point::MidRedo,
    Point::AfterRedoCommit,
];

// -- the in-memory Kafka ----------------------------------------------------------------------

#[derive(Debug, Clone)]
struct OpenTxn {
    producer_epoch: i32,
    records: Vec<(Epoch, u32)>,
    marker: Option<Epoch>,
    started_ms: u64,
}

#[derive(Debug, Clone, Default)]
struct Tid {
    producer_id: i64,
    producer_epoch: i32,
    open: Option<OpenTxn>,
    marker: Option<Epoch>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KafkaErr {
    Fenced,
    NoTransaction,
}

#[derive(Debug, Clone, Default)]
struct Kafka {
    now_ms: u64,
    timeout_ms: u64,
    next_producer_id: i64,
    tids: BTreeMap<String, Tid>,
    /// Committed records: (transactional id, epoch, row).
    committed: Vec<(String, Epoch, u32)>,
}

impl Kafka {
    fn new(timeout_ms: u64) -> Self {
        Self {
            timeout_ms,
            next_producer_id: 1000,
            ..Self::default()
        }
    }

    fn tid(&mut self, tid: &str) -> &mut Tid {
        self.tids.entry(tid.to_owned()).or_default()
    }

    /// A new producer: fences the previous one, aborts its open transaction.
    fn init_transactions(&mut self, tid: &str) -> (i64, i32) {
        let fresh = self.next_producer_id;
        let t = self.tids.entry(tid.to_owned()).or_default();
        if t.producer_id == 0 {
            t.producer_id = fresh;
            self.next_producer_id += 1;
        } else {
            t.producer_epoch += 1;
        }
        t.open = None;
        (t.producer_id, t.producer_epoch)
    }

    fn check(&mut self, tid: &str, epoch: i32) -> Result<&mut Tid, KafkaErr> {
        let t = self.tid(tid);
        if t.producer_epoch != epoch {
            return Err(KafkaErr::Fenced);
        }
        Ok(t)
    }

    fn begin(&mut self, tid: &str, epoch: i32) -> Result<(), KafkaErr> {
        let now = self.now_ms;
        let t = self.check(tid, epoch)?;
        t.open = Some(OpenTxn {
            producer_epoch: epoch,
            records: Vec::new(),
            marker: None,
            started_ms: now,
        });
        Ok(())
    }

    fn produce(&mut self, tid: &str, epoch: i32, rec: (Epoch, u32), marker: Epoch) {
        if let Ok(t) = self.check(tid, epoch) {
            if let Some(open) = t.open.as_mut() {
                open.records.push(rec);
                open.marker = Some(marker);
            }
        }
    }

    fn finish(&mut self, tid: &str, commit: bool) {
        let t = self.tid(tid);
        let Some(open) = t.open.take() else { return };
        if commit {
            if let Some(m) = open.marker {
                t.marker = Some(m);
            }
            let tid = tid.to_owned();
            self.committed
                .extend(open.records.iter().map(|(e, r)| (tid.clone(), *e, *r)));
        }
    }

    fn commit(&mut self, tid: &str, epoch: i32) -> Result<(), KafkaErr> {
        let t = self.check(tid, epoch)?;
        if t.open.is_none() {
            return Err(KafkaErr::NoTransaction);
        }
        self.finish(tid, true);
        Ok(())
    }

    /// Protocol-level completion with a recorded producer identity.
    fn end_txn(&mut self, tid: &str, id: ProducerIdentity, commit: bool) -> Result<(), KafkaErr> {
        let t = self.tid(tid);
        if t.producer_id != id.producer_id || t.producer_epoch != id.producer_epoch {
            return Err(KafkaErr::Fenced);
        }
        match &t.open {
            Some(open) if open.producer_epoch == id.producer_epoch => {
                self.finish(tid, commit);
                Ok(())
            }
            _ => Err(KafkaErr::NoTransaction),
        }
    }

    /// Advances the clock; the broker aborts transactions open longer than its timeout (and
    /// bumps the producer epoch, as Kafka does).
    fn advance(&mut self, ms: u64) {
        self.now_ms += ms;
        let now = self.now_ms;
        let timeout = self.timeout_ms;
        for t in self.tids.values_mut() {
            if t.open
                .as_ref()
                .is_some_and(|o| now - o.started_ms > timeout)
            {
                t.open = None;
                t.producer_epoch += 1;
            }
        }
    }

    fn marker(&self, tid: &str) -> Option<Epoch> {
        self.tids.get(tid).and_then(|t| t.marker)
    }
}

// -- the in-memory PostgreSQL ------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq, Eq)]
struct TxnRow {
    epoch: Epoch,
    previous: Option<Epoch>,
    producer: Option<ProducerIdentity>,
    corrupt: bool,
}

#[derive(Debug, Clone, Default)]
struct Pg {
    rows: Vec<(String, Epoch, u32)>,
    sink_epochs: BTreeMap<String, Epoch>,
    txn_state: BTreeMap<String, TxnRow>,
    redo: BTreeMap<(String, Epoch), Vec<(Epoch, u32)>>,
    generation: i64,
}

// -- the coordinator under test ----------------------------------------------------------------

#[derive(Debug, Clone)]
struct Config {
    pg_sinks: Vec<String>,
    kafka_sinks: Vec<String>,
    redo_log: bool,
}

#[derive(Debug)]
enum Stop {
    /// The process died at a crash point.
    Crashed,
    /// The epoch did not complete (Spark retries it); the coordinator keeps running.
    Retry,
    /// A refusal.
    Refused(RefusalKind),
}

struct World {
    kafka: Kafka,
    pg: Pg,
    config: Config,
    crash_at: Option<(Point, u32)>,
    reached: BTreeMap<Point, u32>,
    /// Every crash point passed, for coverage.
    seen: BTreeSet<Point>,
    /// The broker is slow: a step takes this long (drives timeouts).
    step_ms: u64,
    /// At the n-th time a point is reached, the process stalls this long (ms).
    stall: Option<(Point, u32, u64)>,
}

impl World {
    fn new(config: Config, timeout_ms: u64) -> Self {
        Self {
            kafka: Kafka::new(timeout_ms),
            pg: Pg::default(),
            config,
            crash_at: None,
            reached: BTreeMap::new(),
            seen: BTreeSet::new(),
            step_ms: 1,
            stall: None,
        }
    }

    /// Called at each crash point: checks the invariant, then dies if this is the chosen one.
    fn point(&mut self, p: Point) -> Result<(), Stop> {
        self.kafka.advance(self.step_ms);
        self.check_safety();
        self.seen.insert(p);
        let n = self.reached.entry(p).or_insert(0);
        *n += 1;
        let n = *n;
        if let Some((at, nth, ms)) = self.stall {
            if at == p && nth == n {
                self.kafka.advance(ms);
            }
        }
        if self.crash_at == Some((p, n)) {
            self.crash_at = None;
            return Err(Stop::Crashed);
        }
        Ok(())
    }

    /// What must hold at every instant: nothing twice, Kafka never ahead of the decision log.
    fn check_safety(&self) {
        let mut pg = BTreeSet::new();
        for r in &self.pg.rows {
            assert!(pg.insert(r.clone()), "row in Postgres twice: {r:?}");
        }
        let mut kafka = BTreeSet::new();
        for r in &self.kafka.committed {
            assert!(kafka.insert(r.clone()), "record in Kafka twice: {r:?}");
        }
        for tid in &self.config.kafka_sinks {
            let k = self.kafka.marker(tid);
            let d = self.pg.txn_state.get(tid).map(|row| row.epoch);
            assert!(
                k <= d,
                "Kafka {tid} at {k:?} ahead of the decision log {d:?}"
            );
        }
    }
}

struct Coordinator {
    generation: i64,
    producers: BTreeMap<String, i32>,
    awaiting: Vec<(String, Epoch)>,
}

impl Coordinator {
    /// Start-up: fence, then bring every Kafka sink level with the decision log.
    fn start(w: &mut World) -> Result<Self, Stop> {
        w.pg.generation += 1;
        let generation = w.pg.generation;
        w.point(Point::AfterFence)?;
        let mut me = Self {
            generation,
            producers: BTreeMap::new(),
            awaiting: Vec::new(),
        };
        let tids = w.config.kafka_sinks.clone();
        me.settle(w, &tids)?;
        Ok(me)
    }

    /// The recovery recipe for some Kafka sinks: protocol-level completion first (before any
    /// new producer exists for them), then new producers (fencing the old ones and aborting what
    /// was not decided), then the redo log or the wait for the replay.
    fn settle(&mut self, w: &mut World, tids: &[String]) -> Result<(), Stop> {
        for tid in tids {
            let mut refused = false;
            loop {
                match complete_kafka(tid, &part(w, tid, refused)) {
                    Completion::EndTxn { producer, .. } => {
                        let _ = w.kafka.end_txn(tid, producer, true);
                        w.point(Point::AfterEndTxn)?;
                        // the marker says whether it worked: ask again
                        refused = true;
                    }
                    Completion::Refuse(r) => return Err(Stop::Refused(r.kind)),
                    _ => break,
                }
            }
        }
        for tid in tids {
            let (_, epoch) = w.kafka.init_transactions(tid);
            self.producers.insert(tid.clone(), epoch);
        }
        w.point(Point::AfterInit)?;
        for tid in tids {
            self.redo_or_await(w, tid)?;
        }
        Ok(())
    }

    /// After the new producer's init: `EndTxn` is no longer possible.
    fn redo_or_await(&mut self, w: &mut World, tid: &str) -> Result<(), Stop> {
        match complete_kafka(tid, &part(w, tid, true)) {
            Completion::Complete => Ok(()),
            Completion::RedoFromLog { epoch } => {
                let records =
                    w.pg.redo
                        .get(&(tid.to_owned(), epoch))
                        .cloned()
                        .unwrap_or_default();
                let pe = self.producers[tid];
                w.kafka.begin(tid, pe).map_err(|_| Stop::Retry)?;
                for (i, rec) in records.iter().enumerate() {
                    w.kafka.produce(tid, pe, *rec, epoch);
                    if i == records.len() / 2 {
                        w.point(Point::MidRedo)?;
                    }
                }
                if records.is_empty() {
                    w.kafka.produce_marker_only(tid, pe, epoch);
                }
                w.kafka.commit(tid, pe).map_err(|_| Stop::Retry)?;
                w.point(Point::AfterRedoCommit)?;
                w.pg.redo.retain(|(t, e), _| !(t == tid && *e <= epoch));
                Ok(())
            }
            Completion::AwaitReplay { epoch } => {
                if !self.awaiting.iter().any(|(t, _)| t == tid) {
                    self.awaiting.push((tid.to_owned(), epoch));
                }
                Ok(())
            }
            Completion::EndTxn { .. } => unreachable!("EndTxn is marked refused after init"),
            Completion::Refuse(r) => Err(Stop::Refused(r.kind)),
        }
    }

    fn progress(w: &World) -> Vec<SinkProgress> {
        let pg = w.config.pg_sinks.iter().map(|s| SinkProgress {
            sink_id: s.clone(),
            last: w.pg.sink_epochs.get(s).copied(),
        });
        let kafka = w.config.kafka_sinks.iter().map(|t| SinkProgress {
            sink_id: t.clone(),
            last: w.kafka.marker(t),
        });
        pg.chain(kafka).collect()
    }

    /// One `foreachBatch` call: the recipe, steps 1-8.
    fn write_epoch(&mut self, w: &mut World, epoch: Epoch) -> Result<(), Stop> {
        let sinks = Self::progress(w);
        let needs = match plan_epoch(epoch, &sinks, &self.awaiting, true) {
            EpochPlan::Skip => return Ok(()),
            EpochPlan::Refuse(r) => return Err(Stop::Refused(r.kind)),
            EpochPlan::Write { sinks } => sinks,
        };
        let n_pg = w.config.pg_sinks.len();
        let pg_needs: Vec<String> = w
            .config
            .pg_sinks
            .iter()
            .zip(&needs)
            .filter(|(_, n)| **n)
            .map(|(s, _)| s.clone())
            .collect();
        let kafka_needs: Vec<String> = w
            .config
            .kafka_sinks
            .iter()
            .zip(&needs[n_pg..])
            .filter(|(_, n)| **n)
            .map(|(s, _)| s.clone())
            .collect();
        // 1. begin PG (the fencing check under the row lock)
        let mut pending = w.pg.clone();
        check_generation("g", self.generation, w.pg.generation)
            .map_err(|r| Stop::Refused(r.kind))?;
        w.point(Point::Step(1))?;
        // 2. begin Kafka
        for tid in &kafka_needs {
            w.kafka
                .begin(tid, self.producers[tid])
                .map_err(|_| Stop::Refused(RefusalKind::Fenced))?;
        }
        w.point(Point::Step(2))?;
        // 3. produce + markers
        for tid in &kafka_needs {
            for row in 0..ROWS {
                w.kafka
                    .produce(tid, self.producers[tid], (epoch, row), epoch);
            }
        }
        w.point(Point::Step(3))?;
        // 4. prepare: flush, identities
        let mut prepared = BTreeMap::new();
        for tid in &kafka_needs {
            let t = &w.kafka.tids[tid];
            if t.open
                .as_ref()
                .is_none_or(|o| o.producer_epoch != self.producers[tid])
            {
                // the flush fails (timed out, fenced): abort the epoch, new producer, retry
                let (_, pe) = w.kafka.init_transactions(tid);
                self.producers.insert(tid.clone(), pe);
                return Err(Stop::Retry);
            }
            prepared.insert(
                tid.clone(),
                ProducerIdentity::known(t.producer_id, self.producers[tid]),
            );
        }
        w.point(Point::Step(4))?;
        // 5. rows, epoch records, redo (and the redo of earlier epochs is dropped)
        for s in &pg_needs {
            for row in 0..ROWS {
                pending.rows.push((s.clone(), epoch, row));
            }
            pending.sink_epochs.insert(s.clone(), epoch);
        }
        for tid in &kafka_needs {
            pending.redo.retain(|(t, e), _| !(t == tid && *e < epoch));
            if w.config.redo_log {
                pending.redo.insert(
                    (tid.clone(), epoch),
                    (0..ROWS).map(|r| (epoch, r)).collect(),
                );
            }
        }
        w.point(Point::Step(5))?;
        // 6. txn_state
        for tid in &kafka_needs {
            let previous = w.kafka.marker(tid);
            pending.txn_state.insert(
                tid.clone(),
                TxnRow {
                    epoch,
                    previous,
                    producer: prepared[tid],
                    corrupt: false,
                },
            );
        }
        w.point(Point::Step(6))?;
        // 7. COMMIT = the decision (the generation cannot change under the row lock)
        check_generation("g", self.generation, w.pg.generation)
            .map_err(|r| Stop::Refused(r.kind))?;
        let generation = w.pg.generation;
        w.pg = pending;
        w.pg.generation = generation;
        w.point(Point::Step(7))?;
        // 8. commit Kafka; a failure is completed from the decision, as at start-up
        let mut incomplete = Vec::new();
        for tid in &kafka_needs {
            if w.kafka.commit(tid, self.producers[tid]).is_err() {
                incomplete.push(tid.clone());
            }
        }
        w.point(Point::Step(8))?;
        if !incomplete.is_empty() {
            self.settle(w, &incomplete)?;
            if !self.awaiting.is_empty() {
                return Err(Stop::Retry);
            }
        }
        // a replay that completed Kafka ends the wait
        self.awaiting.retain(|(t, d)| w.kafka.marker(t) < Some(*d));
        Ok(())
    }
}

impl Kafka {
    fn produce_marker_only(&mut self, tid: &str, epoch: i32, marker: Epoch) {
        if let Ok(t) = self.check(tid, epoch) {
            if let Some(open) = t.open.as_mut() {
                open.marker = Some(marker);
            }
        }
    }
}

fn part(w: &World, tid: &str, end_txn_refused: bool) -> KafkaPart {
    let decision = match w.pg.txn_state.get(tid) {
        None => DecisionRecord::None,
        Some(row) if row.corrupt => DecisionRecord::Corrupt {
            reason: "bad crc".into(),
        },
        Some(row) => DecisionRecord::Decided {
            epoch: row.epoch,
            previous: row.previous,
            producer: row.producer,
        },
    };
    let redo_log = match &decision {
        DecisionRecord::Decided { epoch, .. } => w.pg.redo.contains_key(&(tid.to_owned(), *epoch)),
        _ => false,
    };
    KafkaPart {
        decision,
        marker: w.kafka.marker(tid),
        redo_log,
        end_txn_refused,
    }
}

// -- Spark: replays the batch whose foreachBatch did not return ----------------------------------

#[derive(Debug, Default)]
struct Run {
    restarts: u32,
    /// After a restart's recovery: how many epochs Postgres was ahead of some Kafka sink.
    max_lag_after_recovery: i64,
}

/// Runs batches `0..epochs`, restarting after every crash (and when an epoch must be retried),
/// until every batch returned. `before_restart` may change the world (e.g. let the broker time
/// transactions out). Panics if the invariant breaks.
fn run(w: &mut World, epochs: Epoch, mut before_restart: impl FnMut(&mut World)) -> Run {
    let mut out = Run::default();
    let mut next = 0;
    let mut coordinator: Option<Coordinator> = None;
    let mut guard = 0;
    while next < epochs {
        guard += 1;
        assert!(guard < 1000, "no progress");
        let c = match coordinator.as_mut() {
            Some(c) => c,
            None => match Coordinator::start(w) {
                Ok(c) => {
                    out.max_lag_after_recovery = out.max_lag_after_recovery.max(lag(w, &c));
                    coordinator.insert(c)
                }
                Err(Stop::Crashed) => {
                    out.restarts += 1;
                    before_restart(w);
                    continue;
                }
                Err(other) => panic!("start-up refused: {other:?}"),
            },
        };
        match c.write_epoch(w, next) {
            Ok(()) => next += 1,
            Err(Stop::Crashed) => {
                out.restarts += 1;
                coordinator = None;
                before_restart(w);
            }
            Err(Stop::Retry) => {}
            Err(Stop::Refused(kind)) => panic!("epoch {next} refused: {kind:?}"),
        }
    }
    check_exactly_once(w, epochs);
    out
}

/// How far Postgres is ahead of Kafka right after a recovery, not counting the epoch awaiting
/// its replay (which the very next call completes).
fn lag(w: &World, c: &Coordinator) -> i64 {
    let pg = w.pg.sink_epochs.values().copied().max().unwrap_or(-1);
    w.config
        .kafka_sinks
        .iter()
        .filter(|t| !c.awaiting.iter().any(|(a, _)| a == *t))
        .map(|t| pg - w.kafka.marker(t).unwrap_or(-1))
        .max()
        .unwrap_or(0)
}

fn check_exactly_once(w: &World, epochs: Epoch) {
    w.check_safety();
    for s in &w.config.pg_sinks {
        let got: BTreeSet<(Epoch, u32)> =
            w.pg.rows
                .iter()
                .filter(|(sink, _, _)| sink == s)
                .map(|(_, e, r)| (*e, *r))
                .collect();
        assert_eq!(
            got.len() as i64,
            epochs * i64::from(ROWS),
            "Postgres sink {s}"
        );
    }
    for t in &w.config.kafka_sinks {
        let got: BTreeSet<(Epoch, u32)> = w
            .kafka
            .committed
            .iter()
            .filter(|(tid, _, _)| tid == t)
            .map(|(_, e, r)| (*e, *r))
            .collect();
        assert_eq!(got.len() as i64, epochs * i64::from(ROWS), "Kafka sink {t}");
        assert_eq!(w.kafka.marker(t), Some(epochs - 1));
    }
}

fn config(pg: &[&str], kafka: &[&str], redo_log: bool) -> Config {
    Config {
        pg_sinks: pg.iter().map(|s| (*s).to_owned()).collect(),
        kafka_sinks: kafka.iter().map(|s| (*s).to_owned()).collect(),
        redo_log,
    }
}

const EPOCHS: Epoch = 4;

fn shapes() -> Vec<Config> {
    let mut out = Vec::new();
    for redo in [false, true] {
        out.push(config(&["pg"], &["k"], redo));
        out.push(config(&["pg1", "pg2"], &["k"], redo));
        out.push(config(&["pg"], &["k1", "k2"], redo));
    }
    out
}

#[test]
fn no_crash_writes_every_epoch_once() {
    for c in shapes() {
        let mut w = World::new(c, 1_000_000);
        let r = run(&mut w, EPOCHS, |_| {});
        assert_eq!(r.restarts, 0);
        assert_eq!(w.seen.len(), 8 + 2, "steps 1-8, fence and init");
    }
}

#[test]
fn a_crash_at_every_step_of_every_epoch_recovers_exactly_once() {
    for c in shapes() {
        for point in STEP_POINTS {
            for nth in 1..=EPOCHS as u32 {
                let mut w = World::new(c.clone(), 1_000_000);
                w.crash_at = Some((point, nth));
                let r = run(&mut w, EPOCHS, |_| {});
                assert_eq!(r.restarts, 1, "{point:?}#{nth}");
                assert_eq!(
                    r.max_lag_after_recovery, 0,
                    "{point:?}#{nth}: Postgres ahead of Kafka after recovery"
                );
            }
        }
    }
}

#[test]
fn a_crash_between_decision_and_commit_is_completed_by_endtxn_without_replay() {
    let mut w = World::new(config(&["pg"], &["k"], false), 1_000_000);
    w.crash_at = Some((Point::Step(7), 2));
    let r = run(&mut w, EPOCHS, |_| {});
    assert_eq!(r.restarts, 1);
    assert!(w.seen.contains(&Point::AfterEndTxn));
}

#[test]
fn when_the_broker_aborted_the_prepared_transaction_redo_or_replay_completes_it() {
    for redo in [false, true] {
        let mut w = World::new(config(&["pg"], &["k"], redo), 50);
        w.crash_at = Some((Point::Step(7), 2));
        // the writer stays down longer than the broker's transaction timeout
        let r = run(&mut w, EPOCHS, |w| w.kafka.advance(1_000));
        assert_eq!(r.restarts, 1);
        assert_eq!(r.max_lag_after_recovery, 0, "redo={redo}");
        assert_eq!(w.seen.contains(&Point::AfterRedoCommit), redo);
    }
}

#[test]
fn a_crash_at_every_recovery_step_recovers_exactly_once() {
    for c in shapes() {
        for timeout in [1_000_000, 50] {
            for point in RECOVERY_POINTS {
                let mut w = World::new(c.clone(), timeout);
                // first die between decision and Kafka commit, then die again in the recovery
                w.crash_at = Some((Point::Step(7), 2));
                let mut second = Some((point, 1));
                let r = run(&mut w, EPOCHS, |w| {
                    w.kafka.advance(1_000);
                    if let Some(s) = second.take() {
                        w.reached.clear();
                        w.crash_at = Some(s);
                    }
                });
                assert!(r.restarts >= 1);
            }
        }
    }
}

#[test]
fn a_kafka_commit_that_fails_after_the_decision_is_completed_in_process() {
    // the writer stalls between the decision and the Kafka commit, longer than the broker's
    // transaction timeout: the commit fails, the writer completes the epoch itself
    for redo in [false, true] {
        let mut w = World::new(config(&["pg"], &["k"], redo), 50);
        w.stall = Some((Point::Step(7), 2, 1_000));
        let r = run(&mut w, EPOCHS, |_| {});
        assert_eq!(r.restarts, 0);
        assert_eq!(w.seen.contains(&Point::AfterRedoCommit), redo);
    }
}

#[test]
fn a_zombie_coordinator_is_fenced_at_its_decision() {
    let mut w = World::new(config(&["pg"], &["k"], false), 1_000_000);
    let mut zombie = Coordinator::start(&mut w).ok().unwrap();
    zombie.write_epoch(&mut w, 0).ok().unwrap();
    // a new coordinator takes over while the old one is paused
    let mut fresh = Coordinator::start(&mut w).ok().unwrap();
    match zombie.write_epoch(&mut w, 1) {
        Err(Stop::Refused(RefusalKind::Fenced)) => {}
        other => panic!("the zombie must be fenced, got {other:?}"),
    }
    fresh.write_epoch(&mut w, 1).ok().unwrap();
    check_exactly_once(&w, 2);
}

#[test]
fn a_zombie_paused_between_decision_and_kafka_commit_commits_nothing_twice() {
    let mut w = World::new(config(&["pg"], &["k"], false), 1_000_000);
    let mut zombie = Coordinator::start(&mut w).ok().unwrap();
    w.crash_at = Some((Point::Step(7), 1));
    // "crashed" = paused here: the decision is committed, Kafka is not
    assert!(matches!(zombie.write_epoch(&mut w, 0), Err(Stop::Crashed)));
    let mut fresh = Coordinator::start(&mut w).ok().unwrap();
    assert_eq!(w.kafka.marker("k"), Some(0), "completed by EndTxn");
    // the zombie resumes with step 8: fenced, nothing twice
    assert!(w.kafka.commit("k", zombie.producers["k"]).is_err());
    fresh.write_epoch(&mut w, 0).ok().unwrap();
    fresh.write_epoch(&mut w, 1).ok().unwrap();
    check_exactly_once(&w, 2);
}

#[test]
fn a_corrupt_decision_stops_recovery_and_decides_nothing() {
    let mut w = World::new(config(&["pg"], &["k"], true), 1_000_000);
    w.crash_at = Some((Point::Step(7), 1));
    let mut c = Coordinator::start(&mut w).ok().unwrap();
    assert!(matches!(c.write_epoch(&mut w, 0), Err(Stop::Crashed)));
    if let Some(row) = w.pg.txn_state.get_mut("k") {
        row.corrupt = true;
    }
    let before = (w.kafka.committed.len(), w.kafka.marker("k"));
    assert!(matches!(
        Coordinator::start(&mut w),
        Err(Stop::Refused(RefusalKind::CorruptDecision))
    ));
    assert_eq!((w.kafka.committed.len(), w.kafka.marker("k")), before);
}

#[test]
fn another_epoch_while_one_awaits_its_replay_is_refused() {
    let mut w = World::new(config(&["pg"], &["k"], false), 50);
    w.crash_at = Some((Point::Step(7), 1));
    let mut c = Coordinator::start(&mut w).ok().unwrap();
    assert!(matches!(c.write_epoch(&mut w, 0), Err(Stop::Crashed)));
    w.kafka.advance(1_000);
    let mut c = Coordinator::start(&mut w).ok().unwrap();
    assert_eq!(c.awaiting, vec![("k".to_owned(), 0)]);
    assert!(matches!(
        c.write_epoch(&mut w, 1),
        Err(Stop::Refused(RefusalKind::OtherEpochWhileIncomplete))
    ));
    c.write_epoch(&mut w, 0).ok().unwrap();
    assert!(c.awaiting.is_empty());
    c.write_epoch(&mut w, 1).ok().unwrap();
    check_exactly_once(&w, 2);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Many crashes at random points (steps and recovery), random broker timeouts while down:
    /// every run ends with every epoch in every store exactly once.
    #[test]
    fn random_crash_schedules_always_end_exactly_once(
        shape in 0usize..6,
        crashes in proptest::collection::vec((0usize..13, 1u32..4, any::<bool>()), 0..8),
    ) {
        let mut w = World::new(shapes()[shape].clone(), 200);
        let all: Vec<Point> = STEP_POINTS.iter().chain(RECOVERY_POINTS.iter()).copied().collect();
        let mut schedule = crashes.into_iter();
        let arm = |w: &mut World, s: Option<(usize, u32, bool)>| {
            if let Some((p, nth, slow)) = s {
                w.reached.clear();
                w.crash_at = Some((all[p], nth));
                if slow {
                    w.kafka.advance(1_000);
                }
            }
        };
        arm(&mut w, schedule.next());
        run(&mut w, 6, |w| arm(w, schedule.next()));
    }
}
