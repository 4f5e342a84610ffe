"""A task's check of the servers (`laminar.spark.source._check_servers_once` with
``servers_only``): once per worker process and set of servers with their client settings,
whatever the topic or table — the driver checked those for the batch's options before its
tasks ran — while the driver's check stays once per options."""

from __future__ import annotations

from typing import Any

import pytest

from laminar import readiness
from laminar.spark import source
from laminar.spark.options import parse_options

BASE = {
    "kafka.bootstrap.servers": "127.0.0.1:9",
    "kafka.topic": "orders",
    "postgres.dsn.env": "LAMINAR_TEST_TASK_DSN_A",
    "postgres.table": "orders",
}


@pytest.fixture
def checks(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The sinks each real check was asked for (no server is reached)."""
    seen: list[list[str]] = []

    def record(sinks: Any, *, where: str, timeout_s: float = 10.0) -> list[Any]:
        seen.append(sorted(s.sink_id for s in sinks))
        return []

    monkeypatch.setenv("LAMINAR_TEST_TASK_DSN_A", "postgresql://app:S3cr3t@127.0.0.1:1/shop")
    monkeypatch.setenv("LAMINAR_TEST_TASK_DSN_B", "postgresql://app:S3cr3t@127.0.0.1:2/shop")
    monkeypatch.setattr(readiness, "require_reachable", record)
    monkeypatch.setattr(source, "_checked", set())
    return seen


def check(options: dict[str, str], *, servers_only: bool) -> None:
    parsed = parse_options(options)
    kafka, postgres, _ = source._sinks(parsed)
    source._check_servers_once(
        parsed, [*postgres, *kafka], where="a test", servers_only=servers_only
    )


def test_a_task_checks_a_cluster_once_whatever_the_topic(checks: list[list[str]]) -> None:
    check(BASE, servers_only=True)
    check({**BASE, "kafka.topic": "payments", "postgres.table": "payments"}, servers_only=True)
    assert len(checks) == 1
    # other servers, or other client settings, are checked again
    check({**BASE, "kafka.bootstrap.servers": "127.0.0.1:10"}, servers_only=True)
    check({**BASE, "kafka.security.protocol": "SSL"}, servers_only=True)
    check({**BASE, "postgres.dsn.env": "LAMINAR_TEST_TASK_DSN_B"}, servers_only=True)
    assert len(checks) == 4


def test_the_driver_checks_each_configuration(checks: list[list[str]]) -> None:
    check(BASE, servers_only=False)
    check(BASE, servers_only=False)
    check({**BASE, "kafka.topic": "payments"}, servers_only=False)
    assert len(checks) == 2


def test_the_key_keeps_no_credential(checks: list[list[str]]) -> None:
    check(BASE, servers_only=True)
    (key,) = source._checked
    assert "S3cr3t" not in key
    assert "127.0.0.1" not in key
