"""Where the time of a ``format("laminar")`` task and commit goes (docs/benchmarks.md, "Where a
task's time goes"): timestamps at the steps of the data source's paths, for measuring, off
unless asked for.

``mark(stage)`` logs ``trace <stage> pid=<pid> t=<seconds>`` at DEBUG on the ``laminar.trace``
logger and, when the environment variable ``LAMINAR_TRACE`` names a file, appends the same as
one JSON line to it (Spark's Python workers inherit the server's environment, and their
logging is not configured: the file is how a benchmark collects them). The clock is
``CLOCK_BOOTTIME``, the clock ``/proc/<pid>/stat`` counts a process's start time on, so a
worker's start (``process_started``) and the steps of any process line up on one axis.
Nothing secret is written: stage names, process ids, partitions, batch ids, row counts.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from typing import Any

__all__ = ["ENV", "mark", "now", "process_started"]

#: The environment variable naming the file the marks are appended to.
ENV = "LAMINAR_TRACE"

log = logging.getLogger("laminar.trace")

#: Processes whose start was traced already (one ``process_started`` line each).
_started: set[int] = set()


def now() -> float:
    """Seconds on ``CLOCK_BOOTTIME`` (the clock of ``/proc/<pid>/stat``'s start time)."""
    return time.clock_gettime(time.CLOCK_BOOTTIME)


def process_started(pid: int | None = None) -> float | None:
    """When the process started (fork or exec), on the clock of `now`; None if unknown."""
    try:
        with open(f"/proc/{pid or os.getpid()}/stat", encoding="ascii") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def enabled() -> bool:
    """Whether marks are kept anywhere (the env file, or the logger at DEBUG)."""
    return bool(os.environ.get(ENV)) or log.isEnabledFor(logging.DEBUG)


def mark(stage: str, **fields: Any) -> None:
    """Record that this process reached ``stage`` now (module docstring); the first mark of a
    process also records when the process started."""
    if not enabled():
        return
    pid = os.getpid()
    if pid not in _started:
        _started.add(pid)
        started = process_started(pid)
        if started is not None:
            main = getattr(sys.modules.get("__main__"), "__spec__", None)
            what = {"ppid": os.getppid(), "main": getattr(main, "name", None) or sys.argv[:1]}
            _emit("process_started", pid, started, what)
    _emit(stage, pid, now(), fields)


def _emit(stage: str, pid: int, at: float, fields: dict[str, Any]) -> None:
    log.debug("trace %s pid=%d t=%.3f %s", stage, pid, at, fields)
    path = os.environ.get(ENV)
    if not path:
        return
    line = json.dumps({"stage": stage, "pid": pid, "t": round(at, 4), **fields}, default=str)
    try:
        with open(path, "a", encoding="utf-8") as f:
            f.write(line + "\n")
    except OSError as e:  # a trace must never fail the write it observes
        log.debug("trace: cannot append to %s: %s", path, e)
