"""Laminar's exactly-once Kafka foreachBatch against Spark's own Kafka sink, its at-least-once peer.

Spark's ``df.write.format("kafka")`` (``spark-sql-kafka-0-10``, fetched by bootstrap's Maven
step) is what a Spark user writes to Kafka without Laminar: the JVM's producer, no transaction,
no epoch bookkeeping — a replayed batch is written twice. Each is called the way Spark's Python
worker calls a foreachBatch function — ``fn(df, batch_id)`` with the micro-batch — from this
process, on the session's Spark Connect server and Apache Kafka broker, the same rows (JSON
values, the ``id`` as key), after one warm-up epoch each.

A summary is printed and written to ``.benchmarks/spark_kafka_peer_summary.json``: per-epoch p50
of both and Laminar's cost over the peer (exactly-once is not free: a transaction, the epoch
marker, and the batch crossing to Python). ``LAMINAR_BENCH_QUICK=1`` (``./dev test``) shrinks
the batches and the rounds.
"""

from __future__ import annotations

import itertools
import json
import os
import statistics
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import laminar
import laminar.spark
from laminar.kafka.log import read_committed

QUICK = os.environ.get("LAMINAR_BENCH_QUICK") == "1"
EPOCH_ROWS = 2_000 if QUICK else 50_000
EPOCH_ROUNDS = 3 if QUICK else 10
RESULTS: dict[str, dict[str, float]] = {}


class SparkKafkaSink:
    """Spark's own Kafka sink inside foreachBatch: at least once (no transaction, no epochs)."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.bootstrap, self.topic = bootstrap, topic

    def __call__(self, df: Any, batch_id: int) -> None:
        (
            df.selectExpr("CAST(id AS STRING) AS key", "to_json(struct(*)) AS value")
            .write.format("kafka")
            .option("kafka.bootstrap.servers", self.bootstrap)
            .option("kafka.acks", "all")
            .option("topic", self.topic)
            .save()
        )


#: The orders of an epoch: ids unique across epochs, a customer, an amount.
ORDER_COLUMNS = (
    "id",
    "concat('customer-', CAST(id % 50 AS string)) AS customer",
    "id * 0.5 AS amount",
)


class World:
    def __init__(self, spark: Any, broker: Any) -> None:
        self.spark, self.broker = spark, broker
        self.bootstrap: str = broker.bootstrap_servers

    def fresh(self) -> str:
        name = f"bench_peer_{uuid.uuid4().hex[:8]}"
        self.broker.create_topic(name, partitions=2)
        return name

    def batch(self, rows: int, epoch: int) -> Any:
        first = epoch * 10_000_000
        return self.spark.range(first, first + rows, 1, 2).selectExpr(*ORDER_COLUMNS)


@pytest.fixture(scope="module")
def world(spark_remote: str, kafka_broker: Any) -> Iterator[World]:
    from pyspark.sql import SparkSession

    session = SparkSession.builder.remote(spark_remote).create()
    try:
        yield World(session, kafka_broker)
    finally:
        session.stop()
    _summary()


@pytest.mark.parametrize("writer", ["spark_kafka_sink", "laminar"])
def bench_spark_kafka_sink_vs_laminar(world: World, benchmark: Any, writer: str) -> None:
    """One epoch of EPOCH_ROWS orders per round, through Spark's Kafka sink or Laminar's
    foreachBatch; the micro-batch is built (lazily: Spark runs it inside the call) before each
    round, outside the timing."""
    topic = world.fresh()
    fn: Any = (
        SparkKafkaSink(world.bootstrap, topic)
        if writer == "spark_kafka_sink"
        else laminar.spark.foreach_batch(
            laminar.exactly_once(
                laminar.KafkaSink(
                    world.bootstrap, topic, f"tid-{topic}", key="id", init_timeout_s=20
                )
            )
        )
    )
    fn(world.batch(100, 0), 0)  # warm-up: connections, init_transactions, the JVM's producer
    epochs = itertools.count(1)

    def next_epoch() -> tuple[tuple[Any, int], dict[str, Any]]:
        epoch = next(epochs)
        return (world.batch(EPOCH_ROWS, epoch), epoch), {}

    benchmark.pedantic(fn, setup=next_epoch, rounds=EPOCH_ROUNDS, iterations=1)
    if writer == "laminar":
        fn.writer.close()
    times = list(benchmark.stats.stats.data)
    RESULTS[writer] = {
        "rows": EPOCH_ROWS,
        "p50_s": statistics.median(times),
        "min_s": min(times),
        "rounds": len(times),
    }
    # Every row written: Spark's sink once per call (at least once), Laminar once per epoch.
    assert len(read_committed(world.bootstrap, topic)) == 100 + EPOCH_ROUNDS * EPOCH_ROWS


def _summary() -> None:
    ours, peer = RESULTS.get("laminar"), RESULTS.get("spark_kafka_sink")
    if not (ours and peer):
        return
    ratio = ours["p50_s"] / peer["p50_s"]
    RESULTS["laminar_over_spark_kafka_sink"] = {"ratio": ratio}
    ms = 1000.0
    print(
        f"\nSpark → Kafka, epoch of {int(ours['rows']):,} rows (Spark Connect, Apache Kafka): "
        f"laminar (exactly once) p50 {ours['p50_s'] * ms:.1f} ms | Spark's format('kafka') "
        f"(at least once) p50 {peer['p50_s'] * ms:.1f} ms | ratio {ratio:.2f}x"
    )
    out = Path(".benchmarks")
    out.mkdir(exist_ok=True)
    (out / "spark_kafka_peer_summary.json").write_text(json.dumps(RESULTS, indent=2))
