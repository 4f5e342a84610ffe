"""A KafkaSink writer killed with SIGKILL at each step of an epoch, then restarted: every row is
committed exactly once — among the committed records replayed by laminar.kafka.log (so it holds
on any broker), and as a librdkafka read_committed consumer of Apache Kafka sees them (every
committed record once, no record of the killed attempt).

Each run kills the writer in epoch 1 (the point's 2nd occurrence; epoch 0 committed), restarts it
to write epochs 0-3 again, and checks the committed records and the marker.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from laminar._core import CrashPoint
from tests.integration.kafka_helpers import (
    ROWS_PER_EPOCH,
    assert_exactly_once,
    assert_read_committed_exactly_once,
    committed,
    make_sink,
    partition_log,
)

WRITER = Path(__file__).with_name("kafka_crash_writer.py")
EPOCHS = 4


def run_writer(
    bootstrap: str, topic: str, tid: str, crash_at: str | None, *extra: str
) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.pop("LAMINAR_CRASH_AT", None)
    if crash_at:
        env["LAMINAR_CRASH_AT"] = crash_at
    return subprocess.run(
        [sys.executable, str(WRITER), bootstrap, topic, tid, str(EPOCHS), *extra],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def kill_and_restart(bootstrap: str, topic: str, tid: str, point: str, *extra: str) -> None:
    """Kills the writer at ``point`` in epoch 1 (epoch 0 committed), restarts it to write epochs
    0-3 again, and checks what each run reports."""
    crashed = run_writer(bootstrap, topic, tid, f"{point}@2", *extra)
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-2000:]
    assert "epoch 0: committed" in crashed.stdout
    assert "epoch 1" not in crashed.stdout

    restarted = run_writer(bootstrap, topic, tid, None, *extra)
    assert restarted.returncode == 0, restarted.stderr[-2000:]
    lines = restarted.stdout.splitlines()
    assert lines[0] == "epoch 0: skipped"
    # killed after the commit: epoch 1 is committed and replaying it is skipped
    expected_epoch_1 = "skipped" if CrashPoint.parse(point).decided else "committed"
    assert lines[1] == f"epoch 1: {expected_epoch_1}"
    assert lines[2:] == ["epoch 2: committed", "epoch 3: committed"]


#: Every point of a lone Kafka sink (docs/engine.md §6): the core's list, so a point added to the
#: enum is killed here too.
KAFKA_POINTS = [p.name for p in CrashPoint.for_protocol("kafka")]


@pytest.mark.parametrize("point", KAFKA_POINTS)
def test_a_writer_killed_mid_epoch_leaves_every_row_exactly_once(
    kafka_broker: Any, kafka_bootstrap: str, topic_name: str, point: str
) -> None:
    kafka_broker.create_topic(topic_name, partitions=2)
    tid = f"tid-{topic_name}"
    kill_and_restart(kafka_bootstrap, topic_name, tid, point)

    expected = {e * 1000 + i for e in range(EPOCHS) for i in range(ROWS_PER_EPOCH)}
    assert_exactly_once(committed(kafka_bootstrap, topic_name), expected)
    assert_read_committed_exactly_once(kafka_bootstrap, topic_name, expected)
    assert make_sink(kafka_bootstrap, topic_name, tid).last_committed_epoch() == EPOCHS - 1
    # after the flush the killed writer's epoch-1 records are on the broker: aborted (by the
    # restarted writer's init_transactions) or open, never committed
    if point == "kafka.after_flush":
        uncommitted = sum(
            len(log.aborted) + len(log.open)
            for log in (partition_log(kafka_bootstrap, topic_name, p) for p in range(2))
        )
        assert uncommitted >= ROWS_PER_EPOCH
