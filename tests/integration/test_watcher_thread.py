"""The resolution watcher as a running writer's background thread (``exactly_once(...,
watcher=True)``): a crashed writer of the same group leaves a decided-but-incomplete epoch, and a
stray prepared participant lingers; the live writer's watcher reports both in its structured line,
resolves them by the rules once they are old enough, and its metric goes back to zero."""

from __future__ import annotations

import logging
import re
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

import laminar
from tests.integration.atomic_helpers import (
    assert_exactly_once,
    create_table,
    epoch_table,
    killed,
    make_group,
    run_writer,
)

LINE = re.compile(
    r"laminar\.watcher lingering=(\d+) oldest_age_s=[0-9.]+ unresolved=(\d+) resolved=(\d+)"
)


def passes(caplog: pytest.LogCaptureFixture) -> list[tuple[int, int, int]]:
    found = []
    for record in caplog.records:
        m = LINE.search(record.getMessage())
        if m and record.name == "laminar.protocol.watcher":
            found.append((int(m[1]), int(m[2]), int(m[3])))
    return found


def test_the_watcher_thread_resolves_a_crashed_epoch_and_a_stray_participant(
    kafka_broker: Any,
    kafka_bootstrap: str,
    pg_dsn: str,
    unique_name: Any,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    topic, table = unique_name("topic"), unique_name("tbl")
    kafka_broker.create_topic(topic, partitions=2)
    create_table(pg_dsn, table)
    tid = f"tid-{topic}"
    checkpoint = tmp_path / "checkpoint"
    caplog.set_level(logging.INFO, logger="laminar.protocol.watcher")

    writer = make_group(
        kafka_bootstrap, topic, pg_dsn, table, tid, watcher=True, watcher_interval_s=0.3
    )
    try:
        writer.write_epoch(0, epoch_table(0))
        checkpoint.write_text("0\n")
        watcher = writer.watcher
        assert watcher is not None
        # report at once, resolve only after 3 s (the coordinator's grace period)
        watcher.lingering_after_s = 0.0
        watcher.resolve_after_s = 3.0

        # 1. another writer of the group decides epoch 1 and dies before Kafka commits it
        crashed = run_writer(
            [kafka_bootstrap, topic, pg_dsn, table, tid, "2", str(checkpoint), "replay"],
            "atomic.after_decision",
        )
        assert killed(crashed), crashed.stdout + crashed.stderr[-2000:]
        # 2. a participant of the group's table prepared with no decision (a dead task)
        stray = laminar.PostgresSink(pg_dsn, table, two_phase_part=3)
        stray.init_transactions()
        assert stray.begin_transaction(7)
        stray.write(epoch_table(99))
        stray.prepare_transaction()
        gid = stray.gid(7)
        stray.close()

        caplog.clear()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            seen = passes(caplog)
            if any(lingering == 0 and resolved >= 1 for lingering, _, resolved in seen) and (
                seen[-1] == (0, 0, 0)
            ):
                break
            time.sleep(0.2)
        seen = passes(caplog)
    finally:
        writer.close()

    # reported first (WARNING, both items lingering), then resolved, then nothing left
    assert (2, 2, 0) in seen, seen
    first_resolved = next(i for i, (_, _, r) in enumerate(seen) if r > 0)
    assert all(p == (2, 2, 0) for p in seen[:first_resolved]), seen
    assert sum(r for _, _, r in seen) == 2, seen
    assert seen[-1] == (0, 0, 0), seen
    warnings = [r for r in caplog.records if r.name == "laminar.protocol.watcher"
                and "lingering=2" in r.getMessage()]  # fmt: skip
    assert warnings
    assert all(r.levelno == logging.WARNING for r in warnings)
    assert f"kafka:{tid}" in warnings[0].getMessage()
    assert gid in warnings[0].getMessage()
    assert watcher.lingering == 0
    with psycopg.connect(pg_dsn) as conn:
        assert (
            conn.execute("SELECT 1 FROM pg_prepared_xacts WHERE gid = %s", (gid,)).fetchall() == []
        )
    # the decided epoch 1 completed by EndTxn; the stray rows (epoch 99) rolled back
    assert_exactly_once(kafka_bootstrap, topic, pg_dsn, table, 2)
