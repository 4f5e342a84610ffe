//! Tests of a scale-out task attempt (`task.rs`): the recheck after the claim, the share lock
//! through the prepares, and the stop fence of `create_record` (docs/protocol.md §4).

use super::*;
use crate::protocol::Machine;

fn task() -> ScaleOutTask {
    ScaleOutTask::new(TaskContext {
        dtid: "laminar:g:7".into(),
        epoch: 7,
        part: 1,
        attempt: "0-a".into(),
        postgres: vec![("pg".into(), "laminar:pg:7:1".into())],
        kafka: vec!["tid".into()],
        create_record: Some("g".into()),
        writer: Some("w1".into()),
    })
}

/// Drives the attempt, answering each command; the record reads `prepare`, then `recheck`.
fn run(recheck: Option<DtState>) -> (ScaleOutTask, Vec<Command>) {
    run_fenced(None, Some(DtState::Prepare), recheck)
}

/// `run` with the group's stop fence at `fence` and the record's first read `first` (a
/// record the attempt creates reads `prepare`).
fn run_fenced(
    fence: Option<Epoch>,
    first: Option<DtState>,
    recheck: Option<DtState>,
) -> (ScaleOutTask, Vec<Command>) {
    run_reserved(fence, None, first, recheck)
}

/// `run_fenced` with the fence reserved for the writer `reserved` (the attempt's is `w1`).
fn run_reserved(
    fence: Option<Epoch>,
    reserved: Option<&str>,
    first: Option<DtState>,
    recheck: Option<DtState>,
) -> (ScaleOutTask, Vec<Command>) {
    let mut t = task();
    let mut seen = Vec::new();
    let mut reads = 0;
    let mut created = false;
    while let Some(c) = t.poll() {
        let event = match &c {
            Command::ReadSinkEpochs { .. } => Event::Progress { epochs: vec![] },
            Command::ReadStopFence { .. } => Event::StopFence {
                epoch: fence,
                writer: reserved.map(str::to_owned),
            },
            Command::CreateDt { .. } => {
                created = first.is_none();
                Event::Applied { applied: created }
            }
            Command::ReadDtState { .. } => {
                reads += 1;
                let state = match reads {
                    1 if created => Some(DtState::Prepare),
                    1 => first,
                    _ => recheck,
                };
                Event::DtState { state }
            }
            Command::ListPrepared => Event::PreparedList { gids: vec![] },
            Command::PeekPartition => Event::Found { found: true },
            Command::KnownEpoch { .. } => Event::Marker {
                epoch: Some(6),
                now_ms: 0,
            },
            Command::SinkBegin { .. } => Event::Began { opened: true },
            Command::WritePartition => Event::Rows { count: 3 },
            Command::SinkPrepare { .. } => Event::Prepared {
                prepared_state: "s".into(),
            },
            _ => Event::Ack,
        };
        seen.push(c);
        t.handle(event);
    }
    (t, seen)
}

fn position(seen: &[Command], f: impl Fn(&Command) -> bool) -> usize {
    seen.iter().position(f).expect("command issued")
}

#[test]
fn a_rollback_after_the_claim_ends_the_attempt_before_it_begins() {
    for recheck in [None, Some(DtState::Rollback), Some(DtState::Commit)] {
        let (t, seen) = run(recheck);
        assert_eq!(t.end(), Some(&End::Ok));
        assert!(
            !seen.iter().any(|c| matches!(
                c,
                Command::SinkBegin { .. } | Command::WritePartition | Command::SinkPrepare { .. }
            )),
            "{recheck:?}: nothing begun: {seen:?}"
        );
        let init = position(&seen, |c| matches!(c, Command::KnownEpoch { .. }));
        let read = seen
            .iter()
            .rposition(|c| matches!(c, Command::ReadDtState { .. }));
        assert!(
            read > Some(init),
            "the record is read again after the Kafka init"
        );
        assert!(seen.iter().any(|c| matches!(c, Command::Commit)));
        assert!(
            seen.iter()
                .any(|c| matches!(c, Command::ReleaseParticipants { prepared: false }))
        );
        assert!(
            t.results()
                .iter()
                .all(|r| r.status == ResultStatus::Skipped)
        );
    }
}

#[test]
fn a_live_record_is_held_for_share_from_the_kafka_init_through_the_prepares() {
    let (t, seen) = run(Some(DtState::Prepare));
    assert_eq!(t.end(), Some(&End::Ok));
    let init = position(&seen, |c| matches!(c, Command::KnownEpoch { .. }));
    let read = position(&seen, |c| matches!(c, Command::ReadDtState { .. }));
    let reread = seen
        .iter()
        .rposition(|c| matches!(c, Command::ReadDtState { .. }))
        .expect("read again");
    assert!(read < init && init < reread);
    let begin = position(&seen, |c| matches!(c, Command::SinkBegin { .. }));
    let last_prepare = seen
        .iter()
        .rposition(|c| matches!(c, Command::SinkPrepare { .. }))
        .expect("prepared");
    let commit = seen
        .iter()
        .rposition(|c| matches!(c, Command::Commit))
        .expect("committed");
    assert!(reread < begin && last_prepare < commit);
    assert!(
        t.results()
            .iter()
            .all(|r| r.status == ResultStatus::Prepared)
    );
}

fn issued(seen: &[Command], f: impl Fn(&Command) -> bool) -> bool {
    seen.iter().any(f)
}

fn wrote(seen: &[Command]) -> bool {
    issued(seen, |c| {
        matches!(
            c,
            Command::ClaimParticipants { .. }
                | Command::InitSink { .. }
                | Command::SinkBegin { .. }
                | Command::WritePartition
                | Command::SinkPrepare { .. }
        )
    })
}

#[test]
fn a_missing_record_under_a_stop_fence_is_not_created_and_nothing_is_written() {
    for fence in [7, 8, 100] {
        let (t, seen) = run_fenced(Some(fence), None, Some(DtState::Prepare));
        assert_eq!(t.end(), Some(&End::Ok));
        assert!(
            !issued(&seen, |c| matches!(c, Command::CreateDt { .. })),
            "fence {fence}: no record created: {seen:?}"
        );
        assert!(!wrote(&seen), "fence {fence}: nothing claimed or written");
        let fenced = position(
            &seen,
            |c| matches!(c, Command::ReadStopFence { group_id } if group_id == "g"),
        );
        let read = position(&seen, |c| matches!(c, Command::ReadDtState { .. }));
        let commit = seen
            .iter()
            .rposition(|c| matches!(c, Command::Commit))
            .expect("the fence read's transaction ends");
        assert!(fenced < read && read < commit);
        assert!(issued(&seen, |c| matches!(
            c,
            Command::Log { level: LogLevel::Warning, message } if message.contains("fenced up to epoch")
        )));
        assert!(
            t.results()
                .iter()
                .all(|r| r.status == ResultStatus::Skipped && r.records == 0)
        );
    }
}

#[test]
fn a_stop_fence_below_the_epoch_or_none_creates_the_record_as_always() {
    for fence in [None, Some(0), Some(6)] {
        let (t, seen) = run_fenced(fence, None, Some(DtState::Prepare));
        assert_eq!(t.end(), Some(&End::Ok));
        let fenced = position(&seen, |c| matches!(c, Command::ReadStopFence { .. }));
        let create = position(
            &seen,
            |c| matches!(c, Command::CreateDt { dtid, group_id, epoch: 7 } if dtid == "laminar:g:7" && group_id == "g"),
        );
        // the record is created and committed under the fence lock, before the claim reads it
        assert!(fenced < create);
        assert!(matches!(seen[create + 1], Command::Commit), "{seen:?}");
        assert!(matches!(
            seen[create + 2],
            Command::ReadDtState {
                for_share: true,
                ..
            }
        ));
        assert!(wrote(&seen));
        assert!(
            t.results()
                .iter()
                .all(|r| r.status == ResultStatus::Prepared && r.records == 3)
        );
    }
}

#[test]
fn a_record_that_exists_is_claimed_whatever_the_fence() {
    for fence in [None, Some(7), Some(9)] {
        let (t, seen) = run_fenced(fence, Some(DtState::Prepare), Some(DtState::Prepare));
        assert_eq!(t.end(), Some(&End::Ok));
        assert!(issued(&seen, |c| matches!(
            c,
            Command::ClaimParticipants { .. }
        )));
        assert!(
            t.results()
                .iter()
                .all(|r| r.status == ResultStatus::Prepared)
        );
    }
    // rolled back or decided: skipped as always, not for the fence
    for first in [Some(DtState::Rollback), Some(DtState::Commit)] {
        let (t, seen) = run_fenced(Some(7), first, None);
        assert_eq!(t.end(), Some(&End::Ok));
        assert!(!wrote(&seen));
        assert!(!issued(&seen, |c| matches!(
            c,
            Command::Log { message, .. } if message.contains("fenced")
        )));
    }
}

#[test]
fn a_committed_epoch_is_skipped_before_the_fence_is_read() {
    let mut t = task();
    let mut seen = Vec::new();
    while let Some(c) = t.poll() {
        let event = match &c {
            Command::ReadSinkEpochs { .. } => Event::Progress {
                epochs: vec![("pg".into(), Some(7))],
            },
            _ => Event::Ack,
        };
        seen.push(c);
        t.handle(event);
    }
    assert_eq!(t.end(), Some(&End::Ok));
    assert!(!issued(&seen, |c| matches!(
        c,
        Command::ReadStopFence { .. }
    )));
    assert!(
        t.results()
            .iter()
            .all(|r| r.status == ResultStatus::Skipped)
    );
}

#[test]
fn a_kafka_only_task_reads_the_fence_after_the_group_s_decisions() {
    let mut t = ScaleOutTask::new(TaskContext {
        dtid: "laminar:g:7".into(),
        epoch: 7,
        part: 0,
        attempt: "0-b".into(),
        postgres: vec![],
        kafka: vec!["tid".into()],
        create_record: Some("g".into()),
        writer: None,
    });
    let mut seen = Vec::new();
    while let Some(c) = t.poll() {
        let event = match &c {
            Command::ReadDecisions { .. } => Event::Decisions { rows: vec![] },
            Command::ReadStopFence { .. } => Event::StopFence {
                epoch: Some(7),
                writer: None,
            },
            Command::ReadDtState { .. } => Event::DtState { state: None },
            _ => Event::Ack,
        };
        seen.push(c);
        t.handle(event);
    }
    assert_eq!(t.end(), Some(&End::Ok));
    assert!(!issued(&seen, |c| matches!(c, Command::CreateDt { .. })));
    assert!(!wrote(&seen));
    assert!(
        t.results()
            .iter()
            .all(|r| r.status == ResultStatus::Skipped)
    );
}

#[test]
fn a_fence_reserved_for_another_writer_ends_the_attempt_before_its_claim() {
    // a worker of the stopped run (writer w1) after the restart's writer (w2) reserved the
    // fence: the restart's record exists or not, the worker neither creates nor claims it
    for first in [None, Some(DtState::Prepare)] {
        let (t, seen) = run_reserved(Some(7), Some("w2"), first, Some(DtState::Prepare));
        assert_eq!(t.end(), Some(&End::Ok));
        assert!(!issued(&seen, |c| matches!(c, Command::CreateDt { .. })));
        assert!(!issued(&seen, |c| matches!(c, Command::ReadDtState { .. })));
        assert!(!wrote(&seen), "nothing claimed or written: {seen:?}");
        let fenced = position(&seen, |c| matches!(c, Command::ReadStopFence { .. }));
        assert!(matches!(seen[fenced + 1], Command::Commit), "{seen:?}");
        assert!(issued(&seen, |c| matches!(
            c,
            Command::Log { level: LogLevel::Warning, message } if message.contains("reserved")
        )));
        assert!(
            t.results()
                .iter()
                .all(|r| r.status == ResultStatus::Skipped && r.records == 0)
        );
    }
}

#[test]
fn a_fence_reserved_for_the_attempt_s_writer_or_below_the_epoch_is_open() {
    // the restart's own tasks create the record under the fence their writer reserved
    for (fence, reserved) in [(Some(7), "w1"), (Some(6), "w2")] {
        let (t, seen) = run_reserved(fence, Some(reserved), None, Some(DtState::Prepare));
        assert_eq!(t.end(), Some(&End::Ok));
        assert!(issued(&seen, |c| matches!(c, Command::CreateDt { .. })));
        assert!(wrote(&seen));
        assert!(
            t.results()
                .iter()
                .all(|r| r.status == ResultStatus::Prepared)
        );
    }
}
