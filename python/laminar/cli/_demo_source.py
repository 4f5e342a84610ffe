"""`laminar demo --way format`'s Spark side: laminar's data source with the demo's journal and
crash holds (runs in the Spark server's Python processes: the tasks' workers, the driver-side
commit).

`DemoDataSource` *is* `laminar.spark.source.LaminarDataSource` — the demo registers it under the
same name, so the query reads ``writeStream.format("laminar")`` — plus, from ``demo.*`` options
(files on this machine, no secret):

- a JSON-lines journal of each task's write and each commit (batch, partition, process, start
  and end times, rows), from which the demo reports per-batch latency;
- a hold armed once (a marker file) in one task of one batch at
  `laminar.cli._demo_spec.TASK_CRASH_POINT`: the worker writes its pid to a hold file and waits
  there, its Kafka transaction open with records and its COPY done, until the demo SIGKILLs it;
- optionally a hold armed once in the commit of a later run at a point between the decision and
  the completion (``--crash-at``), the commit process killed the same way.

Everything else — the claim, prepare, decision, completion, recovery — is laminar's own code.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from laminar import _faults
from laminar.spark.source import LaminarDataSource, LaminarStreamWriter

__all__ = ["DemoDataSource", "DemoStreamWriter"]

#: The ``demo.*`` options (the rest are format("laminar")'s own).
DEMO_OPTIONS = (
    "demo.journal",
    "demo.task.hold",
    "demo.task.batch",
    "demo.commit.hold",
    "demo.commit.point",
)


def _note(path: str, event: str, **data: Any) -> None:
    line = json.dumps({"event": event, "pid": os.getpid(), "t": time.time(), **data})
    with contextlib.suppress(OSError), open(path, "a") as f:
        f.write(line + "\n")


def _once(marker: str) -> bool:
    """True the first time on this machine (the marker file is created)."""
    try:
        with open(marker, "x") as f:
            f.write(f"{os.getpid()}\n")
    except FileExistsError:
        return False
    return True


class DemoDataSource(LaminarDataSource):
    """``format("laminar")`` for the demo's session (module docstring)."""

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__({k: v for k, v in options.items() if k not in DEMO_OPTIONS})
        self.demo = {k: v for k, v in options.items() if k in DEMO_OPTIONS}

    def streamWriter(self, schema: Any, overwrite: bool) -> Any:  # noqa: N802
        if overwrite:
            return super().streamWriter(schema, overwrite)  # refused there, as laminar's
        return DemoStreamWriter(self.sink_options, self.demo)


class DemoStreamWriter(LaminarStreamWriter):
    """laminar's writer, journalled, with the demo's holds (module docstring)."""

    def __init__(self, options: Any, demo: dict[str, str]) -> None:
        super().__init__(options)
        self.demo = demo

    def write(self, iterator: Iterator[Any]) -> Any:
        from pyspark import TaskContext  # as laminar.spark.source: in the task only

        ctx = TaskContext.get()
        batch = int(ctx.getLocalProperty("streaming.sql.batchId") or -1) if ctx else -1
        part = ctx.partitionId() if ctx is not None else -1
        journal = self.demo["demo.journal"]
        started = time.time()
        hold = self.demo.get("demo.task.hold")
        if (
            hold
            and part == 0
            and batch == int(self.demo.get("demo.task.batch", "-1"))
            and _once(hold + ".armed")
        ):
            _faults.rearm(
                "scaleout.task_before_prepare", hold_file=hold
            )  # the demo SIGKILLs this worker there
        try:
            message = super().write(iterator)
        finally:
            _faults.rearm("")
        rows = sum(r.records for r in message.results if r.kind == "postgres") or max(
            (r.records for r in message.results), default=0
        )
        _note(
            journal, "task", batch=batch, part=part, started=started, ended=time.time(), rows=rows
        )
        return message

    def commit(self, messages: list[Any], batchId: int) -> None:  # noqa: N803
        journal = self.demo["demo.journal"]
        started = time.time()
        hold = self.demo.get("demo.commit.hold")
        task_killed = Path(self.demo.get("demo.task.hold", "") + ".armed").exists()
        if hold and task_killed and _once(hold + ".armed"):  # the run after the task's kill
            _faults.rearm(self.demo["demo.commit.point"], hold_file=hold)
        try:
            super().commit(messages, batchId)
        finally:
            _faults.rearm("")
        _note(journal, "commit", batch=batchId, started=started, ended=time.time())

    def abort(self, messages: list[Any], batchId: int) -> None:  # noqa: N803
        _note(self.demo["demo.journal"], "abort", batch=batchId)
        super().abort(messages, batchId)
