"""Can this process reach the servers a set of sinks writes to?

A light check per sink — PostgreSQL: connect and ``SELECT 1`` (address, credentials, database);
Kafka: a metadata request for the sink's topic (address, security settings, topic exists) — run
where the sinks will write: in the Spark server's Python worker before the first batch, and in a
probe task by `laminar.spark.check_server` before a query starts. Settings given as
``laminar.env(...)`` are read here, so a variable missing on the server shows up too.

Every text in a result is redacted (DSN passwords, secret settings).

`exposed_executor_env` is the other readiness question for a cluster: which credentials given
to the executors through ``spark.executorEnv.NAME`` Spark shows in full (its UI, its REST API,
the standalone workers' pages), read from a session's configuration (docs/spark.md, "Secrets on
executors"); `laminar.spark.register` and `laminar.spark.start` warn with it.
"""

from __future__ import annotations

import os
import re
import socket
import sys
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import psycopg

from laminar._redact import parse_dsn, redact_dsn, redact_text
from laminar._sink import TransactionalSink
from laminar.errors import ConfigError, LaminarError
from laminar.kafka._config import consumer_config, secret_values

__all__ = [
    "SPARK_REDACTION_REGEX",
    "ExposedVariable",
    "SinkCheck",
    "check_sink",
    "check_sinks",
    "describe_process",
    "exposed_executor_env",
    "require_reachable",
]


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
    dsn: str = sink.resolved_dsn  # resolves laminar.env settings in this process
    target = f"PostgreSQL {redact_dsn(dsn)}"
    secrets = sink.connection_secrets()
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

    bootstrap: str = sink.client_settings().bootstrap_servers  # laminar.env read here
    user: dict[str, Any] = sink.client_settings().producer_config
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


# -- credentials Spark shows ----------------------------------------------------------------------

#: Spark's default ``spark.redaction.regex``: a ``spark.*`` setting whose key *or* value matches
#: it is shown as ``*********(redacted)`` (UI, REST API, the standalone workers' pages).
SPARK_REDACTION_REGEX = r"(?i)secret|password|token|access[.]?key"
#: The prefix of the settings that set an executor's environment variables.
EXECUTOR_ENV_PREFIX = "spark.executorEnv."
# A variable name that reads as a credential, beyond what the default regex covers.
_CREDENTIAL_NAME = re.compile(r"(?i)passw|passwd|pwd|(^|_)pw($|_)|secret|token|credential|apikey")
# host:port[,host:port…]: a Kafka bootstrap list, no secret in it.
_SERVER_LIST = re.compile(r"^\s*[\w.\-\[\]:]+:\d+(\s*,\s*[\w.\-\[\]:]+:\d+)*\s*$")


def _secret_free(value: str) -> bool:
    """Whether a sink's variable evidently holds no secret: a DSN without a password (libpq
    then takes it from its password file or ``PGPASSWORD``) or a list of servers."""
    if _SERVER_LIST.match(value):
        return True
    if "=" not in value and "://" not in value:
        return False  # an opaque value (a SASL password?): counted as a secret
    try:
        return "password" not in parse_dsn(value, "a spark.executorEnv value")
    except ConfigError:
        return False


@dataclass(frozen=True)
class ExposedVariable:
    """A ``spark.executorEnv.NAME`` setting whose value Spark shows in full and that carries a
    credential (never the value itself)."""

    name: str
    #: Why it counts as a credential: named by a sink's setting, or what its value holds.
    why: str

    def message(self) -> str:
        """The warning, with what to do instead."""
        return (
            f"spark.executorEnv.{self.name} ({self.why}) is shown in full by Spark — its UI, "
            "its REST API (/api/v1/applications/<app>/environment) and the standalone workers' "
            "pages — because neither the name nor the value matches spark.redaction.regex. Give "
            "the executors the credential in a way Spark does not display: a variable name the "
            f"regex covers (e.g. {self.name}_SECRET), libpq's password file "
            "(spark.executorEnv.PGPASSFILE with a DSN without password), or the executors' own "
            "environment (spark-env.sh, the cluster manager's secrets) — docs/spark.md, "
            "'Secrets on executors'"
        )


def exposed_executor_env(
    conf: Mapping[str, str], names: Iterable[str] = ()
) -> list[ExposedVariable]:
    """The credentials ``conf`` (a Spark session's configuration, ``spark.conf.getAll``) hands
    the executors through ``spark.executorEnv.NAME`` that Spark shows in full: neither the key
    nor the value matches ``spark.redaction.regex`` (Spark's default when unset), and the
    variable holds a secret by laminar's own rules (a DSN with a password, a ``password=``), is
    one of ``names`` (those a sink reads: ``….env`` options, ``laminar.env`` settings) and not
    evidently secret-free (a DSN without a password, a server list), or is named like a
    credential. A regex Python cannot compile is taken to cover nothing."""
    pattern_text = conf.get("spark.redaction.regex") or SPARK_REDACTION_REGEX
    try:
        pattern: re.Pattern[str] | None = re.compile(pattern_text)
    except re.error:
        pattern = None
    wanted = set(names)
    exposed = []
    for key, value in sorted(conf.items()):
        if not key.startswith(EXECUTOR_ENV_PREFIX):
            continue
        value = str(value)
        if pattern is not None and (pattern.search(key) or pattern.search(value)):
            continue  # Spark redacts it
        name = key[len(EXECUTOR_ENV_PREFIX) :]
        if redact_text(value) != value or redact_dsn(value) != value:
            why = "its value holds a password"
        elif name in wanted and not _secret_free(value):
            why = "a sink reads a setting from it"
        elif _CREDENTIAL_NAME.search(name):
            why = "named as a credential"
        else:
            continue
        exposed.append(ExposedVariable(name, why))
    return exposed
