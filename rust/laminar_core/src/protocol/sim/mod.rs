//! The simulation: the protocol machines that ship, driven against an in-memory Kafka
//! ([`kafka`]) and PostgreSQL ([`pg`]) on a simulated clock, killed at every crash point of
//! [`CrashPoint::ALL`] (docs/engine.md, "Simulation").
//!
//! The driver ([`driver`]) only performs commands — it contains no protocol logic — so what is
//! proven here is the sequence that runs in production. Tests restart the writer as Spark would
//! (replaying the batch whose `foreachBatch` did not return) and check after every crash point
//! that nothing is in a store twice and that Kafka is never ahead of the decision log; at the
//! end, every epoch is in every store exactly once.

mod db;
mod driver;
mod kafka;
mod pg;
mod sinks;
mod tasks;

mod atomic_tests;
mod resume_tests;
mod scaleout_tests;
mod single_tests;
mod sinks_tests;
mod stop_fence_tests;

use std::collections::{BTreeMap, BTreeSet};

use crate::protocol::Epoch;
use crate::protocol::crash::{CrashPoint, Protocol};
use crate::protocol::names::participant_base;

pub(super) use driver::{Crash, Proc, drive};

/// A row of an epoch: (epoch, row number).
pub(super) type Record = (Epoch, u32);

/// Which attempt of a partition the coordinator collects when a twin ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Collected {
    First,
    Second,
}

/// How the scale-out tasks behave.
#[derive(Debug, Clone, Default)]
pub(super) struct TaskPlan {
    /// Partitions per epoch.
    pub parts: u32,
    /// A speculative twin of partition 0 on the first run of an epoch, and which result is
    /// collected.
    pub twin: Option<Collected>,
    /// This partition fails every attempt (the job fails) on the first run of an epoch.
    pub fail_part: Option<u32>,
    /// Epochs whose first run happened (twins and failures happen once).
    pub ran: BTreeSet<Epoch>,
    /// The data source (docs/spark.md): the tasks run before the coordinator and create the
    /// epoch's record; `RunTasks` answers with the results they sent (`sent`).
    pub create_record: bool,
    /// The results the data source's tasks sent the driver, per epoch.
    pub sent: BTreeMap<Epoch, Vec<super::command::ParticipantResult>>,
    /// The data source: the token of the writer whose tasks run (None: they name none).
    pub writer: Option<String>,
}

/// The simulated world.
pub(super) struct World {
    pub kafka: kafka::Kafka,
    pub pg: pg::Pg,
    pub pg_sinks: Vec<String>,
    pub kafka_sinks: Vec<String>,
    /// Rows per epoch.
    pub rows: u32,
    pub tasks: TaskPlan,
    pub crash_at: Option<(CrashPoint, u32)>,
    pub reached: BTreeMap<CrashPoint, u32>,
    /// Every crash point passed, for coverage.
    pub seen: BTreeSet<CrashPoint>,
    /// Each step takes this long (drives the broker's timeouts).
    pub step_ms: u64,
    /// At the n-th time a point is reached, the process stalls this long.
    pub stall: Option<(CrashPoint, u32, u64)>,
    /// The next commit of the decision (or of a lone sink) loses its answer; `bool`: whether it
    /// committed.
    pub lose_commit: Option<bool>,
    /// Kafka sinks have decision rows (false: lone sinks, whose marker is their only record).
    pub decision_log: bool,
}

impl World {
    pub fn new(pg_sinks: &[&str], kafka_sinks: &[&str], timeout_ms: u64) -> Self {
        Self {
            kafka: kafka::Kafka::new(timeout_ms),
            pg: pg::Pg::default(),
            pg_sinks: pg_sinks.iter().map(|s| (*s).to_owned()).collect(),
            kafka_sinks: kafka_sinks.iter().map(|s| (*s).to_owned()).collect(),
            rows: 3,
            tasks: TaskPlan {
                parts: 3,
                ..TaskPlan::default()
            },
            crash_at: None,
            reached: BTreeMap::new(),
            seen: BTreeSet::new(),
            step_ms: 1,
            stall: None,
            lose_commit: None,
            decision_log: true,
        }
    }

    /// Called at each crash point: checks the invariants, then dies if this is the chosen one.
    pub fn point(&mut self, p: CrashPoint) -> Result<(), Crash> {
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
            return Err(Crash);
        }
        Ok(())
    }

    /// The base sink a Kafka transactional id writes for (a participant's base).
    pub fn kafka_base<'a>(&self, tid: &'a str) -> Option<&'a str> {
        if self.kafka_sinks.iter().any(|k| k == tid) {
            return Some(tid);
        }
        participant_base(tid)
            .map(|(base, _)| base)
            .filter(|base| self.kafka_sinks.iter().any(|k| k == base))
    }

    /// What must hold at every instant: nothing twice, Kafka never ahead of the decision log.
    pub fn check_safety(&self) {
        let mut pg = BTreeSet::new();
        for r in &self.pg.rows {
            assert!(pg.insert(r.clone()), "row in PostgreSQL twice: {r:?}");
        }
        let mut kafka = BTreeSet::new();
        for (tid, r) in &self.kafka.committed {
            let base = self.kafka_base(tid).unwrap_or(tid);
            assert!(
                kafka.insert((base, *r)),
                "record in Kafka twice: {base} {r:?}"
            );
        }
        for (tid, t) in &self.kafka.tids {
            if !self.decision_log || self.kafka_base(tid).is_none() {
                continue;
            }
            let decided = self.pg.txn_state.get(tid).map(|row| row.epoch);
            assert!(
                t.marker <= decided,
                "Kafka {tid} at {:?} ahead of the decision log {decided:?}",
                t.marker
            );
        }
    }

    /// At the end: every epoch's rows in every store exactly once, nothing left prepared or
    /// undecided.
    pub fn check_exactly_once(&self, epochs: Epoch) {
        self.check_safety();
        let all: BTreeSet<Record> = (0..epochs)
            .flat_map(|e| (0..self.rows).map(move |r| (e, r)))
            .collect();
        for s in &self.pg_sinks {
            let got: BTreeSet<Record> = self
                .pg
                .rows
                .iter()
                .filter(|(sink, _)| sink == s)
                .map(|(_, r)| *r)
                .collect();
            assert_eq!(got, all, "PostgreSQL sink {s}");
        }
        for t in &self.kafka_sinks {
            let got: BTreeSet<Record> = self
                .kafka
                .committed
                .iter()
                .filter(|(tid, _)| self.kafka_base(tid) == Some(t))
                .map(|(_, r)| *r)
                .collect();
            assert_eq!(got, all, "Kafka sink {t}");
        }
        assert!(
            self.pg.prepared.is_empty(),
            "left prepared: {:?}",
            self.pg.prepared.keys()
        );
        assert!(
            self.pg.dt_state.is_empty(),
            "left undecided: {:?}",
            self.pg.dt_state
        );
    }

    /// The rows of partition `part` of an epoch.
    pub fn partition(&self, part: u32) -> Vec<u32> {
        (0..self.rows)
            .filter(|r| r % self.tasks.parts.max(1) == part)
            .collect()
    }
}

/// The crash points a scenario family walks.
pub(super) fn points_of(protocols: &[Protocol]) -> Vec<CrashPoint> {
    CrashPoint::ALL
        .iter()
        .copied()
        .filter(|p| protocols.contains(&p.protocol()))
        .collect()
}

#[test]
fn every_crash_point_is_reached_by_some_simulation() {
    // each family records what it reached; together they cover the enum (a new point that no
    // scenario reaches fails here, and a scenario is added for it)
    let mut seen = BTreeSet::new();
    seen.extend(atomic_tests::coverage());
    seen.extend(scaleout_tests::coverage());
    seen.extend(single_tests::coverage());
    let missing: Vec<&str> = CrashPoint::ALL
        .iter()
        .filter(|p| !seen.contains(p))
        .map(|p| p.name())
        .collect();
    assert!(
        missing.is_empty(),
        "crash points no simulation reaches: {missing:?}"
    );
}
