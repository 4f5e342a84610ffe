//! Reading one partition fetch by fetch, sans-io: the scan says which offset to fetch next,
//! takes each Fetch answer's record batches, and keeps what its mode needs — the batches
//! themselves, the committed-only replay of every record, or only the sink's witness.
//!
//! Without an end offset the scan follows the log past the high watermark the broker reported
//! until a fetch returns nothing new: some brokers (Tansu with S3 storage) report a watermark
//! behind records they already serve (docs/protocol.md §8). Records of transactions still open
//! there are left out by the replay, so reading further never shows uncommitted data.

use bytes::Bytes;
use kafka_protocol::records::Record;

use super::batch::{Batch, Place, next_batch};
use super::replay::{Outcome, Replay};
use super::witness::Witness;
use super::{KafkaError, KafkaResult};

/// What a scan keeps.
#[derive(Debug, Clone)]
enum Keep {
    /// The decoded batches, handed back after each fetch.
    Batches,
    /// Every record, sorted by the replay.
    Replay(Replay<Record>),
    /// The sink's witness only.
    Witness(Witness),
}

/// What a scan read: what the benchmarks and the O(partitions) tests count.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ScanStats {
    /// Fetch answers fed.
    pub fetches: u64,
    /// Bytes of record batches received.
    pub bytes: u64,
    /// Batches decoded (control batches included).
    pub batches: u64,
    /// Records decoded (control records included).
    pub records: u64,
}

/// The read of one partition from `start`, to `end` or to the end of the log.
#[derive(Debug, Clone)]
pub struct PartitionScan {
    topic: String,
    partition: i32,
    offset: i64,
    end: i64,
    follow: bool,
    done: bool,
    verify_crc: bool,
    keep: Keep,
    /// What was read so far.
    pub stats: ScanStats,
}

/// What the scan ends with.
#[derive(Debug)]
pub enum Finished {
    /// Mode `batches`: nothing more (they were handed out fetch by fetch).
    Batches,
    /// Mode `replay`: the partition's records sorted into committed, aborted and open.
    Replay(Outcome<Record>),
    /// Mode `witness`: the sink's highest committed epoch and the earliest timestamp of its
    /// records, if any.
    Witness(Option<(i64, i64)>),
}

impl PartitionScan {
    /// A scan of `topic[partition]` from `start` up to `end` (exclusive), or to the end of the
    /// log when `end` is `None` (then `high_watermark` is where the log ended when asked).
    /// `sink_id` given: keep only the sink's witness; else `replay` keeps and sorts every record,
    /// and neither hands the batches back after each fetch.
    pub fn new(
        topic: &str,
        partition: i32,
        start: i64,
        end: Option<i64>,
        high_watermark: i64,
        replay: bool,
        sink_id: Option<&str>,
    ) -> Self {
        let keep = match (sink_id, replay) {
            (Some(sink), _) => Keep::Witness(Witness::new(sink, start)),
            (None, true) => Keep::Replay(Replay::new(start)),
            (None, false) => Keep::Batches,
        };
        Self {
            topic: topic.to_owned(),
            partition,
            offset: start,
            end: end.unwrap_or(high_watermark),
            follow: end.is_none(),
            done: end.is_some_and(|e| start >= e),
            verify_crc: true,
            keep,
            stats: ScanStats::default(),
        }
    }

    /// Whether CRCs are checked (default: yes).
    pub fn verify_crc(mut self, verify: bool) -> Self {
        self.verify_crc = verify;
        self
    }

    /// The offset to fetch next, `None` when the scan is complete.
    pub fn next_offset(&self) -> Option<i64> {
        (!self.done).then_some(self.offset)
    }

    /// One Fetch answer for this partition: its record batches and high watermark. Returns the
    /// batches to hand out (mode `batches`; empty otherwise).
    pub fn feed(&mut self, data: &Bytes, high_watermark: i64) -> KafkaResult<Vec<Batch>> {
        self.stats.fetches += 1;
        self.stats.bytes += data.len() as u64;
        let place = Place {
            topic: &self.topic,
            partition: self.partition,
        };
        let mut out = Vec::new();
        let mut progressed = false;
        let mut pos = 0;
        while let Some((batch, next)) = next_batch(data, pos, place, self.verify_crc)? {
            pos = next;
            self.stats.batches += 1;
            self.stats.records += batch.records.len().max(1) as u64;
            if batch.last_offset < self.offset {
                continue;
            }
            if !self.follow && batch.base_offset >= self.end {
                self.done = true;
                break;
            }
            self.offset = batch.last_offset + 1;
            progressed = true;
            match &mut self.keep {
                Keep::Batches => out.push(batch),
                Keep::Witness(witness) => witness.feed(&batch),
                Keep::Replay(replay) => match batch.control {
                    Some(kind) => replay.control(
                        batch.base_offset,
                        batch.last_offset,
                        batch.producer_id,
                        batch.producer_epoch,
                        kind,
                    ),
                    None => replay.data(
                        batch.producer_id,
                        batch.producer_epoch,
                        batch.transactional,
                        batch.last_offset,
                        batch.records.into_iter().map(|r| (r.offset, r)),
                    ),
                },
            }
        }
        if !self.follow && self.offset >= self.end {
            self.done = true;
        }
        if !progressed && !self.done {
            let limit = self.end.max(high_watermark);
            if self.offset >= limit {
                self.done = true;
            } else {
                return Err(KafkaError::new(format!(
                    "{}[{}]: no record batch at offset {} below the high watermark {limit} (a \
                     batch larger than the fetch size?)",
                    self.topic, self.partition, self.offset
                )));
            }
        }
        Ok(out)
    }

    /// The end of the scan.
    pub fn finish(self) -> Finished {
        match self.keep {
            Keep::Batches => Finished::Batches,
            Keep::Replay(replay) => Finished::Replay(replay.finish()),
            Keep::Witness(witness) => Finished::Witness(witness.highest()),
        }
    }
}
