"""Laminar's metadata in PostgreSQL: the ``laminar`` schema and its versioned migrations.

The schema is created on first use (docs/protocol.md §7). Each migration is applied once, in
version order, and recorded in ``laminar.schema_version``; a transaction-scoped advisory lock
serialises processes that migrate at the same time, so concurrent first uses are safe. A database
already migrated by a *newer* laminar (a version this one does not know) is refused with a clear
`ConfigError` instead of being written with assumptions that may no longer hold.

Adding a migration is appending one `Migration` to `MIGRATIONS` with the next version number;
applied migrations are never edited. Every statement is composed with `psycopg.sql`, so names are
always quoted identifiers, never interpolated text.

Version 1 creates::

    laminar.schema_version(version PK, applied_at, description)
    laminar.sinks(sink_id PK, kind, owner, generation, config jsonb, created_at, updated_at)
    laminar.sink_epochs(sink_id PK, epoch, committed_at, rows, bytes)

Version 2 adds the atomic groups' decision log and the distributed transactions
(docs/protocol.md sections 3 to 7)::

    laminar.sinks       + epoch_base (epochs = epoch_base + Spark batch id, moved by a reset),
                        + owner_since, + last_commit_ms (the group's last commit latency)
    laminar.txn_state(transactional_id PK, epoch, previous_epoch, prepared_state, group_id,
                      decided_at)
    laminar.redo(transactional_id, epoch, seq, records bytea)   PK (transactional_id, epoch, seq)
    laminar.dt_state(dtid PK, group_id, epoch, state, created_at, updated_at, message)
    laminar.dt_participant(dtid, participant, kind, resource, state)   PK (dtid, participant)

Version 3 adds the stop fence of ``format("laminar")`` (docs/protocol.md §4, docs/formats.md)::

    laminar.stop_fence(group_id PK, epoch, fenced_at)   set by the data source's abort and
                        resolve_stopped, read by its tasks, lifted by the next run's writer
                        (deleted; from version 5 reserved for its tasks)

Version 4 adds the atomic groups' commit statistics, read by ``laminar exporter``
(docs/formats.md §3, docs/operations.md "Metrics and alerts")::

    laminar.commit_stats(group_id PK, commits, aborts, latency_sum_s, latency_buckets bigint[],
                         updated_at)   counted by the writer after each epoch (laminar._stats)

Version 5 lets the next run's writer reserve a stop fence for its own tasks instead of deleting
it (docs/protocol.md §4): a worker of the stopped run arriving after the restart's tasks writes
nothing::

    laminar.stop_fence  + writer (the reserving writer's token; NULL: not reserved)
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql

from laminar.errors import ConfigError

__all__ = [
    "MIGRATIONS",
    "SCHEMA",
    "SCHEMA_VERSION",
    "WRITER_PRIVILEGES",
    "Migration",
    "applied_version",
    "ensure_schema",
    "register_sink",
    "table",
]

log = logging.getLogger("laminar.metadata")

#: The schema that holds every laminar table.
SCHEMA = "laminar"

#: Key of the transaction-scoped advisory lock taken while migrating (the ASCII of "laminar\x01").
MIGRATION_LOCK_KEY = 0x6C616D696E617201


def table(name: str) -> sql.Identifier:
    """The quoted, schema-qualified name of a metadata table (``laminar.<name>``)."""
    return sql.Identifier(SCHEMA, name)


@dataclass(frozen=True)
class Migration:
    """One step of the metadata schema: applied once, in version order, in one transaction."""

    version: int
    description: str
    statements: tuple[sql.SQL | sql.Composed, ...]


_V1 = Migration(
    1,
    "sink registry (sinks) and the last committed epoch of each Postgres sink (sink_epochs)",
    (
        sql.SQL(
            "CREATE TABLE IF NOT EXISTS {sinks} ("
            " sink_id text PRIMARY KEY,"
            " kind text NOT NULL,"
            " owner text,"
            " generation bigint NOT NULL DEFAULT 0,"
            " config jsonb NOT NULL DEFAULT '{{}}'::jsonb,"
            " created_at timestamptz NOT NULL DEFAULT now(),"
            " updated_at timestamptz NOT NULL DEFAULT now())"
        ).format(sinks=table("sinks")),
        sql.SQL(
            "CREATE TABLE IF NOT EXISTS {sink_epochs} ("
            " sink_id text PRIMARY KEY,"
            " epoch bigint NOT NULL CHECK (epoch >= 0),"
            " committed_at timestamptz NOT NULL DEFAULT now(),"
            " rows bigint NOT NULL DEFAULT 0,"
            " bytes bigint NOT NULL DEFAULT 0)"
        ).format(sink_epochs=table("sink_epochs")),
        sql.SQL("COMMENT ON TABLE {} IS {}").format(
            table("sinks"),
            sql.Literal(
                "laminar: every sink id, its kind, owner query, fencing generation, config"
            ),
        ),
        sql.SQL("COMMENT ON TABLE {} IS {}").format(
            table("sink_epochs"),
            sql.Literal(
                "laminar: last epoch committed by each Postgres sink (docs/protocol.md §2)"
            ),
        ),
    ),
)

_V2 = Migration(
    2,
    "atomic groups: decision log (txn_state), redo log, distributed transactions (dt_state, "
    "dt_participant), epoch base and commit latency in sinks",
    (
        sql.SQL(
            "ALTER TABLE {sinks}"
            " ADD COLUMN IF NOT EXISTS epoch_base bigint NOT NULL DEFAULT 0,"
            " ADD COLUMN IF NOT EXISTS owner_since timestamptz,"
            " ADD COLUMN IF NOT EXISTS last_commit_ms double precision"
        ).format(sinks=table("sinks")),
        sql.SQL(
            "CREATE TABLE IF NOT EXISTS {t} ("
            " transactional_id text PRIMARY KEY,"
            " epoch bigint NOT NULL,"
            " previous_epoch bigint,"
            " prepared_state text NOT NULL,"
            " group_id text NOT NULL,"
            " decided_at timestamptz NOT NULL DEFAULT now())"
        ).format(t=table("txn_state")),
        sql.SQL(
            "CREATE TABLE IF NOT EXISTS {t} ("
            " transactional_id text NOT NULL,"
            " epoch bigint NOT NULL,"
            " seq integer NOT NULL,"
            " records bytea NOT NULL,"
            " PRIMARY KEY (transactional_id, epoch, seq))"
        ).format(t=table("redo")),
        sql.SQL(
            "CREATE TABLE IF NOT EXISTS {t} ("
            " dtid text PRIMARY KEY,"
            " group_id text NOT NULL,"
            " epoch bigint NOT NULL,"
            " state text NOT NULL CHECK (state IN ('prepare', 'commit', 'rollback')),"
            " created_at timestamptz NOT NULL DEFAULT now(),"
            " updated_at timestamptz NOT NULL DEFAULT now(),"
            " message text)"
        ).format(t=table("dt_state")),
        sql.SQL("CREATE INDEX IF NOT EXISTS dt_state_created_at ON {t} (created_at)").format(
            t=table("dt_state")
        ),
        sql.SQL(
            "CREATE TABLE IF NOT EXISTS {t} ("
            " dtid text NOT NULL REFERENCES {dt} (dtid) ON DELETE CASCADE,"
            " participant text NOT NULL,"
            " kind text NOT NULL,"
            " resource text NOT NULL,"
            " state text NOT NULL DEFAULT 'prepared',"
            " PRIMARY KEY (dtid, participant))"
        ).format(t=table("dt_participant"), dt=table("dt_state")),
        sql.SQL("CREATE INDEX IF NOT EXISTS dt_participant_resource ON {t} (resource)").format(
            t=table("dt_participant")
        ),
        sql.SQL("COMMENT ON TABLE {} IS {}").format(
            table("txn_state"),
            sql.Literal(
                "laminar: the decision of each Kafka sink of an atomic group (docs/protocol.md §3)"
            ),
        ),
        sql.SQL("COMMENT ON TABLE {} IS {}").format(
            table("redo"),
            sql.Literal("laminar: Kafka records of decided epochs, until Kafka committed them"),
        ),
        sql.SQL("COMMENT ON TABLE {} IS {}").format(
            table("dt_state"),
            sql.Literal("laminar: distributed transaction decisions (docs/protocol.md §4)"),
        ),
    ),
)

_V3 = Migration(
    3,
    "the stop fence of format('laminar'): a group whose stopped batch was resolved (stop_fence)",
    (
        sql.SQL(
            "CREATE TABLE IF NOT EXISTS {t} ("
            " group_id text PRIMARY KEY,"
            " epoch bigint NOT NULL,"
            " fenced_at timestamptz NOT NULL DEFAULT now())"
        ).format(t=table("stop_fence")),
        sql.SQL("COMMENT ON TABLE {} IS {}").format(
            table("stop_fence"),
            sql.Literal(
                "laminar: groups resolved by resolve_stopped; a task of a fenced epoch never "
                "creates its record (docs/protocol.md §4)"
            ),
        ),
    ),
)

_V4 = Migration(
    4,
    "commit statistics of the atomic groups (commit_stats): commits, aborts, commit latency",
    (
        sql.SQL(
            "CREATE TABLE IF NOT EXISTS {t} ("
            " group_id text PRIMARY KEY,"
            " commits bigint NOT NULL DEFAULT 0,"
            " aborts bigint NOT NULL DEFAULT 0,"
            " latency_sum_s double precision NOT NULL DEFAULT 0,"
            " latency_buckets bigint[] NOT NULL DEFAULT '{{}}',"
            " updated_at timestamptz NOT NULL DEFAULT now())"
        ).format(t=table("commit_stats")),
        sql.SQL("COMMENT ON TABLE {} IS {}").format(
            table("commit_stats"),
            sql.Literal(
                "laminar: each atomic group's commits, aborts and commit latency histogram "
                "(docs/formats.md §3), read by laminar exporter"
            ),
        ),
    ),
)

_V5 = Migration(
    5,
    "the stop fence reserved for the next run's writer (stop_fence.writer)",
    (
        sql.SQL("ALTER TABLE {t} ADD COLUMN IF NOT EXISTS writer text").format(
            t=table("stop_fence")
        ),
        sql.SQL("COMMENT ON COLUMN {}.writer IS {}").format(
            table("stop_fence"),
            sql.Literal(
                "laminar: the writer whose tasks may write the fenced epochs (set by the next "
                "run's writer; NULL: none yet) (docs/protocol.md §4)"
            ),
        ),
    ),
)

#: Every migration, in version order. Append new ones; never edit an applied one.
MIGRATIONS: tuple[Migration, ...] = (_V1, _V2, _V3, _V4, _V5)

#: The schema version this laminar writes.
SCHEMA_VERSION = MIGRATIONS[-1].version

#: What a writing role needs on each table, besides USAGE on the schema (docs/operations.md,
#: "Least privilege", lists and proves them): the schema's owner creates and migrates it, so a
#: writer needs no CREATE. ``laminar status`` and ``laminar exporter`` need SELECT only.
#: ``redo``: ``redo="log"``; ``commit_stats``: the exporter's commit metrics (best effort: a
#: writer without it warns once); ``dt_*``: scale-out; ``stop_fence``: ``format("laminar")``.
WRITER_PRIVILEGES: dict[str, tuple[str, ...]] = {
    "schema_version": ("SELECT",),
    "sinks": ("SELECT", "INSERT", "UPDATE"),
    "sink_epochs": ("SELECT", "INSERT", "UPDATE"),
    "txn_state": ("SELECT", "INSERT", "UPDATE"),
    "redo": ("SELECT", "INSERT", "DELETE"),
    "commit_stats": ("SELECT", "INSERT", "UPDATE"),
    "dt_state": ("SELECT", "INSERT", "UPDATE", "DELETE"),
    "dt_participant": ("SELECT", "INSERT", "UPDATE"),
    "stop_fence": ("SELECT", "INSERT", "UPDATE", "DELETE"),
}

_CREATE_SCHEMA_VERSION = sql.SQL(
    "CREATE TABLE IF NOT EXISTS {} ("
    " version integer PRIMARY KEY,"
    " applied_at timestamptz NOT NULL DEFAULT now(),"
    " description text NOT NULL)"
).format(table("schema_version"))


def _check_migrations(migrations: tuple[Migration, ...]) -> None:
    versions = [m.version for m in migrations]
    if versions != list(range(1, len(versions) + 1)):
        raise AssertionError(f"laminar migrations must be numbered 1, 2, 3, …: got {versions}")


_check_migrations(MIGRATIONS)


def applied_version(conn: psycopg.Connection[Any]) -> int | None:
    """The highest migration applied in this database, or None if the schema does not exist.

    Runs in the connection's current transaction (opening one if needed).
    """
    exists = conn.execute(
        "SELECT to_regclass(format('%%I.%%I', %s::text, 'schema_version')) IS NOT NULL", (SCHEMA,)
    ).fetchone()
    if not exists or not exists[0]:
        return None
    row = conn.execute(sql.SQL("SELECT max(version) FROM {}").format(table("schema_version")))
    found = row.fetchone()
    return None if found is None or found[0] is None else int(found[0])


def _refuse_newer(version: int, known: int, where: str) -> ConfigError:
    return ConfigError(
        f"the laminar metadata schema in {where} is at version {version}, written by a newer "
        f"laminar; this laminar knows versions up to {known}. Upgrade laminar (pip install -U "
        "laminar) in every process that writes to this database"
    )


def ensure_schema(
    conn: psycopg.Connection[Any],
    *,
    migrations: tuple[Migration, ...] = MIGRATIONS,
    where: str = "this database",
) -> int:
    """Create or upgrade the ``laminar`` schema; return the version now applied.

    Idempotent and safe against concurrent callers (other processes, other sinks): the check and
    the migrations run in one transaction under an advisory lock. ``conn`` must have no
    transaction open; it has none on return. ``where`` names the database in error messages
    (pass a redacted description). Raises `ConfigError` if the database holds a newer version.
    """
    _check_migrations(migrations)
    latest = migrations[-1].version
    if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
        raise AssertionError("ensure_schema() needs a connection with no transaction open")
    with conn.transaction():
        # Fast path: already at (or beyond) our version; no lock taken.
        current = applied_version(conn)
        if current is not None and current >= latest:
            if current > latest:
                raise _refuse_newer(current, latest, where)
            return current
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK_KEY,))
        has_schema = conn.execute(
            "SELECT 1 FROM pg_namespace WHERE nspname = %s", (SCHEMA,)
        ).fetchone()
        if has_schema is None:  # CREATE SCHEMA needs the CREATE privilege even with IF NOT EXISTS
            conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(SCHEMA)))
        conn.execute(_CREATE_SCHEMA_VERSION)
        rows = conn.execute(sql.SQL("SELECT version FROM {}").format(table("schema_version")))
        applied = {int(r[0]) for r in rows.fetchall()}
        newest = max(applied, default=0)
        if newest > latest:
            raise _refuse_newer(newest, latest, where)
        for migration in migrations:
            if migration.version in applied:
                continue
            for statement in migration.statements:
                conn.execute(statement)
            conn.execute(
                sql.SQL("INSERT INTO {} (version, description) VALUES (%s, %s)").format(
                    table("schema_version")
                ),
                (migration.version, migration.description),
            )
            log.info(
                "laminar metadata: applied migration %d (%s) in %s",
                migration.version,
                migration.description,
                where,
            )
    return latest


def register_sink(
    conn: psycopg.Connection[Any],
    sink_id: str,
    kind: str,
    config: Mapping[str, Any],
) -> dict[str, Any] | None:
    """Record ``sink_id`` in ``laminar.sinks`` with its kind and non-secret ``config``; return
    the config registered before (None for a new sink id).

    Runs in the connection's current transaction (the caller commits). A sink id already
    registered with another kind is a `ConfigError` (two different sinks would share epochs);
    a changed config is updated (``updated_at`` moves only then).
    """
    payload = json.dumps(dict(config), sort_keys=True)
    inserted = conn.execute(
        sql.SQL(
            "INSERT INTO {} (sink_id, kind, config) VALUES (%s, %s, %s::jsonb)"
            " ON CONFLICT (sink_id) DO NOTHING RETURNING 1"
        ).format(table("sinks")),
        (sink_id, kind, payload),
    ).fetchone()
    if inserted is not None:
        return None
    row = conn.execute(
        sql.SQL("SELECT kind, config FROM {} WHERE sink_id = %s").format(table("sinks")),
        (sink_id,),
    ).fetchone()
    if row is None:  # deleted meanwhile: nothing to compare with
        return None
    if row[0] != kind:
        raise ConfigError(
            f"sink id {sink_id!r} is already registered in laminar.sinks as a {row[0]!r} sink; "
            f"give this {kind} sink another sink_id"
        )
    conn.execute(
        sql.SQL(
            "UPDATE {} SET config = %s::jsonb, updated_at = now()"
            " WHERE sink_id = %s AND config IS DISTINCT FROM %s::jsonb"
        ).format(table("sinks")),
        (payload, sink_id, payload),
    )
    previous = row[1]
    return dict(previous) if isinstance(previous, dict) else None
