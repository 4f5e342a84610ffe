"""laminar._core.SinkTransaction: the core's machine of one sink's own transaction, as the
PostgreSQL sink and (with ``durable_prepare=False``) the Kafka sink perform it (docs/engine.md,
"The sink's transaction"): its answers, the tracker it shares, and its refusals."""

from __future__ import annotations

import pytest

from laminar import EpochTracker
from laminar._core import (
    LastCommitted,
    SinkAnswer,
    SinkTransaction,
    last_committed_after_marker,
    last_committed_without_marker,
    reuse_without_marker,
)
from laminar.errors import ConfigError, IllegalStateError


def machine(last: int | None = 3, participant: int | None = None) -> SinkTransaction:
    return SinkTransaction(EpochTracker("s1", last_committed_epoch=last), participant=participant)


def test_a_one_phase_epoch_goes_to_the_shared_tracker() -> None:
    m = machine()
    tracker = m.tracker
    assert m.begin(5).kind == "open"
    m.opened(5, now_us=10)
    assert (m.writing, tracker.state.name, tracker.state.epoch) == (5, "Active", 5)
    assert m.write() == 5
    m.wrote(3, 30)
    assert m.commit(5).kind == "commit"
    m.commit_started(5, now_us=20)
    m.commit_ok(now_us=25)
    assert tracker.last_committed_epoch == 5
    metrics = tracker.metrics()
    assert (metrics.commits, metrics.events_committed, metrics.max_commit_latency_us) == (1, 3, 5)
    assert m.close().kind == "nothing"


def test_a_replay_is_skipped_and_an_older_epoch_says_so() -> None:
    m = machine()
    same, older = m.begin(3), m.begin(1)
    assert (same.kind, same.last, same.older) == ("skip", 3, False)
    assert (older.kind, older.last, older.older) == ("skip", 3, True)
    assert m.tracker.metrics().replays_skipped == 2
    held = m.store_holds(4, 6)
    assert (held.kind, held.last, held.older) == ("skip", 6, True)
    assert m.tracker.last_committed_epoch == 6


def test_a_prepared_epoch_commits_prepared_and_close_leaves_it() -> None:
    m = machine()
    m.begin(4)
    m.opened(4)
    assert m.prepare() == 4
    m.prepared(4)
    assert m.prepared_epoch == 4
    close = m.close()
    assert (close.kind, close.epoch) == ("leave_prepared", 4)
    assert m.commit(4).kind == "commit_prepared"


def test_a_failed_commit_is_in_doubt_only_when_the_connection_was_lost() -> None:
    lost = machine()
    lost.begin(4)
    lost.opened(4)
    lost.commit_started(4)
    assert lost.commit_failed(True).kind == "in_doubt"
    assert lost.in_doubt == 4
    assert lost.begin(5).kind == "recover"
    answer = lost.recover()
    assert (answer.kind, answer.epoch, answer.commit) == ("resolve", 4, True)
    lost.resolved(True, 4)
    assert (lost.in_doubt, lost.tracker.last_committed_epoch) == (None, 4)

    answered = machine()
    answered.begin(4)
    answered.opened(4)
    answered.commit_started(4)
    assert answered.commit_failed(False).kind == "rolled_back"
    assert answered.begin(4).kind == "open"


def test_abort_answers_and_the_pending_rollback() -> None:
    m = machine()
    m.begin(4)
    m.opened(4)
    assert m.abort(4).kind == "rollback"
    m.abort_ok()
    assert m.abort(4).kind == "nothing"
    m.begin(5)
    m.opened(5)
    m.prepared(5)
    assert m.abort(5).kind == "rollback_prepared"
    m.abort_failed()
    answer = m.recover()
    assert (answer.kind, answer.epoch, answer.commit) == ("resolve", 5, False)


def test_refusals_name_the_sink_and_change_nothing() -> None:
    m = machine()
    with pytest.raises(IllegalStateError, match="write\\(\\) needs an open transaction") as e:
        m.write()
    assert (e.value.sink_id, e.value.epoch) == ("s1", None)
    m.begin(4)
    m.opened(4)
    with pytest.raises(IllegalStateError, match="Active") as e:
        m.begin(5)
    assert e.value.epoch == 5
    with pytest.raises(IllegalStateError, match="init_transactions"):
        m.init()
    with pytest.raises(IllegalStateError):
        m.commit(6)
    assert (m.tracker.state.name, m.tracker.state.epoch) == ("Active", 4)
    participant = machine(participant=2)
    participant.begin(4)
    participant.opened(4)
    with pytest.raises(IllegalStateError, match="commits only through prepare"):
        participant.commit(4)


def kafka_machine(last: int | None = 3) -> SinkTransaction:
    """The machine as `KafkaSink` builds it: a prepare that is not durable."""
    tracker = EpochTracker("k1", last_committed_epoch=last)
    return SinkTransaction(tracker, durable_prepare=False)


def test_kafka_a_refused_commit_after_prepare_is_rolled_back_and_close_aborts() -> None:
    m = kafka_machine()
    m.begin(4)
    m.opened(4)
    m.prepared(4)
    close = m.close()
    assert (close.kind, close.epoch) == ("abort_open", 4)
    m.commit_started(4)
    assert m.commit_failed(False).kind == "rolled_back"
    assert (m.tracker.state.name, m.tracker.last_committed_epoch) == ("Idle", 3)
    assert m.abort(9).kind == "nothing"  # idle: always a no-op


def test_kafka_aborts_by_client_and_a_failed_abort_reopens() -> None:
    m = kafka_machine()
    m.begin(4)
    m.opened(4)
    assert m.abort_via(4, "fenced").kind == "fenced"
    assert m.writing == 4
    assert m.abort_via(4, "live").kind == "rollback"
    assert m.abort_failed().kind == "reopen"
    assert m.in_doubt == 4
    m.abort_reopened()
    assert m.tracker.state.name == "Idle"
    m.begin(5)
    m.opened(5)
    assert m.abort_via(5, "given_up").kind == "nothing"  # aborted without sending
    assert m.tracker.metrics().aborts == 2
    with pytest.raises(ConfigError, match="client must be"):
        m.abort_via(5, "gone")  # type: ignore[arg-type]


def test_kafka_reopened_and_marker_evidence_never_lower_the_last_epoch() -> None:
    m = kafka_machine()
    m.begin(4)
    m.opened(4)
    m.commit(4)
    m.commit_started(4)
    assert m.commit_failed(True).kind == "in_doubt"
    m.reopened(4)  # the new producer's init read epoch 4 back: committed
    assert (m.tracker.state.name, m.tracker.last_committed_epoch) == ("Idle", 4)
    m.saw_committed(2)
    m.resolved_by_marker(None, None)
    assert m.tracker.last_committed_epoch == 4


def test_kafka_the_pending_decision_is_the_machines_until_the_marker_or_a_new_producer() -> None:
    """Which end of an in-doubt epoch recovery retries first (a commit still in flight) is the
    machine's ``pending``, not bookkeeping of the sink's (docs/engine.md, "The sink's
    transaction")."""
    m = kafka_machine()
    m.begin(4)
    m.opened(4)
    assert m.pending is None
    m.commit(4)
    m.commit_started(4)
    assert isinstance(m.commit_failed(True), SinkAnswer.InDoubt)
    assert (m.pending, m.in_doubt) == ("commit", 4)
    m.resolved_by_marker(None, None)  # the marker did not decide: still pending
    assert m.pending == "commit"
    m.resolved_by_marker(True, 4)
    assert (m.pending, m.in_doubt, m.tracker.last_committed_epoch) == (None, None, 4)
    m.begin(5)
    m.opened(5)
    m.abort_via(5, "live")
    assert isinstance(m.abort_failed(), SinkAnswer.Reopen)
    assert m.pending == "abort"
    m.reopened(4)  # the new producer's init aborted it
    assert m.pending is None
    assert m.tracker.last_committed_epoch == 4


def test_which_evidence_proves_a_kafka_sinks_last_committed_epoch() -> None:
    """The binding of the core's rule (docs/protocol.md §1, "The decision"; its cases are Rust
    tests in protocol/sink/evidence.rs): each answer's kind and fields as the sink reads them."""
    marker = last_committed_after_marker(7, 8)  # the higher of the marker and the known epoch
    assert isinstance(marker, LastCommitted.Marker)
    assert marker.epoch == 8
    assert marker.kind == "marker"
    assert isinstance(last_committed_after_marker(None, None), LastCommitted.ReadIdentity)
    assert last_committed_after_marker(None, None).kind == "read_identity"
    identity = last_committed_without_marker(True, False, None)
    assert isinstance(identity, LastCommitted.Witness)
    assert (identity.kind, identity.history, identity.producer_epoch) == (
        "witness",
        "identity",
        None,
    )
    row = last_committed_without_marker(False, True, 0)
    assert isinstance(row, LastCommitted.Witness)
    assert row.history == "decision_row"
    coordinator = last_committed_without_marker(False, False, 3)
    assert isinstance(coordinator, LastCommitted.Witness)
    assert (coordinator.history, coordinator.producer_epoch) == ("producer_epoch", 3)
    assert isinstance(last_committed_without_marker(False, False, -1), LastCommitted.New)
    assert last_committed_without_marker(False, False, None).kind == "new"
    assert repr(last_committed_without_marker(False, False, 0)) == "LastCommitted.New"
    assert reuse_without_marker(True, True)
    assert not reuse_without_marker(False, True)
