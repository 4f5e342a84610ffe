"""The KafkaSink's client configuration: what Laminar adds, what it refuses, what it redacts.

The user's ``producer_config`` passes through as given. Laminar adds only what exactly-once
requires — ``transactional.id``, ``enable.idempotence=true``, ``acks=all`` — plus librdkafka's
statistics (``statistics.interval.ms``, which reports the producer id and epoch), its own
callbacks, chained to the user's (``stats_cb``, ``error_cb``, ``on_delivery``), and the client
time-outs derived from the sink's budgets (`client_timeouts`, the core's rule: docs/kafka.md,
"Budgets"), each only where the user set none. Settings that would break exactly-once are refused
by name, before any client is created.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from laminar._core import KafkaTimeouts, kafka_timeouts
from laminar._redact import is_secret_key, redact_config
from laminar.errors import ConfigError
from laminar.kafka._stalls import (
    BACKOFF_KEY,
    BACKOFF_MAX_KEY,
    REQUEST_TIMEOUT_KEY,
    SETUP_TIMEOUT_KEY,
    user_millis,
)

__all__ = [
    "DEFAULT_STATISTICS_INTERVAL_MS",
    "build_producer_config",
    "client_timeouts",
    "consumer_config",
    "secret_values",
    "validate_producer_config",
]

#: How often librdkafka reports its statistics when the user does not say: often enough that the
#: producer id/epoch are known within a fraction of a second after ``init_transactions``.
DEFAULT_STATISTICS_INTERVAL_MS = 100

#: librdkafka's default ``message.max.bytes`` (the client-side limit on one record).
DEFAULT_MESSAGE_MAX_BYTES = 1_000_000

_TRUE = frozenset({"true", "1", "yes", "on"})
_FALSE = frozenset({"false", "0", "no", "off"})
_ACKS_ALL = frozenset({"all", "-1"})

# Settings a consumer (the marker reader) shares with the producer: where and how to connect.
_CONNECTION_PREFIXES = (
    "security.",
    "sasl.",
    "ssl.",
    "ssl_",
    "socket.",
    "broker.",
    "reconnect.",
    "retry.",
    "connections.",
    "api.version.",
    "client.",
    "topic.metadata.",
    "metadata.",
    "enable.ssl.",
    "enable.sasl.",
    "https.",
    "resolve_cb",
)
_CONNECTION_KEYS = frozenset({"bootstrap.servers", "oauth_cb", "logger", "debug", "log_level"})
#: Derived settings a consumer does not take (librdkafka's ``request.timeout.ms`` is the
#: producer's acknowledgement time-out).
_PRODUCER_ONLY = frozenset({"request.timeout.ms", "retry.backoff.ms"})


def _flag(value: Any) -> bool | None:
    """A librdkafka boolean as Python sees it (``None``: not a boolean)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value != 0
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    return None


def validate_producer_config(
    producer_config: Mapping[str, Any] | None,
    *,
    bootstrap_servers: str,
    transactional_id: str,
    transaction_timeout_ms: int | None = None,
) -> dict[str, Any]:
    """Check the user's settings; return a copy. Raises `ConfigError` naming the setting."""
    if producer_config is None:
        return {}
    if not isinstance(producer_config, Mapping):
        raise ConfigError(
            f"producer_config must be a dict of librdkafka settings, not "
            f"{type(producer_config).__name__}"
        )
    config = dict(producer_config)
    for key in config:
        if not isinstance(key, str):
            raise ConfigError(f"producer_config keys must be strings, got {key!r}")

    def refuse(key: str, why: str) -> ConfigError:
        shown = redact_config({key: config[key]})[key]
        return ConfigError(f"producer_config {key}={shown!r} is refused: {why}")

    for key in ("enable.idempotence",):
        if key in config and _flag(config[key]) is not True:
            raise refuse(key, "exactly-once needs the idempotent producer; remove the setting")
    for key in ("acks", "request.required.acks"):
        if key in config and str(config[key]).strip().lower() not in _ACKS_ALL:
            raise refuse(
                key, "exactly-once needs every in-sync replica to acknowledge; use acks=all"
            )
    if "transactional.id" in config and str(config["transactional.id"]) != transactional_id:
        raise refuse(
            "transactional.id",
            f"it differs from the sink's transactional_id {transactional_id!r}; set it with "
            "KafkaSink(transactional_id=...) only",
        )
    for key in ("bootstrap.servers", "metadata.broker.list"):
        if key in config and str(config[key]) != bootstrap_servers:
            raise refuse(key, f"it differs from KafkaSink(bootstrap_servers={bootstrap_servers!r})")
    if "statistics.interval.ms" in config:
        try:
            interval = int(config["statistics.interval.ms"])
        except (TypeError, ValueError):
            raise refuse("statistics.interval.ms", "it is not an integer") from None
        if interval <= 0:
            raise refuse(
                "statistics.interval.ms",
                "Laminar reads the producer id and epoch from librdkafka's statistics (they are "
                "recorded in each prepared transaction); remove the setting or make it positive",
            )
    user_millis(config, SETUP_TIMEOUT_KEY)  # a ConfigError naming either if it is no duration
    user_millis(config, REQUEST_TIMEOUT_KEY)
    if (
        transaction_timeout_ms is not None
        and "transaction.timeout.ms" in config
        and int(config["transaction.timeout.ms"]) != transaction_timeout_ms
    ):
        raise refuse(
            "transaction.timeout.ms",
            f"it conflicts with KafkaSink(transaction_timeout_ms={transaction_timeout_ms})",
        )
    for key in ("on_delivery", "delivery.report.callback", "stats_cb", "error_cb"):
        if key in config and config[key] is not None and not callable(config[key]):
            raise refuse(key, "it must be a callable")
    # a socket.timeout.ms librdkafka refuses beside the transaction time-out, named now
    client_timeouts(
        config,
        init_timeout_s=30.0,
        commit_timeout_s=30.0,
        flush_timeout_s=120.0,
        transaction_timeout_ms=transaction_timeout_ms,
    )
    return config


def client_timeouts(
    config: Mapping[str, Any],
    *,
    init_timeout_s: float,
    commit_timeout_s: float,
    flush_timeout_s: float,
    transaction_timeout_ms: int | None,
) -> KafkaTimeouts:
    """Every client time-out of a sink with these budgets (the core's one rule:
    `laminar._core.kafka_timeouts`, docs/kafka.md "Budgets"); the user's ``socket.timeout.ms``,
    ``socket.connection.setup.timeout.ms``, ``reconnect.backoff.ms``,
    ``reconnect.backoff.max.ms`` and ``transaction.timeout.ms`` in ``config`` win.
    `ConfigError` naming a setting that cannot work."""
    if transaction_timeout_ms is None and config.get("transaction.timeout.ms") is not None:
        try:
            transaction_timeout_ms = int(config["transaction.timeout.ms"])
        except (TypeError, ValueError):
            raise ConfigError(
                f"producer_config transaction.timeout.ms={config['transaction.timeout.ms']!r} "
                "is not a whole number of milliseconds"
            ) from None
    return kafka_timeouts(
        init_timeout_s,
        commit_timeout_s,
        flush_timeout_s,
        transaction_timeout_ms,
        socket_timeout_ms=user_millis(config, REQUEST_TIMEOUT_KEY),
        setup_timeout_ms=user_millis(config, SETUP_TIMEOUT_KEY),
        reconnect_backoff_ms=user_millis(config, BACKOFF_KEY),
        reconnect_backoff_max_ms=user_millis(config, BACKOFF_MAX_KEY),
    )


def build_producer_config(
    user_config: Mapping[str, Any],
    *,
    bootstrap_servers: str,
    transactional_id: str,
    transaction_timeout_ms: int | None,
    stats_cb: Callable[[str], None],
    error_cb: Callable[[Any], None],
    on_delivery: Callable[[Any, Any], None],
    timeouts: KafkaTimeouts | None = None,
) -> dict[str, Any]:
    """The producer's configuration: the user's settings plus what exactly-once requires, and
    the client time-outs of ``timeouts`` (`client_timeouts`) where the user set none.

    The user's own ``stats_cb``/``error_cb``/``on_delivery`` are called after Laminar's.
    Without a user ``on_delivery``, ``delivery.report.only.error`` defaults to true: Laminar
    needs to hear about failed records only, and a Python call per acknowledged record would cost
    about a tenth of the produce throughput.
    """
    config = dict(user_config)
    user_stats = config.pop("stats_cb", None)
    user_error = config.pop("error_cb", None)
    user_delivery = config.pop("on_delivery", None) or config.pop("delivery.report.callback", None)
    config.pop("delivery.report.callback", None)
    config["bootstrap.servers"] = bootstrap_servers
    config.pop("metadata.broker.list", None)
    config["transactional.id"] = transactional_id
    config["enable.idempotence"] = True
    if "request.required.acks" not in config:
        config["acks"] = "all"
    if transaction_timeout_ms is not None:
        config["transaction.timeout.ms"] = transaction_timeout_ms
    config.setdefault("statistics.interval.ms", DEFAULT_STATISTICS_INTERVAL_MS)
    _derive(config, timeouts, producer=True)
    config["stats_cb"] = _chain1(stats_cb, user_stats)
    config["error_cb"] = _chain1(error_cb, user_error)
    if user_delivery is None:
        config.setdefault("delivery.report.only.error", True)
        config["on_delivery"] = on_delivery
    else:
        config["on_delivery"] = _chain2(on_delivery, user_delivery)
    return config


def consumer_config(
    user_config: Mapping[str, Any],
    *,
    bootstrap_servers: str,
    group_id: str,
    timeouts: KafkaTimeouts | None = None,
) -> dict[str, Any]:
    """A consumer configuration (for reading the marker group) that connects the way the
    producer does: the connection and security settings of ``user_config`` only, and the client
    time-outs of ``timeouts`` where the user set none (a marker read from a hung group
    coordinator is given up, and the coordinator looked up again, as the producer's are)."""
    config = {
        key: value
        for key, value in user_config.items()
        if key in _CONNECTION_KEYS or key.startswith(_CONNECTION_PREFIXES)
    }
    config.update(
        {
            "bootstrap.servers": bootstrap_servers,
            "group.id": group_id,
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": False,
        }
    )
    _derive(config, timeouts, producer=False)
    return config


def _derive(config: dict[str, Any], timeouts: KafkaTimeouts | None, *, producer: bool) -> None:
    """The settings the core derived from the sink's budgets, where the user set none (the
    core's rule took the user's own into account: `client_timeouts`)."""
    if timeouts is None:
        return
    for key, millis in timeouts.librdkafka_settings():
        if producer or key not in _PRODUCER_ONLY:
            config.setdefault(key, millis)


def secret_values(config: Mapping[str, Any]) -> tuple[str, ...]:
    """The values of every secret setting (to scrub from any text that might echo them)."""
    return tuple(
        str(value)
        for key, value in config.items()
        if is_secret_key(str(key)) and value is not None and not callable(value)
    )


def _chain1(ours: Callable[[Any], None], theirs: Any) -> Callable[[Any], None]:
    if theirs is None:
        return ours

    def both(arg: Any) -> None:
        ours(arg)
        theirs(arg)

    return both


def _chain2(ours: Callable[[Any, Any], None], theirs: Any) -> Callable[[Any, Any], None]:
    def both(err: Any, msg: Any) -> None:
        ours(err, msg)
        theirs(err, msg)

    return both
