//! Tests of the redo blob (`redo.rs`): fixed vectors of both versions, round trips, splitting,
//! and malformed input as a clear error, never a panic.

use super::*;
use proptest::prelude::*;

fn refs(records: &[RedoRecord]) -> Vec<RecordRef<'_>> {
    records
        .iter()
        .map(|r| RecordRef {
            key: r.key.as_deref(),
            value: r.value.as_deref(),
            topic: r.topic.as_deref(),
            partition: r.partition,
            headers: &r.headers,
        })
        .collect()
}

fn blob(records: &[RedoRecord]) -> Vec<u8> {
    encode_blob(&refs(records), &TaggedFields::new())
}

fn plain(key: Option<&[u8]>, value: Option<&[u8]>) -> RedoRecord {
    RedoRecord {
        key: key.map(<[u8]>::to_vec),
        value: value.map(<[u8]>::to_vec),
        partition: -1,
        ..RedoRecord::default()
    }
}

fn routed() -> Vec<RedoRecord> {
    vec![
        RedoRecord {
            key: Some(b"k".to_vec()),
            value: Some(b"v".to_vec()),
            topic: Some("b".into()),
            partition: 3,
            headers: vec![("h".into(), Some(b"x".to_vec())), ("n".into(), None)],
        },
        plain(None, None),
        RedoRecord {
            value: Some(b"w".to_vec()),
            topic: Some("c".into()),
            partition: 0,
            ..RedoRecord::default()
        },
    ]
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// Version 1, as laminar wrote it before version 2 existed: (k, v), (null, "").
const V1_VECTOR: &str = "4c520102026b02760001005b8cc48b";
/// Version 2: topics [b, c]; (k, v, b, partition 3, headers h=x, n=null), (null, null, the
/// sink's topic), (null, w, c, partition 0).
const V2_VECTOR: &str =
    "4c5202020262026303026b027601040202680278026e0000000000000002770201000075a1e6d5";

#[test]
fn the_version_1_vector_still_decodes_and_is_still_written() {
    let records = vec![plain(Some(b"k"), Some(b"v")), plain(None, Some(b""))];
    let (back, tags) = decode_blob(&unhex(V1_VECTOR)).unwrap();
    assert_eq!(back, records);
    assert!(tags.is_empty());
    assert_eq!(blob(&records), unhex(V1_VECTOR));
}

#[test]
fn the_version_2_vector_decodes_and_is_what_routed_records_write() {
    let (back, _) = decode_blob(&unhex(V2_VECTOR)).unwrap();
    assert_eq!(back, routed());
    assert_eq!(blob(&routed()), unhex(V2_VECTOR));
}

#[test]
fn laminar_headers_are_not_stored_and_alone_do_not_need_version_2() {
    let headers: Vec<Header> = vec![
        ("laminar.sink".into(), Some(b"s".to_vec())),
        ("laminar.epoch".into(), Some(b"7".to_vec())),
    ];
    let record = RecordRef {
        headers: &headers,
        ..RecordRef::plain(None, Some(b"v"))
    };
    let bytes = encode_blob(&[record], &TaggedFields::new());
    assert_eq!(bytes[2], FORMAT_VERSION_PLAIN);
    let mut user = headers.clone();
    user.push(("mine".into(), None));
    let record = RecordRef {
        headers: &user,
        ..record
    };
    let (back, _) = decode_blob(&encode_blob(&[record], &TaggedFields::new())).unwrap();
    assert_eq!(back[0].headers, vec![("mine".to_string(), None)]);
}

#[test]
fn round_trips_nulls_and_empties() {
    let records = vec![
        plain(None, None),
        plain(Some(b""), Some(b"")),
        plain(Some(b"k"), Some(b"{\"id\":1}")),
        plain(None, Some(&[0; 300])),
    ];
    let bytes = blob(&records);
    assert_eq!(&bytes[..3], b"LR\x01");
    let (back, tags) = decode_blob(&bytes).unwrap();
    assert_eq!(back, records);
    assert!(tags.is_empty());
}

#[test]
fn an_empty_epoch_is_one_empty_blob() {
    let blobs = encode_blobs(&[]);
    assert_eq!(blobs.len(), 1);
    assert_eq!(decode_blob(&blobs[0]).unwrap().0, vec![]);
}

#[test]
fn big_epochs_split_into_bounded_blobs_in_order() {
    let value = vec![7u8; 100_000];
    let headers: Vec<Header> = vec![("h".into(), Some(vec![1; 10]))];
    let records: Vec<RecordRef<'_>> = (0..25)
        .map(|i| RecordRef {
            topic: Some(if i % 2 == 0 { "even" } else { "odd" }),
            partition: i % 3,
            headers: &headers,
            ..RecordRef::plain(Some(b"key"), Some(&value))
        })
        .collect();
    let blobs = encode_blobs(&records);
    assert!(blobs.len() >= 2, "{} blobs", blobs.len());
    let mut i = 0;
    for b in &blobs {
        assert!(b.len() < TARGET_BLOB_BYTES + 200_000);
        for r in decode_blob(b).unwrap().0 {
            assert_eq!(r.key.as_deref(), Some(&b"key"[..]));
            assert_eq!(r.value.as_ref().map(Vec::len), Some(100_000));
            assert_eq!(r.topic.as_deref(), records[i].topic);
            assert_eq!((r.partition, &r.headers), (i as i32 % 3, &headers));
            i += 1;
        }
    }
    assert_eq!(i, 25);
}

#[test]
fn corruption_is_a_clear_error_never_a_panic() {
    for bytes in [blob(&[plain(Some(b"a"), Some(b"b"))]), blob(&routed())] {
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
        newer[2] = 3;
        let err = decode_blob(&newer).unwrap_err().to_string();
        assert!(err.contains("newer laminar"), "{err}");
    }
}

/// A blob with a valid checksum over `body` (everything after the version byte).
fn framed(version: u8, body: &[u8]) -> Vec<u8> {
    let mut bytes = vec![b'L', b'R', version];
    bytes.extend_from_slice(body);
    let crc = crc32c::crc32c(&bytes);
    bytes.extend_from_slice(&crc.to_be_bytes());
    bytes
}

#[test]
fn well_framed_nonsense_is_named() {
    // one topic "t"; one record whose topic number 2 does not exist
    let err = decode_blob(&framed(2, b"\x01\x02t\x01\x00\x00\x02\x00\x00\x00")).unwrap_err();
    assert!(err.to_string().contains("topic number 2"), "{err}");
    // a partition past i32::MAX (uvarint 2^31 + 1)
    let err = decode_blob(&framed(
        2,
        b"\x00\x01\x00\x00\x00\x81\x80\x80\x80\x08\x00\x00",
    ))
    .unwrap_err();
    assert!(err.to_string().contains("31 bits"), "{err}");
    // a null header key
    let err = decode_blob(&framed(2, b"\x00\x01\x00\x00\x00\x00\x01\x00\x00\x00")).unwrap_err();
    assert!(err.to_string().contains("header key is null"), "{err}");
}

#[test]
fn unknown_tagged_fields_are_kept() {
    let mut tags = TaggedFields::new();
    tags.insert_raw(5, b"future".to_vec());
    let bytes = encode_blob(&[RecordRef::plain(None, Some(b"v"))], &tags);
    let (records, back) = decode_blob(&bytes).unwrap();
    assert_eq!(records, vec![plain(None, Some(b"v"))]);
    assert_eq!(back.get_raw(5), Some(&b"future"[..]));
}

fn any_record() -> impl Strategy<Value = RedoRecord> {
    let bytes = |n| proptest::option::of(proptest::collection::vec(any::<u8>(), 0..n));
    let header = ("[a-z]{0,6}", bytes(20));
    (
        bytes(40),
        bytes(200),
        proptest::option::of(prop_oneof!["a", "topic-b", "c.c"]),
        -1i32..5,
        proptest::collection::vec(header, 0..3),
    )
        .prop_map(|(key, value, topic, partition, headers)| RedoRecord {
            key,
            value,
            topic,
            partition,
            headers,
        })
}

proptest! {
    #[test]
    fn any_records_round_trip(records in proptest::collection::vec(any_record(), 0..50)) {
        let (back, _) = decode_blob(&blob(&records)).unwrap();
        prop_assert_eq!(back, records);
    }

    #[test]
    fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
        let _ = decode_blob(&bytes);
        let _ = decode_blob(&framed(1, &bytes));
        let _ = decode_blob(&framed(2, &bytes));
    }
}
