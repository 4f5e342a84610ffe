"""`laminar demo --way foreachBatch`: the stream written by ``foreachBatch(laminar's writer)``
(the atomic group in the worker that runs it), that worker held at a protocol step and SIGKILLed,
the restart from the checkpoint, and the recovery path taken (split from `laminar.cli._demo_run`;
the Spark side: `laminar.cli._demo_writer`)."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from typing import TYPE_CHECKING, Any

import laminar
import laminar.spark
from laminar.cli._demo_spec import (
    TABLE,
    TOPIC,
    _crash_meaning,
    _journal,
    _pg_state,
    _wait,
    crash_point_of,
)
from laminar.cli._demo_writer import DemoForeachBatch

if TYPE_CHECKING:
    from laminar.cli._demo_run import Demo

__all__ = ["crash_occurrence", "recovery_of", "run_foreach_batch", "start_query"]


def start_query(demo: Demo, crash: bool, trigger: dict[str, Any]) -> Any:
    """The foreachBatch query; with ``crash``, its writer armed to hold (``--crash-at``)."""
    kafka, postgres = demo.sinks()
    writer = laminar.exactly_once(kafka, postgres, redo=demo.o.redo)  # type: ignore[arg-type]
    inner = laminar.spark.foreach_batch(writer, checkpoint_location=str(demo.checkpoint))
    function = DemoForeachBatch(
        inner,
        str(demo.journal_path),
        f"{crash_point_of(demo.o.crash_choice).name}@{crash_occurrence(demo)}" if crash else None,
        str(demo.hold_path) if crash else None,
    )
    return (
        demo.orders()
        .writeStream.foreachBatch(function)
        .option("checkpointLocation", str(demo.checkpoint))
        .queryName("laminar_demo_orders")
        .trigger(**trigger)
        .start()
    )


def crash_occurrence(demo: Demo) -> int:
    """Which occurrence of the point holds: about a third into the run, never the first epoch."""
    return max(2, int(demo.o.duration_s / 3 / demo.o.trigger_s))


def run_foreach_batch(demo: Demo) -> dict[str, Any]:
    """The foreachBatch way's stream, crash and restart (module docstring); the crash report."""
    kafka, postgres = demo.sinks()
    demo.progress.step("checking the Spark server's Python (laminar importable, servers reachable)")
    laminar.spark.check_server(demo.spark, [kafka, postgres])
    processing = {"processingTime": f"{int(demo.o.trigger_s * 1000)} milliseconds"}
    begun = time.monotonic()
    point = crash_point_of(demo.o.crash_choice).name
    demo.progress.step(
        f"streaming {demo.o.rate} orders/s (rate-micro-batch, {demo.o.rows_per_batch} per "
        f"epoch) with foreachBatch into Kafka topic {TOPIC!r} + table {TABLE} atomically; "
        f"the writer will hold at {point} ({demo.o.crash_choice}) in epoch "
        f"{crash_occurrence(demo) - 1}"
    )
    query = start_query(demo, crash=True, trigger=processing)
    try:
        _wait(
            lambda: demo.hold_path.exists() and demo.hold_path.read_text().strip() != "",
            demo.progress,
            demo._status,
            query=query,
            timeout=max(120.0, demo.o.duration_s * 4),
            what=f"the writer to reach {point}",
        )
        pid = int(demo.hold_path.read_text().split()[0])
        held_epoch = max(
            (e["epoch"] for e in _journal(demo.journal_path) if e["event"] == "batch"),
            default=-1,
        )
        _, decided = _pg_state(demo.dsn, postgres.sink_id)
        kafka_marker = kafka.last_committed_epoch()
        kafka.close()
        demo.progress.step(
            f"writer pid {pid} is inside epoch {held_epoch} at {point}: "
            f"{_crash_meaning(demo.o.crash_choice)} (PostgreSQL decided epoch {decided}, "
            f"Kafka committed epoch {kafka_marker})"
        )
        os.kill(pid, signal.SIGKILL)
        demo.killed_pid = pid
        killed_at = time.monotonic() - begun
        demo.progress.step(f"SIGKILLed the foreachBatch worker (pid {pid}) mid-epoch")
        deadline = time.monotonic() + 60
        while query.isActive and time.monotonic() < deadline:
            time.sleep(0.25)
        error = query.exception()
        reason = str(error).strip().splitlines()[0] if error is not None else "none"
        demo.progress.step(f"the query failed as a crash makes it: {reason[:120]}")
    finally:
        with contextlib.suppress(Exception):
            query.stop()
    crash = {
        "point": point,
        "when": demo.o.crash_choice,
        "epoch": held_epoch,
        "worker_pid": pid,
        "killed": True,
        "after_s": round(killed_at, 1),
        "postgres_decided_epoch": decided,
        "kafka_committed_epoch": kafka_marker,
        "query_error": reason[:300],
    }

    demo.progress.step("restarting the query from its checkpoint (recovery runs first)")
    query = start_query(demo, crash=False, trigger=processing)
    try:
        remaining = max(demo.o.duration_s - (time.monotonic() - begun), 2 * demo.o.trigger_s)
        _wait(
            lambda: (
                time.monotonic() - begun >= demo.o.duration_s
                and any(
                    e["event"] == "done" and e["epoch"] > held_epoch
                    for e in _journal(demo.journal_path)
                )
            ),
            demo.progress,
            demo._status,
            query=query,
            timeout=remaining + 120,
            what="the restarted query to commit new epochs",
        )
    finally:
        query.stop()
    demo.progress.step("stopping the stream; draining the last batch (availableNow)")
    query = start_query(demo, crash=False, trigger={"availableNow": True})
    demo.drain(query)
    return crash


def recovery_of(journal: list[dict[str, Any]], crash: dict[str, Any]) -> dict[str, Any]:
    """The recovery path the restarted writer took, from its journal (laminar's warnings)."""
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
