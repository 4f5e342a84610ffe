"""Test-suite wiring: the shared server fixtures live in the `tests.fixtures` plugin."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest

pytest_plugins = ["tests.fixtures"]


@pytest.fixture(autouse=True)
def _no_producer_kept_past_its_test() -> Iterator[None]:
    """Release the producers this process kept for a next scale-out task (`laminar.kafka._kept`)
    after each test: the next test's servers are others, and a kept producer of a stopped broker
    would go on reconnecting (and logging) until it expires."""
    yield
    kept = sys.modules.get("laminar.kafka._kept")
    if kept is not None:
        kept.release_all()
