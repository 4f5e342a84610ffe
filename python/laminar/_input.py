"""What the public API accepts as an epoch and as a batch, checked (and materialised) in one place.

**Epochs** (`check_epoch`): Spark's batch id, an integer in ``0 .. 2**63 - 1`` (Kafka stores it as
an offset, PostgreSQL as a ``bigint``). Anything else is refused before a transaction opens: a
value that is not an integer (``5.0``, ``"7"``, ``None``, ``True``) is a `ConfigError`, an integer
out of range (``-1``, ``2**63``) a `DataError` — never a bare ``TypeError`` or ``OverflowError``,
and never ``True`` taken as epoch 1.

**Batches** (`materialize`): a pyarrow ``Table`` or ``RecordBatch`` is used as it is (zero-copy);
a one-shot stream — a ``RecordBatchReader``, or any object with ``__arrow_c_stream__`` (polars,
DuckDB, nanoarrow, …) — is read to the end **once**, into an Arrow ``Table``, and the reader is
closed; an object with only ``__arrow_c_array__`` is imported as a ``RecordBatch``. Every sink of
an atomic group and every retry of an epoch then see the same rows: a stream handed around as is
would be spent by its first reader and the others would see no rows (docs/serialization.md,
"Input"). The cost is memory: a stream is held whole while its epoch is written.

A ``RecordBatchReader`` that Laminar read before is refused with a `ConfigError`, so that a retry
of ``sink.write(reader)`` cannot silently write nothing. Other streams cannot be told apart from
objects that export a fresh stream each time (a polars DataFrame): Laminar remembers, weakly, how
many rows each one gave, and one that gave rows before and gives none now — a cursor-like stream
handed in again after a failed ``write_epoch`` — is refused the same way instead of committing an
empty epoch.

A **pandas DataFrame** is converted without its index, as Spark's ``createDataFrame`` and polars'
``from_pandas`` do: row labels (a filtered frame's 1, 3, 5, …) are not data. A *named* index
(``groupby(...).sum()``'s keys) is data a user means to write: it is refused with a `ConfigError`
that says to call ``reset_index()``, never dropped silently.

pyarrow is imported by the functions that take a batch, not with this module: Spark's commit
runner, a new Python process per query, imports the sinks but takes no batch, and pyarrow with
numpy is about 50-70 ms of a fresh process (docs/benchmarks.md).
"""

from __future__ import annotations

import operator
import weakref
from typing import TYPE_CHECKING, Any

from laminar._types import ArrowData
from laminar.errors import ConfigError, DataError

if TYPE_CHECKING:
    import pyarrow as pa  # type: ignore[import-untyped]

__all__ = ["MAX_EPOCH", "check_epoch", "materialize", "read_once"]

#: The largest epoch: Kafka's offsets and PostgreSQL's bigint are signed 64-bit integers.
MAX_EPOCH = 2**63 - 1


def check_epoch(epoch: object, *, sink_id: str | None = None, what: str = "epoch") -> int:
    """``epoch`` as an ``int`` in ``0 .. MAX_EPOCH``; `ConfigError` when it is not an integer,
    `DataError` when it is out of range (both name the value and its type)."""
    if isinstance(epoch, bool):
        index = None
    else:
        try:
            index = operator.index(epoch)  # type: ignore[arg-type]
        except TypeError:
            index = None
    if index is None:
        raise ConfigError(
            f"{what} must be an integer (Spark's batch id), not {epoch!r} ({type(epoch).__name__})",
            sink_id=sink_id,
        )
    if not 0 <= index <= MAX_EPOCH:
        raise DataError(
            f"{what} {index} is out of range: epochs are integers from 0 to 2**63 - 1 "
            f"({MAX_EPOCH})",
            sink_id=sink_id,
        )
    return index


def materialize(batch: ArrowData) -> pa.Table | pa.RecordBatch:
    """``batch`` as a pyarrow ``Table`` or ``RecordBatch`` that can be read any number of times
    (module doc). Raises `ConfigError` for what is not Arrow data (or a reader Laminar already
    read) and `DataError` when the stream fails while it is read."""
    import pyarrow as pa  # lazy: module doc

    if isinstance(batch, pa.Table | pa.RecordBatch):
        return batch
    if isinstance(batch, pa.RecordBatchReader):
        if batch in _SPENT:
            raise ConfigError(
                f"this {type(batch).__name__} was already read to the end (a stream can be "
                "read once; reading it again would give no rows): pass a pyarrow Table, or a "
                "new reader over the same data"
            )
        _SPENT.add(batch)
        return _read_stream(batch)
    if _is_pandas(batch):
        return _from_pandas(batch)
    if hasattr(batch, "__arrow_c_stream__"):
        try:
            reader = pa.RecordBatchReader.from_stream(batch)
        except (pa.ArrowException, TypeError, ValueError) as e:
            raise ConfigError(_not_a_table(batch, e)) from e
        table = _read_stream(reader)
        _check_not_spent(batch, table.num_rows)
        return table
    if hasattr(batch, "__arrow_c_array__"):
        try:
            return pa.record_batch(batch)
        except (pa.ArrowException, TypeError, ValueError) as e:
            raise ConfigError(_not_a_table(batch, e)) from e
    raise ConfigError(
        f"a batch must be a pyarrow Table, RecordBatch or RecordBatchReader (or export the Arrow "
        f"PyCapsule interface: __arrow_c_stream__ / __arrow_c_array__), not "
        f"{type(batch).__name__}; from Spark use DataFrame.toArrow()"
    )


def read_once(batch: ArrowData) -> ArrowData:
    """What the writer does with an epoch's batch before any sink sees it: Arrow data is
    `materialize`-d (a stream read once); anything else is handed on unchanged, for the sinks to
    accept or refuse (a sink of your own may take other objects)."""
    import pyarrow as pa  # lazy: module doc

    if isinstance(batch, pa.Table | pa.RecordBatch):
        return batch
    if (
        isinstance(batch, pa.RecordBatchReader)
        or _is_pandas(batch)
        or any(hasattr(batch, name) for name in ("__arrow_c_stream__", "__arrow_c_array__"))
    ):
        return materialize(batch)
    return batch


#: The pyarrow readers `materialize` read (weakly held): one handed in again is spent.
_SPENT: weakref.WeakSet[Any] = weakref.WeakSet()
#: Other ``__arrow_c_stream__`` objects `materialize` read, with the rows they gave (weakly held).
_ROWS_GIVEN: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()


def _check_not_spent(stream: object, rows: int) -> None:
    """Refuse a stream object that gave rows before and none now (module doc); remember what it
    gave. Objects that cannot be weakly referenced are not tracked."""
    try:
        before = _ROWS_GIVEN.get(stream)
        _ROWS_GIVEN[stream] = max(rows, before or 0)
    except TypeError:  # not weakly referenceable (or unhashable): cannot be told apart
        return
    if rows == 0 and before:
        raise ConfigError(
            f"this {type(stream).__name__} gave {before:,} row(s) when it was read before and "
            "none now: it is a one-shot stream already read to the end (by an earlier "
            "write_epoch or write that failed), and writing it again would commit an empty "
            "epoch; pass a new stream over the same data, or a pyarrow Table"
        )


def _is_pandas(batch: object) -> bool:
    return type(batch).__module__.startswith("pandas.") and type(batch).__name__ == "DataFrame"


def _from_pandas(frame: Any) -> pa.Table:
    """A pandas DataFrame as a Table without its row labels (module doc)."""
    import pyarrow as pa  # lazy: module doc

    named = [name for name in frame.index.names if name is not None]
    if named:
        raise ConfigError(
            f"the pandas DataFrame's index {named!r} is named, so it looks like data (a groupby's "
            "keys), but Laminar writes columns only: call df.reset_index() to write it as "
            "column(s), or df.reset_index(drop=True) to leave it out"
        )
    try:
        return pa.Table.from_pandas(frame, preserve_index=False)
    except (pa.ArrowException, TypeError, ValueError) as e:
        raise ConfigError(
            f"the pandas DataFrame cannot be converted to Arrow ({type(e).__name__}: {e}); "
            "give its columns Arrow-compatible dtypes"
        ) from e


def _read_stream(reader: Any) -> pa.Table:
    """Every batch of a one-shot stream, as one Table; the reader is closed afterwards."""
    try:
        return reader.read_all()
    except Exception as e:  # the producer's own error too (a generator, a database cursor)
        raise DataError(
            f"reading the batch's Arrow stream failed ({type(e).__name__}: {e}); nothing was "
            "written"
        ) from e
    finally:
        reader.close()


def _not_a_table(batch: object, error: BaseException) -> str:
    return (
        f"{type(batch).__name__} does not export a table (a stream or array of struct rows) "
        f"through the Arrow PyCapsule interface ({error}); pass a pyarrow Table or RecordBatch"
    )
