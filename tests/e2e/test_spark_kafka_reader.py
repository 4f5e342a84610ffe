"""A reader no one here wrote: Spark's own Kafka source (``spark-sql-kafka-0-10``, fetched by
bootstrap's Maven step) reads the topic Laminar's Kafka sink wrote through a crash and a restart,
with ``kafka.isolation.level=read_committed``, and finds every record exactly once.

The foreachBatch worker is SIGKILLed with an epoch's records flushed to the broker but not
committed (``kafka.after_flush``); the restarted query's producer aborts that attempt and writes
the epoch again. The same read with ``read_uncommitted`` sees the aborted attempt's records too:
the log really holds them, and only the isolation level keeps them out.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import laminar
import laminar.spark
from tests.e2e.spark_helpers import (
    ArmedForeachBatch,
    assert_exactly_once,
    kafka_ids,
    start_files_query,
    wait_terminated,
    write_json_files,
)

FILES, ROWS_PER_FILE = 4, 100


def spark_reads(spark: Any, bootstrap: str, topic: str, isolation: str) -> list[dict[str, Any]]:
    """Every record of ``topic`` as Spark's Kafka source returns it (a batch read, earliest to
    latest), its value parsed: the rows with their partition and offset."""
    frame = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("endingOffsets", "latest")
        .option("kafka.isolation.level", isolation)
        .load()
        .selectExpr("CAST(key AS STRING) AS key", "CAST(value AS STRING) AS value", "partition")
    )
    return [
        {**json.loads(row["value"]), "key": row["key"], "partition": row["partition"]}
        for row in frame.collect()
    ]


def test_spark_reads_every_record_exactly_once_after_a_crash_and_restart(
    spark_client: Any, kafka_broker: Any, topic_name: str, unique_name: Any, tmp_path: Path
) -> None:
    kafka_broker.create_topic(topic_name, partitions=2)
    bootstrap = kafka_broker.bootstrap_servers
    sink = laminar.KafkaSink(
        bootstrap, topic_name, unique_name("tx"), key="id", commit_timeout_s=10, init_timeout_s=20
    )
    source, checkpoint = tmp_path / "incoming", str(tmp_path / "checkpoint")
    total = write_json_files(source, 0, files=FILES, rows_per_file=ROWS_PER_FILE)
    real = laminar.spark.foreach_batch(laminar.exactly_once(sink), checkpoint_location=checkpoint)

    crashed = wait_terminated(
        start_files_query(
            spark_client, source, checkpoint, ArmedForeachBatch(real, "kafka.after_flush@2")
        )
    )
    assert crashed is not None
    assert "Python worker exited unexpectedly" in str(crashed), crashed
    assert wait_terminated(start_files_query(spark_client, source, checkpoint, real)) is None

    rows = spark_reads(spark_client, bootstrap, topic_name, "read_committed")
    assert_exactly_once([r["id"] for r in rows], set(range(total)), "Spark read_committed")
    assert all(r["key"] == str(r["id"]) for r in rows)
    assert Counter(r["partition"] for r in rows).keys() == {0, 1}
    # The same records, by laminar.kafka.log's own replay of the commit markers.
    assert sorted(kafka_ids(bootstrap, topic_name)) == sorted(r["id"] for r in rows)
    # The aborted attempt (epoch 1: one file's rows, flushed before the kill) is in the log:
    # read_uncommitted returns it, so read_committed's answer above is the broker's filtering.
    uncommitted = [
        r["id"] for r in spark_reads(spark_client, bootstrap, topic_name, "read_uncommitted")
    ]
    twice = {i for i, n in Counter(uncommitted).items() if n == 2}
    assert len(uncommitted) == total + ROWS_PER_FILE
    assert len(twice) == ROWS_PER_FILE
