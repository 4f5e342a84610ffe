//! The sink's witness (docs/protocol.md §1, step 5): the highest `laminar.epoch` among the
//! committed records whose `laminar.sink` names the sink. Only the sink's own records are kept
//! while the markers are replayed (a producer id belongs to one transactional id, so the other
//! producers' records never change how the sink's are resolved).

use kafka_protocol::records::Record;

use super::batch::Batch;
use super::replay::Replay;

/// The header naming the sink (its transactional id) on every record a sink writes.
pub const HEADER_SINK: &str = "laminar.sink";
/// The header carrying the epoch (decimal text) on every record a sink writes.
pub const HEADER_EPOCH: &str = "laminar.epoch";

/// The epoch a record carries if `sink_id` wrote it.
pub fn epoch_of(record: &Record, sink_id: &str) -> Option<i64> {
    let mut sink = None;
    let mut epoch = None;
    for (name, value) in &record.headers {
        match name.as_str() {
            HEADER_SINK => sink = value.as_ref(),
            HEADER_EPOCH => epoch = value.as_ref(),
            _ => {}
        }
    }
    if sink?.as_ref() != sink_id.as_bytes() {
        return None;
    }
    std::str::from_utf8(epoch?).ok()?.trim().parse().ok()
}

/// The witness of one partition from a start offset, fed batch by batch.
#[derive(Debug, Clone)]
pub struct Witness {
    sink_id: String,
    replay: Replay<(i64, i64)>,
}

impl Witness {
    /// The witness of `sink_id` from `start_offset`.
    pub fn new(sink_id: &str, start_offset: i64) -> Self {
        Self {
            sink_id: sink_id.to_owned(),
            replay: Replay::new(start_offset),
        }
    }

    /// One batch, in offset order.
    pub fn feed(&mut self, batch: &Batch) {
        match batch.control {
            Some(kind) => self.replay.control(
                batch.base_offset,
                batch.last_offset,
                batch.producer_id,
                batch.producer_epoch,
                kind,
            ),
            None => {
                let sink_id = self.sink_id.as_str();
                let ours = batch
                    .records
                    .iter()
                    .filter_map(|r| epoch_of(r, sink_id).map(|e| (r.offset, (e, r.timestamp))));
                self.replay.data(
                    batch.producer_id,
                    batch.producer_epoch,
                    batch.transactional,
                    batch.last_offset,
                    ours,
                );
            }
        }
    }

    /// The highest epoch among the sink's committed records seen, if any, with the earliest
    /// timestamp among that epoch's records: every record of a later epoch was produced after
    /// them (a later epoch begins after this one committed).
    pub fn highest(self) -> Option<(i64, i64)> {
        let committed = self.replay.finish().committed;
        let epoch = committed.iter().map(|(_, (e, _))| *e).max()?;
        let since = committed
            .iter()
            .filter(|(_, (e, _))| *e == epoch)
            .map(|(_, (_, ts))| *ts)
            .min()?;
        Some((epoch, since))
    }
}
