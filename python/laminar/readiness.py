"""Can this process reach the servers a set of sinks writes to?

A light check per sink — PostgreSQL: connect and ``SELECT 1`` (address, credentials, database);
Kafka: a metadata request for the sink's topic (address, security settings, topic exists) — run
where the sinks will write: in the Spark server's Python worker before the first batch, and in a
probe task by `laminar.spark.check_server` before a query starts. Settings given as
``laminar.env(...)`` are read here, so a variable missing on the server shows up too.

Every text in a result is redacted (DSN passwords, secret settings).
"""

from __future__ import annotations

import os
import socket
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import psycopg

from laminar._redact import redact_dsn, redact_text
from laminar._sink import TransactionalSink
from laminar.errors import ConfigError, LaminarError
from laminar.kafka._config import consumer_config, secret_values

__all__ = ["SinkCheck", "check_sink", "check_sinks", "describe_process", "require_reachable"]


@dataclass(frozen=True)
class SinkCheck:
    """The outcome of checking one sink's server from one process."""

    sink_id: str
    kind: str
    #: The server as configured, secrets masked (e.g. ``PostgreSQL postgresql://app:***@db/x``).
    target: str
    ok: bool
    #: Why not (redacted), or None.
    error: str | None = None
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready form (for reports sent back from a server-side probe)."""
        return {
            "sink_id": self.sink_id,
            "kind": self.kind,
            "target": self.target,
            "ok": self.ok,
            "error": self.error,
            "seconds": self.seconds,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SinkCheck:
        """The inverse of `to_dict`."""
        return cls(
            sink_id=str(data["sink_id"]),
            kind=str(data["kind"]),
            target=str(data["target"]),
            ok=bool(data["ok"]),
            error=None if data.get("error") is None else str(data["error"]),
            seconds=float(data.get("seconds", 0.0)),
        )


def describe_process() -> str:
    """This process for messages: pid, host and interpreter."""
    return f"pid {os.getpid()} on {socket.gethostname()}, Python {sys.executable or 'python'}"


def check_sink(sink: TransactionalSink, timeout_s: float = 10.0) -> SinkCheck:
    """Check that ``sink``'s server answers from this process (never raises for a failure)."""
    started = time.monotonic()
    kind = getattr(sink, "kind", type(sink).__name__)
    try:
        if kind == "postgres":
            target = _check_postgres(sink, timeout_s)
        elif kind == "kafka":
            target = _check_kafka(sink, timeout_s)
        else:
            return SinkCheck(sink.sink_id, kind, repr(sink), True, None, 0.0)
    except _UnreachableError as e:
        return SinkCheck(sink.sink_id, kind, e.target, False, e.reason, time.monotonic() - started)
    except LaminarError as e:  # e.g. a laminar.env variable that is not set here
        return SinkCheck(
            sink.sink_id, kind, _target_of(sink), False, str(e), time.monotonic() - started
        )
    return SinkCheck(sink.sink_id, kind, target, True, None, time.monotonic() - started)


def check_sinks(sinks: Iterable[TransactionalSink], timeout_s: float = 10.0) -> list[SinkCheck]:
    """`check_sink` for each sink, in order."""
    return [check_sink(sink, timeout_s) for sink in sinks]


def require_reachable(
    sinks: Iterable[TransactionalSink], *, where: str, timeout_s: float = 10.0
) -> list[SinkCheck]:
    """Check every sink; `ConfigError` naming each server that could not be reached, from
    ``where`` (e.g. "the Spark server's foreachBatch worker (pid 12 on host-a, Python …)")."""
    checks = check_sinks(sinks, timeout_s)
    failed = [c for c in checks if not c.ok]
    if failed:
        raise ConfigError(unreachable_message(failed, where))
    return checks


def unreachable_message(failed: list[SinkCheck], where: str) -> str:
    """One message for every failed check."""
    lines = "; ".join(f"sink {c.sink_id!r} → {c.target}: {c.error}" for c in failed)
    return (
        f"{where} cannot reach {len(failed)} of the configured servers: {lines}. Addresses, "
        "credentials and laminar.env(...) settings are resolved there, in the server's "
        "environment, not on the client (docs/spark.md)"
    )


class _UnreachableError(Exception):
    def __init__(self, target: str, reason: str) -> None:
        super().__init__(reason)
        self.target = target
        self.reason = reason


def _target_of(sink: TransactionalSink) -> str:
    if sink.kind == "postgres":
        setting = getattr(sink, "dsn", None)
        shown = redact_dsn(setting) if isinstance(setting, str) else repr(setting)
        return f"PostgreSQL {shown}"
    if sink.kind == "kafka":
        servers = getattr(sink, "bootstrap_servers", "?")
        return f"Kafka {servers!r} topic {getattr(sink, 'topic', '?')}"
    return repr(sink)


def _check_postgres(sink: Any, timeout_s: float) -> str:
    dsn: str = sink._dsn  # resolves laminar.env settings in this process
    target = f"PostgreSQL {redact_dsn(dsn)}"
    secrets = sink._secrets()
    try:
        with psycopg.connect(
            dsn, connect_timeout=max(1, round(timeout_s)), application_name="laminar check"
        ) as conn:
            conn.execute("SELECT 1").fetchone()
    except psycopg.Error as e:
        raise _UnreachableError(target, redact_text(" ".join(str(e).split()), secrets)) from e
    return target


def _check_kafka(sink: Any, timeout_s: float) -> str:
    # confluent-kafka loads only for a Kafka sink: a PostgreSQL-only format('laminar') checks its
    # servers in every micro-batch's fresh driver-side process (docs/spark.md, Throughput)
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient  # same reason

    bootstrap: str = sink._bootstrap_servers  # resolves laminar.env settings in this process
    user: dict[str, Any] = sink._producer_config
    topic: str = sink.topic
    target = f"Kafka {bootstrap} topic {topic}"
    secrets = secret_values(user)
    config = consumer_config(user, bootstrap_servers=bootstrap, group_id="laminar.check")
    for key in ("group.id", "enable.auto.commit", "isolation.level", "enable.partition.eof"):
        config.pop(key, None)
    errors: list[str] = []
    config["error_cb"] = lambda err: errors.append(str(err))
    try:
        admin = AdminClient(config)
        # All topics: a metadata request naming one may auto-create it on some brokers.
        metadata = admin.list_topics(timeout=timeout_s)
    except KafkaException as e:
        detail = "; ".join(dict.fromkeys(errors)) or str(e)
        raise _UnreachableError(target, redact_text(detail, secrets)) from e
    found = metadata.topics.get(topic)
    if found is None or found.error is not None:
        code = found.error.code() if found is not None and found.error is not None else None
        if code == KafkaError.UNKNOWN_TOPIC_OR_PART or found is None:
            raise _UnreachableError(
                target, f"topic {topic!r} does not exist (laminar never creates topics)"
            )
        raise _UnreachableError(target, redact_text(str(found.error), secrets))
    return target
