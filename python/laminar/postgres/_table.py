"""The target table as the catalog describes it (docs/postgres.md, "Columns and types" and
"Schema changes"): resolving the name, reading the columns (domains resolved to their base type)
and unique indexes (for upsert mode's key check), and — in every epoch's transaction — locking
the table and comparing its definition with the one the COPY plan was made for, so that a table
altered between epochs (a column, or a unique index) is read again, never written in its old
column types or against a key index that is gone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql

from laminar.errors import AbortableError, ConfigError
from laminar.postgres._names import TableName, render_identifier

__all__ = [
    "ColumnInfo",
    "TableInfo",
    "UniqueIndex",
    "current_table",
    "load_table",
    "lock_table",
]

_COPYABLE_KINDS = {"r": "table", "p": "partitioned table", "f": "foreign table"}
_RELKIND_NAMES = {
    "v": "view",
    "m": "materialized view",
    "S": "sequence",
    "c": "composite type",
    "i": "index",
    "I": "partitioned index",
    "t": "TOAST table",
}


@dataclass(frozen=True)
class ColumnInfo:
    """One column of the target table, as the catalog describes it (domains resolved)."""

    name: str
    #: ``pg_type.typname`` of the column's (base) type: ``int4``, ``varchar``, ``_text``…
    typname: str
    typmod: int
    #: The SQL spelling of the declared type, for messages (``character varying(10)``).
    type_display: str
    not_null: bool
    has_default: bool
    #: ``a`` (GENERATED ALWAYS AS IDENTITY), ``d`` (BY DEFAULT) or empty.
    identity: str
    #: ``s`` for a stored generated column, empty otherwise.
    generated: str

    @property
    def fills_itself(self) -> bool:
        """Whether the column gets a value when the batch has none for it."""
        return self.has_default or bool(self.identity) or bool(self.generated)


@dataclass(frozen=True)
class UniqueIndex:
    """A unique index (or the index behind a PRIMARY KEY / UNIQUE constraint) of the table."""

    name: str
    #: The key columns, in index order (``None`` for an expression).
    columns: tuple[str | None, ...]
    #: Empty when ``INSERT … ON CONFLICT (columns)`` can use it as its arbiter; otherwise why not
    #: (``partial``, ``expression``, ``deferrable``, ``not valid``).
    unusable: str = ""
    #: Per key column: the collation the index compares it under, ``(schema, name)``; None for
    #: a type without collations (upsert mode finds a batch's duplicate keys under it).
    collations: tuple[tuple[str, str] | None, ...] = ()
    #: Per key column: whether that collation is deterministic (values equal only when their
    #: bytes are; ICU collations created with ``deterministic = false`` are not).
    deterministic: tuple[bool, ...] = ()
    #: Per key column: the operator class, when its equality is not the one of the type's
    #: default btree operator class (None otherwise): upsert mode cannot reproduce it.
    other_equality: tuple[str | None, ...] = ()

    def describe(self) -> str:
        """``name (a, b)``, with why it cannot serve as a key when it cannot."""
        cols = ", ".join("<expression>" if c is None else c for c in self.columns)
        return f"{self.name} ({cols})" + (f" [{self.unusable}]" if self.unusable else "")


@dataclass(frozen=True)
class TableInfo:
    """The resolved target table."""

    oid: int
    schema: str
    name: str
    kind: str
    columns: tuple[ColumnInfo, ...]
    database: str
    can_insert: bool
    #: The columns' definition as the catalog holds it (`lock_table` compares it each epoch).
    fingerprint: str = ""
    #: The table's unique indexes (upsert mode's key must be the columns of a usable one).
    unique_indexes: tuple[UniqueIndex, ...] = ()

    @property
    def identifier(self) -> sql.Identifier:
        """The schema-qualified, quoted name for SQL."""
        return sql.Identifier(self.schema, self.name)

    @property
    def display(self) -> str:
        """``schema.table`` as SQL text, quoted where needed."""
        return f"{render_identifier(self.schema)}.{render_identifier(self.name)}"

    def column(self, name: str) -> ColumnInfo | None:
        """The column called exactly ``name``."""
        for column in self.columns:
            if column.name == name:
                return column
        return None


_COLUMNS_QUERY = """
SELECT a.attname, t.typname, a.atttypmod, format_type(a.atttypid, a.atttypmod),
       a.attnotnull, a.atthasdef, a.attidentity::text, a.attgenerated::text,
       t.typtype::text, t.typbasetype, t.typtypmod, t.typnotnull
FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid
WHERE a.attrelid = %s AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum
"""


# Every column attribute the COPY plan depends on, in one text value (ROW(...) text output quotes
# names, so distinct definitions give distinct text); with the table's oid, a recreated table of
# the same name differs too; and the unique indexes upsert mode's key check depends on (an index
# dropped or added between epochs changes it). `{}`: the relation (an oid, or to_regclass of its
# name).
_FINGERPRINT = (
    "SELECT c.oid::int8 || ':' || coalesce((SELECT array_agg(ROW(a.attnum, a.attname,"
    " a.atttypid, a.atttypmod, a.attnotnull, a.atthasdef, a.attidentity, a.attgenerated,"
    " a.attisdropped) ORDER BY a.attnum)::text FROM pg_attribute a"
    " WHERE a.attrelid = c.oid AND a.attnum > 0), '')"
    " || ':' || coalesce((SELECT array_agg(ROW(i.indexrelid, i.indkey, i.indnkeyatts,"
    " i.indimmediate, i.indisvalid, i.indpred IS NULL, i.indexprs IS NULL)"
    " ORDER BY i.indexrelid)::text FROM pg_index i"
    " WHERE i.indrelid = c.oid AND i.indisunique), '')"
    " FROM pg_class c WHERE c.oid = {}"
)

# The table's unique indexes: name, key columns in order (NULL for an expression), whether
# ON CONFLICT can infer it as the arbiter of a column list (not partial, no expression,
# immediate, valid), and per key column: its collation (schema, name and whether it is
# deterministic; NULL for a type without collations) and, when the column's operator class
# compares with another equality operator than its input type's default btree class, the
# class's name (text_pattern_ops keeps the default `=`; record_image_ops does not).
_UNIQUE_INDEXES_QUERY = """
SELECT x.relname, i.indpred IS NOT NULL, i.indexprs IS NOT NULL, NOT i.indimmediate,
       NOT i.indisvalid,
       array(SELECT a.attname FROM unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord)
             LEFT JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
             WHERE k.ord <= i.indnkeyatts ORDER BY k.ord),
       array(SELECT n.nspname FROM unnest(i.indcollation::oid[]) WITH ORDINALITY AS k(coll, ord)
             LEFT JOIN pg_collation c ON c.oid = k.coll
             LEFT JOIN pg_namespace n ON n.oid = c.collnamespace ORDER BY k.ord),
       array(SELECT c.collname FROM unnest(i.indcollation::oid[]) WITH ORDINALITY AS k(coll, ord)
             LEFT JOIN pg_collation c ON c.oid = k.coll ORDER BY k.ord),
       array(SELECT coalesce(c.collisdeterministic, true)
             FROM unnest(i.indcollation::oid[]) WITH ORDINALITY AS k(coll, ord)
             LEFT JOIN pg_collation c ON c.oid = k.coll ORDER BY k.ord),
       array(SELECT CASE WHEN o.opcdefault OR EXISTS (
                    SELECT 1 FROM pg_opclass d
                    JOIN pg_amop de ON de.amopfamily = d.opcfamily AND de.amopstrategy = 3
                     AND de.amoplefttype = d.opcintype AND de.amoprighttype = d.opcintype
                    JOIN pg_amop oe ON oe.amopfamily = o.opcfamily AND oe.amopstrategy = 3
                     AND oe.amoplefttype = o.opcintype AND oe.amoprighttype = o.opcintype
                    WHERE d.opcmethod = o.opcmethod AND d.opcintype = o.opcintype
                      AND d.opcdefault AND de.amopopr = oe.amopopr)
                  THEN NULL ELSE format('%%I.%%I', cn.nspname, o.opcname) END
             FROM unnest(i.indclass::oid[]) WITH ORDINALITY AS k(cls, ord)
             JOIN pg_opclass o ON o.oid = k.cls
             JOIN pg_namespace cn ON cn.oid = o.opcnamespace ORDER BY k.ord)
FROM pg_index i JOIN pg_class x ON x.oid = i.indexrelid
WHERE i.indrelid = %s AND i.indisunique
ORDER BY i.indisprimary DESC, x.relname
"""


def load_table(conn: psycopg.Connection[Any], name: TableName, where: str) -> TableInfo:
    """Resolve ``name`` (through ``search_path`` when unqualified) and read its columns.

    ``where`` describes the database for messages (a redacted DSN). Raises `ConfigError` naming
    the table and database when it does not exist or is not a table COPY can write.
    """
    if name.schema is None:
        regclass = sql.SQL("to_regclass(quote_ident(%s))")
        params: tuple[str, ...] = (name.name,)
    else:
        regclass = sql.SQL("to_regclass(format('%%I.%%I', %s::text, %s::text))")
        params = (name.schema, name.name)
    row = conn.execute(
        sql.SQL(
            "SELECT c.oid, n.nspname, c.relname, c.relkind::text,"
            " has_table_privilege(c.oid, 'INSERT'), current_database()"
            " FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE c.oid = {}"
        ).format(regclass),
        params,
    ).fetchone()
    if row is None:
        raise ConfigError(_missing_table_message(conn, name, where))
    oid, schema, relname, relkind, can_insert, database = row
    if relkind not in _COPYABLE_KINDS:
        kind = _RELKIND_NAMES.get(relkind, f"relation of kind {relkind!r}")
        raise ConfigError(
            f"{render_identifier(schema)}.{render_identifier(relname)} in {where} is a {kind}, "
            "not a table: PostgresSink writes rows into a table"
        )
    columns = []
    for (
        attname,
        typname,
        typmod,
        display,
        notnull,
        hasdef,
        ident,
        gen,
        typtype,
        base,
        btm,
        tnn,
    ) in conn.execute(_COLUMNS_QUERY, (oid,)).fetchall():
        if typtype == "d":  # a domain: COPY BINARY takes the base type's format
            typname, typmod, domain_not_null = _domain_base(conn, base, btm)
            notnull = notnull or tnn or domain_not_null
        columns.append(
            ColumnInfo(
                name=attname,
                typname=typname,
                typmod=int(typmod),
                type_display=display,
                not_null=bool(notnull),
                has_default=bool(hasdef),
                identity=ident or "",
                generated=gen or "",
            )
        )
    fingerprint = conn.execute(sql.SQL(_FINGERPRINT).format(sql.Literal(int(oid)))).fetchone()
    unique_indexes = []
    for (
        index_name,
        partial,
        expression,
        deferrable,
        invalid,
        names,
        coll_schemas,
        coll_names,
        deterministic,
        other_equality,
    ) in conn.execute(_UNIQUE_INDEXES_QUERY, (oid,)).fetchall():
        flags = (
            ("partial", partial),
            ("expression", expression),
            ("deferrable", deferrable),
            ("not valid", invalid),
        )
        unique_indexes.append(
            UniqueIndex(
                name=index_name,
                columns=tuple(names),
                unusable=", ".join(label for label, on in flags if on),
                collations=tuple(
                    None if name is None else (schema, name)
                    for schema, name in zip(coll_schemas, coll_names, strict=True)
                ),
                deterministic=tuple(bool(d) for d in deterministic),
                other_equality=tuple(other_equality),
            )
        )
    return TableInfo(
        oid=int(oid),
        schema=schema,
        name=relname,
        kind=relkind,
        columns=tuple(columns),
        database=database,
        can_insert=bool(can_insert),
        fingerprint=str(fingerprint[0]) if fingerprint else "",
        unique_indexes=tuple(unique_indexes),
    )


def lock_table(conn: psycopg.Connection[Any], table: TableInfo) -> str | None:
    """Take ``table``'s ``ROW EXCLUSIVE`` lock in the current transaction and read its columns'
    fingerprint (None: no table of that name any more); one round trip.

    ``ALTER TABLE`` needs ``ACCESS EXCLUSIVE``, which conflicts: from here until the transaction
    ends, the definition read is the one COPY writes into. (Foreign tables cannot be locked; their
    definition is read all the same.)
    """
    read = sql.SQL(_FINGERPRINT).format(
        sql.SQL("to_regclass({})").format(sql.Literal(table.display))
    )
    if table.kind == "f":
        row = conn.execute(read).fetchone()
        return None if row is None else str(row[0])
    lock = sql.SQL("LOCK TABLE {} IN ROW EXCLUSIVE MODE").format(table.identifier)
    with conn.cursor() as cur:
        # No parameters: both statements go in one simple-protocol message.
        cur.execute(sql.Composed([lock, sql.SQL("; "), read]))
        cur.nextset()
        row = cur.fetchone()
    return None if row is None else str(row[0])


def current_table(
    conn: psycopg.Connection[Any], cached: TableInfo | None, name: TableName, where: str
) -> TableInfo:
    """The target table as the current transaction will write it (docs/postgres.md, "Schema
    changes"): locked by `lock_table` and compared with ``cached``, which is returned when the
    definition is unchanged; otherwise (or without a cache) read again under the lock."""
    if cached is not None and lock_table(conn, cached) == cached.fingerprint:
        return cached
    fresh = load_table(conn, name, where)
    if lock_table(conn, fresh) != fresh.fingerprint:
        raise AbortableError(
            f"table {fresh.display} in {where} changed while it was being read; the epoch is "
            "written again"
        )
    return fresh


def _domain_base(conn: psycopg.Connection[Any], base: int, typmod: int) -> tuple[str, int, bool]:
    not_null = False
    for _ in range(32):  # domains over domains; PostgreSQL has no cycles here
        row = conn.execute(
            "SELECT typname, typtype::text, typbasetype, typtypmod, typnotnull FROM pg_type"
            " WHERE oid = %s",
            (base,),
        ).fetchone()
        if row is None:
            break
        typname, typtype, next_base, next_typmod, typnotnull = row
        not_null = not_null or bool(typnotnull)
        if typtype != "d":
            return typname, typmod, not_null
        base, typmod = next_base, (typmod if typmod != -1 else next_typmod)
    raise ConfigError(f"cannot resolve the base type of domain type oid {base}")


def _missing_table_message(conn: psycopg.Connection[Any], name: TableName, where: str) -> str:
    message = f"table {name.display()} does not exist in {where}"
    if name.schema is None:
        path = conn.execute("SELECT current_setting('search_path')").fetchone()
        message += f" (searched search_path: {path[0] if path else '?'})"
    similar = conn.execute(
        "SELECT n.nspname, c.relname FROM pg_class c"
        " JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE lower(c.relname) = lower(%s) AND c.relkind IN ('r', 'p', 'f')"
        " AND n.nspname NOT IN ('pg_catalog', 'information_schema')"
        " ORDER BY 1, 2 LIMIT 5",
        (name.name,),
    ).fetchall()
    if similar:
        names = ", ".join(f"{render_identifier(s)}.{render_identifier(t)}" for s, t in similar)
        message += (
            f"; similar tables: {names} (table names are case-sensitive inside double quotes)"
        )
    else:
        message += "; create it first (PostgresSink does not create tables)"
    return message
