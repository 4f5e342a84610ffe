"""Data integrity through a real broker (issue 11): null keys and tombstones survive at every
position of a batch (the first row of each ~1 MiB encoded chunk included), an oversized record is
a DataError the writer does not retry, and a FatalError at start-up leaves no client running."""

from __future__ import annotations

import gc
import json
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import laminar
from laminar import DataError, FatalError, RecordTooLargeError
from laminar.embedded._process import free_port
from tests.integration.integrity_helpers import create_rows_table, epoch_rows, pg_rows
from tests.integration.kafka_fill import settled_committed as read_committed

pytestmark = pytest.mark.integration

CHUNK = 1 << 20


@pytest.fixture
def topic(kafka_broker: Any, unique_name: Any) -> str:
    name = unique_name("nulls")
    kafka_broker.create_topic(name, partitions=3)
    return name


def sink_records(bootstrap: str, topic: str, tid: str) -> list[tuple[Any, Any]]:
    found = [
        (r.partition, r.offset, r.key, r.value)
        for r in read_committed(bootstrap, topic)
        if r.header("laminar.sink") == tid.encode()
    ]
    return [(key, value) for *_, key, value in sorted(found)]


def test_null_keys_and_tombstones_round_trip_at_every_position(
    kafka_bootstrap: str, topic: str
) -> None:
    """Raw values of a third of a chunk: rows 0, 4, 8, 12 open an encoded chunk and are null
    (key and value), rows 1, 5, … are empty (``b''``, not null). One partition per key kind, so
    the log order is the batch order."""
    big = b"v" * (CHUNK // 3 + 1)
    keys: list[bytes | None] = []
    values: list[bytes | None] = []
    for i in range(16):
        keys.append(None if i % 4 == 0 else (b"" if i % 4 == 1 else f"k{i}".encode()))
        values.append(None if i % 4 == 0 else (b"" if i % 4 == 1 else big))
    tid = f"nulls-{topic}"
    sink = laminar.KafkaSink(
        kafka_bootstrap,
        topic,
        tid,
        key="k",
        value_format="raw",
        value_column="v",
        producer_config={"message.max.bytes": 4 * CHUNK, "partitioner": "consistent"},
        init_timeout_s=15.0,
    )
    writer = laminar.exactly_once(sink)
    data = pa.table({"k": pa.array(keys, pa.binary()), "v": pa.array(values, pa.binary())})
    try:
        assert writer.write_epoch(0, data).committed
    finally:
        writer.close()
    got = sink_records(kafka_bootstrap, topic, tid)
    assert sorted(got, key=repr) == sorted(zip(keys, values, strict=True), key=repr)
    # a null key is no key (never b''), a null value a tombstone (never b'')
    assert sum(1 for k, _ in got if k is None) == 4
    assert sum(1 for _, v in got if v is None) == 4


def test_json_records_with_null_integer_keys_round_trip(kafka_bootstrap: str, topic: str) -> None:
    n = 5_000
    ids = [None if i % 97 == 0 else i for i in range(n)]
    tid = f"json-nulls-{topic}"
    writer = laminar.exactly_once(
        laminar.KafkaSink(kafka_bootstrap, topic, tid, key="id", init_timeout_s=15.0)
    )
    try:
        writer.write_epoch(0, pa.table({"id": pa.array(ids, pa.int64()), "n": range(n)}))
    finally:
        writer.close()
    got = sink_records(kafka_bootstrap, topic, tid)
    assert len(got) == n
    for key, value in got:
        row = json.loads(value)
        assert key == (None if row["id"] is None else str(row["id"]).encode())
        assert ids[row["n"]] == row["id"]


def test_an_oversized_record_is_a_data_error_and_an_atomic_group_does_not_retry_it(
    kafka_bootstrap: str, topic: str, pg_dsn: str, unique_name: Any
) -> None:
    table = unique_name("big")
    create_rows_table(pg_dsn, table)
    tid = f"big-{topic}"
    kafka = laminar.KafkaSink(
        kafka_bootstrap,
        topic,
        tid,
        key="id",
        producer_config={"message.max.bytes": 20_000},
        init_timeout_s=15.0,
    )
    writer = laminar.exactly_once(
        kafka, laminar.PostgresSink(pg_dsn, table, sink_id=f"pg-{tid}"), retry_backoff_s=5.0
    )
    rows = epoch_rows(0)
    big = rows.set_column(1, "name", pa.array(["x" * 30_000] + [None] * (rows.num_rows - 1)))
    started = time.monotonic()
    try:
        with pytest.raises(DataError) as raised:  # what `except DataError` users write
            writer.write_epoch(0, big)
        assert isinstance(raised.value, RecordTooLargeError)
        assert time.monotonic() - started < 5.0  # not retried (a retry waits 5 s first)
        assert writer.write_epoch(0, rows).committed  # the group stays usable
    finally:
        writer.close()
    assert [r[0] for r in pg_rows(pg_dsn, table)] == rows["id"].to_pylist()


def _librdkafka_threads() -> list[str]:
    names = []
    for task in Path("/proc/self/task").iterdir():
        try:
            name = (task / "comm").read_text().strip()
        except OSError:
            continue
        if name.startswith("rdk:"):
            names.append(name)
    return names


def test_a_fatal_error_at_start_up_releases_the_clients() -> None:
    """An unreachable broker: the FatalError used to leave the producer and the consumer
    reconnecting (and logging every 50 ms) until close()."""
    before = len(_librdkafka_threads())
    address = f"127.0.0.1:{free_port('127.0.0.1')}"
    sink = laminar.KafkaSink(address, "t", "tid-unreachable-release", init_timeout_s=2.0)
    with pytest.raises(FatalError, match="could not reach the Kafka cluster"):
        sink.init_transactions()
    assert sink._rt is None
    gc.collect()
    deadline = time.monotonic() + 10
    while len(_librdkafka_threads()) > before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert len(_librdkafka_threads()) <= before, _librdkafka_threads()
    # the next call tries again (and fails the same way): nothing was left half-open
    with pytest.raises(FatalError):
        sink.init_transactions()
    sink.close()
