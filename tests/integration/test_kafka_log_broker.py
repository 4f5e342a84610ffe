"""laminar.kafka.log against the real brokers: the control records it sees, and committed-only
records whatever the broker's read_committed does. Compatibility subset: every test runs on
Apache Kafka and on Tansu, whose read_committed shows aborted records — laminar.kafka.log is what
makes Laminar's own checks hold there."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import Producer

from laminar.embedded._process import free_port
from laminar.kafka.log import KafkaLogClient, KafkaLogError, read_committed, read_partition
from tests.fixtures import BrokerUnderTest, on_both_brokers
from tests.integration.kafka_helpers import consumer_values

pytestmark = on_both_brokers


@pytest.fixture
def kafka_broker(broker_under_test: BrokerUnderTest) -> BrokerUnderTest:
    """This module's broker: the broker under test (Apache Kafka, then Tansu)."""
    return broker_under_test


@pytest.fixture
def kafka_bootstrap(broker_under_test: BrokerUnderTest) -> str:
    return broker_under_test.bootstrap_servers


def producer(bootstrap: str, tid: str, **extra: Any) -> Producer:
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid, **extra})
    p.init_transactions(15)
    return p


def transaction(p: Producer, topic: str, values: list[bytes], *, commit: bool = True) -> None:
    p.begin_transaction()
    for value in values:
        p.produce(topic, value, partition=0, headers=[("h", value)])
    p.flush(15)
    if commit:
        p.commit_transaction(15)
    else:
        p.abort_transaction(15)


def test_control_records_sit_between_transactions(
    kafka_broker: Any, kafka_bootstrap: str, topic_name: str
) -> None:
    kafka_broker.create_topic(topic_name, partitions=1)
    p = producer(kafka_bootstrap, f"tid-{topic_name}")
    for n in range(3):
        transaction(p, topic_name, [f"t{n}-a".encode(), f"t{n}-b".encode()])
    log = read_partition(kafka_bootstrap, topic_name, 0)
    assert log.commit_markers == [2, 5, 8]
    assert [r.offset for r in log.committed] == [0, 1, 3, 4, 6, 7]
    assert [r.value for r in log.committed][:2] == [b"t0-a", b"t0-b"]
    assert log.committed[0].header("h") == b"t0-a"
    assert all(r.transactional and r.producer_id >= 0 for r in log.committed)
    assert log.end_offset == 9


def test_aborted_records_are_never_committed_records(
    kafka_broker: BrokerUnderTest, kafka_bootstrap: str, topic_name: str
) -> None:
    kafka_broker.create_topic(topic_name, partitions=1)
    p = producer(kafka_bootstrap, f"tid-{topic_name}")
    transaction(p, topic_name, [b"kept-1"])
    transaction(p, topic_name, [b"aborted-1", b"aborted-2"], commit=False)
    transaction(p, topic_name, [b"kept-2"])
    assert [r.value for r in read_committed(kafka_bootstrap, topic_name)] == [b"kept-1", b"kept-2"]
    log = read_partition(kafka_bootstrap, topic_name, 0)
    assert [r.value for r in log.aborted] == [b"aborted-1", b"aborted-2"]
    # Where the broker's read_committed does not filter aborted records (Tansu), laminar.kafka.log
    # is the only correct reader; where it does, both agree.
    seen = consumer_values(kafka_bootstrap, topic_name, 1, expect=4, timeout=3.0)
    if kafka_broker.capabilities.hides_aborted_records:
        assert seen == [b"kept-1", b"kept-2"]
    else:
        assert b"aborted-1" in seen


def test_gzip_batches_and_plain_records(
    kafka_broker: Any, kafka_bootstrap: str, topic_name: str
) -> None:
    kafka_broker.create_topic(topic_name, partitions=1)
    p = producer(kafka_bootstrap, f"tid-{topic_name}", **{"compression.type": "gzip"})
    transaction(p, topic_name, [b"x" * 1000, b"y" * 1000])
    plain = Producer({"bootstrap.servers": kafka_bootstrap})
    plain.produce(topic_name, b"not transactional", partition=0)
    plain.flush(15)
    records = read_committed(kafka_bootstrap, topic_name)
    assert [r.value for r in records] == [b"x" * 1000, b"y" * 1000, b"not transactional"]
    assert not records[2].transactional


def test_open_transactions_are_reported_as_open(
    kafka_broker: Any, kafka_bootstrap: str, topic_name: str
) -> None:
    kafka_broker.create_topic(topic_name, partitions=1)
    p = producer(kafka_bootstrap, f"tid-{topic_name}")
    p.begin_transaction()
    p.produce(topic_name, b"pending", partition=0)
    p.flush(15)
    log = read_partition(kafka_bootstrap, topic_name, 0)
    assert [r.value for r in log.open] == [b"pending"]
    assert log.committed == []
    p.abort_transaction(15)


def test_a_missing_topic_and_an_unreachable_broker_are_clear_errors(
    kafka_bootstrap: str, topic_name: str
) -> None:
    with pytest.raises(KafkaLogError, match=f"topic '{topic_name}' does not exist"):
        read_committed(kafka_bootstrap, topic_name)
    with pytest.raises(KafkaLogError, match="does not exist"):  # and it was not auto-created
        read_committed(kafka_bootstrap, topic_name)
    address = f"127.0.0.1:{free_port('127.0.0.1')}"
    with (
        pytest.raises(KafkaLogError, match=f"bootstrap.servers={address}"),
        KafkaLogClient(address, timeout=2) as client,
    ):
        client.partition_leaders("t")
