"""Scale-out mode over a real Spark Connect server: a batch spanning several Spark partitions is
written by the server's tasks (``mapInArrow``) as two-phase participants, and this process (the
foreachBatch caller) decides. Exactly once in PostgreSQL and among Kafka's committed records."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

import laminar
from laminar.protocol.scaleout import RESULT_DDL, ScaleOutTask
from laminar.spark import ForeachBatchWriter
from tests.e2e.spark_helpers import assert_exactly_once, kafka_ids, pg_ids

try:  # the failing task wrapper below travels by value to the server's Python workers
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
except ImportError:  # pragma: no cover - pyspark is in the dev extras
    pass

ROWS = 200_000
PARTS = 4


class FailOnce:
    """A task that fails in partition 2 the first time any attempt reaches it (a marker file on
    the shared machine), after partitions that ran before it prepared their participants."""

    def __init__(self, task: ScaleOutTask, marker: str) -> None:
        self.task = task
        self.marker = marker

    def __call__(self, batches: Iterator[Any]) -> Iterator[Any]:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        if ctx is not None and ctx.partitionId() == 2 and not os.path.exists(self.marker):
            Path(self.marker).write_text("failed once\n")
            raise RuntimeError("injected task failure")
        yield from self.task(batches)


def make_writer(bootstrap: str, topic: str, dsn: str, table: str, tid: str) -> Any:
    kafka = laminar.KafkaSink(
        bootstrap, topic, tid, key="id", commit_timeout_s=10, init_timeout_s=20
    )
    postgres = laminar.PostgresSink(dsn, table)
    return laminar.exactly_once(kafka, postgres, scale_out=True, retry_backoff_s=0.2)


@pytest.mark.parametrize("failing_task", [False, True])
def test_a_multi_partition_batch_lands_exactly_once(
    spark_client: Any,
    kafka_broker: Any,
    pg_dsn: str,
    unique_name: Any,
    tmp_path: Path,
    failing_task: bool,
) -> None:
    topic, table = unique_name("topic"), unique_name("tbl")
    kafka_broker.create_topic(topic, partitions=2)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table} (id bigint, name text)")
    bootstrap = kafka_broker.bootstrap_servers
    writer = make_writer(bootstrap, topic, pg_dsn, table, f"tid-{topic}")
    df = spark_client.range(ROWS).repartition(PARTS).selectExpr("id", "concat('n', id) AS name")
    try:
        if failing_task:
            marker = str(tmp_path / "failed")
            result = writer.write_epoch_scaled(
                0,
                lambda task: df.mapInArrow(FailOnce(task, marker), RESULT_DDL).collect(),
            )
            assert Path(marker).exists()
            assert result.attempts == 2  # the job failed, was rolled back, and ran again
        else:
            ForeachBatchWriter(writer, check_servers=False)(df, 0)
            # a replay of the batch is skipped without a job
            assert writer.write_epoch_scaled(0, lambda task: pytest.fail("ran")).skipped
    finally:
        writer.close()
    expected = set(range(ROWS))
    assert_exactly_once(pg_ids(pg_dsn, table), expected, "PostgreSQL")
    assert_exactly_once(kafka_ids(bootstrap, topic), expected, "Kafka")
    with psycopg.connect(pg_dsn) as conn:
        parts = conn.execute(
            "SELECT count(*) FROM laminar.txn_state WHERE transactional_id LIKE %s",
            (f"tid-{topic}.p%",),
        ).fetchone()
        left = conn.execute(
            "SELECT count(*) FROM pg_prepared_xacts WHERE gid LIKE %s", (f"%{table}%",)
        ).fetchone()
    assert parts == (PARTS,), "one Kafka participant per Spark partition"
    assert left == (0,)
