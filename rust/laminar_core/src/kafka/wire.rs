//! Request frames and response decoding, on `kafka-protocol`'s generated messages.
//!
//! A frame is what goes on the socket: a 4-byte big-endian size, the request header (API key,
//! version, correlation id, client id; tagged fields for flexible versions), the body. A response
//! is read by the caller as size + that many bytes and handed back here whole; its correlation
//! id is checked. Versions are negotiated per connection: [`choose_version`] intersects what the
//! broker's ApiVersions answer offers with what this module speaks.

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, ApiVersionsResponse, EndTxnRequest, EndTxnResponse, FetchRequest,
    FetchResponse, FindCoordinatorRequest, FindCoordinatorResponse, ListOffsetsRequest,
    ListOffsetsResponse, MetadataRequest, MetadataResponse, OffsetCommitRequest,
    OffsetCommitResponse, OffsetFetchRequest, OffsetFetchResponse, RequestHeader, ResponseHeader,
    SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest, SaslHandshakeResponse,
};
use kafka_protocol::messages::{fetch_request, list_offsets_request, metadata_request};
use kafka_protocol::messages::{offset_commit_request, offset_fetch_request};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Request, StrBytes};

use super::{KafkaError, KafkaResult};

/// The versions this module speaks, per API: `(api key, min, max)`. Fetch stops at 12 (13 names
/// topics by id); OffsetCommit prefers 2-4, the versions that carry `retention_time_ms`.
pub const SPOKEN: &[(ApiKey, i16, i16)] = &[
    (ApiKey::Fetch, 4, 12),
    (ApiKey::ListOffsets, 1, 7),
    (ApiKey::Metadata, 4, 12),
    (ApiKey::OffsetCommit, 2, 8),
    (ApiKey::OffsetFetch, 1, 7),
    (ApiKey::FindCoordinator, 1, 4),
    (ApiKey::EndTxn, 1, 4),
    (ApiKey::SaslHandshake, 1, 1),
    (ApiKey::SaslAuthenticate, 0, 1),
    (ApiKey::ApiVersions, 0, 0),
];

/// The highest version of `api_key` both sides speak, given the broker's range.
pub fn choose_version(api_key: i16, broker_min: i16, broker_max: i16) -> Option<i16> {
    let (_, min, max) = SPOKEN.iter().find(|(key, _, _)| *key as i16 == api_key)?;
    let version = broker_max.min(*max);
    (version >= broker_min.max(*min)).then_some(version)
}

/// The version used when the broker's ranges are not known yet (ApiVersions itself, SASL).
pub fn default_version(api_key: i16) -> Option<i16> {
    choose_version(api_key, i16::MIN, i16::MAX)
}

/// The frame of `request` at `version`.
pub fn frame<R: Request>(
    request: &R,
    version: i16,
    correlation_id: i32,
    client_id: &str,
) -> KafkaResult<Vec<u8>> {
    let header = RequestHeader::default()
        .with_request_api_key(R::KEY)
        .with_request_api_version(version)
        .with_correlation_id(correlation_id)
        .with_client_id(Some(StrBytes::from_string(client_id.to_owned())));
    let mut buf = BytesMut::with_capacity(64);
    buf.extend_from_slice(&[0; 4]);
    header
        .encode(&mut buf, R::header_version(version))
        .and_then(|()| request.encode(&mut buf, version))
        .map_err(|e| KafkaError::new(format!("could not encode request {}: {e:#}", R::KEY)))?;
    let size =
        i32::try_from(buf.len() - 4).map_err(|_| KafkaError::new("request larger than 2 GiB"))?;
    buf[..4].copy_from_slice(&size.to_be_bytes());
    Ok(buf.to_vec())
}

/// The body of a response (the bytes after the size), checked against `correlation_id`.
pub fn response<R: Request>(
    data: Bytes,
    version: i16,
    correlation_id: i32,
) -> KafkaResult<R::Response> {
    let mut buf = data;
    let what = |e: anyhow::Error| {
        KafkaError::new(format!(
            "the broker's answer to request {} (v{version}) does not decode: {e:#}",
            R::KEY
        ))
    };
    let header =
        ResponseHeader::decode(&mut buf, R::Response::header_version(version)).map_err(what)?;
    if header.correlation_id != correlation_id {
        return Err(KafkaError::new(format!(
            "the broker answered request {} out of order (correlation id {}, expected {correlation_id})",
            R::KEY,
            header.correlation_id
        )));
    }
    R::Response::decode(&mut buf, version).map_err(what)
}

fn text(value: &str) -> StrBytes {
    StrBytes::from_string(value.to_owned())
}

/// ApiVersions v0.
pub fn api_versions() -> ApiVersionsRequest {
    ApiVersionsRequest::default()
}

/// The broker's ranges: `(api key, min, max)`; an error code if it refused.
pub fn api_ranges(response: &ApiVersionsResponse) -> Result<Vec<(i16, i16, i16)>, i16> {
    if response.error_code != 0 {
        return Err(response.error_code);
    }
    Ok(response
        .api_keys
        .iter()
        .map(|k| (k.api_key, k.min_version, k.max_version))
        .collect())
}

/// Metadata for one topic, never creating it.
pub fn metadata(topic: &str) -> MetadataRequest {
    MetadataRequest::default()
        .with_topics(Some(vec![
            metadata_request::MetadataRequestTopic::default().with_name(Some(text(topic).into())),
        ]))
        .with_allow_auto_topic_creation(false)
}

/// A topic's metadata: brokers, and per partition its leader and error code.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TopicMetadata {
    /// `(node id, host, port)` of every broker.
    pub brokers: Vec<(i32, String, i32)>,
    /// The topic's error code (0: none).
    pub error_code: i16,
    /// `(partition, leader, error code)`, sorted by partition.
    pub partitions: Vec<(i32, i32, i16)>,
}

/// The metadata of `topic` in a Metadata answer.
pub fn topic_metadata(response: &MetadataResponse, topic: &str) -> TopicMetadata {
    let brokers = response
        .brokers
        .iter()
        .map(|b| (b.node_id.0, b.host.to_string(), b.port))
        .collect();
    let mut out = TopicMetadata {
        brokers,
        error_code: 3, // UNKNOWN_TOPIC_OR_PARTITION unless the answer names it
        partitions: Vec::new(),
    };
    if let Some(t) = response
        .topics
        .iter()
        .find(|t| t.name.as_ref().is_some_and(|n| n.0.as_str() == topic))
    {
        out.error_code = t.error_code;
        out.partitions = t
            .partitions
            .iter()
            .map(|p| (p.partition_index, p.leader_id.0, p.error_code))
            .collect();
        out.partitions.sort_unstable();
    }
    out
}

/// ListOffsets of some partitions of one topic at `timestamp` (-2 earliest, -1 latest).
pub fn list_offsets(topic: &str, partitions: &[i32], timestamp: i64) -> ListOffsetsRequest {
    let parts = partitions
        .iter()
        .map(|&p| {
            list_offsets_request::ListOffsetsPartition::default()
                .with_partition_index(p)
                .with_timestamp(timestamp)
        })
        .collect();
    ListOffsetsRequest::default()
        .with_replica_id((-1).into())
        .with_topics(vec![
            list_offsets_request::ListOffsetsTopic::default()
                .with_name(text(topic).into())
                .with_partitions(parts),
        ])
}

/// `(partition, error code, offset)` of a ListOffsets answer for `topic`.
pub fn offsets(response: &ListOffsetsResponse, topic: &str) -> Vec<(i32, i16, i64)> {
    response
        .topics
        .iter()
        .filter(|t| t.name.0.as_str() == topic)
        .flat_map(|t| t.partitions.iter())
        .map(|p| (p.partition_index, p.error_code, p.offset))
        .collect()
}

/// Fetch (isolation READ_UNCOMMITTED: the replay decides) of one partition from `offset`.
pub fn fetch(
    topic: &str,
    partition: i32,
    offset: i64,
    max_bytes: i32,
    max_wait_ms: i32,
) -> FetchRequest {
    FetchRequest::default()
        .with_replica_id((-1).into())
        .with_max_wait_ms(max_wait_ms)
        .with_min_bytes(0)
        .with_max_bytes(max_bytes)
        .with_isolation_level(0)
        .with_topics(vec![
            fetch_request::FetchTopic::default()
                .with_topic(text(topic).into())
                .with_partitions(vec![
                    fetch_request::FetchPartition::default()
                        .with_partition(partition)
                        .with_fetch_offset(offset)
                        .with_partition_max_bytes(max_bytes),
                ]),
        ])
}

/// One partition of a Fetch answer.
#[derive(Debug, Clone, Default)]
pub struct FetchedPartition {
    /// Error code (top level or the partition's).
    pub error_code: i16,
    /// The high watermark.
    pub high_watermark: i64,
    /// The raw record batches.
    pub records: Bytes,
}

/// `topic[partition]` in a Fetch answer.
pub fn fetched(
    response: FetchResponse,
    topic: &str,
    partition: i32,
) -> KafkaResult<FetchedPartition> {
    if response.error_code != 0 {
        return Ok(FetchedPartition {
            error_code: response.error_code,
            ..FetchedPartition::default()
        });
    }
    let mut seen = Vec::new();
    for t in response.responses {
        if t.topic.0.as_str() != topic {
            seen.push(format!("{:?}/{}", t.topic.0.as_str(), t.topic_id));
            continue;
        }
        for p in t.partitions {
            seen.push(format!("{topic}[{}]", p.partition_index));
            if p.partition_index == partition {
                return Ok(FetchedPartition {
                    error_code: p.error_code,
                    high_watermark: p.high_watermark,
                    records: p.records.unwrap_or_default(),
                });
            }
        }
    }
    Err(KafkaError::new(format!(
        "{topic}[{partition}]: the Fetch answer does not name it (it names {seen:?})"
    )))
}

/// FindCoordinator for a group (`key_type` 0) or a transactional id (1).
pub fn find_coordinator(key: &str, key_type: i8, version: i16) -> FindCoordinatorRequest {
    let request = FindCoordinatorRequest::default().with_key_type(key_type);
    if version >= 4 {
        request.with_coordinator_keys(vec![text(key)])
    } else {
        request.with_key(text(key))
    }
}

/// `(error code, error message, node id, host, port)` of a FindCoordinator answer.
pub fn coordinator(response: &FindCoordinatorResponse) -> (i16, Option<String>, i32, String, i32) {
    match response.coordinators.first() {
        Some(c) => (
            c.error_code,
            c.error_message.as_ref().map(ToString::to_string),
            c.node_id.0,
            c.host.to_string(),
            c.port,
        ),
        None => (
            response.error_code,
            response.error_message.as_ref().map(ToString::to_string),
            response.node_id.0,
            response.host.to_string(),
            response.port,
        ),
    }
}

/// EndTxn: commit or abort the transaction `producer_id`/`producer_epoch` of `transactional_id`.
pub fn end_txn(
    transactional_id: &str,
    producer_id: i64,
    producer_epoch: i16,
    commit: bool,
) -> EndTxnRequest {
    EndTxnRequest::default()
        .with_transactional_id(text(transactional_id).into())
        .with_producer_id(producer_id.into())
        .with_producer_epoch(producer_epoch)
        .with_committed(commit)
}

/// The error code of an EndTxn answer.
pub fn end_txn_error(response: &EndTxnResponse) -> i16 {
    response.error_code
}

/// OffsetFetch of `group`'s committed offset on `topic[partition]` (single-group versions).
pub fn offset_fetch(group: &str, topic: &str, partition: i32) -> OffsetFetchRequest {
    OffsetFetchRequest::default()
        .with_group_id(text(group).into())
        .with_topics(Some(vec![
            offset_fetch_request::OffsetFetchRequestTopic::default()
                .with_name(text(topic).into())
                .with_partition_indexes(vec![partition]),
        ]))
}

/// `(error code, committed offset (-1: none), metadata)` of an OffsetFetch answer.
pub fn committed(
    response: &OffsetFetchResponse,
    topic: &str,
    partition: i32,
) -> (i16, i64, Option<String>) {
    if response.error_code != 0 {
        return (response.error_code, -1, None);
    }
    response
        .topics
        .iter()
        .filter(|t| t.name.0.as_str() == topic)
        .flat_map(|t| t.partitions.iter())
        .find(|p| p.partition_index == partition)
        .map_or((0, -1, None), |p| {
            (
                p.error_code,
                p.committed_offset,
                p.metadata.as_ref().map(ToString::to_string),
            )
        })
}

/// OffsetCommit of one offset outside any group generation (a group with no members), with
/// `retention_ms` where the version carries it (2-4; -1: the broker's retention).
pub fn offset_commit(
    group: &str,
    topic: &str,
    partition: i32,
    offset: i64,
    metadata: &str,
    retention_ms: i64,
) -> OffsetCommitRequest {
    OffsetCommitRequest::default()
        .with_group_id(text(group).into())
        .with_generation_id_or_member_epoch(-1)
        .with_member_id(StrBytes::from_static_str(""))
        .with_retention_time_ms(retention_ms)
        .with_topics(vec![
            offset_commit_request::OffsetCommitRequestTopic::default()
                .with_name(text(topic).into())
                .with_partitions(vec![
                    offset_commit_request::OffsetCommitRequestPartition::default()
                        .with_partition_index(partition)
                        .with_committed_offset(offset)
                        .with_committed_metadata(Some(text(metadata))),
                ]),
        ])
}

/// The error code of `topic[partition]` in an OffsetCommit answer.
pub fn commit_error(response: &OffsetCommitResponse, topic: &str, partition: i32) -> i16 {
    response
        .topics
        .iter()
        .filter(|t| t.name.0.as_str() == topic)
        .flat_map(|t| t.partitions.iter())
        .find(|p| p.partition_index == partition)
        .map_or(-1, |p| p.error_code)
}

/// SaslHandshake for `mechanism`.
pub fn sasl_handshake(mechanism: &str) -> SaslHandshakeRequest {
    SaslHandshakeRequest::default().with_mechanism(text(mechanism))
}

/// `(error code, mechanisms the broker enables)`.
pub fn handshake(response: &SaslHandshakeResponse) -> (i16, Vec<String>) {
    let mechanisms = response
        .mechanisms
        .iter()
        .map(ToString::to_string)
        .collect();
    (response.error_code, mechanisms)
}

/// SaslAuthenticate with the mechanism's next message.
pub fn sasl_authenticate(auth_bytes: &[u8]) -> SaslAuthenticateRequest {
    SaslAuthenticateRequest::default().with_auth_bytes(Bytes::copy_from_slice(auth_bytes))
}

/// `(error code, error message, the broker's next message, session lifetime in ms)`: the
/// lifetime (v1+, KIP-368; 0 in v0 or when the broker sets no limit) is how long the
/// connection may be used before it must authenticate again (`sasl::session_step`).
pub fn authenticated(response: &SaslAuthenticateResponse) -> (i16, Option<String>, Bytes, i64) {
    (
        response.error_code,
        response.error_message.as_ref().map(ToString::to_string),
        response.auth_bytes.clone(),
        response.session_lifetime_ms,
    )
}

#[cfg(test)]
mod tests;
