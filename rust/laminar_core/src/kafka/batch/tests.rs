//! Record batches built with `kafka-protocol`'s encoder (and, for lz4 and zstd, frames written
//! by the codec crates' own encoders) decode back to the same records, with every codec.

use std::io::Write;

use bytes::{Bytes, BytesMut};
use indexmap::IndexMap;
use kafka_protocol::compression::{Compressor, Gzip, Snappy};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};

use super::*;

pub(crate) const PLACE: Place<'static> = Place {
    topic: "t",
    partition: 0,
};

/// A record with the sink headers (or none).
pub(crate) fn record(offset: i64, value: &str, sink: Option<(&str, i64)>) -> Record {
    let mut headers = IndexMap::new();
    if let Some((sink, epoch)) = sink {
        headers.insert(
            StrBytes::from_static_str("laminar.sink"),
            Some(Bytes::from(sink.to_owned())),
        );
        headers.insert(
            StrBytes::from_static_str("laminar.epoch"),
            Some(Bytes::from(epoch.to_string())),
        );
    }
    Record {
        transactional: false,
        control: false,
        delete_horizon: false,
        partition_leader_epoch: 0,
        producer_id: -1,
        producer_epoch: -1,
        timestamp_type: TimestampType::Creation,
        offset,
        sequence: offset as i32,
        timestamp: 1_700_000_000_000 + offset,
        key: Some(Bytes::from(format!("k{offset}"))),
        value: Some(Bytes::from(value.to_owned())),
        headers,
    }
}

fn compress(
    plain: &mut BytesMut,
    out: &mut BytesMut,
    compression: Compression,
) -> anyhow::Result<()> {
    match compression {
        Compression::None => out.extend_from_slice(plain),
        Compression::Gzip => Gzip::compress(out, |b| {
            b.extend_from_slice(plain);
            Ok(())
        })?,
        Compression::Snappy => Snappy::compress(out, |b| {
            b.extend_from_slice(plain);
            Ok(())
        })?,
        Compression::Lz4 => {
            let mut encoder = lz4_flex::frame::FrameEncoder::new(Vec::new());
            encoder.write_all(plain)?;
            out.extend_from_slice(&encoder.finish()?);
        }
        Compression::Zstd => out.extend_from_slice(&ruzstd::encoding::compress_to_vec(
            &plain[..],
            ruzstd::encoding::CompressionLevel::Fastest,
        )),
    }
    Ok(())
}

/// One batch of `records` (sharing the first record's producer and flags), compressed.
pub(crate) fn encode(records: &[Record], compression: Compression) -> Bytes {
    let mut buf = BytesMut::new();
    let options = RecordEncodeOptions {
        version: 2,
        compression,
    };
    RecordBatchEncoder::encode_with_custom_compression(
        &mut buf,
        records.iter(),
        &options,
        Some(compress),
    )
    .expect("encodes");
    buf.freeze()
}

/// A transaction marker of `producer_id`/`epoch` at `offset`.
pub(crate) fn marker(offset: i64, producer_id: i64, epoch: i16, kind: ControlType) -> Bytes {
    let mut r = record(offset, "", None);
    r.key = Some(Bytes::from(vec![0, 0, 0, kind as u8]));
    r.value = Some(Bytes::from_static(&[0, 0, 0, 0, 0, 0]));
    (r.transactional, r.control, r.producer_id, r.producer_epoch) =
        (true, true, producer_id, epoch);
    encode(&[r], Compression::None)
}

/// A transactional batch of `values` of `producer_id`/`epoch` from `offset`.
pub(crate) fn txn(
    offset: i64,
    producer_id: i64,
    epoch: i16,
    values: &[(&str, Option<(&str, i64)>)],
) -> Bytes {
    let records: Vec<Record> = values
        .iter()
        .enumerate()
        .map(|(i, (v, sink))| {
            let mut r = record(offset + i as i64, v, *sink);
            (r.transactional, r.producer_id, r.producer_epoch) = (true, producer_id, epoch);
            r
        })
        .collect();
    encode(&records, Compression::None)
}

const CODECS: [Compression; 5] = [
    Compression::None,
    Compression::Gzip,
    Compression::Snappy,
    Compression::Lz4,
    Compression::Zstd,
];

#[test]
fn every_codec_decodes_to_the_same_records() {
    let records: Vec<Record> = (0..300)
        .map(|i| {
            record(
                100 + i,
                &format!("value-{i}-{}", "x".repeat(40)),
                Some(("s", 7)),
            )
        })
        .collect();
    for compression in CODECS {
        let data = encode(&records, compression);
        let (batches, used) = decode_batches(&data, PLACE, true).expect("decodes");
        assert_eq!(used, data.len());
        let [batch] = &batches[..] else {
            panic!("one batch")
        };
        assert_eq!(batch.compression, compression);
        assert_eq!((batch.base_offset, batch.last_offset), (100, 399));
        assert_eq!(batch.records.len(), 300);
        assert_eq!(batch.records[5].value, records[5].value);
        assert_eq!(batch.records[299].key.as_deref(), Some(&b"k399"[..]));
        assert_eq!(batch.records[0].headers, records[0].headers);
        assert!(batch.control.is_none() && !batch.transactional);
    }
}

#[test]
fn codecs_mix_within_one_fetch_and_a_partial_tail_is_left_out() {
    let mut data = BytesMut::new();
    for (i, compression) in CODECS.iter().enumerate() {
        data.extend_from_slice(&encode(&[record(i as i64, "v", None)], *compression));
    }
    let whole = data.len();
    let tail = encode(&[record(9, "cut", None)], Compression::Zstd);
    data.extend_from_slice(&tail[..tail.len() - 3]);
    let (batches, used) = decode_batches(&data.freeze(), PLACE, true).expect("decodes");
    assert_eq!(
        batches.iter().map(|b| b.base_offset).collect::<Vec<_>>(),
        [0, 1, 2, 3, 4]
    );
    assert_eq!(used, whole);
}

#[test]
fn control_batches_carry_commit_and_abort() {
    let mut data = BytesMut::new();
    data.extend_from_slice(&marker(5, 1, 0, ControlType::Commit));
    data.extend_from_slice(&marker(6, 1, 0, ControlType::Abort));
    let (batches, _) = decode_batches(&data.freeze(), PLACE, true).expect("decodes");
    assert_eq!(batches[0].control, Some(ControlType::Commit));
    assert_eq!(batches[1].control, Some(ControlType::Abort));
    assert!(batches[0].records.is_empty() && batches[0].transactional);
}

#[test]
fn bad_crc_old_formats_and_corrupt_bodies_are_clear_errors() {
    let good = encode(&[record(0, "x", None)], Compression::Gzip);
    let mut bad = BytesMut::from(&good[..]);
    bad[CRC_AT] ^= 1;
    let bad = bad.freeze();
    let err = decode_batches(&bad, PLACE, true).expect_err("crc");
    assert!(err.0.contains("t[0] offset 0: CRC mismatch"), "{err}");
    assert_eq!(
        decode_batches(&bad, PLACE, false)
            .expect("unchecked")
            .0
            .len(),
        1
    );

    let mut old = BytesMut::from(&good[..]);
    old[MAGIC_AT] = 1;
    let err = decode_batches(&old.freeze(), PLACE, true).expect_err("magic");
    assert!(
        err.0.contains("message format v1 is not supported"),
        "{err}"
    );

    let mut corrupt = BytesMut::from(&good[..]);
    let n = corrupt.len();
    corrupt[n - 6..].copy_from_slice(&[0xff; 6]);
    let err = decode_batches(&corrupt.freeze(), PLACE, false).expect_err("body");
    assert!(err.0.contains("gzip batch does not decode"), "{err}");

    let mut codec = BytesMut::from(&good[..]);
    codec[CRC_START + 1] = 7;
    let err = decode_batches(&codec.freeze(), PLACE, false).expect_err("codec");
    assert!(err.0.contains("unknown compression codec 7"), "{err}");
}
