"""Fixtures shared by the end-to-end tests (a real Spark Connect server, a Spark cluster)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import laminar.spark
from laminar.embedded import SparkCluster, SparkConnectServer
from tests.e2e.spark_helpers import DS_DSN_VAR, client, datasource_server


@pytest.fixture(scope="module")
def spark_client(spark_remote: str) -> Iterator[Any]:
    """A Spark Connect client session of the module's own, on the session's server."""
    with client(spark_remote) as session:
        yield session


@pytest.fixture(scope="module")
def cluster_client(spark_cluster: SparkCluster) -> Iterator[Any]:
    """A Spark Connect client session of the module's own on the session's Spark standalone
    cluster, with ``format("laminar")`` and the tests' ``format("laminar_cluster_test")``
    registered, and Arrow batches of 25 rows (a task writes many: it can be caught mid-task)."""
    from tests.e2e.cluster_helpers import MarkedSource

    with client(spark_cluster.remote_url) as session:
        laminar.spark.register(session)
        session.dataSource.register(MarkedSource)
        session.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "25")
        yield session


@pytest.fixture(scope="session")
def ds_server(laminar_servers: Any, pg_dsn: str) -> Iterator[SparkConnectServer]:
    """The data-source tests' Spark Connect server, one per run (`datasource_server`: the
    test database's DSN in ``$LAMINAR_TEST_DS_PG_DSN``, ``local[4,3]``, Kafka and Avro)."""
    with datasource_server(laminar_servers.log_dir, {DS_DSN_VAR: pg_dsn}, "spark-ds.log") as s:
        yield s
