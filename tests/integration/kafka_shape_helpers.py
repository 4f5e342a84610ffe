"""Spark's Kafka-sink shape in the tests: epoch tables that route rows to two topics with explicit
partitions and user headers, and the exact check of what each topic committed (replayed by
``laminar.kafka.log``, never the broker's read_committed)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pyarrow as pa

from tests.integration.kafka_fill import settled_committed

ROWS = 40
HEADERS_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


def other_topic(home: str) -> str:
    """The second topic an epoch writes besides the sink's own."""
    return f"{home}-b"


def shape_table(epoch: int, home: str, rows: int = ROWS, *, topics: int = 2) -> pa.Table:
    """Spark's shape: row ``i`` of epoch ``e`` has key ``k<e*1000+i>``, a JSON value, topic home
    (null every 4th row: the sink's default) or the other topic, an explicit partition on odd
    rows, and a user header (none every 3rd row)."""
    ids = [epoch * 1000 + i for i in range(rows)]
    topic: list[str | None] = [
        None if i % 4 == 0 else (other_topic(home) if topics > 1 and i % 2 else home)
        for i in range(rows)
    ]
    partition = [i % 2 if i % 2 else None for i in range(rows)]
    headers: list[list[dict[str, Any]] | None] = [
        None if i % 3 == 0 else [{"key": "trace", "value": f"t{n}".encode()}]
        for i, n in enumerate(ids)
    ]
    return pa.table(
        {
            "key": [f"k{n}" for n in ids],
            "value": [f'{{"id":{n},"epoch":{epoch}}}'.encode() for n in ids],
            "topic": pa.array(topic, pa.string()),
            "partition": pa.array(partition, pa.int32()),
            "headers": pa.array(headers, HEADERS_TYPE),
        }
    )


def expected_records(
    epochs: range, home: str, sink_id: str, *, topics: int = 2
) -> dict[str, Counter[tuple[Any, ...]]]:
    """Per topic: the exact ``(key, value, partition or None, headers)`` each committed record
    must have, once each."""
    out: dict[str, Counter[tuple[Any, ...]]] = {home: Counter(), other_topic(home): Counter()}
    for epoch in epochs:
        table = shape_table(epoch, home, topics=topics).to_pylist()
        for row in table:
            topic = row["topic"] or home
            user = tuple((h["key"], h["value"]) for h in row["headers"] or ())
            headers = (
                *user,
                ("laminar.sink", sink_id.encode()),
                ("laminar.epoch", str(epoch).encode()),
            )
            out[topic][(row["key"].encode(), row["value"], row["partition"], headers)] += 1
    return out


def committed_records(
    bootstrap: str, home: str, sink_id: str
) -> dict[str, Counter[tuple[Any, ...]]]:
    """Per topic: the committed records of ``sink_id``, as `expected_records` describes them
    (the partition kept only where the row named one: odd rows)."""
    out: dict[str, Counter[tuple[Any, ...]]] = {}
    for topic in (home, other_topic(home)):
        found: Counter[tuple[Any, ...]] = Counter()
        for r in settled_committed(bootstrap, topic, sink_id):
            n = int((r.key or b"k0")[1:]) % 1000
            partition = r.partition if n % 2 else None
            found[(r.key, r.value, partition, tuple(r.headers))] += 1
        out[topic] = found
    return out


def assert_exact(bootstrap: str, home: str, sink_id: str, epochs: range) -> None:
    """Each record of ``epochs`` once on its own topic (and partition), with its exact key,
    value and headers; nothing else of the sink."""
    found = committed_records(bootstrap, home, sink_id)
    want = expected_records(epochs, home, sink_id)
    for topic in want:
        extra, missing = found[topic] - want[topic], want[topic] - found[topic]
        assert not extra, (topic, "unexpected or duplicated", list(extra)[:3])
        assert not missing, (topic, "missing", list(missing)[:3])
