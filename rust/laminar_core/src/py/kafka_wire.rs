//! Bindings of `kafka::wire`: one `encode_*` (request frame) and one `decode_*` (answer) per
//! request `laminar.kafka.log` sends. Python moves the frames; nothing here does I/O.

use kafka_protocol::messages::{
    ApiVersionsRequest, EndTxnRequest, FetchRequest, FindCoordinatorRequest, ListOffsetsRequest,
    MetadataRequest, OffsetCommitRequest, OffsetFetchRequest, SaslAuthenticateRequest,
    SaslHandshakeRequest,
};
use kafka_protocol::protocol::Request;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;
use pyo3::types::PyBytes;

use super::kafka::{shared, to_py_err};
use crate::kafka::{sasl, wire};

fn encode<'py, R: Request>(
    py: Python<'py>,
    request: &R,
    version: i16,
    correlation_id: i32,
    client_id: &str,
) -> PyResult<Bound<'py, PyBytes>> {
    let frame =
        wire::frame(request, version, correlation_id, client_id).map_err(|e| to_py_err(py, e))?;
    Ok(PyBytes::new(py, &frame))
}

fn decode<R: Request>(
    py: Python<'_>,
    data: PyBackedBytes,
    version: i16,
    correlation_id: i32,
) -> PyResult<R::Response> {
    wire::response::<R>(shared(data), version, correlation_id).map_err(|e| to_py_err(py, e))
}

/// The version of API `api_key` to use with a broker offering `[broker_min, broker_max]`
/// (`None`: none in common); without a range, the version used before negotiation.
#[pyfunction]
#[pyo3(signature = (api_key, broker_min=None, broker_max=None))]
fn kafka_api_version(
    api_key: i16,
    broker_min: Option<i16>,
    broker_max: Option<i16>,
) -> Option<i16> {
    match (broker_min, broker_max) {
        (Some(min), Some(max)) => wire::choose_version(api_key, min, max),
        _ => wire::default_version(api_key),
    }
}

/// ApiVersions (v0).
#[pyfunction]
fn encode_api_versions<'py>(
    py: Python<'py>,
    correlation_id: i32,
    client_id: &str,
) -> PyResult<Bound<'py, PyBytes>> {
    encode(py, &wire::api_versions(), 0, correlation_id, client_id)
}

/// `(error code, [(api key, min, max), ...])`.
#[pyfunction]
#[allow(clippy::type_complexity)]
fn decode_api_versions(
    py: Python<'_>,
    data: PyBackedBytes,
    correlation_id: i32,
) -> PyResult<(i16, Vec<(i16, i16, i16)>)> {
    let answer = decode::<ApiVersionsRequest>(py, data, 0, correlation_id)?;
    Ok(match wire::api_ranges(&answer) {
        Ok(ranges) => (0, ranges),
        Err(code) => (code, Vec::new()),
    })
}

/// Metadata of one topic (never creating it).
#[pyfunction]
fn encode_metadata<'py>(
    py: Python<'py>,
    topic: &str,
    version: i16,
    correlation_id: i32,
    client_id: &str,
) -> PyResult<Bound<'py, PyBytes>> {
    encode(
        py,
        &wire::metadata(topic),
        version,
        correlation_id,
        client_id,
    )
}

/// `(brokers [(node id, host, port)], topic error code, partitions [(partition, leader, error
/// code)])`.
#[pyfunction]
#[allow(clippy::type_complexity)]
fn decode_metadata(
    py: Python<'_>,
    data: PyBackedBytes,
    version: i16,
    correlation_id: i32,
    topic: &str,
) -> PyResult<(Vec<(i32, String, i32)>, i16, Vec<(i32, i32, i16)>)> {
    let answer = decode::<MetadataRequest>(py, data, version, correlation_id)?;
    let found = wire::topic_metadata(&answer, topic);
    Ok((found.brokers, found.error_code, found.partitions))
}

/// ListOffsets of some partitions at `timestamp` (-2 earliest, -1 latest).
#[pyfunction]
fn encode_list_offsets<'py>(
    py: Python<'py>,
    topic: &str,
    partitions: Vec<i32>,
    timestamp: i64,
    version: i16,
    correlation_id: i32,
    client_id: &str,
) -> PyResult<Bound<'py, PyBytes>> {
    encode(
        py,
        &wire::list_offsets(topic, &partitions, timestamp),
        version,
        correlation_id,
        client_id,
    )
}

/// `[(partition, error code, offset)]`.
#[pyfunction]
fn decode_list_offsets(
    py: Python<'_>,
    data: PyBackedBytes,
    version: i16,
    correlation_id: i32,
    topic: &str,
) -> PyResult<Vec<(i32, i16, i64)>> {
    let answer = decode::<ListOffsetsRequest>(py, data, version, correlation_id)?;
    Ok(wire::offsets(&answer, topic))
}

/// Fetch (READ_UNCOMMITTED) of one partition from `offset`.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn encode_fetch<'py>(
    py: Python<'py>,
    topic: &str,
    partition: i32,
    offset: i64,
    max_bytes: i32,
    max_wait_ms: i32,
    version: i16,
    correlation_id: i32,
    client_id: &str,
) -> PyResult<Bound<'py, PyBytes>> {
    let request = wire::fetch(topic, partition, offset, max_bytes, max_wait_ms);
    encode(py, &request, version, correlation_id, client_id)
}

/// `(error code, high watermark, raw record batches)` of one partition of a Fetch answer.
#[pyfunction]
fn decode_fetch<'py>(
    py: Python<'py>,
    data: PyBackedBytes,
    version: i16,
    correlation_id: i32,
    topic: &str,
    partition: i32,
) -> PyResult<(i16, i64, Bound<'py, PyBytes>)> {
    let answer = decode::<FetchRequest>(py, data, version, correlation_id)?;
    let part = wire::fetched(answer, topic, partition).map_err(|e| to_py_err(py, e))?;
    Ok((
        part.error_code,
        part.high_watermark,
        PyBytes::new(py, &part.records),
    ))
}

/// FindCoordinator of a group (`key_type=0`) or a transactional id (1).
#[pyfunction]
fn encode_find_coordinator<'py>(
    py: Python<'py>,
    key: &str,
    key_type: i8,
    version: i16,
    correlation_id: i32,
    client_id: &str,
) -> PyResult<Bound<'py, PyBytes>> {
    encode(
        py,
        &wire::find_coordinator(key, key_type, version),
        version,
        correlation_id,
        client_id,
    )
}

/// `(error code, error message, node id, host, port)`.
#[pyfunction]
fn decode_find_coordinator(
    py: Python<'_>,
    data: PyBackedBytes,
    version: i16,
    correlation_id: i32,
) -> PyResult<(i16, Option<String>, i32, String, i32)> {
    let answer = decode::<FindCoordinatorRequest>(py, data, version, correlation_id)?;
    Ok(wire::coordinator(&answer))
}

/// EndTxn (commit or abort) of a producer's open transaction.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn encode_end_txn<'py>(
    py: Python<'py>,
    transactional_id: &str,
    producer_id: i64,
    producer_epoch: i16,
    commit: bool,
    version: i16,
    correlation_id: i32,
    client_id: &str,
) -> PyResult<Bound<'py, PyBytes>> {
    let request = wire::end_txn(transactional_id, producer_id, producer_epoch, commit);
    encode(py, &request, version, correlation_id, client_id)
}

/// The error code.
#[pyfunction]
fn decode_end_txn(
    py: Python<'_>,
    data: PyBackedBytes,
    version: i16,
    correlation_id: i32,
) -> PyResult<i16> {
    Ok(wire::end_txn_error(&decode::<EndTxnRequest>(
        py,
        data,
        version,
        correlation_id,
    )?))
}

/// OffsetFetch of a group's committed offset on one partition.
#[pyfunction]
fn encode_offset_fetch<'py>(
    py: Python<'py>,
    group: &str,
    topic: &str,
    partition: i32,
    version: i16,
    correlation_id: i32,
    client_id: &str,
) -> PyResult<Bound<'py, PyBytes>> {
    encode(
        py,
        &wire::offset_fetch(group, topic, partition),
        version,
        correlation_id,
        client_id,
    )
}

/// `(error code, committed offset (-1: none), metadata)`.
#[pyfunction]
fn decode_offset_fetch(
    py: Python<'_>,
    data: PyBackedBytes,
    version: i16,
    correlation_id: i32,
    topic: &str,
    partition: i32,
) -> PyResult<(i16, i64, Option<String>)> {
    let answer = decode::<OffsetFetchRequest>(py, data, version, correlation_id)?;
    Ok(wire::committed(&answer, topic, partition))
}

/// OffsetCommit of one offset by a group without members (`retention_ms`: versions 2-4).
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn encode_offset_commit<'py>(
    py: Python<'py>,
    group: &str,
    topic: &str,
    partition: i32,
    offset: i64,
    metadata: &str,
    retention_ms: i64,
    version: i16,
    correlation_id: i32,
    client_id: &str,
) -> PyResult<Bound<'py, PyBytes>> {
    let request = wire::offset_commit(group, topic, partition, offset, metadata, retention_ms);
    encode(py, &request, version, correlation_id, client_id)
}

/// The partition's error code (-1 if the answer does not name it).
#[pyfunction]
fn decode_offset_commit(
    py: Python<'_>,
    data: PyBackedBytes,
    version: i16,
    correlation_id: i32,
    topic: &str,
    partition: i32,
) -> PyResult<i16> {
    let answer = decode::<OffsetCommitRequest>(py, data, version, correlation_id)?;
    Ok(wire::commit_error(&answer, topic, partition))
}

/// SaslHandshake.
#[pyfunction]
fn encode_sasl_handshake<'py>(
    py: Python<'py>,
    mechanism: &str,
    version: i16,
    correlation_id: i32,
    client_id: &str,
) -> PyResult<Bound<'py, PyBytes>> {
    encode(
        py,
        &wire::sasl_handshake(mechanism),
        version,
        correlation_id,
        client_id,
    )
}

/// `(error code, enabled mechanisms)`.
#[pyfunction]
fn decode_sasl_handshake(
    py: Python<'_>,
    data: PyBackedBytes,
    version: i16,
    correlation_id: i32,
) -> PyResult<(i16, Vec<String>)> {
    Ok(wire::handshake(&decode::<SaslHandshakeRequest>(
        py,
        data,
        version,
        correlation_id,
    )?))
}

/// SaslAuthenticate with the mechanism's next message.
#[pyfunction]
fn encode_sasl_authenticate<'py>(
    py: Python<'py>,
    auth_bytes: &[u8],
    version: i16,
    correlation_id: i32,
    client_id: &str,
) -> PyResult<Bound<'py, PyBytes>> {
    encode(
        py,
        &wire::sasl_authenticate(auth_bytes),
        version,
        correlation_id,
        client_id,
    )
}

/// `(error code, error message, the broker's next message, session lifetime in ms)`.
#[pyfunction]
fn decode_sasl_authenticate<'py>(
    py: Python<'py>,
    data: PyBackedBytes,
    version: i16,
    correlation_id: i32,
) -> PyResult<(i16, Option<String>, Bound<'py, PyBytes>, i64)> {
    let answer = decode::<SaslAuthenticateRequest>(py, data, version, correlation_id)?;
    let (code, message, bytes, lifetime) = wire::authenticated(&answer);
    Ok((code, message, PyBytes::new(py, &bytes), lifetime))
}

/// The OAUTHBEARER initial client response for `token` and the SASL `extensions`.
#[pyfunction]
fn oauthbearer_initial_response<'py>(
    py: Python<'py>,
    token: &str,
    extensions: Vec<(String, String)>,
) -> PyResult<Bound<'py, PyBytes>> {
    let bytes = sasl::oauthbearer_initial_response(token, &extensions)
        .map_err(|e| PyValueError::new_err(e.0))?;
    Ok(PyBytes::new(py, &bytes))
}

/// The broker's answer to the OAUTHBEARER initial response: None when it accepted the token,
/// else the error challenge's status (the client then sends `OAUTHBEARER_FAILURE_ACK`).
#[pyfunction]
fn oauthbearer_refusal(answer: &[u8]) -> Option<String> {
    match sasl::oauthbearer_answer(answer) {
        sasl::OAuthAnswer::Accepted => None,
        sasl::OAuthAnswer::Refused { status } => Some(status),
    }
}

/// Whether a token obtained at `obtained_ms` that expires at `expiry_ms` is due for a refresh.
#[pyfunction]
fn oauth_token_refresh_due(now_ms: i64, obtained_ms: i64, expiry_ms: i64) -> bool {
    sasl::token_refresh_due(now_ms, obtained_ms, expiry_ms)
}

/// What a connection must do before its next request: `"send"`, `"reauthenticate"` or
/// `"reconnect"` (KIP-368's session lifetime; 0: no limit).
#[pyfunction]
fn sasl_session_step(now_ms: i64, authenticated_ms: i64, session_lifetime_ms: i64) -> &'static str {
    match sasl::session_step(now_ms, authenticated_ms, session_lifetime_ms) {
        sasl::SessionStep::Send => "send",
        sasl::SessionStep::Reauthenticate => "reauthenticate",
        sasl::SessionStep::Reconnect => "reconnect",
    }
}

/// Registers the wire functions.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(kafka_api_version, m)?)?;
    m.add_function(wrap_pyfunction!(encode_api_versions, m)?)?;
    m.add_function(wrap_pyfunction!(decode_api_versions, m)?)?;
    m.add_function(wrap_pyfunction!(encode_metadata, m)?)?;
    m.add_function(wrap_pyfunction!(decode_metadata, m)?)?;
    m.add_function(wrap_pyfunction!(encode_list_offsets, m)?)?;
    m.add_function(wrap_pyfunction!(decode_list_offsets, m)?)?;
    m.add_function(wrap_pyfunction!(encode_fetch, m)?)?;
    m.add_function(wrap_pyfunction!(decode_fetch, m)?)?;
    m.add_function(wrap_pyfunction!(encode_find_coordinator, m)?)?;
    m.add_function(wrap_pyfunction!(decode_find_coordinator, m)?)?;
    m.add_function(wrap_pyfunction!(encode_end_txn, m)?)?;
    m.add_function(wrap_pyfunction!(decode_end_txn, m)?)?;
    m.add_function(wrap_pyfunction!(encode_offset_fetch, m)?)?;
    m.add_function(wrap_pyfunction!(decode_offset_fetch, m)?)?;
    m.add_function(wrap_pyfunction!(encode_offset_commit, m)?)?;
    m.add_function(wrap_pyfunction!(decode_offset_commit, m)?)?;
    m.add_function(wrap_pyfunction!(encode_sasl_handshake, m)?)?;
    m.add_function(wrap_pyfunction!(decode_sasl_handshake, m)?)?;
    m.add_function(wrap_pyfunction!(encode_sasl_authenticate, m)?)?;
    m.add_function(wrap_pyfunction!(decode_sasl_authenticate, m)?)?;
    m.add_function(wrap_pyfunction!(oauthbearer_initial_response, m)?)?;
    m.add_function(wrap_pyfunction!(oauthbearer_refusal, m)?)?;
    m.add_function(wrap_pyfunction!(oauth_token_refresh_due, m)?)?;
    m.add_function(wrap_pyfunction!(sasl_session_step, m)?)?;
    m.add(
        "OAUTHBEARER_FAILURE_ACK",
        PyBytes::new(m.py(), sasl::OAUTHBEARER_FAILURE_ACK),
    )?;
    Ok(())
}
