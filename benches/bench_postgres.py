"""PostgresSink benchmarks, side by side with what users write today.

    .venv/bin/pytest benches/bench_postgres.py --benchmark-group-by=group \
        --benchmark-columns=min,median,mean,rounds -p no:cacheprovider

Groups:

- ``pg-epoch-latency``: one exactly-once epoch of one row (claim, COPY, totals, COMMIT) against
  the smallest transactions on the same server: an empty ``BEGIN; COMMIT`` and a one-row INSERT
  (goal: an epoch costs at most 2 ms more than a bare COMMIT). Also the two-phase variant
  (PREPARE TRANSACTION + COMMIT PREPARED).
- ``pg-throughput``: one epoch of ``LAMINAR_BENCH_PG_ROWS`` rows (default 200,000; int8, text,
  numeric(18,2), timestamptz, bool, float8) through the sink, against psycopg's
  ``copy.write_row`` loop over ``to_pylist()`` rows (goal: 3x) and ``executemany`` INSERTs
  (goal: 10x; ``LAMINAR_BENCH_PG_EXEC_ROWS`` rows, default 20,000, compared per row).
- ``pg-spark``: the same rows as a cached Spark DataFrame on an embedded Spark Connect server
  started with Debian's JDBC driver (``/usr/share/java/postgresql.jar``): Spark's own
  ``df.write.jdbc`` (plain and with ``reWriteBatchedInserts=true``) against the laminar writer
  called as foreachBatch calls it (``toArrow`` + epoch). ``LAMINAR_BENCH_SPARK=0`` leaves it out.

A summary (rows/s, ratios, latency overhead) is printed at the end and written to
``.benchmarks/postgres_summary.json``. The embedded server runs with ``fsync=off``: commit
latencies are CPU and round-trip costs, not disk flushes.
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
from psycopg.conninfo import conninfo_to_dict

import laminar

sys.path.insert(0, str(Path(__file__).parent))
from serialize_data import PG_DDL, make_batch

# ``./dev test`` sets LAMINAR_BENCH_QUICK=1: smaller batches, same comparisons.
QUICK = os.environ.get("LAMINAR_BENCH_QUICK") == "1"
ROWS = int(os.environ.get("LAMINAR_BENCH_PG_ROWS", "50000" if QUICK else "200000"))
EXEC_ROWS = int(os.environ.get("LAMINAR_BENCH_PG_EXEC_ROWS", "5000" if QUICK else "20000"))
WITH_SPARK = os.environ.get("LAMINAR_BENCH_SPARK", "1") != "0"
JDBC_JAR = Path(os.environ.get("LAMINAR_JDBC_JAR", "/usr/share/java/postgresql.jar"))
COLUMNS = "id, name, amount, ts, flag, score"
RESULTS: dict[str, dict[str, float]] = {}


def record(name: str, benchmark: Any, rows: int) -> None:
    stats = benchmark.stats.stats
    RESULTS[name] = {
        "rows": rows,
        "min_s": stats.min,
        "median_s": stats.median,
        "mean_s": stats.mean,
        "rounds": stats.rounds,
    }


@pytest.fixture(scope="module", autouse=True)
def summary(pytestconfig: pytest.Config) -> Iterator[None]:
    yield
    lines = ["", "postgres sink summary:"]
    for name, r in RESULTS.items():
        if name.startswith("latency_"):
            lines.append(f"  {name:<36} median {r['median_s'] * 1000:8.3f} ms")
        else:
            rate = r["rows"] / r["min_s"]
            lines.append(
                f"  {name:<36} {rate:>12,.0f} rows/s  ({r['rows']} rows, {r['min_s']:.3f} s)"
            )

    def ratio(label: str, slow: str, fast: str) -> None:
        if slow in RESULTS and fast in RESULTS:
            per_row_slow = RESULTS[slow]["min_s"] / RESULTS[slow]["rows"]
            per_row_fast = RESULTS[fast]["min_s"] / RESULTS[fast]["rows"]
            lines.append(f"  ratio {label:<48} {per_row_slow / per_row_fast:8.1f}x")

    def overhead(label: str, base: str, epoch: str) -> None:
        if base in RESULTS and epoch in RESULTS:
            extra = (RESULTS[epoch]["median_s"] - RESULTS[base]["median_s"]) * 1000
            lines.append(f"  overhead {label:<45} {extra:8.3f} ms (goal <= 2 ms)")

    overhead("epoch vs empty BEGIN;COMMIT", "latency_empty_commit", "latency_laminar_epoch")
    overhead("epoch vs one-row INSERT+COMMIT", "latency_insert_commit", "latency_laminar_epoch")
    ratio("laminar vs copy.write_row(to_pylist) (goal 3x)", "write_row", "laminar")
    ratio("laminar vs executemany INSERT (goal 10x)", "executemany", "laminar")
    ratio("laminar foreachBatch vs Spark JDBC", "spark_jdbc", "spark_laminar")
    ratio("laminar foreachBatch vs Spark JDBC (rewrite)", "spark_jdbc_rewrite", "spark_laminar")
    report(pytestconfig, lines, "postgres_summary.json", RESULTS)


@pytest.fixture(scope="module")
def data() -> pa.Table:
    return make_batch(ROWS)


@pytest.fixture
def target(pg_dsn: str, unique_name: Callable[[str], str]) -> Iterator[str]:
    name = unique_name("bench")
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE TABLE {} " + PG_DDL).format(sql.Identifier(name)))
        yield name
        conn.execute(sql.SQL("DROP TABLE {}").format(sql.Identifier(name)))


@pytest.fixture
def conn(pg_dsn: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(pg_dsn) as connection:
        yield connection


def truncate(conn: psycopg.Connection[Any], table: str) -> None:
    conn.execute(sql.SQL("TRUNCATE {}").format(sql.Identifier(table)))
    conn.commit()


# -- latency per epoch ----------------------------------------------------------------------------


@pytest.mark.benchmark(group="pg-epoch-latency")
def bench_empty_commit(benchmark: Any, conn: psycopg.Connection[Any]) -> None:
    def empty() -> None:
        with conn.transaction():
            pass

    benchmark.pedantic(empty, rounds=300, warmup_rounds=20)
    record("latency_empty_commit", benchmark, 1)


@pytest.mark.benchmark(group="pg-epoch-latency")
def bench_insert_commit(
    benchmark: Any, conn: psycopg.Connection[Any], target: str, data: pa.Table
) -> None:
    row = tuple(data.slice(0, 1).to_pylist()[0].values())
    insert = sql.SQL("INSERT INTO {} VALUES (%s, %s, %s, %s, %s, %s)").format(
        sql.Identifier(target)
    )

    def one_row() -> None:
        conn.execute(insert, row)
        conn.commit()

    benchmark.pedantic(one_row, rounds=300, warmup_rounds=20)
    record("latency_insert_commit", benchmark, 1)


@pytest.mark.benchmark(group="pg-epoch-latency")
def bench_laminar_epoch(benchmark: Any, pg_dsn: str, target: str, data: pa.Table) -> None:
    one = data.slice(0, 1)
    sink = laminar.PostgresSink(pg_dsn, target)
    writer = laminar.exactly_once(sink)
    epochs = itertools.count()
    writer.write_epoch(next(epochs), one)

    def epoch() -> laminar.EpochResult:
        return writer.write_epoch(next(epochs), one)

    result = benchmark.pedantic(epoch, rounds=300, warmup_rounds=20)
    assert result.committed
    record("latency_laminar_epoch", benchmark, 1)
    metrics = sink.metrics
    RESULTS["latency_laminar_commit_only"] = {
        "rows": 1,
        "min_s": 0.0,
        "median_s": metrics.p50_commit_latency_us / 1e6,
        "mean_s": metrics.avg_commit_latency_us / 1e6,
        "rounds": metrics.commits,
    }
    writer.close()


@pytest.mark.benchmark(group="pg-epoch-latency")
def bench_laminar_epoch_two_phase(
    benchmark: Any, clean_prepared_xacts: str, target: str, data: pa.Table
) -> None:
    one = data.slice(0, 1)
    sink = laminar.PostgresSink(clean_prepared_xacts, target, sink_id=f"{target}-2pc")
    epochs = itertools.count()

    def epoch() -> None:
        e = next(epochs)
        sink.begin_transaction(e)
        sink.write(one)
        sink.prepare_transaction()
        sink.commit_transaction(e)

    benchmark.pedantic(epoch, rounds=200, warmup_rounds=10)
    assert sink.last_committed_epoch() == next(epochs) - 1
    record("latency_laminar_epoch_2pc", benchmark, 1)
    sink.close()


# -- throughput -----------------------------------------------------------------------------------


@pytest.mark.benchmark(group="pg-throughput")
def bench_laminar_throughput(
    benchmark: Any, pg_dsn: str, conn: psycopg.Connection[Any], target: str, data: pa.Table
) -> None:
    sink = laminar.PostgresSink(pg_dsn, target)
    writer = laminar.exactly_once(sink)
    epochs = itertools.count()

    benchmark.pedantic(
        lambda: writer.write_epoch(next(epochs), data),
        setup=lambda: truncate(conn, target),
        rounds=5,
        warmup_rounds=1,
    )
    assert conn.execute(
        sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(target))
    ).fetchone() == (ROWS,)
    conn.rollback()
    record("laminar", benchmark, ROWS)
    writer.close()


@pytest.mark.benchmark(group="pg-throughput")
def bench_copy_write_row(
    benchmark: Any, conn: psycopg.Connection[Any], target: str, data: pa.Table
) -> None:
    copy_sql = sql.SQL("COPY {} (" + COLUMNS + ") FROM STDIN").format(sql.Identifier(target))

    def write_rows() -> None:
        with conn.cursor() as cur, cur.copy(copy_sql) as copy:
            for row in data.to_pylist():
                copy.write_row(tuple(row.values()))
        conn.commit()

    benchmark.pedantic(write_rows, setup=lambda: truncate(conn, target), rounds=2)
    record("write_row", benchmark, ROWS)


@pytest.mark.benchmark(group="pg-throughput")
def bench_executemany(
    benchmark: Any, conn: psycopg.Connection[Any], target: str, data: pa.Table
) -> None:
    part = data.slice(0, EXEC_ROWS)
    insert = sql.SQL("INSERT INTO {} (" + COLUMNS + ") VALUES (%s, %s, %s, %s, %s, %s)").format(
        sql.Identifier(target)
    )

    def insert_rows() -> None:
        with conn.cursor() as cur:
            cur.executemany(insert, [tuple(r.values()) for r in part.to_pylist()])
        conn.commit()

    benchmark.pedantic(insert_rows, setup=lambda: truncate(conn, target), rounds=2)
    record("executemany", benchmark, EXEC_ROWS)


# -- Spark: df.write.jdbc vs the laminar writer ------------------------------------------------


@pytest.fixture(scope="module")
def spark_jdbc(laminar_servers: Any) -> Iterator[Any]:
    """A Spark Connect session on a server started with the PostgreSQL JDBC driver."""
    if not WITH_SPARK:
        pytest.skip("LAMINAR_BENCH_SPARK=0: Spark comparison not requested")
    if not JDBC_JAR.is_file():
        pytest.fail(f"{JDBC_JAR} is missing: apt-get install libpostgresql-jdbc-java")
    from pyspark.sql import SparkSession

    from laminar.embedded import SparkConnectServer

    server = SparkConnectServer(
        jars=[JDBC_JAR],
        driver_memory="2g",
        log_path=laminar_servers.log_dir / "spark-connect-jdbc.log",
    )
    server.start()
    session = SparkSession.builder.remote(server.remote_url).create()
    try:
        yield session
    finally:
        session.stop()
        server.stop()


@pytest.fixture
def spark_df(spark_jdbc: Any, data: pa.Table) -> Any:
    df = spark_jdbc.createDataFrame(data).repartition(2).cache()
    assert df.count() == ROWS
    return df


def jdbc_url(dsn: str) -> tuple[str, dict[str, str]]:
    params = conninfo_to_dict(dsn)
    url = f"jdbc:postgresql://{params['host']}:{params['port']}/{params['dbname']}"
    props = {"user": str(params.get("user", "postgres")), "driver": "org.postgresql.Driver"}
    if params.get("password"):
        props["password"] = str(params["password"])
    return url, props


@pytest.mark.benchmark(group="pg-spark")
@pytest.mark.parametrize("rewrite", [False, True], ids=["plain", "rewriteBatchedInserts"])
def bench_spark_jdbc(
    benchmark: Any,
    pg_dsn: str,
    conn: psycopg.Connection[Any],
    target: str,
    spark_df: Any,
    rewrite: bool,
) -> None:
    url, props = jdbc_url(pg_dsn)
    if rewrite:
        url += "?reWriteBatchedInserts=true"
    benchmark.pedantic(
        lambda: spark_df.write.jdbc(url, target, mode="append", properties=props),
        setup=lambda: truncate(conn, target),
        rounds=3,
        warmup_rounds=1,
    )
    count = conn.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(target)))
    assert count.fetchone() == (ROWS,)
    conn.rollback()
    record("spark_jdbc_rewrite" if rewrite else "spark_jdbc", benchmark, ROWS)


@pytest.mark.benchmark(group="pg-spark")
def bench_spark_laminar(
    benchmark: Any, pg_dsn: str, conn: psycopg.Connection[Any], target: str, spark_df: Any
) -> None:
    writer = laminar.exactly_once(laminar.PostgresSink(pg_dsn, target))
    epochs = itertools.count()
    benchmark.pedantic(
        lambda: writer(spark_df, next(epochs)),  # what foreachBatch calls
        setup=lambda: truncate(conn, target),
        rounds=3,
        warmup_rounds=1,
    )
    count = conn.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(target)))
    assert count.fetchone() == (ROWS,)
    conn.rollback()
    record("spark_laminar", benchmark, ROWS)
    writer.close()
