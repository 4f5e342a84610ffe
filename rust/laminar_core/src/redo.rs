//! The redo log's record blobs: the Kafka records of a decided epoch, kept in `laminar.redo` so
//! that recovery can re-produce them without a Spark replay (docs/protocol.md §3, the byte layout
//! in docs/formats.md §2).
//!
//! The format follows the conventions of [`crate::prepared`] (KIP-482 tagged fields, KIP-915
//! "ignore what you do not know", a CRC-32C over everything):
//!
//! ```text
//! blob    = "LR" | version u8 | [v2: topic_count uvarint | topic_count × compact string]
//!           | record_count uvarint | records | tagged_fields | crc32c (u32 big-endian)
//! v1 record = key nullable bytes | value nullable bytes
//! v2 record = key nullable bytes | value nullable bytes | topic uvarint (0: the sink's topic,
//!             i: the blob's topic i - 1) | partition uvarint (0: the partitioner's, p + 1)
//!             | header_count uvarint | header_count × (key compact string | value nullable bytes)
//! nullable bytes = uvarint(len + 1) then the bytes; 0 = null
//! compact string = uvarint(len + 1) then UTF-8
//! tagged_fields = uvarint(count) then, in strictly ascending tag order: uvarint(tag) uvarint(size) bytes
//! ```
//!
//! Version 2 (Spark's Kafka-sink shape: each record's own topic, partition and user headers) is
//! written only for a blob in which some record needs it; every other blob is still version 1,
//! byte for byte what earlier laminars wrote and read. Laminar's own headers (`laminar.sink`,
//! `laminar.epoch`, the [`RESERVED_HEADER_PREFIX`]) are not stored: they are a function of the
//! sink and the epoch, and the redo writes them again. A blob holds at most [`MAX_BLOB_RECORDS`]
//! records and the writer splits an epoch into blobs of about [`TARGET_BLOB_BYTES`] (the `seq`
//! column of `laminar.redo`), so that no single row grows without bound.
//!
//! Decoding is strict (the same rules as `PreparedTxnState`): minimal varints, nothing after the
//! checksum, a newer version byte is a clear error. Every malformed input is a
//! [`CoreError::InvalidStateEncoding`], never a panic.

use std::collections::HashMap;

use crate::error::CoreError;
use crate::prepared::{DecodeError, DecodeErrorKind, Reader, TaggedFields, Writer};
use crate::serialize::kafka_shape::{Header, RESERVED_HEADER_PREFIX};

/// The first two bytes of every redo blob.
pub const MAGIC: [u8; 2] = *b"LR";
/// The format version of blobs whose records are only key and value.
pub const FORMAT_VERSION_PLAIN: u8 = 1;
/// The format version of blobs with per-record topic, partition and headers; the highest read.
pub const FORMAT_VERSION: u8 = 2;
/// The writer starts a new blob once the current one holds about this many bytes.
pub const TARGET_BLOB_BYTES: usize = 1 << 20;
/// The most records one blob may hold (a sanity bound checked by the decoder too).
pub const MAX_BLOB_RECORDS: u64 = 1 << 24;

const HEADER_LEN: usize = 3;
const CRC_LEN: usize = 4;

/// One Kafka record of the redo log.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RedoRecord {
    /// The key (`None`: null).
    pub key: Option<Vec<u8>>,
    /// The value (`None`: a tombstone).
    pub value: Option<Vec<u8>>,
    /// The record's topic (`None`: the sink's topic).
    pub topic: Option<String>,
    /// The record's partition (-1: the partitioner chooses).
    pub partition: i32,
    /// The user headers, in order (Laminar's own are written again by the redo).
    pub headers: Vec<Header>,
}

/// One record to encode, borrowed from the caller's columns.
#[derive(Debug, Clone, Copy)]
pub struct RecordRef<'a> {
    /// The key (`None`: null).
    pub key: Option<&'a [u8]>,
    /// The value (`None`: a tombstone).
    pub value: Option<&'a [u8]>,
    /// The record's topic (`None`: the sink's topic).
    pub topic: Option<&'a str>,
    /// The record's partition (negative: the partitioner chooses).
    pub partition: i32,
    /// The headers; those with the reserved `laminar.` prefix are not stored.
    pub headers: &'a [Header],
}

impl<'a> RecordRef<'a> {
    /// A record of key and value only.
    pub fn plain(key: Option<&'a [u8]>, value: Option<&'a [u8]>) -> Self {
        RecordRef {
            key,
            value,
            topic: None,
            partition: -1,
            headers: &[],
        }
    }

    fn user_headers(&self) -> impl Iterator<Item = &'a Header> {
        self.headers
            .iter()
            .filter(|(k, _)| !k.starts_with(RESERVED_HEADER_PREFIX))
    }

    fn is_routed(&self) -> bool {
        self.topic.is_some() || self.partition >= 0 || self.user_headers().next().is_some()
    }

    fn size(&self) -> usize {
        let bytes = |b: Option<&[u8]>| b.map_or(1, |b| b.len() + 5);
        let headers: usize = self
            .user_headers()
            .map(|(k, v)| k.len() + 5 + bytes(v.as_deref()))
            .sum();
        bytes(self.key) + bytes(self.value) + headers + 3
    }
}

/// Encodes `records` as one blob: version 1 unless some record has a topic, a partition or
/// user headers.
pub fn encode_blob(records: &[RecordRef<'_>], tagged_fields: &TaggedFields) -> Vec<u8> {
    let routed = records.iter().any(RecordRef::is_routed);
    let mut w = Writer::with_capacity(64);
    w.bytes(&MAGIC);
    if !routed {
        w.u8(FORMAT_VERSION_PLAIN);
        w.uvarint(records.len() as u64);
        for r in records {
            nullable_bytes(&mut w, r.key);
            nullable_bytes(&mut w, r.value);
        }
    } else {
        w.u8(FORMAT_VERSION);
        let mut index: HashMap<&str, u64> = HashMap::new();
        let mut topics: Vec<&str> = Vec::new();
        for t in records.iter().filter_map(|r| r.topic) {
            index.entry(t).or_insert_with(|| {
                topics.push(t);
                topics.len() as u64
            });
        }
        w.uvarint(topics.len() as u64);
        for t in &topics {
            w.compact_nullable_string(Some(t));
        }
        w.uvarint(records.len() as u64);
        for r in records {
            nullable_bytes(&mut w, r.key);
            nullable_bytes(&mut w, r.value);
            w.uvarint(r.topic.and_then(|t| index.get(t).copied()).unwrap_or(0));
            w.uvarint(u64::try_from(r.partition).map_or(0, |p| p + 1));
            w.uvarint(r.user_headers().count() as u64);
            for (k, v) in r.user_headers() {
                w.compact_nullable_string(Some(k));
                nullable_bytes(&mut w, v.as_deref());
            }
        }
    }
    tagged_fields.encode_to(&mut w);
    let mut bytes = w.into_bytes();
    let crc = crc32c::crc32c(&bytes);
    bytes.extend_from_slice(&crc.to_be_bytes());
    bytes
}

/// Splits `records` into blobs of about [`TARGET_BLOB_BYTES`] each (at least one blob, possibly
/// empty, so that an epoch with no records still has a redo row saying so).
pub fn encode_blobs(records: &[RecordRef<'_>]) -> Vec<Vec<u8>> {
    let mut blobs = Vec::new();
    let mut start = 0;
    let n = records.len();
    loop {
        let mut end = start;
        let mut size = 0usize;
        while end < n
            && (end == start
                || (size < TARGET_BLOB_BYTES && ((end - start) as u64) < MAX_BLOB_RECORDS))
        {
            size += records[end].size();
            end += 1;
        }
        blobs.push(encode_blob(&records[start..end], &TaggedFields::new()));
        if end >= n {
            return blobs;
        }
        start = end;
    }
}

/// Decodes one blob (either version) into its records (and its tagged fields, kept verbatim).
pub fn decode_blob(bytes: &[u8]) -> Result<(Vec<RedoRecord>, TaggedFields), CoreError> {
    decode(bytes).map_err(|e| {
        CoreError::InvalidStateEncoding(format!(
            "invalid redo log blob ({}): {}",
            e.kind.name(),
            e.message
        ))
    })
}

fn decode(bytes: &[u8]) -> Result<(Vec<RedoRecord>, TaggedFields), DecodeError> {
    if bytes.len() < HEADER_LEN + CRC_LEN {
        return Err(DecodeError::new(
            DecodeErrorKind::Truncated,
            format!(
                "truncated: {} byte(s), a blob has at least {}",
                bytes.len(),
                HEADER_LEN + CRC_LEN
            ),
        ));
    }
    if bytes[..2] != MAGIC {
        return Err(DecodeError::new(
            DecodeErrorKind::BadMagic,
            "it does not start with the magic bytes \"LR\"",
        ));
    }
    let version = bytes[2];
    if version > FORMAT_VERSION {
        return Err(DecodeError::new(
            DecodeErrorKind::NewerVersion,
            format!(
                "it was written by a newer laminar (redo format version {version}); this laminar \
                 reads versions 1 to {FORMAT_VERSION}: upgrade laminar"
            ),
        ));
    }
    if version == 0 {
        return Err(DecodeError::new(
            DecodeErrorKind::UnknownVersion,
            "redo format version 0 does not exist",
        ));
    }
    let (covered, stored) = bytes.split_at(bytes.len() - CRC_LEN);
    let mut crc = [0u8; CRC_LEN];
    crc.copy_from_slice(stored);
    let stored = u32::from_be_bytes(crc);
    let computed = crc32c::crc32c(covered);
    if stored != computed {
        return Err(DecodeError::new(
            DecodeErrorKind::BadCrc,
            format!(
                "checksum mismatch (stored 0x{stored:08x}, computed 0x{computed:08x}): the blob \
                 is corrupt or truncated"
            ),
        ));
    }
    let mut r = Reader::new(&covered[HEADER_LEN..]);
    let topics = if version >= 2 {
        let count = bounded(&mut r, "the topic count")?;
        let mut topics = Vec::with_capacity(count.min(r.remaining()));
        for _ in 0..count {
            topics.push(read_string(&mut r, "a topic name")?);
        }
        topics
    } else {
        Vec::new()
    };
    let count = bounded(&mut r, "the record count")?;
    // Each record takes at least two bytes: bound the allocation by the input, not the count.
    let mut records = Vec::with_capacity(count.min(r.remaining() / 2));
    for _ in 0..count {
        let mut record = RedoRecord {
            key: read_nullable_bytes(&mut r, "a record key")?,
            value: read_nullable_bytes(&mut r, "a record value")?,
            partition: -1,
            ..RedoRecord::default()
        };
        if version >= 2 {
            record.topic = read_topic(&mut r, &topics)?;
            record.partition = read_partition(&mut r)?;
            let n = bounded(&mut r, "a header count")?;
            record.headers = Vec::with_capacity(n.min(r.remaining() / 2));
            for _ in 0..n {
                let key = read_string(&mut r, "a header key")?;
                record
                    .headers
                    .push((key, read_nullable_bytes(&mut r, "a header value")?));
            }
        }
        records.push(record);
    }
    let tagged = TaggedFields::decode_from(&mut r)?;
    r.finish("the tagged fields")?;
    Ok((records, tagged))
}

/// A count of at most [`MAX_BLOB_RECORDS`].
fn bounded(r: &mut Reader<'_>, what: &str) -> Result<usize, DecodeError> {
    let count = r.uvarint64(what)?;
    if count > MAX_BLOB_RECORDS {
        return Err(DecodeError::new(
            DecodeErrorKind::VarintOverflow,
            format!("{what} {count} exceeds the limit {MAX_BLOB_RECORDS}"),
        ));
    }
    // MAX_BLOB_RECORDS fits every platform's usize.
    Ok(count as usize)
}

fn read_topic(r: &mut Reader<'_>, topics: &[String]) -> Result<Option<String>, DecodeError> {
    let i = r.uvarint64("a record's topic")?;
    let Some(i) = i.checked_sub(1) else {
        return Ok(None);
    };
    match usize::try_from(i).ok().and_then(|i| topics.get(i)) {
        Some(t) => Ok(Some(t.clone())),
        None => Err(DecodeError::new(
            DecodeErrorKind::VarintOverflow,
            format!(
                "a record's topic number {} is not among the blob's {} topic(s)",
                i + 1,
                topics.len()
            ),
        )),
    }
}

fn read_partition(r: &mut Reader<'_>) -> Result<i32, DecodeError> {
    let p = r.uvarint32("a record's partition")?;
    match p.checked_sub(1).map(i32::try_from) {
        None => Ok(-1),
        Some(Ok(p)) => Ok(p),
        Some(Err(_)) => Err(DecodeError::new(
            DecodeErrorKind::VarintOverflow,
            format!("a record's partition {} does not fit in 31 bits", p - 1),
        )),
    }
}

fn read_string(r: &mut Reader<'_>, what: &str) -> Result<String, DecodeError> {
    r.compact_nullable_string(what)?.ok_or_else(|| {
        DecodeError::new(
            DecodeErrorKind::Truncated,
            format!("{what} is null, which the format does not allow"),
        )
    })
}

fn nullable_bytes(w: &mut Writer, value: Option<&[u8]>) {
    match value {
        None => w.uvarint(0),
        Some(b) => {
            w.uvarint(b.len() as u64 + 1);
            w.bytes(b);
        }
    }
}

fn read_nullable_bytes(r: &mut Reader<'_>, what: &str) -> Result<Option<Vec<u8>>, DecodeError> {
    let n = r.uvarint64(what)?;
    let Some(len) = n.checked_sub(1) else {
        return Ok(None);
    };
    let len = usize::try_from(len).map_err(|_| {
        DecodeError::new(
            DecodeErrorKind::VarintOverflow,
            format!("{what}: length {len} does not fit this platform"),
        )
    })?;
    Ok(Some(r.take(len, what)?.to_vec()))
}

#[cfg(test)]
#[path = "redo_tests.rs"]
mod tests;
