"""The single-sink path of ``exactly_once`` (`laminar.spark.writer`) against an in-memory sink
(pure protocol logic)."""

from __future__ import annotations

import pickle

import pytest

import laminar
from laminar import AbortableError, ConfigError, FencedError, InDoubtError, PreparedTxnState
from laminar._sink import TransactionalSink


class MemorySink(TransactionalSink):
    """A sink whose 'store' is a dict; failures are scripted per call name."""

    kind = "memory"

    def __init__(self, sink_id: str = "mem") -> None:
        super().__init__(sink_id)
        self.committed: dict[int, list[object]] = {}
        self.pending: list[object] = []
        self.fail: dict[str, list[Exception]] = {}
        self.calls: list[str] = []
        self.commit_lands_despite_error = False

    def _maybe_fail(self, name: str) -> None:
        self.calls.append(name)
        errors = self.fail.get(name)
        if errors:
            raise errors.pop(0)

    def init_transactions(self) -> None:
        self._maybe_fail("init")
        self.tracker.last_committed_epoch = max(self.committed, default=None)

    def begin_transaction(self, epoch: int) -> bool:
        self._maybe_fail("begin")
        self.pending = []
        return self.tracker.begin(epoch)

    def write(self, batch: object) -> None:
        self._maybe_fail("write")
        self.pending.append(batch)
        self.tracker.record_write(1, 1)

    def prepare_transaction(self) -> PreparedTxnState:
        self._maybe_fail("prepare")
        self.tracker.prepare()
        return PreparedTxnState(self.sink_id, self.tracker.current_epoch or 0)

    def commit_transaction(self, epoch: int) -> None:
        self.tracker.commit_started(epoch=epoch)
        try:
            self._maybe_fail("commit")
        except InDoubtError:
            if self.commit_lands_despite_error:
                self.committed[epoch] = self.pending
            self.tracker.commit_failed()
            raise
        self.committed[epoch] = self.pending
        self.tracker.commit_ok()

    def abort_transaction(self, epoch: int) -> None:
        self.calls.append("abort")
        self.tracker.abort_started(epoch=epoch)
        self.pending = []
        self.tracker.abort_ok()

    def last_committed_epoch(self) -> int | None:
        return max(self.committed, default=None)

    def recover(self) -> int | None:
        self.calls.append("recover")
        last = self.last_committed_epoch()
        if self.transaction_state.name == "Failed":
            epoch = self.tracker.current_epoch
            self.tracker.resolve(last is not None and epoch is not None and last >= epoch)
        return last

    def close(self) -> None:
        self.calls.append("close")


def test_commits_then_skips_replay() -> None:
    sink = MemorySink()
    writer = laminar.exactly_once(sink)
    first = writer.write_epoch(0, "batch-0")
    again = writer.write_epoch(0, "batch-0")
    assert (first.committed, again.committed, again.skipped) == (True, False, True)
    assert sink.committed == {0: ["batch-0"]}
    assert sink.calls.count("init") == 1


def test_abortable_error_aborts_and_retries_the_epoch() -> None:
    sink = MemorySink()
    sink.fail["write"] = [AbortableError("broker timeout")]
    writer = laminar.exactly_once(sink, retry_backoff_s=0)
    result = writer.write_epoch(3, "b")
    assert result.committed
    assert result.attempts == 2
    assert sink.calls.count("abort") == 1
    assert sink.committed == {3: ["b"]}
    assert sink.metrics.aborts == 1
    assert sink.metrics.commits == 1


def test_abortable_error_gives_up_after_retries() -> None:
    sink = MemorySink()
    sink.fail["write"] = [AbortableError("x") for _ in range(3)]
    writer = laminar.exactly_once(sink, retries=2, retry_backoff_s=0)
    with pytest.raises(AbortableError):
        writer.write_epoch(1, "b")
    assert sink.committed == {}
    assert sink.transaction_state == laminar.TransactionState.Idle()


def test_in_doubt_commit_that_landed_is_not_written_again() -> None:
    sink = MemorySink()
    sink.fail["commit"] = [InDoubtError("commit timed out")]
    sink.commit_lands_despite_error = True
    result = laminar.exactly_once(sink).write_epoch(7, "b")
    assert result.committed
    assert result.attempts == 1
    assert "abort" not in sink.calls
    assert "recover" in sink.calls
    assert sink.committed == {7: ["b"]}


def test_in_doubt_commit_that_did_not_land_is_retried() -> None:
    sink = MemorySink()
    sink.fail["commit"] = [InDoubtError("commit timed out")]
    result = laminar.exactly_once(sink, retry_backoff_s=0).write_epoch(7, "b")
    assert result.committed
    assert result.attempts == 2
    assert sink.committed == {7: ["b"]}


def test_fatal_error_propagates_without_retry() -> None:
    sink = MemorySink()
    sink.fail["write"] = [FencedError("fenced")]
    with pytest.raises(FencedError):
        laminar.exactly_once(sink).write_epoch(0, "b")
    assert sink.calls.count("begin") == 1


def test_writer_pickles_as_configuration() -> None:
    sink = MemorySink()
    writer = laminar.exactly_once(sink)
    writer.write_epoch(0, "b")
    clone = pickle.loads(pickle.dumps(writer))
    assert clone.sinks[0]._tracker is None
    assert clone._initialized is False


@pytest.mark.parametrize(
    ("sinks", "message"),
    [((), "at least one sink"), ((object(),), "not object")],
)
def test_bad_configuration_is_a_clear_error(sinks: tuple[object, ...], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        laminar.exactly_once(*sinks)  # type: ignore[arg-type]


def test_duplicate_sink_ids_are_refused() -> None:
    with pytest.raises(ConfigError, match="share a sink id"):
        laminar.exactly_once(MemorySink("a"), MemorySink("a"))


def test_non_retriable_abortable_error_aborts_without_retrying() -> None:
    sink = MemorySink()
    sink.fail["write"] = [laminar.RecordTooLargeError("row 3 is too large")]
    writer = laminar.exactly_once(sink, retries=5, retry_backoff_s=0)
    with pytest.raises(laminar.RecordTooLargeError):
        writer.write_epoch(2, "b")
    assert sink.calls.count("begin") == 1
    assert sink.calls.count("abort") == 1
    assert sink.transaction_state == laminar.TransactionState.Idle()
    assert sink.committed == {}
