//! The simulation's decision database: the commands on the `laminar` schema (and on prepared
//! transactions), performed on the process's open transaction or, outside one, on the database.

use crate::protocol::command::{
    Command, DecisionSelection, DtRow, Event, ParticipantKind, ParticipantRow, ParticipantState,
    PreparedGid,
};

use crate::protocol::records::DecisionRow;

use crate::protocol::failure::FailureKind;

use crate::protocol::crash::CrashPoint;
use crate::protocol::dt_state::DtState;
use crate::protocol::names::ParticipantDecision;
use crate::protocol::records::epoch_committed;
use crate::protocol::transitions::DT_TRANSITIONS;

use crate::protocol::sim::driver::{Proc, failed};
use crate::protocol::sim::pg::{DtRow as SimDtRow, ParticipantRowSim, Pg, TxnStateRow};
use crate::protocol::sim::{Crash, Record, World};

fn db<'a>(w: &'a mut World, proc: &'a mut Proc) -> &'a mut Pg {
    proc.txn.as_mut().unwrap_or(&mut w.pg)
}

fn check_dt_transition(from: Option<DtState>, to: Option<DtState>) {
    assert!(
        DT_TRANSITIONS
            .iter()
            .any(|(f, _, t)| *f == from && *t == to),
        "dt_state {from:?} -> {to:?} is not in the table"
    );
}

/// Performs a decision-database command; None for any other command.
pub(super) fn perform_db(
    w: &mut World,
    proc: &mut Proc,
    command: &Command,
) -> Result<Option<Event>, Crash> {
    let event = match command.clone() {
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
        Command::ReadGeneration { .. } => Event::Generation {
            generation: Some(db(w, proc).generation),
        },
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
                if epoch_committed(d.sink_epochs.get(&sink_id).copied(), epoch) {
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
        Command::ReadStopFence { group_id } => Event::StopFence {
            epoch: db(w, proc).stop_fence.get(&group_id).copied(),
            writer: db(w, proc).stop_fence_writer.get(&group_id).cloned(),
        },
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
        _ => return Ok(None),
    };
    Ok(Some(event))
}
