"""Fixtures shared by the end-to-end tests (a real Spark Connect server)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.spark_helpers import client


@pytest.fixture(scope="module")
def spark_client(spark_remote: str) -> Iterator[Any]:
    """A Spark Connect client session of the module's own, on the session's server."""
    with client(spark_remote) as session:
        yield session
