//! The data source's stop fence in the simulation (docs/protocol.md §4): a query stopped
//! mid-batch is resolved (`resolve_stopped`: the fence, then the watcher's pass); a worker of the
//! stopped batch that starts only then writes nothing under the fence, and would prepare a
//! transaction nobody decides without it; the next run lifts the fence and writes the batch once.
//! The next run's writer reserves the fence for its own tasks: a worker of the stopped run that
//! arrives after the restart's task of its partition writes nothing, where a deleted fence let
//! it claim last and have the restart's commit refused.

use crate::protocol::atomic::{AtomicGroup, GroupConfig};
use crate::protocol::command::{Event, ParticipantResult, ResultStatus};
use crate::protocol::names::dtid;
use crate::protocol::records::stop_fence_epoch;
use crate::protocol::sim::atomic_tests::config;
use crate::protocol::sim::tasks::{run_task, run_tasks};
use crate::protocol::sim::{Proc, World, drive};
use crate::protocol::watcher::{PassConfig, WatcherPass};
use crate::protocol::{End, Epoch};

/// One batch of a run: its tasks, then its commit.
fn commit_batch(w: &mut World, c: &GroupConfig, epoch: Epoch) {
    let results = batch_tasks(w, epoch);
    assert_eq!(commit_sent(w, c, epoch, results), Ok(End::Ok));
}

/// The tasks of one batch (the job): their results.
fn batch_tasks(w: &mut World, epoch: Epoch) -> Vec<ParticipantResult> {
    let Event::TaskResults { results } = run_tasks(w, &dtid("g", epoch), epoch) else {
        panic!("the job failed")
    };
    results
}

/// The driver's commit of the results the tasks sent; how it ended.
fn commit_sent(
    w: &mut World,
    c: &GroupConfig,
    epoch: Epoch,
    results: Vec<ParticipantResult>,
) -> Result<End, String> {
    w.tasks.sent.insert(epoch, results);
    let mut group = AtomicGroup::new(c.clone());
    group.commit_collected(epoch);
    let end = drive(w, &mut Proc::default(), &mut group).map_err(|e| format!("{e:?}"));
    if end == Ok(End::Ok) {
        assert!(group.committed());
    }
    end
}

/// `resolve_stopped`: the fence at the highest epoch in flight or after the last commit, then
/// the watcher's pass over the group (no decision: roll back and conclude).
fn resolve_stopped(w: &mut World, fence: bool) {
    if fence {
        let in_flight: Vec<Epoch> = w.pg.dt_state.values().map(|r| r.epoch).collect();
        let last = w.pg.sink_epochs.values().copied().max();
        w.pg.stop_fence
            .insert("g".into(), stop_fence_epoch(in_flight, last));
    }
    let mut c = PassConfig::owned_group("g", &["pg".to_owned()]);
    c.thresholds.resolve_after_s = 0.0;
    let mut pass = WatcherPass::new(c);
    assert_eq!(drive(w, &mut Proc::default(), &mut pass), Ok(End::Ok));
}

fn stopped_mid_batch(fence: bool) -> (World, GroupConfig) {
    let mut w = World::new(&["pg"], &["k"], 1_000_000);
    let c = GroupConfig {
        scale_out: true,
        ..config(&w, false)
    };
    w.tasks.create_record = true;
    commit_batch(&mut w, &c, 0);
    // batch 1: task 0 prepares, the query is stopped, the batch resolved
    let early = run_task(&mut w, &dtid("g", 1), 1, 0, 1).expect("task 0 ran");
    assert!(early.iter().all(|r| r.status == ResultStatus::Prepared));
    resolve_stopped(&mut w, fence);
    assert!(w.pg.dt_state.is_empty() && w.pg.prepared.is_empty());
    (w, c)
}

#[test]
fn an_abandoned_worker_under_the_fence_writes_nothing_and_the_next_run_writes_once() {
    let (mut w, c) = stopped_mid_batch(true);
    assert_eq!(w.pg.stop_fence.get("g"), Some(&1));
    let late = run_task(&mut w, &dtid("g", 1), 1, 1, 2).expect("the late task ran");
    assert!(late.iter().all(|r| r.status == ResultStatus::Skipped));
    assert!(w.pg.dt_state.is_empty(), "no record created");
    assert!(w.pg.prepared.is_empty(), "nothing prepared");
    assert!(
        w.kafka.tids.values().all(|t| t.open.is_none()),
        "no Kafka transaction open"
    );
    // the next run: its writer lifts the fence, batch 1 is written and committed once
    w.pg.stop_fence.remove("g");
    w.tasks.sent.clear();
    commit_batch(&mut w, &c, 1);
    w.check_exactly_once(2);
    assert!(w.pg.dt_state.is_empty() && w.pg.prepared.is_empty());
}

#[test]
fn without_the_fence_the_abandoned_worker_prepares_what_nobody_decides() {
    let (mut w, _) = stopped_mid_batch(false);
    let late = run_task(&mut w, &dtid("g", 1), 1, 1, 2).expect("the late task ran");
    assert!(late.iter().all(|r| r.status == ResultStatus::Prepared));
    assert_eq!(w.pg.dt_state.len(), 1, "the record created afresh");
    assert!(
        !w.pg.prepared.is_empty(),
        "a prepared transaction left behind"
    );
}

/// A stopped batch, then the restart: its writer lifts the fence (`reserve`: for its token
/// `w1`; else the row deleted, as before the reservation), its tasks prepare batch 1, and only
/// then a worker of the stopped run (writer `w0`) writes partition 1. Returns the world, the
/// late worker's statuses and how the restart's commit ended.
fn late_worker_after_the_restarts_task(reserve: bool) -> (World, Vec<ResultStatus>, End) {
    let (mut w, c) = stopped_mid_batch(true);
    if reserve {
        w.pg.stop_fence_writer.insert("g".into(), "w1".into());
    } else {
        w.pg.stop_fence.remove("g");
    }
    w.tasks.writer = Some("w1".into());
    w.tasks.sent.clear();
    let results = batch_tasks(&mut w, 1);
    assert!(results.iter().all(|r| r.status == ResultStatus::Prepared));
    w.tasks.writer = Some("w0".into());
    let late = run_task(&mut w, &dtid("g", 1), 1, 1, 9).expect("the late task ran");
    let end = commit_sent(&mut w, &c, 1, results);
    let statuses = late.iter().map(|r| r.status).collect();
    (
        w,
        statuses,
        end.unwrap_or_else(|e| panic!("the commit failed: {e}")),
    )
}

#[test]
fn a_worker_of_the_stopped_run_after_the_restarts_task_writes_nothing_under_a_reserved_fence() {
    let (w, late, end) = late_worker_after_the_restarts_task(true);
    assert!(late.iter().all(|s| *s == ResultStatus::Skipped), "{late:?}");
    assert_eq!(end, End::Ok, "the restart's commit decides");
    w.check_exactly_once(2);
    assert!(w.pg.dt_state.is_empty() && w.pg.prepared.is_empty());
}

#[test]
fn with_the_fence_deleted_the_late_worker_claims_last_and_the_restart_is_refused() {
    let (w, late, end) = late_worker_after_the_restarts_task(false);
    assert!(
        late.iter().all(|s| *s == ResultStatus::Prepared),
        "{late:?}"
    );
    assert!(
        matches!(&end, End::Refused(r) if r.message.contains("other than the collected one")),
        "{end:?}"
    );
    assert!(w.pg.dt_state.is_empty(), "rolled back and concluded");
}
