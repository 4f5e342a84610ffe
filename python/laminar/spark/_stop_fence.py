"""The stop fence of ``format("laminar")`` (docs/protocol.md §4, docs/spark.md, "Stopping a query
in the middle of a batch"; the table is ``laminar.stop_fence``, docs/formats.md).

A query stopped in the middle of a batch can leave a Python worker Spark abandoned before it
even connected; run later, its task would find the batch's record gone (`resolve_stopped`
rolled it back and concluded it) and create it afresh, preparing participants nobody decides.
`fence_stopped` (in `resolve_stopped`, before any rollback) records the highest epoch the
stopped batch can carry; the core's task machine then leaves a missing record of a fenced
epoch missing and writes nothing (``skipped``). `lift` (the next run's writer creation) reserves
the fence for that writer's tasks (its token, pickled with it to the executors): they create
the record and write; a worker of the stopped run arriving even later — after the restart's
own task of its partition, whose claim it would supersede, so that the restart's commit is
refused — writes nothing either (docs/protocol.md §4).

Both are one transaction on the decision database; the epoch is the core's
(`laminar._core.stop_fence_epoch`), this module only reads and writes.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

import psycopg

from laminar._core import stop_fence_epoch
from laminar._redact import redact_dsn
from laminar.engine import records as _records
from laminar.metadata import ensure_schema
from laminar.postgres._errors import map_pg_error
from laminar.spark._conn_cache import cached_connection, discard

__all__ = ["fence_stopped", "lift"]

log = logging.getLogger("laminar.spark.source")


def fence_stopped(
    dsn: str, group_id: str, sink_ids: Sequence[str], *, batch_epochs: Iterable[int] = ()
) -> int:
    """Fence ``group_id`` up to the highest epoch its stopped batch can carry (its unconcluded
    records, ``batch_epochs`` — the epochs Spark's ``abort`` names —, else the epoch after its
    last commit: ``sink_ids`` are its PostgreSQL sinks; a Kafka sink's commits are the group's
    ``txn_state`` rows); returns the fenced epoch.

    Under the group's fence lock (exclusive): a task between its fence read and its record's
    creation is waited for, so its record is among those read here and rolled back after."""
    try:
        with psycopg.connect(dsn, application_name="laminar resolve_stopped") as conn:
            ensure_schema(conn, where=redact_dsn(dsn))
            with conn.transaction():
                _records.lock_stop_fence(conn, group_id)
                in_flight = [e for _, e, _, _ in _records.read_dt_states(conn, group_id)]
                in_flight += list(batch_epochs)  # the batch in flight, known by its id
                committed = [e for _, e in _records.read_sink_epochs(conn, sink_ids)]
                committed += [r.epoch for r in _records.read_decisions(conn, group_id=group_id)]
                known = [e for e in committed if e is not None]
                epoch = stop_fence_epoch(in_flight, max(known, default=None))
                fenced = _records.set_stop_fence(conn, group_id, epoch)
    except psycopg.Error as e:
        raise map_pg_error(e, f"fencing the stopped batch of group {group_id!r}") from e
    log.info(
        "%s: stop fence up to epoch %d (a task of the stopped batch that finds its record "
        "missing writes nothing; the next run's writer lifts it)",
        group_id,
        fenced,
    )
    return fenced


def lift(dsn: str, group_id: str, writer: str) -> int | None:
    """Reserve ``group_id``'s fence for the tasks of ``writer`` (a new run of the query: its
    writer's token); the epoch it holds, None if there is none. One statement, on the
    connection the process keeps for it (`laminar.spark._conn_cache`: Spark reuses its
    driver-side Python workers from one micro-batch to the next), tried once more on a new
    connection if the kept one failed. A database without the table (never migrated to version
    3) has no fence to lift; one at version 3 or 4 (no ``writer`` column) has it deleted."""
    for last_try in (False, True):
        try:
            conn = cached_connection(dsn, application_name="laminar writer", use="lift")
            try:
                lifted = _records.reserve_stop_fence(conn, group_id, writer)
            except psycopg.errors.UndefinedColumn:
                lifted = _records.lift_stop_fence(conn, group_id)
            break
        except (psycopg.errors.UndefinedTable, psycopg.errors.InvalidSchemaName):
            return None
        except psycopg.Error as e:
            discard(dsn, use="lift")
            if last_try:
                raise map_pg_error(
                    e, f"format('laminar'): lifting the stop fence of {group_id!r}"
                ) from e
    if lifted is not None:
        log.info("%s: a new run: the stop fence (epoch %d) lifted for its writer", group_id, lifted)
    return lifted
