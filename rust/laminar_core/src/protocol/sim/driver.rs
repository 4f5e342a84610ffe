//! The simulation's driver: performs each command against the in-memory stores and reports the
//! result, exactly as the Python drivers do against psycopg, confluent-kafka and `laminar.kafka.log`. It
//! decides nothing: every branch here is the behaviour of a store or a client (a broker that
//! fences, a transaction that timed out, a COPY that claims an epoch), never of the protocol.

use std::collections::BTreeMap;

use crate::error::CoreError;
use crate::prepared::PreparedTxnState;
use crate::protocol::epoch::EpochTracker;

use crate::protocol::command::{Command, Event};

use crate::protocol::failure::{Failure, FailureKind};
use crate::protocol::sim::db::perform_db;
use crate::protocol::sim::kafka::KafkaErr;
use crate::protocol::sim::pg::Pg;
use crate::protocol::sim::sinks::{
    sink_abort, sink_begin, sink_commit, sink_prepare, sink_recover, write_rows,
};
use crate::protocol::sim::tasks::run_tasks;
use crate::protocol::sim::{Record, World};
use crate::protocol::sink::SinkTxn;
use crate::protocol::{End, Epoch, Machine};

/// The process died at a crash point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::protocol) struct Crash;

/// A Kafka sink in a process: its producer.
#[derive(Debug, Clone, Default)]
pub(super) struct Producer {
    pub(super) epoch: Option<i32>,
}

/// A process of the writer (or of a task): its clients and its open transaction.
#[derive(Debug, Default)]
pub(in crate::protocol) struct Proc {
    pub(super) producers: BTreeMap<String, Producer>,
    /// Each sink's own transaction (docs/engine.md, "The sink's transaction"), per Kafka
    /// transactional id or PostgreSQL sink id: the sink asks it at each call and performs its
    /// answer, as `KafkaSink`/`PostgresSink` do. A process that dies loses them.
    pub(super) machines: BTreeMap<String, SinkTxn>,
    /// PostgreSQL sinks: the epoch and rows of the open transaction.
    pub(super) staged: BTreeMap<String, (Epoch, Vec<Record>)>,
    /// The open transaction on the decision database.
    pub(super) txn: Option<Pg>,
    pub(super) kept: BTreeMap<String, Vec<Record>>,
    pub(super) redo_read: Vec<Vec<Record>>,
    /// A task's partition and its PostgreSQL participants' gids.
    pub(super) part: Option<u32>,
    pub(super) gids: BTreeMap<String, String>,
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

pub(super) fn failed(kind: FailureKind, message: impl Into<String>) -> Event {
    Event::Failed(Failure::new(kind, message))
}

pub(super) fn kafka_failure(e: KafkaErr) -> Event {
    match e {
        KafkaErr::Fenced => failed(FailureKind::Fenced, "producer fenced"),
        KafkaErr::NoTransaction => failed(
            FailureKind::Abortable { retriable: true },
            "the broker aborted the transaction",
        ),
    }
}

/// A machine's refusal (`IllegalStateError` in the real sink): the call fails, nothing changes.
pub(super) fn refused(e: CoreError) -> Event {
    failed(FailureKind::Fatal, e.to_string())
}

/// The simulated clock in microseconds (the machines' `now_us`).
pub(super) fn now_us(w: &World) -> u64 {
    w.kafka.now_ms.saturating_mul(1000)
}

pub(super) fn prepared_state(tid: &str, epoch: Epoch, identity: (i64, i32)) -> String {
    let mut state = PreparedTxnState::new(Some(tid.to_owned()), epoch);
    state.producer_id = identity.0;
    state.producer_epoch = identity.1;
    state.to_text()
}

impl Proc {
    /// The Kafka transactional id a sink id names (a task names participants `kafka:<tid>`).
    pub(super) fn kafka_tid(w: &World, sink_id: &str) -> Option<String> {
        let tid = sink_id.strip_prefix("kafka:").unwrap_or(sink_id);
        w.kafka_base(tid).map(|_| tid.to_owned())
    }

    /// The PostgreSQL sink a sink id names (a task names participants `pg:<sink>:p<part>`).
    pub(super) fn pg_sink(w: &World, sink_id: &str) -> Option<String> {
        let sink = sink_id
            .strip_prefix("pg:")
            .and_then(|s| s.rsplit_once(':'))
            .map_or(sink_id, |(s, _)| s);
        w.pg_sinks
            .iter()
            .any(|s| s == sink)
            .then(|| sink.to_owned())
    }

    /// The producer of `tid`, initialised on first use: its `init_transactions` fences the
    /// previous one, and the machine hears the marker it reads as `reopened` (`KafkaSink`).
    pub(super) fn producer(&mut self, w: &mut World, tid: &str) -> i32 {
        if let Some(epoch) = self.producers.get(tid).and_then(|p| p.epoch) {
            return epoch;
        }
        let (_, epoch) = w.kafka.init_transactions(tid);
        let marker = w.kafka.marker(tid);
        let now = now_us(w);
        self.producers.entry(tid.to_owned()).or_default().epoch = Some(epoch);
        self.kafka_machine(tid)
            .reopened(marker, now)
            .expect("reopened is legal in every state");
        epoch
    }

    /// The machine of a Kafka sink: its prepare is not durable (`KafkaSink._durable_prepare`).
    pub(super) fn kafka_machine(&mut self, tid: &str) -> &mut SinkTxn {
        self.machines
            .entry(tid.to_owned())
            .or_insert_with(|| SinkTxn::new(EpochTracker::default(), None).durable_prepare(false))
    }

    /// The machine of a PostgreSQL sink: a task's participant holds its partition
    /// (`PostgresSink._machine_participant`).
    pub(super) fn pg_machine(&mut self, sink_id: &str) -> &mut SinkTxn {
        let part = self.part.map(i64::from);
        self.machines
            .entry(sink_id.to_owned())
            .or_insert_with(|| SinkTxn::new(EpochTracker::default(), part))
    }

    /// The epoch a sink's machine has open (being written or prepared).
    pub(super) fn open_epoch(&self, key: &str) -> Option<Epoch> {
        self.machines
            .get(key)
            .and_then(|m| m.writing().or_else(|| m.prepared_epoch()))
    }
}

/// Performs one command. `Err(Crash)`: the process died at a crash point.
pub(super) fn perform(w: &mut World, proc: &mut Proc, command: &Command) -> Result<Event, Crash> {
    w.kafka.advance(w.step_ms);
    if let Some(event) = perform_db(w, proc, command)? {
        return Ok(event);
    }
    let event = match command.clone() {
        Command::Reached { point } => {
            w.point(point)?;
            Event::Ack
        }
        Command::Sleep { ms } => {
            w.kafka.advance(ms);
            Event::Ack
        }
        Command::Log { .. }
        | Command::RegisterGroup { .. }
        | Command::LockPartition { .. }
        | Command::LockTable { .. } => Event::Ack,
        Command::InitSink { sink_id } | Command::ReinitProducer { sink_id } => {
            if let Some(tid) = Proc::kafka_tid(w, &sink_id) {
                proc.producers.remove(&tid);
                proc.producer(w, &tid);
            } else if let Some(sink) = Proc::pg_sink(w, &sink_id) {
                proc.staged.remove(&sink);
                let last = w.pg.sink_epochs.get(&sink).copied();
                if let Err(e) = proc.pg_machine(&sink_id).learned_last(last) {
                    return Ok(refused(e));
                }
            }
            Event::Ack
        }
        Command::KnownEpoch { sink_id } => {
            let epoch = match Proc::kafka_tid(w, &sink_id) {
                Some(tid) => {
                    proc.producer(w, &tid);
                    proc.kafka_machine(&tid).tracker().last_committed_epoch()
                }
                None => proc
                    .machines
                    .get(&sink_id)
                    .and_then(|m| m.tracker().last_committed_epoch()),
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
        Command::SinkAbort { sink_id, epoch } => sink_abort(w, proc, &sink_id, Some(epoch)),
        Command::AbortProducer { sink_id } => sink_abort(w, proc, &sink_id, None),
        Command::SinkRecover { sink_id } => sink_recover(w, proc, &sink_id)?,
        Command::RetryCommit { sink_id, epoch } => {
            let tid = Proc::kafka_tid(w, &sink_id).expect("a Kafka sink");
            let pe = proc.producer(w, &tid);
            let open = w.kafka.tids.get(&tid).is_some_and(|t| t.open.is_some());
            if !open {
                // committed before its answer was lost (the retry learns it), or gone
                if w.kafka.marker(&tid) >= Some(epoch) {
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
        Command::RunTasks { epoch, .. } if w.tasks.create_record => Event::TaskResults {
            results: w.tasks.sent.get(&epoch).cloned().unwrap_or_default(),
        },
        Command::RunTasks { dtid, epoch } => run_tasks(w, &dtid, epoch),
        Command::PeekPartition => Event::Found {
            found: !w.partition(proc.part.unwrap_or_default()).is_empty(),
        },
        Command::WritePartition => {
            let part = proc.part.unwrap_or_default();
            let opened: Vec<String> = proc
                .machines
                .iter()
                .filter(|(_, m)| m.writing().is_some())
                .map(|(k, _)| k.clone())
                .collect();
            let epoch = opened
                .iter()
                .find_map(|k| proc.open_epoch(k))
                .unwrap_or_default();
            let rows: Vec<Record> = w.partition(part).into_iter().map(|r| (epoch, r)).collect();
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
            proc.machines.clear();
            Event::Ack
        }
        _ => unreachable!("a decision-database command: perform_db"),
    };
    Ok(event)
}
