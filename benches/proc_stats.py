"""What the Spark benchmarks read of the processes under a server, from ``/proc``: a process
tree, its CPU time in a window (user + system, with that of exited children the tree reaped,
each process counted in the window it spent it), the resident memory of its Python processes,
and its CPU affinity (``taskset``'s system call)."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CpuClock", "pinned", "python_rss", "tree"]

_TICK = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> list[str] | None:
    """``/proc/<pid>/stat``'s fields from the state on (field 3 is index 0)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def tree(root: int) -> list[int]:
    """``root`` and every descendant process alive now."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (fields := _stat(int(entry))) is not None:
            children.setdefault(int(fields[1]), []).append(int(entry))
    found, todo = [root], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _cpu(pid: int) -> tuple[int, float, int] | None:
    """(start time in ticks, CPU seconds of the process and of its reaped children, parent)."""
    fields = _stat(pid)
    if fields is None:
        return None
    ticks = sum(int(fields[i]) for i in (11, 12, 13, 14))  # utime stime cutime cstime
    return int(fields[19]), ticks / _TICK, int(fields[1])


@dataclass
class CpuClock:
    """CPU seconds spent by the process trees under ``roots`` between `start` and `seconds`.

    A process's figure is its own time plus its reaped children's, so the sum over the trees
    counts each process once, in whichever window it spent the time:

    - alive at both ends: what it spent in between;
    - born in between: its whole time, alive, or in its parent's reaped-children time;
    - alive at the start and reaped in between by its parent, alive at the end: that parent's
      reaped-children time took its whole life, so what it had spent at the start is taken
      off. Spark's Python processes end this way right after a query ends (the foreachBatch
      runner is stopped when the server hears of the query's end), so without it one query's
      runner was billed to the next. One whose parent went too was re-parented out of the
      trees: its time after the start is lost, never billed twice. (A parent that ignores
      SIGCHLD leaves the kernel to reap its children, billing no one: nothing under a Spark
      server, a broker or PostgreSQL does.)

    A snapshot is read until the trees hold the same processes before and after it: a child
    reaped between the read of its parent and its own would be in neither."""

    roots: tuple[int, ...]
    _before: dict[int, tuple[int, float, int]] | None = None

    def _pids(self) -> set[int]:
        return {pid for root in self.roots for pid in tree(root)}

    def _snapshot(self) -> dict[int, tuple[int, float, int]]:
        pids = self._pids()
        for _ in range(50):
            seen = {pid: cpu for pid in pids if (cpu := _cpu(pid)) is not None}
            after = self._pids()
            if after == pids:  # a root that is gone stays listed, unread
                return seen
            pids = after
            time.sleep(0.01)
        return seen  # the trees kept changing for half a second: the closest reading

    def start(self) -> None:
        self._before = self._snapshot()

    def seconds(self) -> float:
        assert self._before is not None, "start() first"
        after = self._snapshot()
        total = 0.0
        for pid, (started, spent, _) in after.items():
            before = self._before.get(pid)
            same = before is not None and before[0] == started
            total += spent - (before[1] if same and before is not None else 0.0)
        for pid, (started, spent, parent) in self._before.items():
            now = after.get(pid)
            reaped = now is None or now[0] != started
            if reaped and pid not in self.roots and parent in after:
                total -= spent  # counted whole in its parent's reaped-children time
        return total


def python_rss(root: int) -> tuple[int, int]:
    """Resident bytes of the Python processes under ``root`` (Spark's workers and daemons): in
    all, and of the largest."""
    total = largest = 0
    for pid in tree(root)[1:]:
        try:
            if "python" not in Path(f"/proc/{pid}/comm").read_text():
                continue
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    rss = int(line.split()[1]) * 1024
                    total += rss
                    largest = max(largest, rss)
        except OSError:
            continue
    return total, largest


def _threads(pids: Iterable[int]) -> Iterator[int]:
    for pid in pids:
        with contextlib.suppress(OSError):
            yield from (int(t) for t in os.listdir(f"/proc/{pid}/task"))


@contextlib.contextmanager
def pinned(root: int, cpus: set[int]) -> Iterator[None]:
    """Every thread of the tree under ``root`` on ``cpus`` (``taskset -a -p``), and the children
    it forks from then on (they inherit it); every thread back on all of the machine's CPUs
    after."""
    everything = os.sched_getaffinity(0)
    for tid in _threads(tree(root)):
        with contextlib.suppress(OSError):
            os.sched_setaffinity(tid, cpus)
    try:
        yield
    finally:
        for tid in _threads(tree(root)):
            with contextlib.suppress(OSError):
                os.sched_setaffinity(tid, everything)
