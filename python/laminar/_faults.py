"""Crash injection for the exactly-once tests: ``crash_point(name)`` kills the process with SIGKILL.

Each protocol step calls ``crash_point("<protocol>.<step>")``. Nothing happens unless the
environment variable ``LAMINAR_CRASH_AT`` names that point, as ``name`` or ``name@n`` (crash on
the n-th time the point is reached in this process; several points separated by commas). The
check is a test of an empty dict, so the hooks cost nothing in production. Tests set the variable
in a child process and verify that, after a restart and recovery, every record is in each store
exactly once.

``LAMINAR_CRASH_HOLD=<file>`` turns the kill into a *hold*: the process appends ``<pid> <point>``
to the file and then sleeps where it stands, with its transaction open, until something outside
kills it — e.g. a test that SIGKILLs a whole Spark Connect server in the middle of an epoch.
"""

from __future__ import annotations

import os
import signal
import time

__all__ = ["ENV_VAR", "HOLD_ENV_VAR", "crash_point", "rearm"]

ENV_VAR = "LAMINAR_CRASH_AT"
HOLD_ENV_VAR = "LAMINAR_CRASH_HOLD"


def _parse(spec: str) -> dict[str, int]:
    points: dict[str, int] = {}
    for item in filter(None, (s.strip() for s in spec.split(","))):
        name, _, nth = item.partition("@")
        points[name] = int(nth) if nth else 1
    return points


_armed: dict[str, int] = _parse(os.environ.get(ENV_VAR, ""))
_hold_file: list[str] = [os.environ.get(HOLD_ENV_VAR, "")]


def crash_point(name: str) -> None:
    """SIGKILL this process here if ``LAMINAR_CRASH_AT`` selects this point (and occurrence)."""
    if not _armed:
        return
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
