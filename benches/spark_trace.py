"""Where a ``format("laminar")`` batch's time goes, from a ``LAMINAR_TRACE`` file
(`laminar._trace`; docs/benchmarks.md, "format('laminar'): where a batch's time goes"):

    python -m benches.spark_trace /tmp/trace.jsonl

A benchmark marks each query it starts (``bench way``, with the way, rows and shape) and its end
(``bench way done``); between two such marks this prints, for every ``format('laminar')`` query,
each step in seconds from ``start()``: the driver-side processes (their start, laminar's import,
the writer's creation, the commit), and the tasks' steps (first and last task, and each step's
shortest and longest among the tasks). Everything not listed is Spark's.
"""

from __future__ import annotations

import itertools
import json
import statistics
import sys
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

__all__ = ["batches", "main"]

#: A task's steps, each until the next one: (label, from stage, to stage).
TASK_STEPS = (
    ("task: epoch base read (kept connection)", "write called", "epoch base read"),
    ("task: partition lock, claim", "epoch base read", "peek_partition"),
    ("task: waiting for the first Arrow batch (Spark)", "peek_partition", "init_sink"),
    ("task: participants' init (Kafka producer)", "init_sink", "sink_begin"),
    ("task: write (encode, produce / COPY)", "write_partition", "sink_prepare"),
    ("task: prepare (marker, flush; PREPARE)", "sink_prepare", "release_participants"),
    ("task: release", "release_participants", "task done"),
)


def _first(events: list[dict[str, Any]], stage: str) -> float | None:
    return next((e["t"] for e in events if e["stage"] == stage), None)


def _steps(window: list[dict[str, Any]], t0: float, end: float) -> list[tuple[str, Any]]:
    """One batch's steps (`batches`) from the marks of ``window``, in seconds from ``t0``."""
    by_pid: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for e in window:
        by_pid[e["pid"]].append(e)
    steps: list[tuple[str, Any]] = []
    driver_stages = ("data source created", "stream writer created", "commit called")
    drivers = [
        p for p, es in by_pid.items() if any(_first(es, s) is not None for s in driver_stages)
    ]
    for n, pid in enumerate(sorted(drivers, key=lambda p: by_pid[p][0]["t"])):
        es = by_pid[pid]
        role = "commit" if _first(es, "commit called") else ("writer" if n == 0 else "other")
        started = _first(es, "process_started")
        if started is not None:
            steps.append((f"driver process {n + 1} ({role}) started", started - t0))
        imported = _first(es, "imported laminar.spark.source")
        if started is not None and imported is not None:
            steps.append((f"  import laminar.spark.source ({role})", imported - started))
        made = _first(es, "data source created") or imported
        created = _first(es, "stream writer created")
        if made is not None and created is not None:
            steps.append((f"  writer created ({role})", created - made))
        called, done = _first(es, "commit called"), _first(es, "commit done")
        if created is not None and called is not None:
            steps.append(("  the commit's imports (the protocol, the sinks)", called - created))
        if called is not None and done is not None:
            steps.append(("  commit", done - called))
    tasks = [es for es in by_pid.values() if _first(es, "write called") is not None]
    if tasks:
        starts = [_first(es, "write called") or 0.0 for es in tasks]
        ends = [_first(es, "task done") or 0.0 for es in tasks]
        steps.append(("tasks: first write called", min(starts) - t0))
        steps.append(("tasks: last task done", max(ends) - t0))
        for label, a, b in TASK_STEPS:
            spans = []
            for es in tasks:
                ta, tb = _first(es, a), _first(es, b)
                if ta is not None and tb is not None:
                    spans.append(tb - ta)
            if spans:
                steps.append((f"  {label}", (min(spans), statistics.median(spans), max(spans))))
    if end != float("inf"):
        steps.append(("the query's end", end - t0))
    return steps


def batches(lines: Iterable[str]) -> list[dict[str, Any]]:
    """Each ``format('laminar')`` batch of the trace: its label and its steps (name, seconds
    from the query's start — or, for a query's later batches, from the start of the batch's
    writer process — or a (shortest, median, longest) span among its tasks)."""
    events = sorted((json.loads(line) for line in lines if line.strip()), key=lambda e: e["t"])
    marks = [e for e in events if e["stage"] in ("bench way", "bench way done")]
    found: list[dict[str, Any]] = []
    for i, mark in enumerate(marks):
        way = str(mark.get("way", ""))
        if mark["stage"] != "bench way" or "format('laminar')" not in way:
            continue
        end = marks[i + 1]["t"] if i + 1 < len(marks) else float("inf")
        window = [e for e in events if mark["t"] <= e["t"] <= end]
        # a query's batches: each begins where a process creates the batch's data source and
        # writer (Spark reuses that process for the run's later batches)
        writers = {
            e["pid"]
            for e in window
            if e["stage"] == "stream writer created" and not e.get("commit_runner")
        }
        bounds = sorted(
            e["t"] for e in window if e["stage"] == "data source created" and e["pid"] in writers
        )
        edges = [mark["t"], *bounds[1:], end]
        for n, (a, b) in enumerate(itertools.pairwise(edges)):
            part = [e for e in window if a <= e["t"] < b]
            label = f"{way} {mark.get('rows', '')} {mark.get('shape', '')}".strip()
            found.append(
                {
                    "label": label + (f", batch {n + 1}" if len(edges) > 2 else ""),
                    "steps": _steps(part, a, b),
                }
            )
    return found


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__)
        return 2
    for batch in batches(Path(argv[0]).read_text().splitlines()):
        print(batch["label"])
        for name, value in batch["steps"]:
            if isinstance(value, tuple):
                low, mid, high = value
                print(f"  {name:<58} {low:6.3f} .. {high:6.3f} s (median {mid:.3f})")
            else:
                print(f"  {name:<58} {value:6.3f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
