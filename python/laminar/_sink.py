"""The transactional-sink contract (F-E2E-002) shared by every sink.

A sink object is *configuration*: Spark Connect pickles the foreachBatch function to the server,
so a sink must pickle without live resources and open its producer or connection lazily in the
process that writes. Each new process re-runs ``init_transactions`` (which fences the previous one).

The lifecycle, per epoch (Spark's ``batch_id``)::

    init_transactions()                      once per process: fence zombies, recover, read markers
    begin_transaction(epoch) -> bool         False: the epoch is already committed, skip it
    write(batch)                             any number of times
    prepare_transaction() -> PreparedTxnState   everything durable but not yet visible
    commit_transaction(epoch)                or abort_transaction(epoch)

Errors follow KIP-691 (``laminar.errors``): after an ``AbortableError`` the transaction is
still open and the caller aborts it with ``abort_transaction(epoch)``, after which the epoch can
be retried; after an ``InDoubtError`` the caller asks ``recover()`` for the durable outcome
(never a blind abort); a ``FatalError`` means close the sink.

State and metrics come from the Rust core's ``EpochTracker``, so every sink reports the same
transitions, refuses the same illegal calls (``IllegalStateError``) and measures the same way;
each step of the lifecycle is decided by the core's ``SinkTransaction`` over that tracker
(``_machine``, docs/engine.md, "The sink's transaction"), which the sink performs.
"""

from __future__ import annotations

import abc
import logging
from typing import Any, ClassVar

from laminar._core import (
    EpochTracker,
    PreparedTxnState,
    SinkAnswer,
    SinkTransaction,
    TransactionalSinkMetrics,
    TransactionState,
)
from laminar._types import ArrowData

__all__ = ["TransactionalSink"]


class TransactionalSink(abc.ABC):
    """Base class of Laminar's sinks: the lifecycle, state and metrics every sink shares."""

    #: Short name of the sink type, recorded in the metadata (``laminar.sinks.kind``).
    kind: ClassVar[str]
    #: Attributes holding live resources (producers, connections, trackers); dropped when pickled.
    _runtime_attrs: ClassVar[tuple[str, ...]] = ("_tracker", "_txn")
    #: Whether a prepared transaction outlives the process that prepared it (PostgreSQL's
    #: ``PREPARE TRANSACTION``); a Kafka transaction prepared dies with its producer.
    _durable_prepare: ClassVar[bool] = True

    def __init__(self, sink_id: str) -> None:
        self._sink_id = sink_id
        self._tracker: EpochTracker | None = None
        self._txn: SinkTransaction | None = None

    # -- identity, state, metrics -------------------------------------------------------------

    @property
    def sink_id(self) -> str:
        """The sink's stable identity (Kafka: the transactional id; Postgres: ``sink_id``)."""
        return self._sink_id

    @property
    def tracker(self) -> EpochTracker:
        """The core's per-sink state machine and epoch bookkeeping (created on first use)."""
        if self._tracker is None:
            self._tracker = EpochTracker(self._sink_id)
        return self._tracker

    @property
    def _machine(self) -> SinkTransaction:
        """The core's machine of this sink's transaction (docs/engine.md, "The sink's
        transaction"), over `tracker` (made again when the tracker is): each lifecycle call asks
        it what to do and reports the outcome back."""
        tracker = self.tracker
        txn = getattr(self, "_txn", None)
        if txn is None or txn.tracker is not tracker:
            txn = self._txn = SinkTransaction(
                tracker,
                participant=self._machine_participant,
                durable_prepare=self._durable_prepare,
            )
        return txn

    @property
    def _machine_participant(self) -> int | None:
        """The scale-out partition this sink writes as (its machine then only ends an epoch by
        preparing), or None."""
        return None

    @property
    def transaction_state(self) -> TransactionState:
        """Where the transaction is: Idle, Active, Prepared, Committing, Aborting or Failed."""
        return self.tracker.state

    @property
    def metrics(self) -> TransactionalSinkMetrics:
        """Commits, aborts, events, bytes, commit latency (mean/max/p50/p99), commit failures."""
        return self.tracker.metrics()

    #: The logger of the sink's own lines.
    _logger_name: ClassVar[str] = "laminar"

    # -- the replay rule, performed for every sink ---------------------------------------------

    def _replayed(self, epoch: int) -> bool:
        """Whether ``epoch`` is a replay to skip (docs/protocol.md §1, §2): the core's
        `SinkTransaction.begin` decides by its rule (``epoch_committed``) — after ``recover()``
        when an earlier epoch is in doubt — and nothing may then be written."""
        answer = self._machine.begin(epoch)  # refused while an epoch is open
        if isinstance(answer, SinkAnswer.Recover):
            self.recover()
            answer = self._machine.begin(epoch)
        if isinstance(answer, SinkAnswer.Skip):
            self._skipped(epoch, answer)
            return True
        return False

    def _skipped(self, epoch: int, answer: SinkAnswer.Skip) -> None:
        """The core's "skip": warn when the epoch is older than the last committed one (on the
        sink's own logger: ``laminar.postgres.sink``, ``laminar.kafka``)."""
        if answer.older:
            logging.getLogger(self._logger_name).warning(
                "sink %s: epoch %d is older than the last committed epoch %d; Spark only replays "
                "the last batch, so a query restarted from another checkpoint may be writing",
                self.sink_id,
                epoch,
                answer.last,
            )

    # -- lifecycle ----------------------------------------------------------------------------

    @abc.abstractmethod
    def init_transactions(self) -> None:
        """Open the client, fence any previous instance, resolve in-doubt work, read the marker."""

    @abc.abstractmethod
    def begin_transaction(self, epoch: int) -> bool:
        """Open the epoch's transaction; False (and nothing opened) if the epoch is committed."""

    @abc.abstractmethod
    def write(self, batch: ArrowData) -> None:
        """Write a batch of rows into the open transaction."""

    @abc.abstractmethod
    def prepare_transaction(self) -> PreparedTxnState:
        """Make everything written durable but invisible; return the state recovery needs."""

    @abc.abstractmethod
    def commit_transaction(self, epoch: int) -> None:
        """Commit the epoch's transaction (and its epoch marker) atomically."""

    @abc.abstractmethod
    def abort_transaction(self, epoch: int) -> None:
        """Discard everything written in the epoch's transaction."""

    @abc.abstractmethod
    def last_committed_epoch(self) -> int | None:
        """The last epoch durably committed by this sink id (None if none), read from the store."""

    @abc.abstractmethod
    def recover(self) -> int | None:
        """Resolve an in-doubt commit from the durable marker; return the last committed epoch."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release the client; an open transaction is aborted (or left to fencing)."""

    # -- plumbing -----------------------------------------------------------------------------

    def __enter__(self) -> TransactionalSink:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        for cls in type(self).__mro__:
            for name in getattr(cls, "_runtime_attrs", ()):
                if name in state:
                    state[name] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
