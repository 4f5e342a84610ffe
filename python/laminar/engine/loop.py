"""The driver loop of docs/engine.md §1: a machine of the core (`laminar._core`) answers "what
next?" with a `Command`, the performer does it — one statement, one client call — and reports
the result as an `Event`. `drive` is the whole loop; `perform_driver_side` performs the commands
every performer shares (a crash point, a log line, a sleep). The floor every protocol and every
sink's in-doubt resolution stands on: it imports no sink and no protocol."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from typing_extensions import assert_never

from laminar import _telemetry
from laminar._core import Command, Event
from laminar._faults import crash_point
from laminar.errors import (
    FatalError,
    LaminarError,
)

if TYPE_CHECKING:
    from laminar._core import _DriverSideCommand, _Machine

__all__ = ["drive", "failed_event", "now_ms", "perform_driver_side"]

_C = TypeVar("_C", bound=Command)


def now_ms() -> int:
    """The driver's monotonic clock, as the machines take it."""
    return time.monotonic_ns() // 1_000_000


def failed_event(err: LaminarError) -> Event:
    """The ``failed`` event for an error a command raised: the kind its class carries
    (`laminar.errors`, classified where it was raised), with ``retriable``."""
    return Event.failed(err.failure_kind, str(err), retriable=err.retriable)


def drive(machine: _Machine[_C], perform: Callable[[_C], Event]) -> None:
    """Run ``machine`` to its end, performing each command (docs/engine.md §1); ``perform``
    takes every kind of command the machine emits (the machine's type parameter says which).

    Raises the refusal the machine ended on (through the core's one error bridge), or the
    error of the command it failed on — the very exception ``perform`` raised. An exception
    that is no `LaminarError` (a bug, an interrupt) is reported as a fatal failure so the
    machine undoes what it opened, then re-raised as it was.
    """
    caught: dict[str, BaseException] = {}
    perform = _telemetry.traced(perform)  # spans around the steps (itself when tracing is off)
    while (command := machine.poll()) is not None:
        try:
            event = perform(command)
        except LaminarError as e:
            caught[str(e)] = e
            event = failed_event(e)
        except Exception as e:
            message = f"{type(e).__name__}: {e}"
            caught[message] = e
            event = Event.failed("fatal", message)
        machine.handle(event)
    if machine.end == "refused":
        machine.raise_refusal()
    failure = machine.failure
    if machine.end == "failed" and failure is not None:
        _, message = failure
        error = caught.get(message)
        if error is not None:
            raise error
        # a failure the machine found itself (an answer it did not expect): a driver bug
        raise FatalError(f"protocol driver: {message}")


def perform_driver_side(c: _DriverSideCommand, log: logging.Logger) -> Event:
    """The commands every driver performs alike: ``reached`` (a crash point), ``log``,
    ``sleep``."""
    match c:
        case Command.Reached(point):
            crash_point(point)
        case Command.Log(level, message):
            log.log(logging.WARNING if level == "warning" else logging.INFO, "%s", message)
        case Command.Sleep(ms):
            time.sleep(ms / 1000)
        case _:
            assert_never(c)
    return Event.ack()
