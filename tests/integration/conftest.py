"""TEMPORARY fixture for the serialization integration tests.

Replace with the shared ``pg_dsn`` fixture of ``tests/conftest.py`` (``laminar.embedded``) at merge:
this one only reads ``LAMINAR_PG_DSN`` for a server started by hand.
"""

from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="session")
def pg_dsn() -> str:
    dsn = os.environ.get("LAMINAR_PG_DSN")
    if not dsn:
        if os.environ.get("CI") == "true":
            pytest.fail("LAMINAR_PG_DSN is not set: a real PostgreSQL is required under CI")
        pytest.skip("LAMINAR_PG_DSN is not set (no PostgreSQL server to test against)")
    return dsn
