"""Recovery of atomic groups (docs/protocol.md §3): bring every Kafka sink level with the decision
log, then open the new producers.

The decisions come from the Rust core (`laminar._core.complete_kafka`); this module reads the
records they are made from and performs the I/O, in the recipe's order:

1. **protocol-level completion** — for each Kafka sink whose decided epoch ``d`` (its row in
   ``laminar.txn_state``) is ahead of its marker, ``EndTxn(commit)`` with the producer id/epoch
   recorded in the decision, *before* any new producer's ``init_transactions`` (which would abort
   the prepared transaction); the marker, read again, says whether it worked;
2. ``init_transactions`` of each sink: fences the previous coordinator's producers and aborts
   whatever they left open — correct, because an undecided epoch has no Postgres commit;
3. the **redo log** (``laminar.redo``) re-produces ``d`` in a fresh transaction with marker ``d``,
   or, without one, the sink waits for **Spark's replay** of ``d`` (any other epoch is refused).

The same functions serve the writer at start-up and after a failed Kafka commit, the resolution
watcher and ``laminar recover``.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql

from laminar._core import PreparedTxnState, complete_kafka, decode_redo
from laminar._faults import crash_point
from laminar.errors import (
    ConfigError,
    FatalError,
    FencedError,
    IllegalStateError,
    InDoubtError,
    InvalidStateEncoding,
    LaminarError,
)
from laminar.kafka_log import ClientSecurity, KafkaLogClient, KafkaLogError
from laminar.metadata import table

__all__ = [
    "DecisionRow",
    "delete_redo",
    "end_txn",
    "read_decisions",
    "read_redo",
    "redo_exists",
    "redo_from_log",
    "refusal_error",
    "settle_kafka_sinks",
]

log = logging.getLogger("laminar.recovery")

_REFUSALS: dict[str, type[LaminarError]] = {
    "corrupt_decision": InvalidStateEncoding,
    "kafka_behind": InDoubtError,
    "kafka_ahead": FatalError,
    "epoch_backwards": ConfigError,
    "other_epoch_while_incomplete": FatalError,
    "fenced": FencedError,
    "invalid_epoch": IllegalStateError,
}


def refusal_error(
    kind: str | None, message: str | None, *, sink_id: str | None = None, epoch: int | None = None
) -> LaminarError:
    """The `laminar.errors` exception for one of the core's refusals."""
    cls = _REFUSALS.get(kind or "", FatalError)
    error = cls(message or f"refused ({kind})", sink_id=sink_id, epoch=epoch)
    error.refusal = kind  # type: ignore[attr-defined]
    return error


@dataclass(frozen=True)
class DecisionRow:
    """One Kafka sink's row in ``laminar.txn_state``: the last epoch decided for it."""

    transactional_id: str
    epoch: int
    previous_epoch: int | None
    prepared_state: str
    group_id: str
    decided_at: dt.datetime
    age_s: float

    def state(self) -> PreparedTxnState:
        """The decoded prepared state (`InvalidStateEncoding` when the row is corrupt)."""
        return PreparedTxnState.parse(self.prepared_state)

    def corruption(self) -> str | None:
        """Why the prepared state does not decode, or None."""
        try:
            self.state()
        except InvalidStateEncoding as e:
            return str(e)
        return None


_DECISIONS = sql.SQL(
    "SELECT transactional_id, epoch, previous_epoch, prepared_state, group_id, decided_at,"
    " extract(epoch FROM clock_timestamp() - decided_at) FROM {t}"
).format(t=table("txn_state"))


def read_decisions(
    conn: psycopg.Connection[Any],
    transactional_ids: Sequence[str] | None = None,
    *,
    group_id: str | None = None,
) -> list[DecisionRow]:
    """The decision rows (all, those of some transactional ids, or of one group)."""
    query = _DECISIONS
    params: tuple[Any, ...] = ()
    if transactional_ids is not None:
        query = query + sql.SQL(" WHERE transactional_id = ANY(%s)")
        params = (list(transactional_ids),)
    elif group_id is not None:
        query = query + sql.SQL(" WHERE group_id = %s")
        params = (group_id,)
    rows = conn.execute(query + sql.SQL(" ORDER BY transactional_id"), params).fetchall()
    return [
        DecisionRow(
            transactional_id=r[0],
            epoch=int(r[1]),
            previous_epoch=None if r[2] is None else int(r[2]),
            prepared_state=r[3],
            group_id=r[4],
            decided_at=r[5],
            age_s=float(r[6]),
        )
        for r in rows
    ]


def redo_exists(conn: psycopg.Connection[Any], transactional_id: str, epoch: int) -> bool:
    """Whether ``laminar.redo`` holds the records of ``epoch`` for this sink."""
    row = conn.execute(
        sql.SQL(
            "SELECT EXISTS (SELECT 1 FROM {t} WHERE transactional_id = %s AND epoch = %s)"
        ).format(t=table("redo")),
        (transactional_id, epoch),
    ).fetchone()
    return bool(row and row[0])


def read_redo(conn: psycopg.Connection[Any], transactional_id: str, epoch: int) -> list[bytes]:
    """The redo blobs of one epoch, in order."""
    rows = conn.execute(
        sql.SQL(
            "SELECT records FROM {t} WHERE transactional_id = %s AND epoch = %s ORDER BY seq"
        ).format(t=table("redo")),
        (transactional_id, epoch),
    ).fetchall()
    return [bytes(r[0]) for r in rows]


def delete_redo(conn: psycopg.Connection[Any], transactional_id: str, up_to_epoch: int) -> None:
    """Drop the redo rows of epochs up to ``up_to_epoch`` (Kafka committed them)."""
    conn.execute(
        sql.SQL("DELETE FROM {t} WHERE transactional_id = %s AND epoch <= %s").format(
            t=table("redo")
        ),
        (transactional_id, up_to_epoch),
    )


def end_txn(
    bootstrap_servers: str,
    producer_config: dict[str, Any],
    transactional_id: str,
    producer_id: int,
    producer_epoch: int,
    *,
    timeout_s: float = 10.0,
) -> str | None:
    """``EndTxn(commit)`` for a prepared transaction; None if the broker accepted it, else why
    not (the caller reads the marker either way: it is the only proof)."""
    try:
        security = ClientSecurity.from_config(producer_config)
        with KafkaLogClient(bootstrap_servers, timeout=timeout_s, security=security) as client:
            client.end_txn(
                transactional_id, producer_id, producer_epoch, commit=True, retry_for_s=timeout_s
            )
    except KafkaLogError as e:
        return str(e)
    return None


def _marker_after_end_txn(sink: Any, epoch: int, wait_s: float = 3.0) -> int | None:
    """The marker, read again until it reaches ``epoch`` (markers land shortly after the
    commit) or ``wait_s`` passes."""
    deadline = time.monotonic() + wait_s
    while True:
        marker: int | None = sink.last_committed_epoch()
        if (marker is not None and marker >= epoch) or time.monotonic() >= deadline:
            return marker
        time.sleep(0.1)


def redo_from_log(conn: psycopg.Connection[Any], sink: Any, epoch: int) -> bool:
    """Re-produce ``epoch``'s records from ``laminar.redo`` in a fresh transaction with marker
    ``epoch``, then drop them; False if the sink already holds the epoch."""
    blobs = read_redo(conn, sink.sink_id, epoch)
    conn.commit()
    if not sink.begin_transaction(epoch):
        return False
    try:
        for i, blob in enumerate(blobs):
            values, keys = decode_redo(blob)
            sink.write_records(values, keys)
            if i == 0:
                crash_point("recovery.mid_redo")
        sink.commit_transaction(epoch)
    except LaminarError:
        if sink.transaction_state.name in ("Active", "Prepared"):
            sink.abort_transaction(epoch)
        raise
    crash_point("recovery.after_redo_commit")
    delete_redo(conn, sink.sink_id, epoch)
    conn.commit()
    log.warning(
        "sink %s: epoch %d completed in Kafka from the redo log (%d blob(s))",
        sink.sink_id,
        epoch,
        len(blobs),
    )
    return True


def _completion(
    conn: psycopg.Connection[Any], sink: Any, row: DecisionRow | None, *, refused: bool
) -> Any:
    marker = sink.last_committed_epoch()
    if row is None:
        return complete_kafka(sink.sink_id, decided_epoch=None, previous_epoch=None, marker=marker)
    corrupt = row.corruption()
    if corrupt is not None:
        return complete_kafka(
            sink.sink_id,
            decided_epoch=row.epoch,
            previous_epoch=row.previous_epoch,
            corrupt=corrupt,
            marker=marker,
        )
    state = row.state()
    has_redo = redo_exists(conn, sink.sink_id, row.epoch)
    conn.commit()
    return complete_kafka(
        sink.sink_id,
        decided_epoch=row.epoch,
        previous_epoch=row.previous_epoch,
        producer_id=state.producer_id,
        producer_epoch=state.producer_epoch,
        marker=marker,
        redo_log=has_redo,
        end_txn_refused=refused,
    )


def settle_kafka_sinks(
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
    sinks = list(sinks)
    ids = [s.sink_id for s in sinks]
    decisions = {r.transactional_id: r for r in read_decisions(conn, ids)}
    conn.commit()
    for sink in sinks:
        if sink.sink_id in decisions:
            # a decision row proves the sink has written: lost marker and identity groups
            # must not make it look new (docs/protocol.md §1)
            sink.recorded_history = (
                f"laminar.txn_state records its decided epoch {decisions[sink.sink_id].epoch}"
            )
        refused = False
        while True:
            step = _completion(conn, sink, decisions.get(sink.sink_id), refused=refused)
            if step.action == "refuse":
                raise refusal_error(step.refusal, step.message, sink_id=sink.sink_id)
            if step.action != "end_txn":
                break
            assert step.epoch is not None
            assert step.producer_id is not None
            why = end_txn(
                sink._bootstrap_servers,
                sink._producer_config,
                sink.sink_id,
                step.producer_id,
                int(step.producer_epoch or 0),
            )
            crash_point("recovery.after_end_txn")
            # the marker is the only proof; after a refusal it is read once, not waited for
            marker = _marker_after_end_txn(sink, step.epoch, wait_s=0.0 if why else 3.0)
            if marker is not None and marker >= step.epoch:
                log.warning(
                    "sink %s: decided epoch %d committed in Kafka by EndTxn (producer %d/%d)",
                    sink.sink_id,
                    step.epoch,
                    step.producer_id,
                    step.producer_epoch,
                )
            else:
                log.warning(
                    "sink %s: EndTxn could not complete decided epoch %d (%s); falling back to "
                    "the redo log or Spark's replay",
                    sink.sink_id,
                    step.epoch,
                    why or "the marker did not move: the broker had aborted the transaction",
                )
            refused = True
    for sink in sinks:
        init(sink)
    crash_point("recovery.after_init")
    awaiting: dict[str, int] = {}
    for sink in sinks:
        step = _completion(conn, sink, decisions.get(sink.sink_id), refused=True)
        if step.action == "refuse":
            raise refusal_error(step.refusal, step.message, sink_id=sink.sink_id)
        if step.action == "redo_from_log":
            assert step.epoch is not None
            redo_from_log(conn, sink, step.epoch)
        elif step.action == "await_replay":
            assert step.epoch is not None
            log.warning(
                "sink %s: decided epoch %d is committed in PostgreSQL but not in Kafka, and the "
                "broker no longer holds its transaction: waiting for Spark's replay of batch %d",
                sink.sink_id,
                step.epoch,
                step.epoch,
            )
            awaiting[sink.sink_id] = step.epoch
    return awaiting
