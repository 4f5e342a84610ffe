"""Scale-out mode (docs/protocol.md §4) without Spark, on a real PostgreSQL and broker: partition
tasks as two-phase participants, the coordinator's decision, recovery by the Vitess rules.

Exactly-once is checked per store: PostgreSQL counts by key, Kafka's committed transactions read
with laminar.kafka.log (aborted records filtered by the transaction index, on any broker).
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psycopg
import pyarrow as pa
import pytest

import laminar
from laminar._core import CrashPoint
from laminar.protocol.scaleout import ParticipantResult, ScaleOutTask
from tests.integration.atomic_helpers import assert_exactly_once, make_group
from tests.integration.kafka_fill import settled_committed as read_committed
from tests.integration.kafka_helpers import ids_of
from tests.integration.scaleout_crash_writer import TASK_CRASH_VAR, partition

PARTS = 4
EPOCHS = 3
WRITER = Path(__file__).with_name("scaleout_crash_writer.py")


def writer_for(w: dict[str, str]) -> laminar.ExactlyOnceWriter:
    return make_group(w["bootstrap"], w["topic"], w["dsn"], w["table"], w["tid"], scale_out=True)


def threads(parts: int = PARTS) -> Any:
    """Run the tasks of an epoch concurrently in threads (one per partition)."""

    def run(task: ScaleOutTask) -> list[ParticipantResult]:
        with ThreadPoolExecutor(parts) as pool:
            futures = [
                pool.submit(task.write_partition, p, partition(task.epoch, p, parts).to_batches())
                for p in range(parts)
            ]
            return [r for f in futures for r in f.result()]

    return run


def leftovers(w: dict[str, str]) -> dict[str, Any]:
    """What the protocol leaves behind: prepared gids of the table's sink, open decisions."""
    with psycopg.connect(w["dsn"]) as conn:
        gids = conn.execute(
            "SELECT gid FROM pg_prepared_xacts WHERE gid LIKE %s", (f"laminar:%{w['table']}%",)
        ).fetchall()
        dts = conn.execute(
            "SELECT dtid, state FROM laminar.dt_state WHERE dtid LIKE %s", (f"%{w['table']}%",)
        ).fetchall()
    return {"prepared": gids, "dt_state": dts}


def participant_decisions(w: dict[str, str]) -> dict[str, int]:
    with psycopg.connect(w["dsn"]) as conn:
        rows = conn.execute(
            "SELECT transactional_id, epoch FROM laminar.txn_state WHERE transactional_id LIKE %s",
            (f"{w['tid']}.p%",),
        ).fetchall()
    return {r[0]: int(r[1]) for r in rows}


def test_happy_path_over_several_partitions(world: dict[str, str]) -> None:
    writer = writer_for(world)
    try:
        for epoch in range(EPOCHS):
            assert writer.write_epoch_scaled(epoch, threads()).committed
        # a replayed epoch is skipped without running a task
        assert writer.write_epoch_scaled(EPOCHS - 1, lambda task: pytest.fail("ran")).skipped
    finally:
        writer.close()
    assert_exactly_once(world["bootstrap"], world["topic"], world["dsn"], world["table"], EPOCHS)
    assert leftovers(world) == {"prepared": [], "dt_state": []}
    # one Kafka participant per partition, each with its decision and its own marker
    assert participant_decisions(world) == {
        f"{world['tid']}.p{p}": EPOCHS - 1 for p in range(PARTS)
    }
    marker = laminar.KafkaSink(world["bootstrap"], world["topic"], f"{world['tid']}.p2")
    try:
        marker.init_transactions()
        assert marker.last_committed_epoch() == EPOCHS - 1
    finally:
        marker.close()


def test_a_failing_task_rolls_the_epoch_back_and_it_is_written_again(
    world: dict[str, str],
) -> None:
    calls = []

    def flaky(task: ScaleOutTask) -> list[ParticipantResult]:
        calls.append(task.epoch)
        if len(calls) == 1:
            # partitions 0 and 1 prepare, then the job fails (Spark gives up on a task)
            for p in (0, 1):
                task.write_partition(p, partition(task.epoch, p, PARTS).to_batches())
            raise RuntimeError("task 2 failed 4 times")
        return list(threads()(task))

    writer = writer_for(world)
    try:
        result = writer.write_epoch_scaled(0, flaky)
    finally:
        writer.close()
    assert result.committed
    assert result.attempts == 2
    assert_exactly_once(world["bootstrap"], world["topic"], world["dsn"], world["table"], 1)
    assert leftovers(world) == {"prepared": [], "dt_state": []}


@pytest.mark.parametrize("collected", ["first", "second"])
def test_a_retried_task_attempt_commits_exactly_one_attempt(
    world: dict[str, str], collected: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Two attempts of partition 0 (a Spark retry, or speculation): the first writes rows the
    second does not (ids + 500, so that the attempt that committed can be told). The second
    attempt's claim rolls the first back; only when the collected result is the second's does
    the epoch commit at once — otherwise it is rolled back and written again. Either way exactly
    one attempt per partition is committed, in both stores."""
    calls = []

    def run(task: ScaleOutTask) -> list[ParticipantResult]:
        calls.append(1)
        if len(calls) > 1:
            return list(threads()(task))
        rows = partition(task.epoch, 0, PARTS)
        stale = rows.set_column(0, "id", pa.array([i + 500 for i in rows["id"].to_pylist()]))
        first = task.write_partition(0, stale.to_batches(), attempt="0-first")
        second = task.write_partition(0, rows.to_batches(), attempt="1-second")
        others = [
            r
            for p in range(1, PARTS)
            for r in task.write_partition(p, partition(task.epoch, p, PARTS).to_batches())
        ]
        return (first if collected == "first" else second) + others

    writer = writer_for(world)
    caplog.set_level(logging.WARNING, logger="laminar")
    try:
        result = writer.write_epoch_scaled(0, run)
    finally:
        writer.close()
    assert "left by an earlier attempt" in caplog.text
    assert result.attempts == (2 if collected == "first" else 1)
    assert len(calls) == result.attempts
    # no row of the stale attempt anywhere
    assert_exactly_once(world["bootstrap"], world["topic"], world["dsn"], world["table"], 1)
    assert leftovers(world) == {"prepared": [], "dt_state": []}


#: The core's scale-out points (docs/engine.md §6): a point added to the enum is killed here too.
TASK_POINTS = [p.name for p in CrashPoint.for_protocol("scaleout") if p.phase == "task"]
#: The coordinator's points of every epoch (a rollback's point is reached only by a rollback).
COORDINATOR_POINTS = [p.name for p in CrashPoint.for_protocol("scaleout") if p.phase == "epoch"]


def run_writer(w: dict[str, str], env_extra: dict[str, str]) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("LAMINAR_CRASH_AT", TASK_CRASH_VAR)}
    env.update(env_extra)
    args = [w["bootstrap"], w["topic"], w["dsn"], w["table"], w["tid"], str(EPOCHS)]
    return subprocess.run(
        [sys.executable, str(WRITER), *args, w["checkpoint"], str(PARTS)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.mark.parametrize("point", TASK_POINTS)
def test_a_task_killed_at_each_step_is_retried_exactly_once(
    world: dict[str, str], point: str
) -> None:
    done = run_writer(world, {TASK_CRASH_VAR: point})
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert "task 1 attempt died (-9)" in done.stderr  # the kill happened, in epoch 1
    assert done.stdout.splitlines()[:EPOCHS] == [f"epoch {e}: committed" for e in range(EPOCHS)]
    assert_exactly_once(world["bootstrap"], world["topic"], world["dsn"], world["table"], EPOCHS)
    assert leftovers(world) == {"prepared": [], "dt_state": []}


@pytest.mark.parametrize("point", COORDINATOR_POINTS)
def test_the_coordinator_killed_at_each_step_recovers_exactly_once(
    world: dict[str, str], point: str
) -> None:
    crashed = run_writer(world, {"LAMINAR_CRASH_AT": f"{point}@2"})
    assert crashed.returncode == -signal.SIGKILL, crashed.stdout + crashed.stderr[-3000:]
    assert crashed.stdout.splitlines() == ["epoch 0: committed"]
    before = leftovers(world)
    assert before["dt_state"], "the crash left epoch 1's decision record"
    restarted = run_writer(world, {})
    assert restarted.returncode == 0, restarted.stdout + restarted.stderr[-3000:]
    decided = CrashPoint.parse(point).decided
    # decided before the crash: start-up completes it and the replay is skipped
    first = "skipped" if decided else "committed"
    assert restarted.stdout.splitlines()[0] == f"epoch 1: {first}"
    assert_exactly_once(world["bootstrap"], world["topic"], world["dsn"], world["table"], EPOCHS)
    assert leftovers(world) == {"prepared": [], "dt_state": []}
    assert participant_decisions(world) == {
        f"{world['tid']}.p{p}": EPOCHS - 1 for p in range(PARTS)
    }


def test_kafka_counts_include_no_aborted_attempt(world: dict[str, str]) -> None:
    """A killed task's Kafka records were produced (and aborted by the retry's fencing): they
    are in the log, and read_committed leaves them out."""
    done = run_writer(world, {TASK_CRASH_VAR: "scaleout.task_after_prepare"})
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    committed = ids_of(read_committed(world["bootstrap"], world["topic"]))
    assert len(committed) == len(set(committed)) == 20 * EPOCHS


@pytest.mark.parametrize("how", ["resolve", "recover"])
def test_the_cli_lists_and_resolves_a_crashed_scale_out_epoch(
    world: dict[str, str], how: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The coordinator dies with every partition prepared and no decision: `laminar status`
    shows the distributed transaction and its participants; `laminar resolve <dtid>
    --rollback` (or `laminar recover`) rolls it back; the restarted writer writes the epoch."""
    import json

    from laminar.cli import main

    crashed = run_writer(world, {"LAMINAR_CRASH_AT": "scaleout.after_tasks@2"})
    assert crashed.returncode == -signal.SIGKILL, crashed.stdout + crashed.stderr[-3000:]
    capsys.readouterr()
    assert main(["status", "--dsn", world["dsn"], "--json"]) == 5
    doc = json.loads(capsys.readouterr().out)
    (dt,) = [d for d in doc["distributed"] if world["table"] in d["dtid"]]
    assert (dt["epoch"], dt["state"]) == (1, "prepare")
    kinds = sorted(p["kind"] for p in dt["participants"])
    assert kinds == ["attempt"] * PARTS + ["kafka"] * PARTS + ["postgres"] * PARTS
    gids = {p["resource"] for p in dt["participants"] if p["kind"] == "postgres"}
    assert {g for (g,) in leftovers(world)["prepared"]} == gids
    assert main(["status", "--dsn", world["dsn"]]) == 5
    text = capsys.readouterr().out
    assert dt["dtid"] in text
    assert f"kafka:{world['tid']}.p3" in text
    if how == "resolve":
        # no decision: committing it is refused (exit 4), rolling it back is what the rules say
        assert main(["resolve", dt["dtid"], "--commit", "--dsn", world["dsn"]]) == 4
        assert main(["resolve", dt["dtid"], "--rollback", "--dsn", world["dsn"]]) == 0
    else:
        # 5 only if another test's leftovers in the shared database stay unresolved
        assert main(["recover", "--dsn", world["dsn"], "--older-than", "0"]) in (0, 5)
        assert f"{dt['dtid']}: distributed, set_rollback_then_roll_back -> resolved" in (
            capsys.readouterr().out
        )
    capsys.readouterr()
    assert leftovers(world) == {"prepared": [], "dt_state": []}
    restarted = run_writer(world, {})
    assert restarted.returncode == 0, restarted.stdout + restarted.stderr[-3000:]
    assert restarted.stdout.splitlines()[0] == "epoch 1: committed"
    assert_exactly_once(world["bootstrap"], world["topic"], world["dsn"], world["table"], EPOCHS)


def test_an_empty_batch_writes_and_records_nothing(world: dict[str, str]) -> None:
    empty = pa.table({"id": pa.array([], pa.int64()), "name": pa.array([], pa.string())})
    writer = writer_for(world)
    try:
        result = writer.write_epoch_scaled(
            0, lambda task: [r for p in range(PARTS) for r in task.write_partition(p, [empty])]
        )
        assert result.skipped
        assert writer.write_epoch_scaled(0, threads()).committed  # not taken for a replay
    finally:
        writer.close()
    assert_exactly_once(world["bootstrap"], world["topic"], world["dsn"], world["table"], 1)
    assert leftovers(world) == {"prepared": [], "dt_state": []}


def test_a_completion_that_fails_after_the_decision_is_finished_before_the_next_epoch(
    world: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """COMMIT PREPARED fails once after the decision (the connection dropped): the epoch is
    in doubt for the caller, and the writer's retry completes the decided transaction from
    its records (the recovery rules) instead of writing anything again."""
    import laminar.protocol.distributed as distributed

    real = distributed.commit_prepared
    failures = []

    def flaky_commit(conn: Any, gid: str) -> bool:
        if not failures:
            failures.append(gid)
            raise psycopg.OperationalError("server closed the connection unexpectedly")
        return real(conn, gid)

    monkeypatch.setattr(distributed, "commit_prepared", flaky_commit)
    writer = writer_for(world)
    try:
        result = writer.write_epoch_scaled(0, threads())
        assert failures
        assert result.attempts == 2
        assert writer.write_epoch_scaled(1, threads()).committed
    finally:
        writer.close()
    assert_exactly_once(world["bootstrap"], world["topic"], world["dsn"], world["table"], 2)
    assert leftovers(world) == {"prepared": [], "dt_state": []}
