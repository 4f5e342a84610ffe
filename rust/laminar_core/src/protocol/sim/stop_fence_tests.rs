//! The data source's stop fence in the simulation (docs/protocol.md §4): a query stopped
//! mid-batch is resolved (`resolve_stopped`: the fence, then the watcher's pass); a worker of the
//! stopped batch that starts only then writes nothing under the fence, and would prepare a
//! transaction nobody decides without it; the next run lifts the fence and writes the batch once.

use super::super::atomic::{AtomicGroup, GroupConfig};
use super::super::command::{Event, ResultStatus};
use super::super::names::dtid;
use super::super::records::stop_fence_epoch;
use super::super::watcher::{PassConfig, WatcherPass};
use super::super::{End, Epoch};
use super::atomic_tests::config;
use super::tasks::{run_task, run_tasks};
use super::{Proc, World, drive};

/// One batch of a run: its tasks, then its commit.
fn commit_batch(w: &mut World, c: &GroupConfig, epoch: Epoch) {
    let Event::TaskResults { results } = run_tasks(w, &dtid("g", epoch), epoch) else {
        panic!("the job failed")
    };
    w.tasks.sent.insert(epoch, results);
    let mut group = AtomicGroup::new(c.clone());
    group.commit_collected(epoch);
    assert_eq!(drive(w, &mut Proc::default(), &mut group), Ok(End::Ok));
    assert!(group.committed());
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
