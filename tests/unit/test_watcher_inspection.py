"""The watcher's inspection (``act=False``: what ``laminar status`` and the exporter read) tells
a decided Kafka epoch whose marker is behind from one whose marker could not be read: the
second's outcome is ``unreadable`` (with why), so both report it as something to fix rather
than a plain wait — ``laminar status`` exits non-zero and the exporter counts an error."""

from __future__ import annotations

import pytest

from laminar._core import Event, PreparedTxnState, WatcherPassMachine


def inspect_one(marker: Event) -> list[tuple[str, str, str, str]]:
    """One decided epoch (5) of ``tid-a``, its marker answering ``marker``."""
    state = str(PreparedTxnState("tid-a", 5, producer_id=7, producer_epoch=1))
    machine = WatcherPassMachine(
        group_id=None, sink_ids=None, check_kafka=True, lingering_after_s=300.0, act=False
    )
    while (c := machine.poll()) is not None:
        if c.kind == "read_decisions":
            machine.handle(Event.decisions([("tid-a", 5, None, state, "g", 12.0)]))
        elif c.kind == "read_marker":
            assert c.sink_id == "tid-a"
            machine.handle(marker)
        elif c.kind == "list_prepared":
            machine.handle(Event.prepared_list([]))
        elif c.kind == "read_participant_decisions":
            machine.handle(Event.participant_decisions([]))
        else:
            machine.handle(Event.ack())
    assert machine.end == "ok"
    return [(i.kind, i.id, i.outcome, i.detail) for i in machine.items]


@pytest.mark.parametrize("kind", ["fatal", "abortable"])
def test_a_marker_that_cannot_be_read_is_unreadable(kind: str) -> None:
    why = "AuthorizationError: READ on group laminar.tid-a denied"
    [(item_kind, item_id, outcome, detail)] = inspect_one(Event.failed(kind, why))  # type: ignore[arg-type]
    assert (item_kind, item_id, outcome) == ("kafka_behind", "kafka:tid-a", "unreadable")
    assert why in detail


def test_a_marker_behind_is_unresolved_and_one_caught_up_is_no_item() -> None:
    [(item_kind, _, outcome, _)] = inspect_one(Event.marker(4, 0))
    assert (item_kind, outcome) == ("kafka_behind", "unresolved")
    assert inspect_one(Event.marker(5, 0)) == []
