"""``laminar demo``: exactly-once into Kafka and PostgreSQL atomically, a crash, and the proof.

What it does, on embedded servers it starts and stops itself (`laminar.embedded`):

1. a PostgreSQL cluster, a Kafka-protocol broker (Tansu) and a Spark Connect server;
2. a streaming query of "orders" (Spark's ``rate-micro-batch`` source: batch ``b`` holds the
   orders ``b * rows_per_batch`` up to the next batch's first, the same on every replay) written
   by `laminar.spark` into the topic ``orders`` and the table ``public.orders`` as one atomic
   group (docs/protocol.md §3);
3. a crash in the middle of an epoch: the process running ``foreachBatch`` holds at a protocol
   step (by default after the PostgreSQL decision, with the Kafka transaction prepared but not
   committed) and is SIGKILLed from here;
4. the query restarted from its checkpoint: the new writer recovers (the decided epoch is
   completed in Kafka) and Spark's replay of the interrupted batch is skipped or written;
5. the query drained to a clean end (``availableNow``) and a report that proves exactly-once:
   every order the source produced (per Spark's offset log, not per laminar) is in PostgreSQL
   (by key) and among Kafka's *committed* records (read with `laminar.kafka.log`) exactly once.

The writer side runs in the Spark server's Python worker; what it saw (epochs, commit latency,
recovery messages) reaches this process through a JSON-lines file in the demo's directory, which
works because the embedded server runs on this machine.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import json
import logging
import os
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TextIO

from laminar._core import CrashPoint
from laminar._faults import point_named
from laminar.errors import ConfigError

__all__ = ["CRASH_POINTS", "DemoOptions", "DemoReport", "add_arguments", "run", "run_from_args"]

TOPIC = "orders"
TABLE = "public.orders"
TRANSACTIONAL_ID = "laminar-demo-orders"

#: ``--crash-at`` short names → the crash point (docs/engine.md §6) the writer holds at. Any
#: point an atomic epoch reaches is accepted too, by its name (``atomic.after_kafka_prepare``)
#: or its legacy numbered name (``atomic.step4``), resolved by `CrashPoint.parse`.
CRASH_POINTS = {
    # PostgreSQL committed the decision; Kafka's transaction is prepared (flushed), not committed.
    "after-decision": "atomic.after_decision",
    # Kafka's records are flushed (prepared); no decision yet.
    "after-flush": "atomic.after_kafka_prepare",
}
_CRASH_MEANING = {
    "after-decision": "PostgreSQL has decided (committed) the epoch; Kafka holds it prepared",
    "after-flush": "Kafka holds the epoch's records prepared (flushed); nothing decided yet",
}


def crash_point_of(choice: str) -> CrashPoint:
    """The crash point a ``--crash-at`` value names: a short name of `CRASH_POINTS`, or a point
    an atomic epoch reaches (its name or legacy name); `ConfigError` otherwise."""
    point = point_named(CRASH_POINTS.get(choice, choice))
    if point.protocol != "atomic" or point.phase != "epoch":
        epoch_points = [p.name for p in CrashPoint.for_protocol("atomic") if p.phase == "epoch"]
        raise ConfigError(
            f"--crash-at {choice}: the demo holds inside an atomic epoch; choose one of "
            f"{sorted(CRASH_POINTS)} or {epoch_points}"
        )
    return point


def _crash_meaning(choice: str) -> str:
    if choice in _CRASH_MEANING:
        return _CRASH_MEANING[choice]
    if crash_point_of(choice).decided:
        return "PostgreSQL has decided (committed) the epoch"
    return "nothing is decided yet"


EXIT_OK, EXIT_PROOF_FAILED, EXIT_ERROR, EXIT_INTERRUPTED = 0, 1, 2, 130


@dataclass(frozen=True)
class DemoOptions:
    """The demo's settings (``laminar demo --help``)."""

    duration_s: float = 30.0
    rate: int = 100
    trigger_s: float = 1.0
    crash_at: str = "after-decision"
    redo: str = "replay"
    keep: bool = False
    json: bool = False
    spark_remote: str | None = None
    work_dir: str | None = None

    @property
    def rows_per_batch(self) -> int:
        return max(1, round(self.rate * self.trigger_s))


@dataclass
class StoreCheck:
    """One store's contents against what the source produced."""

    rows: int
    distinct: int
    duplicates: int
    missing: int
    unexpected: int
    #: Kafka only: records of aborted or never-finished transactions still in the log.
    uncommitted_in_log: int | None = None

    @property
    def ok(self) -> bool:
        return self.duplicates == 0 and self.missing == 0 and self.unexpected == 0


@dataclass
class DemoReport:
    """What ``laminar demo`` proved (``--json`` prints it)."""

    ok: bool
    orders_produced: int
    batches: int
    postgres: StoreCheck
    kafka: StoreCheck
    epochs_committed_postgres: int | None
    epochs_committed_kafka: int
    commit_latency_ms: dict[str, str | float | int | None]
    crash: dict[str, Any]
    recovery: dict[str, Any]
    seconds: float
    problems: list[str] = field(default_factory=list)
    servers: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# -- the writer side (runs in the Spark server's Python worker) ----------------------------------


class _FileHandler(logging.Handler):
    def __init__(self, journal: DemoForeachBatch) -> None:
        super().__init__(logging.WARNING)
        self.journal = journal

    def emit(self, record: logging.LogRecord) -> None:
        with contextlib.suppress(Exception):
            self.journal.note("log", logger=record.name, message=record.getMessage())


class DemoForeachBatch:
    """The demo's foreachBatch function: laminar's (``inner``) plus a journal of what happened
    in this worker (a JSON line per batch, laminar's warnings — recovery included) and, for the
    first run, the crash point armed to *hold* (the demo kills the worker from outside)."""

    def __init__(
        self, inner: Any, journal_path: str, crash_point: str | None, hold_file: str | None
    ) -> None:
        self.inner = inner
        self.journal_path = journal_path
        self.crash_point = crash_point
        self.hold_file = hold_file
        self._started = False

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_started": False}

    def note(self, event: str, **data: Any) -> None:
        line = json.dumps({"event": event, "pid": os.getpid(), "t": time.time(), **data})
        with open(self.journal_path, "a") as f:
            f.write(line + "\n")

    def __call__(self, df: Any, batch_id: int) -> None:
        if not self._started:
            from laminar import _faults

            _faults.rearm(self.crash_point or "", hold_file=self.hold_file)
            logging.getLogger("laminar").addHandler(_FileHandler(self))
            self._started = True
            self.note("worker")
        epoch = int(batch_id)
        self.note("batch", epoch=epoch)
        self.inner(df, batch_id)
        result = self.inner.last_result
        self.note(
            "done",
            epoch=epoch,
            committed=None if result is None else result.committed,
            commit_ms=self.inner.writer.last_commit_ms
            if result is not None and result.committed
            else None,
        )


# -- progress -----------------------------------------------------------------------------------


class Progress:
    """One status line: rewritten in place on a terminal, a plain line every few seconds
    otherwise (logs, CI)."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.tty = stream.isatty()
        self.started = time.monotonic()
        self._last_plain = 0.0
        self._open_line = False

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def step(self, message: str) -> None:
        self._end_line()
        print(f"[{self.elapsed():6.1f}s] {message}", file=self.stream, flush=True)

    def status(self, message: str) -> None:
        line = f"[{self.elapsed():6.1f}s]   {message}"
        if self.tty:
            print("\r\x1b[2K" + line, end="", file=self.stream, flush=True)
            self._open_line = True
        elif time.monotonic() - self._last_plain >= 3.0:
            print(line, file=self.stream, flush=True)
            self._last_plain = time.monotonic()

    def _end_line(self) -> None:
        if self._open_line:
            print(file=self.stream, flush=True)
            self._open_line = False


# -- the demo -----------------------------------------------------------------------------------


class DemoError(Exception):
    """The demo could not run (a server, the query); the message says what failed."""


def _journal(path: Path) -> list[dict[str, Any]]:
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return []
    out = []
    for line in lines:
        with contextlib.suppress(ValueError):
            out.append(json.loads(line))
    return out


def _pg_state(dsn: str, sink_id: str) -> tuple[int, int | None]:
    import psycopg

    with psycopg.connect(dsn) as conn:
        rows = conn.execute(f"SELECT count(*) FROM {TABLE}").fetchone()
        epoch = None
        if conn.execute("SELECT to_regclass('laminar.sink_epochs')").fetchone() != (None,):
            row = conn.execute(
                "SELECT epoch FROM laminar.sink_epochs WHERE sink_id = %s", (sink_id,)
            ).fetchone()
            epoch = None if row is None else int(row[0])
    return (0 if rows is None else int(rows[0])), epoch


def _wait(
    condition: Callable[[], bool],
    progress: Progress,
    status: Callable[[], str],
    *,
    query: Any,
    timeout: float,
    what: str,
) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if query is not None and not query.isActive:
            if condition():
                return
            raise DemoError(f"the query stopped while waiting for {what}: {query.exception()}")
        if time.monotonic() > deadline:
            raise DemoError(f"timed out after {timeout:.0f} s waiting for {what}")
        progress.status(status())
        time.sleep(0.5)


def _source_end(checkpoint: Path) -> tuple[int, int]:
    """From Spark's own checkpoint: (last committed batch, orders produced up to its end)."""
    commits = [int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit()]
    if not commits:
        raise DemoError(f"no committed batch in {checkpoint / 'commits'}")
    last = max(commits)
    lines = (checkpoint / "offsets" / str(last)).read_text().splitlines()
    # "v1", the batch's metadata, then one line per source: rate-micro-batch's offset JSON
    try:
        offset = json.loads(lines[2])
        return last, int(offset["offset"])
    except (IndexError, ValueError, KeyError, TypeError) as e:
        raise DemoError(f"unexpected offset log {checkpoint / 'offsets' / str(last)}") from e


def _check(values: list[int], produced: int) -> StoreCheck:
    counts = Counter(values)
    expected = range(produced)
    return StoreCheck(
        rows=len(values),
        distinct=len(counts),
        duplicates=sum(n - 1 for n in counts.values() if n > 1),
        missing=sum(1 for i in expected if i not in counts),
        unexpected=sum(1 for v in counts if not 0 <= v < produced),
    )


def _percentile(values: list[float], q: int) -> float | None:
    """The ``q``-th percentile (1-99), interpolated between the measured values."""
    if not values:
        return None
    if len(values) == 1:
        return values[0]
    return float(statistics.quantiles(values, n=100, method="inclusive")[q - 1])


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
        import psycopg

        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(
                f"CREATE TABLE {TABLE} (order_id bigint NOT NULL, customer text NOT NULL,"
                " amount numeric(10, 2) NOT NULL, created_at timestamptz NOT NULL)"
            )
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
        import laminar

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
        import laminar
        import laminar.spark

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
        import laminar.spark

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
        import psycopg

        from laminar.kafka.log import KafkaLogClient

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


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM ends the demo like Ctrl-C (cleanup included), in the main thread only."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def raise_interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, raise_interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def run(options: DemoOptions, out: TextIO = sys.stdout) -> int:
    """Run the demo; returns the exit code (0 proof holds, 1 proof failed, 2 error, 130
    interrupted)."""
    from laminar.embedded import EmbeddedServerError
    from laminar.errors import LaminarError

    try:
        import pyspark.sql.connect  # noqa: F401
    except ImportError as e:
        print(
            f"laminar demo needs Spark Connect's client ({e}): pip install 'laminar[demo]'",
            file=sys.stderr,
        )
        return EXIT_ERROR
    try:
        with _sigterm_as_interrupt():
            return Demo(options, out).run()
    except KeyboardInterrupt:
        print("\nlaminar demo: interrupted; everything it started is stopped", file=sys.stderr)
        return EXIT_INTERRUPTED
    except (DemoError, EmbeddedServerError, LaminarError) as e:
        print(f"laminar demo: {e}", file=sys.stderr)
        return EXIT_ERROR


def _crash_choice(value: str) -> str:
    try:
        crash_point_of(value)
    except ConfigError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``laminar demo`` options."""
    parser.add_argument(
        "--duration", type=float, default=30.0, metavar="S", help="seconds of streaming (30)"
    )
    parser.add_argument(
        "--rate", type=int, default=100, metavar="N", help="orders per second (100)"
    )
    parser.add_argument(
        "--crash-at",
        type=_crash_choice,
        default="after-decision",
        metavar="POINT",
        help="where the writer is killed: after-decision (PostgreSQL committed, Kafka prepared; "
        "default), after-flush (Kafka prepared, nothing decided), or any point of an atomic "
        "epoch by name (atomic.after_lock ... atomic.after_kafka_commit; atomic.step1-8 too)",
    )
    parser.add_argument(
        "--redo",
        choices=("replay", "log"),
        default="replay",
        help="how a decided epoch is completed in Kafka when EndTxn cannot: Spark's replay "
        "(default) or a redo log in PostgreSQL",
    )
    parser.add_argument(
        "--keep",
        action="store_true",
        help="leave the servers up after the report (prints DSN, bootstrap, Spark URL) until "
        "Ctrl-C",
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument(
        "--spark-remote",
        metavar="URL",
        help="use this Spark Connect server (sc://host:port) instead of starting one; its "
        "Python must import laminar and it must run on this machine",
    )
    parser.add_argument(
        "--work-dir", metavar="DIR", help="keep the checkpoint, journal and logs here"
    )


def run_from_args(args: argparse.Namespace) -> int:
    """``laminar demo`` with parsed arguments."""
    if args.duration <= 0 or args.rate <= 0:
        print("laminar demo: --duration and --rate must be > 0", file=sys.stderr)
        return EXIT_ERROR
    return run(
        DemoOptions(
            duration_s=args.duration,
            rate=args.rate,
            crash_at=args.crash_at,
            redo=args.redo,
            keep=args.keep,
            json=args.json,
            spark_remote=args.spark_remote,
            work_dir=args.work_dir,
        )
    )
