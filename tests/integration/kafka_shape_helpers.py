"""Spark's Kafka-sink shape in the tests: epoch tables that route rows to two (or three) topics
with explicit partitions and user headers, and the exact check of what each topic committed
(replayed by ``laminar.kafka.log``, never the broker's read_committed)."""

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


def third_topic(home: str) -> str:
    """The third topic of a three-topic epoch."""
    return f"{home}-c"


def topics_of(home: str, topics: int = 2) -> list[str]:
    """The topics an epoch of ``shape_table(..., topics=topics)`` writes."""
    return [home, other_topic(home), third_topic(home)][: max(topics, 2)]


def _topic_of(i: int, home: str, topics: int) -> str | None:
    if i % 4 == 0:
        return None
    if topics > 2:
        return topics_of(home, topics)[i % 3]
    return other_topic(home) if topics > 1 and i % 2 else home


def shape_table(epoch: int, home: str, rows: int = ROWS, *, topics: int = 2) -> pa.Table:
    """Spark's shape: row ``i`` of epoch ``e`` has key ``k<e*1000+i>``, a JSON value, topic home
    (null every 4th row: the sink's default) or another topic (the other one on odd rows; with
    ``topics=3``, the ``i % 3``-th), an explicit partition on odd rows, and a user header (none
    every 3rd row; two on every 5th)."""
    ids = [epoch * 1000 + i for i in range(rows)]
    topic = [_topic_of(i, home, topics) for i in range(rows)]
    partition = [i % 2 if i % 2 else None for i in range(rows)]
    headers: list[list[dict[str, Any]] | None] = [
        None if i % 3 == 0 else [{"key": "trace", "value": f"t{n}".encode()}]
        for i, n in enumerate(ids)
    ]
    if topics > 2:  # a second header (another name: laminar.kafka.log keeps one value per
        # name), null or empty
        for i, h in enumerate(headers):
            if h is not None and i % 5 == 0:
                h.append({"key": "note", "value": None if i % 2 else b""})
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
    epochs: range, home: str, sink_id: str, *, topics: int = 2, rows: int = ROWS
) -> dict[str, Counter[tuple[Any, ...]]]:
    """Per topic: the exact ``(key, value, partition or None, headers)`` each committed record
    must have, once each."""
    out: dict[str, Counter[tuple[Any, ...]]] = {t: Counter() for t in topics_of(home, topics)}
    for epoch in epochs:
        table = shape_table(epoch, home, rows, topics=topics).to_pylist()
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
    bootstrap: str, home: str, sink_id: str, *, topics: int = 2
) -> dict[str, Counter[tuple[Any, ...]]]:
    """Per topic: the committed records of ``sink_id``, as `expected_records` describes them
    (the partition kept only where the row named one: odd rows)."""
    out: dict[str, Counter[tuple[Any, ...]]] = {}
    for topic in topics_of(home, topics):
        found: Counter[tuple[Any, ...]] = Counter()
        for r in settled_committed(bootstrap, topic, sink_id):
            n = int((r.key or b"k0")[1:]) % 1000
            partition = r.partition if n % 2 else None
            found[(r.key, r.value, partition, tuple(r.headers))] += 1
        out[topic] = found
    return out


def assert_exact(
    bootstrap: str, home: str, sink_id: str, epochs: range, *, topics: int = 2, rows: int = ROWS
) -> None:
    """Each record of ``epochs`` once on its own topic (and partition), with its exact key,
    value and headers; nothing else of the sink."""
    found = committed_records(bootstrap, home, sink_id, topics=topics)
    want = expected_records(epochs, home, sink_id, topics=topics, rows=rows)
    for topic in want:
        extra, missing = found[topic] - want[topic], want[topic] - found[topic]
        assert not extra, (topic, "unexpected or duplicated", list(extra)[:3])
        assert not missing, (topic, "missing", list(missing)[:3])
