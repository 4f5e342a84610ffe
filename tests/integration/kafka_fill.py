"""Fill a topic the way production topics look: many foreign producers, every compression codec
mixed within each partition, transactional (committed and aborted) and plain records, written in
large batches so that even a million records take few round trips (not a test module)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Producer

from laminar.kafka.log import KafkaLogClient, LogRecord, PartitionLog

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


@dataclass
class Filled:
    """What `fill` wrote: the values a committed-only read must return, and those it must not."""

    committed: set[bytes] = field(default_factory=set)
    aborted: set[bytes] = field(default_factory=set)
    records: int = 0


def _producer(bootstrap: str, codec: str, **extra: Any) -> Producer:
    return Producer(
        {
            "bootstrap.servers": bootstrap,
            "compression.type": codec,
            "linger.ms": 50,
            "batch.num.messages": 100_000,
            "batch.size": 8 << 20,
            "queue.buffering.max.messages": 2_000_000,
            "queue.buffering.max.kbytes": 2 << 20,
            **extra,
        }
    )


def fill(
    bootstrap: str,
    topic: str,
    records: int,
    *,
    partitions: int,
    codecs: tuple[str, ...] = CODECS,
    aborted_per_codec: int = 0,
    value_size: int = 64,
    timestamp_ms: int | None = None,
    keep_values: bool = True,
    tag: str = "foreign",
) -> Filled:
    """Writes ``records`` committed records spread evenly over ``partitions`` and ``codecs``:
    codec ``i``'s producer is transactional when ``i`` is odd (one committed transaction, then
    ``aborted_per_codec`` aborted records), plain otherwise. ``timestamp_ms`` sets every record's
    CreateTime (default: now)."""
    out = Filled()
    pad = b"." * max(0, value_size - 24)
    share = records // len(codecs)
    for i, codec in enumerate(codecs):
        count = share + (records - share * len(codecs) if i == 0 else 0)
        transactional = i % 2 == 1
        extra = {"transactional.id": f"{tag}-{topic}-{codec}"} if transactional else {}
        producer = _producer(bootstrap, codec, **extra)
        if transactional:
            producer.init_transactions(30)
            producer.begin_transaction()
        for n in range(count):
            value = f"{tag}-{codec}-{n}".encode() + pad
            producer.produce(
                topic,
                value,
                partition=n % partitions,
                timestamp=timestamp_ms or 0,
                headers=[("producer", codec.encode())],
            )
            if n % 100_000 == 99_999:
                producer.poll(0)
            if keep_values:
                out.committed.add(value)
        if transactional:
            producer.commit_transaction(60)
            if aborted_per_codec:
                producer.begin_transaction()
                for n in range(aborted_per_codec):
                    value = f"{tag}-{codec}-aborted-{n}".encode()
                    producer.produce(topic, value, partition=n % partitions)
                    out.aborted.add(value)
                producer.flush(60)
                producer.abort_transaction(60)
        remaining = producer.flush(120)
        if remaining:
            raise RuntimeError(f"{remaining} records of the {codec} producer were not delivered")
        out.records += count
    return out


def settled_logs(bootstrap: str, topic: str, *, within_s: float = 10.0) -> dict[int, PartitionLog]:
    """Every partition, transactions resolved, read again while records are still open: a
    committed transaction's markers are written by the coordinator *after* the producer's commit
    returns (measured: 22 of 2,560 records of a 64-partition epoch still open right after the
    commit on Apache Kafka 4.3, none a second later). Records open past ``within_s`` are left
    open (a transaction really in flight)."""
    deadline = time.monotonic() + within_s
    with KafkaLogClient(bootstrap) as client:
        logs = client.read_topic(topic)
        while time.monotonic() < deadline:
            pending = [p for p, log in logs.items() if log.open]
            if not pending:
                break
            time.sleep(0.2)
            logs.update(client.read_topic(topic, pending))
    return logs


def settled_committed(bootstrap: str, topic: str, sink_id: str | None = None) -> list[LogRecord]:
    """The committed records once markers in flight have landed (`settled_logs`), optionally
    only those ``sink_id`` wrote."""
    logs = settled_logs(bootstrap, topic)
    records = [r for p in sorted(logs) for r in logs[p].committed]
    if sink_id is not None:
        records = [r for r in records if r.header("laminar.sink") == sink_id.encode()]
    return records


def now_ms() -> int:
    """The wall clock in milliseconds (record timestamps)."""
    return time.time_ns() // 1_000_000
