"""The broker capability probe agrees with behaviour observed directly, check by check."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from laminar.embedded import BrokerCapabilities, TansuBroker
from tests.fixtures import ExternalBroker


@pytest.fixture
def topic(kafka_broker: TansuBroker | ExternalBroker, topic_name: str) -> str:
    kafka_broker.create_topic(topic_name, partitions=1)
    return topic_name


def producer(bootstrap: str, transactional_id: str) -> Producer:
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id})
    p.init_transactions(15)
    return p


def read_committed_until(
    bootstrap: str, topic: str, last: bytes, timeout: float = 15
) -> list[bytes]:
    """Every value a read_committed consumer sees from offset 0 up to and including ``last``."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{uuid.uuid4().hex}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while last not in values and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                values.append(message.value())
    finally:
        consumer.close()
    assert last in values, f"{last!r} never became visible to read_committed"
    return values


def test_transactions_are_supported(broker_capabilities: BrokerCapabilities) -> None:
    # Every broker Laminar is tested against must at least commit transactions.
    assert broker_capabilities.transactions, broker_capabilities.reasons["transactions"]


def test_aborted_records_visibility_matches_probe(
    kafka_bootstrap: str,
    broker_capabilities: BrokerCapabilities,
    topic: str,
    unique_name: Callable[[str], str],
) -> None:
    p = producer(kafka_bootstrap, unique_name("txn"))
    p.begin_transaction()
    p.produce(topic, value=b"aborted", partition=0)
    p.flush(15)
    p.abort_transaction(15)
    p.begin_transaction()
    p.produce(topic, value=b"committed", partition=0)
    p.commit_transaction(15)

    seen = read_committed_until(kafka_bootstrap, topic, b"committed")

    assert (b"aborted" not in seen) == broker_capabilities.hides_aborted_records, seen


def test_open_transaction_visibility_matches_probe(
    kafka_bootstrap: str,
    broker_capabilities: BrokerCapabilities,
    topic: str,
    unique_name: Callable[[str], str],
) -> None:
    p = producer(kafka_bootstrap, unique_name("txn"))
    p.begin_transaction()
    p.produce(topic, value=b"before", partition=0)
    p.commit_transaction(15)
    p.begin_transaction()
    p.produce(topic, value=b"open", partition=0)
    p.flush(15)

    consumer = Consumer(
        {
            "bootstrap.servers": kafka_bootstrap,
            "group.id": unique_name("reader"),
            "isolation.level": "read_committed",
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    seen: list[bytes] = []
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        message = consumer.poll(0.2)
        if message is not None and message.error() is None:
            seen.append(message.value())
    consumer.close()
    p.abort_transaction(15)

    assert b"before" in seen
    assert (b"open" not in seen) == broker_capabilities.hides_open_transactions, seen


def test_offset_commit_and_metadata_match_probe(
    kafka_bootstrap: str,
    broker_capabilities: BrokerCapabilities,
    topic: str,
    unique_name: Callable[[str], str],
) -> None:
    group = unique_name("group")
    group_consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": group})
    p = producer(kafka_bootstrap, unique_name("txn"))
    p.begin_transaction()
    p.produce(topic, value=b"x", partition=0)
    p.send_offsets_to_transaction(
        [TopicPartition(topic, 0, 7, metadata="laminar:epoch=7")],
        group_consumer.consumer_group_metadata(),
        15,
    )
    p.commit_transaction(15)

    committed = group_consumer.committed([TopicPartition(topic, 0)], timeout=15)[0]
    group_consumer.close()

    assert (committed.offset == 7) == broker_capabilities.offset_commit
    if broker_capabilities.offset_commit:
        assert (committed.metadata == "laminar:epoch=7") == broker_capabilities.offset_metadata


def test_fencing_matches_probe(
    kafka_bootstrap: str,
    broker_capabilities: BrokerCapabilities,
    topic: str,
    unique_name: Callable[[str], str],
) -> None:
    txn_id = unique_name("txn")
    zombie = producer(kafka_bootstrap, txn_id)
    zombie.begin_transaction()
    zombie.produce(topic, value=b"zombie", partition=0)
    zombie.flush(15)
    successor = producer(kafka_bootstrap, txn_id)

    fenced = False
    committed = False
    try:
        zombie.commit_transaction(3)
        committed = True
    except KafkaException as e:
        error: KafkaError = e.args[0]
        fenced = error.fatal() or error.code() in (
            KafkaError._FENCED,
            KafkaError.PRODUCER_FENCED,
            KafkaError.INVALID_PRODUCER_EPOCH,
        )

    assert fenced == broker_capabilities.fencing
    # Whatever the broker answers, a zombie must never commit after its successor initialised.
    assert not committed
    successor.begin_transaction()
    successor.produce(topic, value=b"successor", partition=0)
    successor.commit_transaction(15)
    assert b"successor" in read_committed_until(kafka_bootstrap, topic, b"successor")
