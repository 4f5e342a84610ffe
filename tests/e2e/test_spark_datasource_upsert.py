"""``writeStream.format("laminar")`` in upsert mode (``postgres.mode=upsert``, ``postgres.key``,
issue 29) over a real Spark Connect server (its own, with the DSN in its environment and task
retries on) and a real PostgreSQL: the tasks are the two-phase participants, each upserting its
partition of a streaming aggregation in its own prepared transaction.

Spark gives Python data sources no update mode (its ``PythonWriteBuilder`` does not implement
``SupportsStreamingUpdateAsAppend``: ``outputMode("update")`` fails as the query starts, "laminar
does not support Update mode"), so the aggregation runs in complete mode: each batch carries the
whole result table, and upserted by key the table becomes it (docs/spark.md, "Upsert mode").

- The aggregation, with a task worker SIGKILLed after its PREPARE and the ``commit`` process
  SIGKILLed after the decision, restarted, then fed new files and restarted again (through the
  plain ``format("laminar")``): the table ends exactly equal to the aggregate a batch query
  computes over the same files.
- Complete mode without upsert is refused as the query starts (it asks to overwrite), and so is
  update mode, by Spark.
- Keys spread over several partitions of a batch (not an aggregation's output): refused with
  the partitions named and the fix, where before the batch hung (the second partition waited
  for the first one's prepared transaction, which only the decision ends).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

import laminar.spark
from laminar.embedded import SparkConnectServer
from tests.e2e.spark_helpers import (
    DS_DSN_VAR,
    client,
    pg_epoch,
    wait_for,
    wait_terminated,
    write_json_files,
)
from tests.e2e.test_spark_datasource import FaultySource
from tests.e2e.test_spark_postgres_upsert import aggregate, table_rows

pytestmark = pytest.mark.e2e

DSN_VAR = DS_DSN_VAR


@pytest.fixture(scope="module")
def upsert_spark(ds_server: SparkConnectServer) -> Iterator[Any]:
    with client(ds_server.remote_url) as spark:
        laminar.spark.register(spark)
        spark.dataSource.register(FaultySource)
        yield spark


def upsert_options(table: str, key: str) -> dict[str, str]:
    return {
        "postgres.dsn.env": DSN_VAR,
        "postgres.table": table,
        "postgres.mode": "upsert",
        "postgres.key": key,
    }


def leftovers(dsn: str, table: str) -> tuple[list[Any], list[Any]]:
    """What the table's sink left prepared, and its group's unconcluded decisions."""
    with psycopg.connect(dsn) as conn:
        prepared = conn.execute(
            "SELECT gid FROM pg_prepared_xacts WHERE gid LIKE %s", (f"%{table}%",)
        ).fetchall()
        open_dt = conn.execute(
            "SELECT dtid, state FROM laminar.dt_state WHERE dtid LIKE %s", (f"%{table}%",)
        ).fetchall()
    return prepared, open_dt


def test_an_aggregation_through_the_data_source_is_the_batch_aggregate(
    upsert_spark: Any, pg_dsn: str, table_name: str, tmp_path: Path
) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(
            f"CREATE TABLE {table_name} (user_id bigint PRIMARY KEY, orders bigint NOT NULL,"
            " total double precision NOT NULL)"
        )
    source = tmp_path / "incoming"
    checkpoint = str(tmp_path / "checkpoint")
    total = write_json_files(source, 0, files=4, rows_per_file=50)
    faults = {  # batch 1: partition 1's worker killed after its PREPARE (Spark retries the task),
        # then the commit process killed after the decision (the query fails)
        "kill_task": str(tmp_path / "killed-task"),
        "kill_commit": str(tmp_path / "killed-commit"),
    }

    def start(fmt: str = "laminar_faulty") -> Any:
        orders = (
            upsert_spark.readStream.schema("id long, amount double")
            .option("maxFilesPerTrigger", 1)
            .json(str(source))
        )
        writer = (
            aggregate(orders)
            .writeStream.outputMode("complete")
            .format(fmt)
            .option("checkpointLocation", checkpoint)
            .option("test.faults", json.dumps(faults))
        )
        for key, value in upsert_options(table_name, "user_id").items():
            writer = writer.option(key, value)
        return writer.trigger(availableNow=True).start()

    sink_id = f"public.{table_name}"
    error = wait_terminated(start(), timeout=240)
    assert error is not None, "the query fails when its commit process dies"
    assert Path(faults["kill_task"]).exists()
    assert Path(faults["kill_commit"]).exists()
    # Spark then calls abort, which completes the decided batch (never rolls it back)
    assert leftovers(pg_dsn, table_name) == ([], []), "batch 1 completed by Spark's abort"
    assert pg_epoch(pg_dsn, sink_id) == 1

    assert wait_terminated(start(), timeout=240) is None  # batch 1 replayed: skipped; 2 and 3
    assert pg_epoch(pg_dsn, sink_id) == 3
    total = write_json_files(source, total, files=2, rows_per_file=50)
    # stopped and restarted, through the plain data source: the 2 new files
    assert wait_terminated(start("laminar"), timeout=240) is None
    assert pg_epoch(pg_dsn, sink_id) == 5

    batch = aggregate(upsert_spark.read.schema("id long, amount double").json(str(source)))
    expected = sorted((int(r[0]), int(r[1]), float(r[2])) for r in batch.collect())
    assert len(expected) == 7
    assert sum(n for _, n, _ in expected) == total
    assert table_rows(pg_dsn, table_name) == expected
    assert leftovers(pg_dsn, table_name) == ([], []), "nothing left prepared or undecided"


@pytest.mark.parametrize(
    ("mode", "upsert", "message"),
    [
        ("complete", False, "'complete' with option postgres.mode=upsert"),
        ("update", True, "does not support Update mode"),
    ],
)
def test_modes_the_data_source_cannot_write_are_refused_as_the_query_starts(
    upsert_spark: Any, tmp_path: Path, mode: str, upsert: bool, message: str
) -> None:
    orders = upsert_spark.readStream.format("rate-micro-batch").option("rowsPerBatch", 10).load()
    writer = (
        aggregate(orders.selectExpr("value AS id", "1.0 AS amount"))
        .writeStream.outputMode(mode)
        .format("laminar")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .option("postgres.dsn.env", DSN_VAR)
        .option("postgres.table", "never_written")
    )
    if upsert:
        writer = writer.option("postgres.mode", "upsert").option("postgres.key", "user_id")
    with pytest.raises(Exception, match=message):
        writer.start().awaitTermination(120)


def test_keys_in_several_partitions_of_a_batch_are_refused_not_a_hang(
    upsert_spark: Any, pg_dsn: str, table_name: str, tmp_path: Path
) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table_name} (id bigint PRIMARY KEY, v bigint NOT NULL)")
    writer = (
        upsert_spark.readStream.format("rate-micro-batch")
        .option("rowsPerBatch", 40)
        .option("numPartitions", 4)  # every partition holds every key 0..4
        .load()
        .selectExpr("value % 5 AS id", "value AS v")
        .writeStream.format("laminar")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
    )
    for key, value in upsert_options(table_name, "id").items():
        writer = writer.option(key, value)
    query = writer.trigger(processingTime="1 second").start()
    error = wait_terminated(query, timeout=240)  # before: never, the batch waited for ever
    assert error is not None
    message = str(error)
    assert "DataError" in message, message
    assert "of the same epoch wrote" in message, message
    assert "repartition" in message, message
    with psycopg.connect(pg_dsn) as conn:
        assert conn.execute(f"SELECT count(*) FROM {table_name}").fetchone() == (0,)
    # Spark's abort of the failed batch rolled its partitions back
    wait_for(
        lambda: leftovers(pg_dsn, table_name) == ([], []),
        timeout=60,
        what="the failed batch's rollback",
    )
