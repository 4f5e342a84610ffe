"""The Spark Connect server the ``format("laminar")`` benchmarks share (``benches/conftest.py``'s
``spark_bench_server``: one start per run): ``local[4]``, the PostgreSQL JDBC driver on its class
path (Spark's JDBC writer is a peer), Spark's Kafka connector (its ``format("kafka")`` sink is a
peer: `benches.bench_spark_kafka_peer`), the test database's DSN in its environment, and
``LAMINAR_TRACE`` passed on when set (docs/benchmarks.md, "The trace")."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from laminar import _trace

__all__ = ["DSN_VAR", "JDBC_JAR", "bench_server"]

#: The variable holding the test database's DSN in the server (``postgres.dsn.env``,
#: ``laminar.env``).
DSN_VAR = "LAMINAR_BENCH_DS_DSN"
#: The PostgreSQL JDBC driver (bootstrap installs it: libpostgresql-jdbc-java).
JDBC_JAR = Path(os.environ.get("LAMINAR_JDBC_JAR", "/usr/share/java/postgresql.jar"))


def bench_server(log_dir: Path, pg_dsn: str) -> Any:
    """The server, configured (not started)."""
    from laminar.embedded import SparkConnectServer

    trace = {k: v for k, v in os.environ.items() if k == _trace.ENV}
    return SparkConnectServer(
        master="local[4]",
        jars=[JDBC_JAR],
        kafka_connector=True,
        driver_memory="2g",
        # Python writes bytecode caches for laminar's modules as an installed wheel has them: this
        # machine's environment sets PYTHONDONTWRITEBYTECODE=1, under which each of the three
        # fresh driver-side Python processes of every batch compiled laminar from source
        # (docs/benchmarks.md, "format('laminar'): where a batch's time goes")
        env={DSN_VAR: pg_dsn, "PYTHONDONTWRITEBYTECODE": "", **trace},
        log_path=log_dir / "spark-connect-datasource-bench.log",
    )
