"""Fixtures shared by the end-to-end tests (a real Spark Connect server, a Spark cluster)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import laminar.spark
from laminar.embedded import SparkCluster
from tests.e2e.spark_helpers import client


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
