"""``laminar demo``'s ways as data (no server): which ``--crash-at`` each way takes, and the
format way's latencies read from a journal like the one its Spark side writes."""

from __future__ import annotations

import pytest

from laminar.cli import main
from laminar.cli._demo_format import commit_latencies
from laminar.cli._demo_spec import crash_point_of
from laminar.errors import ConfigError


def test_each_way_takes_its_own_crash_points() -> None:
    assert crash_point_of("after-decision", "format").name == "scaleout.after_decision"
    assert crash_point_of("scaleout.mid_completion", "format").name == "scaleout.mid_completion"
    assert crash_point_of("after-decision").name == "atomic.after_decision"
    assert crash_point_of("after-flush", "foreachBatch").name == "atomic.after_kafka_prepare"
    with pytest.raises(ConfigError, match="with --way format"):
        crash_point_of("after-flush", "format")
    with pytest.raises(ConfigError, match="inside an atomic epoch"):
        crash_point_of("scaleout.after_decision", "foreachBatch")


def test_the_command_refuses_a_point_of_the_other_way_and_a_remote_spark_for_format(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["demo", "--crash-at", "after-flush"]) == 2
    assert "with --way format" in capsys.readouterr().err
    assert main(["demo", "--spark-remote", "sc://127.0.0.1:1"]) == 2
    assert "--spark-remote needs --way foreachBatch" in capsys.readouterr().err


def test_batch_latency_counts_the_tasks_of_the_run_that_committed() -> None:
    journal = [
        {"event": "start", "t": 0.0},
        {"event": "task", "t": 1.2, "batch": 0, "started": 1.0, "ended": 1.2},
        {"event": "task", "t": 1.3, "batch": 0, "started": 1.1, "ended": 1.3},
        {"event": "commit", "t": 1.5, "batch": 0, "started": 1.4, "ended": 1.5},
        # batch 1's first attempt: a task killed (never journalled), the other one's write
        {"event": "task", "t": 2.2, "batch": 1, "started": 2.0, "ended": 2.2},
        {"event": "start", "t": 5.0},
        {"event": "task", "t": 5.4, "batch": 1, "started": 5.2, "ended": 5.4},
        {"event": "commit", "t": 5.9, "batch": 1, "started": 5.6, "ended": 5.9},
    ]
    commits, batches = commit_latencies(journal)
    assert commits == pytest.approx([100.0, 300.0])
    assert batches == pytest.approx([500.0, 700.0])  # 1.0 → 1.5; the restart's 5.2 → 5.9
