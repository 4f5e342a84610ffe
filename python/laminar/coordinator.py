"""``exactly_once``: drives one or more sinks through an epoch with the right commit protocol.

One sink: its own transaction, with retries of abortable errors and resolution of in-doubt commits.
Several sinks: the atomic recipe of docs/protocol.md §3 (Postgres as the decision log).

The writer is picklable configuration (Spark Connect pickles it to the server); sinks open lazily in
the process that writes.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from laminar._handoff import reduce_checked
from laminar._types import ArrowData
from laminar.errors import AbortableError, ConfigError, InDoubtError, LaminarError
from laminar.sinks.base import TransactionalSink

__all__ = ["EpochResult", "ExactlyOnceWriter", "exactly_once"]

log = logging.getLogger("laminar.coordinator")


@dataclass(frozen=True)
class EpochResult:
    """What happened to one epoch."""

    epoch: int
    #: True if this call committed the epoch; False if it was already committed and was skipped.
    committed: bool
    #: Number of attempts made (1 unless abortable errors were retried).
    attempts: int = 1

    @property
    def skipped(self) -> bool:
        """The epoch had been committed before (a Spark replay) and nothing was written."""
        return not self.committed


class ExactlyOnceWriter:
    """Writes each epoch to its sinks exactly once; usable as a ``foreachBatch`` function."""

    def __init__(
        self,
        sinks: tuple[TransactionalSink, ...],
        *,
        retries: int = 3,
        retry_backoff_s: float = 0.5,
        owner: str | None = None,
    ) -> None:
        if not sinks:
            raise ConfigError("exactly_once() needs at least one sink")
        for sink in sinks:
            if not isinstance(sink, TransactionalSink):
                raise ConfigError(
                    f"exactly_once() takes laminar sinks (KafkaSink, PostgresSink), "
                    f"not {type(sink).__name__}"
                )
        ids = [s.sink_id for s in sinks]
        if len(set(ids)) != len(ids):
            raise ConfigError(f"two sinks share a sink id in {ids}; give each a distinct id")
        if retries < 0:
            raise ConfigError(f"retries must be >= 0, got {retries}")
        self.sinks = sinks
        self.retries = retries
        self.retry_backoff_s = retry_backoff_s
        #: The identity of the streaming query that writes these sinks (the checkpoint-reset
        #: guard of docs/protocol.md §5). `laminar.spark` sets it in the writing process, from
        #: the query's checkpoint, before the first epoch; None: not known.
        self.owner = owner
        self._initialized = False
        self._foreach_batch: Any = None

    # -- pickling: configuration only ---------------------------------------------------------

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_initialized"] = False
        state["_foreach_batch"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        state.setdefault("owner", None)
        state.setdefault("_foreach_batch", None)
        self.__dict__.update(state)

    def __reduce__(self) -> tuple[Any, ...]:
        # The process that loads the writer (Spark's Python worker) checks that it runs the
        # same laminar version before it loads anything else (laminar._handoff).
        return reduce_checked(self)

    def __repr__(self) -> str:
        sinks = ", ".join(repr(s) for s in self.sinks)
        owner = f", owner={self.owner!r}" if self.owner is not None else ""
        return f"ExactlyOnceWriter({sinks}{owner})"

    # -- public API ---------------------------------------------------------------------------

    def __call__(self, df: Any, batch_id: int) -> None:
        """The ``foreachBatch`` entry point (Spark Connect or classic): ``batch_id`` is the
        epoch and the batch reaches the sinks as Arrow; an empty batch opens no transaction.
        See `laminar.spark.ForeachBatchWriter`, which this delegates to."""
        if self._foreach_batch is None:
            from laminar.spark import ForeachBatchWriter

            self._foreach_batch = ForeachBatchWriter(self)
        self._foreach_batch(df, batch_id)

    def write_epoch(self, epoch: int, batch: ArrowData) -> EpochResult:
        """Write ``batch`` as epoch ``epoch`` exactly once (a replayed epoch is skipped)."""
        if len(self.sinks) != 1:
            raise ConfigError("atomic writes to several sinks are not available yet")
        self._ensure_initialized()
        return self._write_single(self.sinks[0], epoch, batch)

    def close(self) -> None:
        """Close every sink (aborting open transactions)."""
        for sink in self.sinks:
            sink.close()
        self._initialized = False

    # -- one sink -----------------------------------------------------------------------------

    def _ensure_initialized(self) -> None:
        if not self._initialized:
            for sink in self.sinks:
                sink.init_transactions()
            self._initialized = True

    def _write_single(self, sink: TransactionalSink, epoch: int, batch: ArrowData) -> EpochResult:
        attempt = 0
        while True:
            attempt += 1
            try:
                if not sink.begin_transaction(epoch):
                    log.info("sink %s: epoch %d already committed, skipped", sink.sink_id, epoch)
                    return EpochResult(epoch, committed=False, attempts=attempt)
                try:
                    sink.write(batch)
                    # One sink needs no vote: commit in one phase (Active -> Committing).
                    sink.commit_transaction(epoch)
                except AbortableError:
                    _abort_quietly(sink, epoch)
                    raise
                return EpochResult(epoch, committed=True, attempts=attempt)
            except InDoubtError as err:
                last = sink.recover()
                if last is not None and last >= epoch:
                    log.warning(
                        "sink %s: in-doubt commit of epoch %d resolved as committed",
                        sink.sink_id,
                        epoch,
                    )
                    return EpochResult(epoch, committed=True, attempts=attempt)
                if attempt > self.retries:
                    raise
                log.warning(
                    "sink %s: in-doubt commit of epoch %d resolved as not committed (%s); retrying",
                    sink.sink_id,
                    epoch,
                    err,
                )
            except AbortableError as err:
                if attempt > self.retries or not err.retriable:
                    raise
                delay = self.retry_backoff_s * (2 ** (attempt - 1))
                log.warning(
                    "sink %s: epoch %d aborted (%s); retry %d/%d in %.1fs",
                    sink.sink_id,
                    epoch,
                    err,
                    attempt,
                    self.retries,
                    delay,
                )
                time.sleep(delay)


def _abort_quietly(sink: TransactionalSink, epoch: int) -> None:
    """Abort after an abortable error; a failing abort is left to fencing on the next start."""
    if sink.transaction_state.name in ("Active", "Prepared"):
        try:
            sink.abort_transaction(epoch)
        except LaminarError as err:
            log.warning(
                "sink %s: abort of epoch %d failed (%s); fencing will clean up",
                sink.sink_id,
                epoch,
                err,
            )


def exactly_once(
    *sinks: TransactionalSink,
    retries: int = 3,
    retry_backoff_s: float = 0.5,
    owner: str | None = None,
) -> ExactlyOnceWriter:
    """A writer that lands each epoch in ``sinks`` exactly once (several sinks: atomically).

    Use it as ``df.writeStream.foreachBatch(writer)``, through `laminar.spark.start` (which also
    ties the sinks to the streaming query: ``owner``), or call ``writer.write_epoch(epoch,
    table)``. ``owner`` names the query that writes the sinks (docs/protocol.md §5).
    """
    return ExactlyOnceWriter(sinks, retries=retries, retry_backoff_s=retry_backoff_s, owner=owner)
