"""Shared helpers of the data-integrity tests (issue 11; not a test module): every input kind the
API accepts, faults injected at a protocol step, and the stores read back exactly."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

import psycopg
import pyarrow as pa
import pytest
from psycopg import sql

from laminar.errors import AbortableError
from tests.integration.kafka_fill import settled_committed as read_committed
from tests.integration.pg_helpers import backend_pids, terminate, wait_for

ROWS = 7


def epoch_rows(epoch: int) -> pa.Table:
    """The epoch's rows: ids unique across epochs, a nullable text (nulls at the first row and
    mid-batch) and a float."""
    ids = [epoch * 1000 + i for i in range(ROWS)]
    names = [None if i % 4 == 0 else f"n-{epoch}-{i}" for i in range(ROWS)]
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "name": pa.array(names, pa.string()),
            "amount": pa.array([i / 4 for i in ids], pa.float64()),
        }
    )


class OneShotStream:
    """An object that exports its rows once through ``__arrow_c_stream__`` (like a database
    cursor's result): a second export yields nothing."""

    def __init__(self, table: pa.Table) -> None:
        self._reader = pa.RecordBatchReader.from_batches(table.schema, table.to_batches(3))

    def __arrow_c_stream__(self, requested_schema: Any = None) -> Any:
        return self._reader.__arrow_c_stream__(requested_schema)


class ArrayExport:
    """An object that exports a record batch through ``__arrow_c_array__`` only."""

    def __init__(self, table: pa.Table) -> None:
        self._batch = table.combine_chunks().to_batches()[0]

    def __arrow_c_array__(self, requested_schema: Any = None) -> Any:
        return self._batch.__arrow_c_array__(requested_schema)


def _sliced(table: pa.Table) -> pa.Table:
    schema = table.schema
    padding = pa.table({f.name: pa.nulls(3, f.type) for f in schema})
    return pa.concat_tables([padding, table, padding]).combine_chunks().slice(3, table.num_rows)


def _dictionary(table: pa.Table) -> pa.Table:
    index = table.schema.get_field_index("name")
    return table.set_column(index, "name", pa.compute.dictionary_encode(table["name"]))


#: Every kind of input ``write_epoch`` accepts, built from the epoch's rows.
INPUT_KINDS: dict[str, Callable[[pa.Table], Any]] = {
    "table": lambda t: t,
    "record_batch": lambda t: t.combine_chunks().to_batches()[0],
    "reader": lambda t: pa.RecordBatchReader.from_batches(t.schema, t.to_batches(3)),
    "chunked": lambda t: pa.Table.from_batches(t.to_batches(2)),
    "sliced": _sliced,
    "dictionary": _dictionary,
    "capsule_stream": OneShotStream,
    "capsule_array": ArrayExport,
}


def create_rows_table(dsn: str, name: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL("CREATE TABLE {} (id bigint PRIMARY KEY, name text, amount float8)").format(
                sql.Identifier(name)
            )
        )


def pg_rows(dsn: str, table: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(
            sql.SQL("SELECT id, name, amount FROM {} ORDER BY id").format(sql.Identifier(table))
        ).fetchall()


def kafka_rows(bootstrap: str, topic: str, sink_id: str) -> list[tuple[Any, ...]]:
    """The sink's committed records (control batches replayed by laminar.kafka.log), as
    ``(id, name, amount)`` sorted by id; each key must be the id's text."""
    out = []
    for record in read_committed(bootstrap, topic):
        if record.header("laminar.sink") != sink_id.encode():
            continue
        value = json.loads(record.value or b"null")
        assert record.key == str(value["id"]).encode()
        out.append((value["id"], value["name"], value["amount"]))
    return sorted(out)


def as_rows(tables: list[pa.Table]) -> list[tuple[Any, ...]]:
    rows = [tuple(r.values()) for t in tables for r in t.to_pylist()]
    return sorted(rows, key=lambda r: r[0])


class Faults:
    """``at(point, action)``: run ``action`` the next time a sink reaches crash point ``point``
    (instead of the SIGKILL of ``laminar._faults``)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.actions: dict[str, list[Callable[[], None]]] = {}
        # every sink module that reaches a crash point (the sinks are split over several)
        for name, module in list(sys.modules.items()):
            if name.startswith(("laminar.kafka", "laminar.postgres")) and hasattr(
                module, "crash_point"
            ):
                monkeypatch.setattr(module, "crash_point", self._hook)

    def _hook(self, name: str) -> None:
        pending = self.actions.get(name)
        if pending:
            pending.pop(0)()

    def at(self, point: str, action: Callable[[], None]) -> None:
        self.actions.setdefault(point, []).append(action)


def terminate_backend(dsn: str, application_name: str) -> Callable[[], None]:
    """An action that terminates the backend of the connection named ``application_name``
    (a real server-side fault: the session and its transaction are gone)."""

    def action() -> None:
        pids = backend_pids(dsn, application_name[:63])
        assert pids, f"no backend named {application_name!r}"
        for pid in pids:
            terminate(dsn, pid)
        wait_for(lambda: not backend_pids(dsn, application_name[:63]), what="backend exit")

    return action


def raise_abortable(point: str) -> Callable[[], None]:
    def action() -> None:
        raise AbortableError(f"injected at {point}: the epoch is aborted and retried")

    return action
