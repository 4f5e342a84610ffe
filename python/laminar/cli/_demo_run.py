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
from laminar.cli._demo_foreach import recovery_of as _foreach_recovery
from laminar.cli._demo_spec import (
    DSN_VAR,
    EXIT_OK,
    EXIT_PROOF_FAILED,
    EXPORTER_SHOWN,
    GROUP,
    TABLE,
    TOPIC,
    TRANSACTIONAL_ID,
    DemoError,
    DemoOptions,
    DemoReport,
    Progress,
    _check,
    _foreach_batch_latencies,
    _journal,
    _percentile,
    _pg_state,
    _round,
    _source_end,
    _wait,
)
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
        #: the format way's second hold: its driver-side commit (``--crash-at``)
        self.commit_hold_path = self.dir / "held-commit"
        self.killed: set[int] = set()
        self.exporter: Any = None

    # -- servers --------------------------------------------------------------------------------

    def start_servers(self) -> None:
        # In-function: the embedded servers load only when the demo runs.
        from laminar.embedded import (
            EphemeralPostgres,
            KafkaBroker,
            SparkConnectServer,
            TansuBroker,
        )

        if self.o.way == "format" and self.o.spark_remote is not None:
            raise DemoError(
                "--way format needs a Spark server of its own: the data source reads the "
                "PostgreSQL DSN from the server's environment (postgres.dsn.env), so drop "
                "--spark-remote, or use --way foreachBatch"
            )
        logs = self.dir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        pg = EphemeralPostgres(log_path=logs / "postgres.log")
        broker: Any = (
            KafkaBroker(log_path=logs / "kafka.log")
            if self.o.broker == "kafka"
            else TansuBroker(log_path=logs / "tansu.log")
        )
        broker_name = "Apache Kafka" if self.o.broker == "kafka" else "Tansu"
        # Registered before they start, so that a failure or Ctrl-C stops what did start.
        self.stack.callback(pg.stop)
        self.stack.callback(broker.stop)
        with_spark = " and a Spark Connect server" if self.o.spark_remote is None else ""
        self.progress.step(f"starting PostgreSQL, the Kafka broker ({broker_name}){with_spark} ...")
        with concurrent.futures.ThreadPoolExecutor(3) as pool:
            futures: dict[concurrent.futures.Future[Any], Any] = {
                pool.submit(s.start): s for s in (pg, broker)
            }
            # the data source's tasks read the DSN from the Spark server's environment: the
            # server starts once PostgreSQL has its port
            spark = None
            while futures:
                done, _ = concurrent.futures.wait(futures, timeout=0.5)
                for f in done:
                    f.result()
                    if futures.pop(f) is pg and self.o.spark_remote is None:
                        spark = SparkConnectServer(
                            log_path=logs / "spark-connect.log", env={DSN_VAR: pg.dsn}
                        )
                        self.stack.callback(spark.stop)
                        futures[pool.submit(spark.start)] = spark
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
        self.start_exporter()
        # In-function: pyspark is the optional `demo` extra (checked by `run`).
        from pyspark.sql import SparkSession

        self.spark = SparkSession.builder.remote(self.remote).create()
        self.stack.callback(self._stop_session)
        self.progress.step(
            f"servers up: PostgreSQL {pg.host}:{pg.port}, Kafka {self.bootstrap}, "
            f"Spark {self.remote}" + (f", exporter {self.exporter.url}" if self.exporter else "")
        )

    def start_exporter(self) -> None:
        """``laminar exporter`` over the demo's database, in this process (the ``demo`` extra's
        prometheus_client; without it the demo runs without)."""
        try:
            # in-function: prometheus_client is the optional exporter extra (caught below)
            from laminar.cli.exporter import Exporter
            from laminar.embedded import free_port  # the servers load only when the demo runs

            exporter = Exporter(self.dsn, host="127.0.0.1", port=free_port(), kafka_extra={})
        except ImportError as e:
            self.progress.step(f"no exporter ({e}): pip install 'laminar[exporter]'")
            return
        exporter.start()
        self.stack.callback(exporter.stop)
        self.exporter = exporter

    def _stop_session(self) -> None:
        """Stop the demo's queries (a shared server keeps running), a writer still held at
        the crash point (Ctrl-C before the kill), then the client session."""
        with contextlib.suppress(Exception):
            for query in self.spark.streams.active:
                query.stop()
        for hold in (self.hold_path, self.commit_hold_path):
            with contextlib.suppress(Exception):
                pid = int(hold.read_text().split()[0])
                alive = b"python" in Path(f"/proc/{pid}/cmdline").read_bytes()
                if pid != self.killed_pid and pid not in self.killed and alive:
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

    def drain(self, query: Any) -> None:
        """Wait for the final ``availableNow`` run to end; a `DemoError` if it failed."""
        _wait(
            lambda: not query.isActive,
            self.progress,
            self._status,
            query=None,
            timeout=180,
            what="the final batch",
        )
        if query.exception() is not None:
            raise DemoError(f"the final batch failed: {query.exception()}")

    def _status(self) -> str:
        rows, epoch = _pg_state(self.dsn, "public.orders")
        decided = "-" if epoch is None else str(epoch)
        return f"last decided epoch {decided} · PostgreSQL rows {rows}"

    def run_pipeline(self) -> dict[str, Any]:
        """The stream, the crash and the restarts, by ``--way``; what the crash was."""
        if self.o.way == "format":
            from laminar.cli._demo_format import run_format  # in-function: pyspark's API

            return run_format(self)
        from laminar.cli._demo_foreach import run_foreach_batch  # one way per run

        return run_foreach_batch(self)

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
            # nothing left in doubt: no distributed transaction open, nothing prepared
            left = conn.execute(
                "SELECT (SELECT count(*) FROM laminar.dt_state),"
                " (SELECT count(*) FROM pg_prepared_xacts WHERE gid LIKE 'laminar:%%')"
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
        if self.o.way == "format":
            from laminar.cli._demo_format import commit_latencies, recovery_of  # pyspark API

            latencies, per_batch = commit_latencies(journal)
            recovery = recovery_of(journal, crash)
        else:
            latencies = [float(e["commit_ms"]) for e in journal if e.get("commit_ms") is not None]
            per_batch = _foreach_batch_latencies(journal)
            recovery = _foreach_recovery(journal, crash)
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
        if left is not None and any(left):
            problems.append(
                f"left in doubt: {left[0]} distributed transaction(s), {left[1]} prepared"
            )
        return DemoReport(
            ok=not problems,
            orders_produced=produced,
            batches=last_batch + 1,
            postgres=pg_check,
            kafka=kafka_check,
            epochs_committed_postgres=None if pg_epoch is None else pg_epoch + 1,
            epochs_committed_kafka=len(kafka_epochs),
            commit_latency_ms={
                "source": "the driver-side commit of each batch (decision and completion)"
                if self.o.way == "format"
                else "atomic group commit, steps 1-8 per epoch (ExactlyOnceWriter."
                "last_commit_ms, the figure laminar.sinks.last_commit_ms keeps)",
                "epochs": len(latencies),
                "p50": _round(_percentile(latencies, 50)),
                "p99": _round(_percentile(latencies, 99)),
                "max": _round(max(latencies, default=None)),
            },
            batch_latency_ms={
                "source": "first task's start to the commit's end"
                if self.o.way == "format"
                else "foreachBatch's call to its return",
                "batches": len(per_batch),
                "p50": _round(_percentile(per_batch, 50)),
                "p99": _round(_percentile(per_batch, 99)),
                "max": _round(max(per_batch, default=None)),
            },
            exporter=self.exporter_metrics(),
            way=self.o.way,
            broker=self.o.broker,
            crash=crash,
            recovery=recovery,
            seconds=round(seconds, 1),
            problems=problems,
            servers={
                "postgres_dsn": self.dsn,
                "kafka_bootstrap": self.bootstrap,
                "spark_remote": self.remote,
                **({"exporter": self.exporter.url} if self.exporter else {}),
            },
        )

    def exporter_metrics(self) -> dict[str, Any]:
        """A few of the exporter's metrics for the demo's group, scraped now."""
        if self.exporter is None:
            return {}
        text = self.exporter.text()
        shown = {}
        for name in EXPORTER_SHOWN:
            for line in text.splitlines():
                if line.startswith((name + "{", name + " ")) and (
                    "group=" not in line or f'group="{GROUP}"' in line
                ):
                    shown[line.split(" ")[0]] = float(line.rsplit(" ", 1)[1])
        return {"url": self.exporter.url, "metrics": shown}

    # -- output ---------------------------------------------------------------------------------

    def print_report(self, r: DemoReport) -> None:
        if self.o.json:
            print(json.dumps(r.to_dict(), indent=2), file=self.out, flush=True)
            return
        lat, per_batch = r.commit_latency_ms, r.batch_latency_ms
        verdict = "PASS: every order exactly once in both stores" if r.ok else "FAIL"
        way = 'writeStream.format("laminar")' if r.way == "format" else "foreachBatch"
        broker = "Apache Kafka" if r.broker == "kafka" else "Tansu"
        lines = [
            "",
            f"laminar demo: exactly-once report ({way} on {broker} + PostgreSQL)",
            f"  source            {r.orders_produced} orders in {r.batches} batches "
            "(per Spark's offset log)",
        ]
        for kill in r.crash.get("kills") or [r.crash]:
            lines.append(
                f"  crash             {kill.get('what', 'worker')} pid {kill['worker_pid']} "
                f"SIGKILLed in epoch {kill['epoch']} at {kill['point']} ({kill['when']})"
            )
        lines.append(f"  recovery          {r.recovery['path']}")
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
            f"{lat['epochs']} epochs ({lat['source']})",
            f"  batch latency     p50 {per_batch['p50']} ms · p99 {per_batch['p99']} ms · max "
            f"{per_batch['max']} ms over {per_batch['batches']} batches ({per_batch['source']})",
        ]
        if r.exporter:
            lines.append(f"  exporter          {r.exporter['url']}")
            lines += [f"    {k} {v:g}" for k, v in r.exporter["metrics"].items()]
        lines.append(f"  result            {verdict}  ({r.seconds} s)")
        lines += [f"  problem: {p}" for p in r.problems]
        print("\n".join(lines), file=self.out, flush=True)

    def keep_waiting(self) -> None:
        print(
            "\nServers are up until Ctrl-C:\n"
            f"  PostgreSQL   {self.dsn}\n"
            f"  Kafka        {self.bootstrap}   (topic {TOPIC})\n"
            f"  Spark        {self.remote}\n"
            + (f"  exporter     {self.exporter.url}\n" if self.exporter else "")
            + f"  try          laminar status --dsn '{self.dsn}'",
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
