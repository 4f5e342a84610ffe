"""Shared helpers of the Kafka integration tests (not a test module)."""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter
from typing import Any

import pyarrow as pa
from confluent_kafka import Consumer, KafkaError, TopicPartition

import laminar
from laminar.kafka.log import LogRecord, read_partition
from tests.integration.kafka_fill import settled_committed as read_committed

ROWS_PER_EPOCH = 50


def epoch_table(epoch: int, rows: int = ROWS_PER_EPOCH) -> pa.Table:
    """Rows with ids unique across epochs: epoch * 1000 + i."""
    ids = [epoch * 1000 + i for i in range(rows)]
    return pa.table({"id": ids, "name": [f"row-{i}" for i in ids], "epoch": [epoch] * rows})


def make_sink(bootstrap: str, topic: str, transactional_id: str, **kw: Any) -> laminar.KafkaSink:
    kw.setdefault("key", "id")
    kw.setdefault("commit_timeout_s", 5.0)
    kw.setdefault("init_timeout_s", 15.0)
    return laminar.KafkaSink(bootstrap, topic, transactional_id, **kw)


def committed(bootstrap: str, topic: str, sink_id: str | None = None) -> list[LogRecord]:
    """Committed records (per laminar.kafka.log), optionally only this sink's."""
    records = read_committed(bootstrap, topic)
    if sink_id is not None:
        records = [r for r in records if r.header("laminar.sink") == sink_id.encode()]
    return records


def ids_of(records: list[LogRecord]) -> list[int]:
    return [json.loads(r.value or b"null")["id"] for r in records]


def assert_exactly_once(records: list[LogRecord], expected: set[int]) -> None:
    counts = Counter(ids_of(records))
    duplicates = {i: n for i, n in counts.items() if n > 1}
    assert not duplicates, f"ids committed more than once: {sorted(duplicates)[:10]}"
    missing, unexpected = expected - set(counts), set(counts) - expected
    assert not missing, f"ids missing: {sorted(missing)[:10]}"
    assert not unexpected, f"ids unexpected: {sorted(unexpected)[:10]}"
    for record in records:
        row = json.loads(record.value or b"null")
        assert record.header("laminar.epoch") == str(row["epoch"]).encode()


def consumer_values(
    bootstrap: str, topic: str, partitions: int, *, expect: int, timeout: float = 10.0
) -> list[bytes]:
    """What a librdkafka read_committed consumer delivers (until ``expect`` values or timeout)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
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


def partition_log(bootstrap: str, topic: str, partition: int = 0) -> Any:
    return read_partition(bootstrap, topic, partition)


def read_committed_to_end(bootstrap: str, topic: str, timeout: float = 30.0) -> list[bytes]:
    """Every value a librdkafka ``read_committed`` consumer delivers from the start of each
    partition of ``topic`` to its end (the broker's filtering of aborted records included):
    the reader no one in this project wrote. Fails if a partition's end is not reached in time
    (e.g. a transaction is still open and holds the last stable offset back)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": "read_committed",
        }
    )
    try:
        partitions = list(consumer.list_topics(topic, timeout=15).topics[topic].partitions)
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        pending, values = set(partitions), []
        deadline = time.monotonic() + timeout
        while pending and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is None:
                continue
            error = message.error()
            if error is None:
                values.append(message.value())
            elif error.code() == KafkaError._PARTITION_EOF:
                pending.discard(message.partition())
        assert not pending, f"read_committed never reached the end of {topic}{sorted(pending)}"
        return values
    finally:
        consumer.close()


def assert_read_committed_exactly_once(bootstrap: str, topic: str, expected: set[int]) -> None:
    """A librdkafka read_committed consumer sees every expected id once, and nothing else (no
    record of an aborted attempt: every attempt writes the same ids, so one would show as a
    duplicate)."""
    counts = Counter(json.loads(value)["id"] for value in read_committed_to_end(bootstrap, topic))
    duplicates = sorted(i for i, n in counts.items() if n > 1)
    assert not duplicates, f"read_committed saw ids more than once: {duplicates[:10]}"
    assert set(counts) == expected, (
        f"read_committed: missing {sorted(expected - set(counts))[:10]}, "
        f"unexpected {sorted(set(counts) - expected)[:10]}"
    )
