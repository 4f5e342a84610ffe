"""Fixtures shared by the integration tests of the atomic and scale-out protocols."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.fixtures import BrokerUnderTest
from tests.integration.atomic_helpers import create_table


@pytest.fixture
def world(
    broker_under_test: BrokerUnderTest, pg_dsn: str, unique_name: Any, tmp_path: Path
) -> dict[str, str]:
    """A fresh topic (2 partitions) and table on the session's servers (Apache Kafka, or Tansu
    for a test parametrized with ``broker_under_test``), with the names a crash writer
    subprocess needs: bootstrap, topic, dsn, table, transactional id, checkpoint; and
    ``broker``, the broker's name."""
    topic, table = unique_name("topic"), unique_name("tbl")
    broker_under_test.create_topic(topic, partitions=2)
    create_table(pg_dsn, table)
    return {
        "broker": broker_under_test.name,
        "bootstrap": broker_under_test.bootstrap_servers,
        "topic": topic,
        "dsn": pg_dsn,
        "table": table,
        "tid": f"tid-{topic}",
        "checkpoint": str(tmp_path / "checkpoint"),
    }
