"""The Postgres sink's protocol steps, each a function of a given connection (docs/protocol.md §2).

Every step runs in the connection's *current* transaction and never commits, so a coordinator can
run the steps of several Postgres sinks — and its own decision rows — in ONE database transaction
when they share a database::

    claimed = claim_epoch(conn, sink_id, epoch)     # first: row lock before any data moves
    if claimed:
        rows, nbytes = copy_batch(conn, table, plan, batch)
        record_epoch_totals(conn, sink_id, rows, nbytes)
    conn.commit()                                    # or prepare_transaction(conn, gid)

Catalog reads (`load_table`, and `current_table` in each epoch's transaction: both in
`laminar.postgres._table`, re-exported here) and column planning (`plan_copy`) check everything
that can be checked before a row is sent. The two-phase helpers (`prepare_transaction`,
`commit_prepared`, `rollback_prepared`, `list_prepared`) implement the participant side of §4.
"""

from __future__ import annotations

import datetime as dt
import functools
import itertools
import re
from collections.abc import Iterator, Mapping, Sequence
from contextlib import closing
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import sql

from laminar._core import check_pg_copy_schema, iter_pg_copy
from laminar._faults import crash_point
from laminar._input import materialize
from laminar.engine.records import claim_epoch, committed_epoch, record_epoch_totals
from laminar.errors import ConfigError, DataError, LaminarError
from laminar.postgres._encode_ahead import encode_ahead
from laminar.postgres._names import GID_PREFIX, parse_gid
from laminar.postgres._table import (
    ColumnInfo,
    TableInfo,
    current_table,
    load_table,
    lock_table,
)

if TYPE_CHECKING:
    import pyarrow as pa  # type: ignore[import-untyped]

__all__ = [
    "DEFAULT_SLICE_BYTES",
    "ColumnInfo",
    "CopyPlan",
    "PreparedTransaction",
    "TableInfo",
    "as_arrow",
    "claim_epoch",
    "commit_prepared",
    "committed_epoch",
    "copy_batch",
    "current_table",
    "list_prepared",
    "load_table",
    "lock_table",
    "plan_copy",
    "prepare_transaction",
    "record_epoch_totals",
    "rollback_prepared",
]

#: Arrow bytes encoded (and sent) per COPY statement; bigger batches stream in several.
DEFAULT_SLICE_BYTES = 64 << 20

# -- the epoch marker -----------------------------------------------------------------------------


# laminar.sink_epochs (`claim_epoch`, `record_epoch_totals`, `committed_epoch`): imported above
# from `laminar.engine.records`, the one home of the laminar schema's statements.

# -- mapping Arrow columns onto table columns ------------------------------------------------------


@dataclass(frozen=True)
class CopyPlan:
    """How a batch of one Arrow schema is written: which Arrow column feeds which table column."""

    source_columns: tuple[str, ...]
    targets: tuple[ColumnInfo, ...]
    statement: sql.Composed
    #: Arrow columns of type null (Spark's NullType, ``lit(None)``), cast to a type their target
    #: accepts before encoding: their values are all NULL whatever the type.
    null_casts: tuple[tuple[str, pa.DataType], ...] = ()

    def cast_nulls(self, data: pa.Table | pa.RecordBatch) -> pa.Table | pa.RecordBatch:
        """``data`` with its null-typed columns given their target-compatible type."""
        import pyarrow as pa  # lazy: see _arrow_for_pg

        for name, arrow_type in self.null_casts:
            index = data.schema.get_field_index(name)
            data = data.set_column(index, name, pa.nulls(data.num_rows, arrow_type))
        return data

    @property
    def core_columns(self) -> list[tuple[str, str, int]]:
        """The targets as the core's encoder takes them: ``(name, typname, typmod)``."""
        return [(c.name, c.typname, c.typmod) for c in self.targets]


def _type_list(table: TableInfo) -> str:
    return ", ".join(f"{c.name} ({c.type_display})" for c in table.columns)


def _resolve_column(
    table: TableInfo, wanted: str, source: str, arrow_type: pa.DataType
) -> ColumnInfo:
    exact = table.column(wanted)
    if exact is not None:
        return exact
    folded = [c for c in table.columns if c.name.casefold() == wanted.casefold()]
    if len(folded) == 1:
        return folded[0]
    via = "" if wanted == source else f" (mapped from Arrow column {source!r})"
    if len(folded) > 1:
        names = ", ".join(repr(c.name) for c in folded)
        raise ConfigError(
            f"table {table.display}: column {wanted!r}{via} matches several columns ignoring "
            f"case ({names}); name the exact column with columns={{...}}"
        )
    raise ConfigError(
        f"table {table.display} has no column {wanted!r} for Arrow column {source!r} of type "
        f"{arrow_type}{via}; its columns are: {_type_list(table)}. Rename the column, map it "
        "with columns={arrow_name: column_name} or drop it from the batch"
    )


def plan_copy(
    table: TableInfo,
    schema: pa.Schema,
    columns: Sequence[str] | Mapping[str, str] | None,
) -> CopyPlan:
    """Map every Arrow column of ``schema`` onto a column of ``table`` and check the types.

    ``columns``: None (same names), a list (the target column of each Arrow column, in order) or a
    mapping Arrow name → column name (unmapped Arrow columns keep their name). A name matches
    exactly or, failing that, ignoring case when only one column does (as Spark's JDBC writer).
    Raises `ConfigError` naming the table, the column and both types, before any row is sent.
    """
    import pyarrow as pa  # lazy: see _arrow_for_pg

    names = list(schema.names)
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ConfigError(
            f"table {table.display}: the batch has several Arrow columns named {duplicates}; "
            "rename them (e.g. with DataFrame.toDF) before writing"
        )
    if not names:
        raise ConfigError(f"table {table.display}: the batch has no columns")
    if columns is None:
        wanted = names
    elif isinstance(columns, Mapping):
        unknown = sorted(set(columns) - set(names))
        if unknown:
            raise ConfigError(
                f"table {table.display}: columns= maps Arrow columns {unknown} that are not in "
                f"the batch (its columns: {names})"
            )
        wanted = [str(columns.get(n, n)) for n in names]
    else:
        if isinstance(columns, str) or len(columns) != len(names):
            raise ConfigError(
                f"table {table.display}: columns= lists {len(columns)} target columns for a "
                f"batch of {len(names)} Arrow columns {names}; give one target per Arrow column, "
                "in order (or a mapping {arrow_name: column_name})"
            )
        wanted = [str(c) for c in columns]
    targets: list[ColumnInfo] = []
    seen: dict[str, str] = {}
    for source, target_name in zip(names, wanted, strict=True):
        target = _resolve_column(table, target_name, source, schema.field(source).type)
        if target.name in seen:
            raise ConfigError(
                f"table {table.display}: Arrow columns {seen[target.name]!r} and {source!r} "
                f"both map to column {target.name!r}"
            )
        if target.generated:
            raise ConfigError(
                f"table {table.display}: column {target.name!r} is a generated column "
                f"(GENERATED ALWAYS AS … STORED) and cannot be written; drop Arrow column "
                f"{source!r} from the batch"
            )
        if target.identity == "a":
            # INSERT refuses a value here (without OVERRIDING SYSTEM VALUE); COPY does not check,
            # so refusing is up to us: the column's sequence would hand out the same ids again.
            raise ConfigError(
                f"table {table.display}: column {target.name!r} is GENERATED ALWAYS AS IDENTITY "
                f"and cannot be written (PostgreSQL numbers it); drop Arrow column {source!r} "
                "from the batch, or make the column GENERATED BY DEFAULT AS IDENTITY"
            )
        seen[target.name] = source
        targets.append(target)
    missing = [c for c in table.columns if c.name not in seen and c.not_null and not c.fills_itself]
    if missing:
        listed = ", ".join(f"{c.name!r} ({c.type_display})" for c in missing)
        raise ConfigError(
            f"table {table.display}: column(s) {listed} are NOT NULL without a default and the "
            f"batch has no column for them (batch columns: {names})"
        )
    null_casts = []
    for index, (source, target) in enumerate(zip(names, targets, strict=True)):
        if pa.types.is_null(schema.field(source).type):
            arrow_type = _arrow_type_for(target.typname)
            if arrow_type is not None:
                null_casts.append((source, arrow_type))
                schema = schema.set(index, pa.field(source, arrow_type))
    core_columns = [(c.name, c.typname, c.typmod) for c in targets]
    try:
        check_pg_copy_schema(schema, core_columns, source_columns=names)
    except ConfigError as e:
        hint = "".join(
            f" (table column {t.name!r} is {t.type_display}; Arrow column {src!r} is "
            f"{schema.field(src).type})"
            for src, t in zip(names, targets, strict=True)
            if f"column '{t.name}'" in e.message
        )[:1000]
        raise ConfigError(f"table {table.display}: {e.message}{hint}") from e
    statement = sql.SQL("COPY {} ({}) FROM STDIN (FORMAT BINARY)").format(
        table.identifier, sql.SQL(", ").join(sql.Identifier(c.name) for c in targets)
    )
    return CopyPlan(tuple(names), tuple(targets), statement, tuple(null_casts))


@functools.cache
def _arrow_for_pg() -> dict[str, pa.DataType]:
    """The Arrow type the encoder accepts for each PostgreSQL type name. Built on first use, as
    pyarrow is imported where it is used in this module: a process that only commits or rolls
    back prepared transactions (Spark's commit runner, a new one per query) never imports it
    (about 50-70 ms of a fresh process: docs/benchmarks.md)."""
    import pyarrow as pa  # lazy: see the docstring

    return {
        "bool": pa.bool_(),
        "int2": pa.int16(),
        "int4": pa.int32(),
        "int8": pa.int64(),
        "float4": pa.float32(),
        "float8": pa.float64(),
        "numeric": pa.int64(),
        "text": pa.string(),
        "varchar": pa.string(),
        "bpchar": pa.string(),
        "json": pa.string(),
        "jsonb": pa.string(),
        "uuid": pa.string(),
        "bytea": pa.binary(),
        "date": pa.date32(),
        "time": pa.time64("us"),
        "timestamp": pa.timestamp("us"),
        "timestamptz": pa.timestamp("us", tz="UTC"),
    }


def _arrow_type_for(typname: str) -> pa.DataType | None:
    """An Arrow type the encoder accepts for PostgreSQL type ``typname`` (None: unsupported)."""
    import pyarrow as pa  # lazy: see _arrow_for_pg

    if typname.startswith("_"):
        element = _arrow_for_pg().get(typname[1:])
        return None if element is None else pa.list_(element)
    return _arrow_for_pg().get(typname)


# -- writing a batch ------------------------------------------------------------------------------


def as_arrow(batch: Any) -> pa.Table | pa.RecordBatch:
    """A pyarrow Table or RecordBatch for any accepted input (`laminar._input.materialize`: a
    stream is read once, to the end)."""
    return materialize(batch)


def first_null_row(column: pa.Array | pa.ChunkedArray) -> int:
    """The index of ``column``'s first null, for an error that names it. `pyarrow.compute` is
    imported here, on that error's path only: importing it costs a fresh process 30 ms on a
    quiet machine (about 75 ms under load), and the processes that never meet a null (Spark's
    commit runner, a task's writer) need none of it."""
    import pyarrow.compute as pc  # type: ignore[import-untyped]

    return int(pc.index(pc.is_null(column), True).as_py())


def check_not_null(table: TableInfo, plan: CopyPlan, data: pa.Table | pa.RecordBatch) -> None:
    """`DataError` naming the column and row of the first null bound for a NOT NULL column."""
    for source, target in zip(plan.source_columns, plan.targets, strict=True):
        if not target.not_null:
            continue
        column = data.column(source)
        if column.null_count:
            row = first_null_row(column)
            raise DataError(
                f"table {table.display}: column {target.name!r} is NOT NULL but Arrow column "
                f"{source!r} is null at row {row}; nothing was written"
            )


_ROW_IN_MESSAGE = re.compile(r"\brow (\d+)")


def _shift_row(message: str, offset: int) -> str:
    """The core counts rows within the slice it encoded; count them over the whole batch."""
    if not offset:
        return message
    return _ROW_IN_MESSAGE.sub(lambda m: f"row {int(m[1]) + offset}", message, count=1)


def _slices(data: pa.Table | pa.RecordBatch, slice_bytes: int) -> list[tuple[int, Any]]:
    rows = data.num_rows
    if rows == 0:
        return []
    per_row = max(1, data.nbytes // rows)
    step = max(1024, slice_bytes // per_row)
    if step >= rows:
        return [(0, data)]
    return [(start, data.slice(start, step)) for start in range(0, rows, step)]


class _ValueRefusedError(Exception):
    """Ends a COPY whose stream reached a value that does not fit: psycopg sends this message
    (not the value) to the server with the CopyFail, and `copy_batch` raises the `DataError`."""

    def __init__(self, error: DataError) -> None:
        super().__init__("a value did not fit its column; COPY abandoned by the client")
        self.error = error


#: A slice whose Arrow data is at least this big is encoded ahead on a worker thread (its COPY
#: stream is more than one chunk of about 1 MiB); a smaller one has nothing to overlap.
_OVERLAP_BYTES = 1 << 20


def _send(copy: psycopg.Copy, chunks: Iterator[bytes]) -> None:
    try:
        for chunk in chunks:
            copy.write(chunk)
            crash_point("postgres.mid_copy")
    except DataError as e:
        raise _ValueRefusedError(e) from None


def copy_batch(
    conn: psycopg.Connection[Any],
    table: TableInfo,
    plan: CopyPlan,
    data: pa.Table | pa.RecordBatch,
    *,
    slice_bytes: int = DEFAULT_SLICE_BYTES,
) -> tuple[int, int]:
    """COPY ``data`` into ``table`` following ``plan``; return (rows, bytes) sent.

    Rows are encoded by the core (GIL released) in chunks of about 1 MiB, and the chunk after
    the one being sent is encoded meanwhile on a worker thread (`encode_ahead`: the encoding
    overlaps the server's work, memory stays at two chunks). A batch whose Arrow data is larger
    than ``slice_bytes`` is sent slice by slice, one COPY per slice. A value that does not fit is
    a `DataError` naming the table, column and row (counted over the whole batch); the first
    chunk is encoded before the COPY starts, so in a batch of one chunk nothing is sent, and a
    later bad value ends the COPY before it completes (the caller rolls the transaction back, as
    after any error).
    """
    check_not_null(table, plan, data)
    data = plan.cast_nulls(data)
    core_columns = plan.core_columns
    rows = nbytes = 0
    for offset, piece in _slices(data, slice_bytes):
        try:
            stream = iter_pg_copy(piece, core_columns, source_columns=plan.source_columns)
            with closing(encode_ahead(stream, overlap=piece.nbytes >= _OVERLAP_BYTES)) as chunks:
                first = next(chunks)  # encoded before the COPY starts
                with conn.cursor() as cur, cur.copy(plan.statement) as copy:
                    _send(copy, itertools.chain((first,), chunks))
        except (DataError, _ValueRefusedError) as e:
            error = e.error if isinstance(e, _ValueRefusedError) else e
            message = _shift_row(error.message, offset)
            sent = "" if offset == 0 else f" ({offset} earlier rows were sent, not committed)"
            raise DataError(f"table {table.display}: {message}{sent}") from error
        except ConfigError as e:
            raise ConfigError(f"table {table.display}: {e.message}") from e
        rows += stream.num_rows
        nbytes += stream.total_bytes
    return rows, nbytes


# -- two-phase commit (participants) ---------------------------------------------------------------


@dataclass(frozen=True)
class PreparedTransaction:
    """A prepared transaction laminar left in ``pg_prepared_xacts`` (gid format: _pg_names)."""

    gid: str
    #: The sink id, or None when the gid holds a hashed (over-long) sink id.
    sink_id: str | None
    epoch: int
    part: int
    prepared_at: dt.datetime
    age_s: float
    owner: str
    database: str


def prepare_transaction(conn: psycopg.Connection[Any], gid: str) -> None:
    """End the connection's transaction with ``PREPARE TRANSACTION gid``."""
    conn.execute(sql.SQL("PREPARE TRANSACTION {}").format(sql.Literal(gid)))


def _outside_transaction(conn: psycopg.Connection[Any], statement: sql.Composed) -> bool:
    """Run a statement that refuses transaction blocks; False if the gid does not exist."""
    if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
        raise LaminarError("COMMIT/ROLLBACK PREPARED needs a connection with no transaction open")
    previous = conn.autocommit
    conn.autocommit = True
    try:
        conn.execute(statement)
        return True
    except psycopg.errors.UndefinedObject:
        return False
    finally:
        if not conn.closed:
            conn.autocommit = previous


def commit_prepared(conn: psycopg.Connection[Any], gid: str) -> bool:
    """``COMMIT PREPARED gid``; False if no such prepared transaction exists (already resolved)."""
    return _outside_transaction(conn, sql.SQL("COMMIT PREPARED {}").format(sql.Literal(gid)))


def rollback_prepared(conn: psycopg.Connection[Any], gid: str) -> bool:
    """``ROLLBACK PREPARED gid``; False if no such prepared transaction exists."""
    return _outside_transaction(conn, sql.SQL("ROLLBACK PREPARED {}").format(sql.Literal(gid)))


def list_prepared(
    conn: psycopg.Connection[Any], prefix: str = GID_PREFIX
) -> list[PreparedTransaction]:
    """Laminar's prepared transactions in the connection's database whose gid starts with
    ``prefix`` (default: every laminar gid), oldest first, with their age."""
    rows = conn.execute(
        "SELECT gid, prepared, owner, database, extract(epoch FROM clock_timestamp() - prepared)"
        " FROM pg_prepared_xacts"
        " WHERE database = current_database() AND starts_with(gid, %s)"
        " ORDER BY prepared, gid",
        (prefix,),
    ).fetchall()
    found = []
    for gid, prepared, owner, database, age in rows:
        parsed = parse_gid(gid)
        if parsed is None:
            continue
        found.append(
            PreparedTransaction(
                gid=gid,
                sink_id=parsed.sink_id,
                epoch=parsed.epoch,
                part=parsed.part,
                prepared_at=prepared,
                age_s=float(age),
                owner=owner,
                database=database,
            )
        )
    return found
