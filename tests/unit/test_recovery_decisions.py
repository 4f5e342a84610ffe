"""The core's protocol decisions and redo codec as Python sees them (pure; the Rust tests walk
every crash point on the simulated harness)."""

from __future__ import annotations

import pytest

from laminar import IllegalStateError, InvalidStateEncoding
from laminar._core import (
    check_generation,
    complete_kafka,
    decide,
    decode_redo,
    dt_next,
    encode_redo,
    plan_epoch,
    watcher_action,
)
from laminar.protocol.recovery import refusal_error


def test_completion_prefers_endtxn_then_redo_then_replay() -> None:
    kw = {"decided_epoch": 5, "previous_epoch": 4, "marker": 4}
    step = complete_kafka("t", producer_id=7, producer_epoch=2, **kw)
    assert (step.action, step.epoch, step.producer_id, step.producer_epoch) == ("end_txn", 5, 7, 2)
    assert complete_kafka("t", end_txn_refused=True, redo_log=True, **kw).action == "redo_from_log"
    assert complete_kafka("t", end_txn_refused=True, **kw).action == "await_replay"
    assert complete_kafka("t", decided_epoch=5, previous_epoch=4, marker=5).action == "complete"


def test_refusals_map_onto_the_error_tree() -> None:
    corrupt = complete_kafka(
        "t", decided_epoch=5, previous_epoch=4, corrupt="bad crc", marker=4, redo_log=True
    )
    assert (corrupt.action, corrupt.refusal) == ("refuse", "corrupt_decision")
    assert isinstance(refusal_error(corrupt.refusal, corrupt.message), InvalidStateEncoding)
    plan = plan_epoch(1, [("pg", 3), ("k", 3)])
    assert (plan.action, plan.refusal) == ("refuse", "epoch_backwards")
    plan = plan_epoch(5, [("pg", 4), ("k", 3)], [("k", 4)])
    assert plan.refusal == "other_epoch_while_incomplete"
    assert plan_epoch(4, [("pg", 4), ("k", 3)], [("k", 4)]).sinks == [False, True]
    assert plan_epoch(4, [("pg", 4), ("k", 4)]).action == "skip"
    assert check_generation("g", 2, 2) is None
    assert "generation 2" in (check_generation("g", 2, 3) or "")


def test_distributed_transitions_and_watcher_rules() -> None:
    assert dt_next(None, "create") == "prepare"
    assert dt_next("prepare", "start_commit") == "commit"
    assert dt_next("commit", "conclude") is None
    with pytest.raises(IllegalStateError, match="final"):
        dt_next("commit", "set_rollback")
    assert decide([True, True], 2) == "start_commit"
    assert decide([True], 2) == "set_rollback"
    assert watcher_action("participant", 100, decision="commit") == "complete"
    assert watcher_action("participant", 100) == "roll_back"
    assert watcher_action("distributed", 100, decision="prepare") == "set_rollback_then_roll_back"
    assert watcher_action("participant", 5, decision="commit") == "wait"
    assert watcher_action("corrupt_decision", 1) == "report_only"


def test_redo_blobs_round_trip_and_reject_corruption() -> None:
    values = [b'{"id":1}', None, b"x" * 1000]
    keys = [b"1", None, b"3"]
    (blob,) = encode_redo(values, keys)
    assert decode_redo(blob) == (values, keys)
    assert decode_redo(encode_redo([b"v"])[0]) == ([b"v"], [None])
    with pytest.raises(InvalidStateEncoding, match="redo"):
        decode_redo(blob[:-1] + bytes([blob[-1] ^ 1]))
