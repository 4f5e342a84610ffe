"""``format("laminar")``'s upsert options (issue 29) at the data source's entry points, without
Spark (`laminar.spark.source`: the tasks' `write_task`, the driver's `commit_batch` and
`abort_batch`) against a real PostgreSQL: the tasks upsert as two-phase participants and the
decision makes their rows the table's; the key checks of upsert mode apply in the tasks before
anything is written; and a key two partitions of one batch write is refused in the second task,
after which Spark's ``abort`` leaves nothing behind."""

from __future__ import annotations

from typing import Any

import psycopg
import pyarrow as pa  # type: ignore[import-untyped]
import pytest

from laminar.errors import ConfigError, DataError
from laminar.spark.options import parse_options
from laminar.spark.source import abort_batch, commit_batch, write_task
from tests.integration.datasource_helpers import OWNER, VAR

pytestmark = pytest.mark.integration


@pytest.fixture
def setup(
    clean_prepared_xacts: str, table_name: str, monkeypatch: pytest.MonkeyPatch
) -> dict[str, Any]:
    monkeypatch.setenv(VAR, clean_prepared_xacts)
    with psycopg.connect(clean_prepared_xacts, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table_name} (id bigint PRIMARY KEY, name text)")
    raw = {
        "postgres.dsn.env": VAR,
        "postgres.table": table_name,
        "postgres.mode": "upsert",
        "postgres.key": "id",
        "laminar.check.servers": "false",
    }
    return {"raw": raw, "dsn": clean_prepared_xacts, "table": table_name}


def rows(ids: list[int], name: str) -> list[pa.RecordBatch]:
    return [pa.record_batch({"id": ids, "name": [f"{name}{i}" for i in ids]})]


def table_and_leftovers(s: dict[str, Any]) -> tuple[list[tuple[int, str]], list[Any]]:
    with psycopg.connect(s["dsn"]) as conn:
        found = conn.execute(f"SELECT id, name FROM {s['table']} ORDER BY id").fetchall()
        left = conn.execute(
            "SELECT gid FROM pg_prepared_xacts WHERE gid LIKE %(t)s"
            " UNION ALL SELECT dtid FROM laminar.dt_state WHERE dtid LIKE %(t)s",
            {"t": f"%{s['table']}%"},
        ).fetchall()
    return [(int(i), str(n)) for i, n in found], left


def test_the_tasks_upsert_their_partitions_and_the_decision_commits_them(
    setup: dict[str, Any],
) -> None:
    options = parse_options(setup["raw"])
    for batch, name in ((0, "a"), (1, "b")):  # batch 1 replaces ids 1..3, keeps 0 and 4
        ids = [[0, 1], [2, 4]] if batch == 0 else [[1], [2, 3]]
        messages = [
            write_task(options, batch, OWNER, p, iter(rows(ids[p], name)), attempt=f"0-{p}")
            for p in (0, 1)
        ]
        assert {r.status for m in messages for r in m.results} == {"prepared"}
        assert commit_batch(options, messages, batch)
    assert table_and_leftovers(setup) == (
        [(0, "a0"), (1, "b1"), (2, "b2"), (3, "b3"), (4, "a4")],
        [],
    )


def test_the_key_checks_of_upsert_mode_apply_in_the_task(setup: dict[str, Any]) -> None:
    options = parse_options({**setup["raw"], "postgres.key": "name"})  # no unique index
    with pytest.raises(ConfigError, match=r"upsert key \(name\) is not the column set of a"):
        write_task(options, 0, OWNER, 0, iter(rows([1], "x")), attempt="0-0")
    abort_batch(options, [None], 0)  # Spark's abort of the failed batch: the record it created
    assert table_and_leftovers(setup) == ([], [])


def test_a_key_in_two_partitions_of_a_batch_is_refused_then_aborted(
    setup: dict[str, Any],
) -> None:
    options = parse_options(setup["raw"])
    first = write_task(options, 0, OWNER, 0, iter(rows([1, 2], "p")), attempt="0-0")
    with pytest.raises(DataError, match="partition 1 of epoch 0 waits for a row that partition 0"):
        write_task(options, 0, OWNER, 1, iter(rows([2, 3], "q")), attempt="0-1")
    abort_batch(options, [first, None], 0)  # Spark's abort of the failed batch
    assert table_and_leftovers(setup) == ([], [])
