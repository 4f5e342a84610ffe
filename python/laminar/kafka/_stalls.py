"""How long the wire client gives a new broker connection to answer, and which bootstrap server it
tries first after one stalled (docs/kafka.md, "Failover").

A broker that accepts TCP connections but never answers (hung, black-holed behind a load
balancer, half dead) would otherwise hold every call of `laminar.kafka.log.KafkaLogClient` for its
whole bound before the next bootstrap server is tried. So a new connection has a **set-up
deadline** — connecting, TLS, ApiVersions and SASL — well below the call's bound
(`setup_timeout_s`), and a server whose set-up timed out is remembered by the process
(`StallMemory`) and tried after the others by every later connection, until it answers again.
Pure logic: the clock comes in as an argument.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

from laminar.errors import ConfigError

__all__ = [
    "SETUP_TIMEOUT_CAP_S",
    "SETUP_TIMEOUT_KEY",
    "STALLS",
    "StallMemory",
    "request_timeout_s",
    "setup_timeout_s",
]

#: The longest set-up deadline the wire client chooses itself (librdkafka's own
#: ``socket.connection.setup.timeout.ms``, 30 s by default, serves its producer).
SETUP_TIMEOUT_CAP_S = 2.0
#: The share of a call's bound one connection set-up may take when the bound is short.
SETUP_TIMEOUT_SHARE = 0.25
#: The producer setting that, when the user sets it, is the set-up deadline of the wire client too.
SETUP_TIMEOUT_KEY = "socket.connection.setup.timeout.ms"


def request_timeout_s(bound_s: float) -> float:
    """How long one request may wait for its answer in a call bounded by ``bound_s``: half the
    bound (at most 10 s), so a broker that took the connection and hangs on the request leaves
    the other half for the next server (a request time-out marks the server stalled too)."""
    return min(bound_s / 2, 10.0)


def setup_timeout_s(bound_s: float, config: Mapping[str, Any] | None = None) -> float:
    """The set-up deadline of a new connection for a call bounded by ``bound_s``: the user's
    ``socket.connection.setup.timeout.ms`` if ``config`` sets it, else
    ``min(SETUP_TIMEOUT_CAP_S, SETUP_TIMEOUT_SHARE * bound_s)`` — 2 s for the sink's default
    ``init_timeout_s`` of 30 s, so a stalled server costs 2 s, not the bound. Never more than
    ``bound_s``. `ConfigError` if the setting is not what librdkafka accepts (a whole number of
    milliseconds from 1000 to 2147483647), before the producer would refuse it."""
    value = (config or {}).get(SETUP_TIMEOUT_KEY)
    if value is None:
        return min(SETUP_TIMEOUT_CAP_S, SETUP_TIMEOUT_SHARE * bound_s)
    millis = -1  # what librdkafka takes: a whole number of milliseconds, 1000 to 2147483647
    if isinstance(value, int) and not isinstance(value, bool):
        millis = value
    elif isinstance(value, str) and value.strip().isdigit():
        millis = int(value.strip())
    chosen = millis / 1000
    if not 1000 <= millis <= 2_147_483_647:
        raise ConfigError(
            f"producer_config {SETUP_TIMEOUT_KEY}={value!r} is not a whole number of "
            "milliseconds from 1000 to 2147483647 (what librdkafka accepts); set it to how long "
            "a new broker connection may take to answer, or remove it"
        )
    return min(chosen, bound_s)


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
