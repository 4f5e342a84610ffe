"""Crash injection for the exactly-once tests: ``crash_point(name)`` kills the process with SIGKILL.

Each protocol step calls ``crash_point(point)`` with one of the core's crash points
(`laminar._core.CrashPoint`, docs/engine.md §6): the protocol machines emit them as ``reached``
commands, the sinks name theirs. Nothing happens unless the environment variable
``LAMINAR_CRASH_AT`` names that point, as ``name`` or ``name@n`` (crash on the n-th time the point
is reached in this process; several points separated by commas). A name is a point's name
(``atomic.after_decision``); a name that is no point is a `ConfigError`, in the variable as in a
call — a misspelt point never silently does nothing. The check is a test of an empty dict, so
the hooks cost nothing in production. Tests set the variable in a child process and verify
that, after a restart and recovery, every record is in each store exactly once.

``LAMINAR_CRASH_HOLD=<file>`` turns the kill into a *hold*: the process appends ``<pid> <point>``
to the file and then sleeps where it stands, with its transaction open, until something outside
kills it — e.g. a test that SIGKILLs a whole Spark Connect server in the middle of an epoch.

**Failure injection** (docs/operations.md, "Failover"): ``LAMINAR_FAIL_AT`` names client calls
(`FAIL_POINTS`) that fail with the client's own *retriable* error — what a broker down or a
coordinator moving looks like — as ``name`` (the first call), ``name@n`` (the n-th) or
``name@n:k`` (k calls from the n-th on). The call site asks `fail_point(name)` and raises its
client's error itself (librdkafka's ``KafkaException`` with a retriable ``KafkaError``, the wire
client's `laminar.kafka.conn.BrokerUnavailableError`), so the error takes the path a real one
takes. The failover tests walk every point as the crash tests walk the crash points.
"""

from __future__ import annotations

import os
import signal
import time

from laminar._core import CrashPoint
from laminar.errors import ConfigError

__all__ = [
    "ENV_VAR",
    "FAIL_ENV_VAR",
    "FAIL_POINTS",
    "HOLD_ENV_VAR",
    "crash_point",
    "fail_point",
    "point_named",
    "rearm",
    "rearm_failures",
]

ENV_VAR = "LAMINAR_CRASH_AT"
HOLD_ENV_VAR = "LAMINAR_CRASH_HOLD"
FAIL_ENV_VAR = "LAMINAR_FAIL_AT"

#: The client calls `fail_point` can fail, with what their client raises there.
FAIL_POINTS: dict[str, str] = {
    # librdkafka's producer (transactional calls run under a time bound: kafka/_calls.py)
    "kafka.init_transactions": "KafkaException(_TIMED_OUT, retriable): the coordinator moving",
    "kafka.send_offsets_to_transaction": "KafkaException(COORDINATOR_NOT_AVAILABLE, retriable)",
    "kafka.commit_transaction": "KafkaException(_TIMED_OUT, retriable): the outcome unknown",
    "kafka.abort_transaction": "KafkaException(_TIMED_OUT, retriable)",
    "kafka.stuck": "a transactional call that does not return within its bound (librdkafka "
    "#5456): the producer is given up",
    "kafka.produce": "a delivery report with _MSG_TIMED_OUT (a leader gone for too long)",
    # librdkafka's consumer of the marker group
    "kafka.committed": "KafkaException(_TIMED_OUT, retriable): the group coordinator moving",
    # the core's wire client (kafka/log.py)
    "wire.connect": "BrokerUnavailableError: connection refused",
    "wire.Metadata": "BrokerUnavailableError: no answer",
    "wire.ListOffsets": "BrokerUnavailableError: NOT_LEADER_OR_FOLLOWER",
    "wire.Fetch": "BrokerUnavailableError: NOT_LEADER_OR_FOLLOWER",
    "wire.FindCoordinator": "BrokerUnavailableError: COORDINATOR_NOT_AVAILABLE",
    "wire.OffsetFetch": "BrokerUnavailableError: NOT_COORDINATOR",
    "wire.OffsetCommit": "BrokerUnavailableError: NOT_COORDINATOR",
    "wire.EndTxn": "BrokerUnavailableError: NOT_COORDINATOR",
}


def point_named(name: str) -> CrashPoint:
    """The crash point ``name`` denotes; a `ConfigError` listing the points if none."""
    try:
        return CrashPoint.parse(name)
    except ValueError:
        known = ", ".join(p.name for p in CrashPoint.all())
        raise ConfigError(f"{name!r} is not a crash point; the points are: {known}") from None


def _parse(spec: str) -> dict[str, int]:
    points: dict[str, int] = {}
    for item in filter(None, (s.strip() for s in spec.split(","))):
        name, _, nth = item.partition("@")
        try:
            count = int(nth) if nth else 1
        except ValueError:
            raise ConfigError(
                f"{ENV_VAR}: {item!r} is not <point> or <point>@<n> (n: which occurrence)"
            ) from None
        points[point_named(name.strip()).name] = count
    return points


_armed: dict[str, int] = _parse(os.environ.get(ENV_VAR, ""))
_hold_file: list[str] = [os.environ.get(HOLD_ENV_VAR, "")]


def crash_point(point: CrashPoint | str) -> None:
    """SIGKILL this process here if ``LAMINAR_CRASH_AT`` selects this point (and occurrence).

    ``point`` is a `CrashPoint` or its name; a name that is no point is a `ConfigError` (checked
    only while some point is armed, so production pays one dict test)."""
    if not _armed:
        return
    name = point.name if isinstance(point, CrashPoint) else point_named(point).name
    remaining = _armed.get(name)
    if remaining is None:
        return
    if remaining > 1:
        _armed[name] = remaining - 1
        return
    del _armed[name]
    if _hold_file[0]:
        with open(_hold_file[0], "a") as f:
            f.write(f"{os.getpid()} {name}\n")
        while True:  # until killed from outside
            time.sleep(3600)
    os.kill(os.getpid(), signal.SIGKILL)


def _parse_failures(spec: str) -> dict[str, list[int]]:
    """``{name: [calls to skip, calls to fail]}`` of a ``LAMINAR_FAIL_AT`` value."""
    out: dict[str, list[int]] = {}
    for item in filter(None, (s.strip() for s in spec.split(","))):
        name, _, when = item.partition("@")
        name = name.strip()
        if name not in FAIL_POINTS:
            raise ConfigError(
                f"{FAIL_ENV_VAR}: {name!r} is not a fail point; the points are: "
                f"{', '.join(FAIL_POINTS)}"
            )
        nth, _, count = when.partition(":")
        try:
            first, times = int(nth) if nth else 1, int(count) if count else 1
        except ValueError:
            first = times = 0
        if first < 1 or times < 1:
            raise ConfigError(
                f"{FAIL_ENV_VAR}: {item!r} is not <point>, <point>@<n> or <point>@<n>:<k> "
                "(n: the first call that fails, k: how many fail)"
            )
        out[name] = [first - 1, times]
    return out


_failing: dict[str, list[int]] = _parse_failures(os.environ.get(FAIL_ENV_VAR, ""))
#: The failures injected so far, in order (tests read it to see that each point was reached).
injected: list[str] = []


def fail_point(name: str) -> bool:
    """Whether this call of client call ``name`` (one of `FAIL_POINTS`) must fail, as
    ``LAMINAR_FAIL_AT`` says; the caller then raises its client's retriable error. Costs one
    dict test when nothing is armed."""
    if not _failing:
        return False
    state = _failing.get(name)
    if state is None:
        return False
    if state[0] > 0:
        state[0] -= 1
        return False
    state[1] -= 1
    if state[1] <= 0:
        del _failing[name]
    injected.append(name)
    return True


def rearm_failures(spec: str) -> None:
    """Replace the armed fail points (``LAMINAR_FAIL_AT`` syntax) and forget what was injected."""
    _failing.clear()
    _failing.update(_parse_failures(spec))
    injected.clear()


def rearm(spec: str, *, hold_file: str | None = None) -> None:
    """Replace the armed points (for tests that drive one process through several crashes);
    with ``hold_file``, a reached point holds instead of killing (see the module's doc)."""
    _armed.clear()
    _armed.update(_parse(spec))
    _hold_file[0] = hold_file or ""
