"""The atomic recipe against server faults and a zombie coordinator (real PostgreSQL, real
broker): a paused old coordinator cannot commit after a new one started; PostgreSQL restarted in
the middle of a run.
The broker restarted or killed mid-run: test_atomic_broker_restart.py."""

from __future__ import annotations

import threading
from typing import Any

import pytest

import laminar
import laminar.engine.loop as driver_module
from laminar._core import CrashPoint
from tests.integration.atomic_helpers import (
    assert_exactly_once,
    create_table,
    epoch_table,
    make_group,
)


def test_a_zombie_coordinator_paused_mid_epoch_cannot_commit_after_a_new_one_started(
    kafka_broker: Any,
    kafka_bootstrap: str,
    pg_dsn: str,
    unique_name: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    topic, table = unique_name("topic"), unique_name("tbl")
    kafka_broker.create_topic(topic, partitions=1)
    create_table(pg_dsn, table)
    tid = f"tid-{topic}"
    zombie = make_group(kafka_bootstrap, topic, pg_dsn, table, tid, retries=0)
    zombie.write_epoch(0, epoch_table(0))

    paused, resume = threading.Event(), threading.Event()
    real = driver_module.crash_point
    began = CrashPoint.parse("atomic.after_kafka_begin")

    def pause_after_kafka_begin(point: CrashPoint | str) -> None:
        if point == began and threading.current_thread().name == "zombie":
            paused.set()
            resume.wait(60)
        real(point)

    monkeypatch.setattr(driver_module, "crash_point", pause_after_kafka_begin)
    outcome: list[BaseException | laminar.EpochResult] = []

    def run_zombie() -> None:
        try:
            outcome.append(zombie.write_epoch(1, epoch_table(1)))
        except BaseException as e:
            outcome.append(e)

    thread = threading.Thread(target=run_zombie, name="zombie")
    thread.start()
    assert paused.wait(30)
    # The zombie holds the group's row lock (step 1): the new coordinator's fencing waits for
    # it, so let it go on once the new one has started its start-up.
    fresh = make_group(kafka_bootstrap, topic, pg_dsn, table, tid, retries=0)
    starter = threading.Thread(target=lambda: fresh.write_epoch(1, epoch_table(1)))
    starter.start()
    resume.set()
    thread.join(60)
    starter.join(120)
    assert outcome, "the zombie did not finish"
    # whatever the interleaving, the zombie never commits a second copy, and a later epoch of
    # the zombie is refused
    with pytest.raises(laminar.FencedError):
        zombie.write_epoch(2, epoch_table(2))
    fresh.write_epoch(2, epoch_table(2))
    fresh.write_epoch(3, epoch_table(3))
    fresh.close()
    assert_exactly_once(kafka_bootstrap, topic, pg_dsn, table, 4)


def test_postgres_restarted_in_the_middle_of_a_run(
    postgres_factory: Any, kafka_broker: Any, kafka_bootstrap: str, unique_name: Any
) -> None:
    server = postgres_factory()
    dsn = server.dsn
    topic, table = unique_name("topic"), unique_name("tbl")
    kafka_broker.create_topic(topic, partitions=2)
    create_table(dsn, table)
    writer = make_group(kafka_bootstrap, topic, dsn, table, f"tid-{topic}", retries=6)
    for epoch in range(2):
        writer.write_epoch(epoch, epoch_table(epoch))
    server.restart()
    for epoch in range(2, 4):
        assert writer.write_epoch(epoch, epoch_table(epoch)).committed
    writer.close()
    assert_exactly_once(kafka_bootstrap, topic, dsn, table, 4)
