"""The perform table of a `KafkaSink` commit whose outcome is unknown: the commands of the core's
`KafkaInDoubtMachine` (docs/protocol.md §1, docs/engine.md §2) performed on the sink's clients and
its witness, the outcome reported to the sink's own machine (`SinkTransaction`)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from typing_extensions import assert_never

from laminar._core import Command, Event, KafkaInDoubtMachine, SinkTransaction
from laminar.engine.loop import drive, now_ms, perform_driver_side
from laminar.errors import FencedError
from laminar.kafka._clients import Clients
from laminar.kafka._witness import Witness

if TYPE_CHECKING:
    from laminar._core import _KafkaInDoubtCommand

__all__ = ["resolve_in_doubt"]

log = logging.getLogger("laminar.kafka")


def resolve_in_doubt(
    sink_id: str,
    epoch: int,
    clients: Clients,
    witness: Witness,
    txn: SinkTransaction,
    commit_timeout_s: float,
) -> None:
    """Drive the core's `KafkaInDoubtMachine` for ``epoch``: retry a commit that is still in
    flight (librdkafka allows it), else re-initialise the producer, and let the marker decide;
    this only performs its commands and reports the outcome to ``txn``. Raises what the machine
    ended on (`FencedError`: fenced, or another instance committed past this epoch)."""
    rt = clients.rt
    commit_in_flight = txn.pending == "commit" and rt.producer is not None
    machine = KafkaInDoubtMachine(sink_id, epoch, commit_in_flight)

    def perform(c: _KafkaInDoubtCommand) -> Event:
        match c:
            case Command.Reached() | Command.Log() | Command.Sleep():
                return perform_driver_side(c, log)
            case Command.RetryCommit():
                clients.retrying("commit_transaction", epoch, commit_timeout_s)
            case Command.AbortProducer():
                clients.abort_producer_quietly()
            case Command.ReinitProducer():
                clients.reinit_producer()
            case Command.ReadMarker():
                return Event.marker(witness.read_marker(), now_ms())
            case _:
                assert_never(c)
        return Event.ack()

    try:
        drive(machine, perform)
    except FencedError as err:
        # fenced, or refused: the brokers answer but not this producer's commit (Tansu drops
        # a fenced producer's requests), or another instance committed past this epoch
        rt.fenced = err
        raise
    finally:
        # the sink's machine clears the pending decision once the marker decided
        txn.resolved_by_marker(machine.committed, machine.marker)
