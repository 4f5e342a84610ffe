"""The Spark benchmarks' CPU clock (benches/proc_stats.py) on real process trees: a process reaped
inside a window is billed only what it spent in that window, and one born inside it is billed
whole — a CI run once billed a foreachBatch runner stopped after its query to the next query."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from benches.proc_stats import CpuClock, tree

# The child burns CPU (process time, whatever the machine's load) and the parent reaps it.
_CHILD = """
import os, sys, time
def burn(seconds):
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass
ready, go = sys.argv[1], sys.argv[2]
burn(float(sys.argv[3]))
open(ready, "w").close()
while not os.path.exists(go):
    time.sleep(0.005)
burn(float(sys.argv[4]))
"""
_PARENT = """
import os, subprocess, sys, time
spawn, child, ready, go, before, after = sys.argv[1:]
while not os.path.exists(spawn):
    time.sleep(0.005)
subprocess.run([sys.executable, "-c", child, ready, go, before, after], check=True)
open(spawn + ".reaped", "w").close()
time.sleep(600)
"""


def _parent(where: Path, before: float, after: float) -> subprocess.Popen[bytes]:
    names = [str(where / n) for n in ("spawn", "ready", "go")]
    return subprocess.Popen(
        [
            sys.executable,
            "-c",
            _PARENT,
            names[0],
            _CHILD,
            names[1],
            names[2],
            str(before),
            str(after),
        ]
    )


def _wait_for(path: Path) -> None:
    deadline = time.monotonic() + 60
    while not path.exists():
        assert time.monotonic() < deadline, f"{path.name} never appeared"
        time.sleep(0.005)


def test_a_process_reaped_in_the_window_is_billed_only_what_it_spent_in_it(tmp_path: Path) -> None:
    parent = _parent(tmp_path, before=0.4, after=0.2)
    try:
        (tmp_path / "spawn").touch()
        _wait_for(tmp_path / "ready")  # the child has spent 0.4 s (and its start-up) already
        child = [pid for pid in tree(parent.pid) if pid != parent.pid]
        assert len(child) == 1
        clock = CpuClock((parent.pid,))
        clock.start()
        (tmp_path / "go").touch()
        _wait_for(tmp_path / "spawn.reaped")
        assert child[0] not in tree(parent.pid)
        spent = clock.seconds()
    finally:
        parent.kill()
        parent.wait()
    # 0.2 s burnt in the window, and a few ticks of exiting; before the fix, 0.6 s and more
    assert 0.15 <= spent <= 0.35, spent


def test_a_process_born_and_reaped_in_the_window_is_billed_whole(tmp_path: Path) -> None:
    parent = _parent(tmp_path, before=0.1, after=0.2)
    try:
        clock = CpuClock((parent.pid,))
        clock.start()
        (tmp_path / "spawn").touch()
        _wait_for(tmp_path / "ready")
        (tmp_path / "go").touch()
        _wait_for(tmp_path / "spawn.reaped")
        spent = clock.seconds()
    finally:
        parent.kill()
        parent.wait()
    # 0.3 s burnt, and the child interpreter's start-up and exit
    assert 0.28 <= spent <= 0.8, spent
