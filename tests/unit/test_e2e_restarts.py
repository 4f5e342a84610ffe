"""The e2e tests' `RestartingQuery` restarts a query only for Spark's own Python worker start-up
timeout — never for a killed worker or laminar's errors, which the tests judge."""

from __future__ import annotations

from typing import Any

from tests.e2e.spark_helpers import RestartingQuery


class Run:
    """One run of a query that ends at once with ``error`` (a fake StreamingQuery)."""

    def __init__(self, error: str | None) -> None:
        self.error = error
        self.isActive = False
        self.id = id(self)

    def exception(self) -> Any:
        return None if self.error is None else RuntimeError(self.error)


def ended(query: RestartingQuery) -> bool:
    """Polls as `wait_terminated` does, until the query is no longer active."""
    return any(not query.isActive for _ in range(10))


def runs(*errors: str | None) -> tuple[list[Run], Any]:
    started: list[Run] = []
    queue = list(errors)

    def start() -> Run:
        started.append(Run(queue.pop(0)))
        return started[-1]

    return started, start


def test_the_worker_startup_timeout_is_restarted_from_the_checkpoint() -> None:
    started, start = runs(
        "[PYTHON_...] org.apache.spark.SparkException: Python worker failed to connect back.",
        None,
    )
    query = RestartingQuery(start)
    assert ended(query)
    assert len(started) == 2
    assert query.exception() is None
    assert len(query.restarts) == 1


def test_other_failures_are_the_tests_to_judge() -> None:
    for error in (
        "Python worker exited unexpectedly (crashed)",
        "laminar.errors.InDoubtError: ...",
        "Timed out after 120 s",
    ):
        started, start = runs(error)
        query = RestartingQuery(start)
        assert ended(query)
        assert len(started) == 1
        assert str(query.exception()) == error
        assert query.restarts == []


def test_restarts_are_bounded() -> None:
    timeout = "Timed out while waiting for the Python worker to connect back after 10000 ms"
    started, start = runs(*[timeout] * 5)
    query = RestartingQuery(start, max_restarts=3)
    assert ended(query)
    assert len(started) == 4
    assert "connect back" in str(query.exception())
