"""A decided epoch whose prepared Kafka transaction the broker aborts because it outlived
``transaction.timeout.ms`` while the writer was down — Flink's most-reported data-loss case —
on a real Apache Kafka broker (docs/protocol.md §3, "Completing Kafka's part", and §8).

The writer (the atomic pair, a subprocess) is SIGKILLed right after PostgreSQL decided epoch 1
(`atomic.after_decision`), its Kafka transaction prepared with ``transaction.timeout.ms`` = 3 s. The
broker aborts it (it checks every second: `laminar.embedded.kafka.SINGLE_NODE_SETTINGS`). Then:

- ``laminar status`` reports the decided epoch Kafka does not hold (exit 5, in doubt);
- with ``redo="log"`` the restarted writer completes epoch 1 from the redo log, exactly once;
- without it (``redo="replay"``), ``laminar recover`` cannot complete it and says so; the epoch
  stays reported until the writer's restart replays batch 1, which writes Kafka's part once;
  meanwhile ``format("laminar")``'s commit over the same sinks (the same group) refuses with a
  `FatalError` that sends the user back to ``foreachBatch`` for that batch.
"""

from __future__ import annotations

import json
import time
from typing import Any

import psycopg
import pytest

from laminar.cli import main
from laminar.errors import FatalError
from laminar.kafka.log import read_partition
from laminar.spark.options import parse_options
from laminar.spark.source import commit_batch
from tests.integration.atomic_helpers import create_table, killed, run_writer
from tests.integration.test_atomic_crash import EPOCHS, args, check

TRANSACTION_TIMEOUT_MS = 3000


def wait_for_the_broker_to_abort(bootstrap: str, topic: str, timeout: float = 30.0) -> float:
    """Seconds until the killed writer's records are aborted (by the broker: nothing else runs)
    and no transaction is open on the topic."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        logs = [read_partition(bootstrap, topic, p) for p in range(2)]
        if any(log.aborted for log in logs) and not any(log.open for log in logs):
            return time.monotonic() - started
        time.sleep(0.5)
    pytest.fail(f"the broker did not abort the prepared transaction within {timeout:.0f} s")


@pytest.fixture
def own_world(world: dict[str, str], postgres: Any, unique_name: Any) -> dict[str, str]:
    """``world`` with a decision database of its own: ``laminar status`` reports the whole
    database, and other tests leave in-doubt items on purpose (a corrupt decision) in the
    shared one; the exit codes asserted here are this test's alone."""
    dsn = str(postgres.create_database(unique_name("db")))
    create_table(dsn, world["table"])
    return {**world, "dsn": dsn}


def status(dsn: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any]]:
    capsys.readouterr()
    code = main(["status", "--dsn", dsn, "--json"])
    return code, json.loads(capsys.readouterr().out)


def refuse_the_scale_out_commit(world: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """``format("laminar")``'s commit of batch 1 and 2 over the same sinks: `FatalError` saying
    that only foreachBatch's replay writes Kafka's part; nothing decided, nothing written."""
    monkeypatch.setenv("LAMINAR_TEST_STATE_DSN", world["dsn"])
    options = parse_options(
        {
            "postgres.dsn.env": "LAMINAR_TEST_STATE_DSN",
            "postgres.table": world["table"],
            "kafka.bootstrap.servers": world["bootstrap"],
            "kafka.topic": world["topic"],
            "kafka.transactional.id": world["tid"],
            "kafka.key.column": "id",
        }
    )
    for batch in (1, 2):
        with pytest.raises(FatalError, match="foreachBatch") as refused:
            commit_batch(options, [], batch)
        assert "epoch 1 (batch 1)" in str(refused.value)
    with psycopg.connect(world["dsn"]) as conn:
        decided = conn.execute(
            "SELECT epoch FROM laminar.txn_state WHERE transactional_id = %s", (world["tid"],)
        ).fetchone()
    assert decided == (1,)


def kafka_row(doc: dict[str, Any], tid: str) -> dict[str, Any]:
    (row,) = [s for s in doc["sinks"] if s["sink_id"] == tid]
    return row


@pytest.mark.parametrize("redo", ["log", "replay"])
def test_a_prepared_transaction_the_broker_timed_out_is_reported_and_completed_once(
    own_world: dict[str, str],
    redo: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    world = own_world
    monkeypatch.setenv("LAMINAR_TEST_TRANSACTION_TIMEOUT_MS", str(TRANSACTION_TIMEOUT_MS))
    crashed = run_writer(args(world, redo), "atomic.after_decision@2")
    assert killed(crashed), crashed.stdout + crashed.stderr[-2000:]
    assert crashed.stdout.splitlines() == ["epoch 0: committed"]

    waited = wait_for_the_broker_to_abort(world["bootstrap"], world["topic"])
    assert waited < TRANSACTION_TIMEOUT_MS / 1000 + 15

    # Reported: PostgreSQL decided epoch 1, Kafka holds epoch 0.
    code, doc = status(world["dsn"], capsys)
    assert code == 5
    row = kafka_row(doc, world["tid"])
    assert (row["last_committed_epoch"], row["decided_epoch"]) == (0, 1)
    items = [i for i in doc["in_doubt"] if i["id"] == f"kafka:{world['tid']}"]
    assert len(items) == 1, doc["in_doubt"]
    assert (items[0]["epoch"], items[0]["decision"]) == (1, "commit")

    if redo == "replay":
        # No redo log: only the replay of batch 1 can write Kafka's part; recover says so.
        code = main(["recover", "--dsn", world["dsn"], "--older-than", "0"])
        out = capsys.readouterr().out
        assert code == 5, out
        assert "replay" in out
        assert status(world["dsn"], capsys)[0] == 5  # still reported
        # format('laminar') shares the group's records but its tasks skip a decided epoch:
        # its commit refuses (batch 1, or a later one) instead of counting epoch 1 complete
        refuse_the_scale_out_commit(world, monkeypatch)

    restarted = run_writer(args(world, redo), None)
    assert restarted.returncode == 0, restarted.stdout + restarted.stderr[-3000:]
    assert "EndTxn could not complete decided epoch 1" in restarted.stderr
    if redo == "log":
        assert "completed in Kafka from the redo log" in restarted.stderr
        assert restarted.stdout.splitlines()[0] == "epoch 1: skipped"
    else:
        assert "waiting for Spark's replay of batch 1" in restarted.stderr
        assert restarted.stdout.splitlines()[0] == "epoch 1: committed"  # Kafka only
    check(world)  # every row once in PostgreSQL, once in Kafka, once to read_committed
    code, doc = status(world["dsn"], capsys)
    assert code == 0, doc["in_doubt"]
    assert kafka_row(doc, world["tid"])["last_committed_epoch"] == EPOCHS - 1
