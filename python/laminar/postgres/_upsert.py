"""PostgresSink's upsert mode (docs/postgres.md, "Upsert mode"): the options, the key checks and
the statements that replace rows by key inside the epoch's transaction.

Per `write` call, in the epoch's transaction (after the epoch claim, before the totals)::

    CREATE UNLOGGED TABLE IF NOT EXISTS laminar."upsert_stage_<hash>" (<columns>, <ordinal> int8)
                                   -- only when missing, on a side connection, committed at once
    COPY laminar."upsert_stage_<hash>" (…) FROM STDIN (FORMAT BINARY)   -- the same encoder
    INSERT INTO <table> AS t (<columns>)
      SELECT DISTINCT ON (<key> COLLATE <c>) <columns> FROM <stage>
      ORDER BY <key> COLLATE <c>, <ordinal> DESC
      ON CONFLICT (<key>) DO UPDATE SET <column> = EXCLUDED.<column>, …   -- DO NOTHING: key only
    DELETE FROM laminar."upsert_stage_<hash>"

Why these choices:

- A staging table that is *kept and reused*, one per sink id, partition and column layout
  (``<hash>``: SHA-256 of the three), *unlogged* (its rows are written to no WAL), in the
  ``laminar`` schema. Not ``CREATE TEMP TABLE … ON COMMIT DROP``: PostgreSQL refuses ``PREPARE
  TRANSACTION`` in a transaction that touched a temporary table, and a PostgresSink's transaction
  may end with a prepare (scale-out partitions, a two-phase coordinator). Not created and dropped
  per epoch either: that costs about ten times more per write (catalog rows, an init fork; ≈ 5 ms
  against ≈ 0.5 ms measured on a loopback server). Sharing it is safe by MVCC: a transaction
  sees only its own uncommitted staging rows and deletes them before it ends, so no staging row
  is ever committed, concurrent writers never see each other's rows, and a crash or rollback
  leaves nothing behind (dead rows, for autovacuum). The table is created, when missing, in a
  transaction of its own that commits at once: created inside the epoch's transaction, it would
  stay locked (and invisible) as long as that transaction — a prepared one, until its decision.
- ``INSERT … ON CONFLICT`` rather than ``MERGE``: its arbiter is exactly the unique index the key
  is checked against, and it is atomic under concurrent inserts, where PostgreSQL 15's ``MERGE``
  can fail with a unique violation.
- Duplicate keys in one batch: the last row (by position in the batch) wins, deterministically;
  ``ON CONFLICT DO UPDATE`` cannot touch a row twice in one statement, hence ``DISTINCT ON`` —
  under ``<c>``, the collation the key's unique index compares with (`upsert_key`): the staging
  table's columns have their type's default collation, and a nondeterministic one (ICU,
  case-insensitive, …) makes keys one that the stage would keep apart.
- A null in a key column is a `DataError`: NULL never conflicts in a unique index, so such a row
  would be appended instead of replacing one.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import sql

from laminar.errors import AuthorizationError, ConfigError, DataError
from laminar.metadata import SCHEMA as META_SCHEMA
from laminar.postgres._names import render_identifier
from laminar.postgres._steps import (
    DEFAULT_SLICE_BYTES,
    ColumnInfo,
    CopyPlan,
    copy_batch,
    first_null_row,
)
from laminar.postgres._table import TableInfo, UniqueIndex

if TYPE_CHECKING:
    import pyarrow as pa  # type: ignore[import-untyped]

__all__ = [
    "MODES",
    "UpsertKey",
    "check_key_in_plan",
    "check_privileges",
    "parse_mode",
    "resolve_key",
    "upsert_batch",
    "upsert_key",
]

#: The values of ``PostgresSink(mode=...)``.
MODES = ("append", "upsert")


def parse_mode(mode: object, key: object) -> tuple[str, tuple[str, ...] | None]:
    """Check ``mode=`` and ``key=`` together; return the mode and the key columns (None in
    append mode). `ConfigError` naming the option and the fix for a bad combination."""
    if mode not in MODES:
        raise ConfigError(
            f"mode= must be 'append' (COPY every row) or 'upsert' (replace rows by key=), not "
            f"{mode!r}"
        )
    if key is None:
        if mode == "upsert":
            raise ConfigError(
                "mode='upsert' needs key= the column(s) of a unique index or primary key of the "
                "table, e.g. key='id' or key=['window_start', 'user_id']"
            )
        return str(mode), None
    if mode != "upsert":
        raise ConfigError(
            f"key={key!r} is only used with mode='upsert'; pass mode='upsert' to replace rows by "
            "key, or drop key= to append"
        )
    names = [key] if isinstance(key, str) else key
    if isinstance(names, bytes) or not isinstance(names, Sequence) or not names:
        raise ConfigError(
            f"key= must be a column name or a non-empty list of column names, not {key!r}"
        )
    for name in names:
        if not isinstance(name, str) or not name:
            raise ConfigError(f"key= lists column names (non-empty strings); got {name!r}")
    if len(set(names)) != len(names):
        raise ConfigError(f"key= names a column twice: {list(names)}")
    return "upsert", tuple(names)


@dataclass(frozen=True)
class UpsertKey:
    """The upsert key as the table's unique indexes define it."""

    #: The key's columns as the table names them, in the order given.
    columns: tuple[str, ...]
    #: Per column: the collation two of a batch's keys are compared under to find duplicates,
    #: ``(schema, name)`` — the one of the indexes ``ON CONFLICT`` arbitrates with; None for a
    #: type without collations.
    collations: tuple[tuple[str, str] | None, ...]


def resolve_key(table: TableInfo, key: Sequence[str]) -> tuple[str, ...]:
    """The key's columns as the table names them, checked as `upsert_key` does."""
    return upsert_key(table, key).columns


def upsert_key(table: TableInfo, key: Sequence[str]) -> UpsertKey:
    """The key's columns as the table names them (exact, else the only one equal ignoring case),
    checked to be exactly the columns of a unique index ON CONFLICT can use (any order; not
    partial, no expression, not deferrable), with the collation each is compared under
    (`_arbiter_collation`). `ConfigError` naming the table, the key and the unique indexes the
    table has; or naming the column whose equality cannot be reproduced."""
    resolved = []
    for name in key:
        column = table.column(name)
        if column is None:
            folded = [c for c in table.columns if c.name.casefold() == name.casefold()]
            column = folded[0] if len(folded) == 1 else None
        if column is None:
            listed = ", ".join(c.name for c in table.columns)
            raise ConfigError(
                f"table {table.display}: key column {name!r} is not a column of the table (its "
                f"columns: {listed}); pass key= the columns of one of its unique indexes"
            )
        resolved.append(column.name)
    wanted = set(resolved)
    # ON CONFLICT (<key>) arbitrates with every usable unique index on exactly these columns
    arbiters = [
        index
        for index in table.unique_indexes
        if not index.unusable and set(index.columns) == wanted and len(index.columns) == len(wanted)
    ]
    if arbiters:
        return UpsertKey(
            tuple(resolved),
            tuple(_arbiter_collation(table, arbiters, name) for name in resolved),
        )
    indexes = "; ".join(i.describe() for i in table.unique_indexes) or "none"
    columns = ", ".join(render_identifier(c) for c in resolved)
    raise ConfigError(
        f"table {table.display}: upsert key ({columns}) is not the column set of a unique index "
        f"or constraint of the table (its unique indexes: {indexes}). Create one — e.g. ALTER "
        f"TABLE {table.display} ADD UNIQUE ({columns}) — or pass key= the columns of an existing "
        "one (a partial, expression or deferrable index cannot be ON CONFLICT's arbiter)"
    )


def _arbiter_collation(
    table: TableInfo, arbiters: Sequence[UniqueIndex], column: str
) -> tuple[str, str] | None:
    """The collation under which ``column``'s values are one key for the ``arbiters`` (the
    unique indexes ON CONFLICT uses for the key): the batch's duplicate keys are found under it,
    so that ``DISTINCT ON`` keeps one row of each key exactly as the indexes see keys. A
    deterministic collation compares bytes, so any of them gives the same keys; a
    nondeterministic one (ICU, ``deterministic = false``: case- or accent-insensitive, ignoring
    punctuation, Unicode-canonical) joins more values into one key, and wins. `ConfigError`
    naming the column when the indexes' equality cannot be reproduced: an operator class whose
    equality is not the type's default, or two different nondeterministic collations."""
    seen: list[tuple[UniqueIndex, tuple[str, str] | None, bool]] = []
    for index in arbiters:
        at = index.columns.index(column)
        other = index.other_equality[at] if at < len(index.other_equality) else None
        if other is not None:
            raise ConfigError(
                f"table {table.display}: upsert key column {column!r} is compared by unique "
                f"index {index.name} with operator class {other}, whose equality is not the "
                "type's default; a batch's duplicate keys are found with the default one, which "
                "could join keys the index keeps apart. Key the table on a unique index with the "
                f"column's default operator class (e.g. ALTER TABLE {table.display} ADD UNIQUE "
                f"({render_identifier(column)}))"
            )
        collation = index.collations[at] if at < len(index.collations) else None
        deterministic = index.deterministic[at] if at < len(index.deterministic) else True
        seen.append((index, collation, deterministic))
    loose = {c for _, c, deterministic in seen if c is not None and not deterministic}
    if len(loose) > 1:
        listed = "; ".join(f"{index.name}: collation {_collation_sql(c)}" for index, c, _ in seen)
        raise ConfigError(
            f"table {table.display}: upsert key column {column!r} is compared under different "
            f"nondeterministic collations by the unique indexes ON CONFLICT uses together for "
            f"the key ({listed}): two values one index takes for the same key and the other "
            "does not cannot be kept as one row. Drop all but one of these indexes"
        )
    if loose:
        return loose.pop()
    return next((c for _, c, _ in seen if c is not None), None)


def _collation_sql(collation: tuple[str, str] | None) -> str:
    return "none" if collation is None else ".".join(map(render_identifier, collation))


def check_privileges(conn: psycopg.Connection[Any], table: TableInfo, role: str) -> None:
    """`AuthorizationError` unless the session may UPDATE ``table`` (ON CONFLICT DO UPDATE) and
    create its staging table in the ``laminar`` schema. ``role`` names the session in messages."""
    row = conn.execute(
        "SELECT has_table_privilege(%s, 'UPDATE'), has_schema_privilege(%s, 'CREATE')",
        (table.oid, META_SCHEMA),
    ).fetchone()
    can_update, can_create = row if row is not None else (False, False)
    if not can_update:
        raise AuthorizationError(
            f"upsert mode: the role of {role} may not UPDATE {table.display} (ON CONFLICT DO "
            f"UPDATE replaces rows): GRANT UPDATE ON {table.display} TO <role>"
        )
    if not can_create:
        raise AuthorizationError(
            f"upsert mode: the role of {role} may not create its staging table in schema "
            f"{META_SCHEMA}: GRANT CREATE ON SCHEMA {META_SCHEMA} TO <role>"
        )


def check_key_in_plan(table: TableInfo, plan: CopyPlan, key: Sequence[str]) -> None:
    """`ConfigError` unless every key column receives an Arrow column of the batch."""
    written = {t.name for t in plan.targets}
    missing = [name for name in resolve_key(table, key) if name not in written]
    if missing:
        raise ConfigError(
            f"table {table.display}: upsert key column(s) {missing} are not in the batch (its "
            f"columns: {list(plan.source_columns)}); every row needs its key — add the column or "
            "map it with columns="
        )


def _free_name(base: str, taken: set[str]) -> str:
    name = base
    while name in taken:
        name += "_"
    return name


def _check_keys_not_null(
    table: TableInfo, plan: CopyPlan, data: pa.Table | pa.RecordBatch, key: Sequence[str]
) -> None:
    for source, target in zip(plan.source_columns, plan.targets, strict=True):
        if target.name not in key:
            continue
        column = data.column(source)
        if column.null_count:
            row = first_null_row(column)
            raise DataError(
                f"table {table.display}: upsert key column {target.name!r} (Arrow column "
                f"{source!r}) is null at row {row}: a NULL key matches no row, so it cannot be "
                "upserted; nothing was written"
            )


def upsert_batch(
    conn: psycopg.Connection[Any],
    table: TableInfo,
    plan: CopyPlan,
    data: pa.Table | pa.RecordBatch,
    key: Sequence[str],
    *,
    stage_id: str,
    create_stage: Callable[[sql.Composed], None],
    slice_bytes: int = DEFAULT_SLICE_BYTES,
) -> tuple[int, int]:
    """Upsert ``data`` into ``table`` by ``key`` (the module's statements, in the connection's
    current transaction); return (rows, bytes) sent, as `copy_batch` does. ``stage_id`` names the
    writer (sink id and partition): with the column layout, it chooses the staging table;
    ``create_stage`` runs the staging table's CREATE in a transaction of its own, committed at
    once (module doc)."""
    if data.num_rows == 0:
        return 0, 0
    arbiter = upsert_key(table, key)
    key = arbiter.columns
    _check_keys_not_null(table, plan, data, key)
    ordinal = _free_name("laminar_ordinal", {t.name for t in plan.targets})
    layout = "\0".join(f"{t.name}\0{t.type_display}" for t in plan.targets)
    digest = hashlib.sha256(f"{stage_id}\0{layout}\0{ordinal}".encode()).hexdigest()[:32]
    name = f"upsert_stage_{digest}"
    stage = sql.Identifier(META_SCHEMA, name)
    source = _free_name("laminar_ordinal", set(plan.source_columns))
    columns = sql.SQL(", ").join(sql.Identifier(t.name) for t in plan.targets)
    keys = sql.SQL(", ").join(sql.Identifier(k) for k in key)
    # the batch's duplicate keys, found under the collations the arbiter indexes compare with
    distinct = sql.SQL(", ").join(
        sql.Identifier(k)
        if collation is None
        else sql.SQL("{} COLLATE {}").format(sql.Identifier(k), sql.Identifier(*collation))
        for k, collation in zip(key, arbiter.collations, strict=True)
    )
    definitions = sql.SQL(", ").join(
        sql.SQL("{} {}").format(sql.Identifier(t.name), sql.SQL(t.type_display))
        for t in plan.targets
    )
    found = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (f"{META_SCHEMA}.{name}",))
    row = found.fetchone()
    if row is None or not row[0]:
        create_stage(
            sql.SQL("CREATE UNLOGGED TABLE IF NOT EXISTS {} ({}, {} int8 NOT NULL)").format(
                stage, definitions, sql.Identifier(ordinal)
            )
        )
    ordinal_column = ColumnInfo(ordinal, "int8", -1, "bigint", True, False, "", "")
    stage_plan = CopyPlan(
        (*plan.source_columns, source),
        (*plan.targets, ordinal_column),
        sql.SQL("COPY {} ({}, {}) FROM STDIN (FORMAT BINARY)").format(
            stage, columns, sql.Identifier(ordinal)
        ),
        plan.null_casts,
    )
    import pyarrow as pa  # lazy: as in _steps

    numbered = data.append_column(source, pa.array(range(data.num_rows), pa.int64()))
    rows, nbytes = copy_batch(conn, table, stage_plan, numbered, slice_bytes=slice_bytes)
    updates = [
        sql.SQL("{} = EXCLUDED.{}").format(sql.Identifier(t.name), sql.Identifier(t.name))
        for t in plan.targets
        if t.name not in key
    ]
    action = (
        sql.SQL("DO UPDATE SET {}").format(sql.SQL(", ").join(updates))
        if updates
        else sql.SQL("DO NOTHING")
    )
    try:
        conn.execute(
            sql.SQL(
                "INSERT INTO {table} AS t ({columns}) SELECT DISTINCT ON ({distinct}) {columns}"
                " FROM {stage} ORDER BY {distinct}, {ordinal} DESC ON CONFLICT ({keys}) {action}"
            ).format(
                table=table.identifier,
                columns=columns,
                distinct=distinct,
                keys=keys,
                stage=stage,
                ordinal=sql.Identifier(ordinal),
                action=action,
            )
        )
    except psycopg.errors.CardinalityViolation as e:
        # cannot affect row a second time: two rows DISTINCT ON kept apart are one key for the
        # arbiter — a BEFORE INSERT trigger that changes the key, say
        shown = ", ".join(render_identifier(k) for k in key)
        raise DataError(
            f"table {table.display}: two rows of the batch with different keys became the same "
            f"key ({shown}) for the table's unique index (a trigger that changes the key?), so "
            f"neither can replace the other; nothing was written ({' '.join(str(e).split())})"
        ) from e
    conn.execute(sql.SQL("DELETE FROM {}").format(stage))
    return rows, nbytes
