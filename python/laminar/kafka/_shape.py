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
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    ConfigResource,
    ResourceType,
)

from laminar._core import KafkaRecords, detect_spark_kafka_shape
from laminar.errors import ConfigError, DataError
from laminar.kafka.log import ReadStats, WitnessResult

log = logging.getLogger("laminar.kafka")

__all__ = [
    "IDENTITY_METADATA_MAX_BYTES",
    "check_chunk",
    "check_partitions",
    "identity_metadata",
    "merge_witness",
    "metadata_limit",
    "missing_topics",
    "produce_routed",
    "recorded_topics",
    "redo_rows",
    "row_of",
    "since_of",
    "value_format_for",
]


def value_format_for(
    schema: Any, configured: str | None, key: str | None, value_column: str | None
) -> str:
    """The format a batch is written in: the one configured; otherwise ``"spark"`` when the
    batch is exactly Spark's Kafka-sink shape and no key column was named, else ``"json"``
    (today's default, unchanged for every other shape). A batch with only the shape's column
    names but one of them of another type is a `DataError` naming the column and its type
    (the core's ``detect_spark_kafka_shape``), never JSON to the home topic without a word."""
    if configured is not None:
        return configured
    if key is None and value_column is None and detect_spark_kafka_shape(schema):
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
    """Before a routed chunk is produced: the partition counts of topics not seen yet are read
    from ``metadata()`` (librdkafka's ``list_topics``, which never creates a topic) into
    ``counts``; then `check_partitions`. ``redo``: the chunk is also kept for an atomic group's
    redo log, whose version-2 blob stores every row's topic, partition and user headers
    (docs/formats.md §2) — nothing of Spark's shape is refused for it."""
    if missing_topics(records, counts):
        counts.clear()
        counts.update(
            (name, partitions)
            for name, (partitions, error) in metadata().items()
            if error is None and partitions
        )
    check_partitions(records, counts, first_row, sink_id=sink_id, epoch=epoch, servers=servers)


@dataclass
class RedoRows:
    """The records of a version-2 redo blob in the form `produce_routed` and `check_chunk` read
    (the attributes of a routed `KafkaRecords`), each row's headers followed by the sink's."""

    values: list[bytes | None]
    keys: list[bytes | None] | None
    topics: list[str]
    partitions: list[int] | None
    headers: list[list[tuple[str, bytes | None]]] | None
    topic_names: list[str] = field(init=False)
    max_partitions: list[int] = field(init=False)

    def __post_init__(self) -> None:
        top: dict[str, int] = {}
        for i, topic in enumerate(self.topics):
            p = self.partitions[i] if self.partitions is not None else -1
            top[topic] = max(top.get(topic, -1), p)
        self.topic_names = list(top)
        self.max_partitions = list(top.values())


def redo_rows(
    values: list[bytes | None],
    keys: list[bytes | None] | None,
    routed: tuple[list[str | None], list[int], list[list[tuple[str, bytes | None]]]],
    *,
    home: str,
    sink_headers: list[tuple[str, bytes]],
) -> RedoRows:
    """A decoded version-2 redo blob's records (``routed``: topics, ``None`` for the sink's
    ``home`` topic; partitions, -1 for the partitioner's; user headers) as `RedoRows`, so that
    the redo produces each record exactly as the epoch's first attempt did."""
    topics, partitions, headers = routed
    return RedoRows(
        values=values,
        keys=keys,
        topics=[t if t is not None else home for t in topics],
        partitions=partitions if any(p >= 0 for p in partitions) else None,
        headers=[[*h, *sink_headers] for h in headers] if any(headers) else None,
    )


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
    for offset, (topic, partition, key, value, row_headers) in enumerate(
        zip(topics, partitions, keys, values, headers, strict=True)
    ):
        try:
            try:
                produce(topic, value, key, partition, None, None, 0, row_headers)
            except BufferError:
                wait_for_room()
                produce(topic, value, key, partition, None, None, 0, row_headers)
        except KafkaException as e:
            raise RoutedProduceError(e, offset, key, value, headers_size(row_headers), topic) from e


class RoutedProduceError(Exception):
    """librdkafka refused one routed record: which (``offset`` from the chunk's start), with its
    key, value, the size of its headers and its topic, for the sink's error message."""

    def __init__(
        self,
        error: KafkaException,
        offset: int,
        key: bytes | None,
        value: bytes | None,
        header_bytes: int,
        topic: str | None = None,
    ) -> None:
        super().__init__(str(error))
        self.error, self.offset, self.key, self.value = error, offset, key, value
        self.header_bytes, self.topic = header_bytes, topic


def headers_size(headers: Iterable[Any]) -> int:
    """The bytes of a record's header keys and values (what counts toward message.max.bytes
    besides its key and value)."""
    total = 0
    for name, value in headers:
        total += len(name.encode() if isinstance(name, str) else name)
        if value is not None:
            total += len(value.encode() if isinstance(value, str) else value)
    return total


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


#: The most bytes of identity metadata Laminar writes when the brokers' own
#: ``offset.metadata.max.bytes`` cannot be read: its default (docs/protocol.md §1).
IDENTITY_METADATA_MAX_BYTES = 4096

#: The client settings an admin client shares with the producer (connection and security).
_ADMIN_PREFIXES = ("security.", "sasl.", "ssl.", "socket.", "client.", "broker.address.")

#: ``metadata_limit``'s answers, per bootstrap servers (the brokers' setting rarely changes).
_LIMITS: dict[str, int] = {}


def metadata_limit(bootstrap: str, producer_config: dict[str, Any], timeout_s: float) -> int:
    """The brokers' ``offset.metadata.max.bytes``: the smallest value of the cluster's brokers
    (``describe_configs``, with the producer's connection and security settings), so that the
    identity fits on whichever broker coordinates its group; `IDENTITY_METADATA_MAX_BYTES` when
    it cannot be read (no ``DescribeConfigs`` permission, an older broker, a timeout)."""
    if bootstrap in _LIMITS:
        return _LIMITS[bootstrap]
    config = {k: v for k, v in producer_config.items() if k.startswith(_ADMIN_PREFIXES)}
    config["bootstrap.servers"] = bootstrap
    limit = IDENTITY_METADATA_MAX_BYTES
    try:
        admin = AdminClient(config)
        brokers = admin.list_topics(timeout=timeout_s).brokers
        resources = [ConfigResource(ResourceType.BROKER, str(b)) for b in brokers]
        futures = admin.describe_configs(resources, request_timeout=timeout_s) if resources else {}
        values = [
            int(f.result(timeout=timeout_s)["offset.metadata.max.bytes"].value)
            for f in futures.values()
        ]
        limit = min(values) if values else limit
    except (KafkaException, KeyError, ValueError, TypeError, TimeoutError) as e:
        log.info(
            "offset.metadata.max.bytes of %s not readable (%s): %d assumed", bootstrap, e, limit
        )
    _LIMITS[bootstrap] = limit
    return limit


def identity_metadata(
    since_ms: int,
    topics: Iterable[str],
    *,
    sink_id: str | None = None,
    limit: int = IDENTITY_METADATA_MAX_BYTES,
) -> str:
    """The identity's metadata: ``{"laminar":1,"since_ms":…}`` plus, once the sink has written
    topics other than its home topic, ``"topics":[…]`` (sorted). More than ``limit`` bytes (a
    broker would refuse the commit: `metadata_limit`) is a `ConfigError` naming
    the sink, the number of topics and the fix — raised before any record goes to a new topic,
    so nothing of the epoch is committed."""
    doc: dict[str, Any] = {"laminar": 1, "since_ms": since_ms}
    listed = sorted(set(topics))
    if listed:
        doc["topics"] = listed
    text = json.dumps(doc, separators=(",", ":"))
    size = len(text.encode())
    if size > limit:
        raise ConfigError(
            f"the sink would write {len(listed)} topics besides its home topic; their names "
            f"take {size} bytes in its identity (offset metadata), over the {limit} bytes "
            "the brokers keep (offset.metadata.max.bytes, docs/protocol.md §1): "
            "route fewer topics through one KafkaSink (one sink per group of topics) or use "
            "shorter topic names",
            sink_id=sink_id,
        )
    return text


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
