"""One sink alone (docs/protocol.md §1, §2): the driver of the core's `SingleEpochMachine`.

The machine decides everything about a lone sink's epoch — skip a replay, refuse an epoch older
than a committed one when the writer knows its query, retry an abortable error with backoff,
resolve an in-doubt commit from the sink's durable record (never by guessing), and give up after
the writer's retries. This driver only calls the sink (docs/engine.md §2, "single").
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from typing_extensions import assert_never

from laminar._core import Command, Event, SingleEpochMachine
from laminar.engine.loop import drive, now_ms, perform_driver_side

if TYPE_CHECKING:
    from laminar._core import _SingleCommand

__all__ = ["write_single"]

log = logging.getLogger("laminar.spark.writer")


def write_single(
    sink: Any,
    epoch: int,
    batch: Any,
    *,
    refuse_backwards: bool,
    retries: int,
    retry_backoff_s: float,
) -> tuple[bool, int]:
    """Write ``batch`` as ``epoch`` of ``sink`` (a `TransactionalSink`) exactly once; returns
    (committed, attempts) — committed False: a replay, skipped."""
    machine = SingleEpochMachine(
        sink.sink_id,
        epoch,
        sink.tracker.last_committed_epoch,
        refuse_backwards=refuse_backwards,
        retries=retries,
        retry_backoff_ms=round(retry_backoff_s * 1000),
    )

    def perform(c: _SingleCommand) -> Event:
        match c:
            case Command.Reached() | Command.Log() | Command.Sleep():
                return perform_driver_side(c, log)
            case Command.SinkBegin():
                return Event.began(bool(sink.begin_transaction(epoch)))
            case Command.SinkWrite():
                sink.write(batch)
            case Command.SinkCommit():
                # one sink needs no vote: it commits in one phase (Active -> Committing)
                sink.commit_transaction(epoch)
            case Command.SinkAbort():
                if sink.transaction_state.holds_transaction():
                    sink.abort_transaction(epoch)
            case Command.SinkRecover():
                return Event.marker(sink.recover(), now_ms())
            case _:
                assert_never(c)
        return Event.ack()

    drive(machine, perform)
    return machine.committed, machine.attempts
