"""One sink alone (docs/protocol.md §1, §2): the driver of the core's `SingleEpochMachine`.

The machine decides everything about a lone sink's epoch — skip a replay, refuse an epoch older
than a committed one when the writer knows its query, retry an abortable error with backoff,
resolve an in-doubt commit from the sink's durable record (never by guessing), and give up after
the writer's retries. This driver only calls the sink (docs/engine.md §2, "single").
"""

from __future__ import annotations

import logging
from typing import Any

from laminar._core import Command, Event, SingleEpochMachine
from laminar.engine.loop import drive, now_ms, perform_driver_side
from laminar.errors import FatalError

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

    def perform(c: Command) -> Event:
        done = perform_driver_side(c, log)
        if done is not None:
            return done
        if c.kind == "sink_begin":
            return Event.began(bool(sink.begin_transaction(epoch)))
        if c.kind == "sink_write":
            sink.write(batch)
        elif c.kind == "sink_commit":
            # one sink needs no vote: it commits in one phase (Active -> Committing)
            sink.commit_transaction(epoch)
        elif c.kind == "sink_abort":
            if sink.transaction_state.holds_transaction():
                sink.abort_transaction(epoch)
        elif c.kind == "sink_recover":
            return Event.marker(sink.recover(), now_ms())
        else:
            raise FatalError(f"protocol driver: a lone sink cannot perform {c.kind!r}")
        return Event.ack()

    drive(machine, perform)
    return machine.committed, machine.attempts
