//! Which records of one partition are committed: the commit/abort markers (control batches)
//! replayed in offset order, never the broker's `read_committed` (docs/kafka.md).
//!
//! A producer's transactional records stay *pending* until a control batch of the same producer
//! id arrives. A marker written with producer epoch `E` resolves the pending records of epoch `E`
//! if there are any (the classic protocol), else those of epoch `E - 1` (a coordinator that bumps
//! the epoch when it ends a transaction: KIP-890's transactions v2, or the abort written when a
//! newer producer fenced an older one). Pending records of an even older epoch belonged to a
//! producer that was fenced and never ended its transaction: aborted. Records of a newer epoch
//! than the marker's stay pending. Records still pending at the end are open (not committed).
//! Non-transactional records are committed as they come.
//!
//! Generic over what a record carries (`T`): the Python reader keeps whole records, the witness
//! only the epoch header of the sink's own records.

use std::collections::HashMap;

use super::batch::ControlType;

/// One record waiting for its transaction's marker.
#[derive(Debug, Clone)]
struct Pending<T> {
    offset: i64,
    producer_epoch: i16,
    item: T,
}

/// What the replay of one partition found.
#[derive(Debug, Clone)]
pub struct Outcome<T> {
    /// The first offset considered (records before it are left out).
    pub start_offset: i64,
    /// One past the last offset seen.
    pub end_offset: i64,
    /// Committed and non-transactional records, `(offset, item)` in offset order.
    pub committed: Vec<(i64, T)>,
    /// Records of aborted transactions, fenced producers included.
    pub aborted: Vec<(i64, T)>,
    /// Records of transactions with no marker yet.
    pub open: Vec<(i64, T)>,
    /// Offsets of the commit markers seen.
    pub commit_markers: Vec<i64>,
    /// Offsets of the abort markers seen.
    pub abort_markers: Vec<i64>,
}

/// The replay of one partition, fed batch by batch in offset order.
#[derive(Debug, Clone)]
pub struct Replay<T> {
    outcome: Outcome<T>,
    pending: HashMap<i64, Vec<Pending<T>>>,
}

impl<T> Replay<T> {
    /// A replay that leaves out records before `start_offset` (a fetch returns whole batches).
    pub fn new(start_offset: i64) -> Self {
        Self {
            outcome: Outcome {
                start_offset,
                end_offset: start_offset,
                committed: Vec::new(),
                aborted: Vec::new(),
                open: Vec::new(),
                commit_markers: Vec::new(),
                abort_markers: Vec::new(),
            },
            pending: HashMap::new(),
        }
    }

    /// The first offset considered.
    pub fn start_offset(&self) -> i64 {
        self.outcome.start_offset
    }

    /// One past the last offset seen so far.
    pub fn end_offset(&self) -> i64 {
        self.outcome.end_offset
    }

    /// A data batch: `records` are `(offset, item)`; every record of a batch shares its producer.
    pub fn data(
        &mut self,
        producer_id: i64,
        producer_epoch: i16,
        transactional: bool,
        last_offset: i64,
        records: impl IntoIterator<Item = (i64, T)>,
    ) {
        self.seen(last_offset);
        let start = self.outcome.start_offset;
        let kept = records.into_iter().filter(|(offset, _)| *offset >= start);
        if transactional {
            let pending = self.pending.entry(producer_id).or_default();
            pending.extend(kept.map(|(offset, item)| Pending {
                offset,
                producer_epoch,
                item,
            }));
        } else {
            self.outcome.committed.extend(kept);
        }
    }

    /// A control batch: the end of `producer_id`'s transaction, written with `producer_epoch`.
    pub fn control(
        &mut self,
        base_offset: i64,
        last_offset: i64,
        producer_id: i64,
        producer_epoch: i16,
        kind: ControlType,
    ) {
        self.seen(last_offset);
        if base_offset < self.outcome.start_offset {
            return;
        }
        match kind {
            ControlType::Commit => self.outcome.commit_markers.push(base_offset),
            ControlType::Abort => self.outcome.abort_markers.push(base_offset),
        }
        let Some(records) = self.pending.remove(&producer_id) else {
            return;
        };
        let target = if records.iter().any(|r| r.producer_epoch == producer_epoch) {
            producer_epoch
        } else {
            producer_epoch.saturating_sub(1)
        };
        let mut later = Vec::new();
        for record in records {
            let entry = (record.offset, record.item);
            if record.producer_epoch > producer_epoch {
                later.push(Pending {
                    offset: entry.0,
                    producer_epoch: record.producer_epoch,
                    item: entry.1,
                });
            } else if record.producer_epoch == target && kind == ControlType::Commit {
                self.outcome.committed.push(entry);
            } else {
                self.outcome.aborted.push(entry);
            }
        }
        if !later.is_empty() {
            self.pending.insert(producer_id, later);
        }
    }

    /// The outcome: what is still pending is open; every list in offset order.
    pub fn finish(mut self) -> Outcome<T> {
        for records in self.pending.into_values() {
            self.outcome
                .open
                .extend(records.into_iter().map(|r| (r.offset, r.item)));
        }
        let out = &mut self.outcome;
        for list in [&mut out.committed, &mut out.aborted, &mut out.open] {
            list.sort_by_key(|(offset, _)| *offset);
        }
        self.outcome
    }

    fn seen(&mut self, last_offset: i64) {
        self.outcome.end_offset = self.outcome.end_offset.max(last_offset + 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn txn(
        replay: &mut Replay<&'static str>,
        first: i64,
        pid: i64,
        epoch: i16,
        v: &[&'static str],
    ) {
        let records = v.iter().enumerate().map(|(i, s)| (first + i as i64, *s));
        replay.data(pid, epoch, true, first + v.len() as i64 - 1, records);
    }

    fn items(list: &[(i64, &'static str)]) -> Vec<&'static str> {
        list.iter().map(|(_, s)| *s).collect()
    }

    #[test]
    fn commit_abort_and_open_transactions_are_told_apart() {
        let mut r = Replay::new(0);
        txn(&mut r, 0, 1, 0, &["a", "b"]);
        r.control(2, 2, 1, 0, ControlType::Commit);
        txn(&mut r, 3, 1, 0, &["c"]);
        r.control(4, 4, 1, 0, ControlType::Abort);
        txn(&mut r, 5, 1, 0, &["d"]);
        r.data(-1, -1, false, 6, [(6, "plain")]);
        let out = r.finish();
        assert_eq!(items(&out.committed), ["a", "b", "plain"]);
        assert_eq!(items(&out.aborted), ["c"]);
        assert_eq!(items(&out.open), ["d"]);
        assert_eq!((out.commit_markers, out.abort_markers), (vec![2], vec![4]));
        assert_eq!(out.end_offset, 7);
    }

    #[test]
    fn a_bumped_marker_ends_the_previous_epoch_and_fenced_records_never_commit() {
        let mut r = Replay::new(0);
        txn(&mut r, 0, 7, 0, &["zombie"]);
        txn(&mut r, 1, 7, 1, &["successor"]);
        r.control(2, 2, 7, 1, ControlType::Commit);
        txn(&mut r, 3, 3, 4, &["v2"]);
        r.control(4, 4, 3, 5, ControlType::Commit);
        txn(&mut r, 5, 3, 6, &["newer"]);
        r.control(6, 6, 3, 5, ControlType::Abort);
        let out = r.finish();
        assert_eq!(items(&out.committed), ["successor", "v2"]);
        assert_eq!(items(&out.aborted), ["zombie"]);
        assert_eq!(items(&out.open), ["newer"]);
    }

    #[test]
    fn records_and_markers_before_the_start_are_left_out() {
        let mut r = Replay::new(1);
        txn(&mut r, 0, 1, 0, &["a", "b", "c"]);
        r.control(3, 3, 1, 0, ControlType::Commit);
        let out = r.finish();
        assert_eq!(items(&out.committed), ["b", "c"]);
        let mut r = Replay::new(5);
        txn(&mut r, 5, 1, 0, &["x"]);
        r.control(4, 4, 1, 0, ControlType::Commit); // a marker before the start resolves nothing
        assert_eq!(items(&r.finish().open), ["x"]);
    }
}
