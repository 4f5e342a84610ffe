"""Credentials on the executors of a Spark standalone cluster that Spark never shows
(docs/spark.md, "Secrets on executors"), and the readiness warning for those it does.

The session's cluster gives its executors the test database's DSN three ways (`CLUSTER_ENV`),
each with a password of its own: through ``spark.executorEnv.<name>`` with a name
``spark.redaction.regex`` covers (``…_SECRET``), through libpq's password file
(``spark.executorEnv.PGPASSFILE``, the DSN without password in the workers' environment), and
— the way docs/spark.md used to recommend — through ``spark.executorEnv.<name>`` with a name the
regex does not cover. Everything Spark shows is read: the driver's REST API (every endpoint a
query fills), the master's and the workers' pages, every log of the cluster. The first two
passwords are in none of them, and both ways work on the executors (a query writes through the
first; libpq on an executor takes the second from the file); the third password is in the REST
API's environment and the workers' pages, and `laminar.spark.register` warns about it."""

from __future__ import annotations

import hashlib
import json
import logging
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest

import laminar.spark
from laminar.embedded import SparkCluster
from tests.e2e.cluster_helpers import committed_batches, judge, make_pipeline, stop_query
from tests.e2e.spark_helpers import stop, wait_for
from tests.fixtures import CLUSTER_ENV

try:  # the probe below travels by value to the executors' Python workers
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
except ImportError:  # pragma: no cover - pyspark is in the dev extras
    pass

HIDDEN = (CLUSTER_ENV.redacted_secret, CLUSTER_ENV.passfile_secret)


def executor_probe(worker_dsn: str, redacted_dsn: str, passfile_sha256: str) -> Any:
    """A ``mapInArrow`` function: on the executor, which of the ways reached it (booleans only,
    never a value)."""

    def probe(batches: Any) -> Any:
        import os

        import psycopg
        import pyarrow as pa

        for _ in batches:
            pass
        with psycopg.connect(os.environ[worker_dsn]) as conn:
            password = conn.info.password or ""  # libpq's: from PGPASSFILE, no password given
        row = {
            "pid": os.getpid(),
            "redacted_set": bool(os.environ.get(redacted_dsn)),
            "passfile_used": hashlib.sha256(password.encode()).hexdigest() == passfile_sha256,
        }
        yield pa.RecordBatch.from_pylist([row])

    return probe


def get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=60) as response:
        return str(response.read().decode())


def test_credentials_spark_never_shows_and_a_warning_for_those_it_does(
    spark_cluster: SparkCluster,
    cluster_client: Any,
    kafka_broker: Any,
    pg_dsn: str,
    unique_name: Any,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    env = CLUSTER_ENV
    # the readiness warning: register names the shown variable, and only it
    with caplog.at_level(logging.WARNING, logger="laminar.spark"):
        laminar.spark.register(cluster_client)
    warnings = [r.getMessage() for r in caplog.records if r.name == "laminar.spark"]
    assert len(warnings) == 1, warnings
    assert f"spark.executorEnv.{env.shown_dsn} (its value holds a password)" in warnings[0]
    assert "spark.redaction.regex" in warnings[0]
    assert env.shown_secret not in warnings[0]
    # the recommended ways work on the executors: a query writes through the redacted variable
    # (the executors have it only from spark.executorEnv), and libpq there reads the password file
    p = make_pipeline(kafka_broker, pg_dsn, env.redacted_dsn, unique_name, tmp_path, rows=200)
    query = p.start(cluster_client)
    try:
        wait_for(lambda: committed_batches(p.checkpoint) >= 2, query=query, timeout=240, what="2")
    finally:
        stop_query(query)
        stop(query)
    assert judge(p) >= 400
    digest = hashlib.sha256(env.passfile_secret.encode()).hexdigest()
    probe = executor_probe(env.worker_dsn, env.redacted_dsn, digest)
    schema = "pid long, redacted_set boolean, passfile_used boolean"
    rows = cluster_client.range(0, 4, 1, 4).mapInArrow(probe, schema).collect()
    assert len(rows) == 4
    assert all(r["redacted_set"] and r["passfile_used"] for r in rows), rows

    # what Spark shows: the driver's REST API …
    app = spark_cluster.application_id()
    environment = spark_cluster.rest(f"applications/{app}/environment")
    spark_properties = dict(environment["sparkProperties"])
    assert spark_properties[f"spark.executorEnv.{env.redacted_dsn}"] == "*********(redacted)"
    assert spark_properties["spark.executorEnv.PGPASSFILE"].endswith("pgpass")
    assert env.shown_secret in spark_properties[f"spark.executorEnv.{env.shown_dsn}"], (
        "the way Spark shows is shown: this test reads what Spark displays"
    )
    shown = {"environment": json.dumps(environment)}
    for path in ("", "/executors", "/allexecutors", "/jobs", "/stages", "/sql"):
        shown[f"REST{path or ' application'}"] = json.dumps(
            spark_cluster.rest(f"applications/{app}{path}")
        )
    # … the standalone master's and workers' pages …
    assert spark_cluster.master is not None
    shown["master /json/"] = get(f"{spark_cluster.master.webui_url}/json/")
    shown["master /"] = get(f"{spark_cluster.master.webui_url}/")
    for i, worker in enumerate(spark_cluster.workers):
        shown[f"worker {i} /json/"] = get(f"{worker.webui_url}/json/")
        shown[f"worker {i} /"] = get(f"{worker.webui_url}/")
    assert any(env.shown_secret in text for k, text in shown.items() if k.startswith("worker")), (
        "a standalone worker's /json/ shows its executors' environment: the shown way there too"
    )
    # … and every log of the cluster (driver, master, workers, executors)
    for path in sorted(spark_cluster.log_dir.rglob("*")):
        if path.is_file() and path.stat().st_size < 50_000_000:
            shown[str(path)] = path.read_text(errors="replace")
    assert len([k for k in shown if k.endswith("stderr")]) >= 2, "the executors' logs were read"
    for where, text in shown.items():
        for secret in HIDDEN:
            assert secret not in text, f"{where} shows a password that should stay hidden"
