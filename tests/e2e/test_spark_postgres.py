"""Spark Connect → PostgreSQL through ``laminar.spark``: a rate source and a file source, stop
and restart from the checkpoint, the foreachBatch worker SIGKILLed at protocol steps, every row
exactly once (by count and key).

All tests share the session's Spark Connect server (a client session per module).
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
    assert_exactly_once,
    pg_epoch,
    pg_ids,
    start_files_query,
    wait_for,
    wait_terminated,
    write_json_files,
)


def create_orders(dsn: str, table: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table} (id bigint NOT NULL, amount double precision)")


def rate_orders(spark: Any, rows_per_second: int = 40) -> Any:
    return (
        spark.readStream.format("rate")
        .option("rowsPerSecond", rows_per_second)
        .option("numPartitions", 2)
        .load()
        .selectExpr("value AS id", "CAST(value % 97 AS double) + 0.5 AS amount")
    )


def test_rate_source_exactly_once_across_stop_and_restart(
    spark_client: Any, pg_dsn: str, table_name: str, tmp_path: Path
) -> None:
    create_orders(pg_dsn, table_name)
    sink = laminar.PostgresSink(pg_dsn, table_name)
    checkpoint = str(tmp_path / "checkpoint")
    runs = []
    for _ in range(2):
        query = laminar.spark.start(
            rate_orders(spark_client),
            sink,
            checkpoint_location=checkpoint,
            trigger="500 milliseconds",
            check_server=not runs,  # the probe once is enough
        )
        try:
            target = (pg_epoch(pg_dsn, sink.sink_id) or 0) + 3
            wait_for(
                lambda t=target: (pg_epoch(pg_dsn, sink.sink_id) or 0) >= t,
                query=query,
                what=f"epoch {target}",
            )
        finally:
            query.stop()
        runs.append(query)

    # The second run continues the first: same query id (same checkpoint), later epochs.
    assert runs[0].id == runs[1].id
    ids = pg_ids(pg_dsn, table_name)
    # The rate source numbers rows 0, 1, 2, … without gaps: every committed batch is a range.
    assert_exactly_once(ids, set(range(max(ids) + 1)), "postgres")
    assert pg_epoch(pg_dsn, sink.sink_id) >= 6


def test_file_source_available_now_then_new_files_only(
    spark_client: Any, pg_dsn: str, table_name: str, tmp_path: Path
) -> None:
    create_orders(pg_dsn, table_name)
    sink = laminar.PostgresSink(pg_dsn, table_name)
    source = tmp_path / "incoming"
    checkpoint = str(tmp_path / "checkpoint")
    next_id = write_json_files(source, 0, files=4, rows_per_file=250)

    def run() -> Any:
        orders = (
            spark_client.readStream.schema("id long, amount double")
            .option("maxFilesPerTrigger", 1)
            .json(str(source))
        )
        return laminar.spark.start(
            orders,
            postgres=sink,
            checkpoint_location=checkpoint,
            trigger="availableNow",
            check_server=False,
        )

    assert wait_terminated(run()) is None
    assert_exactly_once(pg_ids(pg_dsn, table_name), set(range(next_id)), "after 4 files")
    assert pg_epoch(pg_dsn, sink.sink_id) == 3  # one file per epoch: epochs 0..3

    more = write_json_files(source, next_id, files=2, rows_per_file=250)
    assert wait_terminated(run()) is None
    assert_exactly_once(pg_ids(pg_dsn, table_name), set(range(more)), "after 6 files")
    assert pg_epoch(pg_dsn, sink.sink_id) == 5


@pytest.mark.parametrize(
    "point",
    [
        # rows copied, COMMIT not sent: the transaction dies with the process; the replay writes
        "postgres.before_commit@3",
        # committed, but Spark never heard back: the replay of that batch must be skipped
        "postgres.after_commit@3",
    ],
)
def test_worker_sigkilled_mid_epoch_then_query_restarted(
    spark_client: Any, pg_dsn: str, table_name: str, tmp_path: Path, point: str
) -> None:
    create_orders(pg_dsn, table_name)
    sink = laminar.PostgresSink(pg_dsn, table_name)
    source = tmp_path / "incoming"
    checkpoint = str(tmp_path / "checkpoint")
    total = write_json_files(source, 0, files=6, rows_per_file=100)
    writer = laminar.exactly_once(sink)

    def start(function: Any) -> Any:
        return start_files_query(spark_client, source, checkpoint, function)

    real = laminar.spark.foreach_batch(writer, checkpoint_location=checkpoint)
    crashed = start(ArmedForeachBatch(real, point))
    error = wait_terminated(crashed)
    assert error is not None
    assert "Python worker exited unexpectedly" in str(error), error
    # The third epoch (2) was the one in flight.
    before = pg_ids(pg_dsn, table_name)
    expected_epoch = 2 if point.startswith("postgres.after_commit") else 1
    assert pg_epoch(pg_dsn, sink.sink_id) == expected_epoch
    assert len(before) == (expected_epoch + 1) * 100

    assert wait_terminated(start(real)) is None
    assert_exactly_once(pg_ids(pg_dsn, table_name), set(range(total)), "after the restart")
    assert pg_epoch(pg_dsn, sink.sink_id) == 5
