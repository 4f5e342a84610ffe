//! The start-up reads the PostgreSQL sinks' epochs again after fencing (docs/engine.md §2, "The
//! atomic group, step by step"): the generation bump waited on the group row for the previous
//! coordinator's decision in flight, whose epoch the first read could not see.

use crate::protocol::atomic::{AtomicGroup, GroupConfig};
use crate::protocol::command::{Command, Event};
use crate::protocol::crash::CrashPoint;
use crate::protocol::{End, Epoch, Machine};

fn config() -> GroupConfig {
    GroupConfig {
        group_id: "g".into(),
        postgres: vec!["pg".into()],
        kafka: Vec::new(),
        redo_log: false,
        owner: Some("query".into()),
        restart_on_new_query: false,
        retries: 0,
        retry_backoff_ms: 10,
        scale_out: false,
    }
}

/// Answers the start-up's commands as a decision database would in which the previous
/// coordinator commits epoch `after` while this one's generation bump waits for it (`before`:
/// what the first read sees). Returns every command performed.
fn run(group: &mut AtomicGroup, before: Option<Epoch>, after: Option<Epoch>) -> Vec<Command> {
    let mut seen = Vec::new();
    let mut bumped = false;
    while let Some(command) = group.poll() {
        let event = match &command {
            Command::ReadSinkEpochs { sink_ids } => Event::Progress {
                epochs: sink_ids
                    .iter()
                    .map(|s| (s.clone(), if bumped { after } else { before }))
                    .collect(),
            },
            Command::ReadOwnership { .. } => Event::Ownership {
                owner: Some("query".into()),
                epoch_base: 0,
                member_owners: Vec::new(),
            },
            Command::BumpGeneration { .. } => {
                bumped = true;
                Event::Generation {
                    generation: Some(2),
                }
            }
            Command::LockGroup { .. } => Event::Generation {
                generation: Some(2),
            },
            Command::ReadDecisions { .. } => Event::Decisions { rows: Vec::new() },
            Command::WriteRows { .. } => Event::Claimed { claimed: true },
            _ => Event::Ack,
        };
        seen.push(command);
        group.handle(event);
    }
    seen
}

#[test]
fn start_up_reads_the_epochs_again_after_the_generation_bump() {
    let mut group = AtomicGroup::new(config());
    group.start();
    let seen = run(&mut group, Some(4), Some(5));
    assert_eq!(group.end(), Some(&End::Ok));
    let bump = seen
        .iter()
        .position(|c| matches!(c, Command::BumpGeneration { .. }))
        .expect("the start-up fences");
    let reads: Vec<usize> = seen
        .iter()
        .enumerate()
        .filter(|(_, c)| matches!(c, Command::ReadSinkEpochs { .. }))
        .map(|(i, _)| i)
        .collect();
    assert!(
        reads.iter().any(|&i| i < bump),
        "read before the owner guard"
    );
    let again = *reads
        .iter()
        .find(|&&i| i > bump)
        .expect("read again once fenced");
    let fenced = seen
        .iter()
        .position(|c| {
            matches!(
                c,
                Command::Reached {
                    point: CrashPoint::AtomicAfterFence
                }
            )
        })
        .expect("the fence's crash point");
    assert!(again < fenced, "read again before atomic.after_fence");
    // the previous coordinator's epoch is the group's, not a foreign writer's claim
    assert_eq!(group.last_committed("pg"), Some(5));
}

#[test]
fn the_epoch_the_previous_coordinator_decided_during_the_bump_is_skipped() {
    let mut group = AtomicGroup::new(config());
    group.start();
    run(&mut group, Some(4), Some(5));
    group.write_epoch(5);
    let seen = run(&mut group, Some(5), Some(5));
    assert_eq!(group.end(), Some(&End::Ok));
    assert!(!group.committed(), "epoch 5 is committed already: skipped");
    assert!(
        !seen.iter().any(|c| matches!(c, Command::LockGroup { .. })),
        "nothing written for a committed epoch: {seen:?}"
    );
    group.write_epoch(6);
    let seen = run(&mut group, Some(5), Some(5));
    assert_eq!(group.end(), Some(&End::Ok));
    assert!(group.committed());
    assert!(
        seen.iter()
            .any(|c| matches!(c, Command::WriteRows { epoch: 6, .. }))
    );
}

/// A scale-out group's Kafka sink never writes (its tasks' participants `<tid>.p<part>` do):
/// the start-up learns its progress from the group's decision rows — one read, whatever the
/// topic holds — and neither reads the sink's own marker (missing forever: it fell back to the
/// witness, which read the topic back on every commit) nor opens a producer for it.
#[test]
fn a_scale_out_start_up_reads_kafka_progress_from_the_decision_log_not_the_topic() {
    use crate::protocol::records::DecisionRow;

    let row = |tid: &str, epoch: Epoch| DecisionRow {
        transactional_id: tid.into(),
        epoch,
        previous_epoch: Some(epoch - 1),
        prepared_state: String::new(),
        group_id: "g".into(),
        age_s: 1.0,
    };
    let rows = vec![row("orders.p0", 7), row("orders.p1", 6), row("other.p0", 9)];
    let mut group = AtomicGroup::new(GroupConfig {
        kafka: vec!["orders".into()],
        scale_out: true,
        ..config()
    });
    group.start();
    let mut seen = Vec::new();
    while let Some(command) = group.poll() {
        let event = match &command {
            Command::ReadSinkEpochs { sink_ids } => Event::Progress {
                epochs: sink_ids.iter().map(|s| (s.clone(), Some(7))).collect(),
            },
            Command::ReadOwnership { .. } => Event::Ownership {
                owner: Some("query".into()),
                epoch_base: 0,
                member_owners: Vec::new(),
            },
            Command::BumpGeneration { .. } => Event::Generation {
                generation: Some(2),
            },
            Command::ReadDecisions { .. } => Event::Decisions { rows: rows.clone() },
            // the watcher pass asks whether a decided participant's Kafka part is behind
            Command::ReadMarker { sink_id } if sink_id.contains(".p") => Event::Marker {
                epoch: Some(9),
                now_ms: 0,
            },
            Command::ListPrepared => Event::PreparedList { gids: Vec::new() },
            Command::ReadDtStates { .. } => Event::DtRows { rows: Vec::new() },
            _ => Event::Ack,
        };
        seen.push(command);
        group.handle(event);
    }
    assert_eq!(group.end(), Some(&End::Ok), "{seen:?}");
    let touched: Vec<&Command> = seen
        .iter()
        .filter(|c| {
            matches!(c,
                Command::ReadMarker { sink_id } | Command::KnownEpoch { sink_id }
                    | Command::InitSink { sink_id } if sink_id == "orders")
        })
        .collect();
    assert!(touched.is_empty(), "the sink itself was read: {touched:?}");
    assert_eq!(
        group.last_committed("orders"),
        Some(7),
        "its participants' last decision"
    );
}
