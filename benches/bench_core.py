"""Hot-path costs of the commit core as seen from Python (pytest-benchmark).

Run against a release build of the extension (``pip install -e . --no-deps`` builds release)::

    pytest benches/bench_core.py --benchmark-only

Targets: a full epoch cycle through the tracker < 5 µs; PreparedTxnState encode and parse < 2 µs
each. They are reported, not asserted: timing on a shared machine is no pass/fail signal.
"""

from __future__ import annotations

import itertools

from pytest_benchmark.fixture import BenchmarkFixture

from laminar import EpochTracker, PreparedTxnState

STATE = PreparedTxnState(
    "orders-sink-0-kafka-pg",
    123_456,
    attempt=1,
    producer_id=1_000_004,
    producer_epoch=7,
    record_count=250_000,
    created_at_ms=1_760_000_000_000,
)
TEXT = str(STATE)
BINARY = STATE.to_bytes()


def test_epoch_cycle(benchmark: BenchmarkFixture) -> None:
    """begin → record_write → prepare → commit_started → commit_ok, on the default clock."""
    tracker = EpochTracker("bench")
    epochs = itertools.count()

    def cycle() -> None:
        tracker.begin(next(epochs))
        tracker.record_write(1_000, 64_000)
        tracker.prepare()
        tracker.commit_started()
        tracker.commit_ok()

    benchmark(cycle)
    assert tracker.metrics().commits > 0


def test_epoch_cycle_explicit_clock(benchmark: BenchmarkFixture) -> None:
    """The same cycle with the caller's clock (no clock read in the shell)."""
    tracker = EpochTracker("bench")
    epochs = itertools.count()

    def cycle() -> None:
        e = next(epochs)
        tracker.begin(e, e)
        tracker.record_write(1_000, 64_000)
        tracker.prepare()
        tracker.commit_started(e)
        tracker.commit_ok(e + 1)

    benchmark(cycle)
    assert tracker.metrics().max_commit_latency_us == 1


def test_replay_skip(benchmark: BenchmarkFixture) -> None:
    """begin of an already committed epoch: the check every replayed batch pays."""
    tracker = EpochTracker("bench", last_committed_epoch=1_000)
    assert benchmark(tracker.begin, 10, 0) is False


def test_prepared_state_encode_text(benchmark: BenchmarkFixture) -> None:
    assert benchmark(str, STATE) == TEXT


def test_prepared_state_parse_text(benchmark: BenchmarkFixture) -> None:
    assert benchmark(PreparedTxnState.parse, TEXT) == STATE


def test_prepared_state_to_bytes(benchmark: BenchmarkFixture) -> None:
    assert benchmark(STATE.to_bytes) == BINARY


def test_prepared_state_from_bytes(benchmark: BenchmarkFixture) -> None:
    assert benchmark(PreparedTxnState.from_bytes, BINARY) == STATE


def test_metrics_snapshot(benchmark: BenchmarkFixture) -> None:
    """metrics() walks the latency histogram: cheap enough to call per epoch for logging."""
    tracker = EpochTracker("bench")
    for e in range(1_000):
        tracker.begin(e, e * 10)
        tracker.commit_started(e * 10)
        tracker.commit_ok(e * 10 + 1 + e)
    assert benchmark(tracker.metrics).commits == 1_000
