"""How long the wire client gives a new broker connection and a request to answer, and which
bootstrap server it tries first after one stalled (docs/kafka.md, "Budgets" and "Stalled
servers").

A broker that accepts TCP connections but never answers (hung, black-holed behind a load
balancer, half dead) would otherwise hold every call of `laminar.kafka.log.KafkaLogClient` for its
whole bound before the next bootstrap server is tried. So a new connection has a **set-up
deadline** — connecting, TLS, ApiVersions and SASL — and each request a **request time-out**,
both well below the call's bound: the core's budget rule (`laminar._core.kafka_timeouts`,
``protocol::retry``) derives them, and a user's ``socket.connection.setup.timeout.ms`` /
``socket.timeout.ms`` win (`user_millis` reads them as librdkafka does). A server whose set-up or
request timed out is remembered by the process (`StallMemory`) and tried after the others by every
later connection, until it answers again. Pure logic: the clock comes in as an argument.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from laminar._core import KafkaTimeouts, kafka_timeouts
from laminar.errors import ConfigError

__all__ = [
    "BACKOFF_KEY",
    "BACKOFF_MAX_KEY",
    "REQUEST_TIMEOUT_KEY",
    "SETUP_TIMEOUT_KEY",
    "STALLS",
    "StallMemory",
    "request_timeout_s",
    "setup_timeout_s",
    "user_millis",
    "wire_timeouts",
]

#: The producer setting that, when the user sets it, is the set-up deadline of the wire client too.
SETUP_TIMEOUT_KEY = "socket.connection.setup.timeout.ms"
#: The producer setting that, when the user sets it, is the wire client's request time-out too.
REQUEST_TIMEOUT_KEY = "socket.timeout.ms"
#: The producer settings of librdkafka's reconnect back-off: its first step and its ceiling.
BACKOFF_KEY, BACKOFF_MAX_KEY = "reconnect.backoff.ms", "reconnect.backoff.max.ms"
#: What librdkafka accepts for each (milliseconds, inclusive), and what it is.
_RANGES = {
    SETUP_TIMEOUT_KEY: (1000, 2_147_483_647, "how long a new broker connection may take to answer"),
    REQUEST_TIMEOUT_KEY: (10, 300_000, "how long a request may take to answer"),
    BACKOFF_KEY: (0, 3_600_000, "the first wait before a broker is reconnected to"),
    BACKOFF_MAX_KEY: (0, 3_600_000, "the longest wait before a broker is reconnected to"),
}


#: A whole number as librdkafka and the user both read it: ASCII decimal, no leading zero.
_DECIMAL = re.compile(r"0|[1-9][0-9]*")


def user_millis(config: Mapping[str, Any] | None, key: str) -> int | None:
    """The user's ``key`` (``socket.timeout.ms``, ``socket.connection.setup.timeout.ms``,
    ``reconnect.backoff.ms`` or ``reconnect.backoff.max.ms``) in ``config``, in milliseconds, or
    None if not set. `ConfigError` naming it if it is not what librdkafka accepts (a whole number
    of milliseconds in its range, written in decimal), before the producer would refuse it — or,
    worse, read ``"1e3"`` as 1 ms where Python reads 1 s, or ``"010"`` as 8 ms (C's octal)."""
    value = (config or {}).get(key)
    if value is None:
        return None
    low, high, what = _RANGES[key]
    millis = -1
    if isinstance(value, int) and not isinstance(value, bool):
        millis = value
    elif isinstance(value, float) and value.is_integer():
        millis = int(value)
    elif isinstance(value, str) and _DECIMAL.fullmatch(value.strip()):
        millis = int(value.strip())
    if not low <= millis <= high:
        raise ConfigError(
            f"producer_config {key}={value!r} is not a whole number of milliseconds from {low} "
            f"to {high} (what librdkafka accepts); set it to {what}, or remove it"
        )
    return millis


def wire_timeouts(bound_s: float, config: Mapping[str, Any] | None = None) -> KafkaTimeouts:
    """The time-outs of a wire client call bounded by ``bound_s`` with no sink around it (the
    core's budget rule with ``bound_s`` as every budget), the user's settings in ``config``
    winning."""
    return kafka_timeouts(
        bound_s,
        bound_s,
        bound_s,
        socket_timeout_ms=user_millis(config, REQUEST_TIMEOUT_KEY),
        setup_timeout_ms=user_millis(config, SETUP_TIMEOUT_KEY),
    )


def request_timeout_s(bound_s: float, config: Mapping[str, Any] | None = None) -> float:
    """How long one request may wait for its answer in a call bounded by ``bound_s``
    (`wire_timeouts`), never more than the bound: a broker that took the connection and hangs on
    the request leaves the rest of the bound for the next server (a request time-out marks the
    server stalled too)."""
    return min(wire_timeouts(bound_s, config).request_s, bound_s)


def setup_timeout_s(bound_s: float, config: Mapping[str, Any] | None = None) -> float:
    """The set-up deadline of a new connection in a call bounded by ``bound_s``
    (`wire_timeouts`: the user's ``socket.connection.setup.timeout.ms`` if ``config`` sets it),
    never more than the bound: a stalled server costs a second or two, not the bound."""
    return min(wire_timeouts(bound_s, config).setup_s, bound_s)


class StallMemory:
    """The bootstrap servers (``host:port``) whose connection set-up timed out, with when.

    `order` puts them after every other server, the most recent stall last; `answered` forgets a
    server once a connection to it is set up. Thread-safe: a process's sinks share one
    (`STALLS`), so a sink's next client does not wait on the same stalled server again."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stalled: dict[str, float] = {}

    def stalled(self, address: str, now: float) -> None:
        """``address`` did not answer within its set-up deadline at time ``now``."""
        with self._lock:
            self._stalled[address] = now

    def answered(self, address: str) -> None:
        """A connection to ``address`` was set up: it is tried in its place again."""
        with self._lock:
            self._stalled.pop(address, None)

    def order(self, servers: Sequence[tuple[str, int]]) -> list[tuple[str, int]]:
        """``servers`` in the order to try them: those that never stalled (or answered since) as
        given, then the stalled ones, the longest ago first."""
        with self._lock:
            stalled = dict(self._stalled)
        never = float("-inf")
        return sorted(servers, key=lambda s: stalled.get(f"{s[0]}:{s[1]}", never))

    def clear(self) -> None:
        """Forget every stall (tests)."""
        with self._lock:
            self._stalled.clear()


#: The process's memory of stalled bootstrap servers, shared by every `KafkaLogClient`.
STALLS = StallMemory()
