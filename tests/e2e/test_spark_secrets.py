"""A DSN password never shows up in what Spark logs or shows: the query's progress, status,
plan and error, the server's log (driver and Python workers), and laminar's own reprs."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import psycopg
from psycopg.conninfo import make_conninfo

import laminar
import laminar.spark
from tests.e2e.spark_helpers import client, pg_epoch, wait_for, wait_terminated

SECRET = "Very-S3cret-pw"


def test_the_password_is_in_nothing_spark_logs_or_shows(
    spark_server: Any, pg_dsn: str, table_name: str, tmp_path: Path
) -> None:
    # The test cluster trusts local connections: the password is sent along, never checked.
    dsn = make_conninfo(pg_dsn, password=SECRET)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table_name} (id bigint NOT NULL, at timestamptz)")
    sink = laminar.PostgresSink(dsn, table_name)
    shown: list[str] = [repr(sink), repr(laminar.exactly_once(sink))]

    with client(spark_server.remote_url) as spark:
        orders = (
            spark.readStream.format("rate")
            .option("rowsPerSecond", 10)
            .load()
            .selectExpr("value AS id", "timestamp AS at")
        )
        query = laminar.spark.start(
            orders, sink, checkpoint_location=str(tmp_path / "ok"), trigger="500 milliseconds"
        )
        try:
            wait_for(lambda: (pg_epoch(pg_dsn, sink.sink_id) or 0) >= 2, query=query, what="2")
            shown += [json.dumps(query.lastProgress, default=str), json.dumps(query.status)]
            shown += [json.dumps(p, default=str) for p in query.recentProgress]
            plan = io.StringIO()
            with contextlib.redirect_stdout(plan):
                query.explain(extended=True)
            shown.append(plan.getvalue())
        finally:
            query.stop()

        # A failing write: the table does not exist. The error names the database, masked.
        broken = laminar.PostgresSink(dsn, table_name + "_missing")
        failed = laminar.spark.start(
            orders, broken, checkpoint_location=str(tmp_path / "failed"), check_server=False
        )
        error = str(wait_terminated(failed, timeout=90))
        shown.append(error)

    assert f"{table_name}_missing" in error
    assert "***" in error
    server_log = spark_server.log_path.read_text(errors="replace")
    assert f"{table_name}_missing" in server_log  # the failure was logged there too
    for text in [*shown, server_log]:
        assert SECRET not in text
