"""The atomic group (docs/protocol.md §3) against the same two sinks committed independently.

- per-epoch overhead: one small epoch through ``exactly_once(kafka, pg)`` minus one through
  ``exactly_once(kafka)`` plus one through ``exactly_once(pg)`` (same rows, same servers); the
  goal is at most 5 ms on loopback (F-E2E-002's budget for a commit is 50-200 ms);
- throughput of the atomic pair (rows/s) with ``redo="replay"`` and ``redo="log"``;
- recovery time after a crash between the decision and the Kafka commit, by each path: EndTxn
  (protocol-level completion), the redo log, and Spark's replay;
- scale-out throughput (docs/protocol.md §4): one batch written by 4 partition tasks vs the
  single-process atomic path on the same rows.

``LAMINAR_BENCH_QUICK=1`` (``./dev test``) shrinks the batches. A summary is printed at the end.
"""

from __future__ import annotations

import os
import statistics
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pyarrow as pa
import pytest

import laminar
from tests.integration.atomic_helpers import abort_prepared, killed, run_writer

QUICK = os.environ.get("LAMINAR_BENCH_QUICK") == "1"
SMALL_ROWS = 100
THROUGHPUT_ROWS = 10_000 if QUICK else 100_000
EPOCHS_PER_ROUND = 5 if QUICK else 20
RESULTS: dict[str, float] = {}


def batch(rows: int, epoch: int = 0) -> pa.Table:
    ids = [epoch * 10_000_000 + i for i in range(rows)]
    return pa.table({"id": ids, "name": [f"row-{i}" for i in ids], "epoch": [epoch] * rows})


class World:
    def __init__(self, broker: Any, bootstrap: str, dsn: str) -> None:
        self.broker, self.bootstrap, self.dsn = broker, bootstrap, dsn

    def fresh(self) -> tuple[str, str]:
        name = f"bench_atomic_{uuid.uuid4().hex[:8]}"
        self.broker.create_topic(name, partitions=1)
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(f"CREATE TABLE {name} (id bigint, name text, epoch bigint)")
        return name, name

    def kafka(self, topic: str) -> laminar.KafkaSink:
        return laminar.KafkaSink(self.bootstrap, topic, f"tid-{topic}", key="id")

    def pg(self, table: str) -> laminar.PostgresSink:
        return laminar.PostgresSink(self.dsn, table)


@pytest.fixture(scope="module")
def world(kafka_broker: Any, kafka_bootstrap: str, pg_dsn: str) -> Iterator[World]:
    yield World(kafka_broker, kafka_bootstrap, pg_dsn)
    if RESULTS:
        print("\nbench_atomic summary:")
        for name, value in RESULTS.items():
            print(f"  {name:<48} {value:10.2f}")


def per_epoch_ms(writer: laminar.ExactlyOnceWriter, rows: int, epochs: int) -> float:
    writer.write_epoch(0, batch(rows))  # start-up out of the measure
    timings = []
    for epoch in range(1, epochs + 1):
        started = time.perf_counter()
        writer.write_epoch(epoch, batch(rows, epoch))
        timings.append(time.perf_counter() - started)
    writer.close()
    return statistics.median(timings) * 1000


def bench_atomic_overhead_per_epoch(world: World, benchmark: Any) -> None:
    def measure() -> float:
        topic, _table = world.fresh()
        kafka_alone = per_epoch_ms(
            laminar.exactly_once(world.kafka(topic)), SMALL_ROWS, EPOCHS_PER_ROUND
        )
        _topic2, table2 = world.fresh()
        pg_alone = per_epoch_ms(
            laminar.exactly_once(world.pg(table2)), SMALL_ROWS, EPOCHS_PER_ROUND
        )
        topic3, table3 = world.fresh()
        atomic = per_epoch_ms(
            laminar.exactly_once(world.kafka(topic3), world.pg(table3)),
            SMALL_ROWS,
            EPOCHS_PER_ROUND,
        )
        RESULTS["kafka alone, ms/epoch (100 rows)"] = kafka_alone
        RESULTS["postgres alone, ms/epoch (100 rows)"] = pg_alone
        RESULTS["atomic pair, ms/epoch (100 rows)"] = atomic
        RESULTS["atomic overhead, ms/epoch"] = atomic - (kafka_alone + pg_alone)
        return atomic - (kafka_alone + pg_alone)

    overhead = benchmark.pedantic(measure, rounds=1, iterations=1)
    assert overhead < 50, f"atomic overhead {overhead:.1f} ms per epoch"


@pytest.mark.parametrize("redo", ["replay", "log"])
def bench_atomic_throughput(world: World, benchmark: Any, redo: str) -> None:
    topic, table = world.fresh()
    writer = laminar.exactly_once(world.kafka(topic), world.pg(table), redo=redo)
    writer.write_epoch(0, batch(10))
    data = batch(THROUGHPUT_ROWS, 1)
    epochs = iter(range(1, 10_000))

    def one() -> None:
        writer.write_epoch(next(epochs), data)

    benchmark.pedantic(one, rounds=3, iterations=1)
    writer.close()
    seconds = statistics.median(benchmark.stats.stats.data)
    RESULTS[f"atomic throughput redo={redo}, rows/s"] = THROUGHPUT_ROWS / seconds


SCALE_OUT_PARTS = 4


def _scale_out_run(data: pa.Table, parts: int) -> Any:
    """Partition tasks in threads, like Spark tasks on one executor's cores."""
    from concurrent.futures import ThreadPoolExecutor

    step = -(-data.num_rows // parts)
    slices = [data.slice(p * step, step) for p in range(parts)]

    def run(task: Any) -> list[Any]:
        with ThreadPoolExecutor(parts) as pool:
            futures = [
                pool.submit(task.write_partition, p, slices[p].to_batches()) for p in range(parts)
            ]
            return [r for f in futures for r in f.result()]

    return run


@pytest.mark.parametrize("mode", ["single_process", "scale_out"])
def bench_scale_out_throughput(world: World, benchmark: Any, mode: str) -> None:
    """A multi-partition batch through scale-out mode (4 partition tasks in threads, each a
    two-phase participant in both stores) vs the single-process atomic path, same rows. On one
    machine the tasks share its cores and servers: this measures the protocol's cost and the
    parallelism available, not a cluster's scaling."""
    topic, table = world.fresh()
    scaled = mode == "scale_out"
    writer = laminar.exactly_once(world.kafka(topic), world.pg(table), scale_out=scaled)
    data = batch(THROUGHPUT_ROWS, 1)
    run = _scale_out_run(data, SCALE_OUT_PARTS)
    epochs = iter(range(1, 10_000))
    if scaled:
        writer.write_epoch_scaled(0, _scale_out_run(batch(10), SCALE_OUT_PARTS))
    else:
        writer.write_epoch(0, batch(10))

    def one() -> None:
        if scaled:
            writer.write_epoch_scaled(next(epochs), run)
        else:
            writer.write_epoch(next(epochs), data)

    benchmark.pedantic(one, rounds=3, iterations=1)
    writer.close()
    seconds = statistics.median(benchmark.stats.stats.data)
    what = f"{SCALE_OUT_PARTS} partitions" if scaled else "single process"
    RESULTS[f"atomic {what} ({THROUGHPUT_ROWS} rows), rows/s"] = THROUGHPUT_ROWS / seconds


@pytest.mark.parametrize("path", ["end_txn", "redo_log", "replay"])
def bench_atomic_recovery_time(world: World, benchmark: Any, tmp_path: Path, path: str) -> None:
    """Start-up of a writer after a crash between the decision and the Kafka commit."""
    topic, table = world.fresh()
    tid = f"tid-{topic}"
    redo = "log" if path == "redo_log" else "replay"
    argv = [world.bootstrap, topic, world.dsn, table, tid, "3", str(tmp_path / "ckpt"), redo]
    assert killed(run_writer(argv, "atomic.after_decision@2"))
    if path != "end_txn":
        abort_prepared(world.bootstrap, tid)
    writer = laminar.exactly_once(
        laminar.KafkaSink(world.bootstrap, topic, tid, key="id"), world.pg(table), redo=redo
    )

    def recover() -> None:
        # start-up (fence + recovery); the replay path also writes the replayed batch
        writer.write_epoch(1, batch(20, 1))

    benchmark.pedantic(recover, rounds=1, iterations=1)
    writer.close()
    RESULTS[f"recovery after a crash, {path}, ms"] = benchmark.stats.stats.data[0] * 1000
