//! Scale-out in the simulation: the coordinator ([`super::super::distributed::ScaleOutEpoch`])
//! and its tasks, Spark's retries and speculative twins, a failing job, a coordinator crash at
//! every scale-out point of the enum, the watcher's rules, and what `laminar resolve` may do.

use std::collections::BTreeSet;

use proptest::prelude::*;

use crate::protocol::atomic::{AtomicGroup, GroupConfig, RunStart};
use crate::protocol::command::Event;
use crate::protocol::crash::{CrashPoint, Protocol};
use crate::protocol::dt_state::DtState;
use crate::protocol::names::dtid;
use crate::protocol::sim::atomic_tests::{Writer, awaiting_replay, config, retryable, run};
use crate::protocol::sim::tasks::run_tasks;
use crate::protocol::sim::{Collected, Crash, Proc, World, drive, points_of};
use crate::protocol::watcher::resolve::{Resolve, ResolveOutcome, ResolveTarget};
use crate::protocol::watcher::{ItemOutcome, PassConfig, WatcherPass};
use crate::protocol::{End, Epoch, RefusalKind};

pub(super) const EPOCHS: Epoch = 3;

pub(super) fn world() -> World {
    World::new(&["pg"], &["k"], 1_000_000)
}

pub(super) fn scaled(w: &World) -> GroupConfig {
    GroupConfig {
        scale_out: true,
        ..config(w, false)
    }
}

/// The scenarios every point is walked in.
pub(super) fn scenarios() -> Vec<World> {
    let mut out = Vec::new();
    for (twin, fail) in [
        (None, None),
        (Some(Collected::First), None),
        (Some(Collected::Second), None),
        (None, Some(1)),
    ] {
        let mut w = world();
        w.tasks.twin = twin;
        w.tasks.fail_part = fail;
        out.push(w);
    }
    let mut two = World::new(&["pg1", "pg2"], &["k1", "k2"], 1_000_000);
    two.rows = 5;
    out.push(two);
    out
}

pub(super) fn clone_world(t: &World) -> World {
    let pg: Vec<&str> = t.pg_sinks.iter().map(String::as_str).collect();
    let kafka: Vec<&str> = t.kafka_sinks.iter().map(String::as_str).collect();
    let mut w = World::new(&pg, &kafka, t.kafka.timeout_ms);
    w.rows = t.rows;
    w.tasks.parts = t.tasks.parts;
    w.tasks.twin = t.tasks.twin;
    w.tasks.fail_part = t.tasks.fail_part;
    w
}

pub(super) fn coverage() -> BTreeSet<CrashPoint> {
    let mut seen = BTreeSet::new();
    for template in scenarios() {
        let mut w = clone_world(&template);
        let c = scaled(&w);
        w.crash_at = Some((CrashPoint::ScaleoutAfterDecision, 1));
        run(&mut w, &c, EPOCHS, |_| {});
        seen.extend(w.seen);
    }
    seen
}

fn pass(w: &mut World, config: PassConfig) -> WatcherPass {
    let mut pass = WatcherPass::new(config);
    assert_eq!(drive(w, &mut Proc::default(), &mut pass), Ok(End::Ok));
    pass
}

fn watcher_config(resolve_after_s: f64) -> PassConfig {
    let mut c = PassConfig::owned_group("g", &["pg".to_owned()]);
    c.group_id = None;
    c.sink_ids = None;
    c.thresholds.resolve_after_s = resolve_after_s;
    c
}

#[test]
fn no_crash_writes_every_epoch_once_through_the_tasks() {
    for template in scenarios() {
        let mut w = clone_world(&template);
        let c = scaled(&w);
        let r = run(&mut w, &c, EPOCHS, |_| {});
        assert_eq!(r.restarts, 0);
        assert!(w.seen.contains(&CrashPoint::ScaleoutTaskAfterPrepare));
    }
}

/// Every scale-out crash point of the enum, at its n-th occurrence, in every scenario: a
/// coordinator point kills the writer (restarted, its start-up resolves the leftovers), a task
/// point kills the task attempt (Spark retries it).
#[test]
fn a_crash_at_every_scaleout_point_of_the_enum_ends_exactly_once() {
    let walked = points_of(&[Protocol::Scaleout, Protocol::Postgres]);
    let mut crashed = BTreeSet::new();
    for template in scenarios() {
        for &point in &walked {
            for nth in 1..=4 {
                let mut w = clone_world(&template);
                let c = scaled(&w);
                w.crash_at = Some((point, nth));
                run(&mut w, &c, EPOCHS, |_| {});
                if w.crash_at.is_none() {
                    crashed.insert(point);
                }
            }
        }
    }
    let never: Vec<&str> = points_of(&[Protocol::Scaleout])
        .into_iter()
        .filter(|p| !crashed.contains(p))
        .map(CrashPoint::name)
        .collect();
    assert!(never.is_empty(), "never crashed at {never:?}");
}

#[test]
fn a_speculative_twin_commits_only_when_its_result_is_the_one_collected() {
    for which in [Collected::First, Collected::Second] {
        let mut w = world();
        w.tasks.twin = Some(which);
        let c = scaled(&w);
        let (mut writer, _) = Writer::start(&mut w, &c).expect("no crash");
        let end = writer.write(&mut w, 0).expect("no crash");
        match which {
            // the twin claimed last: the collected attempt is not the claimant, roll back
            Collected::First => match end {
                End::Refused(r) => assert_eq!(r.kind, RefusalKind::NotDecided),
                other => panic!("{other:?}"),
            },
            Collected::Second => assert_eq!(end, End::Ok),
        }
        assert!(w.pg.dt_state.is_empty(), "concluded either way");
        assert!(w.pg.prepared.is_empty());
        assert_eq!(writer.write(&mut w, 0).expect("no crash"), End::Ok);
        w.check_exactly_once(1);
    }
}

#[test]
fn a_failed_job_is_rolled_back_and_written_again() {
    let mut w = world();
    w.tasks.fail_part = Some(2);
    let c = scaled(&w);
    let (mut writer, _) = Writer::start(&mut w, &c).expect("no crash");
    assert!(!writer.write(&mut w, 0).expect("no crash").is_ok());
    assert!(w.seen.contains(&CrashPoint::ScaleoutAfterSetRollback));
    assert!(w.pg.prepared.is_empty() && w.pg.dt_state.is_empty());
    assert_eq!(writer.write(&mut w, 0).expect("no crash"), End::Ok);
    w.check_exactly_once(1);
}

#[test]
fn empty_partitions_prepare_nothing_and_an_empty_epoch_decides_nothing() {
    let mut w = world();
    w.rows = 2; // partition 2 is empty
    let c = scaled(&w);
    run(&mut w, &c, EPOCHS, |_| {});
    let mut w = world();
    w.rows = 0;
    let (mut writer, _) = Writer::start(&mut w, &c).expect("no crash");
    assert_eq!(writer.write(&mut w, 0).expect("no crash"), End::Ok);
    assert!(!writer.group.committed(), "nothing written");
    assert!(w.pg.dt_state.is_empty(), "concluded (conclude_empty)");
}

#[test]
fn a_recorded_rollback_is_carried_on_not_recorded_twice() {
    let mut w = world();
    w.tasks.fail_part = Some(0);
    let c = scaled(&w);
    let (mut writer, _) = Writer::start(&mut w, &c).expect("no crash");
    w.crash_at = Some((CrashPoint::ScaleoutAfterSetRollback, 1));
    assert_eq!(writer.write(&mut w, 0), Err(Crash));
    assert_eq!(
        w.pg.dt_state.values().next().map(|r| r.state),
        Some(DtState::Rollback)
    );
    // the restarted writer's start-up resolves it: rollback -> (no transition) -> concluded
    let (mut writer, end) = Writer::start(&mut w, &c).expect("no crash");
    assert_eq!(end, End::Ok);
    assert!(w.pg.dt_state.is_empty() && w.pg.prepared.is_empty());
    assert_eq!(writer.write(&mut w, 0).expect("no crash"), End::Ok);
    w.check_exactly_once(1);
}

#[test]
fn the_watcher_completes_a_decided_epoch_and_rolls_back_an_undecided_one() {
    for (point, decided) in [
        (CrashPoint::ScaleoutAfterDecision, true),
        (CrashPoint::ScaleoutMidCompletion, true),
        (CrashPoint::ScaleoutAfterTasks, false),
        (CrashPoint::ScaleoutAfterCreate, false),
    ] {
        let mut w = world();
        let c = scaled(&w);
        let (mut writer, _) = Writer::start(&mut w, &c).expect("no crash");
        w.crash_at = Some((point, 1));
        assert_eq!(writer.write(&mut w, 0), Err(Crash));
        // too young for the threshold: left alone
        let young = pass(&mut w, watcher_config(60.0));
        assert!(
            young
                .items()
                .iter()
                .all(|i| i.outcome == ItemOutcome::Unresolved),
            "{point}"
        );
        assert!(!w.pg.dt_state.is_empty());
        let done = pass(&mut w, watcher_config(0.0));
        assert_eq!(done.unresolved().count(), 0, "{point}: {:?}", done.items());
        assert!(
            w.pg.dt_state.is_empty() && w.pg.prepared.is_empty(),
            "{point}"
        );
        assert_eq!(w.pg.sink_epochs.contains_key("pg"), decided, "{point}");
        let (mut writer, _) = Writer::start(&mut w, &c).expect("no crash");
        assert_eq!(writer.write(&mut w, 0).expect("no crash"), End::Ok);
        assert_eq!(writer.write(&mut w, 1).expect("no crash"), End::Ok);
        w.check_exactly_once(2);
    }
}

fn resolve(
    w: &mut World,
    target: ResolveTarget,
    commit: bool,
    force: bool,
) -> (End, Option<ResolveOutcome>) {
    let mut m = Resolve::new(target, commit, force);
    let end = drive(w, &mut Proc::default(), &mut m).expect("no crash");
    (end, m.outcome().cloned())
}

fn refused(end: &End) -> Option<RefusalKind> {
    match end {
        End::Refused(r) => Some(r.kind),
        _ => None,
    }
}

#[test]
fn resolve_never_goes_against_a_decision_without_force() {
    // an undecided epoch: commit refused, rollback allowed
    let mut w = world();
    let c = scaled(&w);
    let (mut writer, _) = Writer::start(&mut w, &c).expect("no crash");
    w.crash_at = Some((CrashPoint::ScaleoutAfterTasks, 1));
    assert_eq!(writer.write(&mut w, 0), Err(Crash));
    let dtid = "laminar:g:0".to_owned();
    let (end, _) = resolve(&mut w, ResolveTarget::Dtid(dtid.clone()), true, false);
    assert_eq!(refused(&end), Some(RefusalKind::AgainstDecision));
    let gid = w.pg.prepared.keys().next().cloned().expect("prepared");
    let (end, _) = resolve(&mut w, ResolveTarget::Gid(gid.clone()), true, false);
    assert_eq!(refused(&end), Some(RefusalKind::AgainstDecision));
    let (end, outcome) = resolve(&mut w, ResolveTarget::Dtid(dtid.clone()), false, false);
    assert_eq!(
        (end, outcome),
        (End::Ok, Some(ResolveOutcome::Resolved { done: true }))
    );
    assert!(w.pg.prepared.is_empty() && w.pg.dt_state.is_empty());
    let (end, _) = resolve(&mut w, ResolveTarget::Dtid(dtid), false, false);
    assert_eq!(refused(&end), Some(RefusalKind::NotFound));
    let (end, _) = resolve(&mut w, ResolveTarget::Gid(gid), false, false);
    assert_eq!(refused(&end), Some(RefusalKind::NotFound));

    // a decided epoch: rollback refused without force; commit completes it
    let mut w = world();
    let (mut writer, _) = Writer::start(&mut w, &c).expect("no crash");
    w.crash_at = Some((CrashPoint::ScaleoutAfterDecision, 1));
    assert_eq!(writer.write(&mut w, 0), Err(Crash));
    let gid = w.pg.prepared.keys().next().cloned().expect("prepared");
    let (end, _) = resolve(&mut w, ResolveTarget::Gid(gid), false, false);
    assert_eq!(refused(&end), Some(RefusalKind::AgainstDecision));
    let (end, _) = resolve(
        &mut w,
        ResolveTarget::Dtid("laminar:g:0".into()),
        false,
        false,
    );
    assert_eq!(refused(&end), Some(RefusalKind::AgainstDecision));
    let (end, outcome) = resolve(
        &mut w,
        ResolveTarget::Dtid("laminar:g:0".into()),
        true,
        false,
    );
    assert_eq!(
        (end, outcome),
        (End::Ok, Some(ResolveOutcome::Resolved { done: true }))
    );
    w.check_exactly_once(1);
}

#[test]
fn resolve_of_a_kafka_decision_completes_it_or_moves_it_back_only_with_force() {
    let mut w = World::new(&["pg"], &["k"], 50);
    let c = config(&w, false);
    let (mut writer, _) = Writer::start(&mut w, &c).expect("no crash");
    w.crash_at = Some((CrashPoint::AtomicAfterDecision, 1));
    assert_eq!(writer.write(&mut w, 0), Err(Crash));
    w.kafka.advance(1_000); // the broker gave the transaction up
    let target = || ResolveTarget::Kafka("k".into());
    let (end, outcome) = resolve(&mut w, target(), true, false);
    assert_eq!(
        (end, outcome),
        (End::Ok, Some(ResolveOutcome::AwaitsReplay { epoch: 0 }))
    );
    let (end, _) = resolve(&mut w, target(), false, false);
    assert_eq!(refused(&end), Some(RefusalKind::AgainstDecision));
    let (end, outcome) = resolve(&mut w, target(), false, true);
    assert_eq!(
        (end, outcome),
        (End::Ok, Some(ResolveOutcome::MovedBack { marker: None }))
    );
    assert_eq!(w.pg.txn_state["k"].epoch, -1);
    let (end, _) = resolve(&mut w, ResolveTarget::Kafka("nope".into()), true, false);
    assert_eq!(refused(&end), Some(RefusalKind::NotFound));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Random crashes at scale-out points, in random scenarios: always exactly once.
    #[test]
    fn random_scaleout_crash_schedules_always_end_exactly_once(
        scenario in 0usize..5,
        crashes in proptest::collection::vec((0usize..64, 1u32..4), 0..6),
    ) {
        let mut w = clone_world(&scenarios()[scenario]);
        let c = scaled(&w);
        let all = points_of(&[Protocol::Scaleout, Protocol::Kafka, Protocol::Postgres]);
        let mut schedule = crashes.into_iter();
        let arm = |w: &mut World, s: Option<(usize, u32)>| {
            if let Some((p, nth)) = s {
                w.reached.clear();
                w.crash_at = Some((all[p % all.len()], nth));
            }
        };
        arm(&mut w, schedule.next());
        run(&mut w, &c, 4, |w| arm(w, schedule.next()));
    }
}

// -- the data source (`format("laminar")`, docs/spark.md): tasks first, then the driver's commit

/// What [`run_source`] saw.
pub(super) struct SourceRun {
    /// Commits that crashed.
    pub crashes: u32,
    /// Commits that resumed their run's start (no start-up).
    pub resumed: u32,
    /// Commits that started up (the first of each run).
    pub started_up: u32,
    /// Commits refused or failed (each ends its run).
    pub failed: u32,
}

/// Spark's micro-batches through the data source: per batch the tasks run first (they create the
/// epoch's record; a task that dies is retried), then the driver's `commit` in a process of its
/// own (`AtomicGroup::commit_collected`), called `commits` times. A failed job or a commit that
/// did not return (an error, a crash) runs the batch again, tasks first. With `resume`, a commit
/// resumes the start its run's last successful commit left, as `laminar.spark.source` keeps it
/// (docs/protocol.md §4, "A run's start-up, once"); a commit that fails or dies ends the run, and
/// the next one starts up.
pub(super) fn run_source(
    w: &mut World,
    c: &GroupConfig,
    epochs: Epoch,
    commits: u32,
    resume: bool,
) -> SourceRun {
    w.tasks.create_record = true;
    let mut seen = SourceRun {
        crashes: 0,
        resumed: 0,
        started_up: 0,
        failed: 0,
    };
    let mut run_start: Option<RunStart> = None;
    let mut next = 0;
    let mut guard = 0;
    while next < epochs {
        guard += 1;
        assert!(guard < 1000, "no progress");
        if !w.tasks.sent.contains_key(&next) {
            match run_tasks(w, &dtid("g", next), next) {
                Event::TaskResults { results } => w.tasks.sent.insert(next, results),
                _ => continue, // the job failed: Spark runs the batch again
            };
        }
        let mut done = true;
        for _ in 0..commits {
            let mut group = AtomicGroup::new(c.clone());
            let resuming = run_start.filter(|_| resume);
            match resuming {
                Some(start) => group.commit_collected_resumed(next, start),
                None => group.commit_collected(next),
            }
            match drive(w, &mut Proc::default(), &mut group) {
                Ok(End::Ok) => {
                    // nothing but the run's own commits touched the group: its start holds
                    assert_eq!(group.resumed(), resuming.is_some(), "batch {next}");
                    seen.resumed += u32::from(group.resumed());
                    seen.started_up += u32::from(!group.resumed());
                    run_start = Some(RunStart {
                        generation: group.generation(),
                        epoch_base: group.epoch_base(),
                    });
                }
                Ok(end) if retryable(&end) => done = false,
                Ok(end) => panic!("batch {next} refused: {end:?}"),
                Err(Crash) => {
                    seen.crashes += 1;
                    done = false;
                }
            }
            if !done {
                seen.failed += 1;
                run_start = None; // the query failed: its next run starts up
                break;
            }
        }
        if done {
            next += 1;
        } else {
            w.tasks.sent.remove(&next);
        }
    }
    w.check_exactly_once(epochs);
    assert!(w.pg.dt_state.is_empty(), "left: {:?}", w.pg.dt_state.keys());
    seen
}

#[test]
fn the_data_source_commits_every_epoch_once_and_a_repeated_commit_is_a_no_op() {
    for template in scenarios() {
        let mut w = clone_world(&template);
        let c = scaled(&w);
        run_source(&mut w, &c, EPOCHS, 2, false);
        assert!(
            !w.seen.contains(&CrashPoint::ScaleoutAfterCreate),
            "the tasks create it"
        );
    }
    let mut w = World::new(&[], &["k1", "k2"], 1_000_000);
    let c = scaled(&w);
    run_source(&mut w, &c, EPOCHS, 2, false); // Kafka only: the decision rows say it is committed
}

/// Every scale-out crash point of the enum at its n-th occurrence, with the data source's order:
/// a task point kills the attempt (Spark retries it), a coordinator point kills the commit's
/// process (the restarted query runs the batch again: its tasks find the epoch decided, or claim
/// it again, and the commit completes or decides it).
/// `run_source` (with `commits` and `resume`) in every scenario, Kafka alone too, crashed at each
/// scale-out and PostgreSQL point at its 1st to 4th occurrence; the points a crash reached.
pub(super) fn walk_crashes(commits: u32, resume: bool) -> BTreeSet<CrashPoint> {
    let walked = points_of(&[Protocol::Scaleout, Protocol::Postgres]);
    let mut crashed = BTreeSet::new();
    let mut worlds = scenarios();
    worlds.push(World::new(&[], &["k1", "k2"], 1_000_000));
    for template in worlds {
        for &point in &walked {
            for nth in 1..=4 {
                let mut w = clone_world(&template);
                let c = scaled(&w);
                w.crash_at = Some((point, nth));
                run_source(&mut w, &c, EPOCHS, commits, resume);
                if w.crash_at.is_none() {
                    crashed.insert(point);
                }
            }
        }
    }
    crashed
}

#[test]
fn the_data_source_ends_exactly_once_after_a_crash_at_every_scaleout_point() {
    let crashed = walk_crashes(1, false);
    for p in [
        CrashPoint::ScaleoutAfterTasks,
        CrashPoint::ScaleoutAfterDecision,
        CrashPoint::ScaleoutTaskAfterClaim,
        CrashPoint::ScaleoutTaskAfterPrepare,
    ] {
        assert!(crashed.contains(&p), "never crashed at {p}");
    }
}

#[test]
fn a_commit_spares_its_own_record_and_refuses_one_rolled_back_before_it() {
    let mut w = world();
    let c = scaled(&w);
    w.tasks.create_record = true;
    // batch 0's tasks prepared, its commit never came (the query died): a leftover
    let Event::TaskResults { results } = run_tasks(&mut w, &dtid("g", 0), 0) else {
        panic!("the job failed")
    };
    assert_eq!(w.pg.dt_state.len(), 1);
    // batch 0 again, then its commit: the start-up's pass spares the record in flight
    w.tasks.sent.insert(0, results);
    let mut group = AtomicGroup::new(c.clone());
    group.commit_collected(0);
    assert_eq!(drive(&mut w, &mut Proc::default(), &mut group), Ok(End::Ok));
    assert!(group.committed());
    // a record the watcher rolled back before the commit: refused, nothing committed
    let Event::TaskResults { results } = run_tasks(&mut w, &dtid("g", 1), 1) else {
        panic!("the job failed")
    };
    w.tasks.sent.insert(1, results);
    pass(&mut w, watcher_config(0.0));
    let mut group = AtomicGroup::new(c);
    group.commit_collected(1);
    match drive(&mut w, &mut Proc::default(), &mut group) {
        Ok(End::Refused(r)) => assert_eq!(r.kind, RefusalKind::NotDecided),
        other => panic!("{other:?}"),
    }
    assert!(w.pg.prepared.is_empty() && w.pg.dt_state.is_empty());
    w.check_exactly_once(1);
}

/// A group written by one process (`foreachBatch`) left an epoch decided in PostgreSQL whose
/// Kafka part only Spark's replay can write (the transaction expired), then the query moved to
/// `format("laminar")`, which shares the group's records. The scale-out commit cannot write a
/// sink's part of a decided epoch (its tasks skip a decided epoch): it refuses, for the awaited
/// batch and for any later one, instead of counting the epoch complete — which left it missing
/// from Kafka for good. Back in one process, Spark's replay writes it and the group goes on.
#[test]
fn a_scale_out_commit_refuses_while_an_epoch_awaits_its_replay_in_one_process() {
    let mut w = World::new(&["pg"], &["k"], 50);
    let c = config(&w, false);
    drop(awaiting_replay(&mut w, &c));
    w.tasks.create_record = true;
    for batch in [0, 1] {
        if let Event::TaskResults { results } = run_tasks(&mut w, &dtid("g", batch), batch) {
            w.tasks.sent.insert(batch, results);
        }
        let mut group = AtomicGroup::new(scaled(&w));
        group.commit_collected(batch);
        match drive(&mut w, &mut Proc::default(), &mut group) {
            Ok(End::Refused(r)) => {
                assert_eq!(
                    r.kind,
                    RefusalKind::OtherEpochWhileIncomplete,
                    "batch {batch}"
                );
                assert!(r.message.contains("foreachBatch"), "{}", r.message);
            }
            other => panic!("batch {batch}: {other:?}"),
        }
        assert!(!group.committed());
        // what a refused batch's tasks prepared is rolled back by Spark's abort (the watcher)
        pass(&mut w, watcher_config(0.0));
    }
    let (mut writer, _) = Writer::start(&mut w, &c).expect("no crash");
    assert_eq!(writer.write(&mut w, 0).expect("no crash"), End::Ok);
    assert_eq!(writer.write(&mut w, 1).expect("no crash"), End::Ok);
    w.check_exactly_once(2);
}
