"""Spark's Kafka-sink shape in `KafkaSink` (docs/kafka.md, "Spark's Kafka-sink shape"): which
format a batch is written in, the per-topic checks of its rows against the brokers' metadata, the
produce loop of routed rows, and the topics a sink has written, recorded in its identity group so
that start-up recovery examines all of them (docs/protocol.md §1, "Several topics").

The per-row work — each row's topic, partition and headers, the reserved-header and topic-name
checks — is the core's (``laminar._core.encode_kafka`` with ``value_format="spark"``); this
module only acts on the few distinct topics a batch names, and hands the rows to the producer.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

from laminar._core import KafkaRecords, is_spark_kafka_shape
from laminar.errors import ConfigError, DataError
from laminar.kafka.log import ReadStats, WitnessResult

__all__ = [
    "check_chunk",
    "check_partitions",
    "identity_metadata",
    "merge_witness",
    "missing_topics",
    "produce_routed",
    "recorded_topics",
    "row_of",
    "since_of",
    "value_format_for",
]


def value_format_for(
    schema: Any, configured: str | None, key: str | None, value_column: str | None
) -> str:
    """The format a batch is written in: the one configured; otherwise ``"spark"`` when the
    batch is exactly Spark's Kafka-sink shape and no key column was named, else ``"json"``
    (today's default, unchanged for every other shape)."""
    if configured is not None:
        return configured
    if key is None and value_column is None and is_spark_kafka_shape(schema):
        return "spark"
    return "json"


def row_of(records: KafkaRecords, first_row: int, topic: str, min_partition: int = -1) -> int:
    """The number (in the write) of the first row of ``topic`` whose partition is at least
    ``min_partition``: error paths only."""
    topics = records.topics or []
    partitions = records.partitions or [-1] * len(topics)
    for i, (t, p) in enumerate(zip(topics, partitions, strict=True)):
        if t == topic and p >= min_partition:
            return first_row + i
    return first_row


def check_partitions(
    records: KafkaRecords,
    counts: dict[str, int],
    first_row: int,
    *,
    sink_id: str,
    epoch: int,
    servers: str,
) -> None:
    """Every topic the rows name exists and every explicit partition is below its topic's
    partition count; otherwise a `DataError` naming the row, the topic and the partition —
    raised before any record of the batch is produced."""
    for topic, top in zip(records.topic_names, records.max_partitions, strict=True):
        count = counts.get(topic)
        if count is None:
            row = row_of(records, first_row, topic)
            raise DataError(
                f"row {row} names topic {topic!r}, which does not exist on {servers}; create it "
                "or fix the row's 'topic' (Laminar never creates topics)",
                sink_id=sink_id,
                epoch=epoch,
            )
        if top >= count:
            row = row_of(records, first_row, topic, count)
            partition = (records.partitions or [])[row - first_row]
            raise DataError(
                f"row {row} asks for partition {partition} of topic {topic!r}, which has "
                f"{count} partition(s) (0 to {count - 1}); fix the row's 'partition' or leave "
                "it null (the partitioner chooses)",
                sink_id=sink_id,
                epoch=epoch,
            )


def check_chunk(
    records: KafkaRecords,
    counts: dict[str, int],
    metadata: Callable[[], Any],
    *,
    home: str,
    first_row: int,
    redo: bool,
    sink_id: str,
    epoch: int,
    servers: str,
) -> None:
    """Before a routed chunk is produced: what the redo log cannot store is refused
    (``ConfigError``, docs/formats.md §2); the partition counts of topics not seen yet are read
    from ``metadata()`` (librdkafka's ``list_topics``, which never creates a topic) into
    ``counts``; then `check_partitions`."""
    if redo and (
        records.partitions is not None
        or records.headers is not None
        or any(t != home for t in records.topic_names)
    ):
        raise ConfigError(
            "an atomic group's redo log (redo='log') does not store per-row topics, "
            "partitions or headers yet: write Spark's Kafka shape with only 'key' and "
            "'value' (and 'topic' equal to the sink's topic), or use redo='replay'",
            sink_id=sink_id,
        )
    if missing_topics(records, counts):
        counts.clear()
        counts.update(
            (name, len(t.partitions))
            for name, t in metadata().topics.items()
            if t.error is None and t.partitions
        )
    check_partitions(records, counts, first_row, sink_id=sink_id, epoch=epoch, servers=servers)


def missing_topics(records: KafkaRecords, counts: dict[str, int]) -> list[str]:
    """The topics the rows name whose partition count is not known yet."""
    return [t for t in records.topic_names if t not in counts]


def produce_routed(
    produce: Callable[..., None],
    records: KafkaRecords,
    sink_headers: list[tuple[str, bytes]],
    start: int,
    stop: int,
    wait_for_room: Callable[[], None],
) -> None:
    """Produces rows ``start:stop`` of a routed batch: each to its topic and partition (-1: the
    partitioner's), with its headers (its own, then the sink's). Positional arguments, as the
    single-topic loop: ``produce(topic, value, key, partition, callback, on_delivery,
    timestamp, headers)``."""
    values = records.values[start:stop]
    n = len(values)
    keys: Iterable[bytes | None] = (
        records.keys[start:stop] if records.keys is not None else [None] * n
    )
    topics = (records.topics or [])[start:stop]
    partitions: Iterable[int] = (
        records.partitions[start:stop] if records.partitions is not None else [-1] * n
    )
    headers: Iterable[list[Any]] = (
        records.headers[start:stop] if records.headers is not None else [sink_headers] * n
    )
    for topic, partition, key, value, row_headers in zip(
        topics, partitions, keys, values, headers, strict=True
    ):
        try:
            produce(topic, value, key, partition, None, None, 0, row_headers)
        except BufferError:
            wait_for_room()
            produce(topic, value, key, partition, None, None, 0, row_headers)


# -- the topics a sink has written, in its identity (docs/protocol.md §1) ---------------------


def recorded_topics(metadata: str | None) -> list[str]:
    """The topics other than the home topic that an identity's metadata lists (none for an
    identity from before several topics, or unreadable metadata)."""
    if not metadata:
        return []
    try:
        parsed = json.loads(metadata)
    except ValueError:
        return []
    topics = parsed.get("topics") if isinstance(parsed, dict) else None
    if not isinstance(topics, list):
        return []
    return [t for t in topics if isinstance(t, str)]


def identity_metadata(since_ms: int, topics: Iterable[str]) -> str:
    """The identity's metadata: ``{"laminar":1,"since_ms":…}`` plus, once the sink has written
    topics other than its home topic, ``"topics":[…]`` (sorted)."""
    doc: dict[str, Any] = {"laminar": 1, "since_ms": since_ms}
    listed = sorted(set(topics))
    if listed:
        doc["topics"] = listed
    return json.dumps(doc, separators=(",", ":"))


def since_of(metadata: str | None, default: int) -> int:
    """The identity's ``since_ms`` (``default`` when unreadable)."""
    try:
        parsed = json.loads(metadata or "")
    except ValueError:
        return default
    since = parsed.get("since_ms") if isinstance(parsed, dict) else None
    return since if isinstance(since, int) else default


def merge_witness(found: WitnessResult, more: WitnessResult) -> WitnessResult:
    """The witness of several topics: the highest epoch found in any; undecided if any topic is
    (its partitions numbered after the earlier topics', for the log); reads added up."""
    epochs = [e for e in (found.epoch, more.epoch) if e is not None]
    read = ReadStats(**vars(found.read))
    read.requests += more.read.requests
    read.add((more.read.fetches, more.read.bytes, more.read.batches, more.read.records))
    return WitnessResult(
        epoch=max(epochs) if epochs else None,
        undecided=found.undecided + tuple(found.partitions + p for p in more.undecided),
        partitions=found.partitions + more.partitions,
        nonempty=found.nonempty + more.nonempty,
        read=read,
    )
