//! Request frames decode as the broker would decode them, and answers encoded as a broker would
//! encode them decode to what the client needs; the scan and the witness on fetched batches.

use bytes::BytesMut;
use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
use kafka_protocol::messages::{ResponseHeader, TopicName};
use kafka_protocol::protocol::{Encodable, decode_request_header_from_buffer};

use super::*;
use crate::kafka::batch::ControlType;
use crate::kafka::batch::tests::{encode, marker, record, txn};
use crate::kafka::scan::{Finished, PartitionScan};
use kafka_protocol::records::Compression;

fn answer<R: Request>(body: &R::Response, version: i16, correlation_id: i32) -> Bytes {
    let mut buf = BytesMut::new();
    ResponseHeader::default()
        .with_correlation_id(correlation_id)
        .encode(&mut buf, R::Response::header_version(version))
        .expect("header");
    body.encode(&mut buf, version).expect("body");
    buf.freeze()
}

#[test]
fn a_frame_is_sized_and_carries_the_header_and_body() {
    for version in [4, 12] {
        let frame =
            frame(&fetch("orders", 3, 42, 1 << 20, 500), version, 7, "laminar").expect("frame");
        let size = i32::from_be_bytes(frame[..4].try_into().expect("4 bytes"));
        assert_eq!(size as usize, frame.len() - 4);
        let mut buf = Bytes::copy_from_slice(&frame[4..]);
        let header = decode_request_header_from_buffer(&mut buf).expect("header");
        assert_eq!(
            (
                header.request_api_key,
                header.request_api_version,
                header.correlation_id
            ),
            (1, version, 7)
        );
        let request = FetchRequest::decode(&mut buf, version).expect("body");
        let partition = &request.topics[0].partitions[0];
        assert_eq!((partition.partition, partition.fetch_offset), (3, 42));
        assert_eq!(request.isolation_level, 0);
    }
}

#[test]
fn versions_are_the_highest_both_sides_speak() {
    assert_eq!(choose_version(ApiKey::Fetch as i16, 0, 17), Some(12));
    assert_eq!(choose_version(ApiKey::OffsetCommit as i16, 2, 9), Some(8));
    assert_eq!(choose_version(ApiKey::Fetch as i16, 13, 17), None);
    assert_eq!(choose_version(999, 0, 1), None);
    assert_eq!(default_version(ApiKey::ApiVersions as i16), Some(0));
}

#[test]
fn an_answer_out_of_order_is_refused() {
    let body = EndTxnResponse::default().with_error_code(48);
    let data = answer::<EndTxnRequest>(&body, 1, 5);
    assert_eq!(
        end_txn_error(&response::<EndTxnRequest>(data.clone(), 1, 5).expect("decodes")),
        48
    );
    let err = response::<EndTxnRequest>(data, 1, 6).expect_err("out of order");
    assert!(err.0.contains("out of order"), "{err}");
}

#[test]
fn sasl_authenticate_answers_the_session_lifetime_from_v1() {
    let body = SaslAuthenticateResponse::default()
        .with_auth_bytes(Bytes::from_static(b"challenge"))
        .with_session_lifetime_ms(6_000);
    for (version, lifetime) in [(0, 0), (1, 6_000)] {
        let data = answer::<SaslAuthenticateRequest>(&body, version, 3);
        let decoded = response::<SaslAuthenticateRequest>(data, version, 3).expect("decodes");
        let (code, _message, bytes, got) = authenticated(&decoded);
        assert_eq!((code, &bytes[..], got), (0, &b"challenge"[..], lifetime));
    }
}

#[test]
fn find_coordinator_speaks_both_shapes() {
    let old = find_coordinator("tid", 1, 3);
    assert_eq!((old.key.as_str(), old.coordinator_keys.len()), ("tid", 0));
    let new = find_coordinator("tid", 1, 4);
    assert_eq!(new.coordinator_keys[0].as_str(), "tid");
}

fn fetch_answer(records: Bytes, high_watermark: i64) -> FetchResponse {
    FetchResponse::default().with_responses(vec![
        FetchableTopicResponse::default()
            .with_topic(TopicName(StrBytes::from_static_str("t")))
            .with_partitions(vec![
                PartitionData::default()
                    .with_partition_index(0)
                    .with_high_watermark(high_watermark)
                    .with_records(Some(records)),
            ]),
    ])
}

#[test]
fn a_fetch_answer_feeds_the_scan_and_the_witness_finds_the_committed_epoch() {
    let mut log = BytesMut::new();
    log.extend_from_slice(&txn(
        0,
        9,
        0,
        &[("a", Some(("sink", 4))), ("b", Some(("sink", 4)))],
    ));
    log.extend_from_slice(&marker(2, 9, 0, ControlType::Commit));
    log.extend_from_slice(&txn(3, 9, 0, &[("c", Some(("sink", 5)))]));
    log.extend_from_slice(&marker(4, 9, 0, ControlType::Abort));
    log.extend_from_slice(&encode(
        &[record(5, "foreign", Some(("other", 99)))],
        Compression::Zstd,
    ));
    log.extend_from_slice(&txn(6, 9, 1, &[("d", Some(("sink", 6)))])); // open: not committed
    let log = log.freeze();
    let data = answer::<FetchRequest>(&fetch_answer(log.clone(), 7), 12, 1);
    let part = fetched(
        response::<FetchRequest>(data, 12, 1).expect("decodes"),
        "t",
        0,
    )
    .expect("t[0]");
    assert_eq!((part.error_code, part.high_watermark), (0, 7));

    let mut witness = PartitionScan::new("t", 0, 0, None, 7, false, Some("sink"));
    assert_eq!(witness.next_offset(), Some(0));
    witness.feed(&part.records, 7).expect("feeds");
    assert_eq!(witness.next_offset(), Some(7));
    witness.feed(&Bytes::new(), 7).expect("nothing new");
    assert_eq!(witness.next_offset(), None);
    assert_eq!(witness.stats.records, 7);
    assert!(matches!(
        witness.finish(),
        Finished::Witness(Some((4, 1_700_000_000_000)))
    ));

    let mut all = PartitionScan::new("t", 0, 1, Some(6), 7, true, None);
    all.feed(&log, 7).expect("feeds");
    assert_eq!(all.next_offset(), None);
    let Finished::Replay(outcome) = all.finish() else {
        panic!("replay")
    };
    let values: Vec<_> = outcome
        .committed
        .iter()
        .map(|(_, r)| r.value.clone().unwrap_or_default())
        .collect();
    assert_eq!(values, [Bytes::from("b"), Bytes::from("foreign")]);
    assert_eq!(outcome.aborted.len(), 1);
}

#[test]
fn a_scan_that_cannot_progress_below_the_watermark_says_so() {
    let mut scan = PartitionScan::new("t", 0, 0, None, 10, false, None);
    let err = scan.feed(&Bytes::new(), 10).expect_err("stuck");
    assert!(
        err.0
            .contains("no record batch at offset 0 below the high watermark 10"),
        "{err}"
    );
}
