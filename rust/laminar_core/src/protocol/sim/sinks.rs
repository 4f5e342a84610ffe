//! The simulation's sinks: a Kafka sink (producer, markers, flush, one-phase or prepared
//! commit, `recover()` through its in-doubt machine) and a PostgreSQL sink (claim, COPY,
//! `PREPARE TRANSACTION`, commit), each reaching its protocol's crash points where the real
//! sink reaches them. Each asks its own transaction's machine (`SinkTxn`, docs/engine.md, "The
//! sink's transaction") at each call in the order `KafkaSink`/`PostgresSink` do, and performs
//! its answer against the simulated stores: nothing here decides a replay, a commit or an abort.

use crate::prepared::PreparedTxnState;

use crate::protocol::command::Event;

use crate::protocol::crash::CrashPoint;
use crate::protocol::failure::FailureKind;
use crate::protocol::records::epoch_committed;
use crate::protocol::sim::driver::{
    Proc, drive, failed, kafka_failure, now_us, prepared_state, refused,
};
use crate::protocol::sim::kafka::KafkaErr;
use crate::protocol::sim::pg::{Pg, PreparedTxn};
use crate::protocol::sim::{Crash, Record, World};
use crate::protocol::sink::{
    AbortAnswer, AbortFailure, BeginAnswer, Client, CommitAnswer, KafkaInDoubt, PostgresInDoubt,
    RecoverAnswer,
};
use crate::protocol::{End, Epoch};

/// `begin_transaction(epoch)`: the machine's answer (recover first, skip a replay, or open).
fn ask_begin(
    w: &mut World,
    proc: &mut Proc,
    sink_id: &str,
    key: &str,
    epoch: Epoch,
) -> Result<Result<BeginAnswer, Event>, Crash> {
    let mut answer = proc.machines.get_mut(key).map(|m| m.begin(epoch));
    if let Some(Ok(BeginAnswer::Recover)) = answer {
        if let Event::Failed(f) = sink_recover(w, proc, sink_id)? {
            return Ok(Err(Event::Failed(f)));
        }
        answer = proc.machines.get_mut(key).map(|m| m.begin(epoch));
    }
    Ok(match answer {
        Some(Ok(a)) => Ok(a),
        Some(Err(e)) => Err(refused(e)),
        None => Ok(BeginAnswer::Open),
    })
}

pub(super) fn sink_begin(
    w: &mut World,
    proc: &mut Proc,
    sink_id: &str,
    epoch: Epoch,
) -> Result<Event, Crash> {
    if let Some(tid) = Proc::kafka_tid(w, sink_id) {
        let pe = proc.producer(w, &tid);
        match ask_begin(w, proc, sink_id, &tid, epoch)? {
            Err(event) => return Ok(event),
            Ok(BeginAnswer::Skip { .. }) => return Ok(Event::Began { opened: false }),
            Ok(_) => {}
        }
        let now = now_us(w);
        let machine = proc.kafka_machine(&tid);
        if let Err(e) = machine.opened(epoch, now) {
            return Ok(refused(e));
        }
        if let Err(e) = w.kafka.begin(&tid, pe) {
            let _ = machine.abort_after_error();
            let _ = machine.abort_ok(now);
            return Ok(kafka_failure(e));
        }
        w.point(CrashPoint::KafkaAfterBegin)?;
        return Ok(Event::Began { opened: true });
    }
    let sink = Proc::pg_sink(w, sink_id).expect("a known sink");
    proc.pg_machine(sink_id);
    match ask_begin(w, proc, sink_id, sink_id, epoch)? {
        Err(event) => return Ok(event),
        Ok(BeginAnswer::Skip { .. }) => return Ok(Event::Began { opened: false }),
        Ok(_) => {}
    }
    // The claim: the store refuses an epoch its `laminar.sink_epochs` row holds already.
    let last = w.pg.sink_epochs.get(&sink).copied();
    let now = now_us(w);
    let machine = proc.pg_machine(sink_id);
    if epoch_committed(last, epoch) {
        return Ok(match machine.store_holds(epoch, last) {
            Ok(_) => Event::Began { opened: false },
            Err(e) => refused(e),
        });
    }
    if let Err(e) = machine.opened(epoch, now) {
        return Ok(refused(e));
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
    let count = rows.len() as u64;
    if let Some(tid) = Proc::kafka_tid(w, sink_id) {
        let pe = proc.producer(w, &tid);
        if let Err(e) = proc.kafka_machine(&tid).write() {
            return Ok(refused(e));
        }
        for (i, r) in rows.iter().enumerate() {
            if i == rows.len() / 2 {
                w.point(CrashPoint::KafkaMidProduce)?;
            }
            if let Err(e) = w.kafka.produce(&tid, pe, *r) {
                return Ok(kafka_failure(e));
            }
        }
        if let Err(e) = proc.kafka_machine(&tid).wrote(count, 0) {
            return Ok(refused(e));
        }
        if keep {
            proc.kept.insert(tid, rows.to_vec());
        }
        return Ok(Event::Ack);
    }
    let machine = proc.pg_machine(sink_id);
    if let Err(e) = machine.write() {
        return Ok(refused(e));
    }
    if let Err(e) = machine.wrote(count, 0) {
        return Ok(refused(e));
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
        let pe = proc.producer(w, &tid);
        let epoch = match proc.kafka_machine(&tid).prepare() {
            Ok(open) if open == epoch => open,
            Ok(open) => return Ok(failed(FailureKind::Fatal, format!("epoch {open} is open"))),
            Err(e) => return Ok(refused(e)),
        };
        if let Some(failure) = finish_writes(w, &tid, pe, epoch)? {
            return Ok(failure);
        }
        if let Err(e) = proc.kafka_machine(&tid).prepared(epoch) {
            return Ok(refused(e));
        }
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
    let epoch = match proc.pg_machine(sink_id).prepare() {
        Ok(open) if open == epoch => open,
        Ok(open) => return Ok(failed(FailureKind::Fatal, format!("epoch {open} is open"))),
        Err(e) => return Ok(refused(e)),
    };
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
    if let Err(e) = proc.pg_machine(sink_id).prepared(epoch) {
        return Ok(refused(e));
    }
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
        let pe = proc.producer(w, &tid);
        match proc.kafka_machine(&tid).commit(epoch) {
            Err(e) => return Ok(refused(e)),
            Ok(CommitAnswer::OnePhase) => {
                if let Some(failure) = finish_writes(w, &tid, pe, epoch)? {
                    return Ok(failure);
                }
            }
            Ok(CommitAnswer::Prepared) => {}
        }
        let now = now_us(w);
        if let Err(e) = proc.kafka_machine(&tid).commit_started(epoch, now) {
            return Ok(refused(e));
        }
        if let Some(committed) = w.lose_commit.take() {
            if committed {
                let _ = w.kafka.commit(&tid, pe);
            }
            return Ok(match proc.kafka_machine(&tid).commit_failed(true, now) {
                Ok(_) => failed(FailureKind::InDoubt, "the commit's answer was lost"),
                Err(e) => refused(e),
            });
        }
        if let Err(e) = w.kafka.commit(&tid, pe) {
            // The broker refused it (abortable: rolled back) or fenced the producer (unknown).
            let lost = e == KafkaErr::Fenced;
            if let Err(e) = proc.kafka_machine(&tid).commit_failed(lost, now) {
                return Ok(refused(e));
            }
            return Ok(kafka_failure(e));
        }
        w.point(CrashPoint::KafkaAfterCommit)?;
        let now = now_us(w);
        return Ok(match proc.kafka_machine(&tid).commit_ok(now) {
            Ok(()) => Event::Ack,
            Err(e) => refused(e),
        });
    }
    let sink = Proc::pg_sink(w, sink_id).expect("a known sink");
    let answer = match proc.pg_machine(sink_id).commit(epoch) {
        Ok(answer) => answer,
        Err(e) => return Ok(refused(e)),
    };
    w.point(CrashPoint::PostgresBeforeCommit)?;
    let now = now_us(w);
    if let Err(e) = proc.pg_machine(sink_id).commit_started(epoch, now) {
        return Ok(refused(e));
    }
    let (e, rows) = proc.staged.remove(sink_id).unwrap_or((epoch, Vec::new()));
    let gid = proc.gids.get(sink_id).cloned();
    let commit = |pg: &mut Pg| match (answer, &gid) {
        (CommitAnswer::Prepared, Some(gid)) => {
            pg.finish_prepared(gid, true);
        }
        _ => {
            pg.sink_epochs.insert(sink.clone(), e);
            pg.rows.extend(rows.iter().map(|r| (sink.clone(), *r)));
        }
    };
    if let Some(committed) = w.lose_commit.take() {
        if committed {
            commit(&mut w.pg);
        }
        return Ok(match proc.pg_machine(sink_id).commit_failed(true, now) {
            Ok(_) => failed(
                FailureKind::InDoubt,
                "the connection was lost during COMMIT",
            ),
            Err(e) => refused(e),
        });
    }
    commit(&mut w.pg);
    if let Err(e) = proc.pg_machine(sink_id).commit_ok(now) {
        return Ok(refused(e));
    }
    w.point(CrashPoint::PostgresAfterCommit)?;
    Ok(Event::Ack)
}

/// `abort_transaction(epoch)` (`epoch` None: the producer's open epoch, if any): the machine
/// says whether there is anything to roll back, and how.
pub(super) fn sink_abort(
    w: &mut World,
    proc: &mut Proc,
    sink_id: &str,
    epoch: Option<Epoch>,
) -> Event {
    let now = now_us(w);
    if let Some(tid) = Proc::kafka_tid(w, sink_id) {
        let pe = proc.producer(w, &tid);
        let Some(epoch) = epoch.or_else(|| proc.open_epoch(&tid)) else {
            return Event::Ack;
        };
        let machine = proc.kafka_machine(&tid);
        match machine.abort_via(epoch, Client::Live, now) {
            Err(e) => return refused(e),
            Ok(AbortAnswer::Nothing) => return Event::Ack,
            Ok(AbortAnswer::Fenced) => return failed(FailureKind::Fenced, "producer fenced"),
            Ok(_) => {}
        }
        if w.kafka.abort(&tid, pe).is_ok() {
            return match proc.kafka_machine(&tid).abort_ok(now) {
                Ok(()) => Event::Ack,
                Err(e) => refused(e),
            };
        }
        match proc.kafka_machine(&tid).abort_failed() {
            Ok(AbortFailure::Reopen) => {
                // an abort that fails: a new producer makes it final
                proc.producers.remove(&tid);
                proc.producer(w, &tid);
                let machine = proc.kafka_machine(&tid);
                if machine.in_doubt().is_some() {
                    if let Err(e) = machine.abort_reopened(now) {
                        return refused(e);
                    }
                }
                return Event::Ack;
            }
            Ok(AbortFailure::InDoubt) => return failed(FailureKind::InDoubt, "abort failed"),
            Err(e) => return refused(e),
        }
    }
    let Some(epoch) = epoch else {
        return Event::Ack;
    };
    let gid = proc.gids.get(sink_id).cloned();
    let answer = match proc.pg_machine(sink_id).abort(epoch) {
        Ok(answer) => answer,
        Err(e) => return refused(e),
    };
    match answer {
        AbortAnswer::Nothing => return Event::Ack,
        AbortAnswer::RollbackPrepared => {
            if let Some(gid) = gid {
                w.pg.finish_prepared(&gid, false);
            }
        }
        _ => {
            proc.staged.remove(sink_id);
        }
    }
    match proc.pg_machine(sink_id).abort_ok(now) {
        Ok(()) => Event::Ack,
        Err(e) => refused(e),
    }
}

/// `sink.recover()`: the machine says whether an epoch is in doubt; its in-doubt machine is
/// driven here as the sink drives it, and the outcome reported back.
pub(super) fn sink_recover(w: &mut World, proc: &mut Proc, sink_id: &str) -> Result<Event, Crash> {
    let now = now_us(w);
    if let Some(tid) = Proc::kafka_tid(w, sink_id) {
        proc.producer(w, &tid);
        let RecoverAnswer::Resolve { epoch, .. } = proc.kafka_machine(&tid).recover() else {
            let marker = w.kafka.marker(&tid);
            if let Err(e) = proc.kafka_machine(&tid).saw_committed(marker) {
                return Ok(refused(e));
            }
            return Ok(Event::Marker {
                epoch: marker,
                now_ms: w.kafka.now_ms,
            });
        };
        let mut machine = KafkaInDoubt::new(tid.clone(), epoch, true);
        let end = drive(w, proc, &mut machine)?;
        let now = now_us(w);
        if let Err(e) =
            proc.kafka_machine(&tid)
                .resolved_by_marker(machine.committed(), machine.marker(), now)
        {
            return Ok(refused(e));
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
    let RecoverAnswer::Resolve { epoch, .. } = proc.pg_machine(sink_id).recover() else {
        let last = w.pg.sink_epochs.get(&sink).copied();
        if let Err(e) = proc.pg_machine(sink_id).learned_last(last) {
            return Ok(refused(e));
        }
        return Ok(Event::Marker {
            epoch: last,
            now_ms: w.kafka.now_ms,
        });
    };
    let mut machine = PostgresInDoubt::new(sink.clone(), epoch, None);
    Ok(match (drive(w, proc, &mut machine)?, machine.committed()) {
        (End::Ok, Some(committed)) => {
            let last = machine.last();
            if let Err(e) = proc.pg_machine(sink_id).resolved(committed, last, now) {
                return Ok(refused(e));
            }
            Event::Marker {
                epoch: last,
                now_ms: w.kafka.now_ms,
            }
        }
        (End::Ok, None) => failed(FailureKind::Fatal, "recovery ended without an outcome"),
        (End::Refused(r), _) => failed(FailureKind::Fatal, r.message),
        (End::Failed(f), _) => Event::Failed(f),
    })
}
