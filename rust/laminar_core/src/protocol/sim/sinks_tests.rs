//! The simulated sinks consult their own transaction's machine (`SinkTxn`, docs/engine.md,
//! "The sink's transaction"): where the machine and the store disagree, the machine's answer
//! is what the sink performs — a replay it knows is skipped, a commit it refuses changes
//! nothing. A sink that decided by itself (from the store) would open and commit here.

use crate::protocol::Epoch;
use crate::protocol::command::{Command, Event};
use crate::protocol::failure::FailureKind;
use crate::protocol::sim::driver::perform;
use crate::protocol::sim::{Proc, World};

fn run(w: &mut World, proc: &mut Proc, command: Command) -> Event {
    perform(w, proc, &command).expect("no crash point is chosen")
}

fn begin(w: &mut World, proc: &mut Proc, sink: &str, epoch: Epoch) -> Event {
    let sink_id = sink.to_owned();
    run(w, proc, Command::SinkBegin { sink_id, epoch })
}

fn commit(w: &mut World, proc: &mut Proc, sink: &str, epoch: Epoch) -> Event {
    let sink_id = sink.to_owned();
    run(w, proc, Command::SinkCommit { sink_id, epoch })
}

fn refused(event: &Event) -> bool {
    matches!(event, Event::Failed(f) if f.kind == FailureKind::Fatal)
}

/// A sink of `world` started in a fresh process, its machine told that epoch 5 is committed
/// although the store holds nothing (as after this instance's own commit, before its marker
/// reads back).
fn started(world: &mut World, sink: &str, key: &str) -> Proc {
    let mut proc = Proc::default();
    let sink_id = sink.to_owned();
    assert_eq!(
        run(world, &mut proc, Command::InitSink { sink_id }),
        Event::Ack
    );
    proc.machines
        .get_mut(key)
        .expect("InitSink builds the sink's machine")
        .learned_last(Some(5))
        .expect("idle");
    proc
}

#[test]
fn a_replay_the_machine_knows_is_skipped_though_the_store_does_not_hold_it() {
    let mut w = World::new(&["pg"], &["k"], 1_000_000);
    let mut proc = started(&mut w, "k", "k");
    assert_eq!(
        begin(&mut w, &mut proc, "k", 3),
        Event::Began { opened: false }
    );
    assert!(w.kafka.tids["k"].open.is_none(), "no transaction was begun");
    assert_eq!(
        begin(&mut w, &mut proc, "k", 6),
        Event::Began { opened: true }
    );
    assert!(w.kafka.tids["k"].open.is_some());

    let mut proc = started(&mut w, "pg", "pg");
    assert_eq!(
        begin(&mut w, &mut proc, "pg", 3),
        Event::Began { opened: false }
    );
    assert!(proc.staged.is_empty(), "nothing was claimed");
    assert_eq!(
        begin(&mut w, &mut proc, "pg", 6),
        Event::Began { opened: true }
    );
    assert!(proc.staged.contains_key("pg"));
}

#[test]
fn a_commit_the_machine_refuses_changes_nothing() {
    let mut w = World::new(&["pg"], &["k"], 1_000_000);
    // nothing open: the machine refuses the commit (a sink deciding alone would commit)
    let mut proc = started(&mut w, "pg", "pg");
    assert!(refused(&commit(&mut w, &mut proc, "pg", 6)));
    assert!(w.pg.sink_epochs.is_empty() && w.pg.rows.is_empty());
    let mut proc = started(&mut w, "k", "k");
    assert!(refused(&commit(&mut w, &mut proc, "k", 6)));
    assert!(w.kafka.committed.is_empty() && w.kafka.marker("k").is_none());

    // a scale-out participant ends an epoch only by preparing
    let sink_id = "pg:pg:p0";
    let mut proc = Proc {
        part: Some(0),
        ..Proc::default()
    };
    proc.gids
        .insert(sink_id.to_owned(), "laminar:pg:0:0".to_owned());
    assert_eq!(
        begin(&mut w, &mut proc, sink_id, 0),
        Event::Began { opened: true }
    );
    let rows = Command::SinkWrite {
        sink_id: sink_id.to_owned(),
        epoch: 0,
        keep: false,
    };
    assert_eq!(run(&mut w, &mut proc, rows), Event::Ack);
    assert!(refused(&commit(&mut w, &mut proc, sink_id, 0)));
    assert!(w.pg.sink_epochs.is_empty() && w.pg.rows.is_empty());
    assert_eq!(proc.machines[sink_id].writing(), Some(0), "still open");
}

#[test]
fn a_process_that_dies_loses_its_machines() {
    // the machine that knew epoch 5 dies with its process; the next one knows what the store
    // holds (`reopened` / `learned_last`: nothing) and opens epoch 6 again
    let mut w = World::new(&["pg"], &["k"], 1_000_000);
    for sink in ["k", "pg"] {
        let mut proc = started(&mut w, sink, sink);
        assert_eq!(
            begin(&mut w, &mut proc, sink, 6),
            Event::Began { opened: true }
        );
        drop(proc);
        let mut proc = Proc::default();
        let sink_id = sink.to_owned();
        assert_eq!(
            run(&mut w, &mut proc, Command::InitSink { sink_id }),
            Event::Ack
        );
        assert_eq!(proc.machines[sink].tracker().last_committed_epoch(), None);
        assert_eq!(
            begin(&mut w, &mut proc, sink, 6),
            Event::Began { opened: true }
        );
    }
}
