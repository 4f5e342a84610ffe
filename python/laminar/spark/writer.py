"""``exactly_once``: drives one or more sinks through an epoch with the right commit protocol.

One sink: its own transaction, with retries of abortable errors and resolution of in-doubt commits.
Several sinks: the atomic recipe of docs/protocol.md §3 (Postgres as the decision log), in
`laminar.protocol.atomic`.

A replayed epoch (``epoch <= last committed``) is skipped (docs/protocol.md). When the writer knows
its query (``owner=``: the streaming query's identity, which ``laminar.spark`` supplies), two more
rules hold — the checkpoint-reset guard of docs/protocol.md §5: an epoch *older* than a committed
one is refused (Spark only replays its last batch, so such an epoch comes from a reset or foreign
checkpoint, and skipping it would lose its data), and a sink owned by another query is refused;
``on_new_query="restart"`` (or ``laminar reset``) starts the sinks over for the new query by moving
their epoch base past every committed epoch.

The writer is picklable configuration (Spark Connect pickles it to the server); sinks open lazily in
the process that writes.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, Literal

import psycopg

from laminar._core import default_group_id, retry_delay
from laminar._input import MAX_EPOCH, check_epoch, read_once
from laminar._settings import is_deferred
from laminar._sink import TransactionalSink
from laminar._types import ArrowData
from laminar.errors import AbortableError, ConfigError, InDoubtError
from laminar.kafka.sink import KafkaSink
from laminar.postgres._errors import map_pg_error
from laminar.postgres.sink import PostgresSink
from laminar.protocol.atomic import AtomicGroup, claim_ownership, same_database
from laminar.protocol.scaleout import ParticipantResult, ScaleOutCoordinator
from laminar.protocol.single import write_single
from laminar.protocol.watcher import Watcher
from laminar.spark._handoff import reduce_checked

__all__ = ["EpochResult", "ExactlyOnceWriter", "exactly_once"]

log = logging.getLogger("laminar.spark.writer")


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
        on_new_query: Literal["fail", "restart"] = "fail",
        redo: Literal["replay", "log"] = "replay",
        group_id: str | None = None,
        watcher: bool = False,
        watcher_interval_s: float = 30.0,
        scale_out: bool = False,
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
        if owner is not None and (not isinstance(owner, str) or not owner):
            raise ConfigError("owner must be a non-empty string (the streaming query's id) or None")
        if on_new_query not in ("fail", "restart"):
            raise ConfigError(f"on_new_query must be 'fail' or 'restart', not {on_new_query!r}")
        if redo not in ("replay", "log"):
            raise ConfigError(f"redo must be 'replay' or 'log', not {redo!r}")
        if watcher_interval_s <= 0:
            raise ConfigError(f"watcher_interval_s must be > 0, got {watcher_interval_s}")
        if len(sinks) > 1 or scale_out:
            _check_atomic_group(sinks)
        if scale_out and not any(isinstance(s, PostgresSink) for s in sinks):
            raise ConfigError(
                "scale_out=True needs a PostgresSink: its database records the distributed "
                "decisions (docs/protocol.md §4)"
            )
        self.scale_out = bool(scale_out)
        self.sinks = sinks
        self.retries = retries
        self.retry_backoff_s = retry_backoff_s
        self.owner = owner
        self.on_new_query = on_new_query
        self.redo = redo
        self.watcher_enabled = watcher
        self.watcher_interval_s = watcher_interval_s
        if group_id is None and (len(sinks) > 1 or scale_out):
            group_id = default_group_id(ids, scale_out=True)
        self.group_id = group_id
        self._initialized = False
        self._epoch_base = 0
        self._group: Any = None
        self._scaled: Any = None
        self._watcher: Any = None
        self._lock = threading.RLock()
        self._foreach_batch: Any = None

    # -- pickling: configuration only ---------------------------------------------------------

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_initialized"] = False
        state["_group"] = None
        state["_scaled"] = None
        state["_watcher"] = None
        state["_lock"] = None
        state["_foreach_batch"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        state.setdefault("owner", None)
        state.setdefault("scale_out", False)
        state.setdefault("_scaled", None)
        state.setdefault("_foreach_batch", None)
        self.__dict__.update(state)
        self._lock = threading.RLock()

    def __reduce__(self) -> tuple[Any, ...]:
        # The process that loads the writer (Spark's Python worker) checks that it runs the
        # same laminar version before it loads anything else (laminar.spark._handoff).
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
            # In-function: the package's API module (laminar.spark) imports this one.
            from laminar.spark import ForeachBatchWriter

            self._foreach_batch = ForeachBatchWriter(self)
        self._foreach_batch(df, batch_id)

    def write_epoch(self, epoch: int, batch: ArrowData) -> EpochResult:
        """Write ``batch`` as epoch ``epoch`` exactly once (a replayed epoch is skipped).

        ``batch`` is materialised once, before any sink sees it (`laminar._input.read_once`):
        a one-shot stream (a ``RecordBatchReader``, any ``__arrow_c_stream__`` object) is read
        into one Arrow table, so every sink and every retry write the same rows."""
        epoch = check_epoch(epoch)
        data = read_once(batch)
        with self._lock:
            if self.scale_out:
                return self.write_epoch_scaled(epoch, lambda task: task.write_partition(0, [data]))
            if len(self.sinks) != 1:
                return self._write_atomic(epoch, data)
            self._ensure_initialized()
            return self._write_single(self.sinks[0], self._based(epoch), data)

    def write_epoch_scaled(self, epoch: int, run: Any) -> EpochResult:
        """Scale-out mode (``scale_out=True``, docs/protocol.md §4): write ``epoch`` through
        partition tasks. ``run(task)`` runs the `laminar.protocol.scaleout.ScaleOutTask` on every
        partition — Spark: ``df.mapInArrow(task, RESULT_DDL).collect()``; elsewhere, e.g.
        ``task.write_partition(p, batches)`` per partition in threads or processes — and
        returns every `ParticipantResult` (or result rows); this process then decides and
        completes the distributed transaction."""
        if not self.scale_out:
            raise ConfigError("write_epoch_scaled() needs exactly_once(..., scale_out=True)")
        epoch = check_epoch(epoch)

        def collect(task: Any) -> list[ParticipantResult]:
            return [
                r if isinstance(r, ParticipantResult) else ParticipantResult.from_row(r)
                for r in run(task)
            ]

        with self._lock:
            return self._write_atomic(epoch, None, run=collect)

    def _based(self, epoch: int) -> int:
        """The epoch written for Spark's ``epoch``: plus the epoch base, still in range."""
        if self._epoch_base + epoch > MAX_EPOCH:
            check_epoch(self._epoch_base + epoch, what=f"epoch {epoch} + epoch base")
        return self._epoch_base + epoch

    @property
    def epoch_base(self) -> int:
        """What is added to Spark's batch id to give the epoch written (0 unless the sinks were
        started over for a new query: ``on_new_query="restart"`` / ``laminar reset``)."""
        return self._epoch_base

    @property
    def awaiting_replay(self) -> dict[str, int]:
        """Kafka sinks of an atomic group whose decided epoch only Spark's replay can complete
        (``{transactional_id: epoch}``; empty when nothing waits)."""
        group = self._group
        return dict(group.awaiting) if group is not None else {}

    @property
    def last_commit_ms(self) -> float | None:
        """The last atomic epoch's commit latency (steps 1-8), in milliseconds."""
        group = self._group
        return group.last_commit_ms if group is not None else None

    @property
    def watcher(self) -> Any:
        """The background resolution watcher (``watcher=True``), once started, else None."""
        return self._watcher

    def close(self) -> None:
        """Stop the watcher and close every sink (aborting open transactions)."""
        watcher, self._watcher = self._watcher, None
        if watcher is not None:
            watcher.stop()
        self._scaled = None  # its group's participants are closed with the group
        group, self._group = self._group, None
        if group is not None:
            group.close()
        else:
            for sink in self.sinks:
                sink.close()
        self._initialized = False

    # -- several sinks: the atomic group --------------------------------------------------------

    def _write_atomic(self, epoch: int, batch: ArrowData | None, run: Any = None) -> EpochResult:
        if self._group is None:
            kafka = [s for s in self.sinks if isinstance(s, KafkaSink)]
            postgres = [s for s in self.sinks if isinstance(s, PostgresSink)]
            assert self.group_id is not None
            self._group = AtomicGroup(
                self.group_id,
                kafka,
                postgres,
                owner=self.owner,
                on_new_query=self.on_new_query,
                redo=self.redo,
                # the group's machine retries its epochs; a scale-out epoch is retried below
                retries=0 if self.scale_out else self.retries,
                retry_backoff_s=self.retry_backoff_s,
                scale_out=self.scale_out,
            )
        group = self._group
        if run is None:
            if not group.started:
                group.start()
                self._epoch_base = group.epoch_base
                self._start_watcher()
            committed = group.write_epoch(epoch, batch)
            self._epoch_base = group.epoch_base
            return EpochResult(epoch, committed=committed, attempts=group.attempts)
        attempt = 0
        while True:
            attempt += 1
            try:
                if not group.started:
                    group.start()
                    self._epoch_base = group.epoch_base

                    if self._scaled is None:
                        self._scaled = ScaleOutCoordinator(group)
                    self._scaled.recover()
                    self._start_watcher()
                committed = self._scaled.write_epoch(self._based(epoch), run)
                return EpochResult(epoch, committed=committed, attempts=attempt)
            except (AbortableError, InDoubtError) as err:
                # the one retry rule, the group machine's too (docs/engine.md §2, "retry")
                delay = retry_delay(
                    attempt,
                    self.retries,
                    self.retry_backoff_s,
                    err.failure_kind,
                    retriable=err.retriable,
                    awaiting=bool(group.awaiting),
                )
                if delay is None:
                    raise
                log.warning(
                    "atomic group %s: epoch %d not written (%s); retry %d/%d in %.1fs",
                    self.group_id,
                    epoch,
                    err,
                    attempt,
                    self.retries,
                    delay,
                )
                time.sleep(delay)

    def _start_watcher(self) -> None:
        if not self.watcher_enabled or self._watcher is not None:
            return

        postgres = [s for s in self.sinks if isinstance(s, PostgresSink)]
        kafka = [s for s in self.sinks if isinstance(s, KafkaSink)]
        # the writer owns its Postgres sinks' prepared gids (a stray one of a dead task too)
        extra: dict[str, Any] = {"sink_ids": [p.sink_id for p in postgres]}
        if self._scaled is not None:
            extra["kafka_sink"] = self._scaled.kafka_sink
        self._watcher = Watcher(
            postgres[0].resolved_dsn,
            group_id=self.group_id,
            kafka_sinks=kafka,
            interval_s=self.watcher_interval_s,
            lock=self._lock,
            **extra,
        )
        self._watcher.start()

    # -- one sink -----------------------------------------------------------------------------

    def _ensure_initialized(self) -> None:
        if not self._initialized:
            for sink in self.sinks:
                sink.init_transactions()
            sink = self.sinks[0]
            if isinstance(sink, PostgresSink):
                self._epoch_base = _guard_single_postgres(
                    sink, self.owner, self.on_new_query, sink.tracker.last_committed_epoch
                )
            elif self.owner is not None:
                log.info(
                    "sink %s: the owner guard needs PostgreSQL metadata; a Kafka-only writer "
                    "only refuses epochs older than its last committed one",
                    sink.sink_id,
                )
            self._initialized = True

    def _write_single(self, sink: TransactionalSink, epoch: int, batch: ArrowData) -> EpochResult:
        """One sink alone: the core's `SingleEpochMachine` (`laminar.protocol.single`)."""
        committed, attempts = write_single(
            sink,
            epoch,
            batch,
            refuse_backwards=self.owner is not None,
            retries=self.retries,
            retry_backoff_s=self.retry_backoff_s,
        )
        return EpochResult(epoch, committed=committed, attempts=attempts)


def _check_atomic_group(sinks: tuple[TransactionalSink, ...]) -> None:
    """An atomic group needs a PostgreSQL decision log; every Postgres sink shares its
    database (one decision transaction)."""

    postgres = [s for s in sinks if isinstance(s, PostgresSink)]
    others = [s for s in sinks if not isinstance(s, (PostgresSink, KafkaSink))]
    if others:
        raise ConfigError(
            f"an atomic group takes KafkaSink and PostgresSink; {type(others[0]).__name__} "
            f"({others[0].sink_id!r}) cannot take part"
        )
    if not postgres:
        raise ConfigError(
            "writing several sinks atomically needs a PostgresSink: its database holds the "
            "decision log (laminar.txn_state). Add the Postgres sink the records also go to, or "
            "write each topic with its own exactly_once() writer"
        )
    for p in postgres:
        if p.two_phase_part is not None:
            raise ConfigError(
                f"PostgresSink {p.sink_id!r} is a scale-out participant (two_phase_part="
                f"{p.two_phase_part}); atomic groups take plain sinks"
                " (see laminar.protocol.scaleout)"
            )
        first, other = postgres[0].dsn, p.dsn
        if is_deferred(first) or is_deferred(other):
            # Read where the writer runs: compared by setting (the same laminar.env name).
            same = first == other
        else:
            same = same_database(str(first), str(other))
        if not same:
            raise ConfigError(
                f"PostgresSink {p.sink_id!r} is on another database than {postgres[0].sink_id!r}:"
                " all PostgreSQL sinks of an atomic group must share one database (they are "
                "written in the one decision transaction). Use the same dsn for both, or write "
                "the other database with its own exactly_once() writer"
            )


def _guard_single_postgres(
    sink: PostgresSink, owner: str | None, on_new_query: str, last: int | None
) -> int:
    """The checkpoint-reset guard for a lone Postgres sink: its own laminar.sinks row."""

    try:
        with psycopg.connect(sink.resolved_dsn) as conn:
            return claim_ownership(
                conn, sink.sink_id, [sink.sink_id], owner, on_new_query, {sink.sink_id: last}
            )
    except psycopg.Error as e:
        raise map_pg_error(e, f"checking the owner of sink {sink.sink_id!r}") from e


def exactly_once(
    *sinks: TransactionalSink,
    retries: int = 3,
    retry_backoff_s: float = 0.5,
    owner: str | None = None,
    on_new_query: Literal["fail", "restart"] = "fail",
    redo: Literal["replay", "log"] = "replay",
    group_id: str | None = None,
    watcher: bool = False,
    watcher_interval_s: float = 30.0,
    scale_out: bool = False,
) -> ExactlyOnceWriter:
    """A writer that lands each epoch in ``sinks`` exactly once (several sinks: atomically).

    Use it as ``df.writeStream.foreachBatch(writer)``, through `laminar.spark.start` (which also
    ties the sinks to the streaming query: ``owner``), or call ``writer.write_epoch(epoch,
    table)``.

    - ``owner``: the identity of the streaming query that writes the sinks (Spark: the query's
      ``id``, stable across restarts from one checkpoint, or the checkpoint location). A sink
      owned by another query is refused with a `ConfigError` (docs/protocol.md §5).
    - ``on_new_query="restart"``: instead, make this query the owner and start the sinks over
      (the epoch base moves past every committed epoch).
    - ``redo``: how an atomic group completes Kafka's part of a decided epoch when the broker no
      longer holds its prepared transaction: ``"replay"`` (Spark's replay of the batch, the
      default) or ``"log"`` (the records are also kept in ``laminar.redo`` until Kafka committed
      them: no replay needed, at the cost of writing them to PostgreSQL too).
    - ``group_id``: the atomic group's id in ``laminar.sinks`` (default: the sink ids joined).
    - ``watcher=True``: a background resolution watcher (``laminar.protocol.watcher``) every
      ``watcher_interval_s`` seconds.
    - ``scale_out=True``: Spark tasks write the partitions of each batch as two-phase
      participants and this process coordinates them (docs/protocol.md §4; the foreachBatch
      function uses ``df.mapInArrow`` instead of ``toArrow``; without Spark:
      ``writer.write_epoch_scaled``). Needs a PostgresSink (its database decides) and
      ``max_prepared_transactions`` of at least the number of partitions.
    """
    return ExactlyOnceWriter(
        sinks,
        retries=retries,
        retry_backoff_s=retry_backoff_s,
        owner=owner,
        on_new_query=on_new_query,
        redo=redo,
        group_id=group_id,
        watcher=watcher,
        watcher_interval_s=watcher_interval_s,
        scale_out=scale_out,
    )
