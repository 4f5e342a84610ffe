//! The redo log's record blobs: the Kafka records of a decided epoch, kept in `laminar.redo` so
//! that recovery can re-produce them without a Spark replay (docs/protocol.md §3).
//!
//! The format follows the conventions of [`crate::prepared`] (KIP-482 tagged fields, KIP-915
//! "ignore what you do not know", a CRC-32C over everything):
//!
//! ```text
//! blob    = "LR" | version u8 (= 1) | record_count uvarint | records | tagged_fields | crc32c (u32 big-endian)
//! record  = key compact nullable bytes | value compact nullable bytes
//!           (compact nullable bytes: uvarint(len + 1) then the bytes; 0 = null)
//! tagged_fields = uvarint(count) then, in strictly ascending tag order: uvarint(tag) uvarint(size) bytes
//! ```
//!
//! The record headers (`laminar.sink`, `laminar.epoch`) are not stored: they are a function of the
//! sink and the epoch, and the redo writes them again. A blob holds at most [`MAX_BLOB_RECORDS`]
//! records and the writer splits an epoch into blobs of about [`TARGET_BLOB_BYTES`] (the `seq`
//! column of `laminar.redo`), so that no single row grows without bound.
//!
//! Decoding is strict (the same rules as `PreparedTxnState`): minimal varints, nothing after the
//! checksum, a newer version byte is a clear error. Every malformed input is a
//! [`CoreError::InvalidStateEncoding`], never a panic.

use crate::error::CoreError;
use crate::prepared::{DecodeError, DecodeErrorKind, Reader, TaggedFields, Writer};

/// The first two bytes of every redo blob.
pub const MAGIC: [u8; 2] = *b"LR";
/// The format version this laminar writes and the highest it reads.
pub const FORMAT_VERSION: u8 = 1;
/// The writer starts a new blob once the current one holds about this many bytes.
pub const TARGET_BLOB_BYTES: usize = 1 << 20;
/// The most records one blob may hold (a sanity bound checked by the decoder too).
pub const MAX_BLOB_RECORDS: u64 = 1 << 24;

const HEADER_LEN: usize = 3;
const CRC_LEN: usize = 4;

/// One Kafka record of the redo log: key and value, each possibly null.
pub type RedoRecord = (Option<Vec<u8>>, Option<Vec<u8>>);

/// Encodes `records` (key, value) as one blob.
pub fn encode_blob<'a, I>(records: I, tagged_fields: &TaggedFields) -> Vec<u8>
where
    I: ExactSizeIterator<Item = (Option<&'a [u8]>, Option<&'a [u8]>)>,
{
    let mut w = Writer::with_capacity(64);
    w.bytes(&MAGIC);
    w.u8(FORMAT_VERSION);
    w.uvarint(records.len() as u64);
    for (key, value) in records {
        nullable_bytes(&mut w, key);
        nullable_bytes(&mut w, value);
    }
    tagged_fields.encode_to(&mut w);
    let mut bytes = w.into_bytes();
    let crc = crc32c::crc32c(&bytes);
    bytes.extend_from_slice(&crc.to_be_bytes());
    bytes
}

/// Splits `records` into blobs of about [`TARGET_BLOB_BYTES`] each (at least one blob, possibly
/// empty, so that an epoch with no records still has a redo row saying so).
pub fn encode_blobs(keys: Option<&[Option<&[u8]>]>, values: &[Option<&[u8]>]) -> Vec<Vec<u8>> {
    let mut blobs = Vec::new();
    let mut start = 0;
    let n = values.len();
    let key_at = |i: usize| keys.and_then(|k| k.get(i).copied().flatten());
    loop {
        let mut end = start;
        let mut size = 0usize;
        while end < n
            && (end == start
                || (size < TARGET_BLOB_BYTES && ((end - start) as u64) < MAX_BLOB_RECORDS))
        {
            size += key_at(end).map_or(1, |k| k.len() + 5) + values[end].map_or(1, |v| v.len() + 5);
            end += 1;
        }
        let records = (start..end).map(|i| (key_at(i), values[i]));
        blobs.push(encode_blob(records, &TaggedFields::new()));
        if end >= n {
            return blobs;
        }
        start = end;
    }
}

/// Decodes one blob into its records (and its tagged fields, kept verbatim).
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
                 reads version {FORMAT_VERSION}: upgrade laminar"
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
    let count = r.uvarint64("the record count")?;
    if count > MAX_BLOB_RECORDS {
        return Err(DecodeError::new(
            DecodeErrorKind::VarintOverflow,
            format!("the record count {count} exceeds the limit {MAX_BLOB_RECORDS}"),
        ));
    }
    // Each record takes at least two bytes: bound the allocation by the input, not the count.
    let mut records = Vec::with_capacity((count as usize).min(r.remaining() / 2));
    for _ in 0..count {
        let key = read_nullable_bytes(&mut r, "a record key")?;
        let value = read_nullable_bytes(&mut r, "a record value")?;
        records.push((key, value));
    }
    let tagged = TaggedFields::decode_from(&mut r)?;
    r.finish("the tagged fields")?;
    Ok((records, tagged))
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
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn blob(records: &[RedoRecord]) -> Vec<u8> {
        encode_blob(
            records.iter().map(|(k, v)| (k.as_deref(), v.as_deref())),
            &TaggedFields::new(),
        )
    }

    #[test]
    fn round_trips_nulls_and_empties() {
        let records: Vec<RedoRecord> = vec![
            (None, None),
            (Some(vec![]), Some(vec![])),
            (Some(b"k".to_vec()), Some(b"{\"id\":1}".to_vec())),
            (None, Some(vec![0; 300])),
        ];
        let bytes = blob(&records);
        assert_eq!(&bytes[..3], b"LR\x01");
        let (back, tags) = decode_blob(&bytes).unwrap();
        assert_eq!(back, records);
        assert!(tags.is_empty());
    }

    #[test]
    fn an_empty_epoch_is_one_empty_blob() {
        let blobs = encode_blobs(None, &[]);
        assert_eq!(blobs.len(), 1);
        assert_eq!(decode_blob(&blobs[0]).unwrap().0, vec![]);
    }

    #[test]
    fn big_epochs_split_into_bounded_blobs_in_order() {
        let value = vec![7u8; 100_000];
        let values: Vec<Option<&[u8]>> = (0..25).map(|_| Some(value.as_slice())).collect();
        let keys: Vec<Option<&[u8]>> = (0..25).map(|_| Some(&b"key"[..])).collect();
        let blobs = encode_blobs(Some(&keys), &values);
        assert!(blobs.len() >= 2, "{} blobs", blobs.len());
        let mut total = 0;
        for b in &blobs {
            assert!(b.len() < TARGET_BLOB_BYTES + 200_000);
            let (records, _) = decode_blob(b).unwrap();
            assert!(
                records
                    .iter()
                    .all(|(k, v)| k.as_deref() == Some(&b"key"[..])
                        && v.as_ref().is_some_and(|v| v.len() == 100_000))
            );
            total += records.len();
        }
        assert_eq!(total, 25);
    }

    #[test]
    fn corruption_is_a_clear_error_never_a_panic() {
        let bytes = blob(&[(Some(b"a".to_vec()), Some(b"b".to_vec()))]);
        for i in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[i] ^= 0x40;
            let err = decode_blob(&bad).unwrap_err();
            assert!(matches!(err, CoreError::InvalidStateEncoding(ref m) if m.contains("redo")));
        }
        for cut in 0..bytes.len() {
            assert!(decode_blob(&bytes[..cut]).is_err());
        }
        let mut newer = bytes.clone();
        newer[2] = 2;
        let err = decode_blob(&newer).unwrap_err().to_string();
        assert!(err.contains("newer laminar"), "{err}");
    }

    #[test]
    fn unknown_tagged_fields_are_kept() {
        let mut tags = TaggedFields::new();
        tags.insert_raw(5, b"future".to_vec());
        let bytes = encode_blob(std::iter::once((None, Some(&b"v"[..]))), &tags);
        let (records, back) = decode_blob(&bytes).unwrap();
        assert_eq!(records, vec![(None, Some(b"v".to_vec()))]);
        assert_eq!(back.get_raw(5), Some(&b"future"[..]));
    }

    proptest! {
        #[test]
        fn any_records_round_trip(records in proptest::collection::vec(
            (proptest::option::of(proptest::collection::vec(any::<u8>(), 0..40)),
             proptest::option::of(proptest::collection::vec(any::<u8>(), 0..200))), 0..50)) {
            let (back, _) = decode_blob(&blob(&records)).unwrap();
            prop_assert_eq!(back, records);
        }

        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = decode_blob(&bytes);
            let mut framed = b"LR\x01".to_vec();
            framed.extend_from_slice(&bytes);
            let crc = crc32c::crc32c(&framed);
            framed.extend_from_slice(&crc.to_be_bytes());
            let _ = decode_blob(&framed);
        }
    }
}
