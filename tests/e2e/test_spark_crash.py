"""The whole Spark Connect server SIGKILLed while the foreachBatch worker is in the middle of an
epoch, then restarted on the same port, the query restarted from its checkpoint: every row
exactly once.

The worker is *held* at a protocol step (``laminar._faults``: it sleeps there with its
transaction open) so that the kill lands mid-epoch every time, not by luck of timing. This test
restarts the session's shared server (cheaper than a second one on two cores); sessions opened
before it are gone, so it only uses its own.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import psycopg
import pytest

import laminar
import laminar.spark
from tests.e2e.spark_helpers import (
    ArmedForeachBatch,
    abandon,
    alive,
    assert_exactly_once,
    client,
    held_pid,
    pg_epoch,
    pg_ids,
    start_files_query,
    wait_for,
    wait_terminated,
    write_json_files,
)


def test_server_sigkilled_mid_epoch_then_restarted(
    spark_server: Any, pg_dsn: str, table_name: str, tmp_path: Path
) -> None:
    if os.environ.get("LAMINAR_SPARK_REMOTE"):
        pytest.skip("LAMINAR_SPARK_REMOTE is an external server: this test kills its own")
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table_name} (id bigint NOT NULL, amount double precision)")
    sink = laminar.PostgresSink(pg_dsn, table_name)
    source = tmp_path / "incoming"
    checkpoint = str(tmp_path / "checkpoint")
    hold = tmp_path / "held"
    total = write_json_files(source, 0, files=6, rows_per_file=100)
    real = laminar.spark.foreach_batch(laminar.exactly_once(sink), checkpoint_location=checkpoint)

    try:
        with client(spark_server.remote_url) as spark:
            query = start_files_query(
                spark,
                source,
                checkpoint,
                ArmedForeachBatch(real, "postgres.before_commit@3", str(hold)),
            )
            wait_for(lambda: held_pid(hold) is not None, query=query, what="the held epoch")
            worker = held_pid(hold)
            assert worker is not None
            # Epoch 2's rows are copied in an open transaction: invisible, epoch 1 committed.
            assert pg_epoch(pg_dsn, sink.sink_id) == 1
            assert len(pg_ids(pg_dsn, table_name)) == 200

            spark_server.kill()
            abandon(spark)

        assert not alive(worker), "the foreachBatch worker outlived the server's SIGKILL"
    finally:
        if not spark_server.is_running():
            spark_server.start()

    with client(spark_server.remote_url) as spark:
        error = wait_terminated(start_files_query(spark, source, checkpoint, real))
    assert error is None
    assert_exactly_once(pg_ids(pg_dsn, table_name), set(range(total)), "after the restart")
    assert pg_epoch(pg_dsn, sink.sink_id) == 5
    with psycopg.connect(pg_dsn) as conn:
        lingering = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE 'laminar %%'"
            " AND state = 'idle in transaction'"
        ).fetchone()
    assert lingering == (0,)
