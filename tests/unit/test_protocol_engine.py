"""The protocol engine's bindings (docs/engine.md): the crash-point enum the crash tests
enumerate, the driver loop's commands and events, and the one refusal bridge."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import laminar
from laminar import _core
from laminar._core import CrashPoint, Event, SingleEpochMachine
from laminar.errors import ConfigError, FencedError, InDoubtError, LaminarError

PACKAGE = Path(laminar.__file__).parent


def test_every_crash_point_is_named_after_its_step_and_listed_once() -> None:
    points = CrashPoint.all()
    names = [p.name for p in points]
    assert len(names) == len(set(names))
    for point in points:
        protocol, _, step = point.name.partition(".")
        assert protocol == point.protocol
        assert not re.search(r"\d", step), point.name
        assert CrashPoint.parse(point.name) == point
        assert point in CrashPoint.for_protocol(point.protocol)
        assert point.position in ("after", "within")
        assert point.after
    protocols = {p.protocol for p in points}
    assert protocols == {"atomic", "recovery", "scaleout", "kafka", "postgres"}
    per_protocol = [len(CrashPoint.for_protocol(p)) for p in protocols]
    assert sum(per_protocol) == len(points)


def test_a_point_is_parsed_by_its_name_only() -> None:
    assert CrashPoint.parse("atomic.after_kafka_prepare").name == "atomic.after_kafka_prepare"
    with pytest.raises(ValueError, match=r"CrashPoint\.all"):
        CrashPoint.parse("atomic.step7")  # the numbered names of before are no points


def test_every_crash_point_the_package_reaches_is_in_the_enum() -> None:
    """A misspelt ``crash_point("...")`` in the package fails here (the enum is the list)."""
    used = set()
    for path in PACKAGE.rglob("*.py"):
        used.update(re.findall(r'crash_point\("([a-z_.0-9]+)"\)', path.read_text()))
    assert used, "no crash_point call found"
    for name in sorted(used):
        CrashPoint.parse(name)


def test_a_driver_loop_performs_commands_and_reports_events() -> None:
    """The loop every driver runs, over a lone sink's epoch (scripted events: pure logic)."""
    machine = SingleEpochMachine("orders", 5, 4, refuse_backwards=True, retries=0)
    performed = []
    answers = {
        "sink_begin": Event.began(True),
        "sink_write": Event.ack(),
        "sink_commit": Event.ack(),
    }
    while (command := machine.poll()) is not None:
        performed.append((command.kind, command.sink_id, command.epoch))
        machine.handle(answers[command.kind])
    assert performed == [
        ("sink_begin", "orders", 5),
        ("sink_write", "orders", 5),
        ("sink_commit", "orders", 5),
    ]
    assert (machine.end, machine.committed, machine.refusal) == ("ok", True, None)
    machine.raise_refusal()  # nothing to raise


def test_a_refusal_is_raised_through_the_one_bridge() -> None:
    machine = SingleEpochMachine("orders", 2, 5, refuse_backwards=True)
    assert machine.poll() is None
    assert (machine.end, machine.refusal) == ("refused", "epoch_backwards")
    with pytest.raises(ConfigError, match="laminar reset") as caught:
        machine.raise_refusal()
    assert caught.value.refusal == "epoch_backwards"  # type: ignore[attr-defined]
    assert (caught.value.sink_id, caught.value.epoch) == ("orders", 2)

    for error, cls in [
        (_core.refusal_error("fenced", "why", sink_id="s", epoch=3), FencedError),
        (_core.refusal_error("awaiting_replay", "why"), InDoubtError),
        (_core.refusal_error("foreign_owner", "why"), ConfigError),
    ]:
        assert type(error) is cls
        assert isinstance(error, LaminarError)
    with pytest.raises(ValueError, match="unknown refusal kind"):
        _core.refusal_error("nope", "why")  # type: ignore[arg-type]


def test_the_retry_rule_as_the_writer_asks_it() -> None:
    """`laminar._core.retry_delay`, the binding of the machines' one retry rule that the
    writer's scale-out loop asks (its cases are the Rust tests of protocol::retry)."""
    assert _core.retry_delay(1, 3, 0.5, "abortable") == 0.5
    assert _core.retry_delay(3, 3, 0.5, "in_doubt") == 2.0
    assert _core.retry_delay(4, 3, 0.5, "abortable") is None
    assert _core.retry_delay(1, 3, 0.5, "abortable", retriable=False) is None
    assert _core.retry_delay(1, 3, 0.5, "in_doubt", awaiting=True) is None
    assert _core.retry_delay(1, 3, 0.5, "fenced") is None
    with pytest.raises(ValueError, match="retry_backoff_s"):
        _core.retry_delay(1, 3, -1.0, "abortable")


def test_the_shared_rules() -> None:
    assert _core.epoch_committed(4, 4)
    assert not _core.epoch_committed(None, 0)
    assert _core.next_epoch_base(0, [3, None, 9]) == 10

    def guard(restart: bool) -> tuple[str, int, str | None]:
        return _core.owner_decision(
            "g",
            ["a", "b"],
            owner="old",
            epoch_base=0,
            member_owners=[],
            last_committed=[4, None],
            mine="new",
            restart=restart,
        )

    with pytest.raises(ConfigError, match="laminar reset g"):
        guard(restart=False)
    assert guard(restart=True) == ("claim", 5, "old")
    assert _core.dtid("g", 4) == "laminar:g:4"
    assert _core.participant_base(_core.kafka_participant_id("a.b", 3)) == ("a.b", 3)
    assert _core.participant_matches("laminar:s:5:1", "laminar:s:5:1")
    assert not _core.participant_matches("laminar:s:5:1", "laminar:s:5:10")
    # the dt_state transitions are tested in Rust beside their table (protocol::transitions)


def test_each_point_says_when_it_is_reached_and_whether_the_epoch_is_decided() -> None:
    """The properties the Python crash tests build their cases from (never a list of names)."""
    for protocol in ("atomic", "recovery", "scaleout", "kafka", "postgres"):
        epoch = [p for p in CrashPoint.for_protocol(protocol) if p.phase == "epoch"]
        decided = [p.decided for p in epoch]
        # once an epoch's point is decided, every later one is
        assert decided == sorted(decided), protocol
    assert CrashPoint.parse("atomic.after_decision").decided
    assert not CrashPoint.parse("atomic.after_decision_rows").decided
    assert CrashPoint.parse("atomic.after_fence").phase == "start"
    assert {p.phase for p in CrashPoint.for_protocol("recovery")} == {"recovery"}
    assert all(p.in_task == (p.phase == "task") for p in CrashPoint.all())


def test_the_driver_loop_re_raises_the_error_of_the_command_the_machine_failed_on() -> None:
    """`laminar.engine.loop.drive`: a sink's abortable error aborts the epoch and, with no retry
    left, is raised as it was (scripted sink: pure logic)."""
    from laminar.engine.loop import drive
    from laminar.errors import AbortableError, RecordTooLargeError

    too_large = RecordTooLargeError("a record is too large", sink_id="orders")
    performed: list[str] = []

    def perform(command: _core.Command) -> Event:
        performed.append(command.kind)
        if command.kind == "sink_write":
            raise too_large
        return Event.began(True) if command.kind == "sink_begin" else Event.ack()

    machine = SingleEpochMachine("orders", 1, 0, refuse_backwards=True, retries=3)
    with pytest.raises(RecordTooLargeError) as caught:
        drive(machine, perform)
    assert caught.value is too_large
    # not retriable: aborted once, never written again
    assert performed == ["sink_begin", "sink_write", "sink_abort"]

    flaky = [AbortableError("the broker is restarting")]

    def perform_flaky(command: _core.Command) -> Event:
        if command.kind == "sink_write" and flaky:
            raise flaky.pop()
        return Event.began(True) if command.kind == "sink_begin" else Event.ack()

    machine = SingleEpochMachine("orders", 1, 0, refuse_backwards=True, retry_backoff_ms=0)
    drive(machine, perform_flaky)
    assert (machine.committed, machine.attempts) == (True, 2)


def test_the_driver_loop_raises_a_refusal_through_the_bridge() -> None:
    from laminar.engine.loop import drive

    machine = SingleEpochMachine("orders", 2, 5, refuse_backwards=True)
    with pytest.raises(ConfigError) as caught:
        drive(machine, lambda command: Event.ack())
    assert caught.value.refusal == "epoch_backwards"  # type: ignore[attr-defined]


def test_a_participant_is_open_until_resolved_by_the_cores_rule() -> None:
    """The exporter counts a scale-out Kafka participant as an open transaction by this rule
    (its cases are the Rust tests of ParticipantState)."""
    assert [_core.participant_open(s) for s in ("claimed", "prepared")] == [True, True]
    assert [_core.participant_open(s) for s in ("committed", "rolled_back")] == [False, False]
    with pytest.raises(ValueError, match='unknown participant state "done"'):
        _core.participant_open("done")
