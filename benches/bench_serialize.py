"""Serialization benchmarks: Laminar's Rust encoders side by side with the obvious Python way.

Run against a release build (``pip install -e .`` builds release):

    .venv/bin/pytest benches/bench_serialize.py \
        --benchmark-group-by=group --benchmark-columns=min,mean,rounds -p no:cacheprovider

Groups put each pair side by side; at the end a summary prints rows/s and the ratios (also written
to ``.benchmarks/serialize_summary.json``). ``LAMINAR_BENCH_ROWS`` (default 1,000,000) sets the
batch size, ``LAMINAR_BENCH_KAFKA_ROWS`` (default 200,000) the produce-path size. The Postgres
and Kafka groups use the shared server fixtures (``tests.fixtures``: an ephemeral PostgreSQL and a
Tansu broker, or ``LAMINAR_PG_DSN`` / ``LAMINAR_KAFKA_BOOTSTRAP``).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from benches.gates import Gate

import laminar

sys.path.insert(0, str(Path(__file__).parent))
from serialize_data import PG_COLUMNS, PG_DDL, make_batch

# ``./dev test`` sets LAMINAR_BENCH_QUICK=1: smaller batches, same comparisons.
QUICK = os.environ.get("LAMINAR_BENCH_QUICK") == "1"
ROWS = int(os.environ.get("LAMINAR_BENCH_ROWS", "200000" if QUICK else "1000000"))
KAFKA_ROWS = int(os.environ.get("LAMINAR_BENCH_KAFKA_ROWS", "50000" if QUICK else "200000"))
RESULTS: dict[str, dict[str, float]] = {}
MEMORY: dict[str, Any] = {}


def record(name: str, benchmark: Any, rows: int) -> None:
    if benchmark.stats is None:  # --benchmark-disable: the code ran once, nothing was timed
        return
    stats = benchmark.stats.stats
    RESULTS[name] = {"rows": rows, "min_s": stats.min, "mean_s": stats.mean}


def _print_uncaptured(pytestconfig: pytest.Config, lines: list[str]) -> None:
    """Prints past pytest's output capture (the summary is the point of the run)."""
    capture = pytestconfig.pluginmanager.get_plugin("capturemanager")
    if capture is None:
        print("\n".join(lines))
        return
    with capture.global_and_fixture_disabled():
        print("\n".join(lines))


@pytest.fixture(scope="module")
def batch() -> pa.Table:
    return make_batch(ROWS)


@pytest.fixture(scope="module", autouse=True)
def summary(pytestconfig: pytest.Config) -> Iterator[None]:
    yield
    lines = ["", "serialization summary (min of rounds):"]
    for name, r in RESULTS.items():
        lines.append(f"  {name:<34} {r['rows'] / r['min_s']:>14,.0f} rows/s  ({r['min_s']:.3f} s)")

    def ratio(label: str, slow: str, fast: str) -> None:
        if slow in RESULTS and fast in RESULTS:
            value = RESULTS[slow]["min_s"] / RESULTS[slow]["rows"]
            value /= RESULTS[fast]["min_s"] / RESULTS[fast]["rows"]
            lines.append(f"  ratio {label:<58} {value:8.2f}x")

    ratio("json: laminar vs to_pylist+json.dumps", "json_naive", "json_laminar")
    ratio("copy e2e: laminar vs write_row loop", "copy_e2e_write_row", "copy_e2e_laminar")
    ratio("copy encode vs json encode", "json_laminar", "copy_encode_laminar")
    # Produce path: time of each variant relative to the bare loop over pre-encoded bytes (1.0 =
    # encoding costs nothing on top of the loop).
    for variant in ("produce_laminar_lists", "produce_buffer_slices"):
        ratio(f"{variant} / produce_preencoded", variant, "produce_preencoded")
    for variant in ("produce_laminar_keyed", "produce_laminar_stream_keyed"):
        ratio(f"{variant} / produce_preencoded_keyed", variant, "produce_preencoded_keyed")
    _print_uncaptured(pytestconfig, lines)
    out = Path(".benchmarks")
    out.mkdir(exist_ok=True)
    summary_file = out / "serialize_summary.json"
    summary_file.write_text(json.dumps({"timings": RESULTS, "memory": MEMORY}, indent=2))


# --- JSON ------------------------------------------------------------------------------------


@pytest.mark.benchmark(group="json-encode")
def test_json_laminar(benchmark: Any, batch: pa.Table) -> None:
    records = benchmark.pedantic(laminar.encode_kafka, args=(batch,), rounds=5, warmup_rounds=1)
    assert records.num_rows == ROWS
    record("json_laminar", benchmark, ROWS)


def _naive_json(table: pa.Table) -> list[bytes]:
    def default(value: object) -> object:
        if isinstance(value, Decimal):
            return str(value)
        if isinstance(value, dt.datetime):
            return value.isoformat()
        raise TypeError(type(value))

    return [json.dumps(row, default=default).encode() for row in table.to_pylist()]


@pytest.mark.benchmark(group="json-encode")
def test_json_naive(benchmark: Any, batch: pa.Table) -> None:
    values = benchmark.pedantic(_naive_json, args=(batch,), rounds=1, iterations=1)
    assert len(values) == ROWS
    record("json_naive", benchmark, ROWS)


# --- Spark's Kafka-sink shape (docs/kafka.md) -------------------------------------------------


def _spark_shaped(rows: int, *, routed: bool) -> pa.Table:
    """``key``/``value`` columns; with ``routed``, a topic per row (two topics), an explicit
    partition and a constant user header, as a Spark query shapes them."""
    columns: dict[str, Any] = {
        "key": pa.array([str(i) for i in range(rows)]),
        "value": pa.array([b'{"id":%d,"amount":1.5}' % i for i in range(rows)]),
    }
    if routed:
        header = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
        columns["topic"] = pa.array(["a" if i % 2 else "b" for i in range(rows)])
        columns["partition"] = pa.array([i % 3 for i in range(rows)], pa.int32())
        columns["headers"] = pa.array([[{"key": "source", "value": b"web"}]] * rows, header)
    return pa.table(columns)


@pytest.mark.benchmark(group="spark-shape-encode")
@pytest.mark.parametrize("routed", [False, True], ids=["key_value", "topic_partition_headers"])
def test_spark_shape_encode(benchmark: Any, routed: bool) -> None:
    data = _spark_shaped(KAFKA_ROWS, routed=routed)
    sink = [("laminar.sink", b"s"), ("laminar.epoch", b"1")]
    records = benchmark.pedantic(
        laminar._core.encode_kafka,
        args=(data,),
        kwargs={"value_format": "spark", "topic": "a", "headers": sink},
        rounds=5,
        warmup_rounds=1,
    )
    assert records.num_rows == KAFKA_ROWS
    record(f"spark_shape_{'routed' if routed else 'key_value'}", benchmark, KAFKA_ROWS)


# --- COPY BINARY -----------------------------------------------------------------------------


@pytest.mark.benchmark(group="copy-encode")
def test_copy_encode_laminar(benchmark: Any, batch: pa.Table) -> None:
    buffer = benchmark.pedantic(
        laminar.encode_pg_copy, args=(batch, PG_COLUMNS), rounds=5, warmup_rounds=1
    )
    assert buffer.num_rows == ROWS
    record("copy_encode_laminar", benchmark, ROWS)


@pytest.fixture(scope="module")
def pg_conn(pg_dsn: str) -> Iterator[Any]:
    dsn = pg_dsn
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "DROP TABLE IF EXISTS laminar_bench_copy; "
            f"CREATE UNLOGGED TABLE laminar_bench_copy {PG_DDL}"
        )
        yield conn
        conn.execute("DROP TABLE IF EXISTS laminar_bench_copy")


def _copy_laminar(conn: Any, table: pa.Table) -> None:
    buffer = laminar.encode_pg_copy(table, PG_COLUMNS)
    with (
        conn.cursor() as cur,
        cur.copy(
            "COPY laminar_bench_copy (id, name, amount, ts, flag, score) FROM STDIN (FORMAT BINARY)"
        ) as copy,
    ):
        for chunk in buffer.chunks:
            copy.write(chunk)


def _copy_write_row(conn: Any, table: pa.Table) -> None:
    with (
        conn.cursor() as cur,
        cur.copy(
            "COPY laminar_bench_copy (id, name, amount, ts, flag, score) FROM STDIN (FORMAT BINARY)"
        ) as copy,
    ):
        copy.set_types(["int8", "text", "numeric", "timestamptz", "bool", "float8"])
        for row in table.to_pylist():
            copy.write_row(tuple(row.values()))


def _truncating(conn: Any, fn: Callable[[Any, pa.Table], None]) -> Callable[[pa.Table], None]:
    def run(table: pa.Table) -> None:
        conn.execute("TRUNCATE laminar_bench_copy")
        fn(conn, table)

    return run


@pytest.mark.benchmark(group="copy-e2e")
def test_copy_e2e_laminar(benchmark: Any, batch: pa.Table, pg_conn: Any) -> None:
    benchmark.pedantic(_truncating(pg_conn, _copy_laminar), args=(batch,), rounds=3)
    assert pg_conn.execute("SELECT count(*) FROM laminar_bench_copy").fetchone() == (ROWS,)
    record("copy_e2e_laminar", benchmark, ROWS)


@pytest.mark.benchmark(group="copy-e2e")
def test_copy_e2e_write_row(benchmark: Any, batch: pa.Table, pg_conn: Any) -> None:
    benchmark.pedantic(_truncating(pg_conn, _copy_write_row), args=(batch,), rounds=1)
    assert pg_conn.execute("SELECT count(*) FROM laminar_bench_copy").fetchone() == (ROWS,)
    record("copy_e2e_write_row", benchmark, ROWS)


# --- Kafka produce path ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def producer(kafka_bootstrap: str) -> Any:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    for future in admin.create_topics([NewTopic("laminar-bench", 1, 1)]).values():
        try:
            future.result(30)
        except Exception as e:  # already exists is fine
            if "already exists" not in str(e).lower() and "TOPIC_ALREADY_EXISTS" not in str(e):
                raise
    return Producer(
        {
            "bootstrap.servers": kafka_bootstrap,
            "queue.buffering.max.messages": 2_000_000,
            "queue.buffering.max.kbytes": 2_097_151,
            "linger.ms": 20,
            "batch.size": 1_000_000,
        }
    )


@pytest.fixture(scope="module")
def kafka_batch() -> pa.Table:
    return make_batch(KAFKA_ROWS)


def _produce_values(producer: Any, values: list[bytes]) -> None:
    produce = producer.produce
    for value in values:
        produce("laminar-bench", value)
    producer.flush(60)


@pytest.mark.benchmark(group="kafka-produce")
def test_produce_preencoded(benchmark: Any, producer: Any, kafka_batch: pa.Table) -> None:
    values = [v for v in laminar.encode_kafka(kafka_batch).values if v is not None]
    benchmark.pedantic(_produce_values, args=(producer, values), rounds=3, warmup_rounds=1)
    record("produce_preencoded", benchmark, KAFKA_ROWS)


@pytest.mark.benchmark(group="kafka-produce")
def test_produce_preencoded_keyed(benchmark: Any, producer: Any, kafka_batch: pa.Table) -> None:
    """The loop cost with keys: pre-built key and value lists, encoding not timed."""
    records = laminar.encode_kafka(kafka_batch, key="id")
    keys, values = records.keys, records.values
    assert keys is not None

    def run() -> None:
        produce = producer.produce
        for key, value in zip(keys, values, strict=True):
            produce("laminar-bench", value, key)
        producer.flush(60)

    benchmark.pedantic(run, rounds=3, warmup_rounds=1)
    record("produce_preencoded_keyed", benchmark, KAFKA_ROWS)


@pytest.mark.benchmark(group="kafka-produce")
def test_produce_laminar_lists(benchmark: Any, producer: Any, kafka_batch: pa.Table) -> None:
    """Encode (Rust, list of bytes) + the produce loop: comparable to the pre-encoded loop."""

    def run() -> None:
        records = laminar.encode_kafka(kafka_batch)
        produce = producer.produce
        for value in records.values:
            produce("laminar-bench", value)
        producer.flush(60)

    benchmark.pedantic(run, rounds=3)
    record("produce_laminar_lists", benchmark, KAFKA_ROWS)


@pytest.mark.benchmark(group="kafka-produce")
def test_produce_laminar_keyed(benchmark: Any, producer: Any, kafka_batch: pa.Table) -> None:
    """The same with a key column: zip(keys, values) into produce(topic, value, key)."""

    def run() -> None:
        records = laminar.encode_kafka(kafka_batch, key="id")
        produce = producer.produce
        keys = records.keys
        assert keys is not None
        for key, value in zip(keys, records.values, strict=True):
            produce("laminar-bench", value, key)
        producer.flush(60)

    benchmark.pedantic(run, rounds=3)
    record("produce_laminar_keyed", benchmark, KAFKA_ROWS)


@pytest.mark.benchmark(group="kafka-produce")
def test_produce_laminar_stream(benchmark: Any, producer: Any, kafka_batch: pa.Table) -> None:
    """Encode chunk by chunk while producing (iter_kafka): one chunk buffered at a time."""

    def run() -> None:
        produce = producer.produce
        for key, value in laminar.iter_kafka(kafka_batch, key="id"):
            produce("laminar-bench", value, key)
        producer.flush(60)

    benchmark.pedantic(run, rounds=3)
    record("produce_laminar_stream_keyed", benchmark, KAFKA_ROWS)


@pytest.mark.benchmark(group="kafka-produce")
def test_produce_buffer_slices(benchmark: Any, producer: Any, kafka_batch: pa.Table) -> None:
    values = [v for v in laminar.encode_kafka(kafka_batch).values if v is not None]
    buffer = b"".join(values)
    ends = []
    total = 0
    for v in values:
        total += len(v)
        ends.append(total)

    def run() -> None:
        produce = producer.produce
        start = 0
        for end in ends:
            produce("laminar-bench", buffer[start:end])
            start = end
        producer.flush(60)

    benchmark.pedantic(run, rounds=3)
    record("produce_buffer_slices", benchmark, KAFKA_ROWS)


def test_produce_refuses_memoryviews(producer: Any) -> None:
    """Why there is no memoryview variant: confluent-kafka's produce does not accept them."""
    with pytest.raises(TypeError, match="memoryview"):
        producer.produce("laminar-bench", memoryview(b'{"a":1}'))


# --- memory ----------------------------------------------------------------------------------


def test_memory_peak_and_per_event_overhead(pytestconfig: pytest.Config, gate: Gate) -> None:
    """Peak extra RSS while encoding and bytes held per buffered event (see memory_serialize.py);
    F-E2E-002's budget, < 1 KB per buffered event beyond its payload, is a gate."""
    script = Path(__file__).parent / "memory_serialize.py"
    result = subprocess.run(
        [sys.executable, str(script), str(ROWS)], capture_output=True, text=True, check=True
    )
    report = json.loads(result.stdout)
    MEMORY.update(report)
    _print_uncaptured(pytestconfig, ["", "memory: " + json.dumps(report, indent=2)])
    worst = max(report, key=lambda case: report[case]["overhead_bytes_per_event"])
    each = ", ".join(f"{c} {r['overhead_bytes_per_event']:g}" for c, r in report.items())
    gate(
        "memory per buffered event beyond payload",
        report[worst]["overhead_bytes_per_event"],
        at_most=1024,
        unit="B",
        detail=f"worst of the encoders' cases at {ROWS:,} rows ({each} B)",
    )
