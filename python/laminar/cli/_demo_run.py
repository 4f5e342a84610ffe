"""`laminar demo`'s run: the servers, the pipeline, the crash and the proof (split from
`laminar.cli.demo`)."""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, TextIO

import psycopg

import laminar
import laminar.spark
from laminar.cli._demo_spec import (
    EXIT_OK,
    EXIT_PROOF_FAILED,
    TABLE,
    TOPIC,
    TRANSACTIONAL_ID,
    DemoError,
    DemoOptions,
    DemoReport,
    Progress,
    _check,
    _crash_meaning,
    _journal,
    _percentile,
    _pg_state,
    _round,
    _source_end,
    _wait,
    crash_point_of,
)
from laminar.cli._demo_writer import DemoForeachBatch
from laminar.kafka.log import KafkaLogClient


class Demo:
    """One run of the demo; `run` returns the exit code."""

    def __init__(self, options: DemoOptions, out: TextIO = sys.stdout) -> None:
        self.o = options
        self.out = out
        self.progress = Progress(sys.stderr if options.json else out)
        self.stack = contextlib.ExitStack()
        self.dir = Path(options.work_dir or tempfile.mkdtemp(prefix="laminar-demo-"))
        self.journal_path = self.dir / "journal.jsonl"
        self.hold_path = self.dir / "held"
        self.checkpoint = self.dir / "checkpoint"
        self.dsn = ""
        self.bootstrap = ""
        self.remote = ""
        self.spark: Any = None
        self.killed_pid: int | None = None

    # -- servers --------------------------------------------------------------------------------

    def start_servers(self) -> None:
        # In-function: the embedded servers load only when the demo runs.
        from laminar.embedded import EphemeralPostgres, SparkConnectServer, TansuBroker

        logs = self.dir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        pg = EphemeralPostgres(log_path=logs / "postgres.log")
        broker = TansuBroker(log_path=logs / "tansu.log")
        spark = None
        if self.o.spark_remote is None:
            spark = SparkConnectServer(log_path=logs / "spark-connect.log")
        # Registered before they start, so that a failure or Ctrl-C stops what did start.
        for server in (pg, broker, spark):
            if server is not None:
                self.stack.callback(server.stop)
        what = "PostgreSQL, the Kafka broker (Tansu)" + (
            " and a Spark Connect server" if spark is not None else ""
        )
        self.progress.step(f"starting {what} ...")
        with concurrent.futures.ThreadPoolExecutor(3) as pool:
            futures = {pool.submit(s.start): s for s in (pg, broker, spark) if s is not None}
            while futures:
                done, _ = concurrent.futures.wait(futures, timeout=0.5)
                for f in done:
                    f.result()
                    futures.pop(f)
                self.progress.status(f"waiting for {len(futures)} server(s)")
        self.dsn = pg.dsn
        self.bootstrap = broker.bootstrap_servers
        self.remote = spark.remote_url if spark is not None else str(self.o.spark_remote)
        broker.create_topic(TOPIC, partitions=2)

        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(
                f"CREATE TABLE {TABLE} (order_id bigint NOT NULL, customer text NOT NULL,"
                " amount numeric(10, 2) NOT NULL, created_at timestamptz NOT NULL)"
            )
        # In-function: pyspark is the optional `demo` extra (checked by `run`).
        from pyspark.sql import SparkSession

        self.spark = SparkSession.builder.remote(self.remote).create()
        self.stack.callback(self._stop_session)
        self.progress.step(
            f"servers up: PostgreSQL {pg.host}:{pg.port}, Kafka {self.bootstrap}, "
            f"Spark {self.remote}"
        )

    def _stop_session(self) -> None:
        """Stop the demo's queries (a shared server keeps running), a writer still held at
        the crash point (Ctrl-C before the kill), then the client session."""
        with contextlib.suppress(Exception):
            for query in self.spark.streams.active:
                query.stop()
        with contextlib.suppress(Exception):
            pid = int(self.hold_path.read_text().split()[0])
            if pid != self.killed_pid and b"python" in Path(f"/proc/{pid}/cmdline").read_bytes():
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(Exception):
            self.spark.stop()

    # -- the pipeline ---------------------------------------------------------------------------

    def sinks(self) -> tuple[Any, Any]:
        kafka = laminar.KafkaSink(
            self.bootstrap,
            TOPIC,
            TRANSACTIONAL_ID,
            key="order_id",
            commit_timeout_s=10,
            init_timeout_s=20,
        )
        return kafka, laminar.PostgresSink(self.dsn, TABLE)

    def orders(self) -> Any:
        return (
            self.spark.readStream.format("rate-micro-batch")
            .option("rowsPerBatch", self.o.rows_per_batch)
            .option("numPartitions", 2)
            .option("advanceMillisPerBatch", int(self.o.trigger_s * 1000))
            .load()
            .selectExpr(
                "value AS order_id",
                "concat('customer-', CAST(value % 50 AS string)) AS customer",
                "CAST((value * 37 % 10000) / 100.0 + 1 AS decimal(10, 2)) AS amount",
                "timestamp AS created_at",
            )
        )

    def start_query(self, crash: bool, trigger: dict[str, Any]) -> Any:
        kafka, postgres = self.sinks()
        writer = laminar.exactly_once(kafka, postgres, redo=self.o.redo)  # type: ignore[arg-type]
        inner = laminar.spark.foreach_batch(writer, checkpoint_location=str(self.checkpoint))
        function = DemoForeachBatch(
            inner,
            str(self.journal_path),
            f"{crash_point_of(self.o.crash_at).name}@{self._crash_occurrence()}" if crash else None,
            str(self.hold_path) if crash else None,
        )
        return (
            self.orders()
            .writeStream.foreachBatch(function)
            .option("checkpointLocation", str(self.checkpoint))
            .queryName("laminar_demo_orders")
            .trigger(**trigger)
            .start()
        )

    def _crash_occurrence(self) -> int:
        # About a third into the run, never in the first epoch.
        return max(2, int(self.o.duration_s / 3 / self.o.trigger_s))

    def _status(self) -> str:
        rows, epoch = _pg_state(self.dsn, "public.orders")
        decided = "-" if epoch is None else str(epoch)
        return f"last decided epoch {decided} · PostgreSQL rows {rows}"

    def run_pipeline(self) -> dict[str, Any]:
        kafka, postgres = self.sinks()
        self.progress.step(
            "checking the Spark server's Python (laminar importable, servers reachable)"
        )
        laminar.spark.check_server(self.spark, [kafka, postgres])
        processing = {"processingTime": f"{int(self.o.trigger_s * 1000)} milliseconds"}
        begun = time.monotonic()
        point = crash_point_of(self.o.crash_at).name
        self.progress.step(
            f"streaming {self.o.rate} orders/s (rate-micro-batch, {self.o.rows_per_batch} per "
            f"epoch) into Kafka topic {TOPIC!r} + table {TABLE} atomically; the writer will "
            f"hold at {point} ({self.o.crash_at}) in epoch {self._crash_occurrence() - 1}"
        )
        query = self.start_query(crash=True, trigger=processing)
        try:
            _wait(
                lambda: self.hold_path.exists() and self.hold_path.read_text().strip() != "",
                self.progress,
                self._status,
                query=query,
                timeout=max(120.0, self.o.duration_s * 4),
                what=f"the writer to reach {point}",
            )
            pid = int(self.hold_path.read_text().split()[0])
            held_epoch = max(
                (e["epoch"] for e in _journal(self.journal_path) if e["event"] == "batch"),
                default=-1,
            )
            _, decided = _pg_state(self.dsn, postgres.sink_id)
            kafka_marker = kafka.last_committed_epoch()
            kafka.close()
            self.progress.step(
                f"writer pid {pid} is inside epoch {held_epoch} at {point}: "
                f"{_crash_meaning(self.o.crash_at)} (PostgreSQL decided epoch {decided}, "
                f"Kafka committed epoch {kafka_marker})"
            )
            os.kill(pid, signal.SIGKILL)
            self.killed_pid = pid
            killed_at = time.monotonic() - begun
            self.progress.step(f"SIGKILLed the foreachBatch worker (pid {pid}) mid-epoch")
            deadline = time.monotonic() + 60
            while query.isActive and time.monotonic() < deadline:
                time.sleep(0.25)
            error = query.exception()
            reason = str(error).strip().splitlines()[0] if error is not None else "none"
            self.progress.step(f"the query failed as a crash makes it: {reason[:120]}")
        finally:
            with contextlib.suppress(Exception):
                query.stop()
        crash = {
            "point": point,
            "when": self.o.crash_at,
            "epoch": held_epoch,
            "worker_pid": pid,
            "killed": True,
            "after_s": round(killed_at, 1),
            "postgres_decided_epoch": decided,
            "kafka_committed_epoch": kafka_marker,
            "query_error": reason[:300],
        }

        self.progress.step("restarting the query from its checkpoint (recovery runs first)")
        query = self.start_query(crash=False, trigger=processing)
        try:
            remaining = max(self.o.duration_s - (time.monotonic() - begun), 2 * self.o.trigger_s)
            _wait(
                lambda: (
                    time.monotonic() - begun >= self.o.duration_s
                    and any(
                        e["event"] == "done" and e["epoch"] > held_epoch
                        for e in _journal(self.journal_path)
                    )
                ),
                self.progress,
                self._status,
                query=query,
                timeout=remaining + 120,
                what="the restarted query to commit new epochs",
            )
        finally:
            query.stop()
        self.progress.step("stopping the stream; draining the last batch (availableNow)")
        query = self.start_query(crash=False, trigger={"availableNow": True})
        _wait(
            lambda: not query.isActive,
            self.progress,
            self._status,
            query=None,
            timeout=120,
            what="the final batch",
        )
        if query.exception() is not None:
            raise DemoError(f"the final batch failed: {query.exception()}")
        return crash

    # -- the proof ------------------------------------------------------------------------------

    def prove(self, crash: dict[str, Any], seconds: float) -> DemoReport:
        last_batch, produced = _source_end(self.checkpoint)
        with psycopg.connect(self.dsn) as conn:
            pg_ids = [int(r[0]) for r in conn.execute(f"SELECT order_id FROM {TABLE}")]
            row = conn.execute(
                "SELECT epoch FROM laminar.sink_epochs WHERE sink_id = %s", (TABLE,)
            ).fetchone()
            pg_epoch = None if row is None else int(row[0])
            decision = conn.execute(
                "SELECT epoch FROM laminar.txn_state WHERE transactional_id = %s",
                (TRANSACTIONAL_ID,),
            ).fetchone()
        with KafkaLogClient(self.bootstrap) as client:
            logs = client.read_topic(TOPIC)
        committed = [r for p in sorted(logs) for r in logs[p].committed]
        kafka_ids = [int(json.loads(r.value or b"{}")["order_id"]) for r in committed]
        kafka_epochs = {int(r.header("laminar.epoch") or -1) for r in committed}
        kafka_check = _check(kafka_ids, produced)
        kafka_check.uncommitted_in_log = sum(len(p.aborted) + len(p.open) for p in logs.values())
        pg_check = _check(pg_ids, produced)

        journal = _journal(self.journal_path)
        latencies = [float(e["commit_ms"]) for e in journal if e.get("commit_ms") is not None]
        recovery = self._recovery(journal, crash)
        problems = []
        if not pg_check.ok:
            problems.append(f"PostgreSQL: {pg_check}")
        if not kafka_check.ok:
            problems.append(f"Kafka: {kafka_check}")
        if produced == 0:
            problems.append("the source produced no orders")
        if not crash.get("killed"):
            problems.append("the writer was not killed")
        if pg_epoch != last_batch or max(kafka_epochs, default=-1) != last_batch:
            problems.append(
                f"epochs: Spark committed batch {last_batch}, PostgreSQL holds {pg_epoch}, "
                f"Kafka {max(kafka_epochs, default=None)}"
            )
        if decision is not None and int(decision[0]) > max(kafka_epochs, default=-1):
            problems.append(f"a decided epoch ({decision[0]}) is still missing in Kafka")
        return DemoReport(
            ok=not problems,
            orders_produced=produced,
            batches=last_batch + 1,
            postgres=pg_check,
            kafka=kafka_check,
            epochs_committed_postgres=None if pg_epoch is None else pg_epoch + 1,
            epochs_committed_kafka=len(kafka_epochs),
            commit_latency_ms={
                "source": "atomic group commit, steps 1-8 per epoch (ExactlyOnceWriter."
                "last_commit_ms, the figure laminar.sinks.last_commit_ms keeps)",
                "epochs": len(latencies),
                "p50": _round(_percentile(latencies, 50)),
                "p99": _round(_percentile(latencies, 99)),
                "max": _round(max(latencies, default=None)),
            },
            crash=crash,
            recovery=recovery,
            seconds=round(seconds, 1),
            problems=problems,
            servers={
                "postgres_dsn": self.dsn,
                "kafka_bootstrap": self.bootstrap,
                "spark_remote": self.remote,
            },
        )

    def _recovery(self, journal: list[dict[str, Any]], crash: dict[str, Any]) -> dict[str, Any]:
        epoch = crash.get("epoch")
        killed = crash.get("worker_pid")
        after = [e for e in journal if e.get("pid") != killed]
        messages = [str(e["message"]) for e in after if e["event"] == "log"]
        replay = [e for e in after if e["event"] == "done" and e.get("epoch") == epoch]
        replay_committed = bool(replay and replay[0].get("committed"))
        if any("by EndTxn" in m for m in messages):
            path = (
                f"EndTxn: epoch {epoch}'s prepared Kafka transaction was committed with the "
                "producer id/epoch recorded in the decision; Spark's replay of the batch was "
                + ("written" if replay_committed else "skipped (already committed)")
            )
        elif any("from the redo log" in m for m in messages):
            path = f"redo log: epoch {epoch}'s records re-produced from laminar.redo"
        elif any("replay completed" in m or "waiting for Spark's replay" in m for m in messages):
            path = f"Spark's replay: the decided epoch {epoch} was completed in Kafka by the replay"
        elif replay_committed:
            path = (
                f"abort + replay: epoch {epoch} was not decided, the new producer's "
                "init_transactions aborted its prepared records and Spark's replay wrote it"
            )
        else:
            path = f"none needed: epoch {epoch} was already complete; the replay was skipped"
        return {
            "path": path,
            "replayed_batch": epoch,
            "replay": "written" if replay_committed else "skipped",
            "messages": messages,
        }

    # -- output ---------------------------------------------------------------------------------

    def print_report(self, r: DemoReport) -> None:
        if self.o.json:
            print(json.dumps(r.to_dict(), indent=2), file=self.out, flush=True)
            return
        lat = r.commit_latency_ms
        verdict = "PASS: every order exactly once in both stores" if r.ok else "FAIL"
        lines = [
            "",
            "laminar demo: exactly-once report",
            f"  source            {r.orders_produced} orders in {r.batches} batches "
            "(per Spark's offset log)",
            f"  crash             worker pid {r.crash['worker_pid']} SIGKILLed in epoch "
            f"{r.crash['epoch']} at {r.crash['point']} ({r.crash['when']})",
            f"  recovery          {r.recovery['path']}",
        ]
        for name, c in (("PostgreSQL", r.postgres), ("Kafka", r.kafka)):
            extra = (
                f", {c.uncommitted_in_log} aborted/uncommitted records in the log (not counted)"
                if c.uncommitted_in_log
                else ""
            )
            lines.append(
                f"  {name:<17} {c.rows} rows · duplicates {c.duplicates} · missing {c.missing}"
                f" · unexpected {c.unexpected}{extra}"
            )
        lines += [
            f"  epochs committed  PostgreSQL {r.epochs_committed_postgres} · Kafka "
            f"{r.epochs_committed_kafka}",
            f"  commit latency    p50 {lat['p50']} ms · p99 {lat['p99']} ms over "
            f"{lat['epochs']} epochs (atomic commit, steps 1-8)",
            f"  result            {verdict}  ({r.seconds} s)",
        ]
        lines += [f"  problem: {p}" for p in r.problems]
        print("\n".join(lines), file=self.out, flush=True)

    def keep_waiting(self) -> None:
        print(
            "\nServers are up until Ctrl-C:\n"
            f"  PostgreSQL   {self.dsn}\n"
            f"  Kafka        {self.bootstrap}   (topic {TOPIC})\n"
            f"  Spark        {self.remote}\n"
            f"  try          laminar status --dsn '{self.dsn}'",
            file=self.progress.stream,  # stderr under --json: stdout holds the report alone
            flush=True,
        )
        with contextlib.suppress(KeyboardInterrupt):
            while True:
                time.sleep(3600)

    def run(self) -> int:
        started = time.monotonic()
        with self.stack:
            if self.o.work_dir is None:
                self.stack.callback(shutil.rmtree, self.dir, True)
            self.start_servers()
            crash = self.run_pipeline()
            self.progress.step("reading both stores and Spark's offset log for the proof")
            report = self.prove(crash, time.monotonic() - started)
            self.print_report(report)
            if self.o.keep:
                self.keep_waiting()
            self.progress.step("stopping the servers")
        return EXIT_OK if report.ok else EXIT_PROOF_FAILED
