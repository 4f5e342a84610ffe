"""`laminar demo`'s settings, constants, crash points, report types, progress line and the
helpers that read the stores and the journal (split from `laminar.cli.demo`)."""

from __future__ import annotations

import contextlib
import json
import statistics
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TextIO

import psycopg

from laminar._core import CrashPoint
from laminar._faults import point_named
from laminar.errors import ConfigError

TOPIC = "orders"
TABLE = "public.orders"
TRANSACTIONAL_ID = "laminar-demo-orders"
#: The demo's atomic group: the default group id of its two sinks (their ids, sorted, joined).
GROUP = "+".join(sorted((TABLE, TRANSACTIONAL_ID)))
#: The environment variable of the demo's Spark server holding the PostgreSQL DSN
#: (format("laminar")'s ``postgres.dsn.env``: a DSN is never an option).
DSN_VAR = "LAMINAR_DEMO_PG_DSN"
#: The exporter's metrics the report shows (the demo group's, and the exporter's own).
EXPORTER_SHOWN = (
    "laminar_group_last_committed_epoch",
    "laminar_group_commits_total",
    "laminar_group_aborts_total",
    "laminar_group_epochs_in_doubt",
    "laminar_group_commit_latency_seconds_count",
    "laminar_group_commit_latency_seconds_sum",
    "laminar_prepared_transactions",
    "laminar_up",
)

#: ``--crash-at`` short names → the crash point (docs/engine.md §6) the writer holds at. Any
#: point an atomic epoch reaches is accepted too, by its name (``atomic.after_kafka_prepare``),
#: resolved by `CrashPoint.parse`.
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


#: The ways the demo writes (``--way``): Spark's own sink API (the data source, executors as
#: participants) and ``foreachBatch``.
WAYS = ("format", "foreachBatch")
#: The brokers (``--broker``): Apache Kafka (a JVM) or Tansu (none; it neither fences nor hides
#: aborted records: README, "Broker compatibility").
BROKERS = ("kafka", "tansu")

#: ``format("laminar")``: the point a task's worker holds at (its partition written, Kafka's
#: transaction open with its records, PostgreSQL's COPY done, nothing prepared yet).
TASK_CRASH_POINT = "scaleout.task_before_prepare"
#: ``format("laminar")``'s ``--crash-at`` short names: the driver-side commit's points.
COMMIT_CRASH_POINTS = {
    # the decision committed in PostgreSQL; the participants prepared, not completed
    "after-decision": "scaleout.after_decision",
}
#: Points of the driver-side commit a ``--crash-at`` name may also give.
_COMMIT_POINTS = ("scaleout.after_decision", "scaleout.mid_completion")


def crash_point_of(choice: str, way: str = "foreachBatch") -> CrashPoint:
    """The crash point a ``--crash-at`` value names for ``way``: for ``foreachBatch`` a short
    name of `CRASH_POINTS` or a point an atomic epoch reaches (its name); for
    ``format`` a short name of `COMMIT_CRASH_POINTS` or a point of the driver-side commit;
    `ConfigError` otherwise."""
    if way == "format":
        name = COMMIT_CRASH_POINTS.get(choice, choice)
        if name not in _COMMIT_POINTS:
            raise ConfigError(
                f"--crash-at {choice}: with --way format the demo kills the driver-side commit "
                f"between the decision and the completion; choose one of "
                f"{sorted(COMMIT_CRASH_POINTS)} or {list(_COMMIT_POINTS)} (--way foreachBatch "
                "takes the atomic epoch's points)"
            )
        return point_named(name)
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
    #: foreachBatch: where the writer is killed (None: after-decision); format: the
    #: driver-side commit killed too (None: only the task's worker)
    crash_at: str | None = None
    redo: str = "replay"
    keep: bool = False
    json: bool = False
    spark_remote: str | None = None
    work_dir: str | None = None
    way: str = "format"
    broker: str = "kafka"

    @property
    def rows_per_batch(self) -> int:
        return max(1, round(self.rate * self.trigger_s))

    @property
    def crash_choice(self) -> str:
        """The foreachBatch way's ``--crash-at`` (its default: after-decision)."""
        return self.crash_at or "after-decision"


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
    #: ``format`` or ``foreachBatch``, and the broker it ran on
    way: str = "foreachBatch"
    broker: str = "tansu"
    #: per micro-batch: first task's start (format) or foreachBatch's call, to the commit's end
    batch_latency_ms: dict[str, str | float | int | None] = field(default_factory=dict)
    #: ``laminar exporter``'s URL and a few of its metrics at the end
    exporter: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


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


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def _foreach_batch_latencies(journal: list[dict[str, Any]]) -> list[float]:
    """foreachBatch's call to its return, per committed epoch (ms), from the worker's journal."""
    begun: dict[tuple[int, int], float] = {}
    found = []
    for e in journal:
        key = (int(e.get("pid", 0)), int(e.get("epoch", -1)))
        if e["event"] == "batch":
            begun[key] = float(e["t"])
        elif e["event"] == "done" and e.get("committed") and key in begun:
            found.append((float(e["t"]) - begun[key]) * 1000)
    return found
