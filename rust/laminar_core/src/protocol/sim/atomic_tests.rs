//! The atomic group ([`AtomicGroup`]) in the simulation: every crash point of the atomic,
//! recovery, Kafka and PostgreSQL protocols, from the enum, at every epoch; the broker aborting
//! prepared transactions while the writer is down; zombies; a corrupt decision; a lost decision
//! answer; random crash schedules.

use std::collections::BTreeSet;

use proptest::prelude::*;

use crate::protocol::atomic::{AtomicGroup, GroupConfig};
use crate::protocol::crash::{CrashPoint, Protocol};
use crate::protocol::sim::{Crash, Proc, World, drive, points_of};
use crate::protocol::{End, Epoch, Machine, RefusalKind};

const EPOCHS: Epoch = 4;

pub(super) fn config(w: &World, redo_log: bool) -> GroupConfig {
    GroupConfig {
        group_id: "g".into(),
        postgres: w.pg_sinks.clone(),
        kafka: w.kafka_sinks.clone(),
        redo_log,
        owner: Some("query".into()),
        restart_on_new_query: false,
        retries: 0,
        retry_backoff_ms: 10,
        scale_out: false,
    }
}

/// One writer process.
pub(super) struct Writer {
    pub proc: Proc,
    pub group: AtomicGroup,
}

impl Writer {
    pub fn start(w: &mut World, config: &GroupConfig) -> Result<(Self, End), Crash> {
        let mut me = Self {
            proc: Proc::default(),
            group: AtomicGroup::new(config.clone()),
        };
        me.group.start();
        let end = drive(w, &mut me.proc, &mut me.group)?;
        Ok((me, end))
    }

    pub fn write(&mut self, w: &mut World, batch: Epoch) -> Result<End, Crash> {
        self.group.write_epoch(batch);
        drive(w, &mut self.proc, &mut self.group)
    }
}

#[derive(Debug, Default)]
pub(super) struct Run {
    pub restarts: u32,
    /// After a restart's recovery: how many epochs PostgreSQL was ahead of a Kafka sink not
    /// awaiting its replay.
    pub max_lag_after_recovery: i64,
}

pub(super) fn retryable(end: &End) -> bool {
    match end {
        End::Refused(r) => r.kind.retryable(),
        End::Failed(f) => matches!(
            f.kind,
            super::super::FailureKind::Abortable { .. } | super::super::FailureKind::InDoubt
        ),
        End::Ok => false,
    }
}

/// Runs batches `0..epochs` as Spark would: a batch whose call did not return is replayed, by
/// the same writer (an error) or by a restarted one (a crash). Panics if an invariant breaks.
pub(super) fn run(
    w: &mut World,
    config: &GroupConfig,
    epochs: Epoch,
    mut before_restart: impl FnMut(&mut World),
) -> Run {
    let mut out = Run::default();
    let mut next = 0;
    let mut writer: Option<Writer> = None;
    let mut guard = 0;
    while next < epochs {
        guard += 1;
        assert!(guard < 1000, "no progress");
        let current = match writer.as_mut() {
            Some(current) => current,
            None => match Writer::start(w, config) {
                Ok((started, End::Ok)) => {
                    out.max_lag_after_recovery =
                        out.max_lag_after_recovery.max(lag(w, &started.group));
                    writer.insert(started)
                }
                Ok((_, end)) if retryable(&end) => continue,
                Ok((_, end)) => panic!("start-up refused: {end:?}"),
                Err(Crash) => {
                    out.restarts += 1;
                    before_restart(w);
                    continue;
                }
            },
        };
        match current.write(w, next) {
            Ok(End::Ok) => next += 1,
            Ok(end) if retryable(&end) => {}
            Ok(end) => panic!("batch {next} refused: {end:?}"),
            Err(Crash) => {
                out.restarts += 1;
                writer = None;
                before_restart(w);
            }
        }
    }
    w.check_exactly_once(epochs);
    out
}

/// How far PostgreSQL is ahead of Kafka right after a recovery, not counting a sink awaiting
/// its replay (which the very next call completes).
fn lag(w: &World, group: &AtomicGroup) -> i64 {
    let pg = w.pg.sink_epochs.values().copied().max().unwrap_or(-1);
    w.kafka_sinks
        .iter()
        .filter(|t| !group.awaiting().iter().any(|(a, _)| a == *t))
        .map(|t| pg - w.kafka.marker(t).unwrap_or(-1))
        .max()
        .unwrap_or(0)
}

pub(super) fn shapes() -> Vec<(World, bool)> {
    let mut out = Vec::new();
    for redo in [false, true] {
        out.push((World::new(&["pg"], &["k"], 1_000_000), redo));
        out.push((World::new(&["pg1", "pg2"], &["k"], 1_000_000), redo));
        out.push((World::new(&["pg"], &["k1", "k2"], 1_000_000), redo));
    }
    out
}

fn fresh(template: &World, timeout_ms: u64) -> World {
    let pg: Vec<&str> = template.pg_sinks.iter().map(String::as_str).collect();
    let kafka: Vec<&str> = template.kafka_sinks.iter().map(String::as_str).collect();
    World::new(&pg, &kafka, timeout_ms)
}

/// The points this family walks, and whether each was reached.
pub(super) fn coverage() -> BTreeSet<CrashPoint> {
    let mut reached = BTreeSet::new();
    for (template, redo) in shapes() {
        let mut w = fresh(&template, 50);
        let c = config(&w, redo);
        w.crash_at = Some((CrashPoint::AtomicAfterDecision, 2));
        run(&mut w, &c, EPOCHS, |w| w.kafka.advance(1_000));
        reached.extend(w.seen);
        let mut w = fresh(&template, 1_000_000);
        w.crash_at = Some((CrashPoint::AtomicAfterDecision, 2));
        run(&mut w, &c, EPOCHS, |_| {});
        reached.extend(w.seen);
    }
    reached
}

#[test]
fn no_crash_writes_every_epoch_once() {
    for (mut w, redo) in shapes() {
        let c = config(&w, redo);
        let r = run(&mut w, &c, EPOCHS, |_| {});
        assert_eq!(r.restarts, 0);
        for p in CrashPoint::for_protocol(Protocol::Atomic) {
            assert!(w.seen.contains(&p), "{p} not reached");
        }
        assert!(w.seen.contains(&CrashPoint::RecoveryAfterInit));
    }
}

/// Every crash point of these protocols, taken from the enum: crashed at its n-th occurrence
/// in a fresh run, and again in a run whose first crash (after a decision) sends the restart
/// through recovery. Each point must be reached by some run.
#[test]
fn a_crash_at_every_point_of_the_enum_recovers_exactly_once() {
    let walked = points_of(&[Protocol::Atomic, Protocol::Recovery, Protocol::Kafka]);
    let mut crashed: BTreeSet<CrashPoint> = BTreeSet::new();
    for (template, redo) in shapes() {
        for timeout in [1_000_000, 50] {
            for &point in &walked {
                for nth in 1..=EPOCHS as u32 {
                    // a crash at the point in a fresh run
                    let mut w = fresh(&template, timeout);
                    let c = config(&w, redo);
                    w.crash_at = Some((point, nth));
                    let r = run(&mut w, &c, EPOCHS, |w| w.kafka.advance(1_000));
                    if w.crash_at.is_none() {
                        crashed.insert(point);
                        assert!(r.restarts >= 1);
                    }
                    // the same point after a first crash between decision and Kafka commit
                    let mut w = fresh(&template, timeout);
                    w.crash_at = Some((CrashPoint::AtomicAfterDecision, 2));
                    let mut second = Some((point, nth));
                    run(&mut w, &c, EPOCHS, |w| {
                        w.kafka.advance(1_000);
                        if let Some(s) = second.take() {
                            w.reached.clear();
                            w.crash_at = Some(s);
                        }
                    });
                    if second.is_none() && w.crash_at.is_none() {
                        crashed.insert(point);
                    }
                }
            }
        }
    }
    let never: Vec<&str> = walked
        .iter()
        .filter(|p| !crashed.contains(p))
        .map(|p| p.name())
        .collect();
    assert!(never.is_empty(), "never crashed at {never:?}");
}

#[test]
fn postgres_is_never_ahead_of_kafka_after_a_recovery() {
    for (template, redo) in shapes() {
        for point in CrashPoint::for_protocol(Protocol::Atomic) {
            let mut w = fresh(&template, 1_000_000);
            let c = config(&w, redo);
            w.crash_at = Some((point, 2));
            let r = run(&mut w, &c, EPOCHS, |_| {});
            assert_eq!(r.max_lag_after_recovery, 0, "{point}");
        }
    }
}

#[test]
fn a_crash_between_decision_and_commit_is_completed_by_endtxn_without_replay() {
    let mut w = World::new(&["pg"], &["k"], 1_000_000);
    let c = config(&w, false);
    w.crash_at = Some((CrashPoint::AtomicAfterDecision, 2));
    let r = run(&mut w, &c, EPOCHS, |_| {});
    assert_eq!(r.restarts, 1);
    assert!(w.seen.contains(&CrashPoint::RecoveryAfterEndTxn));
    assert!(!w.seen.contains(&CrashPoint::RecoveryAfterRedoCommit));
}

#[test]
fn when_the_broker_aborted_the_prepared_transaction_redo_or_replay_completes_it() {
    for redo in [false, true] {
        let mut w = World::new(&["pg"], &["k"], 50);
        let c = config(&w, redo);
        w.crash_at = Some((CrashPoint::AtomicAfterDecision, 2));
        let r = run(&mut w, &c, EPOCHS, |w| w.kafka.advance(1_000));
        assert_eq!(r.restarts, 1);
        assert_eq!(r.max_lag_after_recovery, 0, "redo={redo}");
        assert_eq!(w.seen.contains(&CrashPoint::RecoveryAfterRedoCommit), redo);
    }
}

#[test]
fn a_kafka_commit_that_fails_after_the_decision_is_completed_in_process() {
    for redo in [false, true] {
        let mut w = World::new(&["pg"], &["k"], 50);
        let c = config(&w, redo);
        // the writer stalls between decision and Kafka commit, past the broker's timeout
        w.stall = Some((CrashPoint::AtomicAfterDecision, 2, 1_000));
        let r = run(&mut w, &c, EPOCHS, |_| {});
        assert_eq!(r.restarts, 0);
        assert_eq!(w.seen.contains(&CrashPoint::RecoveryAfterRedoCommit), redo);
    }
}

#[test]
fn a_lost_decision_answer_is_read_back() {
    for committed in [true, false] {
        let mut w = World::new(&["pg"], &["k"], 1_000_000);
        let c = config(&w, false);
        let (mut writer, end) = Writer::start(&mut w, &c).expect("no crash");
        assert_eq!(end, End::Ok);
        w.lose_commit = Some(committed);
        let end = writer.write(&mut w, 0).expect("no crash");
        match (committed, end) {
            (true, End::Ok) => assert!(writer.group.committed()),
            (false, End::Refused(r)) => {
                assert_eq!(r.kind, RefusalKind::DecisionLost);
                assert_eq!(writer.write(&mut w, 0).expect("no crash"), End::Ok);
            }
            (c, end) => panic!("committed={c}: {end:?}"),
        }
        assert_eq!(writer.write(&mut w, 1).expect("no crash"), End::Ok);
        w.check_exactly_once(2);
    }
}

#[test]
fn a_zombie_coordinator_is_fenced_at_its_decision() {
    let mut w = World::new(&["pg"], &["k"], 1_000_000);
    let c = config(&w, false);
    let (mut zombie, _) = Writer::start(&mut w, &c).expect("no crash");
    assert_eq!(zombie.write(&mut w, 0).expect("no crash"), End::Ok);
    let (mut fresh, _) = Writer::start(&mut w, &c).expect("no crash");
    match zombie.write(&mut w, 1).expect("no crash") {
        End::Refused(r) => assert_eq!(r.kind, RefusalKind::Fenced),
        other => panic!("the zombie must be fenced, got {other:?}"),
    }
    assert_eq!(fresh.write(&mut w, 1).expect("no crash"), End::Ok);
    w.check_exactly_once(2);
}

#[test]
fn a_zombie_paused_between_decision_and_kafka_commit_commits_nothing_twice() {
    let mut w = World::new(&["pg"], &["k"], 1_000_000);
    let c = config(&w, false);
    let (mut zombie, _) = Writer::start(&mut w, &c).expect("no crash");
    w.crash_at = Some((CrashPoint::AtomicAfterDecision, 1));
    // "crashed" = paused here: the decision is committed, Kafka is not
    assert_eq!(zombie.write(&mut w, 0), Err(Crash));
    let (mut fresh, _) = Writer::start(&mut w, &c).expect("no crash");
    assert_eq!(w.kafka.marker("k"), Some(0), "completed by EndTxn");
    // the zombie resumes with step 8: its commit is fenced, and it stops before recovering
    zombie.group.handle(super::super::Event::Ack);
    match drive(&mut w, &mut zombie.proc, &mut zombie.group).expect("no crash") {
        End::Refused(r) => assert_eq!(r.kind, RefusalKind::Fenced),
        other => panic!("the zombie must stop, got {other:?}"),
    }
    assert_eq!(
        fresh.write(&mut w, 0).expect("no crash"),
        End::Ok,
        "a replay: skipped"
    );
    assert!(!fresh.group.committed());
    assert_eq!(
        fresh.write(&mut w, 1).expect("no crash"),
        End::Ok,
        "the new coordinator goes on"
    );
    w.check_exactly_once(2);
}

#[test]
fn a_corrupt_decision_stops_recovery_and_decides_nothing() {
    let mut w = World::new(&["pg"], &["k"], 1_000_000);
    let c = config(&w, true);
    let (mut writer, _) = Writer::start(&mut w, &c).expect("no crash");
    w.crash_at = Some((CrashPoint::AtomicAfterDecision, 1));
    assert_eq!(writer.write(&mut w, 0), Err(Crash));
    if let Some(row) = w.pg.txn_state.get_mut("k") {
        row.prepared_state = "lm1.garbage".into();
    }
    let before = (w.kafka.committed.len(), w.kafka.marker("k"));
    match Writer::start(&mut w, &c).expect("no crash").1 {
        End::Refused(r) => assert_eq!(r.kind, RefusalKind::CorruptDecision),
        other => panic!("{other:?}"),
    }
    assert_eq!((w.kafka.committed.len(), w.kafka.marker("k")), before);
}

/// A writer restarted after its epoch 0 was decided and the broker aborted the prepared
/// transaction (a crash after the decision, the writer down past the transaction timeout): it
/// awaits Spark's replay of batch 0.
pub(super) fn awaiting_replay(w: &mut World, c: &GroupConfig) -> Writer {
    let (mut writer, _) = Writer::start(w, c).expect("no crash");
    w.crash_at = Some((CrashPoint::AtomicAfterDecision, 1));
    assert_eq!(writer.write(w, 0), Err(Crash));
    w.kafka.advance(1_000);
    let (writer, _) = Writer::start(w, c).expect("no crash");
    assert_eq!(writer.group.awaiting(), &[("k".to_owned(), 0)]);
    writer
}

#[test]
fn another_epoch_while_one_awaits_its_replay_is_refused() {
    let mut w = World::new(&["pg"], &["k"], 50);
    let c = config(&w, false);
    let mut writer = awaiting_replay(&mut w, &c);
    match writer.write(&mut w, 1).expect("no crash") {
        End::Refused(r) => assert_eq!(r.kind, RefusalKind::OtherEpochWhileIncomplete),
        other => panic!("{other:?}"),
    }
    assert_eq!(writer.write(&mut w, 0).expect("no crash"), End::Ok);
    assert!(writer.group.awaiting().is_empty());
    assert_eq!(writer.write(&mut w, 1).expect("no crash"), End::Ok);
    w.check_exactly_once(2);
}

/// A Kafka commit that lands while its answer is lost (the sink is in doubt), then an
/// in-process completion that meets a failover: the retry finds the sink holding the epoch at
/// step 2 — its own decided epoch, read back by the sink's in-doubt resolution — and counts it
/// written, with no `FencedError` ("another writer") and no new decision. The chaos test's
/// writer was stopped this way at the next epoch (`OtherEpochWhileIncomplete`) when the epoch
/// was Spark's replay of one awaited since the start-up: the wait is ended too. Both kinds of
/// epoch: awaited since the start-up, and a plain one.
#[test]
fn a_commit_that_landed_while_its_answer_was_lost_is_not_written_again() {
    use crate::protocol::command::{Command, Event};
    use crate::protocol::failure::{Failure, FailureKind};
    for awaited in [true, false] {
        let mut w = World::new(&["pg"], &["k"], 50);
        let mut c = config(&w, false);
        c.retries = 3;
        let mut writer = if awaited {
            awaiting_replay(&mut w, &c)
        } else {
            let (mut writer, _) = Writer::start(&mut w, &c).expect("no crash");
            assert_eq!(writer.write(&mut w, 0).expect("no crash"), End::Ok);
            writer
        };
        let batch = if awaited { 0 } else { 1 };
        writer.group.write_epoch(batch);
        let failover = FailureKind::Abortable { retriable: true };
        let (mut commits, mut completion_failed, mut landed) = (0, false, false);
        while let Some(command) = writer.group.poll() {
            if matches!(command, Command::SinkCommit { .. }) {
                commits += 1;
                if commits == 1 {
                    w.lose_commit = Some(true); // committed, its answer lost
                }
            }
            if let Command::Log { message, .. } = &command {
                landed |= message.contains("the commit that answered a failure landed");
            }
            let event =
                super::driver::perform(&mut w, &mut writer.proc, &command).expect("no crash");
            let event = match &command {
                Command::LockGroup { .. } if commits == 1 && !completion_failed => {
                    completion_failed = true;
                    Event::Failed(Failure::new(failover, "the completion met a failover"))
                }
                _ => event,
            };
            writer.group.handle(event);
        }
        assert!(
            completion_failed,
            "awaited={awaited}: the scenario did not happen"
        );
        assert_eq!(writer.group.end(), Some(&End::Ok), "awaited={awaited}");
        assert!(
            landed,
            "awaited={awaited}: the retry did not find the epoch at step 2"
        );
        assert_eq!(
            commits, 1,
            "awaited={awaited}: the epoch was committed again"
        );
        assert!(
            !writer.group.committed(),
            "awaited={awaited}: a retry that decided nothing"
        );
        assert!(
            writer.group.awaiting().is_empty(),
            "{:?}",
            writer.group.awaiting()
        );
        assert_eq!(writer.write(&mut w, batch + 1).expect("no crash"), End::Ok);
        w.check_exactly_once(batch + 2);
    }
}

/// The plan ends a wait its sinks' progress shows over: here the retry's refresh reads the
/// awaited epoch back (the sink learned its commit landed) and the plan skips the epoch.
#[test]
fn a_retry_that_reads_the_awaited_epoch_back_ends_the_wait() {
    use crate::protocol::command::{Command, Event};
    use crate::protocol::failure::{Failure, FailureKind};
    let mut w = World::new(&["pg"], &["k"], 50);
    let mut c = config(&w, false);
    c.retries = 3;
    let mut writer = awaiting_replay(&mut w, &c);
    writer.group.write_epoch(0);
    let failover = FailureKind::Abortable { retriable: true };
    let (mut commit_failed, mut completion_failed) = (false, false);
    while let Some(command) = writer.group.poll() {
        let event = super::driver::perform(&mut w, &mut writer.proc, &command).expect("no crash");
        let event = match &command {
            // the sink committed (and knows it); the group hears a failure
            Command::SinkCommit { .. } if !commit_failed => {
                commit_failed = true;
                Event::Failed(Failure::new(failover, "the commit's answer was lost"))
            }
            Command::LockGroup { .. } if commit_failed && !completion_failed => {
                completion_failed = true;
                Event::Failed(Failure::new(failover, "the completion met a failover"))
            }
            _ => event,
        };
        writer.group.handle(event);
    }
    assert!(completion_failed, "the scenario did not happen");
    assert_eq!(writer.group.end(), Some(&End::Ok));
    assert!(
        writer.group.awaiting().is_empty(),
        "{:?}",
        writer.group.awaiting()
    );
    assert_eq!(writer.write(&mut w, 1).expect("no crash"), End::Ok);
    w.check_exactly_once(2);
}

#[test]
fn the_writer_retries_an_epoch_that_may_be_written_again() {
    let mut w = World::new(&["pg"], &["k"], 1_000_000);
    let mut c = config(&w, false);
    c.retries = 2;
    let (mut writer, _) = Writer::start(&mut w, &c).expect("no crash");
    w.lose_commit = Some(false);
    assert_eq!(writer.write(&mut w, 0).expect("no crash"), End::Ok);
    assert_eq!(writer.group.attempts(), 2);
    w.check_exactly_once(1);
}

#[test]
fn an_abortable_error_that_is_not_retriable_ends_the_write_without_a_retry() {
    use crate::protocol::command::{Command, Event};
    use crate::protocol::failure::{Failure, FailureKind};
    let mut w = World::new(&["pg"], &["k"], 1_000_000);
    let mut c = config(&w, false);
    c.retries = 3;
    let (mut writer, _) = Writer::start(&mut w, &c).expect("no crash");
    writer.group.write_epoch(0);
    let too_large = FailureKind::Abortable { retriable: false };
    let mut failed = false;
    while let Some(command) = writer.group.poll() {
        let event = if matches!(command, Command::SinkWrite { .. }) && !failed {
            failed = true;
            Event::Failed(Failure::new(too_large, "a record is too large"))
        } else {
            super::driver::perform(&mut w, &mut writer.proc, &command).expect("no crash")
        };
        writer.group.handle(event);
    }
    assert!(
        matches!(writer.group.end(), Some(End::Failed(f)) if f.kind == too_large),
        "{:?}",
        writer.group.end()
    );
    assert_eq!(writer.group.attempts(), 1);
    // the epoch was aborted everywhere: written again, it lands once
    assert_eq!(writer.write(&mut w, 0).expect("no crash"), End::Ok);
    w.check_exactly_once(1);
}

#[test]
fn a_new_query_is_refused_unless_it_restarts_the_sinks() {
    let mut w = World::new(&["pg"], &["k"], 1_000_000);
    let c = config(&w, false);
    run(&mut w, &c, 2, |_| {});
    let mut other = c.clone();
    other.owner = Some("another query".into());
    match Writer::start(&mut w, &other).expect("no crash").1 {
        End::Refused(r) => assert_eq!(r.kind, RefusalKind::ForeignOwner),
        end => panic!("{end:?}"),
    }
    other.restart_on_new_query = true;
    let (writer, end) = Writer::start(&mut w, &other).expect("no crash");
    assert_eq!(end, End::Ok);
    assert_eq!(writer.group.epoch_base(), 2, "past every committed epoch");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Many crashes at random points (steps, recovery, the Kafka sink's own), random broker
    /// timeouts while down: every run ends with every epoch in every store exactly once.
    #[test]
    fn random_crash_schedules_always_end_exactly_once(
        shape in 0usize..6,
        crashes in proptest::collection::vec((0usize..64, 1u32..4, any::<bool>()), 0..8),
    ) {
        let (template, redo) = shapes().swap_remove(shape);
        let mut w = fresh(&template, 200);
        let c = config(&w, redo);
        let all = points_of(&[Protocol::Atomic, Protocol::Recovery, Protocol::Kafka]);
        let mut schedule = crashes.into_iter();
        let arm = |w: &mut World, s: Option<(usize, u32, bool)>| {
            if let Some((p, nth, slow)) = s {
                w.reached.clear();
                w.crash_at = Some((all[p % all.len()], nth));
                if slow {
                    w.kafka.advance(1_000);
                }
            }
        };
        arm(&mut w, schedule.next());
        run(&mut w, &c, 6, |w| arm(w, schedule.next()));
    }
}
