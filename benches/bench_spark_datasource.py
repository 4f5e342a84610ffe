"""``writeStream.format("laminar")`` against the other ways a micro-batch reaches PostgreSQL from
Spark, side by side in one run on one Spark Connect server (``local[4]``, the PostgreSQL JDBC
driver on its class path, the DSN in its environment):

- ``format("laminar")``: the data source (tasks write as two-phase participants, the driver
  decides: docs/spark.md);
- ``foreachBatch(laminar.exactly_once(...))``: the batch pulled into one Python process
  (``toArrow()``), one transaction;
- a plain ``foreachBatch``: ``toArrow()`` + the same COPY encoder, no transaction bookkeeping
  (what "at-least-once" costs);
- Spark's JDBC writer (``df.write.jdbc`` in a ``foreachBatch``: Spark has no streaming JDBC sink).

One micro-batch of ``LAMINAR_BENCH_DS_ROWS`` rows (default 2,000,000; 200,000 under
``LAMINAR_BENCH_QUICK=1``) in 4 partitions: 5 columns (int8, text, numeric(18,2), timestamptz,
float8) read from 4 parquet files with ``trigger(availableNow=True)``, in two shapes: the files
read in place (one file per partition, as a Kafka or file source feeds a sink: each task reads its
own input) and ``repartition(4)`` first (a shuffle before the sink, which every way pays). Measured
per way: rows/s from ``start()`` to the query's end, and the peak resident memory of Spark's Python
processes (the server's descendants, sampled every 100 ms from ``/proc``). Printed as one table and
written to ``.benchmarks/spark_datasource_summary.json``. The ratios to the foreachBatch path and
to Spark's JDBC writer are shown in the gate table, not enforced (measured below 1 on a 2-core
machine shared by four engineers: the tasks' parallelism needs cores).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from psycopg.conninfo import conninfo_to_dict

import laminar
import laminar.spark
from laminar import _trace
from laminar._core import encode_pg_copy

try:  # the foreachBatch functions below travel by value to the server's Python worker
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
except ImportError:  # pragma: no cover - pyspark is in the dev extras
    pass

QUICK = os.environ.get("LAMINAR_BENCH_QUICK") == "1"
ROWS = int(os.environ.get("LAMINAR_BENCH_DS_ROWS", "200000" if QUICK else "2000000"))
PARTS = 4
WARM_UP_ROWS = 4_000
DSN_VAR = "LAMINAR_BENCH_DS_DSN"
JDBC_JAR = Path(os.environ.get("LAMINAR_JDBC_JAR", "/usr/share/java/postgresql.jar"))
DDL = "(id int8, name text, amount numeric(18, 2), ts timestamptz, score float8)"
#: The source's shapes: read in place (one partition per file) or shuffled by ``repartition``.
SHAPES = ("read in place", "repartitioned")
RESULTS: dict[str, dict[str, dict[str, float]]] = {}


# -- the ways compared -------------------------------------------------------------------------


class PlainCopy:
    """``toArrow()`` + COPY + commit: no epoch, no transaction bookkeeping."""

    def __init__(self, dsn_var: str, table: str) -> None:
        self.dsn_var = dsn_var
        self.table = table

    def __call__(self, df: Any, batch_id: int) -> None:
        data = df.toArrow()
        with psycopg.connect(os.environ[self.dsn_var]) as conn:
            columns = [
                (str(n), str(t), int(m))
                for n, t, m in conn.execute(
                    "SELECT a.attname, t.typname, a.atttypmod FROM pg_attribute a"
                    " JOIN pg_type t ON t.oid = a.atttypid WHERE a.attrelid = %s::regclass"
                    " AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum",
                    (self.table,),
                )
            ]
            buffer = encode_pg_copy(data, columns)
            names = ", ".join(buffer.columns)
            with conn.cursor().copy(f"COPY {self.table} ({names}) FROM STDIN (FORMAT BINARY)") as c:
                for chunk in buffer.chunks:
                    c.write(chunk)


class JdbcWrite:
    """Spark's JDBC writer, as a streaming query can use it (``foreachBatch``)."""

    def __init__(self, url: str, table: str, props: dict[str, str]) -> None:
        self.url, self.table, self.props = url, table, props

    def __call__(self, df: Any, batch_id: int) -> None:
        df.write.jdbc(self.url, self.table, mode="append", properties=self.props)


# -- measuring ---------------------------------------------------------------------------------


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        for child in children.get(pid, []):
            found.append(child)
            todo.append(child)
    return found


def python_rss(root: int) -> tuple[int, int]:
    """Resident bytes of the Python processes under ``root`` (Spark's workers and daemons): in
    all, and of the largest."""
    total = largest = 0
    for pid in _descendants(root):
        try:
            if "python" not in Path(f"/proc/{pid}/comm").read_text():
                continue
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    rss = int(line.split()[1]) * 1024
                    total += rss
                    largest = max(largest, rss)
        except OSError:
            continue
    return total, largest


def run_measured(root: int, start: Callable[[], Any]) -> tuple[float, int, int]:
    """Start a query, wait for its end; (seconds, peak Python RSS in all and of the largest
    Python process, in bytes)."""
    peak = [0, 0]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            total, largest = python_rss(root)
            peak[0], peak[1] = max(peak[0], total), max(peak[1], largest)
            done.wait(0.1)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    began = time.perf_counter()
    query = start()
    query.awaitTermination()
    seconds = time.perf_counter() - began
    done.set()
    sampler.join()
    error = query.exception()
    assert error is None, f"the query failed: {error}"
    return seconds, peak[0], peak[1]


# -- fixtures ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(laminar_servers: Any, pg_dsn: str) -> Iterator[Any]:
    if not JDBC_JAR.is_file():
        pytest.fail(f"{JDBC_JAR} is missing: apt-get install libpostgresql-jdbc-java")
    from laminar.embedded import SparkConnectServer

    spark_server = SparkConnectServer(
        master=f"local[{PARTS}]",
        jars=[JDBC_JAR],
        driver_memory="2g",
        # LAMINAR_TRACE (laminar._trace) reaches the tasks' and the commits' Python processes
        env={DSN_VAR: pg_dsn, **{k: v for k, v in os.environ.items() if k == _trace.ENV}},
        log_path=laminar_servers.log_dir / "spark-connect-datasource-bench.log",
    )
    spark_server.start()
    try:
        yield spark_server
    finally:
        spark_server.stop()


def write_source(directory: Path, rows: int) -> Path:
    """``rows`` rows as 4 parquet files."""
    per = rows // PARTS
    for f in range(PARTS):
        ids = pa.array(range(f * per, (f + 1) * per), pa.int64())
        table = pa.table(
            {
                "id": ids,
                "name": pa.array([f"order-{i}" for i in range(f * per, (f + 1) * per)]),
                "amount": pa.compute.cast(
                    pa.compute.divide(pa.compute.cast(ids, pa.float64()), 7.0),
                    pa.decimal128(18, 2),
                ),
                "ts": pa.compute.cast(
                    pa.compute.add(pa.compute.multiply(ids, 1000), 1_700_000_000_000),
                    pa.timestamp("ms", tz="UTC"),
                ),
                "score": pa.compute.cast(ids, pa.float64()),
            }
        )
        pq.write_table(table, directory / f"part-{f}.parquet")
    return directory


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_source(tmp_path_factory.mktemp("ds-source"), ROWS)


@pytest.fixture(scope="module")
def warm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_source(tmp_path_factory.mktemp("ds-warm-up"), WARM_UP_ROWS)


@pytest.mark.timeout(600 if QUICK else 1800)
@pytest.mark.parametrize("shape", SHAPES)
def bench_format_laminar_against_foreach_batch_and_jdbc(
    shape: str,
    server: Any,
    source: Path,
    warm: Path,
    pg_dsn: str,
    tmp_path: Path,
    gate: Any,
    unique_name: Any,
    pytestconfig: pytest.Config,
) -> None:
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.remote(server.remote_url).create()
    laminar.spark.register(spark)
    params = conninfo_to_dict(pg_dsn)
    url = f"jdbc:postgresql://{params['host']}:{params['port']}/{params['dbname']}"
    props = {"user": str(params.get("user", "postgres")), "driver": "org.postgresql.Driver"}
    results: dict[str, dict[str, float]] = RESULTS.setdefault(shape, {})
    try:
        # one partition per file: a file's open cost above the split size packs no two together
        spark.conf.set("spark.sql.files.openCostInBytes", str(1 << 30))
        spark_schema = spark.read.parquet(str(source)).schema
        if shape == "read in place":
            from pyspark.sql.functions import spark_partition_id

            found = spark.read.parquet(str(source)).select(spark_partition_id()).distinct()
            assert found.count() == PARTS, "the source is not read in one partition per file"

        def source_stream(directory: Path) -> Any:
            stream = spark.readStream.schema(spark_schema).parquet(str(directory))
            if shape == "repartitioned":
                stream = stream.repartition(PARTS)
            return stream.writeStream.trigger(availableNow=True)

        def ways() -> list[tuple[str, Callable[[Any, str, str], Any]]]:
            def data_source(w: Any, t: str, c: str) -> Any:
                w = w.format("laminar").option("postgres.dsn.env", DSN_VAR)
                return w.option("postgres.table", t).option("checkpointLocation", c).start()

            def exactly_once(w: Any, t: str, c: str) -> Any:
                writer = laminar.exactly_once(laminar.PostgresSink(laminar.env(DSN_VAR), t))
                function = laminar.spark.foreach_batch(writer, checkpoint_location=c)
                return w.foreachBatch(function).option("checkpointLocation", c).start()

            def plain(w: Any, t: str, c: str) -> Any:
                return w.foreachBatch(PlainCopy(DSN_VAR, t)).option("checkpointLocation", c).start()

            def jdbc(w: Any, t: str, c: str) -> Any:
                function = JdbcWrite(url, t, props)
                return w.foreachBatch(function).option("checkpointLocation", c).start()

            return [
                ("format('laminar')", data_source),
                ("foreachBatch(laminar)", exactly_once),
                ("foreachBatch(plain COPY)", plain),
                ("Spark JDBC", jdbc),
            ]

        def way(name: str, make: Callable[[Any, str, str], Any], *, warm_up: bool = False) -> None:
            table = f"public.{unique_name('ds')}"
            with psycopg.connect(pg_dsn, autocommit=True) as conn:
                conn.execute(f"CREATE TABLE {table} {DDL}")
            ckpt = str(tmp_path / (name + ("-warm-up" if warm_up else "")))
            stream = source_stream(warm if warm_up else source)
            _trace.mark("bench way", way=name, warm_up=warm_up)
            seconds, rss, single = run_measured(server.pid, lambda: make(stream, table, ckpt))
            rows = WARM_UP_ROWS if warm_up else ROWS
            with psycopg.connect(pg_dsn) as conn:
                count = conn.execute(f"SELECT count(*) FROM {table}").fetchone()
            assert count == (rows,), f"{name}: {count} rows"
            if not warm_up:
                results[name] = {
                    "rows": rows,
                    "seconds": seconds,
                    "python_rss": rss,
                    "largest_python_rss": single,
                }

        # Spark's Python workers start (and import laminar) once: not part of any way's figure
        for name, make in ways():
            way(name, make, warm_up=True)
        for name, make in ways():
            way(name, make)

    finally:
        spark.stop()
    lines = [
        "",
        f"format('laminar') vs the others: one batch of {ROWS:,} rows, {PARTS} partitions, "
        f"source {shape}",
    ]
    lines.append(
        f"  {'way':<26} {'rows/s':>10} {'seconds':>8} {'Python RSS, all':>16} {'largest':>12}"
    )
    for name, r in results.items():
        rate, mib = r["rows"] / r["seconds"], r["python_rss"] / 2**20
        one = r["largest_python_rss"] / 2**20
        lines.append(
            f"  {name:<26} {rate:>10,.0f} {r['seconds']:>8.2f} {mib:>12,.0f} MiB {one:>8,.0f} MiB"
        )
    capture = pytestconfig.pluginmanager.get_plugin("capturemanager")
    reporter = pytestconfig.pluginmanager.get_plugin("terminalreporter")
    if capture is not None and reporter is not None:
        with capture.global_and_fixture_disabled():
            for line in lines:
                reporter.write_line(line)
    out = Path(".benchmarks")
    out.mkdir(exist_ok=True)
    (out / "spark_datasource_summary.json").write_text(json.dumps(RESULTS, indent=2))
    ds = results["format('laminar')"]
    fb = results["foreachBatch(laminar)"]
    jdbc = results["Spark JDBC"]
    # the repartitioned shape keeps the gates' first names
    suffix = "" if shape == "repartitioned" else f", source {shape}"
    gate(
        f"format('laminar') / foreachBatch(laminar) rows/s{suffix}",
        fb["seconds"] / ds["seconds"],
        at_least=1.0,
        unit="x",
        target=">= 2x (issue 16)",
        # shown, not enforced: measured below 1 on this 2-core machine (0.70-0.78 at 2,000,000
        # rows, quiet: four tasks and PostgreSQL share two cores, and each batch pays Spark's
        # fixed ~5 s, three fresh driver-side Python processes and the JVM's steps around the
        # tasks: docs/benchmarks.md); the goal needs cores
        enforced=False,
    )
    gate(
        f"format('laminar') / Spark JDBC rows/s{suffix}",
        jdbc["seconds"] / ds["seconds"],
        at_least=1.0,
        unit="x",
        target=">= 3x (issue 16)",
        enforced=False,
    )
