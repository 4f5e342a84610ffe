//! A resumed start in the simulation (docs/protocol.md §4, "A run's start-up, once"): the data
//! source's commits of one run start up once and resume after that, every epoch still once after
//! a crash at every scale-out point; a commit whose run start no longer holds — another
//! coordinator started, a record is left to resolve, the owner or the epoch base changed — starts
//! up as before.

use crate::protocol::atomic::{AtomicGroup, GroupConfig, RunStart};
use crate::protocol::command::Event;
use crate::protocol::crash::CrashPoint;
use crate::protocol::names::dtid;
use crate::protocol::sim::scaleout_tests::{
    EPOCHS, clone_world, run_source, scaled, scenarios, walk_crashes, world,
};
use crate::protocol::sim::tasks::run_tasks;
use crate::protocol::sim::{Proc, World, drive};
use crate::protocol::{End, RefusalKind};

/// Batch `batch`: its tasks, then one commit resuming `start` (None: a start-up).
fn commit(
    w: &mut World,
    c: &GroupConfig,
    batch: i64,
    start: Option<RunStart>,
) -> (AtomicGroup, Result<End, super::Crash>) {
    w.tasks.create_record = true;
    let Event::TaskResults { results } = run_tasks(w, &dtid("g", batch), batch) else {
        panic!("the job failed")
    };
    w.tasks.sent.insert(batch, results);
    let mut group = AtomicGroup::new(c.clone());
    match start {
        Some(start) => group.commit_collected_resumed(batch, start),
        None => group.commit_collected(batch),
    }
    let end = drive(w, &mut Proc::default(), &mut group);
    (group, end)
}

fn run_start(group: &AtomicGroup) -> RunStart {
    RunStart {
        generation: group.generation(),
        epoch_base: group.epoch_base(),
    }
}

#[test]
fn a_run_starts_up_once_and_every_later_commit_resumes() {
    for template in scenarios() {
        let mut w = clone_world(&template);
        let c = scaled(&w);
        let seen = run_source(&mut w, &c, EPOCHS, 2, true);
        // a run starts up once (a refused commit ends it: Spark fails the query), and fences once
        assert!(seen.resumed >= 3, "{} resumed", seen.resumed);
        assert!(w.pg.generation <= i64::from(seen.started_up + seen.failed));
    }
    let mut w = world();
    let c = scaled(&w);
    let seen = run_source(&mut w, &c, EPOCHS, 2, true);
    assert_eq!(
        (seen.started_up, seen.resumed),
        (1, 5),
        "3 batches x 2 commits, one run"
    );
    let mut w = World::new(&[], &["k1", "k2"], 1_000_000); // Kafka only
    let c = scaled(&w);
    assert_eq!(run_source(&mut w, &c, EPOCHS, 2, true).resumed, 5);
}

#[test]
fn resumed_runs_end_exactly_once_after_a_crash_at_every_scaleout_point() {
    let crashed = walk_crashes(2, true);
    for p in [
        CrashPoint::ScaleoutAfterTasks,
        CrashPoint::ScaleoutAfterDecision,
        CrashPoint::ScaleoutMidCompletion,
        CrashPoint::ScaleoutTaskAfterPrepare,
    ] {
        assert!(crashed.contains(&p), "never crashed at {p}");
    }
}

#[test]
fn another_coordinator_since_the_run_started_makes_the_commit_start_up_and_fence_it() {
    let mut w = world();
    let c = scaled(&w);
    let (group, end) = commit(&mut w, &c, 0, None);
    assert_eq!(end, Ok(End::Ok));
    let start = run_start(&group);
    w.pg.generation += 1; // another coordinator of the group started (and may decide)
    let (group, end) = commit(&mut w, &c, 1, Some(start));
    assert_eq!(end, Ok(End::Ok));
    assert!(!group.resumed(), "the run's start no longer holds");
    assert!(group.committed());
    assert_eq!(group.generation(), 3, "this commit fenced the other one");
    w.check_exactly_once(2);
}

#[test]
fn a_record_left_to_resolve_makes_the_commit_start_up_and_its_pass_resolve_it() {
    // PostgreSQL only: rolling back a record whose Kafka participants share this batch's
    // transactional ids would fence this batch's prepared transactions too (the start-up pass
    // does that with or without a resumed start: docs/protocol.md §8)
    let mut w = World::new(&["pg"], &[], 1_000_000);
    let c = scaled(&w);
    let (group, end) = commit(&mut w, &c, 0, None);
    assert_eq!(end, Ok(End::Ok));
    let start = run_start(&group);
    // a late attempt of an earlier batch created a record nobody decides (prepared, say)
    w.tasks.create_record = true;
    assert!(matches!(
        run_tasks(&mut w, &dtid("g", 7), 7),
        Event::TaskResults { .. }
    ));
    assert!(w.pg.dt_state.contains_key(&dtid("g", 7)));
    let (group, end) = commit(&mut w, &c, 1, Some(start));
    assert_eq!(end, Ok(End::Ok));
    assert!(!group.resumed());
    assert!(group.committed());
    assert!(
        w.pg.dt_state.is_empty(),
        "the start-up's pass rolled it back"
    );
    assert!(w.pg.prepared.is_empty());
    w.check_exactly_once(2);
}

#[test]
fn a_new_owner_or_epoch_base_makes_the_commit_start_up_and_apply_the_guard() {
    let mut w = world();
    let c = scaled(&w);
    let (group, end) = commit(&mut w, &c, 0, None);
    assert_eq!(end, Ok(End::Ok));
    let start = run_start(&group);
    // the group was reset for another query while the run went on
    w.pg.owner = Some("another query".into());
    let (group, end) = commit(&mut w, &c, 1, Some(start));
    assert!(!group.resumed());
    match end {
        Ok(End::Refused(r)) => assert_eq!(r.kind, RefusalKind::ForeignOwner),
        other => panic!("{other:?}"),
    }
    // an epoch base moved under the same owner: the start-up's view, not the run's
    w.pg.owner = Some("query".into());
    w.pg.epoch_base = 10;
    let mut group = AtomicGroup::new(c);
    group.commit_collected_resumed(1, start);
    let _ = drive(&mut w, &mut Proc::default(), &mut group);
    assert!(!group.resumed());
    assert_eq!(group.epoch_base(), 10);
}
