//! An in-memory PostgreSQL: the sinks' rows, `laminar.sink_epochs`, `txn_state`, the redo log,
//! the group's row (generation, owner, epoch base), `dt_state`/`dt_participant` and prepared
//! transactions. A transaction is a copy that replaces the database when it commits (the sim is
//! sequential: nothing else writes while one is open).

use std::collections::BTreeMap;

use crate::protocol::command::{ParticipantKind, ParticipantState};
use crate::protocol::dt_state::DtState;
use crate::protocol::sim::{Epoch, Record};

#[derive(Debug, Clone, PartialEq)]
pub(in crate::protocol) struct TxnStateRow {
    pub epoch: Epoch,
    pub previous: Option<Epoch>,
    pub prepared_state: String,
    pub group_id: String,
    pub decided_ms: u64,
}

#[derive(Debug, Clone, PartialEq)]
pub(in crate::protocol) struct DtRow {
    pub group_id: String,
    pub epoch: Epoch,
    pub state: DtState,
    pub created_ms: u64,
    pub seq: u64,
}

#[derive(Debug, Clone, PartialEq)]
pub(in crate::protocol) struct ParticipantRowSim {
    pub kind: ParticipantKind,
    pub resource: String,
    pub state: ParticipantState,
}

#[derive(Debug, Clone, PartialEq)]
pub(in crate::protocol) struct PreparedTxn {
    pub sink: String,
    pub epoch: Epoch,
    pub rows: Vec<Record>,
    pub prepared_ms: u64,
}

#[derive(Debug, Clone, Default)]
pub(in crate::protocol) struct Pg {
    /// Committed rows: (sink, record).
    pub rows: Vec<(String, Record)>,
    pub sink_epochs: BTreeMap<String, Epoch>,
    pub txn_state: BTreeMap<String, TxnStateRow>,
    /// Redo blobs per (transactional id, epoch).
    pub redo: BTreeMap<(String, Epoch), Vec<Vec<Record>>>,
    pub generation: i64,
    pub owner: Option<String>,
    pub epoch_base: Epoch,
    pub dt_state: BTreeMap<String, DtRow>,
    pub dt_participant: BTreeMap<(String, String), ParticipantRowSim>,
    pub prepared: BTreeMap<String, PreparedTxn>,
    pub dt_seq: u64,
    /// `laminar.stop_fence`: the fenced epoch per group.
    pub stop_fence: BTreeMap<String, Epoch>,
    /// `laminar.stop_fence.writer`: the writer a group's fence is reserved for.
    pub stop_fence_writer: BTreeMap<String, String>,
}

impl Pg {
    /// `COMMIT PREPARED` / `ROLLBACK PREPARED`: false if there is no such gid.
    pub fn finish_prepared(&mut self, gid: &str, commit: bool) -> bool {
        let Some(txn) = self.prepared.remove(gid) else {
            return false;
        };
        if commit {
            let sink = txn.sink.clone();
            self.rows
                .extend(txn.rows.into_iter().map(|r| (sink.clone(), r)));
        }
        true
    }

    /// Deletes a decision record (its participants cascade).
    pub fn delete_dt(&mut self, dtid: &str) {
        self.dt_state.remove(dtid);
        self.dt_participant.retain(|(d, _), _| d != dtid);
    }
}
