"""laminar.EpochTracker: the per-sink driver of the transaction state machine."""

from __future__ import annotations

import pickle
import time
from collections.abc import Callable

import pytest

from laminar import EpochTracker, TransactionalSinkMetrics, TransactionState
from laminar.errors import IllegalStateError, LaminarError

Step = Callable[[EpochTracker], object]

# Every tracker call, keyed by the event name the core uses in its messages.
CALLS: dict[str, Step] = {
    "begin": lambda t: t.begin(9, now_us=0),
    "record_write": lambda t: t.record_write(1, 1),
    "prepare": lambda t: t.prepare(),
    "commit_started": lambda t: t.commit_started(now_us=0),
    "commit_ok": lambda t: t.commit_ok(now_us=0),
    "commit_failed": lambda t: t.commit_failed(),
    "abort_started": lambda t: t.abort_started(),
    "abort_ok": lambda t: t.abort_ok(now_us=0),
    "abort_failed": lambda t: t.abort_failed(),
    "resolve(committed)": lambda t: t.resolve(True, now_us=0),
    "resolve(aborted)": lambda t: t.resolve(False, now_us=0),
}

# How to bring a fresh tracker into each state (epoch 7), using legal calls only.
TO_STATE: dict[str, list[Step]] = {
    "Idle": [],
    "Active": [lambda t: t.begin(7, now_us=0)],
    "Prepared": [lambda t: t.begin(7, now_us=0), lambda t: t.prepare()],
    "Committing": [lambda t: t.begin(7, now_us=0), lambda t: t.commit_started(now_us=0)],
    "Aborting": [lambda t: t.begin(7, now_us=0), lambda t: t.abort_started()],
    "Failed": [
        lambda t: t.begin(7, now_us=0),
        lambda t: t.commit_started(now_us=0),
        lambda t: t.commit_failed(),
    ],
}

# The sink's transaction state table (docs/protocol.md §1 / F-E2E-002), written out independently.
LEGAL: dict[tuple[str, str], str] = {
    ("Idle", "begin"): "Active",
    ("Active", "record_write"): "Active",
    ("Active", "prepare"): "Prepared",
    ("Active", "commit_started"): "Committing",
    ("Prepared", "commit_started"): "Committing",
    ("Committing", "commit_ok"): "Idle",
    ("Committing", "commit_failed"): "Failed",
    ("Active", "abort_started"): "Aborting",
    ("Prepared", "abort_started"): "Aborting",
    ("Aborting", "abort_ok"): "Idle",
    ("Aborting", "abort_failed"): "Failed",
    ("Failed", "resolve(committed)"): "Idle",
    ("Failed", "resolve(aborted)"): "Idle",
}


def tracker_in(state: str) -> EpochTracker:
    t = EpochTracker("orders")
    for step in TO_STATE[state]:
        step(t)
    assert t.state.name == state
    return t


@pytest.mark.parametrize("state", list(TO_STATE))
@pytest.mark.parametrize("call", list(CALLS))
def test_every_state_and_call(state: str, call: str) -> None:
    t = tracker_in(state)
    before = (t.state, t.records(), t.metrics(), t.last_committed_epoch)
    if (state, call) in LEGAL:
        CALLS[call](t)
        assert t.state.name == LEGAL[(state, call)]
    else:
        with pytest.raises(IllegalStateError) as info:
            CALLS[call](t)
        message = str(info.value)
        assert str(before[0]) in message
        assert call in message
        assert info.value.sink_id == "orders"
        assert (t.state, t.records(), t.metrics(), t.last_committed_epoch) == before


def test_full_cycle_records_and_metrics() -> None:
    t = EpochTracker("orders")
    assert t.state == TransactionState.Idle()
    assert t.begin(0, now_us=1_000) is True
    assert t.current_epoch == 0
    t.record_write(3, 300)
    t.record_write(2, bytes=200)
    t.prepare(epoch=0)
    t.commit_started(now_us=1_100, epoch=0)
    assert t.state == TransactionState.Committing(0)
    t.commit_ok(now_us=1_600)
    assert t.state == TransactionState.Idle()
    assert t.current_epoch is None
    assert t.last_committed_epoch == 0

    record = t.record(0)
    assert record is not None
    assert record.state == "Committed"
    assert (record.events_written, record.bytes_written) == (5, 500)
    assert (record.opened_at_us, record.commit_started_at_us, record.completed_at_us) == (
        1_000,
        1_100,
        1_600,
    )
    assert record.commit_latency_us == 500
    assert record.is_completed
    assert not record.resolved_by_recovery
    assert record.to_dict()["state"] == "Committed"
    assert t.records() == [record]

    m = t.metrics()
    assert isinstance(m, TransactionalSinkMetrics)
    assert (m.commits, m.aborts, m.commit_failures) == (1, 0, 0)
    assert (m.events_written, m.bytes_written) == (5, 500)
    assert m.avg_commit_latency_us == 500.0
    assert m.max_commit_latency_us == 500
    assert m.p50_commit_latency_us == pytest.approx(500, rel=0.01)
    assert m.p99_commit_latency_us == pytest.approx(500, rel=0.01)


def test_one_phase_commit_from_active() -> None:
    t = EpochTracker()
    t.begin(4, now_us=0)
    t.commit_started(now_us=1)
    t.commit_ok(now_us=2)
    assert t.last_committed_epoch == 4


def test_replayed_epoch_is_skipped_and_nothing_changes() -> None:
    t = EpochTracker("orders", last_committed_epoch=5)
    before = (t.state, t.records(), t.last_committed_epoch)
    for epoch in (0, 4, 5):
        assert t.begin(epoch, now_us=0) is False
    assert (t.state, t.records(), t.last_committed_epoch) == before
    assert t.metrics().replays_skipped == 3
    assert t.begin(6, now_us=0) is True


def test_begin_while_open_is_illegal_even_for_an_old_epoch() -> None:
    t = EpochTracker("orders", last_committed_epoch=1)
    t.begin(5, now_us=0)
    with pytest.raises(IllegalStateError, match="goes backwards") as info:
        t.begin(3, now_us=0)
    assert info.value.epoch == 3
    assert "sink 'orders'" in str(info.value)
    with pytest.raises(IllegalStateError, match="Active"):
        t.begin(5, now_us=0)
    assert t.state == TransactionState.Active(5)


def test_epoch_mismatch_is_illegal_and_changes_nothing() -> None:
    t = EpochTracker()
    t.begin(3, now_us=0)
    with pytest.raises(IllegalStateError, match="open transaction is for epoch 3"):
        t.commit_started(now_us=1, epoch=4)
    with pytest.raises(IllegalStateError):
        t.prepare(epoch=2)
    with pytest.raises(IllegalStateError):
        t.abort_started(epoch=2)
    assert t.state == TransactionState.Active(3)


def test_negative_epoch_is_refused() -> None:
    t = EpochTracker()
    with pytest.raises(IllegalStateError, match=">= 0"):
        t.begin(-1)
    with pytest.raises(IllegalStateError, match=">= 0"):
        EpochTracker(last_committed_epoch=-1)


def test_failed_commit_needs_recovery() -> None:
    t = EpochTracker("orders")
    t.begin(7, now_us=0)
    t.commit_started(now_us=1)
    t.commit_failed()
    assert t.state == TransactionState.Failed(7)
    with pytest.raises(IllegalStateError, match="recovery must resolve"):
        t.abort_started()
    with pytest.raises(IllegalStateError):
        t.last_committed_epoch = 7
    t.resolve(True, now_us=5, epoch=7)
    assert t.last_committed_epoch == 7
    record = t.record(7)
    assert record is not None
    assert record.state == "Committed"
    assert record.resolved_by_recovery
    assert record.commit_latency_us is None
    m = t.metrics()
    assert (m.commits, m.commit_failures, m.max_commit_latency_us) == (1, 1, 0)


def test_failed_abort_resolved_as_aborted() -> None:
    t = EpochTracker()
    t.begin(2, now_us=0)
    t.record_write(10, 100)
    t.abort_started()
    t.abort_failed()
    t.resolve(False)
    assert t.last_committed_epoch is None
    m = t.metrics()
    assert (m.aborts, m.abort_failures, m.events_written, m.events_committed) == (1, 1, 10, 0)


def test_abort_then_retry_keeps_both_records() -> None:
    t = EpochTracker()
    t.begin(1, now_us=0)
    t.abort_started()
    t.abort_ok(now_us=3)
    t.begin(1, now_us=4)
    t.commit_started(now_us=5)
    t.commit_ok(now_us=6)
    assert [r.state for r in t.records()] == ["Aborted", "Committed"]
    latest = t.record(1)
    assert latest is not None
    assert latest.state == "Committed"


def test_last_committed_epoch_is_settable_while_idle() -> None:
    t = EpochTracker()
    assert t.last_committed_epoch is None
    t.last_committed_epoch = 10
    assert t.begin(10) is False
    t.last_committed_epoch = None
    assert t.begin(10) is True


def test_defaults_match_the_documented_signature() -> None:
    t = EpochTracker()
    assert (t.sink_id, t.last_committed_epoch, t.history_limit) == (None, None, 1024)


def test_history_is_bounded() -> None:
    t = EpochTracker(history_limit=3)
    assert t.history_limit == 3
    for epoch in range(10):
        t.begin(epoch, now_us=epoch)
        t.commit_started(now_us=epoch)
        t.commit_ok(now_us=epoch + 1)
    assert [r.epoch for r in t.records()] == [7, 8, 9]
    assert t.record(2) is None
    assert t.metrics().commits == 10


def test_default_clock_is_monotonic_microseconds() -> None:
    t = EpochTracker()
    lower = time.monotonic_ns() // 1000
    t.begin(0)
    t.commit_started()
    t.commit_ok()
    upper = time.monotonic_ns() // 1000
    record = t.record(0)
    assert record is not None
    assert record.completed_at_us is not None
    # Same clock as time.monotonic_ns(), within the skew of pairing it with Rust's Instant once.
    assert lower - 1_000 <= record.opened_at_us <= record.completed_at_us <= upper + 1_000


def test_negative_counts_are_refused() -> None:
    t = EpochTracker()
    t.begin(0, now_us=0)
    with pytest.raises(OverflowError):
        t.record_write(-1, 0)


def test_metrics_value() -> None:
    m = TransactionalSinkMetrics(commits=2, avg_commit_latency_us=1.5)
    assert m.commits == 2
    assert m.aborts == 0
    d = m.to_dict()
    assert d["commits"] == 2
    assert d["avg_commit_latency_us"] == 1.5
    assert set(d) >= {
        "commits",
        "aborts",
        "events_written",
        "bytes_written",
        "commit_failures",
        "avg_commit_latency_us",
        "max_commit_latency_us",
        "p50_commit_latency_us",
        "p99_commit_latency_us",
    }
    assert pickle.loads(pickle.dumps(m)) == m
    assert m == TransactionalSinkMetrics(**d)  # type: ignore[arg-type]
    assert "commits=2" in repr(m)


def test_errors_are_laminar_errors_and_pickle_with_their_context() -> None:
    t = EpochTracker("orders")
    with pytest.raises(IllegalStateError) as info:
        t.commit_ok(now_us=0)
    err = info.value
    assert isinstance(err, LaminarError)
    assert not err.retriable
    assert err.sink_id == "orders"
    copy = pickle.loads(pickle.dumps(err))
    assert type(copy) is IllegalStateError
    assert (copy.sink_id, copy.epoch, str(copy)) == (err.sink_id, err.epoch, str(err))


def test_repr() -> None:
    t = EpochTracker("it's")
    t.begin(2, now_us=0)
    assert repr(t) == (
        'EpochTracker(sink_id="it\'s", state=TransactionState.Active(epoch=2), '
        "last_committed_epoch=None)"
    )
