"""PostgresSink's upsert mode against append mode and against the hand-written upsert
foreachBatch users write today (report only, no gate).

    .venv/bin/pytest benches/bench_pg_upsert.py --benchmark-group-by=group \
        --benchmark-columns=min,median,mean,rounds -p no:cacheprovider

Groups:

- ``pg-upsert-throughput``: one epoch of ``LAMINAR_BENCH_UPSERT_ROWS`` rows (default 100,000;
  quick mode 20,000; the columns of bench_postgres.py, key ``id``), every key already in the
  table (each round replaces every row, as an update-mode aggregation that touches every key):

  - ``laminar_upsert``: ``PostgresSink(mode="upsert", key="id")`` through ``exactly_once``;
  - ``laminar_append``: ``PostgresSink`` in append mode (COPY only) into the same table without
    its primary key;
  - ``hand_upsert``: what users write in foreachBatch today (no exactly-once): ``CREATE TEMP
    TABLE … (LIKE target) ON COMMIT DROP``, psycopg's ``copy.write_row`` over ``to_pylist()``
    rows, ``INSERT … SELECT … ON CONFLICT (id) DO UPDATE``, ``COMMIT``.
- ``pg-upsert-latency``: one epoch of one row, upsert against append: the fixed cost of the
  staging table (CREATE UNLOGGED TABLE, INSERT … SELECT, DROP TABLE) per write.

The summary (rows/s, ratios, per-epoch overhead) is printed at the end and written to
``.benchmarks/pg_upsert_summary.json``. The embedded server runs with ``fsync=off``.
"""

from __future__ import annotations

import itertools
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pyarrow as pa
import pytest
from benches.report import report
from psycopg import sql

import laminar

sys.path.insert(0, str(Path(__file__).parent))
from serialize_data import PG_DDL, make_batch

QUICK = os.environ.get("LAMINAR_BENCH_QUICK") == "1"
ROWS = int(os.environ.get("LAMINAR_BENCH_UPSERT_ROWS", "20000" if QUICK else "100000"))
COLUMNS = ["id", "name", "amount", "ts", "flag", "score"]
KEYED_DDL = PG_DDL.replace("id int8", "id int8 PRIMARY KEY")
RESULTS: dict[str, dict[str, float]] = {}


def record(name: str, benchmark: Any, rows: int) -> None:
    stats = benchmark.stats.stats
    RESULTS[name] = {"rows": rows, "min_s": stats.min, "median_s": stats.median}


@pytest.fixture(scope="module", autouse=True)
def summary(pytestconfig: pytest.Config) -> Iterator[None]:
    yield
    lines = ["", "postgres upsert summary:"]
    for name, r in RESULTS.items():
        if name.startswith("latency_"):
            lines.append(f"  {name:<32} median {r['median_s'] * 1000:8.3f} ms")
        else:
            rate = r["rows"] / r["min_s"]
            lines.append(
                f"  {name:<32} {rate:>12,.0f} rows/s  ({r['rows']} rows, {r['min_s']:.3f} s)"
            )

    def ratio(label: str, slow: str, fast: str) -> None:
        if slow in RESULTS and fast in RESULTS:
            value = RESULTS[slow]["min_s"] / RESULTS[fast]["min_s"]
            lines.append(f"  ratio {label:<44} {value:8.2f}x")

    ratio("laminar upsert vs hand-written upsert", "hand_upsert", "laminar_upsert")
    ratio("laminar append vs laminar upsert", "laminar_upsert", "laminar_append")
    if "latency_upsert_epoch" in RESULTS and "latency_append_epoch" in RESULTS:
        extra = (
            RESULTS["latency_upsert_epoch"]["median_s"]
            - RESULTS["latency_append_epoch"]["median_s"]
        )
        lines.append(f"  upsert overhead per epoch (one row){'':<13} {extra * 1000:8.3f} ms")
    report(pytestconfig, lines, "pg_upsert_summary.json", RESULTS)


@pytest.fixture(scope="module")
def data() -> pa.Table:
    return make_batch(ROWS)


def make_table(dsn: str, name: str, ddl: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE TABLE {} " + ddl).format(sql.Identifier(name)))


@pytest.fixture
def keyed(pg_dsn: str, unique_name: Callable[[str], str]) -> Iterator[str]:
    name = unique_name("upsert")
    make_table(pg_dsn, name, KEYED_DDL)
    yield name
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP TABLE {}").format(sql.Identifier(name)))


@pytest.fixture
def plain(pg_dsn: str, unique_name: Callable[[str], str]) -> Iterator[str]:
    name = unique_name("append")
    make_table(pg_dsn, name, PG_DDL)
    yield name
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP TABLE {}").format(sql.Identifier(name)))


def epochs_of(sink: laminar.PostgresSink, rows: pa.Table) -> tuple[Callable[[], Any], Any]:
    writer = laminar.exactly_once(sink)
    epochs = itertools.count()
    assert writer.write_epoch(next(epochs), rows).committed  # the keys exist from here on
    return (lambda: writer.write_epoch(next(epochs), rows)), writer


# -- throughput ------------------------------------------------------------------------------------


@pytest.mark.benchmark(group="pg-upsert-throughput")
def bench_laminar_upsert(benchmark: Any, pg_dsn: str, keyed: str, data: pa.Table) -> None:
    epoch, writer = epochs_of(laminar.PostgresSink(pg_dsn, keyed, mode="upsert", key="id"), data)
    result = benchmark.pedantic(epoch, rounds=5, warmup_rounds=1)
    writer.close()
    assert result.committed
    record("laminar_upsert", benchmark, ROWS)


@pytest.mark.benchmark(group="pg-upsert-throughput")
def bench_laminar_append(benchmark: Any, pg_dsn: str, plain: str, data: pa.Table) -> None:
    epoch, writer = epochs_of(laminar.PostgresSink(pg_dsn, plain), data)
    result = benchmark.pedantic(epoch, rounds=5, warmup_rounds=1)
    writer.close()
    assert result.committed
    record("laminar_append", benchmark, ROWS)


@pytest.mark.benchmark(group="pg-upsert-throughput")
def bench_hand_upsert(benchmark: Any, pg_dsn: str, keyed: str, data: pa.Table) -> None:
    target = sql.Identifier(keyed)
    columns = sql.SQL(", ").join(map(sql.Identifier, COLUMNS))
    updates = sql.SQL(", ").join(
        sql.SQL("{c} = EXCLUDED.{c}").format(c=sql.Identifier(c)) for c in COLUMNS[1:]
    )
    create = sql.SQL("CREATE TEMP TABLE stage (LIKE {}) ON COMMIT DROP").format(target)
    copy = sql.SQL("COPY stage ({}) FROM STDIN").format(columns)
    merge = sql.SQL(
        "INSERT INTO {t} ({c}) SELECT {c} FROM stage ON CONFLICT (id) DO UPDATE SET {u}"
    ).format(t=target, c=columns, u=updates)

    with psycopg.connect(pg_dsn) as conn:

        def foreach_batch() -> None:
            rows = [tuple(r.values()) for r in data.to_pylist()]
            with conn.cursor() as cur:
                cur.execute(create)
                with cur.copy(copy) as out:
                    for row in rows:
                        out.write_row(row)
                cur.execute(merge)
            conn.commit()

        foreach_batch()
        benchmark.pedantic(foreach_batch, rounds=5, warmup_rounds=1)
        count = conn.execute(sql.SQL("SELECT count(*) FROM {}").format(target)).fetchone()
    assert count is not None
    assert count[0] == ROWS
    record("hand_upsert", benchmark, ROWS)


# -- fixed cost per epoch ------------------------------------------------------------------------


@pytest.mark.benchmark(group="pg-upsert-latency")
def bench_upsert_epoch(benchmark: Any, pg_dsn: str, keyed: str, data: pa.Table) -> None:
    sink = laminar.PostgresSink(pg_dsn, keyed, mode="upsert", key="id")
    epoch, writer = epochs_of(sink, data.slice(0, 1))
    benchmark.pedantic(epoch, rounds=200, warmup_rounds=10)
    writer.close()
    record("latency_upsert_epoch", benchmark, 1)


@pytest.mark.benchmark(group="pg-upsert-latency")
def bench_append_epoch(benchmark: Any, pg_dsn: str, plain: str, data: pa.Table) -> None:
    epoch, writer = epochs_of(laminar.PostgresSink(pg_dsn, plain), data.slice(0, 1))
    benchmark.pedantic(epoch, rounds=200, warmup_rounds=10)
    writer.close()
    record("latency_append_epoch", benchmark, 1)
