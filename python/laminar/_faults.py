"""Crash injection for the exactly-once tests: ``crash_point(name)`` kills the process with SIGKILL.

Each protocol step calls ``crash_point(point)`` with one of the core's crash points
(`laminar._core.CrashPoint`, docs/engine.md §6): the protocol machines emit them as ``reached``
commands, the sinks name theirs. Nothing happens unless the environment variable
``LAMINAR_CRASH_AT`` names that point, as ``name`` or ``name@n`` (crash on the n-th time the point
is reached in this process; several points separated by commas). A name is a point's name
(``atomic.after_decision``) or its legacy numbered name (``atomic.step7``); a name that is no
point is a `ConfigError`, in the variable as in a call — a misspelt point never silently does
nothing. The check is a test of an empty dict, so the hooks cost nothing in production. Tests set
the variable in a child process and verify that, after a restart and recovery, every record is in
each store exactly once.

``LAMINAR_CRASH_HOLD=<file>`` turns the kill into a *hold*: the process appends ``<pid> <point>``
to the file and then sleeps where it stands, with its transaction open, until something outside
kills it — e.g. a test that SIGKILLs a whole Spark Connect server in the middle of an epoch.
"""

from __future__ import annotations

import os
import signal
import time

from laminar._core import CrashPoint
from laminar.errors import ConfigError

__all__ = ["ENV_VAR", "HOLD_ENV_VAR", "crash_point", "point_named", "rearm"]

ENV_VAR = "LAMINAR_CRASH_AT"
HOLD_ENV_VAR = "LAMINAR_CRASH_HOLD"


def point_named(name: str) -> CrashPoint:
    """The crash point ``name`` (or its legacy name) denotes; a `ConfigError` listing the
    points if none."""
    try:
        return CrashPoint.parse(name)
    except ValueError:
        known = ", ".join(p.name for p in CrashPoint.all())
        raise ConfigError(
            f"{name!r} is not a crash point; the points are: {known} (and the legacy names "
            f"{', '.join(CrashPoint.legacy_names())})"
        ) from None


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


def rearm(spec: str, *, hold_file: str | None = None) -> None:
    """Replace the armed points (for tests that drive one process through several crashes);
    with ``hold_file``, a reached point holds instead of killing (see the module's doc)."""
    _armed.clear()
    _armed.update(_parse(spec))
    _hold_file[0] = hold_file or ""
