"""The one classification and mapping of librdkafka errors to laminar.errors (KIP-691), on
constructed errors."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from laminar.errors import (
    AbortableError,
    AuthorizationError,
    ConfigError,
    FatalError,
    FencedError,
    InDoubtError,
    RecordTooLargeError,
)
from laminar.kafka._calls import StuckCallError
from laminar.kafka._errors import (
    ErrorContext,
    Failure,
    classify,
    classify_silence,
    map_kafka_error,
)

CTX = ErrorContext("orders-sink", "b1:9092", "orders", epoch=7, secrets=("hunter2-secret",))


def err(code: int, text: str = "", **flags: bool) -> KafkaException:
    return KafkaException(KafkaError(code, text or None, **flags))


@pytest.mark.parametrize(
    "code", [KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH]
)
@pytest.mark.parametrize("fatal", [True, False])
def test_fenced_codes_are_fenced_whatever_the_flags(code: int, fatal: bool) -> None:
    # Tansu reports _FENCED from send_offsets as abortable, Kafka as fatal: both mean fenced.
    mapped = map_kafka_error(
        err(code, fatal=fatal, txn_requires_abort=not fatal), "commit_transaction", CTX
    )
    assert type(mapped) is FencedError
    assert "orders-sink" in str(mapped)
    assert mapped.epoch == 7


@pytest.mark.parametrize(
    ("code", "needle"),
    [
        (KafkaError._AUTHENTICATION, "sasl.password"),
        (KafkaError.SASL_AUTHENTICATION_FAILED, "sasl.username"),
        (KafkaError.TOPIC_AUTHORIZATION_FAILED, "WRITE on topic 'orders'"),
        (KafkaError.GROUP_AUTHORIZATION_FAILED, "laminar.orders-sink"),
        (KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "transactional id 'orders-sink'"),
        (KafkaError.CLUSTER_AUTHORIZATION_FAILED, "IDEMPOTENT_WRITE"),
    ],
)
def test_authentication_and_authorization_name_what_to_fix(code: int, needle: str) -> None:
    mapped = map_kafka_error(err(code, txn_requires_abort=True), "produce", CTX)
    assert type(mapped) is AuthorizationError
    assert mapped.fatal
    assert needle in str(mapped)


def test_other_fatal_errors_are_fatal() -> None:
    mapped = map_kafka_error(
        err(KafkaError.INVALID_TXN_STATE, fatal=True), "commit_transaction", CTX
    )
    assert type(mapped) is FatalError


@pytest.mark.parametrize(
    "error",
    [
        err(KafkaError._TIMED_OUT, retriable=True),
        err(KafkaError.COORDINATOR_NOT_AVAILABLE, retriable=True),
        err(KafkaError._TRANSPORT),
        err(KafkaError._FAIL),
    ],
)
def test_a_commit_without_a_definite_outcome_is_in_doubt(error: KafkaException) -> None:
    mapped = map_kafka_error(error, "commit_transaction", CTX)
    assert type(mapped) is InDoubtError
    assert "never aborted blindly" in str(mapped)


def test_a_commit_that_requires_abort_is_abortable_not_in_doubt() -> None:
    mapped = map_kafka_error(
        err(KafkaError._MSG_TIMED_OUT, txn_requires_abort=True), "commit_transaction", CTX
    )
    assert type(mapped) is AbortableError
    assert mapped.requires_abort


@pytest.mark.parametrize(
    "operation", ["produce", "send_offsets_to_transaction", "flush", "delivery"]
)
def test_abortable_and_retriable_errors_during_the_epoch_abort_it(operation: str) -> None:
    assert (
        type(
            map_kafka_error(
                err(KafkaError.NOT_ENOUGH_REPLICAS, txn_requires_abort=True), operation, CTX
            )
        )
        is AbortableError
    )
    assert (
        type(map_kafka_error(err(KafkaError.REQUEST_TIMED_OUT, retriable=True), operation, CTX))
        is AbortableError
    )


def test_record_too_large_names_the_settings() -> None:
    mapped = map_kafka_error(
        err(KafkaError.MSG_SIZE_TOO_LARGE, txn_requires_abort=True), "delivery", CTX, hint="key 'k'"
    )
    assert type(mapped) is RecordTooLargeError
    assert isinstance(mapped, AbortableError)
    assert mapped.retriable is False
    assert "message.max.bytes" in str(mapped)
    assert "max.message.bytes" in str(mapped)
    assert "key 'k'" in str(mapped)


def test_unknown_topic_says_to_create_it() -> None:
    mapped = map_kafka_error(err(KafkaError.UNKNOWN_TOPIC_OR_PART), "delivery", CTX)
    assert type(mapped) is AbortableError
    assert "'orders'" in str(mapped)
    assert "create it" in str(mapped)


def test_unreachable_at_start_up_names_bootstrap_servers() -> None:
    mapped = map_kafka_error(err(KafkaError._TRANSPORT), "init_transactions", CTX)
    assert type(mapped) is FatalError
    assert "bootstrap.servers=b1:9092" in str(mapped)


def test_invalid_configuration_is_a_config_error() -> None:
    mapped = map_kafka_error(
        err(KafkaError._INVALID_ARG, 'No such configuration property: "lingerr.ms"'),
        "init_transactions",
        CTX,
    )
    assert type(mapped) is ConfigError
    assert "lingerr.ms" in str(mapped)


def test_secrets_in_client_text_are_scrubbed() -> None:
    mapped = map_kafka_error(
        err(KafkaError._AUTHENTICATION, "bad password hunter2-secret"), "init_transactions", CTX
    )
    assert "hunter2-secret" not in str(mapped)
    assert "***" in str(mapped)


def test_a_non_kafka_exception_is_fatal_and_scrubbed() -> None:
    mapped = map_kafka_error(RuntimeError("boom hunter2-secret"), "produce", CTX)
    assert type(mapped) is FatalError
    assert "hunter2-secret" not in str(mapped)


@pytest.mark.parametrize("code", [KafkaError._TRANSPORT, KafkaError._TIMED_OUT])
def test_a_time_out_at_start_up_after_the_cluster_answered_is_retriable(code: int) -> None:
    """A broker down or a coordinator moving (issue: production topology): the cluster answered
    the metadata request, then init_transactions timed out — a failover, not an address to fix."""
    mapped = map_kafka_error(err(code, retriable=True), "init_transactions", CTX, reached=True)
    assert type(mapped) is AbortableError
    assert mapped.retriable
    assert "failover" in str(mapped)


def test_a_routed_records_refusal_names_its_own_topic_not_the_sinks() -> None:
    """A row routed to another topic (Spark's shape: a ``topic`` column) that the principal may
    not write: the delivery report's topic is the one to grant, so the error names it."""
    from types import SimpleNamespace

    from laminar import KafkaSink
    from laminar.kafka._runtime import _Runtime

    rt = _Runtime()
    refused = KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED, "Topic authorization failed")
    message = SimpleNamespace(value=lambda: b"v" * 10, key=lambda: b"k", topic=lambda: "audit")
    rt.on_delivery(refused, message)
    assert rt.delivery_errors == [(refused, b"k", 10, "audit")]
    sink = KafkaSink("broker:9092", "orders", "orders-sink")
    error, _key, _size, topic = rt.delivery_errors[0]
    mapped = sink._parts().error(KafkaException(error), "delivery", 3, rt, topic=topic)
    assert type(mapped) is AuthorizationError
    assert "WRITE on topic 'audit'" in str(mapped)
    assert "'orders'" not in str(mapped)
    plain = sink._parts().error(KafkaException(error), "delivery", 3, rt)
    assert "WRITE on topic 'orders'" in str(plain)


@pytest.mark.parametrize("operation", ["produce", "commit_transaction", "init_transactions"])
@pytest.mark.parametrize(
    "error",
    [
        err(KafkaError._FENCED, fatal=True),
        err(KafkaError.TOPIC_AUTHORIZATION_FAILED),
        err(KafkaError._INVALID_ARG),
        err(KafkaError._TIMED_OUT, retriable=True),
        err(KafkaError.COORDINATOR_NOT_AVAILABLE, retriable=True),
        err(KafkaError.UNKNOWN, txn_requires_abort=True),
        err(KafkaError.MSG_SIZE_TOO_LARGE),
        RuntimeError("boom"),
    ],
)
@pytest.mark.parametrize("reached", [False, True])
def test_the_kind_classified_is_the_kind_of_the_error_raised(
    error: BaseException, operation: str, reached: bool
) -> None:
    failure = classify(error, operation, reached=reached)
    mapped = map_kafka_error(error, operation, CTX, reached=reached)
    assert failure.kind == mapped.failure_kind  # the kind the engine hands the core


@pytest.mark.parametrize(
    ("flags", "retry"),
    [
        ({"retriable": True}, True),
        ({"retriable": True, "fatal": True}, False),
        ({"retriable": True, "txn_requires_abort": True}, False),
        ({}, False),
    ],
)
def test_a_transactional_call_retries_only_retriable_errors_that_need_no_abort(
    flags: dict[str, bool], retry: bool
) -> None:
    error = err(KafkaError.COORDINATOR_LOAD_IN_PROGRESS, **flags)
    assert classify(error, "commit_transaction").retry is retry
    assert classify(RuntimeError("boom"), "commit_transaction").retry is False


def test_a_call_that_did_not_return_leaves_only_a_commit_in_doubt() -> None:
    assert classify(StuckCallError("x"), "commit_transaction") == Failure("in_doubt", "stuck")
    assert classify(StuckCallError("x"), "abort_transaction") == Failure("abortable", "stuck")
    assert classify(StuckCallError("x"), "send_offsets_to_transaction").kind == "abortable"


def test_a_silent_cluster_is_classified_by_what_librdkafka_saw() -> None:
    auth = KafkaError(KafkaError.SASL_AUTHENTICATION_FAILED)
    tls = KafkaError(KafkaError._SSL)
    assert classify_silence([auth], stalled=True, connected=True).cause == "unauthorized"
    assert classify_silence([], stalled=True, connected=False) == Failure("abortable", "stalled")
    assert classify_silence([tls], stalled=True, connected=True) == Failure("abortable", "hung")
    assert classify_silence([tls], stalled=True, connected=False) == Failure("fatal", "unreachable")
