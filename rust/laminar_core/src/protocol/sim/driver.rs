//! The simulation's driver: performs each command against the in-memory stores and reports the
//! result, exactly as the Python drivers do against psycopg, confluent-kafka and `kafka_log`. It
//! decides nothing: every branch here is the behaviour of a store or a client (a broker that
//! fences, a transaction that timed out, a COPY that claims an epoch), never of the protocol.

use std::collections::BTreeMap;

use crate::prepared::PreparedTxnState;

use super::super::command::{
    Command, DecisionRow, DecisionSelection, DtRow, Event, Failure, FailureKind,
    ParticipantDecision, ParticipantKind, ParticipantResult, ParticipantRow, ParticipantState,
    PreparedGid,
};
use super::super::crash::CrashPoint;
use super::super::distributed::{ScaleOutTask, TaskContext};
use super::super::records::{DT_TRANSITIONS, DtState};
use super::super::single::{KafkaInDoubt, PostgresInDoubt};
use super::super::{End, Epoch, Machine};
use super::kafka::KafkaErr;
use super::pg::{DtRow as SimDtRow, ParticipantRowSim, Pg, PreparedTxn, TxnStateRow};
use super::{Collected, Record, World};

/// The process died at a crash point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::protocol) struct Crash;

/// A Kafka sink in a process: its producer and what its tracker knows.
#[derive(Debug, Clone, Default)]
pub(super) struct Producer {
    epoch: Option<i32>,
    last: Option<Epoch>,
    open: Option<Epoch>,
    prepared: bool,
    /// A commit whose answer was lost: (epoch, the producer is still there).
    in_doubt: Option<Epoch>,
}

/// A process of the writer (or of a task): its clients and its open transaction.
#[derive(Debug, Default)]
pub(in crate::protocol) struct Proc {
    producers: BTreeMap<String, Producer>,
    /// PostgreSQL sinks: the epoch and rows of the open transaction, and what the tracker knows.
    staged: BTreeMap<String, (Epoch, Vec<Record>)>,
    pg_last: BTreeMap<String, Option<Epoch>>,
    pg_in_doubt: BTreeMap<String, Epoch>,
    /// The open transaction on the decision database.
    txn: Option<Pg>,
    kept: BTreeMap<String, Vec<Record>>,
    redo_read: Vec<Vec<Record>>,
    /// A task's partition and its PostgreSQL participants' gids.
    part: Option<u32>,
    gids: BTreeMap<String, String>,
}

/// Drives `machine` to its end in process `proc`.
pub(in crate::protocol) fn drive(
    w: &mut World,
    proc: &mut Proc,
    machine: &mut dyn Machine,
) -> Result<End, Crash> {
    let mut guard = 0;
    while let Some(command) = machine.poll() {
        guard += 1;
        assert!(guard < 100_000, "machine does not end");
        let event = perform(w, proc, &command)?;
        machine.handle(event);
    }
    Ok(machine.end().cloned().expect("ended"))
}

fn failed(kind: FailureKind, message: impl Into<String>) -> Event {
    Event::Failed(Failure::new(kind, message))
}

fn kafka_failure(e: KafkaErr) -> Event {
    match e {
        KafkaErr::Fenced => failed(FailureKind::Fenced, "producer fenced"),
        KafkaErr::NoTransaction => failed(
            FailureKind::Abortable { retriable: true },
            "the broker aborted the transaction",
        ),
    }
}

fn db<'a>(w: &'a mut World, proc: &'a mut Proc) -> &'a mut Pg {
    proc.txn.as_mut().unwrap_or(&mut w.pg)
}

fn prepared_state(tid: &str, epoch: Epoch, identity: (i64, i32)) -> String {
    let mut state = PreparedTxnState::new(Some(tid.to_owned()), epoch);
    state.producer_id = identity.0;
    state.producer_epoch = identity.1;
    state.to_text()
}

fn check_dt_transition(from: Option<DtState>, to: Option<DtState>) {
    assert!(
        DT_TRANSITIONS
            .iter()
            .any(|(f, _, t)| *f == from && *t == to),
        "dt_state {from:?} -> {to:?} is not in the table"
    );
}

impl Proc {
    /// The Kafka transactional id a sink id names (a task names participants `kafka:<tid>`).
    fn kafka_tid(w: &World, sink_id: &str) -> Option<String> {
        let tid = sink_id.strip_prefix("kafka:").unwrap_or(sink_id);
        w.kafka_base(tid).map(|_| tid.to_owned())
    }

    /// The PostgreSQL sink a sink id names (a task names participants `pg:<sink>:p<part>`).
    fn pg_sink(w: &World, sink_id: &str) -> Option<String> {
        let sink = sink_id
            .strip_prefix("pg:")
            .and_then(|s| s.rsplit_once(':'))
            .map_or(sink_id, |(s, _)| s);
        w.pg_sinks
            .iter()
            .any(|s| s == sink)
            .then(|| sink.to_owned())
    }

    fn producer(&mut self, w: &mut World, tid: &str) -> (i32, &mut Producer) {
        if self.producers.get(tid).and_then(|p| p.epoch).is_none() {
            let (_, epoch) = w.kafka.init_transactions(tid);
            let marker = w.kafka.marker(tid);
            let p = self.producers.entry(tid.to_owned()).or_default();
            p.epoch = Some(epoch);
            p.last = marker;
            p.open = None;
            p.prepared = false;
        }
        let p = self.producers.get_mut(tid).expect("initialised above");
        (p.epoch.unwrap_or_default(), p)
    }
}

/// Performs one command. `Err(Crash)`: the process died at a crash point.
pub(super) fn perform(w: &mut World, proc: &mut Proc, command: &Command) -> Result<Event, Crash> {
    w.kafka.advance(w.step_ms);
    let event = match command.clone() {
        Command::Reached { point } => {
            w.point(point)?;
            Event::Ack
        }
        Command::Sleep { ms } => {
            w.kafka.advance(ms);
            Event::Ack
        }
        Command::Log { .. } | Command::RegisterGroup { .. } | Command::LockPartition { .. } => {
            Event::Ack
        }
        Command::InitSink { sink_id } | Command::ReinitProducer { sink_id } => {
            if let Some(tid) = Proc::kafka_tid(w, &sink_id) {
                proc.producers.remove(&tid);
                proc.producer(w, &tid);
            } else if let Some(sink) = Proc::pg_sink(w, &sink_id) {
                proc.staged.remove(&sink);
                proc.pg_last
                    .insert(sink.clone(), w.pg.sink_epochs.get(&sink).copied());
            }
            Event::Ack
        }
        Command::KnownEpoch { sink_id } => {
            let epoch = match Proc::kafka_tid(w, &sink_id) {
                Some(tid) => proc.producer(w, &tid).1.last,
                None => proc.pg_last.get(&sink_id).copied().flatten(),
            };
            Event::Marker {
                epoch,
                now_ms: w.kafka.now_ms,
            }
        }
        Command::SinkBegin { sink_id, epoch } => sink_begin(w, proc, &sink_id, epoch)?,
        Command::SinkWrite {
            sink_id,
            epoch,
            keep,
        } => {
            let rows: Vec<Record> = (0..w.rows).map(|r| (epoch, r)).collect();
            write_rows(w, proc, &sink_id, &rows, keep)?
        }
        Command::SinkPrepare { sink_id, epoch } => sink_prepare(w, proc, &sink_id, epoch)?,
        Command::SinkCommit { sink_id, epoch } => sink_commit(w, proc, &sink_id, epoch)?,
        Command::SinkAbort { sink_id, .. } | Command::AbortProducer { sink_id } => {
            if let Some(tid) = Proc::kafka_tid(w, &sink_id) {
                let (pe, p) = proc.producer(w, &tid);
                p.open = None;
                p.prepared = false;
                if w.kafka.abort(&tid, pe).is_err() {
                    // an abort that fails: a new producer makes it final
                    proc.producers.remove(&tid);
                    proc.producer(w, &tid);
                }
            } else if let Some(sink) = Proc::pg_sink(w, &sink_id) {
                proc.staged.remove(&sink);
                if let Some(gid) = proc.gids.get(&sink_id) {
                    w.pg.finish_prepared(&gid.clone(), false);
                }
            }
            Event::Ack
        }
        Command::SinkRecover { sink_id } => sink_recover(w, proc, &sink_id)?,
        Command::RetryCommit { sink_id, .. } => {
            let tid = Proc::kafka_tid(w, &sink_id).expect("a Kafka sink");
            let (pe, p) = proc.producer(w, &tid);
            p.in_doubt = None;
            let open = w.kafka.tids.get(&tid).is_some_and(|t| t.open.is_some());
            if !open {
                // committed before its answer was lost (the retry learns it), or gone
                let held = w.kafka.marker(&tid) >= p.open;
                p.open = None;
                if held {
                    Event::Ack
                } else {
                    failed(
                        FailureKind::Abortable { retriable: true },
                        "transaction gone",
                    )
                }
            } else {
                match w.kafka.commit(&tid, pe) {
                    Ok(()) => Event::Ack,
                    Err(e) => kafka_failure(e),
                }
            }
        }
        Command::ReadMarker { sink_id } => match Proc::kafka_tid(w, &sink_id) {
            Some(tid) => Event::Marker {
                epoch: w.kafka.marker(&tid),
                now_ms: w.kafka.now_ms,
            },
            None => Event::Missing,
        },
        Command::ProduceRedo { sink_id, blob, .. } => {
            let rows = proc
                .redo_read
                .get(blob as usize)
                .cloned()
                .unwrap_or_default();
            write_rows(w, proc, &sink_id, &rows, false)?
        }
        Command::EndTxn {
            transactional_id,
            producer_id,
            producer_epoch,
            ..
        } => {
            match w
                .kafka
                .end_txn(&transactional_id, producer_id, producer_epoch)
            {
                Ok(()) => Event::EndTxn { refused: None },
                Err(e) => Event::EndTxn {
                    refused: Some(format!("{e:?}")),
                },
            }
        }
        Command::FenceProducer { transactional_id } => {
            match Proc::kafka_tid(w, &transactional_id) {
                Some(tid) => {
                    w.kafka.init_transactions(&tid);
                    Event::Ack
                }
                None => Event::Missing,
            }
        }
        Command::ReadSinkEpochs { sink_ids } => {
            let d = db(w, proc);
            let epochs = sink_ids
                .iter()
                .map(|s| (s.clone(), d.sink_epochs.get(s).copied()))
                .collect();
            Event::Progress { epochs }
        }
        Command::ReadOwnership { .. } => Event::Ownership {
            owner: w.pg.owner.clone(),
            epoch_base: w.pg.epoch_base,
            member_owners: Vec::new(),
        },
        Command::SetOwner {
            owner, epoch_base, ..
        } => {
            w.pg.owner = Some(owner);
            w.pg.epoch_base = epoch_base;
            Event::Ack
        }
        Command::Commit => {
            if let Some(txn) = proc.txn.take() {
                w.pg = txn;
            }
            Event::Ack
        }
        Command::Rollback => {
            proc.txn = None;
            Event::Ack
        }
        Command::BumpGeneration { .. } => {
            w.pg.generation += 1;
            Event::Generation {
                generation: Some(w.pg.generation),
            }
        }
        Command::LockGroup { .. } => {
            let txn = w.pg.clone();
            let generation = Some(txn.generation);
            proc.txn = Some(txn);
            Event::Generation { generation }
        }
        Command::WriteRows { sink_id, epoch } => {
            let rows = w.rows;
            let claimed = {
                let d = db(w, proc);
                if d.sink_epochs.get(&sink_id).is_some_and(|e| *e >= epoch) {
                    false
                } else {
                    d.sink_epochs.insert(sink_id.clone(), epoch);
                    d.rows
                        .extend((0..rows).map(|r| (sink_id.clone(), (epoch, r))));
                    true
                }
            };
            if claimed {
                w.point(CrashPoint::PostgresMidCopy)?;
            }
            Event::Claimed { claimed }
        }
        Command::ReplaceRedo {
            transactional_id,
            epoch,
            keep,
        } => {
            let kept = proc
                .kept
                .get(&transactional_id)
                .cloned()
                .unwrap_or_default();
            let d = db(w, proc);
            d.redo
                .retain(|(t, e), _| !(t == &transactional_id && *e < epoch));
            if keep {
                let blobs = kept.chunks(2).map(<[Record]>::to_vec).collect();
                d.redo.insert((transactional_id, epoch), blobs);
            }
            Event::Ack
        }
        Command::RecordDecision {
            transactional_id,
            epoch,
            previous_epoch,
            prepared_state,
            group_id,
        } => {
            let now = w.kafka.now_ms;
            let d = db(w, proc);
            // the upsert's guard: a decision never goes back (the txn_state table's rule)
            if d.txn_state
                .get(&transactional_id)
                .is_none_or(|r| r.epoch <= epoch)
            {
                d.txn_state.insert(
                    transactional_id,
                    TxnStateRow {
                        epoch,
                        previous: previous_epoch,
                        prepared_state,
                        group_id,
                        decided_ms: now,
                    },
                );
            }
            Event::Ack
        }
        Command::RewriteDecision {
            transactional_id,
            epoch,
            previous_epoch,
            prepared_state,
        } => {
            if let Some(row) = w.pg.txn_state.get_mut(&transactional_id) {
                row.epoch = epoch;
                row.previous = previous_epoch;
                row.prepared_state = prepared_state;
            }
            Event::Ack
        }
        Command::CommitDecision => {
            let txn = proc.txn.take().expect("an open decision transaction");
            assert_eq!(
                txn.generation, w.pg.generation,
                "the row lock keeps the generation"
            );
            match w.lose_commit.take() {
                Some(committed) => {
                    if committed {
                        w.pg = txn;
                    }
                    failed(
                        FailureKind::InDoubt,
                        "the connection was lost during COMMIT",
                    )
                }
                None => {
                    w.pg = txn;
                    Event::Ack
                }
            }
        }
        Command::ReadDecisions { of } => {
            let now = w.kafka.now_ms;
            let d = db(w, proc);
            let rows = d
                .txn_state
                .iter()
                .filter(|(tid, row)| match &of {
                    DecisionSelection::Sinks(ids) => ids.contains(tid),
                    DecisionSelection::Group(g) => &row.group_id == g,
                    DecisionSelection::All => true,
                })
                .map(|(tid, row)| DecisionRow {
                    transactional_id: tid.clone(),
                    epoch: row.epoch,
                    previous_epoch: row.previous,
                    prepared_state: row.prepared_state.clone(),
                    group_id: row.group_id.clone(),
                    age_s: (now - row.decided_ms) as f64 / 1000.0,
                })
                .collect();
            Event::Decisions { rows }
        }
        Command::RedoExists {
            transactional_id,
            epoch,
        } => Event::Found {
            found: db(w, proc).redo.contains_key(&(transactional_id, epoch)),
        },
        Command::ReadRedo {
            transactional_id,
            epoch,
        } => {
            proc.redo_read =
                w.pg.redo
                    .get(&(transactional_id, epoch))
                    .cloned()
                    .unwrap_or_default();
            Event::RedoRead {
                blobs: proc.redo_read.len() as u32,
            }
        }
        Command::DeleteRedo {
            transactional_id,
            up_to,
        } => {
            w.pg.redo
                .retain(|(t, e), _| !(t == &transactional_id && *e <= up_to));
            Event::Ack
        }
        Command::CreateDt {
            dtid,
            group_id,
            epoch,
        } => {
            let now = w.kafka.now_ms;
            let d = db(w, proc);
            if d.dt_state.contains_key(&dtid) {
                Event::Applied { applied: false }
            } else {
                check_dt_transition(None, Some(DtState::Prepare));
                d.dt_seq += 1;
                let seq = d.dt_seq;
                d.dt_state.insert(
                    dtid,
                    SimDtRow {
                        group_id,
                        epoch,
                        state: DtState::Prepare,
                        created_ms: now,
                        seq,
                    },
                );
                Event::Applied { applied: true }
            }
        }
        Command::SetDtState { dtid, from, to, .. } => {
            check_dt_transition(Some(from), Some(to));
            let d = db(w, proc);
            let applied = match d.dt_state.get_mut(&dtid) {
                Some(row) if row.state == from => {
                    row.state = to;
                    true
                }
                _ => false,
            };
            Event::Applied { applied }
        }
        Command::ReadDtState { dtid, .. } => Event::DtState {
            state: db(w, proc).dt_state.get(&dtid).map(|r| r.state),
        },
        Command::ConcludeDt { dtid, from } => {
            let d = db(w, proc);
            let applied = match d.dt_state.get(&dtid) {
                Some(row) if from.is_none_or(|f| f == row.state) => {
                    check_dt_transition(Some(row.state), None);
                    d.delete_dt(&dtid);
                    true
                }
                _ => false,
            };
            Event::Applied { applied }
        }
        Command::ReadDtStates { group_id } => {
            let now = w.kafka.now_ms;
            let mut rows: Vec<(u64, DtRow)> = db(w, proc)
                .dt_state
                .iter()
                .filter(|(_, r)| group_id.as_ref().is_none_or(|g| &r.group_id == g))
                .map(|(dtid, r)| {
                    (
                        r.seq,
                        DtRow {
                            dtid: dtid.clone(),
                            epoch: r.epoch,
                            state: r.state,
                            age_s: (now - r.created_ms) as f64 / 1000.0,
                        },
                    )
                })
                .collect();
            rows.sort_by_key(|(seq, _)| *seq);
            Event::DtRows {
                rows: rows.into_iter().map(|(_, r)| r).collect(),
            }
        }
        Command::ReadParticipants { dtid } => Event::Participants {
            rows: db(w, proc)
                .dt_participant
                .iter()
                .filter(|((d, _), _)| *d == dtid)
                .map(|((_, participant), r)| ParticipantRow {
                    participant: participant.clone(),
                    kind: r.kind,
                    resource: r.resource.clone(),
                })
                .collect(),
        },
        Command::ReadParticipantDecisions => {
            let d = db(w, proc);
            let mut rows: Vec<(u64, ParticipantDecision)> = d
                .dt_participant
                .iter()
                .filter(|(_, r)| r.kind == ParticipantKind::Postgres)
                .filter_map(|((dtid, participant), r)| {
                    let s = d.dt_state.get(dtid)?;
                    Some((
                        s.seq,
                        ParticipantDecision {
                            dtid: dtid.clone(),
                            group_id: s.group_id.clone(),
                            state: s.state,
                            participant: participant.clone(),
                            resource: r.resource.clone(),
                        },
                    ))
                })
                .collect();
            rows.sort_by_key(|(seq, _)| std::cmp::Reverse(*seq));
            Event::ParticipantDecisions {
                rows: rows.into_iter().map(|(_, r)| r).collect(),
            }
        }
        Command::RunTasks { dtid, epoch } => run_tasks(w, &dtid, epoch),
        Command::ClaimEpoch { sink_id, epoch, .. } => {
            let d = db(w, proc);
            let claimed = d.sink_epochs.get(&sink_id).is_none_or(|e| *e < epoch);
            if claimed {
                d.sink_epochs.insert(sink_id, epoch);
            }
            Event::Claimed { claimed }
        }
        Command::MarkParticipants {
            dtid,
            participants,
            state,
        } => {
            let d = db(w, proc);
            for p in participants {
                if let Some(row) = d.dt_participant.get_mut(&(dtid.clone(), p)) {
                    row.state = state;
                }
            }
            Event::Ack
        }
        Command::ListPrepared => {
            let now = w.kafka.now_ms;
            let gids =
                w.pg.prepared
                    .iter()
                    .map(|(gid, t)| PreparedGid {
                        gid: gid.clone(),
                        sink_id: Some(t.sink.clone()),
                        epoch: Some(t.epoch),
                        age_s: (now - t.prepared_ms) as f64 / 1000.0,
                    })
                    .collect();
            Event::PreparedList { gids }
        }
        Command::CommitPrepared { gid } => Event::Found {
            found: w.pg.finish_prepared(&gid, true),
        },
        Command::RollbackPrepared { gid } => Event::Found {
            found: w.pg.finish_prepared(&gid, false),
        },
        Command::ClaimParticipants { dtid, rows } => {
            for row in rows {
                w.pg.dt_participant.insert(
                    (dtid.clone(), row.participant),
                    ParticipantRowSim {
                        kind: row.kind,
                        resource: row.resource,
                        state: ParticipantState::Claimed,
                    },
                );
            }
            Event::Ack
        }
        Command::PeekPartition => Event::Found {
            found: !w.partition(proc.part.unwrap_or_default()).is_empty(),
        },
        Command::WritePartition => {
            let part = proc.part.unwrap_or_default();
            let epoch = proc
                .producers
                .values()
                .find_map(|p| p.open)
                .or_else(|| proc.staged.values().next().map(|(e, _)| *e))
                .unwrap_or_default();
            let rows: Vec<Record> = w.partition(part).into_iter().map(|r| (epoch, r)).collect();
            let opened: Vec<String> = proc
                .producers
                .iter()
                .filter(|(_, p)| p.open.is_some())
                .map(|(t, _)| t.clone())
                .chain(proc.staged.keys().cloned())
                .collect();
            for sink in opened {
                if let Event::Failed(f) = write_rows(w, proc, &sink, &rows, false)? {
                    return Ok(Event::Failed(f));
                }
            }
            Event::Rows {
                count: rows.len() as u64,
            }
        }
        Command::ReleaseParticipants { .. } => {
            proc.producers.clear();
            proc.staged.clear();
            Event::Ack
        }
    };
    Ok(event)
}

fn sink_begin(w: &mut World, proc: &mut Proc, sink_id: &str, epoch: Epoch) -> Result<Event, Crash> {
    if let Some(tid) = Proc::kafka_tid(w, sink_id) {
        let (pe, p) = proc.producer(w, &tid);
        if p.last.is_some_and(|l| l >= epoch) {
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
    if w.pg.sink_epochs.get(&sink).is_some_and(|e| *e >= epoch) {
        let last = w.pg.sink_epochs.get(&sink).copied();
        proc.pg_last.insert(sink, last);
        return Ok(Event::Began { opened: false });
    }
    proc.staged.insert(sink_id.to_owned(), (epoch, Vec::new()));
    w.point(CrashPoint::PostgresAfterClaim)?;
    Ok(Event::Began { opened: true })
}

/// Produces (Kafka) or copies (PostgreSQL) rows into the sink's open transaction.
fn write_rows(
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
fn finish_writes(w: &mut World, tid: &str, pe: i32, epoch: Epoch) -> Result<Option<Event>, Crash> {
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

fn sink_prepare(
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

fn sink_commit(
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
fn sink_recover(w: &mut World, proc: &mut Proc, sink_id: &str) -> Result<Event, Crash> {
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

/// `RunTasks`: Spark runs every partition's task (retrying an attempt that died, up to four
/// times), sometimes with a speculative twin; one result set per partition is collected.
fn run_tasks(w: &mut World, dtid: &str, epoch: Epoch) -> Event {
    let first_run = w.tasks.ran.insert(epoch);
    let mut results = Vec::new();
    let mut token = 0;
    for part in 0..w.tasks.parts {
        let mut collected = None;
        for _ in 0..4 {
            token += 1;
            if first_run && w.tasks.fail_part == Some(part) {
                continue;
            }
            if let Some(r) = run_task(w, dtid, epoch, part, token) {
                collected = Some(r);
                break;
            }
        }
        let Some(mut chosen) = collected else {
            return failed(
                FailureKind::Abortable { retriable: true },
                format!("task {part} failed 4 times: job aborted"),
            );
        };
        if let (true, 0, Some(which)) = (first_run, part, w.tasks.twin) {
            token += 1;
            if let Some(twin) = run_task(w, dtid, epoch, part, token) {
                if which == Collected::Second {
                    chosen = twin;
                }
            }
        }
        results.extend(chosen);
    }
    Event::TaskResults { results }
}

/// One task attempt in a process of its own; None if it died or failed.
fn run_task(
    w: &mut World,
    dtid: &str,
    epoch: Epoch,
    part: u32,
    token: u32,
) -> Option<Vec<ParticipantResult>> {
    let postgres: Vec<(String, String)> = w
        .pg_sinks
        .iter()
        .map(|s| (s.clone(), format!("laminar:{s}:{epoch}:{part}")))
        .collect();
    let mut proc = Proc {
        part: Some(part),
        ..Proc::default()
    };
    for (sink, gid) in &postgres {
        proc.gids.insert(format!("pg:{sink}:p{part}"), gid.clone());
    }
    let mut task = ScaleOutTask::new(TaskContext {
        dtid: dtid.to_owned(),
        epoch,
        part,
        attempt: format!("{part}-{token}"),
        postgres,
        kafka: w.kafka_sinks.clone(),
    });
    match drive(w, &mut proc, &mut task) {
        Ok(End::Ok) => Some(task.results()),
        _ => None,
    }
}
