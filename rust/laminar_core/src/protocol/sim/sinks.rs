//! The simulation's sinks: a Kafka sink (producer, markers, flush, one-phase or prepared
//! commit, `recover()` through its in-doubt machine) and a PostgreSQL sink (claim, COPY,
//! `PREPARE TRANSACTION`, commit), each reaching its protocol's crash points where the real
//! sink reaches them.

use crate::prepared::PreparedTxnState;

use super::super::command::{Event, FailureKind};
use super::super::crash::CrashPoint;
use super::super::records::epoch_committed;
use super::super::single::{KafkaInDoubt, PostgresInDoubt};
use super::super::{End, Epoch};
use super::driver::{Proc, drive, failed, kafka_failure, prepared_state};
use super::pg::{Pg, PreparedTxn};
use super::{Crash, Record, World};

pub(super) fn sink_begin(
    w: &mut World,
    proc: &mut Proc,
    sink_id: &str,
    epoch: Epoch,
) -> Result<Event, Crash> {
    if let Some(tid) = Proc::kafka_tid(w, sink_id) {
        let (pe, p) = proc.producer(w, &tid);
        if epoch_committed(p.last, epoch) {
            return Ok(Event::Began { opened: false });
        }
        if let Err(e) = w.kafka.begin(&tid, pe) {
            return Ok(kafka_failure(e));
        }
        let p = proc.producers.get_mut(&tid).expect("initialised");
        p.open = Some(epoch);
        p.prepared = false;
        w.point(CrashPoint::KafkaAfterBegin)?;
        return Ok(Event::Began { opened: true });
    }
    let sink = Proc::pg_sink(w, sink_id).expect("a known sink");
    let last = w.pg.sink_epochs.get(&sink).copied();
    if epoch_committed(last, epoch) {
        proc.pg_last.insert(sink, last);
        return Ok(Event::Began { opened: false });
    }
    proc.staged.insert(sink_id.to_owned(), (epoch, Vec::new()));
    w.point(CrashPoint::PostgresAfterClaim)?;
    Ok(Event::Began { opened: true })
}

/// Produces (Kafka) or copies (PostgreSQL) rows into the sink's open transaction.
pub(super) fn write_rows(
    w: &mut World,
    proc: &mut Proc,
    sink_id: &str,
    rows: &[Record],
    keep: bool,
) -> Result<Event, Crash> {
    if let Some(tid) = Proc::kafka_tid(w, sink_id) {
        let (pe, _) = proc.producer(w, &tid);
        for (i, r) in rows.iter().enumerate() {
            if i == rows.len() / 2 {
                w.point(CrashPoint::KafkaMidProduce)?;
            }
            if let Err(e) = w.kafka.produce(&tid, pe, *r) {
                return Ok(kafka_failure(e));
            }
        }
        if keep {
            proc.kept.insert(tid, rows.to_vec());
        }
        return Ok(Event::Ack);
    }
    if let Some((_, staged)) = proc.staged.get_mut(sink_id) {
        staged.extend_from_slice(rows);
    }
    w.point(CrashPoint::PostgresMidCopy)?;
    Ok(Event::Ack)
}

/// Kafka: markers, then flush (the marker of the epoch the transaction is for).
pub(super) fn finish_writes(
    w: &mut World,
    tid: &str,
    pe: i32,
    epoch: Epoch,
) -> Result<Option<Event>, Crash> {
    if let Err(e) = w.kafka.send_marker(tid, pe, epoch) {
        return Ok(Some(kafka_failure(e)));
    }
    w.point(CrashPoint::KafkaAfterMarkers)?;
    if let Err(e) = w.kafka.flush(tid, pe) {
        return Ok(Some(kafka_failure(e)));
    }
    w.point(CrashPoint::KafkaAfterFlush)?;
    Ok(None)
}

pub(super) fn sink_prepare(
    w: &mut World,
    proc: &mut Proc,
    sink_id: &str,
    epoch: Epoch,
) -> Result<Event, Crash> {
    if let Some(tid) = Proc::kafka_tid(w, sink_id) {
        let (pe, _) = proc.producer(w, &tid);
        if let Some(failure) = finish_writes(w, &tid, pe, epoch)? {
            return Ok(failure);
        }
        proc.producers.get_mut(&tid).expect("initialised").prepared = true;
        let state = prepared_state(&tid, epoch, w.kafka.identity(&tid));
        return Ok(Event::Prepared {
            prepared_state: state,
        });
    }
    let sink = Proc::pg_sink(w, sink_id).expect("a known sink");
    let gid = proc
        .gids
        .get(sink_id)
        .cloned()
        .expect("a participant's gid");
    w.point(CrashPoint::PostgresBeforePrepare)?;
    let (_, rows) = proc.staged.remove(sink_id).unwrap_or_default();
    if w.pg.prepared.contains_key(&gid) {
        return Ok(failed(FailureKind::Fatal, format!("gid {gid} exists")));
    }
    let now = w.kafka.now_ms;
    w.pg.prepared.insert(
        gid,
        PreparedTxn {
            sink: sink.clone(),
            epoch,
            rows,
            prepared_ms: now,
        },
    );
    w.point(CrashPoint::PostgresAfterPrepare)?;
    Ok(Event::Prepared {
        prepared_state: PreparedTxnState::new(Some(sink), epoch).to_text(),
    })
}

pub(super) fn sink_commit(
    w: &mut World,
    proc: &mut Proc,
    sink_id: &str,
    epoch: Epoch,
) -> Result<Event, Crash> {
    if let Some(tid) = Proc::kafka_tid(w, sink_id) {
        let (pe, p) = proc.producer(w, &tid);
        let prepared = p.prepared;
        if !prepared {
            if let Some(failure) = finish_writes(w, &tid, pe, epoch)? {
                return Ok(failure);
            }
        }
        if let Some(committed) = w.lose_commit.take() {
            if committed {
                let _ = w.kafka.commit(&tid, pe);
            }
            let p = proc.producers.get_mut(&tid).expect("initialised");
            p.in_doubt = Some(epoch);
            return Ok(failed(FailureKind::InDoubt, "the commit's answer was lost"));
        }
        if let Err(e) = w.kafka.commit(&tid, pe) {
            return Ok(kafka_failure(e));
        }
        let p = proc.producers.get_mut(&tid).expect("initialised");
        p.open = None;
        p.prepared = false;
        p.last = Some(epoch);
        w.point(CrashPoint::KafkaAfterCommit)?;
        return Ok(Event::Ack);
    }
    let sink = Proc::pg_sink(w, sink_id).expect("a known sink");
    w.point(CrashPoint::PostgresBeforeCommit)?;
    let (e, rows) = proc.staged.remove(sink_id).unwrap_or((epoch, Vec::new()));
    let commit = |pg: &mut Pg| {
        pg.sink_epochs.insert(sink.clone(), e);
        pg.rows.extend(rows.iter().map(|r| (sink.clone(), *r)));
    };
    if let Some(committed) = w.lose_commit.take() {
        if committed {
            commit(&mut w.pg);
        }
        proc.pg_in_doubt.insert(sink.clone(), epoch);
        return Ok(failed(
            FailureKind::InDoubt,
            "the connection was lost during COMMIT",
        ));
    }
    commit(&mut w.pg);
    proc.pg_last.insert(sink, Some(epoch));
    w.point(CrashPoint::PostgresAfterCommit)?;
    Ok(Event::Ack)
}

/// `sink.recover()`: the sink's in-doubt machine, driven here as the sink drives it.
pub(super) fn sink_recover(w: &mut World, proc: &mut Proc, sink_id: &str) -> Result<Event, Crash> {
    if let Some(tid) = Proc::kafka_tid(w, sink_id) {
        let in_doubt = proc.producers.get(&tid).and_then(|p| p.in_doubt);
        let Some(epoch) = in_doubt else {
            return Ok(Event::Marker {
                epoch: w.kafka.marker(&tid),
                now_ms: w.kafka.now_ms,
            });
        };
        let mut machine = KafkaInDoubt::new(tid.clone(), epoch, true);
        let end = drive(w, proc, &mut machine)?;
        if let Some(p) = proc.producers.get_mut(&tid) {
            p.in_doubt = None;
            if machine.committed() == Some(true) {
                p.last = Some(epoch);
            }
        }
        return Ok(match end {
            End::Ok => Event::Marker {
                epoch: machine.marker(),
                now_ms: w.kafka.now_ms,
            },
            End::Refused(r) => failed(FailureKind::Fenced, r.message),
            End::Failed(f) => Event::Failed(f),
        });
    }
    let sink = Proc::pg_sink(w, sink_id).expect("a known sink");
    let Some(epoch) = proc.pg_in_doubt.remove(&sink) else {
        return Ok(Event::Marker {
            epoch: w.pg.sink_epochs.get(&sink).copied(),
            now_ms: w.kafka.now_ms,
        });
    };
    let mut machine = PostgresInDoubt::new(sink.clone(), epoch, None);
    Ok(match drive(w, proc, &mut machine)? {
        End::Ok => {
            proc.pg_last.insert(sink, machine.last());
            Event::Marker {
                epoch: machine.last(),
                now_ms: w.kafka.now_ms,
            }
        }
        End::Refused(r) => failed(FailureKind::Fatal, r.message),
        End::Failed(f) => Event::Failed(f),
    })
}
