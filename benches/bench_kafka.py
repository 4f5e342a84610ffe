"""KafkaSink benchmarks against F-E2E-002's targets, each beside the raw confluent-kafka client on
the same broker (release build of the core; Tansu via the fixtures or LAMINAR_KAFKA_BOOTSTRAP):

    .venv/bin/pytest benches/bench_kafka.py -p no:cacheprovider \
        --benchmark-group-by=group --benchmark-columns=min,median,mean,max,rounds

- commit latency (p50/p99) of 1 K / 10 K / 100 K-row epochs: ``commit_transaction`` of a prepared
  epoch vs the raw client's ``commit_transaction`` after the same records, marker and flush
  (goal: at most 5 ms above it);
- write throughput inside a transaction (100 K rows: write + flush): Laminar (Arrow → Rust
  encoding → produce with headers) vs the raw client producing the same pre-encoded records with
  the same headers (goal >= 0.8x), vs pre-encoded values alone (no key, no headers), and vs the
  naive ``to_pylist`` + ``json.dumps`` + ``produce`` loop (goal >= 5x);
- begin overhead (goal < 50 µs), abort latency of a flushed 1 K-row epoch (goal < 50 ms);
- a whole epoch, transactional (Laminar) vs plain idempotent producing: the overhead per epoch.

A summary with the ratios is printed at the end and written to ``.benchmarks/kafka_summary.json``.
``LAMINAR_BENCH_KAFKA_ROUNDS`` scales the rounds (default 1.0; ``./dev test`` runs a quick pass).
"""

from __future__ import annotations

import json
import os
import statistics
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from benches.serialize_data import make_batch
from confluent_kafka import Consumer, Producer, TopicPartition

import laminar

SCALE = float(os.environ.get("LAMINAR_BENCH_KAFKA_ROUNDS", "1.0"))
# ``./dev test`` sets LAMINAR_BENCH_QUICK=1: smaller epochs, same comparisons.
QUICK = os.environ.get("LAMINAR_BENCH_QUICK") == "1"
SIZES = (1_000, 10_000) if QUICK else (1_000, 10_000, 100_000)
THROUGHPUT_ROWS = 20_000 if QUICK else 100_000
RESULTS: dict[str, dict[str, float]] = {}
HEADERS_TEMPLATE = "laminar.sink"


def rounds(full: int, quick_mode: bool) -> int:
    return max(3, int(full * (0.2 if quick_mode else SCALE)))


@pytest.fixture(scope="module")
def quick(pytestconfig: pytest.Config) -> bool:
    max_time = pytestconfig.getoption("benchmark_max_time", default=1.0)
    return bool(max_time is not None and float(max_time) < 0.5)


@pytest.fixture(scope="module")
def topic(kafka_broker: Any) -> str:
    name = f"bench-kafka-{uuid.uuid4().hex[:8]}"
    kafka_broker.create_topic(name, partitions=1)
    return name


@pytest.fixture(scope="module")
def tables() -> dict[int, pa.Table]:
    return {rows: make_batch(rows) for rows in {*SIZES, THROUGHPUT_ROWS}}


def record(name: str, timings: list[float], rows: int = 0) -> None:
    ordered = sorted(timings)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    RESULTS[name] = {
        "rows": rows,
        "rounds": len(timings),
        "min_s": ordered[0],
        "p50_s": statistics.median(ordered),
        "p99_s": p99,
        "mean_s": statistics.fmean(ordered),
    }


def from_benchmark(name: str, benchmark: Any, rows: int = 0) -> None:
    record(name, list(benchmark.stats.stats.data), rows)


class RawClient:
    """The raw client doing what the sink does, with the records encoded beforehand."""

    def __init__(self, bootstrap: str, topic: str, transactional: bool = True) -> None:
        self.topic = topic
        self.tid = f"raw-{uuid.uuid4().hex[:8]}"
        config: dict[str, Any] = {"bootstrap.servers": bootstrap}
        if transactional:
            config["transactional.id"] = self.tid
        else:
            config["enable.idempotence"] = True
        self.producer = Producer(config)
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"raw.{self.tid}"})
        self.metadata = self.consumer.consumer_group_metadata()
        if transactional:
            self.producer.init_transactions(30)
        self.epoch = 0

    def produce(
        self, values: list[bytes], keys: list[bytes] | None, headers: Any, positional: bool = False
    ) -> None:
        produce, topic = self.producer.produce, self.topic
        for i, value in enumerate(values):
            key = keys[i] if keys is not None else None
            while True:
                try:
                    if headers is None:
                        produce(topic, value, key)
                    elif positional:
                        produce(topic, value, key, -1, None, None, 0, headers)
                    else:
                        produce(topic, value, key, headers=headers)
                    break
                except BufferError:
                    self.producer.poll(0.005)

    def epoch_until_flushed(self, values: list[bytes], keys: list[bytes] | None) -> None:
        self.epoch += 1
        self.producer.begin_transaction()
        self.produce(values, keys, [("laminar.sink", self.tid.encode()), ("laminar.epoch", b"1")])
        self.producer.send_offsets_to_transaction(
            [TopicPartition(self.topic, 0, self.epoch)], self.metadata, 30
        )
        self.producer.flush(60)


def encoded(table: pa.Table) -> tuple[list[bytes], list[bytes]]:
    records = laminar.encode_kafka(table, key="id")
    assert records.keys is not None
    return [v for v in records.values if v is not None], [k for k in records.keys if k is not None]


@pytest.fixture(scope="module")
def sink(kafka_bootstrap: str, topic: str) -> Iterator[laminar.KafkaSink]:
    s = laminar.KafkaSink(kafka_bootstrap, topic, f"bench-{uuid.uuid4().hex[:8]}", key="id")
    s.init_transactions()
    yield s
    s.close()


class Epochs:
    def __init__(self) -> None:
        self.next = 0

    def __call__(self) -> int:
        self.next += 1
        return self.next


EPOCH = Epochs()


# -- commit latency -------------------------------------------------------------------------------


@pytest.mark.parametrize("rows", SIZES)
@pytest.mark.benchmark(group="kafka-commit-latency")
def test_commit_latency_laminar(
    benchmark: Any, sink: laminar.KafkaSink, tables: dict[int, pa.Table], rows: int, quick: bool
) -> None:
    table = tables[rows]

    def setup() -> tuple[tuple[int], dict[str, Any]]:
        epoch = EPOCH()
        sink.begin_transaction(epoch)
        sink.write(table)
        sink.prepare_transaction()
        return (epoch,), {}

    n = rounds({1_000: 50, 10_000: 30, 100_000: 10}[rows], quick)
    benchmark.pedantic(sink.commit_transaction, setup=setup, rounds=n, iterations=1)
    from_benchmark(f"commit_laminar_{rows}", benchmark, rows)


@pytest.mark.parametrize("rows", SIZES)
@pytest.mark.benchmark(group="kafka-commit-latency")
def test_commit_latency_raw_client(
    benchmark: Any,
    kafka_bootstrap: str,
    topic: str,
    tables: dict[int, pa.Table],
    rows: int,
    quick: bool,
) -> None:
    raw = RawClient(kafka_bootstrap, topic)
    values, keys = encoded(tables[rows])

    def setup() -> tuple[tuple[float], dict[str, Any]]:
        raw.epoch_until_flushed(values, keys)
        return (30.0,), {}

    n = rounds({1_000: 50, 10_000: 30, 100_000: 10}[rows], quick)
    benchmark.pedantic(raw.producer.commit_transaction, setup=setup, rounds=n, iterations=1)
    from_benchmark(f"commit_raw_{rows}", benchmark, rows)


# -- write throughput inside a transaction --------------------------------------------------------


def _in_transaction(
    benchmark: Any,
    name: str,
    begin: Callable[[], None],
    work: Callable[[], None],
    end: Callable[[], None],
    quick: bool,
) -> None:
    def setup() -> tuple[tuple[()], dict[str, Any]]:
        begin()
        return (), {}

    def run() -> None:
        work()

    timings: list[float] = []

    def timed() -> None:
        started = time.perf_counter()
        run()
        timings.append(time.perf_counter() - started)
        end()

    benchmark.pedantic(timed, setup=setup, rounds=rounds(5, quick), iterations=1)
    record(name, timings, THROUGHPUT_ROWS)


@pytest.mark.benchmark(group="kafka-write-throughput")
def test_write_laminar(
    benchmark: Any, sink: laminar.KafkaSink, tables: dict[int, pa.Table], quick: bool
) -> None:
    """Arrow → Rust encoding → produce (key and the two headers) → flush (prepare)."""
    table = tables[THROUGHPUT_ROWS]
    state = {"epoch": 0}

    def begin() -> None:
        state["epoch"] = EPOCH()
        sink.begin_transaction(state["epoch"])

    def work() -> None:
        sink.write(table)
        sink.prepare_transaction()

    _in_transaction(
        benchmark,
        "write_laminar",
        begin,
        work,
        lambda: sink.commit_transaction(state["epoch"]),
        quick,
    )


@pytest.mark.parametrize("variant", ["key_headers", "key_headers_positional", "values_only"])
@pytest.mark.benchmark(group="kafka-write-throughput")
def test_write_raw_preencoded(
    benchmark: Any,
    kafka_bootstrap: str,
    topic: str,
    tables: dict[int, pa.Table],
    variant: str,
    quick: bool,
) -> None:
    """The raw client producing bytes encoded beforehand (encoding not timed), then flush."""
    raw = RawClient(kafka_bootstrap, topic)
    values, keys = encoded(tables[THROUGHPUT_ROWS])
    headers = [("laminar.sink", raw.tid.encode()), ("laminar.epoch", b"1")]

    def work() -> None:
        if variant.startswith("key_headers"):
            raw.produce(values, keys, headers, positional=variant.endswith("positional"))
        else:
            raw.produce(values, None, None)
        raw.producer.flush(60)

    _in_transaction(
        benchmark,
        f"write_raw_{variant}",
        raw.producer.begin_transaction,
        work,
        lambda: raw.producer.commit_transaction(30),
        quick,
    )


@pytest.mark.benchmark(group="kafka-write-throughput")
def test_write_naive_python(
    benchmark: Any, kafka_bootstrap: str, topic: str, tables: dict[int, pa.Table], quick: bool
) -> None:
    """to_pylist + json.dumps + produce with the same key and headers, then flush."""
    raw = RawClient(kafka_bootstrap, topic)
    table = tables[THROUGHPUT_ROWS]
    headers = [("laminar.sink", raw.tid.encode()), ("laminar.epoch", b"1")]

    def work() -> None:
        produce = raw.producer.produce
        for row in table.to_pylist():
            value = json.dumps(row, default=str, separators=(",", ":")).encode()
            while True:
                try:
                    produce(topic, value, str(row["id"]).encode(), headers=headers)
                    break
                except BufferError:
                    raw.producer.poll(0.005)
        raw.producer.flush(60)

    _in_transaction(
        benchmark,
        "write_naive",
        raw.producer.begin_transaction,
        work,
        lambda: raw.producer.commit_transaction(30),
        quick,
    )


# -- begin, abort, whole epochs -------------------------------------------------------------


@pytest.mark.benchmark(group="kafka-begin-abort")
def test_begin_overhead(benchmark: Any, sink: laminar.KafkaSink, quick: bool) -> None:
    state = {"epoch": 0}

    def setup() -> tuple[tuple[int], dict[str, Any]]:
        if sink.transaction_state.name == "Active":
            sink.abort_transaction(state["epoch"])
        state["epoch"] = EPOCH()
        return (state["epoch"],), {}

    benchmark.pedantic(sink.begin_transaction, setup=setup, rounds=rounds(200, quick), iterations=1)
    sink.abort_transaction(state["epoch"])
    from_benchmark("begin_laminar", benchmark)


@pytest.mark.benchmark(group="kafka-begin-abort")
def test_abort_latency(
    benchmark: Any, sink: laminar.KafkaSink, tables: dict[int, pa.Table], quick: bool
) -> None:
    table = tables[1_000]

    def setup() -> tuple[tuple[int], dict[str, Any]]:
        epoch = EPOCH()
        sink.begin_transaction(epoch)
        sink.write(table)
        sink.prepare_transaction()
        return (epoch,), {}

    benchmark.pedantic(sink.abort_transaction, setup=setup, rounds=rounds(30, quick), iterations=1)
    from_benchmark("abort_laminar_1000", benchmark, 1_000)


@pytest.mark.benchmark(group="kafka-epoch-vs-idempotent")
def test_epoch_transactional(
    benchmark: Any, sink: laminar.KafkaSink, tables: dict[int, pa.Table], quick: bool
) -> None:
    """A whole 10 K-row epoch: begin, write, marker, flush, commit."""
    table = tables[10_000]

    def epoch() -> None:
        e = EPOCH()
        sink.begin_transaction(e)
        sink.write(table)
        sink.commit_transaction(e)

    benchmark.pedantic(epoch, rounds=rounds(20, quick), iterations=1)
    from_benchmark("epoch_transactional_10000", benchmark, 10_000)


@pytest.mark.benchmark(group="kafka-epoch-vs-idempotent")
def test_epoch_idempotent(
    benchmark: Any, kafka_bootstrap: str, topic: str, tables: dict[int, pa.Table], quick: bool
) -> None:
    """The same 10 K rows, encoded by Laminar, through a plain idempotent producer + flush."""
    raw = RawClient(kafka_bootstrap, topic, transactional=False)
    table = tables[10_000]
    headers = [("laminar.sink", raw.tid.encode()), ("laminar.epoch", b"1")]

    def epoch() -> None:
        values, keys = encoded(table)
        raw.produce(values, keys, headers)
        raw.producer.flush(60)

    benchmark.pedantic(epoch, rounds=rounds(20, quick), iterations=1)
    from_benchmark("epoch_idempotent_10000", benchmark, 10_000)


# -- summary ----------------------------------------------------------------------------------


@pytest.fixture(scope="module", autouse=True)
def summary(pytestconfig: pytest.Config) -> Iterator[None]:
    yield
    if not RESULTS:
        return
    ms = 1000.0
    lines = ["", "kafka sink summary (Tansu unless LAMINAR_KAFKA_BOOTSTRAP):"]
    for rows in SIZES:
        ours, raw = RESULTS.get(f"commit_laminar_{rows}"), RESULTS.get(f"commit_raw_{rows}")
        if ours and raw:
            lines.append(
                f"  commit {rows:>7,} rows: laminar p50 {ours['p50_s'] * ms:6.2f} ms p99 "
                f"{ours['p99_s'] * ms:6.2f} ms | raw p50 {raw['p50_s'] * ms:6.2f} ms p99 "
                f"{raw['p99_s'] * ms:6.2f} ms | p50 diff "
                f"{(ours['p50_s'] - raw['p50_s']) * ms:+.2f} ms (goal <= +5)"
            )
    tput = {k: v["rows"] / v["min_s"] for k, v in RESULTS.items() if k.startswith("write_")}
    for name, value in tput.items():
        lines.append(f"  {name:<28} {value:>12,.0f} rows/s (best round, write + flush)")
    if "write_laminar" in tput:
        for other, goal in (
            ("write_raw_key_headers", ">= 0.8"),
            ("write_raw_key_headers_positional", ">= 0.8 (the fastest call form)"),
            ("write_raw_values_only", "(no headers: reference)"),
            ("write_naive", ">= 5"),
        ):
            if other in tput:
                lines.append(
                    f"  ratio laminar / {other:<34} "
                    f"{tput['write_laminar'] / tput[other]:6.2f}x  goal {goal}"
                )
    if "begin_laminar" in RESULTS:
        b = RESULTS["begin_laminar"]
        lines.append(
            f"  begin: p50 {b['p50_s'] * 1e6:.1f} µs p99 {b['p99_s'] * 1e6:.1f} µs (goal < 50 µs)"
        )
    if "abort_laminar_1000" in RESULTS:
        a = RESULTS["abort_laminar_1000"]
        lines.append(
            f"  abort (1 K rows flushed): p50 {a['p50_s'] * ms:.2f} ms "
            f"p99 {a['p99_s'] * ms:.2f} ms (goal < 50 ms)"
        )
    t, i = RESULTS.get("epoch_transactional_10000"), RESULTS.get("epoch_idempotent_10000")
    if t and i:
        lines.append(
            f"  10 K-row epoch: transactional p50 {t['p50_s'] * ms:.1f} ms vs idempotent "
            f"{i['p50_s'] * ms:.1f} ms: overhead {(t['p50_s'] - i['p50_s']) * ms:+.1f} ms per epoch"
        )
    capture = pytestconfig.pluginmanager.get_plugin("capturemanager")
    if capture is None:
        print("\n".join(lines))
    else:
        with capture.global_and_fixture_disabled():  # past pytest's capture: the point of the run
            print("\n".join(lines))
    out = Path(".benchmarks")
    out.mkdir(exist_ok=True)
    (out / "kafka_summary.json").write_text(json.dumps(RESULTS, indent=2))
