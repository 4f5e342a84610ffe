"""`laminar demo`'s writer side: the foreachBatch function that runs in the Spark server's
Python worker and journals what it saw (split from `laminar.cli.demo`)."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from typing import Any

from laminar import _faults

# -- the writer side (runs in the Spark server's Python worker) ----------------------------------


class _FileHandler(logging.Handler):
    def __init__(self, journal: DemoForeachBatch) -> None:
        super().__init__(logging.WARNING)
        self.journal = journal

    def emit(self, record: logging.LogRecord) -> None:
        with contextlib.suppress(Exception):
            self.journal.note("log", logger=record.name, message=record.getMessage())


class DemoForeachBatch:
    """The demo's foreachBatch function: laminar's (``inner``) plus a journal of what happened
    in this worker (a JSON line per batch, laminar's warnings — recovery included) and, for the
    first run, the crash point armed to *hold* (the demo kills the worker from outside)."""

    def __init__(
        self, inner: Any, journal_path: str, crash_point: str | None, hold_file: str | None
    ) -> None:
        self.inner = inner
        self.journal_path = journal_path
        self.crash_point = crash_point
        self.hold_file = hold_file
        self._started = False

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_started": False}

    def note(self, event: str, **data: Any) -> None:
        line = json.dumps({"event": event, "pid": os.getpid(), "t": time.time(), **data})
        with open(self.journal_path, "a") as f:
            f.write(line + "\n")

    def __call__(self, df: Any, batch_id: int) -> None:
        if not self._started:
            _faults.rearm(self.crash_point or "", hold_file=self.hold_file)
            logging.getLogger("laminar").addHandler(_FileHandler(self))
            self._started = True
            self.note("worker")
        epoch = int(batch_id)
        self.note("batch", epoch=epoch)
        self.inner(df, batch_id)
        result = self.inner.last_result
        self.note(
            "done",
            epoch=epoch,
            committed=None if result is None else result.committed,
            commit_ms=self.inner.writer.last_commit_ms
            if result is not None and result.committed
            else None,
        )
