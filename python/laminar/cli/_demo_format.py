"""`laminar demo --way format` (the default): the stream written by
``writeStream.format("laminar")`` with Spark's tasks as two-phase participants, a task's Python
worker SIGKILLed mid-write (and, with ``--crash-at``, the driver-side commit between the decision
and the completion), the restarts from the checkpoint, and what the journal says about latency
and recovery (split from `laminar.cli._demo_run`; the Spark side: `laminar.cli._demo_source`)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psycopg

import laminar.spark
from laminar.cli._demo_spec import (
    DSN_VAR,
    GROUP,
    TABLE,
    TASK_CRASH_POINT,
    TOPIC,
    TRANSACTIONAL_ID,
    _journal,
    _wait,
    crash_point_of,
)

if TYPE_CHECKING:
    from laminar.cli._demo_run import Demo

__all__ = ["commit_latencies", "recovery_of", "run_format"]


def _note(demo: Demo, event: str, **data: Any) -> None:
    line = json.dumps({"event": event, "pid": os.getpid(), "t": time.time(), **data})
    with open(demo.journal_path, "a") as f:
        f.write(line + "\n")


def crash_batch(demo: Demo) -> int:
    """The batch whose task is killed: about a third into the run, never the first."""
    return max(1, int(demo.o.duration_s / 3 / demo.o.trigger_s))


def _start(demo: Demo, trigger: dict[str, Any], *, commit_point: str | None = None) -> Any:
    _note(demo, "start")
    writer = (
        demo.orders()
        .writeStream.format("laminar")
        .option("kafka.bootstrap.servers", demo.bootstrap)
        .option("kafka.topic", TOPIC)
        .option("kafka.transactional.id", TRANSACTIONAL_ID)
        .option("kafka.key.column", "order_id")
        .option("postgres.dsn.env", DSN_VAR)
        .option("postgres.table", TABLE)
        .option("checkpointLocation", str(demo.checkpoint))
        .option("demo.journal", str(demo.journal_path))
        .option("demo.task.hold", str(demo.hold_path))
        .option("demo.task.batch", str(crash_batch(demo)))
    )
    if commit_point is not None:
        writer = writer.option("demo.commit.hold", str(demo.commit_hold_path)).option(
            "demo.commit.point", commit_point
        )
    return writer.queryName("laminar_demo_orders").trigger(**trigger).start()


def _decided(dsn: str, batch: int) -> str | None:
    """The state of the batch's distributed transaction (None: no record)."""
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT state FROM laminar.dt_state WHERE group_id = %s AND epoch = %s",
            (GROUP, batch),
        ).fetchone()
    return None if row is None else str(row[0])


def _kill_held(
    demo: Demo, hold: Path, query: Any, *, what: str, point: str, when: str, begun: float
) -> dict[str, Any]:
    """Wait until a process holds at its point (its pid in ``hold``), SIGKILL it, and wait for
    the query to fail as a crash makes it."""
    _wait(
        lambda: hold.exists() and hold.read_text().strip() != "",
        demo.progress,
        demo._status,
        query=query,
        timeout=max(180.0, demo.o.duration_s * 4),
        what=f"the {what} to reach {point}",
    )
    pid = int(hold.read_text().split()[0])
    batch = crash_batch(demo)
    state = _decided(demo.dsn, batch)
    demo.progress.step(
        f"{what} pid {pid} is inside batch {batch} at {point} (its distributed transaction: "
        f"{state or 'no decision'})"
    )
    os.kill(pid, signal.SIGKILL)
    demo.killed.add(pid)
    killed_at = time.monotonic() - begun
    demo.progress.step(f"SIGKILLed the {what} (pid {pid})")
    deadline = time.monotonic() + 120
    while query.isActive and time.monotonic() < deadline:
        time.sleep(0.25)
    error = query.exception()
    reason = str(error).strip().splitlines()[0] if error is not None else "none"
    demo.progress.step(f"the query failed as a crash makes it: {reason[:120]}")
    return {
        "what": what,
        "point": point,
        "when": when,
        "epoch": batch,
        "worker_pid": pid,
        "killed": True,
        "after_s": round(killed_at, 1),
        "decision_at_kill": state,
        "query_error": reason[:300],
    }


def _stop_between_batches(query: Any, timeout_s: float = 15.0) -> None:
    """Stop the query, at a moment no batch runs if one comes within ``timeout_s`` (a batch
    stopped midway is replayed by the next start, which rolls back what it left)."""
    deadline = time.monotonic() + timeout_s
    with contextlib.suppress(Exception):
        while time.monotonic() < deadline and query.status.get("isTriggerActive"):
            time.sleep(0.05)
    query.stop()


def run_format(demo: Demo) -> dict[str, Any]:
    """The format way's stream, crashes and restarts (module docstring); the crash report."""
    from laminar.cli._demo_source import DemoDataSource  # in-function: pyspark's data source

    demo.progress.step(
        "checking the Spark server's Python (laminar importable); registering format('laminar')"
    )
    laminar.spark.register(demo.spark)
    demo.spark.dataSource.register(DemoDataSource)  # laminar's, journalled (_demo_source)
    processing = {"processingTime": f"{int(demo.o.trigger_s * 1000)} milliseconds"}
    commit_point = (
        crash_point_of(demo.o.crash_at, "format").name if demo.o.crash_at is not None else None
    )
    batch = crash_batch(demo)
    begun = time.monotonic()
    demo.progress.step(
        f"streaming {demo.o.rate} orders/s (rate-micro-batch, {demo.o.rows_per_batch} per batch, "
        f"2 partitions) with writeStream.format('laminar') into Kafka topic {TOPIC!r} + table "
        f"{TABLE} atomically, Spark's tasks as the participants; task 0 of batch {batch} will "
        f"hold at {TASK_CRASH_POINT} (its rows written, nothing prepared)"
    )
    kills = []
    query = _start(demo, processing, commit_point=commit_point)
    try:
        kills.append(
            _kill_held(
                demo,
                demo.hold_path,
                query,
                what="task's Python worker",
                point=TASK_CRASH_POINT,
                when="mid-write",
                begun=begun,
            )
        )
    finally:
        with contextlib.suppress(Exception):
            query.stop()
    if commit_point is not None:
        demo.progress.step(
            f"restarting the query from its checkpoint; its commit of batch {batch} will hold "
            f"at {commit_point} ({demo.o.crash_at}: decided, not completed)"
        )
        query = _start(demo, processing, commit_point=commit_point)
        try:
            kills.append(
                _kill_held(
                    demo,
                    demo.commit_hold_path,
                    query,
                    what="driver-side commit",
                    point=commit_point,
                    when=str(demo.o.crash_at),
                    begun=begun,
                )
            )
        finally:
            with contextlib.suppress(Exception):
                query.stop()

    demo.progress.step("restarting the query from its checkpoint (Spark replays the batch)")
    query = _start(demo, processing)
    try:
        _wait(
            lambda: (
                time.monotonic() - begun >= demo.o.duration_s
                and any(
                    e["event"] == "commit" and e.get("batch", -1) > batch
                    for e in _journal(demo.journal_path)
                )
            ),
            demo.progress,
            demo._status,
            query=query,
            timeout=max(demo.o.duration_s - (time.monotonic() - begun), 0) + 180,
            what="the restarted query to commit new batches",
        )
    finally:
        _stop_between_batches(query)
    demo.progress.step("stopping the stream; draining the last batch (availableNow)")
    query = _start(demo, {"availableNow": True})
    demo.drain(query)
    return {**kills[0], "kills": kills}


def commit_latencies(journal: list[dict[str, Any]]) -> tuple[list[float], list[float]]:
    """(each driver-side commit's duration, each batch's first task start to its commit's end)
    in ms, from the journal; a batch's tasks are those that started after the query's last
    (re)start and after the previous commit ended."""
    commits, batches = [], []
    since = 0.0
    tasks: list[dict[str, Any]] = []
    for e in sorted(journal, key=lambda e: float(e.get("ended", e["t"]))):
        if e["event"] == "start":
            since = float(e["t"])
        elif e["event"] == "task":
            tasks.append(e)
        elif e["event"] == "commit":
            started, ended = float(e["started"]), float(e["ended"])
            commits.append((ended - started) * 1000)
            own = [
                float(t["started"])
                for t in tasks
                if t["batch"] == e["batch"] and since <= float(t["started"]) <= started
            ]
            if own:
                batches.append((ended - min(own)) * 1000)
            since = max(since, ended)
    return commits, batches


def recovery_of(journal: list[dict[str, Any]], crash: dict[str, Any]) -> dict[str, Any]:
    """What recovery did, from the kills and the journal."""
    batch = crash.get("epoch")
    kills = crash.get("kills") or [crash]
    replayed = [e for e in journal if e["event"] == "commit" and e.get("batch") == batch]
    aborted = any(e["event"] == "abort" and e.get("batch") == batch for e in journal)
    steps = [
        f"batch {batch}'s attempt with the killed task was rolled back"
        + (" (Spark's abort: roll-back-and-conclude)" if aborted else "")
        + "; the killed worker's PostgreSQL transaction ended with its connection and its Kafka "
        "transaction was aborted when the replay's task fenced its producer"
    ]
    if len(kills) > 1:
        steps.append(
            f"the replay's commit was killed after the decision ({kills[1]['decision_at_kill']});"
            " the next run's commit completed batch "
            f"{batch} from the recorded decision (COMMIT PREPARED, Kafka's commit), its tasks "
            "skipping the decided epoch"
        )
    else:
        steps.append(f"Spark's replay wrote batch {batch} again and committed it")
    return {
        "path": "; ".join(steps),
        "replayed_batch": batch,
        "replay": "written" if len(kills) == 1 else "completed",
        "commits_of_replayed_batch": len(replayed),
        "messages": [],
    }
