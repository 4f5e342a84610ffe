"""The broker capability probe agrees with behaviour observed directly, check by check, on both
brokers of the suite: Apache Kafka passes every check; Tansu fails the ones README lists."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from laminar.embedded import BrokerCapabilities, KafkaBroker, TansuBroker
from laminar.embedded.probe import PROBE_TRANSACTION_TIMEOUT_MS, TRANSACTION_TIMEOUT_WAIT_S
from tests.fixtures import BrokerUnderTest, on_both_brokers

pytestmark = on_both_brokers


@pytest.fixture
def topic(broker_under_test: BrokerUnderTest, topic_name: str) -> str:
    broker_under_test.create_topic(topic_name, partitions=1)
    return topic_name


@pytest.fixture
def bootstrap(broker_under_test: BrokerUnderTest) -> str:
    return broker_under_test.bootstrap_servers


@pytest.fixture
def capabilities(broker_under_test: BrokerUnderTest) -> BrokerCapabilities:
    return broker_under_test.capabilities


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


def test_transactions_are_supported(capabilities: BrokerCapabilities) -> None:
    # Every broker Laminar is tested against must at least commit transactions.
    assert capabilities.transactions, capabilities.reasons["transactions"]


def test_each_broker_does_what_readme_says(broker_under_test: BrokerUnderTest) -> None:
    """README's compatibility table: Apache Kafka passes every check, Tansu 0.6.0 lacks these."""
    capabilities = broker_under_test.capabilities
    if isinstance(broker_under_test.server, TansuBroker):
        expected = ("fencing", "hides_aborted_records", "offset_metadata", "transaction_timeout")
        assert capabilities.missing() == expected, capabilities.summary()
    elif isinstance(broker_under_test.server, KafkaBroker):
        assert capabilities.full_exactly_once, capabilities.summary()
    else:
        pytest.skip("LAMINAR_KAFKA_BOOTSTRAP is an external cluster: no expectation")


def test_aborted_records_visibility_matches_probe(
    bootstrap: str,
    capabilities: BrokerCapabilities,
    topic: str,
    unique_name: Callable[[str], str],
) -> None:
    p = producer(bootstrap, unique_name("txn"))
    p.begin_transaction()
    p.produce(topic, value=b"aborted", partition=0)
    p.flush(15)
    p.abort_transaction(15)
    p.begin_transaction()
    p.produce(topic, value=b"committed", partition=0)
    p.commit_transaction(15)

    seen = read_committed_until(bootstrap, topic, b"committed")

    assert (b"aborted" not in seen) == capabilities.hides_aborted_records, seen


def test_open_transaction_visibility_matches_probe(
    bootstrap: str,
    capabilities: BrokerCapabilities,
    topic: str,
    unique_name: Callable[[str], str],
) -> None:
    p = producer(bootstrap, unique_name("txn"))
    p.begin_transaction()
    p.produce(topic, value=b"before", partition=0)
    p.commit_transaction(15)
    p.begin_transaction()
    p.produce(topic, value=b"open", partition=0)
    p.flush(15)

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
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
    assert (b"open" not in seen) == capabilities.hides_open_transactions, seen


def test_offset_commit_and_metadata_match_probe(
    bootstrap: str,
    capabilities: BrokerCapabilities,
    topic: str,
    unique_name: Callable[[str], str],
) -> None:
    group = unique_name("group")
    group_consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    p = producer(bootstrap, unique_name("txn"))
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

    assert (committed.offset == 7) == capabilities.offset_commit
    if capabilities.offset_commit:
        assert (committed.metadata == "laminar:epoch=7") == capabilities.offset_metadata


def test_fencing_matches_probe(
    bootstrap: str,
    capabilities: BrokerCapabilities,
    topic: str,
    unique_name: Callable[[str], str],
) -> None:
    txn_id = unique_name("txn")
    zombie = producer(bootstrap, txn_id)
    zombie.begin_transaction()
    zombie.produce(topic, value=b"zombie", partition=0)
    zombie.flush(15)
    successor = producer(bootstrap, txn_id)

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

    assert fenced == capabilities.fencing
    # Whatever the broker answers, a zombie must never commit after its successor initialised.
    assert not committed
    successor.begin_transaction()
    successor.produce(topic, value=b"successor", partition=0)
    successor.commit_transaction(15)
    assert b"successor" in read_committed_until(bootstrap, topic, b"successor")


def test_transaction_timeout_matches_probe(
    bootstrap: str,
    capabilities: BrokerCapabilities,
    topic: str,
    unique_name: Callable[[str], str],
) -> None:
    """A transaction left open past its producer's transaction.timeout.ms: Apache Kafka aborts
    it (read_committed gets past it; the writer's late commit fails as fenced, the broker having
    bumped its producer epoch); Tansu keeps it open."""
    expiring = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": unique_name("txn"),
            "transaction.timeout.ms": PROBE_TRANSACTION_TIMEOUT_MS,
        }
    )
    expiring.init_transactions(15)
    expiring.begin_transaction()
    expiring.produce(topic, value=b"expiring", partition=0)
    expiring.flush(15)
    other = producer(bootstrap, unique_name("txn"))
    other.begin_transaction()
    other.produce(topic, value=b"later", partition=0)
    other.commit_transaction(15)

    if capabilities.transaction_timeout:
        seen = read_committed_until(bootstrap, topic, b"later", TRANSACTION_TIMEOUT_WAIT_S)
        assert b"expiring" not in seen
        with pytest.raises(KafkaException) as raised:
            expiring.commit_transaction(5)
        error: KafkaError = raised.value.args[0]
        assert error.code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED), error
    else:
        with pytest.raises(AssertionError, match="never became visible"):
            read_committed_until(bootstrap, topic, b"later", TRANSACTION_TIMEOUT_WAIT_S)
        expiring.abort_transaction(15)
