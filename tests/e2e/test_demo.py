"""``laminar demo`` as a user runs it (a subprocess of the ``laminar`` command), with short
settings: it exits 0 and its JSON report proves exactly-once after a real SIGKILL.

Both ways: ``--way format`` (the default: ``writeStream.format("laminar")``, a task's Python
worker killed mid-write and, with ``--crash-at``, the driver-side commit after the decision) on
Apache Kafka (the default) and on Tansu; ``--way foreachBatch`` (its writer killed at each
``--crash-at``). The format way starts its own Spark Connect server (the data source reads the
DSN from the server's environment); the foreachBatch runs are pointed at the session's server
(``--spark-remote``) to spare a JVM — the server the demo would otherwise start is the same
`laminar.embedded.SparkConnectServer` the e2e tests use.
"""

from __future__ import annotations

import json
import queue
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from laminar.cli.demo import TABLE, TOPIC
from laminar.embedded._process import port_accepts
from tests.integration.kafka_fill import settled_committed as read_committed


# One crash point per way: the crash suites walk every point (tests/integration, tests/e2e); the
# demo's tests prove the demo itself — its crash, its proof, its report — on each way and broker.
@pytest.mark.parametrize("crash_at", ["after-decision"])
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
            "--way",
            "foreachBatch",
            "--broker",
            "tansu",
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
    assert (report["way"], report["broker"]) == ("foreachBatch", "tansu")
    assert report["batch_latency_ms"]["batches"] > 0
    assert report["exporter"]["metrics"]["laminar_up"] == 1.0


def _metric(report: dict[str, Any], name: str) -> float:
    """The exporter's figure for the demo's group in the report."""
    (value,) = [v for k, v in report["exporter"]["metrics"].items() if k.startswith(name + "{")]
    return float(value)


@pytest.mark.timeout(900)  # its own Spark Connect server and broker: a few minutes when loaded
@pytest.mark.parametrize("broker", ["kafka"], ids=["apache-kafka+commit-killed"])
def test_the_data_source_demo_proves_exactly_once_after_killing_a_task_and_the_commit(
    tmp_path: Path, broker: str
) -> None:
    """The way in: format("laminar"), a task's worker SIGKILLed mid-write; on Apache Kafka (the
    default broker) also the driver-side commit between the decision and the completion."""
    command = [sys.executable, "-m", "laminar.cli", "demo", "--duration", "10", "--rate", "40"]
    command += ["--crash-at", "after-decision"] if broker == "kafka" else ["--broker", "tansu"]
    command += ["--json", "--work-dir", str(tmp_path / "demo")]
    result = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    report = json.loads(result.stdout)
    assert report["ok"] is True, report["problems"]
    assert (report["way"], report["broker"]) == ("format", broker)
    produced = report["orders_produced"]
    for store in ("postgres", "kafka"):
        check = report[store]
        assert (check["rows"], check["duplicates"], check["missing"]) == (produced, 0, 0), check
    assert report["epochs_committed_postgres"] == report["epochs_committed_kafka"]
    assert report["epochs_committed_kafka"] == report["batches"]
    kills = report["crash"]["kills"]
    assert kills[0]["what"] == "task's Python worker"
    assert kills[0]["point"] == "scaleout.task_before_prepare"
    assert kills[0]["decision_at_kill"] in (None, "prepare"), kills[0]  # nothing decided
    assert (
        "Task 0 in stage" in kills[0]["query_error"] or "Python worker" in (kills[0]["query_error"])
    )
    if broker == "kafka":
        assert kills[1]["what"] == "driver-side commit"
        assert kills[1]["point"] == "scaleout.after_decision"
        assert kills[1]["decision_at_kill"] == "commit"  # decided, not completed
        assert kills[1]["epoch"] == kills[0]["epoch"]
    else:
        assert len(kills) == 1
    assert report["recovery"]["replayed_batch"] == kills[0]["epoch"]
    assert report["batch_latency_ms"]["batches"] > 0
    assert report["batch_latency_ms"]["p50"] is not None
    assert report["commit_latency_ms"]["epochs"] >= report["batches"] - len(kills)
    # the exporter, scraped at the end: the group's last epoch, its commits, nothing in doubt
    assert report["exporter"]["url"].startswith("http://127.0.0.1:")
    assert report["exporter"]["metrics"]["laminar_up"] == 1.0
    assert _metric(report, "laminar_group_last_committed_epoch") == report["batches"] - 1
    assert _metric(report, "laminar_group_epochs_in_doubt") == 0
    assert _metric(report, "laminar_group_commits_total") >= report["batches"] - len(kills)
    assert _metric(report, "laminar_group_aborts_total") >= 1  # Spark's abort of the batch
    assert "SIGKILLed the task's Python worker" in result.stderr


_WITH_CTRL_C = (
    "import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "from laminar.cli import main; sys.exit(main(sys.argv[1:]))"
)


class _Demo:
    """``laminar demo`` running in the background, its stderr (progress) read line by line."""

    def __init__(self, spark_remote: str, work_dir: Path, *extra: str) -> None:
        # Ctrl-C is asserted: Python leaves SIGINT ignored when it inherits it ignored (a CI
        # runner's background job), so the child sets Python's own handler first
        command = [sys.executable, "-c", _WITH_CTRL_C, "demo", "--json"]
        command += ["--spark-remote", spark_remote, "--work-dir", str(work_dir), *extra]
        self.proc = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.put(line)

    def wait_for(self, pattern: str, timeout: float = 240) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=1)
            except queue.Empty:
                assert self.proc.poll() is None, "".join(self.seen)
                continue
            self.seen.append(line)
            if found := re.search(pattern, line):
                return found
        self.proc.kill()
        raise AssertionError(f"no {pattern!r} in:\n{''.join(self.seen)}")

    def finish(self, sig: signal.Signals) -> tuple[int, str]:
        self.proc.send_signal(sig)
        assert self.proc.stdout is not None
        stdout = self.proc.stdout.read()
        code = self.proc.wait(timeout=120)
        time.sleep(0.5)  # the reader thread drains the last lines
        while not self.lines.empty():
            self.seen.append(self.lines.get())
        return code, stdout

    def servers(self) -> tuple[str, str]:
        """(PostgreSQL host:port, Kafka bootstrap) from the "servers up" line."""
        found = self.wait_for(r"servers up: PostgreSQL (\S+), Kafka (\S+),")
        return found.group(1), found.group(2)


def _refused(address: str) -> bool:
    host, port = address.rsplit(":", 1)
    return not port_accepts(host, int(port), timeout=2)


def test_demo_keep_leaves_the_servers_up_until_ctrl_c(spark_remote: str, tmp_path: Path) -> None:
    demo = _Demo(
        spark_remote, tmp_path / "demo", "--way", "foreachBatch", "--duration", "5", "--rate",
        "20", "--keep",
    )  # fmt: skip
    pg_address, bootstrap = demo.servers()  # Apache Kafka, the default broker
    dsn = demo.wait_for(r"^\s+PostgreSQL\s+(postgresql://\S+)").group(1)
    assert demo.wait_for(r"^\s+Kafka\s+(\S+)").group(1) == bootstrap
    exporter = demo.wait_for(r"^\s+exporter\s+(http://\S+)").group(1)
    with urllib.request.urlopen(exporter, timeout=10) as response:  # kept up, it answers
        assert "laminar_up 1.0" in response.read().decode()
    # the report is out and the servers still answer, holding what the demo wrote
    with psycopg.connect(dsn, connect_timeout=10) as conn:
        row = conn.execute(sql.SQL("SELECT count(*) FROM {}").format(
            sql.Identifier(*TABLE.split(".")))).fetchone()  # fmt: skip
    assert row is not None
    in_postgres = row[0]
    in_kafka = sum(1 for _ in read_committed(bootstrap, TOPIC))

    code, stdout = demo.finish(signal.SIGINT)
    assert code == 0, "".join(demo.seen)
    report = json.loads(stdout)  # stdout holds the report alone, even with --keep
    assert report["ok"] is True, report["problems"]
    assert in_postgres == in_kafka == report["orders_produced"] > 0
    assert _refused(pg_address), "PostgreSQL outlived the demo"
    assert _refused(bootstrap), "the broker outlived the demo"
    assert _refused(exporter.split("/")[2]), "the exporter outlived the demo"
    assert any("stopping the servers" in line for line in demo.seen), "".join(demo.seen)


# SIGTERM is turned into Ctrl-C's KeyboardInterrupt (laminar.cli.demo): one run covers both
@pytest.mark.parametrize("sig", [signal.SIGTERM], ids=["sigterm"])
def test_demo_interrupted_mid_stream_stops_everything_it_started(
    spark_remote: str, tmp_path: Path, sig: signal.Signals
) -> None:
    demo = _Demo(
        spark_remote, tmp_path / "demo", "--way", "foreachBatch", "--broker", "tansu",
        "--duration", "120", "--rate", "20",
    )  # fmt: skip
    pg_address, bootstrap = demo.servers()
    demo.wait_for(r"streaming 20 orders/s")
    demo.wait_for(r"last decided epoch \d+")  # a batch has committed: the query is running
    code, stdout = demo.finish(sig)
    assert code == 130, "".join(demo.seen)
    assert stdout == ""  # no report for a run that did not finish
    assert any("interrupted; everything it started is stopped" in line for line in demo.seen)
    assert _refused(pg_address), "PostgreSQL outlived the demo"
    assert _refused(bootstrap), "the broker outlived the demo"
    assert not (tmp_path / "demo" / "held").exists() or _held_writer_gone(tmp_path / "demo")


def _held_writer_gone(work_dir: Path) -> bool:
    """A writer held at the crash point when Ctrl-C came was killed with the demo."""
    text = (work_dir / "held").read_text().split()
    return not text or not Path(f"/proc/{text[0]}").exists()
