"""The atomic recipe (docs/protocol.md §3) killed with SIGKILL at every step, then restarted:
every row is in PostgreSQL exactly once and among Kafka's committed transactions exactly once
(read with laminar.kafka.log, so it holds on any broker) — and, on Apache Kafka, a librdkafka
read_committed consumer sees every committed record once and no record of an aborted attempt.

Compatibility subset: the kill at every step also runs on Tansu (with the redo log), where only
laminar.kafka.log can judge (Tansu's read_committed shows aborted records).

Each run writes epochs 0-3 like Spark (a restarted writer resumes at the batch whose
foreachBatch did not return), killed in epoch 1 at the point's second occurrence.

The points are the core's (`CrashPoint.for_protocol`, docs/engine.md §6), the very ones the
Rust simulation walks: a point added to the enum is killed here too, with no edit.
"""

from __future__ import annotations

import os
import random
import time

import psycopg
import pytest

from laminar._core import CrashPoint
from tests.fixtures import APACHE_KAFKA, TANSU
from tests.integration.atomic_helpers import (
    ROWS_PER_EPOCH,
    abort_prepared,
    assert_exactly_once,
    kill_at_step_and_restart,
    kill_in_recovery_and_finish,
    killed,
    run_writer,
)
from tests.integration.kafka_fill import settled_committed as read_committed
from tests.integration.kafka_helpers import assert_read_committed_exactly_once

EPOCHS = 4
#: The points reached once per epoch, in the order an epoch reaches them.
STEPS = [p.name for p in CrashPoint.for_protocol("atomic") if p.phase == "epoch"]
#: The points of a start-up and of a recovery (reached only when something decided earlier
#: must be brought level).
RECOVERY = [
    p.name
    for p in CrashPoint.for_protocol("atomic") + CrashPoint.for_protocol("recovery")
    if p.phase in ("start", "recovery")
]
#: The walks of an encoding other than the plain one (routed rows, Avro: the same store
#: combination, so the same protocol) kill at a sample of these points, not at all of them: the
#: protocol's every point is walked here and in the core's simulation (docs/engine.md §7), and
#: what an encoding can change is what lands in Kafka — records produced but not committed
#: (``after_produce``), an epoch decided and completed after the crash (``after_decision``), and
#: records re-produced from the redo log (``recovery.mid_redo``).
ENCODING_STEPS = ["atomic.after_produce", "atomic.after_decision"]
ENCODING_RECOVERY = ["recovery.mid_redo"]
#: The point where an epoch is decided and Kafka still prepared (recovery must complete it).
DECIDED_PREPARED = next(p for p in STEPS if CrashPoint.parse(p).after == "commit_decision")


def args(w: dict[str, str], redo: str) -> list[str]:
    return [
        w["bootstrap"], w["topic"], w["dsn"], w["table"], w["tid"], str(EPOCHS), w["checkpoint"],
        redo,
    ]  # fmt: skip


def check(w: dict[str, str]) -> None:
    assert_exactly_once(w["bootstrap"], w["topic"], w["dsn"], w["table"], EPOCHS)
    if w["broker"] != TANSU:
        expected = {e * 1000 + i for e in range(EPOCHS) for i in range(ROWS_PER_EPOCH)}
        assert_read_committed_exactly_once(w["bootstrap"], w["topic"], expected)
    with psycopg.connect(w["dsn"]) as conn:
        decided = conn.execute(
            "SELECT epoch FROM laminar.txn_state WHERE transactional_id = %s", (w["tid"],)
        ).fetchone()
    assert decided == (EPOCHS - 1,)


@pytest.mark.parametrize(
    ("broker_under_test", "redo"),
    [(APACHE_KAFKA, "replay"), (APACHE_KAFKA, "log"), (TANSU, "log")],
    indirect=["broker_under_test"],
)
@pytest.mark.parametrize("point", STEPS)
def test_a_writer_killed_at_each_step_recovers_exactly_once(
    world: dict[str, str], point: str, redo: str
) -> None:
    # killed after the decision: epoch 1 is committed, its replay is skipped
    restarted = kill_at_step_and_restart(args(world, redo), point)
    if (
        CrashPoint.parse(point).after == "commit_decision"
    ):  # decided, Kafka still prepared: EndTxn completes it
        assert "committed in Kafka by EndTxn" in restarted.stderr
    check(world)


@pytest.mark.parametrize("redo", ["replay", "log"])
def test_a_decided_epoch_whose_kafka_transaction_was_aborted_is_redone(
    world: dict[str, str], redo: str
) -> None:
    crashed = run_writer(args(world, redo), f"{DECIDED_PREPARED}@2")
    assert killed(crashed)
    # the broker gives up the prepared transaction (as after transaction.timeout.ms)
    abort_prepared(world["bootstrap"], world["tid"])
    restarted = run_writer(args(world, redo), None)
    assert restarted.returncode == 0, restarted.stdout + restarted.stderr[-3000:]
    assert "EndTxn could not complete decided epoch 1" in restarted.stderr
    if redo == "log":
        assert "completed in Kafka from the redo log" in restarted.stderr
    else:
        assert "waiting for Spark's replay of batch 1" in restarted.stderr
    # either way the replayed batch 1 finds PostgreSQL done and writes Kafka only
    assert restarted.stdout.splitlines()[0] == "epoch 1: committed" if redo == "replay" else True
    check(world)
    with psycopg.connect(world["dsn"]) as conn:
        redo_rows = conn.execute(
            "SELECT count(*) FROM laminar.redo WHERE transactional_id = %s", (world["tid"],)
        ).fetchone()
    assert redo_rows in [(0,), (1,)]


@pytest.mark.parametrize("redo", ["replay", "log"])
@pytest.mark.parametrize("point", RECOVERY)
def test_a_writer_killed_again_during_recovery_recovers_exactly_once(
    world: dict[str, str], point: str, redo: str
) -> None:
    kill_in_recovery_and_finish(
        args(world, redo), world["bootstrap"], world["tid"], point, redo, DECIDED_PREPARED
    )
    check(world)


def test_a_corrupt_decision_is_refused_until_resolved(world: dict[str, str]) -> None:
    assert killed(run_writer(args(world, "log"), f"{DECIDED_PREPARED}@2"))
    with psycopg.connect(world["dsn"]) as conn:
        conn.execute(
            "UPDATE laminar.txn_state SET prepared_state = 'lm1.not-a-state' "
            "WHERE transactional_id = %s",
            (world["tid"],),
        )
    refused = run_writer(args(world, "log"), None)
    assert refused.returncode == 3, refused.stdout + refused.stderr[-2000:]
    assert "error InvalidStateEncoding" in refused.stdout
    assert "no automatic decision" in refused.stdout
    # nothing was decided for it: epoch 1 is in PostgreSQL, not in Kafka
    ids = {int(r.value.split(b'"id":')[1].split(b",")[0]) for r in read_committed(
        world["bootstrap"], world["topic"])}  # fmt: skip
    assert max(ids) < 1000


@pytest.mark.slow
def test_many_random_kills_always_end_exactly_once(world: dict[str, str]) -> None:
    """A seeded, reproducible loop of kills at random points (steps and recovery), with the
    broker giving up prepared transactions at random; bounded in time."""
    seed = int(os.environ.get("LAMINAR_TEST_SEED", time.time() % 10_000))
    print(f"seed {seed} (rerun with LAMINAR_TEST_SEED={seed})")
    rng = random.Random(seed)
    points = [*STEPS, *RECOVERY]
    redo = rng.choice(["replay", "log"])
    kills = 0
    deadline = time.monotonic() + 150
    while time.monotonic() < deadline:
        # the first run is fresh, so every step occurs once per epoch (EPOCHS > 3) and the first
        # kill always happens; later points may belong to a recovery that is not needed
        chosen = rng.choice(STEPS if kills == 0 else points)
        crash = f"{chosen}@{rng.randint(1, 3)}" if kills < 10 else None
        result = run_writer(args(world, redo), crash)
        if killed(result):
            kills += 1
            if rng.random() < 0.3:
                abort_prepared(world["bootstrap"], world["tid"])
            continue
        assert result.returncode == 0, f"seed {seed}: {result.stdout}{result.stderr[-3000:]}"
        if "done" in result.stdout:
            break
    else:
        pytest.fail(f"seed {seed}: did not finish in time ({kills} kills)")
    check(world)
    assert kills >= 1, f"seed {seed}"
