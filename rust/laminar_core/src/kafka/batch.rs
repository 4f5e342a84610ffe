//! Record batches (message format v2) as a Fetch response carries them: framing, the checks
//! that give clear errors (format version, CRC, codec), then `kafka-protocol`'s decoder with
//! this module's pure-Rust codecs, and the control records (transaction commit/abort markers).

use bytes::{Bytes, BytesMut};
use kafka_protocol::records::{Compression, Record, RecordBatchDecoder};

use super::codec;
use super::{KafkaError, KafkaResult};

/// baseOffset + batchLength: the bytes `batchLength` does not count.
const OVERHEAD: usize = 12;
/// The fixed header of a v2 batch, baseOffset to the records count.
const HEADER: usize = 61;
/// Offset of the magic byte, of the CRC, and of the first byte the CRC covers.
const MAGIC_AT: usize = 16;
const CRC_AT: usize = 17;
const CRC_START: usize = 21;

/// What a control record marks: the end of a transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ControlType {
    /// The transaction was aborted.
    Abort = 0,
    /// The transaction was committed.
    Commit = 1,
}

/// One decoded record batch.
#[derive(Debug, Clone)]
pub struct Batch {
    /// Offset of the first record.
    pub base_offset: i64,
    /// Offset of the last record (base offset + last offset delta).
    pub last_offset: i64,
    /// The producer id (-1 for a non-idempotent producer).
    pub producer_id: i64,
    /// The producer epoch.
    pub producer_epoch: i16,
    /// The sequence number of the first record.
    pub base_sequence: i32,
    /// The codec the batch was written with.
    pub compression: Compression,
    /// Whether the batch belongs to a transaction.
    pub transactional: bool,
    /// For a control batch, what it marks; `None` for data.
    pub control: Option<ControlType>,
    /// The data records (empty for a control batch).
    pub records: Vec<Record>,
    /// Bytes the batch took in the fetch (header included).
    pub size: usize,
}

/// Where a batch sits, for error messages: `topic[partition]`.
#[derive(Debug, Clone, Copy)]
pub struct Place<'a> {
    /// The topic.
    pub topic: &'a str,
    /// The partition.
    pub partition: i32,
}

impl Place<'_> {
    fn at(&self, offset: i64) -> String {
        format!("{}[{}] offset {offset}", self.topic, self.partition)
    }
}

/// The batches in `data` (a Fetch response's `records`), in order, and how many bytes they
/// took. A trailing partial batch (a fetch cut at its byte limit) is left out; anything else
/// that does not decode is an error: a format other than v2, a bad CRC (unless `verify_crc` is
/// false), an unknown codec, a corrupt body.
pub fn decode_batches(
    data: &Bytes,
    place: Place<'_>,
    verify_crc: bool,
) -> KafkaResult<(Vec<Batch>, usize)> {
    let mut out = Vec::new();
    let mut pos = 0;
    while let Some((batch, end)) = next_batch(data, pos, place, verify_crc)? {
        out.push(batch);
        pos = end;
    }
    Ok((out, pos))
}

/// The batch starting at `pos` and where it ends; `None` at the end of the data or before a
/// partial batch.
pub fn next_batch(
    data: &Bytes,
    pos: usize,
    place: Place<'_>,
    verify_crc: bool,
) -> KafkaResult<Option<(Batch, usize)>> {
    let rest = &data[pos.min(data.len())..];
    if rest.len() < OVERHEAD {
        return Ok(None);
    }
    let base_offset = i64::from_be_bytes(field(rest, 0));
    let length = i32::from_be_bytes(field(rest, 8));
    let Ok(length) = usize::try_from(length) else {
        return Err(KafkaError::new(format!(
            "{}: negative batch length {length}",
            place.at(base_offset)
        )));
    };
    let end = OVERHEAD + length;
    if rest.len() < end {
        return Ok(None); // partial batch at the end of a fetch
    }
    if end < HEADER {
        return Err(KafkaError::new(format!(
            "{}: batch too short ({end} bytes)",
            place.at(base_offset)
        )));
    }
    let magic = rest[MAGIC_AT] as i8;
    if magic != 2 {
        return Err(KafkaError::new(format!(
            "{}: message format v{magic} is not supported (only v2, Kafka >= 0.11)",
            place.at(base_offset)
        )));
    }
    let attributes = i16::from_be_bytes(field(rest, CRC_START));
    let Some(compression) = codec::from_id(attributes & 0x07) else {
        return Err(KafkaError::new(format!(
            "{}: unknown compression codec {}",
            place.at(base_offset),
            attributes & 0x07
        )));
    };
    let stored = u32::from_be_bytes(field(rest, CRC_AT));
    let actual = crc32c::crc32c(&rest[CRC_START..end]);
    let mut raw = data.slice(pos..pos + end);
    if stored != actual {
        if verify_crc {
            return Err(KafkaError::new(format!(
                "{}: CRC mismatch (stored {stored:#010x}, computed {actual:#010x})",
                place.at(base_offset)
            )));
        }
        let mut fixed = BytesMut::from(&raw[..]);
        fixed[CRC_AT..CRC_START].copy_from_slice(&actual.to_be_bytes());
        raw = fixed.freeze();
    }
    let last_offset_delta = i32::from_be_bytes(field(rest, 23));
    let base_sequence = i32::from_be_bytes(field(rest, 53));
    let set = RecordBatchDecoder::decode_with_custom_compression(&mut raw, Some(codec::decompress))
        .map_err(|e| {
            KafkaError::new(format!(
                "{}: {} batch does not decode: {e:#}",
                place.at(base_offset),
                codec::name(compression)
            ))
        })?;
    let mut records = set.records;
    let (producer_id, producer_epoch) = (
        i64::from_be_bytes(field(rest, 43)),
        i16::from_be_bytes(field(rest, 51)),
    );
    let control = if attributes & 0x20 != 0 {
        let kind = match records.first() {
            Some(record) => control_type(record, place, base_offset)?,
            None => {
                return Err(KafkaError::new(format!(
                    "{}: control batch without a control record",
                    place.at(base_offset)
                )));
            }
        };
        records.clear();
        Some(kind)
    } else {
        None
    };
    let batch = Batch {
        base_offset,
        last_offset: base_offset + i64::from(last_offset_delta),
        producer_id,
        producer_epoch,
        base_sequence,
        compression,
        transactional: attributes & 0x10 != 0,
        control,
        records,
        size: end,
    };
    Ok(Some((batch, pos + end)))
}

fn control_type(record: &Record, place: Place<'_>, base_offset: i64) -> KafkaResult<ControlType> {
    let key = record.key.as_deref().unwrap_or_default();
    if key.len() < 4 {
        return Err(KafkaError::new(format!(
            "{}: control record without a key",
            place.at(base_offset)
        )));
    }
    match i16::from_be_bytes([key[2], key[3]]) {
        0 => Ok(ControlType::Abort),
        1 => Ok(ControlType::Commit),
        other => Err(KafkaError::new(format!(
            "{}: unknown control record type {other}",
            place.at(base_offset)
        ))),
    }
}

/// `N` bytes of `data` at `at` (the caller checked the length).
fn field<const N: usize>(data: &[u8], at: usize) -> [u8; N] {
    let mut out = [0u8; N];
    out.copy_from_slice(&data[at..at + N]);
    out
}

#[cfg(test)]
pub(crate) mod tests;
