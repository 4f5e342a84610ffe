//! One sink alone in the simulation ([`SingleEpoch`] and the in-doubt machines its
//! `sink_recover` runs): a crash at every point of the Kafka and PostgreSQL sink protocols, and
//! commits whose answer was lost.

use std::collections::BTreeSet;

use crate::protocol::command::{Command, Event};

use crate::protocol::crash::{CrashPoint, Protocol};
use crate::protocol::failure::FailureKind;
use crate::protocol::sim::driver::perform;
use crate::protocol::sim::{Crash, Proc, World, drive, points_of};
use crate::protocol::single::{SingleConfig, SingleEpoch};
use crate::protocol::sink::KafkaInDoubt;
use crate::protocol::{End, Epoch, Machine, RefusalKind};

const EPOCHS: Epoch = 3;

fn worlds() -> Vec<(World, String)> {
    let mut kafka = World::new(&[], &["k"], 1_000_000);
    kafka.decision_log = false;
    let mut pg = World::new(&["pg"], &[], 1_000_000);
    pg.decision_log = false;
    vec![(kafka, "k".to_owned()), (pg, "pg".to_owned())]
}

fn fresh(template: &World) -> World {
    let pg: Vec<&str> = template.pg_sinks.iter().map(String::as_str).collect();
    let kafka: Vec<&str> = template.kafka_sinks.iter().map(String::as_str).collect();
    let mut w = World::new(&pg, &kafka, 1_000_000);
    w.decision_log = false;
    w
}

/// The writer's process: the sink initialised, its last committed epoch known.
fn start(w: &mut World, sink: &str) -> (Proc, Option<Epoch>) {
    let mut proc = Proc::default();
    perform(
        w,
        &mut proc,
        &Command::InitSink {
            sink_id: sink.to_owned(),
        },
    )
    .expect("no point");
    let last = match perform(
        w,
        &mut proc,
        &Command::KnownEpoch {
            sink_id: sink.to_owned(),
        },
    ) {
        Ok(Event::Marker { epoch, .. }) => epoch,
        other => panic!("{other:?}"),
    };
    (proc, last)
}

fn run(w: &mut World, sink: &str, retries: u32) -> u32 {
    let mut restarts = 0;
    let mut next = 0;
    let (mut proc, mut last) = start(w, sink);
    let mut guard = 0;
    while next < EPOCHS {
        guard += 1;
        assert!(guard < 100, "no progress");
        let mut m = SingleEpoch::new(SingleConfig {
            sink_id: sink.to_owned(),
            epoch: next,
            last,
            refuse_backwards: true,
            retries,
            retry_backoff_ms: 10,
        });
        match drive(w, &mut proc, &mut m) {
            Ok(End::Ok) => {
                last = Some(next);
                next += 1;
            }
            Ok(End::Failed(f))
                if matches!(f.kind, FailureKind::Abortable { .. } | FailureKind::InDoubt) => {}
            Ok(end) => panic!("epoch {next}: {end:?}"),
            Err(Crash) => {
                restarts += 1;
                (proc, last) = start(w, sink);
            }
        }
    }
    w.check_exactly_once(EPOCHS);
    restarts
}

pub(super) fn coverage() -> BTreeSet<CrashPoint> {
    let mut seen = BTreeSet::new();
    for (mut w, sink) in worlds() {
        run(&mut w, &sink, 0);
        seen.extend(w.seen);
    }
    seen
}

#[test]
fn a_crash_at_every_sink_point_of_the_enum_ends_exactly_once() {
    let mut crashed = BTreeSet::new();
    for (template, sink) in worlds() {
        for point in points_of(&[Protocol::Kafka, Protocol::Postgres]) {
            for nth in 1..=EPOCHS as u32 {
                let mut w = fresh(&template);
                w.crash_at = Some((point, nth));
                run(&mut w, &sink, 0);
                if w.crash_at.is_none() {
                    crashed.insert(point);
                }
            }
        }
    }
    for point in [
        CrashPoint::KafkaAfterBegin,
        CrashPoint::KafkaMidProduce,
        CrashPoint::KafkaAfterMarkers,
        CrashPoint::KafkaAfterFlush,
        CrashPoint::KafkaAfterCommit,
        CrashPoint::PostgresAfterClaim,
        CrashPoint::PostgresMidCopy,
        CrashPoint::PostgresBeforeCommit,
        CrashPoint::PostgresAfterCommit,
    ] {
        assert!(crashed.contains(&point), "{point} never crashed");
    }
}

#[test]
fn a_lost_commit_answer_is_resolved_from_the_durable_record() {
    for (template, sink) in worlds() {
        for committed in [true, false] {
            for retries in [0, 2] {
                let mut w = fresh(&template);
                let (mut proc, last) = start(&mut w, &sink);
                w.lose_commit = Some(committed);
                let mut m = SingleEpoch::new(SingleConfig {
                    sink_id: sink.clone(),
                    epoch: 0,
                    last,
                    refuse_backwards: true,
                    retries,
                    retry_backoff_ms: 10,
                });
                let end = drive(&mut w, &mut proc, &mut m).expect("no crash");
                // Kafka's retried commit commits what was still open; PostgreSQL's lost COMMIT
                // that did not happen is written again only if a retry is left
                let done = committed || sink == "k" || retries > 0;
                assert_eq!(
                    end.is_ok(),
                    done,
                    "{sink} committed={committed} retries={retries}: {end:?}"
                );
                assert_eq!(m.committed(), done);
            }
        }
    }
}

#[test]
fn an_epoch_older_than_the_last_committed_is_refused_for_a_known_query() {
    let mut m = SingleEpoch::new(SingleConfig {
        sink_id: "s".into(),
        epoch: 2,
        last: Some(5),
        refuse_backwards: true,
        retries: 0,
        retry_backoff_ms: 0,
    });
    assert_eq!(m.poll(), None);
    match m.end() {
        Some(End::Refused(r)) => assert_eq!(r.kind, RefusalKind::EpochBackwards),
        other => panic!("{other:?}"),
    }
}

#[test]
fn kafka_in_doubt_stops_when_the_brokers_answer_but_not_the_commit() {
    let mut m = KafkaInDoubt::new("k", 4, true);
    assert!(matches!(m.poll(), Some(Command::RetryCommit { .. })));
    m.handle(Event::Failed(super::super::Failure::new(
        FailureKind::Fatal,
        "timed out",
    )));
    assert!(matches!(m.poll(), Some(Command::ReadMarker { .. })));
    m.handle(Event::Marker {
        epoch: Some(3),
        now_ms: 0,
    });
    assert_eq!(m.poll(), None);
    match m.end() {
        Some(End::Refused(r)) => {
            assert_eq!(r.kind, RefusalKind::Fenced);
            assert!(r.message.contains("no answer twice"), "{r}");
        }
        other => panic!("{other:?}"),
    }
    // no commit in flight: a new producer, then the marker decides; past the epoch: fenced
    let mut m = KafkaInDoubt::new("k", 4, false);
    for event in [
        Event::Marker {
            epoch: Some(3),
            now_ms: 0,
        },
        Event::Ack,
        Event::Marker {
            epoch: Some(5),
            now_ms: 0,
        },
    ] {
        assert!(m.poll().is_some());
        m.handle(event);
    }
    assert_eq!(m.poll(), None);
    assert!(matches!(m.end(), Some(End::Refused(r)) if r.kind == RefusalKind::Fenced));
    assert_eq!(m.committed(), Some(true));
}
