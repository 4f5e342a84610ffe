"""SparkConnectServer's crash controls: kill takes the Python workers down with the JVM, and the
server comes back on the same port."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from laminar.embedded import SparkConnectServer
from tests.e2e.spark_helpers import alive
from tests.fixtures import unavailable


def worker_pids(remote: str) -> set[int]:
    from pyspark.sql import SparkSession
    from pyspark.sql.functions import udf

    session = SparkSession.builder.remote(remote).create()
    try:
        pid = udf(lambda _: os.getpid(), "int")
        return {row[0] for row in session.range(4).select(pid("id")).collect()}
    finally:
        session.stop()


def test_kill_takes_workers_down_and_start_comes_back_on_the_same_port(
    laminar_servers: Any, tmp_path: Path
) -> None:
    if os.environ.get("LAMINAR_SPARK_REMOTE"):
        pytest.skip("LAMINAR_SPARK_REMOTE is an external server: this test kills its own")
    server = SparkConnectServer(log_path=laminar_servers.log_dir / "spark-kill-test.log")
    try:
        try:
            server.start()
        except Exception as e:
            unavailable(f"embedded Spark Connect server could not be started: {e}")
        remote, jvm = server.remote_url, server.pid
        assert jvm is not None
        workers = worker_pids(remote)
        assert workers
        assert os.getpid() not in workers

        server.kill()

        assert not server.is_running()
        assert not alive(jvm)
        assert not any(alive(pid) for pid in workers), "a Python worker outlived the kill"
        server.start()
        assert server.remote_url == remote
        assert server.pid not in (None, jvm)
        assert worker_pids(remote)
    finally:
        server.stop()
