"""laminar.EpochTracker through its binding: each Python method reaches its call of the core's
tracker (every state x call, the error bridge's `IllegalStateError` with its sink id and epoch),
the records, metrics, defaults, clock, pickling and repr as Python sees them.

The tracker's rules themselves (a replayed epoch skipped, a failed commit waiting for recovery,
an abort then a retry, the bounded history, ...) are tested beside them, in
rust/laminar_core/src/protocol/epoch.rs and transitions.rs (issue 35, item 8)."""

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


def test_negative_epoch_is_refused() -> None:
    t = EpochTracker()
    with pytest.raises(IllegalStateError, match=">= 0"):
        t.begin(-1)
    with pytest.raises(IllegalStateError, match=">= 0"):
        EpochTracker(last_committed_epoch=-1)


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
