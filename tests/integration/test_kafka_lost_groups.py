"""A decided epoch whose Kafka sink lost its marker group — and its identity group too — while
the writer was down (deleted by hand, expired offsets): the restart must not take the sink for
new (docs/protocol.md §1). The decision row in ``laminar.txn_state`` proves the sink has written,
so the bounded witness reads the topic, finds the last committed epoch, and recovery completes
the decided epoch once — from the prepared transaction or the redo log, or Spark's replay.

Before the fix the marker-and-identity case ended in ``InDoubtError`` ("Refusing to guess"),
which neither ``laminar recover`` nor ``laminar resolve`` could settle.
"""

from __future__ import annotations

import pytest
from confluent_kafka.admin import AdminClient

from tests.integration.atomic_helpers import killed, run_writer
from tests.integration.test_atomic_crash import args, check


def delete_groups(bootstrap: str, groups: list[str]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.delete_consumer_groups(groups, request_timeout=15).values():
        future.result()


@pytest.mark.parametrize("redo", ["log", "replay"])
@pytest.mark.parametrize("lost", [("marker",), ("marker", "identity")], ids="+".join)
def test_a_decided_epoch_is_completed_once_after_the_sink_lost_its_groups(
    world: dict[str, str], redo: str, lost: tuple[str, ...]
) -> None:
    # epoch 1 decided, Kafka prepared
    crashed = run_writer(args(world, redo), "atomic.after_decision@2")
    assert killed(crashed), crashed.stdout + crashed.stderr[-2000:]
    assert crashed.stdout.splitlines() == ["epoch 0: committed"]

    tid = world["tid"]
    names = {"marker": f"laminar.{tid}", "identity": f"laminar.{tid}.identity"}
    delete_groups(world["bootstrap"], [names[g] for g in lost])

    restarted = run_writer(args(world, redo), None)
    assert restarted.returncode == 0, restarted.stdout + restarted.stderr[-3000:]
    assert "witness" in restarted.stderr  # the topic was read: the sink was not taken as new
    check(world)  # every row once in PostgreSQL and in Kafka, the last epoch decided
