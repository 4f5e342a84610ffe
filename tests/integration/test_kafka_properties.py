"""Kafka properties Laminar claims, proven on the broker users run (Apache Kafka), where Tansu
cannot show them (docs/kafka.md, "Broker behaviour"):

- a zombie writer is told it is fenced — `FencedError`, not a time-out — at its next
  transactional call, wherever in the epoch the successor took over;
- the epoch marker's committed offset and metadata round-trip, survive a broker crash, and are
  what start-up reads: the header witness is never needed on this broker.

The read_committed property after every crash point is in test_kafka_crash.py and
test_atomic_crash.py; the broker's transaction timeout in test_kafka_transaction_timeout.py.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

import laminar
from laminar import FencedError, InDoubtError
from laminar.embedded import KafkaBroker
from tests.integration.kafka_helpers import (
    ROWS_PER_EPOCH,
    assert_exactly_once,
    assert_read_committed_exactly_once,
    committed,
    epoch_table,
    make_sink,
)

#: Far below the sink's commit_timeout_s (10 s here): an answer, not a time-out.
FENCED_WITHIN_S = 5.0


def ids(epochs: range) -> set[int]:
    return {e * 1000 + i for e in epochs for i in range(ROWS_PER_EPOCH)}


@pytest.fixture
def topic(kafka_broker: Any, topic_name: str) -> str:
    kafka_broker.create_topic(topic_name, partitions=2)
    return topic_name


_LOADING = (
    KafkaError.NOT_COORDINATOR,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
)


def marker(bootstrap: str, group: str, topic: str, *, within_s: float = 30.0) -> TopicPartition:
    """The group's committed offset on (topic, 0), with its metadata. A broker just restarted
    answers NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS (retriable) while it loads the
    offsets topic: asked again until ``within_s``."""
    deadline = time.monotonic() + within_s
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        while True:
            try:
                (offset,) = consumer.committed([TopicPartition(topic, 0)], timeout=15)
                return offset
            except KafkaException as e:
                if e.args[0].code() not in _LOADING or time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
    finally:
        consumer.close()


def zombie_at(sink: laminar.KafkaSink, where: str) -> Callable[[], Any]:
    """Bring ``sink`` to ``where`` in epoch 0; return the rest of its epoch. (A zombie that has
    begun learns it is fenced when its records or its marker reach the broker: produce() only
    queues, so the first step that must answer is the prepare.)"""
    sink.init_transactions()
    if where == "after_init":

        def epoch_0() -> None:
            sink.begin_transaction(0)
            sink.write(epoch_table(0))
            sink.prepare_transaction()

        return epoch_0
    sink.begin_transaction(0)
    sink.write(epoch_table(0))
    if where == "after_write":
        return sink.prepare_transaction  # the epoch marker, then the flush
    sink.prepare_transaction()
    return lambda: sink.commit_transaction(0)


@pytest.mark.parametrize("where", ["after_init", "after_write", "after_prepare"])
def test_a_zombie_is_told_it_is_fenced_at_its_next_transactional_call(
    kafka_bootstrap: str, topic: str, where: str
) -> None:
    tid = f"tid-{topic}"
    zombie = make_sink(kafka_bootstrap, topic, tid, commit_timeout_s=10.0)
    next_call = zombie_at(zombie, where)
    successor = make_sink(kafka_bootstrap, topic, tid)
    successor.init_transactions()

    started = time.monotonic()
    with pytest.raises(FencedError) as raised:
        next_call()
    elapsed = time.monotonic() - started

    assert not isinstance(raised.value, InDoubtError)
    assert elapsed < FENCED_WITHIN_S, f"fenced only after {elapsed:.1f} s: a time-out?"
    assert "another producer" in str(raised.value)
    with pytest.raises(FencedError):  # and every later call, writing nothing
        zombie.begin_transaction(1)
    assert zombie.metrics.commits == 0
    successor.begin_transaction(0)
    successor.write(epoch_table(0))
    successor.commit_transaction(0)
    assert_exactly_once(committed(kafka_bootstrap, topic), ids(range(1)))
    assert_read_committed_exactly_once(kafka_bootstrap, topic, ids(range(1)))
    zombie.close()
    successor.close()


def test_offset_metadata_round_trips_and_survives_a_crash(
    broker_factory: Callable[..., KafkaBroker], unique_name: Callable[[str], str]
) -> None:
    """What the marker stands on: an offset sent inside a transaction keeps its metadata string,
    exactly, through a SIGKILL of the broker (Tansu drops it: README's compatibility note)."""
    broker = broker_factory()
    topic, group = unique_name("topic"), unique_name("group")
    broker.create_topic(topic, partitions=1)
    metadata = '{"laminar":1,"epoch":7,"owner":"query-é"}'
    consumer = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": group})
    producer = Producer(
        {"bootstrap.servers": broker.bootstrap_servers, "transactional.id": unique_name("txn")}
    )
    producer.init_transactions(15)
    producer.begin_transaction()
    producer.produce(topic, value=b"x", partition=0)
    producer.send_offsets_to_transaction(
        [TopicPartition(topic, 0, 7, metadata=metadata)], consumer.consumer_group_metadata(), 15
    )
    producer.commit_transaction(15)
    consumer.close()
    before = marker(broker.bootstrap_servers, group, topic)

    broker.kill()
    broker.start()

    after = marker(broker.bootstrap_servers, group, topic)
    assert (before.offset, before.metadata) == (7, metadata)
    assert (after.offset, after.metadata) == (7, metadata)


def test_the_marker_round_trips_and_the_witness_is_never_needed(
    kafka_bootstrap: str, topic: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Every start reads the last committed epoch from the marker group (the offset and the
    metadata the sink sent, as sent), so the header witness — the fallback for an expired or
    dropped marker — is never read on Apache Kafka."""
    tid = f"tid-{topic}"
    group = f"laminar.{tid}"
    caplog.set_level(logging.INFO, logger="laminar")
    sent: list[TopicPartition] = []
    for start in range(3):  # three writer processes' worth of starts, each replaying one epoch
        sink = make_sink(kafka_bootstrap, topic, tid)
        writer = laminar.exactly_once(sink)
        assert sink.last_committed_epoch() == (None if start == 0 else 2 * start - 1)
        if start:
            assert writer.write_epoch(2 * start - 1, epoch_table(2 * start - 1)).skipped
        for epoch in (2 * start, 2 * start + 1):
            assert writer.write_epoch(epoch, epoch_table(epoch)).committed
            sent.append(marker(kafka_bootstrap, group, topic))
        writer.close()

    assert [m.offset for m in sent] == list(range(6))
    # The metadata string is returned as the sink sent it (today: none).
    assert {m.metadata for m in sent} == {None}
    assert_exactly_once(committed(kafka_bootstrap, topic), ids(range(6)))
    assert_read_committed_exactly_once(kafka_bootstrap, topic, ids(range(6)))
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert not [w for w in warnings if "laminar.epoch" in w or "witness" in w], warnings
