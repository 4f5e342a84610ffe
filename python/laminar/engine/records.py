"""The decision records: the statements over the ``laminar`` schema's ``sinks``,
``sink_epochs``, ``txn_state``, ``redo``, ``dt_state``, ``dt_participant``, ``stop_fence`` and
``commit_stats`` tables (docs/protocol.md §7, docs/engine.md §3-4).

Over 500 lines on purpose: it is the one home of every statement over the laminar schema (issue
13), grouped by table; splitting it would spread them again.

Each function is one statement, run in the connection's current transaction (the caller — a
protocol driver performing a command of the core — commits). Nothing here decides: which row to
write, and whether a change is allowed, is the core's (`laminar._core`: the ``txn_state``
transition table is checked by the machine before it asks for ``record_decision``, and the
statement itself applies the upsert only over a row whose epoch is not later, so a slow writer
can never move a decision back).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql

from laminar._core import encode_redo
from laminar.metadata import table

__all__ = [
    "DecisionRow",
    "bump_generation",
    "claim_epoch",
    "claim_participants",
    "committed_epoch",
    "committed_epochs",
    "conclude_dt",
    "count_outcome",
    "create_dt",
    "delete_redo",
    "lift_stop_fence",
    "lock_group",
    "lock_partition",
    "lock_stop_fence",
    "mark_participants",
    "read_commit_stats",
    "read_decisions",
    "read_dt_state",
    "read_dt_states",
    "read_dt_status",
    "read_generation",
    "read_kafka_registry",
    "read_metric_sinks",
    "read_ownership",
    "read_participant_decisions",
    "read_participants",
    "read_redo",
    "read_registry",
    "read_sink_epochs",
    "read_status_sinks",
    "read_stop_fence",
    "read_stop_fences",
    "record_decision",
    "record_epoch_totals",
    "redo_blobs",
    "redo_exists",
    "replace_redo",
    "reserve_stop_fence",
    "reset_owner",
    "rewrite_decision",
    "set_dt_state",
    "set_owner",
    "set_stop_fence",
]

# -- laminar.sinks: the group's row (owner, epoch base, generation) ------------------------------

#: Step 1 of an epoch: the group's row lock (held until the decision commits) and its
#: generation, the fencing token (docs/protocol.md §6).
LOCK_GROUP = sql.SQL(
    "UPDATE {t} SET last_commit_ms = coalesce(%s, last_commit_ms) WHERE sink_id = %s"
    " RETURNING generation"
).format(t=table("sinks"))
_BUMP_GENERATION = sql.SQL(
    "UPDATE {t} SET generation = generation + 1, updated_at = now() WHERE sink_id = %s"
    " RETURNING generation"
).format(t=table("sinks"))
_READ_GENERATION = sql.SQL("SELECT generation FROM {t} WHERE sink_id = %s").format(t=table("sinks"))
_READ_OWNER = sql.SQL("SELECT owner, epoch_base FROM {t} WHERE sink_id = %s FOR UPDATE").format(
    t=table("sinks")
)
_READ_MEMBER_OWNERS = sql.SQL(
    "SELECT sink_id, owner FROM {t} WHERE sink_id = ANY(%s) AND owner IS NOT NULL"
).format(t=table("sinks"))
_SET_OWNER = sql.SQL(
    "UPDATE {t} SET owner = %s, owner_since = now(), epoch_base = %s, updated_at = now()"
    " WHERE sink_id = ANY(%s)"
).format(t=table("sinks"))

_READ_REGISTRY = sql.SQL(
    "SELECT kind, config, epoch_base FROM {t} WHERE sink_id = %s FOR UPDATE"
).format(t=table("sinks"))
_RESET_OWNER = sql.SQL(
    "UPDATE {t} SET owner = NULL, owner_since = NULL, epoch_base = %s, updated_at = now()"
    " WHERE sink_id = ANY(%s)"
).format(t=table("sinks"))
_COMMITTED_EPOCHS = sql.SQL(
    "SELECT (SELECT max(epoch) FROM {e} WHERE sink_id = ANY(%s)),"
    " (SELECT max(epoch) FROM {d} WHERE transactional_id = ANY(%s))"
).format(e=table("sink_epochs"), d=table("txn_state"))

# -- laminar.sink_epochs ---------------------------------------------------------------------------

_READ_EPOCHS = sql.SQL("SELECT sink_id, epoch FROM {t} WHERE sink_id = ANY(%s)").format(
    t=table("sink_epochs")
)

# The sinks' write path (`laminar.postgres._steps` re-exports these): constant statements,
# rendered to bytes once (identifiers quoted by psycopg).
# `WHERE e.epoch < EXCLUDED.epoch` is the replay rule (the core's `epoch_committed`, written once
# in Rust) negated, in SQL so that the row lock decides it: kept equal by
# tests/integration/test_postgres_claim_rule.py (docs/engine.md, "The sink's transaction").
_CLAIM = (
    sql.SQL(
        "INSERT INTO {t} AS e (sink_id, epoch, committed_at, rows, bytes)"
        " VALUES (%s, %s, now(), 0, 0)"
        " ON CONFLICT (sink_id) DO UPDATE"
        " SET epoch = EXCLUDED.epoch, committed_at = EXCLUDED.committed_at, rows = 0, bytes = 0"
        " WHERE e.epoch < EXCLUDED.epoch"
        " RETURNING epoch"
    )
    .format(t=table("sink_epochs"))
    .as_bytes(None)
)
_TOTALS = (
    sql.SQL(
        "UPDATE {t} SET rows = %s, bytes = %s, committed_at = clock_timestamp() WHERE sink_id = %s"
    )
    .format(t=table("sink_epochs"))
    .as_bytes(None)
)
_READ_EPOCH = (
    sql.SQL("SELECT epoch FROM {t} WHERE sink_id = %s")
    .format(t=table("sink_epochs"))
    .as_bytes(None)
)


def claim_epoch(conn: psycopg.Connection[Any], sink_id: str, epoch: int) -> bool:
    """Upsert ``laminar.sink_epochs`` to ``epoch``; True if this transaction now owns the epoch.

    False means the sink id already holds ``epoch`` or a later one (a replay): nothing else may be
    written in this transaction. The statement takes the row lock, so a concurrent writer of the
    same sink id waits here until this transaction ends, then sees the outcome.
    """
    return conn.execute(_CLAIM, (sink_id, epoch)).fetchone() is not None


def record_epoch_totals(
    conn: psycopg.Connection[Any], sink_id: str, rows: int, nbytes: int
) -> None:
    """Store the claimed epoch's row and byte counts and commit time (for ``laminar status``)."""
    conn.execute(_TOTALS, (rows, nbytes, sink_id))


def committed_epoch(conn: psycopg.Connection[Any], sink_id: str) -> int | None:
    """The last epoch committed by ``sink_id`` (as this transaction sees it), or None."""
    row = conn.execute(_READ_EPOCH, (sink_id,)).fetchone()
    return None if row is None else int(row[0])


# -- laminar.txn_state: one Kafka sink's last decided epoch ---------------------------------------

#: The decision row (step 6); applied only over a row whose epoch is not later (the table's
#: ``decide`` rule: a decision never goes back).
UPSERT_DECISION = sql.SQL(
    "INSERT INTO {t} AS s (transactional_id, epoch, previous_epoch, prepared_state, group_id,"
    " decided_at) VALUES (%s, %s, %s, %s, %s, now())"
    " ON CONFLICT (transactional_id) DO UPDATE SET epoch = EXCLUDED.epoch,"
    " previous_epoch = EXCLUDED.previous_epoch, prepared_state = EXCLUDED.prepared_state,"
    " group_id = EXCLUDED.group_id, decided_at = EXCLUDED.decided_at"
    " WHERE s.epoch <= EXCLUDED.epoch"
).format(t=table("txn_state"))
_DECISIONS = sql.SQL(
    "SELECT transactional_id, epoch, previous_epoch, prepared_state, group_id, decided_at,"
    " extract(epoch FROM clock_timestamp() - decided_at) FROM {t}"
).format(t=table("txn_state"))

# -- laminar.redo: a Kafka sink's records of its last decided epoch ------------------------------

_INSERT_REDO = sql.SQL(
    "INSERT INTO {t} (transactional_id, epoch, seq, records) VALUES (%s, %s, %s, %s)"
).format(t=table("redo"))
_DROP_OLD_REDO = sql.SQL("DELETE FROM {t} WHERE transactional_id = %s AND epoch < %s").format(
    t=table("redo")
)
_REDO_EXISTS = sql.SQL(
    "SELECT EXISTS (SELECT 1 FROM {t} WHERE transactional_id = %s AND epoch = %s)"
).format(t=table("redo"))
_READ_REDO = sql.SQL(
    "SELECT records FROM {t} WHERE transactional_id = %s AND epoch = %s ORDER BY seq"
).format(t=table("redo"))
_DELETE_REDO = sql.SQL("DELETE FROM {t} WHERE transactional_id = %s AND epoch <= %s").format(
    t=table("redo")
)


def lock_group(
    conn: psycopg.Connection[Any], group_id: str, last_commit_ms: float | None
) -> int | None:
    """Lock the group's row (recording the last commit latency); its generation, None if the
    group has no row."""
    row = conn.execute(LOCK_GROUP, (last_commit_ms, group_id)).fetchone()
    return None if row is None else int(row[0])


def bump_generation(conn: psycopg.Connection[Any], group_id: str) -> int | None:
    """Fence the previous coordinator (docs/protocol.md §6): the new generation."""
    row = conn.execute(_BUMP_GENERATION, (group_id,)).fetchone()
    return None if row is None else int(row[0])


def read_generation(conn: psycopg.Connection[Any], group_id: str) -> int | None:
    """The group's generation as it stands (docs/protocol.md §6), None if it has no row: a
    resumed start checks that no coordinator started since its run's (§4)."""
    row = conn.execute(_READ_GENERATION, (group_id,)).fetchone()
    return None if row is None else int(row[0])


def read_ownership(
    conn: psycopg.Connection[Any], registry_id: str, members: Sequence[str]
) -> tuple[str | None, int, list[tuple[str, str]]] | None:
    """The registry row's owner and epoch base (locked), and the members' owners; None if the
    registry id has no row."""
    row = conn.execute(_READ_OWNER, (registry_id,)).fetchone()
    if row is None:
        return None
    owners = conn.execute(_READ_MEMBER_OWNERS, (list(members),)).fetchall()
    return row[0], int(row[1]), [(str(s), str(o)) for s, o in owners]


def set_owner(
    conn: psycopg.Connection[Any], ids: Sequence[str], owner: str, epoch_base: int
) -> None:
    """Make ``owner`` the owner of these rows, from ``epoch_base``."""
    conn.execute(_SET_OWNER, (owner, epoch_base, list(ids)))


def read_registry(
    conn: psycopg.Connection[Any], sink_id: str
) -> tuple[str, dict[str, Any], int] | None:
    """A registry row's kind, config and epoch base, locked (None: no such row)."""
    row = conn.execute(_READ_REGISTRY, (sink_id,)).fetchone()
    return None if row is None else (str(row[0]), dict(row[1] or {}), int(row[2]))


_KAFKA_REGISTRY = sql.SQL("SELECT sink_id, config FROM {t} WHERE kind = 'kafka'").format(
    t=table("sinks")
)
_STATUS_SINKS = sql.SQL(
    "SELECT s.sink_id, s.kind, s.owner, s.generation, s.epoch_base, s.last_commit_ms,"
    " e.epoch, e.committed_at, e.rows,"
    " extract(epoch FROM clock_timestamp() - coalesce(e.committed_at, s.updated_at))"
    " FROM {s} s LEFT JOIN {e} e USING (sink_id) ORDER BY s.kind, s.sink_id"
).format(s=table("sinks"), e=table("sink_epochs"))


def read_kafka_registry(conn: psycopg.Connection[Any]) -> dict[str, dict[str, Any]]:
    """The registered configuration of every Kafka sink (secrets masked), by transactional id."""
    return {str(r[0]): dict(r[1] or {}) for r in conn.execute(_KAFKA_REGISTRY).fetchall()}


def read_status_sinks(conn: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
    """``laminar status``'s rows: ``(sink_id, kind, owner, generation, epoch_base,
    last_commit_ms, epoch, committed_at, rows, age_s)`` per registered sink."""
    return [tuple(r) for r in conn.execute(_STATUS_SINKS).fetchall()]


def committed_epochs(conn: psycopg.Connection[Any], sink_ids: Sequence[str]) -> list[int | None]:
    """The last epoch committed in PostgreSQL and the last decided in Kafka among these sinks
    (None where there is none): what `laminar._core.next_epoch_base` moves past."""
    row = conn.execute(_COMMITTED_EPOCHS, (list(sink_ids), list(sink_ids))).fetchone()
    return [None, None] if row is None else [None if e is None else int(e) for e in row]


def reset_owner(conn: psycopg.Connection[Any], sink_ids: Sequence[str], epoch_base: int) -> None:
    """Forget these rows' owner and set their epoch base (``laminar reset``)."""
    conn.execute(_RESET_OWNER, (epoch_base, list(sink_ids)))


def read_sink_epochs(
    conn: psycopg.Connection[Any], sink_ids: Sequence[str]
) -> list[tuple[str, int | None]]:
    """Each sink's last committed epoch in ``laminar.sink_epochs`` (None: none), in order."""
    found = dict(conn.execute(_READ_EPOCHS, (list(sink_ids),)).fetchall())
    return [(s, None if found.get(s) is None else int(found[s])) for s in sink_ids]


_REWRITE_DECISION = sql.SQL(
    "UPDATE {t} SET epoch = %s, previous_epoch = %s, prepared_state = %s"
    " WHERE transactional_id = %s"
).format(t=table("txn_state"))


def rewrite_decision(
    conn: psycopg.Connection[Any],
    transactional_id: str,
    epoch: int,
    previous_epoch: int | None,
    prepared_state: str,
) -> None:
    """Rewrite a decision row as the operator asked (``laminar resolve``: the table's
    ``repair`` or ``force_back``, checked by the core before it is asked for)."""
    conn.execute(_REWRITE_DECISION, (epoch, previous_epoch, prepared_state, transactional_id))


def record_decision(
    conn: psycopg.Connection[Any],
    transactional_id: str,
    epoch: int,
    previous_epoch: int | None,
    prepared_state: str,
    group_id: str,
) -> None:
    """Upsert the decision row of one Kafka sink (never over a later epoch)."""
    conn.execute(
        UPSERT_DECISION, (transactional_id, epoch, previous_epoch, prepared_state, group_id)
    )


@dataclass(frozen=True)
class DecisionRow:
    """One Kafka sink's row in ``laminar.txn_state`` as read: the last epoch decided for it.

    The performer's read of the row, columns as stored; the core parses it into its one parsed
    row, never Python (docs/engine.md §4)."""

    transactional_id: str
    epoch: int
    previous_epoch: int | None
    prepared_state: str
    group_id: str
    decided_at: dt.datetime
    age_s: float

    def event_row(self) -> tuple[str, int, int | None, str, str, float]:
        """The row as `laminar._core.Event.decisions` takes it."""
        return (
            self.transactional_id,
            self.epoch,
            self.previous_epoch,
            self.prepared_state,
            self.group_id,
            self.age_s,
        )


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


def replace_redo(
    conn: psycopg.Connection[Any], transactional_id: str, epoch: int, kept: list[Any] | None
) -> None:
    """Drop the redo rows of earlier epochs; with ``kept`` (the Arrow record batches the sink
    produced), insert this epoch's, encoded by the core (docs/protocol.md §7, the redo blob)."""
    conn.execute(_DROP_OLD_REDO, (transactional_id, epoch))
    if kept is None:
        return
    blobs = redo_blobs(kept)
    with conn.cursor() as cur:
        cur.executemany(
            _INSERT_REDO, [(transactional_id, epoch, seq, blob) for seq, blob in enumerate(blobs)]
        )


def redo_blobs(kept: list[Any]) -> list[bytes]:
    """The redo blobs of ``kept`` (`KafkaRecords`, one per chunk the sink produced): keys and
    values, and for Spark's Kafka-sink shape each record's topic, partition and headers
    (docs/formats.md §2, blob version 2)."""
    values: list[bytes | None] = []
    keys: list[bytes | None] = []
    routed = any(records.topics is not None for records in kept)
    topics: list[str | None] = []
    partitions: list[int] = []
    headers: list[list[tuple[str, bytes | None]]] = []
    for records in kept:
        n = records.num_rows
        values.extend(records.values)
        keys.extend(records.keys if records.keys is not None else [None] * n)
        if routed:
            topics.extend(records.topics or [None] * n)
            partitions.extend(records.partitions or [-1] * n)
            headers.extend(records.headers or [[]] * n)
    return encode_redo(values, keys, *((topics, partitions, headers) if routed else ()))


def redo_exists(conn: psycopg.Connection[Any], transactional_id: str, epoch: int) -> bool:
    """Whether ``laminar.redo`` holds the records of ``epoch`` for this sink."""
    row = conn.execute(_REDO_EXISTS, (transactional_id, epoch)).fetchone()
    return bool(row and row[0])


def read_redo(conn: psycopg.Connection[Any], transactional_id: str, epoch: int) -> list[bytes]:
    """The redo blobs of one epoch, in order."""
    rows = conn.execute(_READ_REDO, (transactional_id, epoch)).fetchall()
    return [bytes(r[0]) for r in rows]


def delete_redo(conn: psycopg.Connection[Any], transactional_id: str, up_to_epoch: int) -> None:
    """Drop the redo rows of epochs up to ``up_to_epoch`` (Kafka committed them)."""
    conn.execute(_DELETE_REDO, (transactional_id, up_to_epoch))


# -- laminar.dt_state / dt_participant: the scale-out decisions (docs/engine.md §4) ---------------
#
# Every state change names the state it changes from, so the row changes only if it still is in
# that state; the change itself was checked by the core's table (`dt_next`) before the command
# was given. Nothing here writes a state the table does not allow.

_CREATE_DT = sql.SQL(
    "INSERT INTO {t} (dtid, group_id, epoch, state) VALUES (%s, %s, %s, 'prepare')"
    " ON CONFLICT (dtid) DO NOTHING RETURNING 1"
).format(t=table("dt_state"))
_SET_DT_STATE = sql.SQL(
    "UPDATE {t} SET state = %s, updated_at = now(), message = coalesce(nullif(%s, ''), message)"
    " WHERE dtid = %s AND state = %s RETURNING 1"
).format(t=table("dt_state"))
_READ_DT_STATE = sql.SQL("SELECT state FROM {t} WHERE dtid = %s").format(t=table("dt_state"))
_CONCLUDE_DT = sql.SQL("DELETE FROM {t} WHERE dtid = %s").format(t=table("dt_state"))
_READ_DT_STATES = sql.SQL(
    "SELECT dtid, epoch, state, extract(epoch FROM clock_timestamp() - created_at) FROM {t}"
).format(t=table("dt_state"))
_READ_PARTICIPANTS = sql.SQL(
    "SELECT participant, kind, resource FROM {t} WHERE dtid = %s ORDER BY participant"
).format(t=table("dt_participant"))
_PARTICIPANT_DECISIONS = sql.SQL(
    "SELECT s.dtid, s.group_id, s.state, p.participant, p.resource FROM {p} p JOIN {s} s"
    " USING (dtid) WHERE p.kind = 'postgres' ORDER BY s.created_at DESC, s.dtid DESC"
).format(p=table("dt_participant"), s=table("dt_state"))
_MARK_PARTICIPANTS = sql.SQL(
    "UPDATE {t} SET state = %s WHERE dtid = %s AND participant = ANY(%s)"
).format(t=table("dt_participant"))
_CLAIM_PARTICIPANT = sql.SQL(
    "INSERT INTO {t} (dtid, participant, kind, resource, state) VALUES (%s, %s, %s, %s, 'claimed')"
    " ON CONFLICT (dtid, participant) DO UPDATE SET resource = EXCLUDED.resource,"
    " state = 'claimed'"
).format(t=table("dt_participant"))
_LOCK_PARTITION = "SELECT pg_advisory_lock(hashtextextended(%s, 0))"


def create_dt(conn: psycopg.Connection[Any], dtid: str, group_id: str, epoch: int) -> bool:
    """Insert ``dtid`` in state ``prepare`` (the table's ``create``); False if a row exists."""
    return conn.execute(_CREATE_DT, (dtid, group_id, epoch)).fetchone() is not None


def set_dt_state(
    conn: psycopg.Connection[Any], dtid: str, from_state: str, to_state: str, message: str = ""
) -> bool:
    """``from_state -> to_state`` for ``dtid``; False if the row is not (or no longer) in
    ``from_state``."""
    row = conn.execute(_SET_DT_STATE, (to_state, message[:500], dtid, from_state)).fetchone()
    return row is not None


def read_dt_state(
    conn: psycopg.Connection[Any], dtid: str, *, for_share: bool = False
) -> str | None:
    """The state of ``dtid`` (None: no row). ``for_share`` keeps the row share-locked until the
    transaction ends: a task's claim, which a decision then waits for."""
    query = _READ_DT_STATE + sql.SQL(" FOR SHARE") if for_share else _READ_DT_STATE
    row = conn.execute(query, (dtid,)).fetchone()
    return None if row is None else str(row[0])


def conclude_dt(conn: psycopg.Connection[Any], dtid: str, from_state: str | None) -> bool:
    """Delete ``dtid`` (its participants cascade), only while it is in ``from_state`` (None:
    any); False if there was no such row."""
    query, params = _CONCLUDE_DT, [dtid]
    if from_state is not None:
        query, params = query + sql.SQL(" AND state = %s"), [dtid, from_state]
    return conn.execute(query + sql.SQL(" RETURNING 1"), params).fetchone() is not None


def read_dt_states(
    conn: psycopg.Connection[Any], group_id: str | None = None
) -> list[tuple[str, int, str, float]]:
    """``(dtid, epoch, state, age_s)`` of every distributed transaction (of one group), oldest
    first."""
    query, params = _READ_DT_STATES, list[str]()
    if group_id is not None:
        query, params = query + sql.SQL(" WHERE group_id = %s"), [group_id]
    rows = conn.execute(query + sql.SQL(" ORDER BY created_at, dtid"), params).fetchall()
    return [(str(d), int(e), str(s), float(a)) for d, e, s, a in rows]


_DT_STATUS = sql.SQL(
    "SELECT dtid, group_id, epoch, state, message,"
    " extract(epoch FROM clock_timestamp() - created_at) FROM {t} ORDER BY created_at"
).format(t=table("dt_state"))
_PARTICIPANTS_STATUS = sql.SQL(
    "SELECT dtid, participant, kind, resource, state FROM {t} ORDER BY dtid, participant"
).format(t=table("dt_participant"))


def read_dt_status(
    conn: psycopg.Connection[Any],
) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """``laminar status``'s distributed transactions: ``(dtid, group_id, epoch, state,
    message, age_s)`` rows and every ``(dtid, participant, kind, resource, state)`` row."""
    rows = [tuple(r) for r in conn.execute(_DT_STATUS).fetchall()]
    parts = [tuple(r) for r in conn.execute(_PARTICIPANTS_STATUS).fetchall()]
    return rows, parts


def read_participants(conn: psycopg.Connection[Any], dtid: str) -> list[tuple[str, str, str]]:
    """``(participant, kind, resource)`` of every row ``dtid``'s tasks claimed."""
    return [(str(p), str(k), str(r)) for p, k, r in conn.execute(_READ_PARTICIPANTS, (dtid,))]


def read_participant_decisions(
    conn: psycopg.Connection[Any],
) -> list[tuple[str, str, str, str, str]]:
    """``(dtid, group_id, state, participant, resource)`` of every PostgreSQL participant with a
    decision row, newest decision first (the core matches a prepared gid to its row:
    `laminar._core.participant_matches`)."""
    return [
        (str(d), str(g), str(s), str(p), str(r))
        for d, g, s, p, r in conn.execute(_PARTICIPANT_DECISIONS)
    ]


def mark_participants(
    conn: psycopg.Connection[Any], dtid: str, names: Sequence[str], state: str
) -> None:
    """Set the state of these participants of ``dtid``."""
    conn.execute(_MARK_PARTICIPANTS, (state, dtid, list(names)))


def claim_participants(
    conn: psycopg.Connection[Any], dtid: str, rows: Sequence[tuple[str, str, str]]
) -> None:
    """Upsert a task attempt's claim: ``(participant, kind, resource)`` rows, the attempt's own
    row first (docs/protocol.md §4, task step b)."""
    with conn.cursor() as cur:
        cur.executemany(_CLAIM_PARTICIPANT, [(dtid, p, k, r) for p, k, r in rows])


def lock_partition(conn: psycopg.Connection[Any], key: str) -> None:
    """The session advisory lock of one partition of a distributed transaction: its attempts
    run one after the other (released when the task's connection closes)."""
    conn.execute(_LOCK_PARTITION, (key,))


# -- laminar.stop_fence (docs/protocol.md §4, docs/formats.md) --------------------------------

#: The group's fence lock: a transaction-scoped advisory lock, shared by the tasks that read the
#: fence and create the epoch's record, exclusive for the fence's writer (so a fence committed
#: first is seen by the task, and a record committed first is seen by the resolution after it).
_FENCE_LOCK = "SELECT pg_advisory_xact_lock{}(hashtextextended('laminar stop fence ' || %s, 0))"
_READ_FENCE = sql.SQL("SELECT epoch, writer FROM {t} WHERE group_id = %s").format(
    t=table("stop_fence")
)
_SET_FENCE = sql.SQL(
    "INSERT INTO {t} AS f (group_id, epoch) VALUES (%s, %s) ON CONFLICT (group_id)"
    " DO UPDATE SET epoch = greatest(f.epoch, EXCLUDED.epoch), fenced_at = now(), writer = NULL"
    " RETURNING f.epoch"
).format(t=table("stop_fence"))
_RESERVE_FENCE = sql.SQL("UPDATE {t} SET writer = %s WHERE group_id = %s RETURNING epoch").format(
    t=table("stop_fence")
)
_LIFT_FENCE = sql.SQL("DELETE FROM {t} WHERE group_id = %s RETURNING epoch").format(
    t=table("stop_fence")
)


def read_stop_fence(conn: psycopg.Connection[Any], group_id: str) -> tuple[int | None, str | None]:
    """The group's fenced epoch (None: no fence) and the writer the next run reserved it for
    (None: not reserved), read under the group's fence lock (shared, held until the transaction
    ends: the task's record creation commits under it). Two statements: the read's snapshot is
    taken once the lock is granted, after any fence that held it."""
    conn.execute(_FENCE_LOCK.format("_shared"), (group_id,))
    row = conn.execute(_READ_FENCE, (group_id,)).fetchone()
    return (None, None) if row is None else (int(row[0]), None if row[1] is None else str(row[1]))


def lock_stop_fence(conn: psycopg.Connection[Any], group_id: str) -> None:
    """The group's fence lock, exclusive, until the transaction ends: it waits for the tasks
    between their fence read and their record's creation; the fence's writer takes it before
    reading what the group has in flight."""
    conn.execute(_FENCE_LOCK.format(""), (group_id,))


def set_stop_fence(conn: psycopg.Connection[Any], group_id: str, epoch: int) -> int:
    """Fence the group up to ``epoch`` (the highest of this and an earlier fence, reserved for
    no writer; the caller holds `lock_stop_fence`); returns the fenced epoch."""
    row = conn.execute(_SET_FENCE, (group_id, epoch)).fetchone()
    assert row is not None  # an upsert returns its row
    return int(row[0])


def reserve_stop_fence(conn: psycopg.Connection[Any], group_id: str, writer: str) -> int | None:
    """Reserve the group's fence for the tasks of ``writer`` (a new run's writer: docs/protocol.md
    §4); the epoch it holds (None: there is no fence)."""
    row = conn.execute(_RESERVE_FENCE, (writer, group_id)).fetchone()
    return None if row is None else int(row[0])


def lift_stop_fence(conn: psycopg.Connection[Any], group_id: str) -> int | None:
    """Delete the group's fence (a database at schema version 3 or 4, which cannot reserve it);
    the epoch it held (None: there was none)."""
    row = conn.execute(_LIFT_FENCE, (group_id,)).fetchone()
    return None if row is None else int(row[0])


# -- laminar.commit_stats and the exporter's reads (docs/formats.md §3 version 4,
# -- docs/operations.md "Metrics and alerts"; laminar._stats, laminar.exporter) -----------------

_COUNT_OUTCOME = sql.SQL(
    "INSERT INTO {t} AS s (group_id, commits, aborts, latency_sum_s, latency_buckets)"
    " VALUES (%s, %s, %s, %s, %s) ON CONFLICT (group_id) DO UPDATE SET"
    " commits = s.commits + EXCLUDED.commits, aborts = s.aborts + EXCLUDED.aborts,"
    " latency_sum_s = s.latency_sum_s + EXCLUDED.latency_sum_s,"
    " latency_buckets = ARRAY(SELECT coalesce(a, 0) + coalesce(b, 0) FROM"
    " unnest(s.latency_buckets, EXCLUDED.latency_buckets) WITH ORDINALITY AS u(a, b, i)"
    " ORDER BY i), updated_at = now()"
).format(t=table("commit_stats"))
_COMMIT_STATS = sql.SQL(
    "SELECT group_id, commits, aborts, latency_sum_s, latency_buckets FROM {t} ORDER BY group_id"
).format(t=table("commit_stats"))
_STOP_FENCES = sql.SQL(
    "SELECT group_id, epoch, extract(epoch FROM clock_timestamp() - fenced_at) FROM {t}"
).format(t=table("stop_fence"))
_METRIC_SINKS = sql.SQL(
    "SELECT s.sink_id, s.kind, s.config -> 'sinks', s.generation, e.epoch,"
    " extract(epoch FROM e.committed_at), extract(epoch FROM clock_timestamp() - e.committed_at)"
    " FROM {s} s LEFT JOIN {e} e USING (sink_id) ORDER BY s.sink_id"
).format(s=table("sinks"), e=table("sink_epochs"))


def count_outcome(
    conn: psycopg.Connection[Any],
    group_id: str,
    *,
    commits: int,
    aborts: int,
    latency_s: float,
    buckets: Sequence[int],
) -> None:
    """Add one epoch's outcome to the group's ``laminar.commit_stats`` row (``buckets``: the
    latency histogram's counts to add, element-wise, `laminar._stats.BUCKETS_S`)."""
    conn.execute(_COUNT_OUTCOME, (group_id, commits, aborts, latency_s, list(buckets)))


def read_commit_stats(
    conn: psycopg.Connection[Any],
) -> list[tuple[str, int, int, float, list[int]]]:
    """``(group_id, commits, aborts, latency_sum_s, latency_buckets)`` of every group."""
    return [
        (str(g), int(c), int(a), float(s), [int(n or 0) for n in (b or [])])
        for g, c, a, s, b in conn.execute(_COMMIT_STATS).fetchall()
    ]


def read_stop_fences(
    conn: psycopg.Connection[Any], *, reservable: bool = True
) -> list[tuple[str, int, float]]:
    """``(group_id, epoch, age_s)`` of every stop fence in place: not yet reserved by a new
    run's writer, which lifts it for its own tasks (``reservable``: the schema has the
    ``writer`` column, version 5)."""
    query = _STOP_FENCES + sql.SQL(" WHERE writer IS NULL" if reservable else "")
    rows = conn.execute(query + sql.SQL(" ORDER BY group_id")).fetchall()
    return [(str(g), int(e), float(a)) for g, e, a in rows]


def read_metric_sinks(conn: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
    """The exporter's registry rows: ``(sink_id, kind, members, generation, epoch,
    committed_at_unix_s, age_s)`` (``members``: an atomic group's sink ids; the epoch columns
    are a PostgreSQL sink's ``sink_epochs`` row, None without one)."""
    return [tuple(r) for r in conn.execute(_METRIC_SINKS).fetchall()]
