"""Recovery of atomic groups (docs/protocol.md §3, docs/engine.md §2 "Kafka recovery"): bring
every Kafka sink level with the decision log, then open the new producers.

The recipe is the core's `KafkaRecoveryMachine` (every decision is `complete_kafka`'s); this
module drives it, in the recipe's order:

1. **protocol-level completion** — for each Kafka sink whose decided epoch ``d`` (its row in
   ``laminar.txn_state``) is ahead of its marker, ``EndTxn(commit)`` with the producer id/epoch
   recorded in the decision, *before* any new producer's ``init_transactions`` (which would abort
   the prepared transaction); the marker, read again, says whether it worked;
2. ``init_transactions`` of each sink: fences the previous coordinator's producers and aborts
   whatever they left open — correct, because an undecided epoch has no Postgres commit;
3. the **redo log** (``laminar.redo``) re-produces ``d`` in a fresh transaction with marker ``d``,
   or, without one, the sink waits for **Spark's replay** of ``d`` (any other epoch is refused).

The atomic group's machine runs the same recipe inside its start-up and after a failed Kafka
commit; `resolve_kafka_sinks` serves the scale-out writer, the resolution watcher and
``laminar recover``.

Vocabulary: to **resolve** an in-doubt transaction is to finish it by its recorded decision
(commit it, or roll it back) — the one word the code, the CLI and docs/ use. ``laminar recover``
resolves everything a watcher pass finds; "complete" is to resolve a decided epoch by committing
it. The decision records' statements are `laminar.engine.records`'.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

import psycopg

from laminar import _core
from laminar._core import KafkaRecoveryMachine
from laminar.engine.loop import drive
from laminar.errors import FatalError, LaminarError
from laminar.protocol.driver import KafkaDriver

__all__ = ["refusal_error", "resolve_kafka_sinks"]

log = logging.getLogger("laminar.protocol.recovery")


def refusal_error(
    kind: str | None, message: str | None, *, sink_id: str | None = None, epoch: int | None = None
) -> LaminarError:
    """The `laminar.errors` exception for one of the core's refusals: the core's one error
    bridge (`laminar._core.refusal_error`, docs/engine.md §5); kept for its callers."""
    if kind is None:
        return FatalError(message or "refused", sink_id=sink_id, epoch=epoch)
    error = _core.refusal_error(
        kind,  # type: ignore[arg-type]  # a refusal's kind, as the core named it
        message or f"refused ({kind})",
        sink_id=sink_id,
        epoch=epoch,
    )
    assert isinstance(error, LaminarError)
    return error


def resolve_kafka_sinks(
    conn: psycopg.Connection[Any],
    sinks: Iterable[Any],
    *,
    init: Callable[[Any], None],
) -> dict[str, int]:
    """The recovery recipe for some Kafka sinks of a group (module docstring): EndTxn first,
    then ``init(sink)`` for each (a new producer), then the redo log. Returns the sinks whose
    decided epoch only Spark's replay can complete: ``{transactional_id: epoch}``.

    ``conn`` is a connection to the decision database with no transaction open. Raises the
    refusals of the core (a corrupt decision: `InvalidStateEncoding`; impossible states).
    """
    by_id = {s.sink_id: s for s in sinks}
    machine = KafkaRecoveryMachine(list(by_id))
    drive(machine, KafkaDriver(by_id, lambda: conn, log, init=init).perform)
    return dict(machine.awaiting)
