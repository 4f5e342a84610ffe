"""Spark Connect → PostgreSQL in upsert mode: an update-mode streaming aggregation (each
micro-batch carries the new totals of the keys that changed) written through foreachBatch into
``PostgresSink(mode="upsert", key=...)``, its worker SIGKILLed after a commit, restarted from the
checkpoint, stopped, fed new files and restarted again; the table ends exactly equal to the
aggregate a batch query computes over the same files.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest

import laminar
import laminar.spark
from tests.e2e.spark_helpers import (
    ArmedForeachBatch,
    pg_epoch,
    restarting,
    wait_terminated,
    write_json_files,
)

pytestmark = pytest.mark.e2e


def aggregate(frame: Any) -> Any:
    """Per user (id % 7): the number of orders and their total amount."""
    from pyspark.sql import functions as f

    return (
        frame.withColumn("user_id", f.col("id") % 7)
        .groupBy("user_id")
        .agg(f.count("*").alias("orders"), f.sum("amount").alias("total"))
    )


def table_rows(dsn: str, table: str) -> list[tuple[int, int, float]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(f"SELECT user_id, orders, total FROM {table} ORDER BY 1").fetchall()
    return [(int(u), int(n), float(t)) for u, n, t in rows]


def test_update_mode_aggregation_upserts_exactly_the_batch_aggregate(
    spark_client: Any, pg_dsn: str, table_name: str, tmp_path: Path
) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(
            f"CREATE TABLE {table_name} (user_id bigint PRIMARY KEY, orders bigint NOT NULL,"
            " total double precision NOT NULL)"
        )
    sink = laminar.PostgresSink(pg_dsn, table_name, mode="upsert", key="user_id")
    source = tmp_path / "incoming"
    checkpoint = str(tmp_path / "checkpoint")
    total = write_json_files(source, 0, files=4, rows_per_file=50)
    writer = laminar.exactly_once(sink)

    def start(function: Any) -> Any:
        orders = (
            spark_client.readStream.schema("id long, amount double")
            .option("maxFilesPerTrigger", 1)
            .json(str(source))
        )
        return restarting(
            aggregate(orders)
            .writeStream.outputMode("update")
            .foreachBatch(function)
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start
        )

    real = laminar.spark.foreach_batch(writer, checkpoint_location=checkpoint)
    # The worker dies right after committing epoch 2: Spark replays it on restart; it is skipped.
    error = wait_terminated(start(ArmedForeachBatch(real, "postgres.after_commit@3")))
    assert error is not None
    assert "Python worker exited unexpectedly" in str(error), error
    assert pg_epoch(pg_dsn, sink.sink_id) == 2
    assert wait_terminated(start(real)) is None  # restarted from the checkpoint: files 4
    assert pg_epoch(pg_dsn, sink.sink_id) == 3

    total = write_json_files(source, total, files=2, rows_per_file=50)
    assert wait_terminated(start(real)) is None  # stopped and restarted: the 2 new files
    assert pg_epoch(pg_dsn, sink.sink_id) == 5

    batch = aggregate(spark_client.read.schema("id long, amount double").json(str(source)))
    expected = sorted((int(r[0]), int(r[1]), float(r[2])) for r in batch.collect())
    assert len(expected) == 7
    assert sum(n for _, n, _ in expected) == total
    assert table_rows(pg_dsn, table_name) == expected
