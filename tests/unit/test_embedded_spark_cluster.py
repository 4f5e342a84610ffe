"""Pure parts of `laminar.embedded.SparkCluster` (no JVM is started here; the cluster itself runs
in tests/e2e/test_spark_cluster_*.py), and the masked command line every embedded server logs."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from laminar.embedded import EmbeddedServerError, SparkCluster
from laminar.embedded._process import ServerProcess
from laminar.embedded.spark_standalone import _argument, _is_python_daemon


def test_a_cluster_needs_a_worker() -> None:
    with pytest.raises(EmbeddedServerError, match="at least one worker"):
        SparkCluster(workers=0)


def test_before_start_the_addresses_are_clear_errors() -> None:
    cluster = SparkCluster()
    for name in ("remote_url", "ui_url", "master_url"):
        with pytest.raises(EmbeddedServerError, match="not been started"):
            getattr(cluster, name)
    assert not cluster.is_running()
    assert cluster.executors() == []
    assert repr(cluster) == "SparkCluster(no master, workers=2, stopped)"


def test_the_applications_settings_keep_memory_small_and_take_overrides() -> None:
    cluster = SparkCluster(workers=3, conf={"spark.task.maxFailures": "8"})
    conf = cluster._application_conf()
    assert conf["spark.executor.memory"] == "512m"
    assert conf["spark.executor.cores"] == "1"
    assert conf["spark.cores.max"] == "3"  # one executor per worker
    assert conf["spark.ui.enabled"] == "true"  # the REST API
    assert conf["spark.executorEnv.PYSPARK_PYTHON"] == sys.executable
    assert conf["spark.task.maxFailures"] == "8"
    override = SparkCluster(executor_memory="1g", conf={"spark.executor.cores": "2"})
    assert override._application_conf()["spark.executor.memory"] == "1g"
    assert override._application_conf()["spark.executor.cores"] == "2"


def test_executor_command_lines_are_read() -> None:
    argv = ["java", "-cp", "x", "Backend", "--executor-id", "3", "--app-id", "app-1-0000"]
    assert _argument(argv, "--executor-id") == "3"
    assert _argument(argv, "--app-id") == "app-1-0000"
    assert _argument(argv, "--cores") is None
    assert _argument(["--cores"], "--cores") is None
    assert _is_python_daemon(["/venv/bin/python", "-m", "pyspark.daemon", "pyspark.worker"])
    assert not _is_python_daemon(["/venv/bin/python", "-m", "pyspark.worker"])


def test_a_servers_logged_command_line_masks_dsn_passwords(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    setting = "spark.executorEnv.PG=postgresql://app:Cmd-S3cret@db/shop"
    process = ServerProcess(["true", "--conf", setting], log_path=log, name="a server")
    process.terminate(timeout=10)
    text = log.read_text()
    assert "postgresql://app:***@db/shop" in text
    assert "Cmd-S3cret" not in text
