"""Crash injection for the exactly-once tests: ``crash_point(name)`` kills the process with SIGKILL.

Each protocol step calls ``crash_point("<protocol>.<step>")``. Nothing happens unless the
environment variable ``LAMINAR_CRASH_AT`` names that point, as ``name`` or ``name@n`` (crash on
the n-th time the point is reached in this process; several points separated by commas). The
check is a test of an empty dict, so the hooks cost nothing in production. Tests set the variable
in a child process and verify that, after a restart and recovery, every record is in each store
exactly once.
"""

from __future__ import annotations

import os
import signal

__all__ = ["ENV_VAR", "crash_point", "rearm"]

ENV_VAR = "LAMINAR_CRASH_AT"


def _parse(spec: str) -> dict[str, int]:
    points: dict[str, int] = {}
    for item in filter(None, (s.strip() for s in spec.split(","))):
        name, _, nth = item.partition("@")
        points[name] = int(nth) if nth else 1
    return points


_armed: dict[str, int] = _parse(os.environ.get(ENV_VAR, ""))


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
    os.kill(os.getpid(), signal.SIGKILL)


def rearm(spec: str) -> None:
    """Replace the armed points (for tests that drive one process through several crashes)."""
    _armed.clear()
    _armed.update(_parse(spec))
