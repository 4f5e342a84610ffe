"""Benchmark wiring: the same server fixtures as the tests (`tests.fixtures`), and the gates.

``./dev test`` runs this directory in a quick mode (few rounds, JSON to .benchmarks/latest.json,
and ``LAMINAR_BENCH_QUICK=1``, which every suite honours by shrinking its batch sizes);
``./dev bench`` runs it fully. In both, the ``gate`` fixture (`benches.gates`) fails a benchmark
whose figure is out of bounds, and the session ends with one table of every gate, also written to
``.benchmarks/gates.json`` (``LAMINAR_GATES_TABLE=0`` leaves the printing to the caller:
``./dev test`` prints the table after its summary).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from benches.gates import GATES_FILE, Gate, GateBook, table
from benches.spark_server import JDBC_JAR, bench_server

pytest_plugins = ["tests.fixtures"]

_GATES = pytest.StashKey[GateBook]()


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_GATES] = GateBook()


@pytest.fixture
def gate(request: pytest.FixtureRequest) -> Gate:
    """``gate(name, figure, at_least=…, at_most=…, unit=…, target=…, detail=…)``: records the
    figure for the session's gate table and fails the test when it is out of bounds."""
    return request.config.stash[_GATES].bound_to(request.node.nodeid)


@pytest.fixture(scope="session")
def spark_bench_server(laminar_servers: Any, pg_dsn: str) -> Iterator[Any]:
    """The Spark Connect server the ``format("laminar")`` benchmarks share (`benches.spark_server`:
    one start per run)."""
    if not JDBC_JAR.is_file():
        pytest.fail(f"{JDBC_JAR} is missing: apt-get install libpostgresql-jdbc-java")
    server = bench_server(laminar_servers.log_dir, pg_dsn)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    book = config.stash.get(_GATES, None)
    if book is None or not book.results:
        return
    path = config.rootpath / GATES_FILE
    book.write(path)
    if os.environ.get("LAMINAR_GATES_TABLE", "1") == "0":
        return
    terminalreporter.write_sep("=", "performance gates")
    for line in table(book.results):
        terminalreporter.write_line(line)
    terminalreporter.write_line(f"  (also in {GATES_FILE})")
