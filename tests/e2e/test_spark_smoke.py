"""Smoke test of the Spark Connect tier: a streaming foreachBatch that runs laminar's Rust
extension in the server's Python worker, not in the test process."""

from __future__ import annotations

import os
import time
from typing import Any

import psycopg

import laminar
from tests.e2e.spark_helpers import restarting


def test_foreach_batch_imports_laminar_on_the_server(
    spark: Any, pg_dsn: str, table_name: str, tmp_path: Any
) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(
            f"CREATE TABLE {table_name} (batch_id bigint PRIMARY KEY, pid int, version text,"
            " row_count bigint)"
        )

    def write_batch(batch: Any, batch_id: int) -> None:
        # Runs in the Spark Connect server's Python worker.
        import os

        import psycopg

        import laminar._core

        rows = batch.count()
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(
                f"INSERT INTO {table_name} VALUES (%s, %s, %s, %s)",
                (batch_id, os.getpid(), laminar._core.__version__, rows),
            )

    stream = spark.readStream.format("rate").option("rowsPerSecond", 5).load()
    query = restarting(
        stream.writeStream.foreachBatch(write_batch)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(processingTime="1 second")
        .start
    )
    try:
        deadline = time.monotonic() + 120
        rows: list[tuple[int, int, str, int]] = []
        while time.monotonic() < deadline:
            with psycopg.connect(pg_dsn) as conn:
                rows = conn.execute(
                    f"SELECT batch_id, pid, version, row_count FROM {table_name} ORDER BY batch_id"
                ).fetchall()
            if len(rows) >= 3 and sum(r[3] for r in rows) > 0:
                break
            assert query.isActive, query.exception()
            time.sleep(0.5)
    finally:
        query.stop()

    assert len(rows) >= 3, f"only {len(rows)} micro-batches arrived in time: {rows}"
    assert [r[0] for r in rows] == list(range(len(rows)))
    assert sum(r[3] for r in rows) > 0
    assert all(r[1] != os.getpid() for r in rows), "foreachBatch ran in the test process"
    assert {r[2] for r in rows} == {laminar.__version__}
