"""``laminar demo`` as a user runs it (a subprocess of the ``laminar`` command), with short
settings: it exits 0 and its JSON report proves exactly-once after a real SIGKILL of the writer.

The demo starts its own PostgreSQL and broker; to spare a second JVM on small machines it is
pointed at the session's Spark Connect server (``--spark-remote``) — the server the demo would
otherwise start is the same `laminar.embedded.SparkConnectServer` the e2e tests use.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.parametrize("crash_at", ["after-decision", "after-flush"])
def test_demo_proves_exactly_once_after_killing_the_writer(
    spark_remote: str, tmp_path: Path, crash_at: str
) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "laminar.cli",
            "demo",
            "--duration",
            "8",
            "--rate",
            "50",
            "--crash-at",
            crash_at,
            "--json",
            "--spark-remote",
            spark_remote,
            "--work-dir",
            str(tmp_path / "demo"),
        ],
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )
    assert result.returncode == 0, f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    report = json.loads(result.stdout)
    assert report["ok"] is True, report["problems"]
    produced = report["orders_produced"]
    assert produced > 0
    for store in ("postgres", "kafka"):
        check = report[store]
        assert check["duplicates"] == 0, (store, check)
        assert check["missing"] == 0, (store, check)
        assert check["unexpected"] == 0, (store, check)
        assert check["rows"] == produced, (store, check)
    assert report["epochs_committed_postgres"] == report["batches"]
    assert report["epochs_committed_kafka"] == report["batches"]

    crash = report["crash"]
    assert crash["killed"] is True
    assert crash["worker_pid"] > 0
    assert "Python worker exited unexpectedly" in crash["query_error"], crash
    # mid-epoch: at the kill, PostgreSQL had decided the held epoch only after the decision
    held = crash["epoch"]
    decided_before_kill = held if crash_at == "after-decision" else held - 1
    assert crash["postgres_decided_epoch"] == decided_before_kill
    assert crash["kafka_committed_epoch"] == held - 1
    recovery = report["recovery"]
    assert recovery["replayed_batch"] == held
    # after the decision, recovery completes Kafka's part (EndTxn) and the replay is skipped;
    # before it, the replay writes the epoch
    assert recovery["replay"] == ("skipped" if crash_at == "after-decision" else "written")
    latency = report["commit_latency_ms"]
    assert latency["epochs"] > 0
    assert latency["p50"] is not None
    assert latency["p99"] is not None
    # progress went to stderr, the report alone to stdout
    assert "SIGKILLed the foreachBatch worker" in result.stderr
