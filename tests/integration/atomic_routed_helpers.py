"""The atomic pair writing Spark's Kafka-sink shape routed over three topics (not a test module):
the epochs, the stores they need, and the exact check of both stores after recovery — Kafka's
committed records replayed by ``laminar.kafka.log`` (`kafka_shape_helpers.assert_exact`), and
PostgreSQL's rows, each once with its exact key, value, topic and partition."""

from __future__ import annotations

from collections import Counter
from typing import Any

import psycopg
import pyarrow as pa

from tests.integration.kafka_shape_helpers import assert_exact, shape_table, topics_of

TOPICS = 3
ROWS = 24

#: The PostgreSQL table that receives the same batches (headers as JSON).
DDL = '(key text, value bytea, topic text, "partition" int4, headers jsonb)'


def routed_table(epoch: int, home: str) -> pa.Table:
    """Epoch ``epoch`` in Spark's shape over three topics (`kafka_shape_helpers.shape_table`)."""
    return shape_table(epoch, home, ROWS, topics=TOPICS)


def create_stores(
    broker: Any, dsn: str, home: str, table: str, partitions: tuple[int, ...] = (2, 3, 4)
) -> None:
    """The three topics (with ``partitions`` partitions each) and the table."""
    for count, topic in zip(partitions, topics_of(home, TOPICS), strict=True):
        broker.create_topic(topic, partitions=count)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table} {DDL}")


def assert_routed_exactly_once(
    bootstrap: str, home: str, sink_id: str, dsn: str, table: str, epochs: int
) -> None:
    """Every record of ``epochs`` once on its own topic with its exact key, value, partition
    and headers; every row once in PostgreSQL, exact; nothing else in either store."""
    assert_exact(bootstrap, home, sink_id, range(epochs), topics=TOPICS, rows=ROWS)
    want: Counter[tuple[Any, ...]] = Counter()
    for epoch in range(epochs):
        for row in routed_table(epoch, home).to_pylist():
            want[(row["key"], row["value"], row["topic"], row["partition"])] += 1
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(f'SELECT key, value, topic, "partition" FROM {table}').fetchall()
    found = Counter((k, bytes(v), t, p) for k, v, t, p in rows)
    assert not found - want, ("PostgreSQL: unexpected or twice", list(found - want)[:3])
    assert not want - found, ("PostgreSQL: missing", list(want - found)[:3])
