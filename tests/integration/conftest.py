"""Fixtures shared by the integration tests of the atomic and scale-out protocols."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.integration.atomic_helpers import create_table


@pytest.fixture
def world(
    kafka_broker: Any, kafka_bootstrap: str, pg_dsn: str, unique_name: Any, tmp_path: Path
) -> dict[str, str]:
    """A fresh topic (2 partitions) and table on the session's servers, with the names a crash
    writer subprocess needs: bootstrap, topic, dsn, table, transactional id, checkpoint."""
    topic, table = unique_name("topic"), unique_name("tbl")
    kafka_broker.create_topic(topic, partitions=2)
    create_table(pg_dsn, table)
    return {
        "bootstrap": kafka_bootstrap,
        "topic": topic,
        "dsn": pg_dsn,
        "table": table,
        "tid": f"tid-{topic}",
        "checkpoint": str(tmp_path / "checkpoint"),
    }
