"""Type stubs for the private Rust extension `laminar._core`."""

from collections.abc import Sequence
from typing import Any, Final, Generic, Literal, TypeAlias, TypedDict, TypeVar, final

from typing_extensions import Self, Unpack, disjoint_base

# Each section below adds its own names (`__all__ += [...]`), so sections merge independently.
__all__ = ["__version__"]

__version__: str

# --- transaction state, epoch tracker, metrics (core: protocol/state.rs, epoch.rs) ---------------

__all__ += [
    "EpochRecord",
    "EpochTracker",
    "TransactionState",
    "TransactionalSinkMetrics",
]

_StateName = Literal["Idle", "Active", "Prepared", "Committing", "Aborting", "Failed"]
_RecordStateName = Literal[
    "Active", "Prepared", "Committing", "Aborting", "Failed", "Committed", "Aborted"
]

@final
class TransactionState:
    """Where a sink's transaction is in its lifecycle (an immutable value).

    ``Idle --begin(e)--> Active(e) --prepare--> Prepared(e) --commit_started--> Committing(e)
    --commit_ok--> Idle``; ``Active`` may also commit directly (one-phase commit); ``Active`` and
    ``Prepared`` may abort (``Aborting(e) --abort_ok--> Idle``); a commit or abort whose outcome is
    unknown leads to ``Failed(e)``, which only recovery's ``resolve`` leaves.

    Equal and hashable by value. ``repr`` evaluates back: ``TransactionState.Active(epoch=3)``.
    """

    def __new__(cls, name: _StateName, epoch: int | None = None) -> Self:
        """Builds a state from its name and epoch (``None`` exactly when the name is "Idle")."""

    @classmethod
    def Idle(cls) -> Self:  # noqa: N802
        """No transaction is open."""

    @classmethod
    def Active(cls, epoch: int) -> Self:  # noqa: N802
        """A transaction is open for ``epoch`` and being written."""

    @classmethod
    def Prepared(cls, epoch: int) -> Self:  # noqa: N802
        """Everything is flushed; the transaction is ready to commit."""

    @classmethod
    def Committing(cls, epoch: int) -> Self:  # noqa: N802
        """The commit was sent and its outcome is pending."""

    @classmethod
    def Aborting(cls, epoch: int) -> Self:  # noqa: N802
        """The abort was sent and its outcome is pending."""

    @classmethod
    def Failed(cls, epoch: int) -> Self:  # noqa: N802
        """A commit or abort failed with an unknown outcome: recovery must resolve it."""

    @property
    def name(self) -> _StateName:
        """The state's name."""

    @property
    def epoch(self) -> int | None:
        """The epoch of the open transaction; ``None`` when idle."""

    def holds_transaction(self) -> bool:
        """Whether an epoch's transaction is held (``Active`` or ``Prepared``): an abort
        discards it."""

    def __eq__(self, value: object, /) -> bool: ...
    def __hash__(self) -> int: ...

@final
class EpochRecord:
    """What happened to one epoch's transaction (a snapshot).

    ``state`` is where the transaction is ("Active" … "Failed") or how it ended ("Committed",
    "Aborted"). Times are in microseconds on the tracker's clock.
    """

    @property
    def epoch(self) -> int:
        """The epoch (Spark batch id)."""

    @property
    def state(self) -> _RecordStateName:
        """Where the transaction is, or how it ended."""

    @property
    def events_written(self) -> int:
        """Events written in this transaction."""

    @property
    def bytes_written(self) -> int:
        """Payload bytes written in this transaction."""

    @property
    def opened_at_us(self) -> int:
        """When ``begin`` was called."""

    @property
    def commit_started_at_us(self) -> int | None:
        """When the commit was sent, if it was."""

    @property
    def completed_at_us(self) -> int | None:
        """When the transaction was committed or aborted, if it was."""

    @property
    def commit_latency_us(self) -> int | None:
        """Commit sent → confirmed by ``commit_ok``; ``None`` otherwise."""

    @property
    def resolved_by_recovery(self) -> bool:
        """Whether the outcome came from recovery's ``resolve`` (not ``commit_ok``/``abort_ok``)."""

    @property
    def is_completed(self) -> bool:
        """Whether the transaction ended (committed or aborted)."""

    def to_dict(self) -> dict[str, int | str | bool | None]:
        """The record as a plain dict (attribute name → value)."""

    def __eq__(self, value: object, /) -> bool: ...

class _MetricsFields(TypedDict, total=False):
    commits: int
    aborts: int
    events_written: int
    bytes_written: int
    commit_failures: int
    avg_commit_latency_us: float
    max_commit_latency_us: int
    p50_commit_latency_us: int
    p99_commit_latency_us: int
    events_committed: int
    bytes_committed: int
    abort_failures: int
    replays_skipped: int

@final
class TransactionalSinkMetrics:
    """A snapshot of one sink's transaction counters (F-E2E-002) and commit latencies.

    Commit latency is measured from ``commit_started`` to ``commit_ok``, in microseconds; the
    latency fields are 0 before the first commit, p50/p99 are within 1% of a recorded value.
    Equal by value; picklable.
    """

    def __new__(cls, **fields: Unpack[_MetricsFields]) -> Self:
        """Builds a snapshot (every field defaults to 0); mostly for tests and unpickling."""

    @property
    def commits(self) -> int:
        """Transactions committed (including those recovery resolved as committed)."""

    @property
    def aborts(self) -> int:
        """Transactions aborted (including those recovery resolved as aborted)."""

    @property
    def events_written(self) -> int:
        """Events written across all transactions, committed or not."""

    @property
    def bytes_written(self) -> int:
        """Payload bytes written across all transactions, committed or not."""

    @property
    def commit_failures(self) -> int:
        """Commits whose outcome was unknown (``commit_failed``)."""

    @property
    def avg_commit_latency_us(self) -> float:
        """Mean commit latency."""

    @property
    def max_commit_latency_us(self) -> int:
        """Largest commit latency."""

    @property
    def p50_commit_latency_us(self) -> int:
        """Median commit latency."""

    @property
    def p99_commit_latency_us(self) -> int:
        """99th-percentile commit latency."""

    @property
    def events_committed(self) -> int:
        """Events of committed transactions (what consumers see)."""

    @property
    def bytes_committed(self) -> int:
        """Payload bytes of committed transactions."""

    @property
    def abort_failures(self) -> int:
        """Aborts whose outcome was unknown (``abort_failed``)."""

    @property
    def replays_skipped(self) -> int:
        """Epochs skipped by ``begin`` because they were already committed (Spark replays)."""

    def to_dict(self) -> dict[str, int | float]:
        """The metrics as a plain dict (field name → value)."""

    def __getnewargs_ex__(self) -> tuple[tuple[()], dict[str, int | float]]: ...
    def __eq__(self, value: object, /) -> bool: ...

@final
class EpochTracker:
    """Drives one sink's transaction state machine and remembers what happened to each epoch.

    Every sink reports its lifecycle here, one call per protocol step::

        if not tracker.begin(epoch):        # False: epoch already committed (a replay): skip it
            return
        tracker.record_write(events, nbytes)
        tracker.prepare()                   # optional (two-phase sinks)
        tracker.commit_started()
        ...                                 # the commit I/O
        tracker.commit_ok()                 # or commit_failed(): outcome unknown → Failed

    A call that is not legal in the current state raises ``laminar.errors.IllegalStateError``
    (naming the state, the call and the legal calls) and changes nothing. Methods taking
    ``epoch=`` also check that it is the open epoch. ``now_us`` is a time in microseconds; when
    omitted, ``time.monotonic_ns() // 1000`` is used. Keeps the last ``history_limit`` epoch
    records. Not thread-safe: one tracker per sink, driven by one thread.
    """

    def __new__(
        cls,
        sink_id: str | None = None,
        *,
        last_committed_epoch: int | None = None,
        history_limit: int = 1024,
    ) -> Self:
        """An idle tracker; ``last_committed_epoch`` is what recovery read back (``None``: none)."""

    def begin(self, epoch: int, now_us: int | None = None) -> bool:
        """Opens the transaction of ``epoch`` (Idle → Active) and returns True.

        Returns False, changing nothing, when ``epoch <= last_committed_epoch``: the epoch was
        already committed (Spark replays a batch after a restart) and must not be written again.
        Raises ``IllegalStateError`` while a transaction is open or for a negative epoch.
        """

    def record_write(self, events: int, bytes: int = 0) -> None:
        """Counts events and payload bytes written in the open transaction (Active only)."""

    def prepare(self, *, epoch: int | None = None) -> None:
        """Everything is flushed; ready to commit (Active → Prepared)."""

    def commit_started(self, now_us: int | None = None, *, epoch: int | None = None) -> None:
        """The commit is being sent (Active or Prepared → Committing); starts the latency clock."""

    def commit_ok(self, now_us: int | None = None) -> None:
        """The commit is confirmed (Committing → Idle); the epoch becomes the last committed."""

    def commit_failed(self) -> None:
        """The commit's outcome is unknown (Committing → Failed); never abort it blindly."""

    def abort_started(self, *, epoch: int | None = None) -> None:
        """The abort is being sent (Active or Prepared → Aborting)."""

    def abort_ok(self, now_us: int | None = None) -> None:
        """The abort is confirmed (Aborting → Idle)."""

    def abort_failed(self) -> None:
        """The abort's outcome is unknown (Aborting → Failed)."""

    def resolve(
        self, committed: bool, now_us: int | None = None, *, epoch: int | None = None
    ) -> None:
        """Recovery decided the failed transaction's outcome (Failed → Idle)."""

    @property
    def state(self) -> TransactionState:
        """The sink's transaction state."""

    @property
    def current_epoch(self) -> int | None:
        """The epoch of the open transaction; ``None`` when idle."""

    @property
    def last_committed_epoch(self) -> int | None:
        """The last epoch known to be committed; settable while idle (start-up, recovery)."""

    @last_committed_epoch.setter
    def last_committed_epoch(self, epoch: int | None) -> None: ...
    @property
    def sink_id(self) -> str | None:
        """The sink this tracker belongs to (named in its errors)."""

    @property
    def history_limit(self) -> int:
        """How many epoch records are kept."""

    def records(self) -> list[EpochRecord]:
        """The kept epoch records, oldest first."""

    def record(self, epoch: int) -> EpochRecord | None:
        """The most recent record of ``epoch``, if still kept."""

    def metrics(self) -> TransactionalSinkMetrics:
        """A snapshot of the counters and commit-latency statistics."""

# --- one sink's own transaction as a machine (core: protocol/sink) ------------------------------

__all__ += [
    "LastCommitted",
    "SinkAnswer",
    "SinkTransaction",
    "last_committed_after_marker",
    "last_committed_without_marker",
    "reuse_without_marker",
]

_SinkAnswerKind = Literal[
    "recover",
    "skip",
    "open",
    "commit_prepared",
    "commit",
    "in_doubt",
    "rolled_back",
    "nothing",
    "rollback_prepared",
    "rollback",
    "abort_open",
    "leave_prepared",
    "read_last",
    "resolve",
    "fenced",
    "reopen",
]

@disjoint_base
class SinkAnswer:
    """What `SinkTransaction` asks the sink to do (docs/engine.md, "The sink's transaction"): a
    class per answer, and each method's return type names the answers it gives, so the sink
    matches them exhaustively."""

    @property
    def kind(self) -> _SinkAnswerKind:
        """The answer's name (snake_case), for logs and tests."""
    @final
    class Recover(SinkAnswer):
        __match_args__ = ()
        def __new__(cls) -> SinkAnswer.Recover: ...

    @final
    class Open(SinkAnswer):
        __match_args__ = ()
        def __new__(cls) -> SinkAnswer.Open: ...

    @final
    class Skip(SinkAnswer):
        __match_args__ = ("last", "older")
        def __new__(cls, last: int, older: bool) -> SinkAnswer.Skip: ...
        @property
        def last(self) -> int:
            """the last committed epoch that makes the epoch a replay."""
        @property
        def older(self) -> bool:
            """the epoch is older than ``last`` (warn: Spark only replays its last batch)."""

    @final
    class CommitPrepared(SinkAnswer):
        __match_args__ = ()
        def __new__(cls) -> SinkAnswer.CommitPrepared: ...

    @final
    class Commit(SinkAnswer):
        __match_args__ = ()
        def __new__(cls) -> SinkAnswer.Commit: ...

    @final
    class InDoubt(SinkAnswer):
        __match_args__ = ()
        def __new__(cls) -> SinkAnswer.InDoubt: ...

    @final
    class RolledBack(SinkAnswer):
        __match_args__ = ()
        def __new__(cls) -> SinkAnswer.RolledBack: ...

    @final
    class Nothing(SinkAnswer):
        __match_args__ = ()
        def __new__(cls) -> SinkAnswer.Nothing: ...

    @final
    class RollbackPrepared(SinkAnswer):
        __match_args__ = ()
        def __new__(cls) -> SinkAnswer.RollbackPrepared: ...

    @final
    class Rollback(SinkAnswer):
        __match_args__ = ()
        def __new__(cls) -> SinkAnswer.Rollback: ...

    @final
    class Fenced(SinkAnswer):
        __match_args__ = ()
        def __new__(cls) -> SinkAnswer.Fenced: ...

    @final
    class Reopen(SinkAnswer):
        __match_args__ = ()
        def __new__(cls) -> SinkAnswer.Reopen: ...

    @final
    class AbortOpen(SinkAnswer):
        __match_args__ = ("epoch",)
        def __new__(cls, epoch: int) -> SinkAnswer.AbortOpen: ...
        @property
        def epoch(self) -> int:
            """the open epoch."""

    @final
    class LeavePrepared(SinkAnswer):
        __match_args__ = ("epoch",)
        def __new__(cls, epoch: int) -> SinkAnswer.LeavePrepared: ...
        @property
        def epoch(self) -> int:
            """the prepared epoch."""

    @final
    class ReadLast(SinkAnswer):
        __match_args__ = ()
        def __new__(cls) -> SinkAnswer.ReadLast: ...

    @final
    class Resolve(SinkAnswer):
        __match_args__ = ("epoch", "commit")
        def __new__(cls, epoch: int, commit: bool) -> SinkAnswer.Resolve: ...
        @property
        def epoch(self) -> int:
            """the epoch in doubt."""
        @property
        def commit(self) -> bool:
            """the decision that was being sent was a commit (else a rollback)."""

@disjoint_base
class LastCommitted:
    """Which evidence proves a Kafka sink's last committed epoch (docs/protocol.md §1, "The
    decision"): ``Marker`` (``epoch`` is the answer), ``ReadIdentity`` (no marker: read the
    identity, then ask `last_committed_without_marker`), ``Witness`` (``history`` says what
    proves the sink wrote) or ``New`` (nothing committed; the topic is not read)."""

    @property
    def kind(self) -> Literal["marker", "read_identity", "witness", "new"]: ...
    @final
    class Marker(LastCommitted):
        __match_args__ = ("epoch",)
        def __new__(cls, epoch: int) -> LastCommitted.Marker: ...
        @property
        def epoch(self) -> int: ...

    @final
    class ReadIdentity(LastCommitted):
        __match_args__ = ()
        def __new__(cls) -> LastCommitted.ReadIdentity: ...

    @final
    class Witness(LastCommitted):
        __match_args__ = ("history", "producer_epoch")
        def __new__(
            cls,
            history: Literal["identity", "decision_row", "producer_epoch"],
            producer_epoch: int | None,
        ) -> LastCommitted.Witness: ...
        @property
        def history(self) -> Literal["identity", "decision_row", "producer_epoch"]: ...
        @property
        def producer_epoch(self) -> int | None: ...

    @final
    class New(LastCommitted):
        __match_args__ = ()
        def __new__(cls) -> LastCommitted.New: ...

def last_committed_after_marker(
    marker: int | None, known: int | None
) -> LastCommitted.Marker | LastCommitted.ReadIdentity:
    """The marker read (None: no committed offset) and the epoch this instance committed
    itself: ``marker`` with the higher of the two, or ``read_identity``."""

def last_committed_without_marker(
    identity: bool, decision_row: bool, producer_epoch: int | None
) -> LastCommitted.Witness | LastCommitted.New:
    """Without a marker: ``witness`` if the identity, a decision row or a producer epoch > 0
    proves history (in that order), else ``new``."""

def reuse_without_marker(found_by_writer: bool, writer: bool) -> bool:
    """Whether an answer found without a marker may be reused: a writer's always, a reader's
    only by readers."""

#: What `SinkTransaction.abort_via` answers.
_AbortAnswer: TypeAlias = (
    SinkAnswer.Nothing
    | SinkAnswer.RollbackPrepared
    | SinkAnswer.Rollback
    | SinkAnswer.Fenced
    | SinkAnswer.Reopen
)

@final
class SinkTransaction:
    """The core's machine of one sink's own transaction, over the sink's ``EpochTracker``.

    The sink asks before each step and performs the answer: ``begin(epoch)`` → ``recover`` (then
    ask again) | ``skip`` | ``open`` (claim, then ``opened`` or ``store_holds``); ``write()`` /
    ``prepare()`` → the open epoch; ``commit(epoch)`` → ``commit_prepared`` | ``commit``;
    ``commit_failed(connection_lost)`` → ``in_doubt`` | ``rolled_back``; ``abort(epoch)`` →
    ``nothing`` | ``rollback_prepared`` | ``rollback``; ``close()`` → ``abort_open`` |
    ``leave_prepared`` | ``nothing``; ``recover()`` → ``read_last`` | ``resolve``. With
    ``durable_prepare=False`` (Kafka: a prepared transaction dies with its producer) a refused
    commit is ``rolled_back`` even after prepare, an abort while idle is ``nothing``, ``close()``
    aborts a prepared epoch, ``abort_via(epoch, client)`` → ``nothing`` | ``fenced`` | ``reopen``
    | ``rollback(_prepared)`` and ``abort_failed()`` → ``reopen``. A call that is
    not legal now raises ``laminar.errors.IllegalStateError`` and changes nothing. ``now_us``
    defaults to ``time.monotonic_ns() // 1000``.
    """

    def __new__(
        cls, tracker: EpochTracker, *, participant: int | None = None, durable_prepare: bool = True
    ) -> Self:
        """The machine over ``tracker``; ``participant``: a scale-out partition (it only ends an
        epoch by preparing); ``durable_prepare``: a prepared transaction outlives the process
        (PostgreSQL) or not (Kafka)."""

    @property
    def tracker(self) -> EpochTracker:
        """The tracker every transition goes to (state, records, metrics)."""
    @property
    def between_epochs(self) -> bool:
        """No epoch is being written or ended (idle, or in doubt): start-up may run."""
    @property
    def in_doubt(self) -> int | None:
        """The epoch whose commit or abort is in doubt, if any."""
    @property
    def writing(self) -> int | None:
        """The epoch whose transaction is open (being written), if any."""
    @property
    def prepared_epoch(self) -> int | None:
        """The prepared epoch awaiting its decision, if any."""
    @property
    def pending(self) -> Literal["commit", "abort"] | None:
        """The decision a failed commit or abort left pending: the epoch stays in doubt until
        it is resolved (Kafka's in-doubt resolution retries a pending commit first)."""
    def init(self) -> None:
        """``init_transactions()``: refused while an epoch is being written or ended."""
    def learned_last(self, last: int | None) -> None:
        """The store's last committed epoch, kept while idle."""
    def begin(self, epoch: int) -> SinkAnswer.Recover | SinkAnswer.Skip | SinkAnswer.Open:
        """``recover`` | ``skip`` (counted as a replay) | ``open``; refused while one is open."""
    def opened(self, epoch: int, now_us: int | None = None) -> None:
        """The store let this process claim ``epoch``: its transaction is open."""
    def store_holds(
        self, epoch: int, last: int | None
    ) -> SinkAnswer.Recover | SinkAnswer.Skip | SinkAnswer.Open:
        """The store refused the claim: it holds ``last``; answers ``skip``."""
    def write(self) -> int:
        """The open epoch to write into; refused without one."""
    def wrote(self, events: int, bytes: int = 0) -> None:
        """Rows and bytes written in the open epoch."""
    def prepare(self) -> int:
        """The open epoch to prepare; refused without one."""
    def prepared(self, epoch: int) -> None:
        """``PREPARE TRANSACTION`` of ``epoch`` succeeded."""
    def commit(self, epoch: int) -> SinkAnswer.CommitPrepared | SinkAnswer.Commit:
        """``commit_prepared`` | ``commit`` (one phase); refused for another epoch or state and
        for a scale-out participant's one-phase commit."""
    def commit_started(self, epoch: int, now_us: int | None = None) -> None:
        """The COMMIT (PREPARED) of ``epoch`` is being sent."""
    def commit_ok(self, now_us: int | None = None) -> None:
        """The commit is confirmed."""
    def commit_failed(
        self, connection_lost: bool, now_us: int | None = None
    ) -> SinkAnswer.InDoubt | SinkAnswer.RolledBack:
        """``in_doubt`` (the commit pending for recovery) | ``rolled_back`` (a one-phase COMMIT
        the server answered)."""
    def commit_overtaken(self, committed: bool, now_us: int | None = None) -> None:
        """COMMIT PREPARED found no gid; the store says whether the epoch ``committed``."""
    def abort(
        self, epoch: int
    ) -> SinkAnswer.Nothing | SinkAnswer.RollbackPrepared | SinkAnswer.Rollback:
        """``nothing`` (already rolled back) | ``rollback_prepared`` | ``rollback``; the abort has
        started. Refused in any other state."""
    def abort_via(
        self,
        epoch: int,
        client: Literal["live", "given_up", "fenced"],
        now_us: int | None = None,
    ) -> _AbortAnswer:
        """Kafka's abort: ``nothing`` when idle (or a given-up client's open epoch, aborted
        without sending) | ``fenced`` (raise, nothing changes) | ``reopen`` (open a new client,
        then ask again) | ``abort(epoch)``'s answer for a live client."""
    def abort_after_error(self) -> int | None:
        """After a fatal error: the open epoch to roll back (the abort has started), if any."""
    def abort_ok(self, now_us: int | None = None) -> None:
        """The abort is confirmed."""
    def abort_failed(self) -> SinkAnswer.InDoubt | SinkAnswer.Reopen:
        """The ROLLBACK (PREPARED) failed: in doubt, the abort pending; ``in_doubt`` |
        ``reopen`` (prepare not durable: replace the client, then ``abort_reopened``)."""
    def abort_reopened(self, now_us: int | None = None) -> None:
        """The client that failed to abort was replaced: its init aborted the epoch."""
    def saw_committed(self, last: int | None) -> None:
        """Evidence that ``last`` is committed: raises the known epoch while idle, never lowers."""
    def reopened(self, last: int | None, now_us: int | None = None) -> None:
        """A new client's init fenced the old one and read ``last``: an open epoch is aborted, an
        ending or in-doubt one decided by ``last``; then ``saw_committed(last)``."""
    def resolved_by_marker(
        self, committed: bool | None, marker: int | None, now_us: int | None = None
    ) -> None:
        """Kafka's in-doubt resolution ended: ``committed`` resolves the epoch still in doubt,
        ``marker`` is evidence of the last committed epoch."""
    def abort_overtaken(self, now_us: int | None = None) -> None:
        """ROLLBACK PREPARED found no gid and the epoch is committed (by another process)."""
    def recover(self) -> SinkAnswer.ReadLast | SinkAnswer.Resolve:
        """``read_last`` | ``resolve`` (the epoch in doubt, the pending decision)."""
    def resolved(self, committed: bool, last: int | None, now_us: int | None = None) -> None:
        """Recovery resolved the epoch in doubt; ``last``: the store's last committed epoch."""
    def close(self) -> SinkAnswer.AbortOpen | SinkAnswer.LeavePrepared | SinkAnswer.Nothing:
        """``abort_open`` | ``leave_prepared`` | ``nothing``."""

# --- persisted prepared-transaction state (core: prepared.rs) -------------------------------------

__all__ += ["PreparedTxnState"]

class _PreparedFields(TypedDict, total=False):
    transactional_id: str | None
    epoch: int
    attempt: int
    producer_id: int
    producer_epoch: int
    record_count: int
    created_at_ms: int
    tagged_fields: dict[int, bytes] | None

@final
class PreparedTxnState:
    """The persisted state of one prepared transaction (an immutable value).

    ``str(state)`` is the text form ``"lm1." + base64url`` (at most 223 characters for a
    transactional id of up to 100 bytes, so it fits ``VARCHAR(255)``); ``to_bytes()`` the binary
    form. Both are canonical: parsing then re-encoding gives back the same text/bytes. Tagged fields
    this laminar does not know are kept and written back. Malformed input raises
    ``laminar.errors.InvalidStateEncoding`` (a ``ValueError``) saying what is wrong. Equal and
    hashable by value; picklable.
    """

    def __new__(
        cls,
        transactional_id: str | None,
        epoch: int,
        attempt: int = 0,
        producer_id: int = -1,
        producer_epoch: int = -1,
        record_count: int = 0,
        created_at_ms: int = 0,
        tagged_fields: dict[int, bytes] | None = None,
    ) -> Self:
        """Builds a state; -1 means unknown for ``producer_id`` and ``producer_epoch``."""

    @staticmethod
    def parse(text: str) -> PreparedTxnState:
        """Decodes the text form (``"lm1." + base64url`` without padding)."""

    @staticmethod
    def from_bytes(data: bytes) -> PreparedTxnState:
        """Decodes the binary form."""

    def to_bytes(self) -> bytes:
        """The canonical binary form."""

    def replace(self, **changes: Unpack[_PreparedFields]) -> PreparedTxnState:
        """A copy with the given fields changed."""

    @property
    def transactional_id(self) -> str | None:
        """The Kafka ``transactional.id`` (or participant id); ``None`` when there is none."""

    @property
    def epoch(self) -> int:
        """The epoch (Spark batch id) of the transaction."""

    @property
    def attempt(self) -> int:
        """How many times this epoch was attempted before (0 for the first attempt)."""

    @property
    def producer_id(self) -> int:
        """The producer id the client reported, or -1 if unknown."""

    @property
    def producer_epoch(self) -> int:
        """The producer epoch the client reported, or -1 if unknown."""

    @property
    def record_count(self) -> int:
        """Records written in the transaction."""

    @property
    def created_at_ms(self) -> int:
        """When the state was built, in milliseconds since the Unix epoch."""

    @property
    def tagged_fields(self) -> dict[int, bytes]:
        """Tagged fields by tag, including unknown ones (a new dict each time)."""

    def __reduce__(self) -> tuple[object, tuple[bytes]]: ...
    def __eq__(self, value: object, /) -> bool: ...
    def __hash__(self) -> int: ...

# --- serialization (Arrow → Kafka payloads, PostgreSQL COPY BINARY) --------------------------

__all__ += [
    "KafkaRecordStream",
    "KafkaRecords",
    "PgCopyBuffer",
    "PgCopyStream",
    "avro_key_schema",
    "avro_value_schema",
    "check_kafka_schema",
    "check_pg_copy_schema",
    "detect_spark_kafka_shape",
    "encode_kafka",
    "encode_kafka_avro",
    "encode_pg_copy",
    "is_internal_kafka_topic",
    "is_spark_kafka_shape",
    "iter_kafka",
    "iter_pg_copy",
]

_ValueFormat = Literal["json", "raw", "spark"]

@final
class KafkaRecords:
    """The Kafka payloads of one batch, ready for ``Producer.produce``.

    ``values[i]`` and ``keys[i]`` feed ``produce(topic, value=values[i], key=keys[i])``. The
    payloads are plain ``bytes`` built in Rust, the fastest form to hand to confluent-kafka.
    """

    @property
    def values(self) -> list[bytes | None]:
        """One value per row; ``None`` only for a null raw value (a tombstone)."""
    @property
    def keys(self) -> list[bytes | None] | None:
        """One key per row (``None`` for a null key), or ``None`` when no key column was given."""
    @property
    def num_rows(self) -> int:
        """Number of records."""
    @property
    def topics(self) -> list[str] | None:
        """``value_format="spark"``: each row's topic (its ``topic``, else the default given to
        :func:`encode_kafka`); ``None`` for the other formats."""
    @property
    def partitions(self) -> list[int] | None:
        """``value_format="spark"`` with a ``partition`` column: each row's partition (-1 when
        null: the partitioner chooses); otherwise ``None``."""
    @property
    def headers(self) -> list[list[tuple[str, bytes | None]]] | None:
        """``value_format="spark"`` with a ``headers`` column: each row's headers, its own then
        the ``headers`` given to :func:`encode_kafka` (that very list for a row without any);
        otherwise ``None``."""
    @property
    def topic_names(self) -> list[str]:
        """The distinct topics of ``topics``, in first-seen order (empty for other formats)."""
    @property
    def max_partitions(self) -> list[int]:
        """Per topic of ``topic_names``: the highest explicit partition of its rows (-1: none)."""
    @property
    def total_bytes(self) -> int:
        """Bytes of all values and keys together."""
    @property
    def value_bytes(self) -> int:
        """Bytes of all values."""
    @property
    def key_bytes(self) -> int:
        """Bytes of all keys."""
    def __len__(self) -> int: ...

@final
class KafkaRecordStream:
    """``(key, value)`` pairs of a batch, encoded one chunk (about 1 MiB) at a time as they are
    consumed: whatever the batch size, only one chunk is buffered besides the pair in hand.

    ``for key, value in stream: producer.produce(topic, value=value, key=key)``. ``key`` is
    ``None`` without a key column or for a null key; ``value`` is ``None`` only for a null raw
    value. Iterate it from one thread.
    """

    @property
    def num_rows(self) -> int:
        """Number of records in the whole stream."""
    def __iter__(self) -> KafkaRecordStream: ...
    def __next__(self) -> tuple[bytes | None, bytes | None]: ...
    def __length_hint__(self) -> int: ...

@final
class PgCopyBuffer:
    """A complete ``COPY … FROM STDIN (FORMAT BINARY)`` stream: header, rows, trailer."""

    @property
    def chunks(self) -> list[bytes]:
        """The stream in chunks of about 1 MiB; write them in order with ``copy.write``."""
    @property
    def columns(self) -> list[str]:
        """Target column names in stream order, for ``COPY table (…)``."""
    @property
    def num_rows(self) -> int:
        """Rows in the stream."""
    @property
    def total_bytes(self) -> int:
        """Total bytes over all chunks."""
    def to_bytes(self) -> bytes:
        """The whole stream as one ``bytes`` (a copy; prefer writing ``chunks``)."""

def encode_kafka(
    data: Any,
    *,
    value_format: _ValueFormat = "json",
    key: str | None = None,
    value_column: str | None = None,
    topic: str | None = None,
    headers: list[tuple[str, bytes]] | None = None,
    first_row: int = 0,
) -> KafkaRecords:
    """Encodes every row of an Arrow table as a Kafka ``(key, value)`` payload.

    ``data`` is a pyarrow ``Table``, ``RecordBatch`` or ``RecordBatchReader``, or any object with
    ``__arrow_c_stream__`` / ``__arrow_c_array__``; it is read without copying and encoded with
    the GIL released. ``value_format="json"`` writes one JSON object per row (rules in
    ``docs/serialization.md``); ``"raw"`` uses the bytes of ``value_column`` (default: the only
    column). ``key`` names the key column: strings as UTF-8, binary as is, integers as decimal
    text, anything else as its JSON text; a null key gives ``None``.

    ``"spark"`` is Spark's Kafka-sink shape (docs/kafka.md): the ``value`` and ``key`` columns
    as is, and per row the ``topic`` (null: ``topic``), ``partition`` and ``headers`` (followed
    by ``headers``) read into `KafkaRecords.topics`, ``.partitions`` and ``.headers``; a row
    with no topic at all, an invalid topic name, a negative partition or a header key starting
    with ``laminar.`` is a ``DataError`` naming the row (numbered from ``first_row``).

    Raises ``ConfigError`` (unknown column, unsupported type — checked before anything is
    encoded) and ``DataError`` (malformed Arrow data).
    """

def avro_value_schema(schema: Any, *, name: str, namespace: str | None = None) -> str:
    """The Avro record schema (JSON text) of every column of an Arrow ``schema``, named
    ``namespace.name``: docs/kafka.md's type mapping, nullable columns as ``["null", T]`` with a
    null default, nested records named after their field in their parent's namespace. An Arrow
    type or a name Avro cannot hold is a ``ConfigError`` naming the column."""

def avro_key_schema(schema: Any, key: str, *, name: str, namespace: str | None = None) -> str:
    """The Avro schema (JSON text) of the key column ``key``: a record named ``namespace.name``
    for a struct column, else the column's type (a null key is no key, never a union)."""

def encode_kafka_avro(
    data: Any,
    *,
    value_schema: str,
    value_schema_id: int,
    key: str | None = None,
    key_schema: str | None = None,
    key_schema_id: int | None = None,
) -> KafkaRecords:
    """Encodes every row of ``data`` as a Kafka record whose value is Avro binary in the
    Confluent wire format (magic byte 0, ``value_schema_id`` as 4 bytes big-endian, the datum of
    ``value_schema``), with the GIL released. ``key`` with ``key_schema``/``key_schema_id``: the
    key column in Avro the same way (a null key gives ``None``); ``key`` alone: the plain key
    rules of ``encode_kafka``. Columns bind to the schema's fields by name; a null where the
    schema has no null branch is a ``DataError`` naming the column and row."""

def is_spark_kafka_shape(schema: Any) -> bool:
    """Whether ``schema`` is exactly Spark's Kafka-sink shape: a string/binary ``value`` and
    otherwise only ``key`` (string/binary), ``topic`` (string), ``partition`` (integer) and
    ``headers`` (``array<struct<key: string, value: binary>>``)."""

def detect_spark_kafka_shape(schema: Any) -> bool:
    """The shape detection of a sink with no value option given: ``True`` for exactly Spark's
    Kafka-sink shape (`is_spark_kafka_shape`), ``False`` when a column is not one of its names
    (or there is no ``value``). Raises ``DataError`` naming the column and the type it needs
    when every column has the shape's names but one has not its type (``partition`` as a
    string, say)."""

def is_internal_kafka_topic(name: str) -> bool:
    """Whether ``name`` is one of Kafka's internal topics (``__consumer_offsets``,
    ``__transaction_state``, ``__share_group_state``, ``__cluster_metadata``): no client may
    write them."""

def check_kafka_schema(
    schema: Any,
    *,
    value_format: _ValueFormat = "json",
    key: str | None = None,
    value_column: str | None = None,
) -> None:
    """Checks that data of this schema can be encoded with these options, without encoding.

    ``schema`` is a pyarrow ``Schema`` (or anything with ``__arrow_c_schema__`` or ``.schema``).
    Raises ``ConfigError`` naming the column and its type.
    """

def iter_kafka(
    data: Any,
    *,
    value_format: _ValueFormat = "json",
    key: str | None = None,
    value_column: str | None = None,
) -> KafkaRecordStream:
    """Like :func:`encode_kafka`, but streams the ``(key, value)`` pairs as they are consumed.

    The schema and the data are checked before this returns (same errors as ``encode_kafka``);
    encoding then runs chunk by chunk, with the GIL released, as the stream is iterated. Use it for
    large batches: the memory held per record is the record in hand, not the whole batch.
    """

def encode_pg_copy(
    data: Any,
    columns: Sequence[tuple[str, str, int]],
    *,
    source_columns: Sequence[str] | None = None,
) -> PgCopyBuffer:
    """Encodes every row of an Arrow table as a PostgreSQL COPY BINARY stream.

    ``columns`` are the target table's ``(name, typname, atttypmod)`` in COPY order, as read from
    the catalog (``int4``, ``varchar``, ``_int4`` for arrays…). ``source_columns[i]`` names the
    Arrow column that feeds ``columns[i]`` (default: the same name). Every value is checked before
    the buffer is returned, so nothing is sent for a batch that cannot be written.

    Raises ``ConfigError`` (missing column, incompatible types — names the column and both
    types) and ``DataError`` (a value that does not fit its column — names the column and row).
    """

@final
class PgCopyStream:
    """A ``COPY … FROM STDIN (FORMAT BINARY)`` stream encoded one chunk (about 1 MiB) at a time
    as it is iterated: header in the first chunk, trailer at the end of the last.

    Each chunk is encoded with the GIL released, so one thread can encode the next chunk while
    another sends the current one. Iterate it from one thread at a time. A value that does not
    fit its column raises ``DataError`` (column and row) when its chunk is reached.
    """

    @property
    def columns(self) -> list[str]:
        """Target column names in stream order, for ``COPY table (…)``."""
    @property
    def num_rows(self) -> int:
        """Rows in the whole stream."""
    @property
    def total_bytes(self) -> int:
        """Bytes of the chunks handed out so far (the whole stream's once exhausted)."""
    def __iter__(self) -> PgCopyStream: ...
    def __next__(self) -> bytes: ...

def iter_pg_copy(
    data: Any,
    columns: Sequence[tuple[str, str, int]],
    *,
    source_columns: Sequence[str] | None = None,
) -> PgCopyStream:
    """Like :func:`encode_pg_copy`, but encodes the stream chunk by chunk as it is iterated.

    The schema is checked before this returns (``ConfigError``, as ``encode_pg_copy``); values
    are checked as their chunk is encoded, so the chunks before a bad value may already have been
    sent: write them inside a transaction that the ``DataError`` rolls back.
    """

def check_pg_copy_schema(
    schema: Any,
    columns: Sequence[tuple[str, str, int]],
    *,
    source_columns: Sequence[str] | None = None,
) -> None:
    """Checks that an Arrow schema can feed the target columns, without encoding.

    Raises ``ConfigError`` naming the column and both types.
    """

# --- the Kafka sink's producer (binding: py/producer; docs/kafka.md, "Producing") --------------

__all__ += ["DeliveredRecord", "TransactionalProducer"]

#: What the producer answers for a record librdkafka refused: its error (a confluent-kafka
#: ``KafkaError``), its row (from the call's first), its key and the size of its value.
_Refused: TypeAlias = tuple[Any, int, bytes | None, int]

@final
class DeliveredRecord:
    """A record's delivery report, as ``on_delivery(error, record)`` receives it (the methods of
    confluent-kafka's ``Message`` a callback reads)."""

    def topic(self) -> str: ...
    def partition(self) -> int: ...
    def offset(self) -> int: ...
    def key(self) -> bytes | None: ...
    def value(self) -> bytes | None: ...
    def __len__(self) -> int: ...

@final
class TransactionalProducer:
    """The Kafka sink's transactional producer: its own handle on the librdkafka that
    confluent-kafka loaded (its C API, called from the core: nothing shared with confluent-kafka's
    clients but the library). Its methods are those of confluent-kafka's ``Producer`` the sink
    calls, with the same errors — ``KafkaException`` of a ``KafkaError`` carrying librdkafka's
    fatal, retriable and abort flags, ``BufferError`` for a full queue — so
    ``laminar.kafka._errors.classify`` reads them as it reads confluent-kafka's.

    ``config`` is librdkafka's settings (values turned into text as confluent-kafka does) and
    confluent-kafka's callables: ``error_cb(KafkaError)``, ``stats_cb(json)``,
    ``on_delivery(KafkaError | None, DeliveredRecord)`` (called from ``poll``/``flush`` and the
    produce calls, in the caller's thread), ``logger`` (a ``logging.Logger``: librdkafka's lines,
    from the same calls) and ``oauth_cb(config) -> (token, expiry_s[, principal[, extensions]])``
    (SASL OAUTHBEARER: called on librdkafka's background thread, no polling needed).
    ``throttle_cb`` is refused. Every blocking call releases the GIL."""

    def __new__(cls, config: dict[str, Any]) -> Self: ...
    @staticmethod
    def librdkafka_version() -> str:
        """The version of the librdkafka confluent-kafka loaded (2.4.0 or newer is needed)."""
    def init_transactions(self, timeout: float | None = None) -> None: ...
    def begin_transaction(self) -> None: ...
    def send_offsets_to_transaction(
        self, positions: Sequence[tuple[str, int, int]], group_id: str, timeout: float | None = None
    ) -> None:
        """Commit ``(topic, partition, offset)`` for ``group_id`` within the open transaction
        (the epoch markers: docs/kafka.md)."""
    def commit_transaction(self, timeout: float | None = None) -> None: ...
    def abort_transaction(self, timeout: float | None = None) -> None: ...
    def produce(
        self,
        topic: str,
        value: bytes | str | None = None,
        key: bytes | str | None = None,
        partition: int = ...,
        callback: None = None,
        on_delivery: None = None,
        timestamp: int = 0,
        headers: Sequence[tuple[str, bytes | str | None]] | dict[str, Any] | None = None,
    ) -> None:
        """One record (confluent-kafka's positional order); no per-record callback."""
    def produce_arrow(
        self,
        data: Any,
        *,
        topic: str,
        headers: Sequence[tuple[str, bytes | str | None]] | None,
        value_format: Literal["json", "raw"] = "json",
        key: str | None = None,
        value_column: str | None = None,
        timeout: float = 60.0,
    ) -> tuple[int, int, _Refused | None]:
        """Encode ``data`` (Arrow) as the sink's records and hand each to librdkafka without
        the GIL, with ``headers``; wait up to ``timeout`` s for room in a full queue. Returns
        ``(records, payload_bytes, refused)``: the rows before a refused one were produced."""
    def produce_records(
        self,
        values: list[bytes | None],
        keys: list[bytes | None] | None,
        *,
        topic: str,
        headers: Sequence[tuple[str, bytes | str | None]] | None,
        timeout: float = 60.0,
    ) -> tuple[int, int, _Refused | None]:
        """Records encoded beforehand, as ``produce_arrow`` hands them over."""
    def poll(self, timeout: float | None = None) -> int: ...
    def flush(self, timeout: float | None = None) -> int:
        """Wait for every record's acknowledgement; the number left unacknowledged."""
    def purge(
        self, in_queue: bool = True, in_flight: bool = True, blocking: bool = True
    ) -> None: ...
    def list_topics(self, timeout: float | None = None) -> dict[str, tuple[int, Any]]:
        """Every topic of the cluster: ``{name: (partitions, KafkaError or None)}``."""
    @property
    def token_set(self) -> bool:
        """Whether ``oauth_cb`` has set a token."""
    def __len__(self) -> int: ...

# --- checksums ----------------------------------------------------------------------------------

__all__ += ["crc32c"]

def crc32c(data: bytes) -> int:
    """The CRC-32C (Castagnoli) of ``data``, as used in Kafka record batches."""

# --- the watcher's lingering rule (core: protocol/watcher/rules.rs) ------------------------------

__all__ += ["is_lingering"]

_DtState = Literal["prepare", "commit", "rollback"]
_WatcherAction = Literal[
    "wait", "complete", "roll_back", "set_rollback_then_roll_back", "report_only"
]

def is_lingering(age_s: float, lingering_after_s: float = 300.0) -> bool:
    """Whether an item still unresolved at ``age_s`` lingers (metric, alert)."""

# --- redo log (core: redo.rs) ---------------------------------------------------------------------

__all__ += ["decode_redo", "decode_redo_records", "encode_redo"]

def encode_redo(
    values: Sequence[bytes | None],
    keys: Sequence[bytes | None] | None = None,
    topics: Sequence[str | None] | None = None,
    partitions: Sequence[int] | None = None,
    headers: Sequence[Sequence[tuple[str, bytes | None]]] | None = None,
) -> list[bytes]:
    """Encodes one epoch's Kafka records (``values[i]``, ``keys[i]``, and for Spark's Kafka-sink
    shape ``topics[i]`` (``None``: the sink's topic), ``partitions[i]`` (-1: the partitioner's),
    ``headers[i]``) as redo-log blobs of about 1 MiB each (at least one): ``"LR"``, version,
    records, tagged fields, CRC-32C (docs/formats.md §2). A blob is version 1 unless one of its
    records has a topic, a partition or user headers (then version 2). Headers named
    ``laminar.*`` are not stored (the redo writes ``laminar.sink``/``laminar.epoch`` again)."""

def decode_redo(blob: bytes) -> tuple[list[bytes | None], list[bytes | None]]:
    """Decodes one redo-log blob of key/value records into ``(values, keys)``; raises
    ``InvalidStateEncoding`` for a corrupt, truncated or newer blob, and for one whose records
    carry a topic, a partition or headers (read it with :func:`decode_redo_records`)."""

def decode_redo_records(
    blob: bytes,
) -> tuple[
    list[bytes | None],
    list[bytes | None],
    list[str | None],
    list[int],
    list[list[tuple[str, bytes | None]]],
]:
    """Decodes one redo-log blob of either version into ``(values, keys, topics, partitions,
    headers)``, one entry per record (topic ``None``: the sink's topic; partition -1: the
    partitioner's; the user headers only); raises ``InvalidStateEncoding`` for a corrupt,
    truncated or newer blob."""

# --- the Kafka wire protocol (core: kafka/, on the kafka-protocol crate) --------------------------

__all__ += [
    "OAUTHBEARER_FAILURE_ACK",
    "LogRecord",
    "PartitionScan",
    "decode_api_versions",
    "decode_end_txn",
    "decode_fetch",
    "decode_find_coordinator",
    "decode_list_offsets",
    "decode_metadata",
    "decode_offset_commit",
    "decode_offset_fetch",
    "decode_record_batches",
    "decode_sasl_authenticate",
    "decode_sasl_handshake",
    "encode_api_versions",
    "encode_end_txn",
    "encode_fetch",
    "encode_find_coordinator",
    "encode_list_offsets",
    "encode_metadata",
    "encode_offset_commit",
    "encode_offset_fetch",
    "encode_sasl_authenticate",
    "encode_sasl_handshake",
    "kafka_api_version",
    "oauth_token_refresh_due",
    "oauthbearer_initial_response",
    "oauthbearer_refusal",
    "replay_batches",
    "sasl_session_step",
]

@final
class LogRecord:
    """One record as it sits in the log (``laminar.kafka.log.LogRecord``): compared, hashed and
    shown by its fields, like a frozen dataclass."""

    def __new__(
        cls,
        topic: str,
        partition: int,
        offset: int,
        timestamp_ms: int,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[tuple[str, bytes | None]],
        producer_id: int,
        producer_epoch: int,
        transactional: bool,
    ) -> LogRecord: ...
    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def offset(self) -> int: ...
    @property
    def timestamp_ms(self) -> int: ...
    @property
    def key(self) -> bytes | None:
        """The record key."""
    @property
    def value(self) -> bytes | None:
        """The record value."""
    @property
    def headers(self) -> tuple[tuple[str, bytes | None], ...]:
        """The headers, in order: ``((name, value), ...)``."""
    @property
    def producer_id(self) -> int: ...
    @property
    def producer_epoch(self) -> int: ...
    @property
    def transactional(self) -> bool:
        """Whether the record was written inside a transaction."""
    def header(self, name: str) -> bytes | None:
        """The value of the last header called ``name`` (``None`` if absent)."""
    def __eq__(self, value: object, /) -> bool: ...
    def __hash__(self) -> int: ...

_BatchRow: TypeAlias = tuple[int, int, int, int, int, int, bool, int | None, list[LogRecord]]

def decode_record_batches(
    data: bytes, *, topic: str = "", partition: int = 0, verify_crc: bool = True
) -> list[_BatchRow]:
    """Decodes the record batches of a Fetch answer's ``records`` (GIL released): ``(base_offset,
    last_offset, producer_id, producer_epoch, base_sequence, compression, transactional,
    control, records)`` each; a trailing partial batch is left out."""

def replay_batches(
    batches: Sequence[tuple[int | None, int, int, bool, int, int, Sequence[tuple[int, Any]]]],
    start_offset: int = 0,
) -> tuple[list[Any], list[Any], list[Any], list[int], list[int], int]:
    """The committed-only replay of decoded batches ``(control, producer_id, producer_epoch,
    transactional, base_offset, last_offset, [(offset, record), ...])``: ``(committed, aborted,
    open, commit_markers, abort_markers, end_offset)``."""

@final
class PartitionScan:
    """One partition read fetch by fetch: send ``fetch_request()``, feed the answer, until
    ``next_offset()`` is ``None``. Keeps the batches (``replay=False``), every record replayed
    committed-only (``replay=True``) or only ``sink_id``'s witness."""

    def __new__(
        cls,
        topic: str,
        partition: int,
        start: int,
        end: int | None,
        high_watermark: int,
        *,
        replay: bool = True,
        sink_id: str | None = None,
        verify_crc: bool = True,
    ) -> PartitionScan: ...
    def next_offset(self) -> int | None:
        """The offset to fetch next; ``None`` once the scan is complete."""
    def fetch_request(
        self, version: int, correlation_id: int, client_id: str, max_bytes: int, max_wait_ms: int
    ) -> bytes:
        """The Fetch request frame for the next offset."""
    def feed(
        self, response: bytes, version: int, correlation_id: int
    ) -> tuple[int, int, list[_BatchRow]]:
        """Feeds a Fetch answer (GIL released): ``(error code, high watermark, batches)``."""
    @property
    def stats(self) -> tuple[int, int, int, int]:
        """What was read: ``(fetches, bytes, batches, records)``."""
    def finish(self) -> Any:
        """Replay: ``(committed, aborted, open, commit_markers, abort_markers, end_offset)``;
        witness: ``(epoch, earliest timestamp of its records)`` or ``None``; batches: ``None``."""

def kafka_api_version(
    api_key: int, broker_min: int | None = None, broker_max: int | None = None
) -> int | None:
    """The version of ``api_key`` to use with a broker offering ``[broker_min, broker_max]``."""

def encode_api_versions(correlation_id: int, client_id: str) -> bytes:
    """ApiVersions (v0)."""

def decode_api_versions(data: bytes, correlation_id: int) -> tuple[int, list[tuple[int, int, int]]]:
    """``(error code, [(api key, min, max), ...])``."""

def encode_metadata(topic: str, version: int, correlation_id: int, client_id: str) -> bytes:
    """Metadata of one topic (never creating it)."""

def decode_metadata(
    data: bytes, version: int, correlation_id: int, topic: str
) -> tuple[list[tuple[int, str, int]], int, list[tuple[int, int, int]]]:
    """``(brokers, topic error code, [(partition, leader, error code)])``."""

def encode_list_offsets(
    topic: str,
    partitions: Sequence[int],
    timestamp: int,
    version: int,
    correlation_id: int,
    client_id: str,
) -> bytes:
    """ListOffsets at ``timestamp`` (-2 earliest, -1 latest)."""

def decode_list_offsets(
    data: bytes, version: int, correlation_id: int, topic: str
) -> list[tuple[int, int, int]]:
    """``[(partition, error code, offset)]``."""

def encode_fetch(
    topic: str,
    partition: int,
    offset: int,
    max_bytes: int,
    max_wait_ms: int,
    version: int,
    correlation_id: int,
    client_id: str,
) -> bytes:
    """Fetch (READ_UNCOMMITTED) of one partition from ``offset``."""

def decode_fetch(
    data: bytes, version: int, correlation_id: int, topic: str, partition: int
) -> tuple[int, int, bytes]:
    """``(error code, high watermark, raw record batches)``."""

def encode_find_coordinator(
    key: str, key_type: int, version: int, correlation_id: int, client_id: str
) -> bytes:
    """FindCoordinator of a group (``key_type=0``) or a transactional id (1)."""

def decode_find_coordinator(
    data: bytes, version: int, correlation_id: int
) -> tuple[int, str | None, int, str, int]:
    """``(error code, error message, node id, host, port)``."""

def encode_end_txn(
    transactional_id: str,
    producer_id: int,
    producer_epoch: int,
    commit: bool,
    version: int,
    correlation_id: int,
    client_id: str,
) -> bytes:
    """EndTxn (commit or abort)."""

def decode_end_txn(data: bytes, version: int, correlation_id: int) -> int:
    """The error code."""

def encode_offset_fetch(
    group: str, topic: str, partition: int, version: int, correlation_id: int, client_id: str
) -> bytes:
    """OffsetFetch of a group's committed offset on one partition."""

def decode_offset_fetch(
    data: bytes, version: int, correlation_id: int, topic: str, partition: int
) -> tuple[int, int, str | None]:
    """``(error code, committed offset (-1: none), metadata)``."""

def encode_offset_commit(
    group: str,
    topic: str,
    partition: int,
    offset: int,
    metadata: str,
    retention_ms: int,
    version: int,
    correlation_id: int,
    client_id: str,
) -> bytes:
    """OffsetCommit by a group without members (``retention_ms``: versions 2-4)."""

def decode_offset_commit(
    data: bytes, version: int, correlation_id: int, topic: str, partition: int
) -> int:
    """The partition's error code (-1 if the answer does not name it)."""

def encode_sasl_handshake(
    mechanism: str, version: int, correlation_id: int, client_id: str
) -> bytes:
    """SaslHandshake."""

def decode_sasl_handshake(data: bytes, version: int, correlation_id: int) -> tuple[int, list[str]]:
    """``(error code, enabled mechanisms)``."""

def encode_sasl_authenticate(
    auth_bytes: bytes, version: int, correlation_id: int, client_id: str
) -> bytes:
    """SaslAuthenticate with the mechanism's next message."""

def decode_sasl_authenticate(
    data: bytes, version: int, correlation_id: int
) -> tuple[int, str | None, bytes, int]:
    """``(error code, error message, the broker's next message, session lifetime in ms)``: the
    lifetime (v1+, KIP-368; 0: no limit) bounds how long the connection may be used before it
    authenticates again (`sasl_session_step`)."""

OAUTHBEARER_FAILURE_ACK: Final[bytes]
"""What the client sends after an OAUTHBEARER error challenge (RFC 7628 §3.2.3: ``b"\\x01"``)."""

def oauthbearer_initial_response(token: str, extensions: list[tuple[str, str]]) -> bytes:
    """The OAUTHBEARER initial client response (``n,,``, ``auth=Bearer <token>``, the SASL
    extensions); ``ValueError`` naming the part RFC 7628 forbids (never quoting the token)."""

def oauthbearer_refusal(answer: bytes) -> str | None:
    """The broker's answer to the initial response: None when it accepted the token, else the
    error challenge's status (the client then sends `OAUTHBEARER_FAILURE_ACK`)."""

def oauth_token_refresh_due(now_ms: int, obtained_ms: int, expiry_ms: int) -> bool:
    """Whether a token is due for a refresh: at 80 % of its lifetime (librdkafka's rule)."""

def sasl_session_step(
    now_ms: int, authenticated_ms: int, session_lifetime_ms: int
) -> Literal["send", "reauthenticate", "reconnect"]:
    """What a connection does before its next request: send it, re-authenticate first (past
    85 % of the session's lifetime) or connect again (expired: the broker would close it)."""

# --- protocol engine (core: protocol/; docs/engine.md) -------------------------------------------

__all__ += [
    "AtomicGroupMachine",
    "Command",
    "CrashPoint",
    "Event",
    "KafkaInDoubtMachine",
    "KafkaRecoveryMachine",
    "PostgresInDoubtMachine",
    "ResolveMachine",
    "ScaleOutTaskMachine",
    "SingleEpochMachine",
    "WatcherItem",
    "WatcherPassMachine",
    "default_group_id",
    "dtid",
    "epoch_committed",
    "identity_group",
    "kafka_participant_id",
    "kafka_participant_name",
    "marker_group",
    "next_epoch_base",
    "owner_decision",
    "participant_base",
    "participant_matches",
    "participant_open",
    "postgres_participant_name",
    "refusal_error",
    "retry_delay",
    "stop_fence_epoch",
]

_Protocol = Literal["atomic", "recovery", "scaleout", "kafka", "postgres"]
_Step = Literal["begin", "write", "prepare", "decide", "commit", "abort", "recover"]
_CommandKind = Literal[
    "reached",
    "sleep",
    "log",
    "init_sink",
    "known_epoch",
    "sink_begin",
    "sink_write",
    "sink_prepare",
    "sink_commit",
    "sink_abort",
    "sink_recover",
    "retry_commit",
    "abort_producer",
    "reinit_producer",
    "read_marker",
    "produce_redo",
    "end_txn",
    "fence_producer",
    "register_group",
    "read_sink_epochs",
    "read_ownership",
    "set_owner",
    "commit",
    "rollback",
    "bump_generation",
    "lock_group",
    "read_generation",
    "lock_table",
    "write_rows",
    "replace_redo",
    "record_decision",
    "rewrite_decision",
    "commit_decision",
    "read_decisions",
    "redo_exists",
    "read_redo",
    "delete_redo",
    "read_stop_fence",
    "create_dt",
    "set_dt_state",
    "read_dt_state",
    "conclude_dt",
    "read_dt_states",
    "read_participants",
    "read_participant_decisions",
    "run_tasks",
    "claim_epoch",
    "mark_participants",
    "list_prepared",
    "commit_prepared",
    "rollback_prepared",
    "lock_partition",
    "claim_participants",
    "peek_partition",
    "write_partition",
    "release_participants",
]
_EventKind = Literal[
    "ack",
    "failed",
    "missing",
    "began",
    "claimed",
    "generation",
    "progress",
    "ownership",
    "decisions",
    "marker",
    "found",
    "applied",
    "redo_read",
    "prepared",
    "end_txn",
    "dt_state",
    "stop_fence",
    "dt_rows",
    "participants",
    "participant_decisions",
    "prepared_list",
    "task_results",
    "rows",
]
_FailureKind = Literal["abortable", "in_doubt", "fenced", "fatal"]
_RefusalKind = Literal[
    "corrupt_decision",
    "kafka_behind",
    "kafka_ahead",
    "epoch_backwards",
    "other_epoch_while_incomplete",
    "fenced",
    "invalid_epoch",
    "decision_lost",
    "awaiting_replay",
    "not_decided",
    "incomplete",
    "still_in_doubt",
    "foreign_owner",
    "against_decision",
    "not_found",
    "illegal_transition",
]
_End = Literal["ok", "refused", "failed"]
_ParticipantKind = Literal["attempt", "postgres", "kafka"]
#: A task's result row in ``laminar.protocol.scaleout.result_schema()``'s order: part, attempt,
#: participant, kind, resource, records, prepared_state, marker, status.
_ResultRow = tuple[int, str, str, str, str, int, str, int | None, str]

@final
class CrashPoint:
    """A crash point: where the crash tests kill a writer, named after the step it follows
    (``atomic.after_decision``). Coordinator points are emitted by the machines as ``reached``
    commands; sink points are reached inside the sink operation ``after`` names."""

    @staticmethod
    def all() -> list[CrashPoint]:
        """Every crash point, protocol by protocol, in the order a run reaches them."""
    @staticmethod
    def for_protocol(protocol: _Protocol) -> list[CrashPoint]:
        """The points of one protocol."""
    @staticmethod
    def parse(name: str) -> CrashPoint:
        """The point a name (``atomic.after_decision``) denotes; ``ValueError`` if none."""
    @property
    def name(self) -> str:
        """``<protocol>.<step>``, as ``LAMINAR_CRASH_AT`` takes it."""
    @property
    def protocol(self) -> _Protocol:
        """The protocol it belongs to."""
    @property
    def after(self) -> _CommandKind:
        """The command it follows (or, ``position == "within"``, the sink operation it is in)."""
    @property
    def position(self) -> Literal["after", "within"]:
        """Right after its command, or within it."""
    @property
    def in_task(self) -> bool:
        """Whether a scale-out task (not the coordinator) reaches it."""
    @property
    def phase(self) -> Literal["start", "epoch", "recovery", "task"]:
        """When a run reaches it: once per start of a writer, once per epoch, only when
        something decided earlier is brought level, or once per scale-out task attempt."""
    @property
    def decided(self) -> bool:
        """Whether the epoch being written is committed by the time the point is reached (a
        writer killed here and restarted skips the epoch's replay)."""
    def __eq__(self, value: object, /) -> bool: ...
    def __hash__(self) -> int: ...

@disjoint_base
class Command:
    """One thing for the driver to do: a class per kind (``Command.SinkBegin``, …) with the
    fields that kind has (docs/engine.md lists each kind with its statement or client call).
    A performer matches them (``match c: case Command.SinkBegin(sink_id, epoch): …``) and ends
    with ``typing.assert_never``: the union each machine's ``poll`` returns names every kind it
    emits, so a kind a performer forgets is a type error."""

    @property
    def kind(self) -> _CommandKind:
        """The kind's name (``sink_begin``), as `CrashPoint.after` names it."""
    @property
    def step(self) -> _Step | None:
        """The step of an epoch the command is (a span of its own when tracing); None for a
        command that is no step (a read, a lock, a log line)."""
    @final
    class Reached(Command):
        __match_args__ = ("point",)
        def __new__(cls, point: CrashPoint) -> Command.Reached: ...
        @property
        def point(self) -> CrashPoint: ...

    @final
    class Sleep(Command):
        __match_args__ = ("ms",)
        def __new__(cls, ms: int) -> Command.Sleep: ...
        @property
        def ms(self) -> int: ...

    @final
    class Log(Command):
        __match_args__ = ("level", "message")
        def __new__(cls, level: Literal["info", "warning"], message: str) -> Command.Log: ...
        @property
        def level(self) -> Literal["info", "warning"]: ...
        @property
        def message(self) -> str: ...

    @final
    class InitSink(Command):
        __match_args__ = ("sink_id",)
        def __new__(cls, sink_id: str) -> Command.InitSink: ...
        @property
        def sink_id(self) -> str: ...

    @final
    class KnownEpoch(Command):
        __match_args__ = ("sink_id",)
        def __new__(cls, sink_id: str) -> Command.KnownEpoch: ...
        @property
        def sink_id(self) -> str: ...

    @final
    class SinkBegin(Command):
        __match_args__ = ("sink_id", "epoch")
        def __new__(cls, sink_id: str, epoch: int) -> Command.SinkBegin: ...
        @property
        def sink_id(self) -> str: ...
        @property
        def epoch(self) -> int: ...

    @final
    class SinkWrite(Command):
        __match_args__ = ("sink_id", "epoch", "keep")
        def __new__(cls, sink_id: str, epoch: int, keep: bool) -> Command.SinkWrite: ...
        @property
        def sink_id(self) -> str: ...
        @property
        def epoch(self) -> int: ...
        @property
        def keep(self) -> bool: ...

    @final
    class SinkPrepare(Command):
        __match_args__ = ("sink_id", "epoch")
        def __new__(cls, sink_id: str, epoch: int) -> Command.SinkPrepare: ...
        @property
        def sink_id(self) -> str: ...
        @property
        def epoch(self) -> int: ...

    @final
    class SinkCommit(Command):
        __match_args__ = ("sink_id", "epoch")
        def __new__(cls, sink_id: str, epoch: int) -> Command.SinkCommit: ...
        @property
        def sink_id(self) -> str: ...
        @property
        def epoch(self) -> int: ...

    @final
    class SinkAbort(Command):
        __match_args__ = ("sink_id", "epoch")
        def __new__(cls, sink_id: str, epoch: int) -> Command.SinkAbort: ...
        @property
        def sink_id(self) -> str: ...
        @property
        def epoch(self) -> int: ...

    @final
    class SinkRecover(Command):
        __match_args__ = ("sink_id",)
        def __new__(cls, sink_id: str) -> Command.SinkRecover: ...
        @property
        def sink_id(self) -> str: ...

    @final
    class RetryCommit(Command):
        __match_args__ = ("sink_id", "epoch")
        def __new__(cls, sink_id: str, epoch: int) -> Command.RetryCommit: ...
        @property
        def sink_id(self) -> str: ...
        @property
        def epoch(self) -> int: ...

    @final
    class AbortProducer(Command):
        __match_args__ = ("sink_id",)
        def __new__(cls, sink_id: str) -> Command.AbortProducer: ...
        @property
        def sink_id(self) -> str: ...

    @final
    class ReinitProducer(Command):
        __match_args__ = ("sink_id",)
        def __new__(cls, sink_id: str) -> Command.ReinitProducer: ...
        @property
        def sink_id(self) -> str: ...

    @final
    class ReadMarker(Command):
        __match_args__ = ("sink_id",)
        def __new__(cls, sink_id: str) -> Command.ReadMarker: ...
        @property
        def sink_id(self) -> str: ...

    @final
    class ProduceRedo(Command):
        __match_args__ = ("sink_id", "epoch", "blob")
        def __new__(cls, sink_id: str, epoch: int, blob: int) -> Command.ProduceRedo: ...
        @property
        def sink_id(self) -> str: ...
        @property
        def epoch(self) -> int: ...
        @property
        def blob(self) -> int: ...

    @final
    class EndTxn(Command):
        __match_args__ = ("transactional_id", "producer_id", "producer_epoch", "epoch")
        def __new__(
            cls, transactional_id: str, producer_id: int, producer_epoch: int, epoch: int
        ) -> Command.EndTxn: ...
        @property
        def transactional_id(self) -> str: ...
        @property
        def producer_id(self) -> int: ...
        @property
        def producer_epoch(self) -> int: ...
        @property
        def epoch(self) -> int: ...

    @final
    class FenceProducer(Command):
        __match_args__ = ("transactional_id",)
        def __new__(cls, transactional_id: str) -> Command.FenceProducer: ...
        @property
        def transactional_id(self) -> str: ...

    @final
    class RegisterGroup(Command):
        __match_args__ = ("group_id",)
        def __new__(cls, group_id: str) -> Command.RegisterGroup: ...
        @property
        def group_id(self) -> str: ...

    @final
    class ReadSinkEpochs(Command):
        __match_args__ = ("sink_ids",)
        def __new__(cls, sink_ids: list[str]) -> Command.ReadSinkEpochs: ...
        @property
        def sink_ids(self) -> list[str]: ...

    @final
    class ReadOwnership(Command):
        __match_args__ = ("registry_id", "members")
        def __new__(cls, registry_id: str, members: list[str]) -> Command.ReadOwnership: ...
        @property
        def registry_id(self) -> str: ...
        @property
        def members(self) -> list[str]: ...

    @final
    class SetOwner(Command):
        __match_args__ = ("sink_ids", "owner", "epoch_base")
        def __new__(cls, sink_ids: list[str], owner: str, epoch_base: int) -> Command.SetOwner: ...
        @property
        def sink_ids(self) -> list[str]: ...
        @property
        def owner(self) -> str: ...
        @property
        def epoch_base(self) -> int: ...

    @final
    class Commit(Command):
        __match_args__ = ()
        def __new__(cls) -> Command.Commit: ...

    @final
    class Rollback(Command):
        __match_args__ = ()
        def __new__(cls) -> Command.Rollback: ...

    @final
    class BumpGeneration(Command):
        __match_args__ = ("group_id",)
        def __new__(cls, group_id: str) -> Command.BumpGeneration: ...
        @property
        def group_id(self) -> str: ...

    @final
    class LockGroup(Command):
        __match_args__ = ("group_id",)
        def __new__(cls, group_id: str) -> Command.LockGroup: ...
        @property
        def group_id(self) -> str: ...

    @final
    class ReadGeneration(Command):
        __match_args__ = ("group_id",)
        def __new__(cls, group_id: str) -> Command.ReadGeneration: ...
        @property
        def group_id(self) -> str: ...

    @final
    class LockTable(Command):
        __match_args__ = ("sink_id", "epoch")
        def __new__(cls, sink_id: str, epoch: int) -> Command.LockTable: ...
        @property
        def sink_id(self) -> str: ...
        @property
        def epoch(self) -> int: ...

    @final
    class WriteRows(Command):
        __match_args__ = ("sink_id", "epoch")
        def __new__(cls, sink_id: str, epoch: int) -> Command.WriteRows: ...
        @property
        def sink_id(self) -> str: ...
        @property
        def epoch(self) -> int: ...

    @final
    class ReplaceRedo(Command):
        __match_args__ = ("transactional_id", "epoch", "keep")
        def __new__(cls, transactional_id: str, epoch: int, keep: bool) -> Command.ReplaceRedo: ...
        @property
        def transactional_id(self) -> str: ...
        @property
        def epoch(self) -> int: ...
        @property
        def keep(self) -> bool: ...

    @final
    class RecordDecision(Command):
        __match_args__ = (
            "transactional_id",
            "epoch",
            "previous_epoch",
            "prepared_state",
            "group_id",
        )
        def __new__(
            cls,
            transactional_id: str,
            epoch: int,
            previous_epoch: int | None,
            prepared_state: str,
            group_id: str,
        ) -> Command.RecordDecision: ...
        @property
        def transactional_id(self) -> str: ...
        @property
        def epoch(self) -> int: ...
        @property
        def previous_epoch(self) -> int | None: ...
        @property
        def prepared_state(self) -> str: ...
        @property
        def group_id(self) -> str: ...

    @final
    class RewriteDecision(Command):
        __match_args__ = ("transactional_id", "epoch", "previous_epoch", "prepared_state")
        def __new__(
            cls, transactional_id: str, epoch: int, previous_epoch: int | None, prepared_state: str
        ) -> Command.RewriteDecision: ...
        @property
        def transactional_id(self) -> str: ...
        @property
        def epoch(self) -> int: ...
        @property
        def previous_epoch(self) -> int | None: ...
        @property
        def prepared_state(self) -> str: ...

    @final
    class CommitDecision(Command):
        __match_args__ = ()
        def __new__(cls) -> Command.CommitDecision: ...

    @final
    class ReadDecisions(Command):
        __match_args__ = ("sink_ids", "group_id")
        def __new__(
            cls, sink_ids: list[str] | None, group_id: str | None
        ) -> Command.ReadDecisions: ...
        @property
        def sink_ids(self) -> list[str] | None: ...
        @property
        def group_id(self) -> str | None: ...

    @final
    class RedoExists(Command):
        __match_args__ = ("transactional_id", "epoch")
        def __new__(cls, transactional_id: str, epoch: int) -> Command.RedoExists: ...
        @property
        def transactional_id(self) -> str: ...
        @property
        def epoch(self) -> int: ...

    @final
    class ReadRedo(Command):
        __match_args__ = ("transactional_id", "epoch")
        def __new__(cls, transactional_id: str, epoch: int) -> Command.ReadRedo: ...
        @property
        def transactional_id(self) -> str: ...
        @property
        def epoch(self) -> int: ...

    @final
    class DeleteRedo(Command):
        __match_args__ = ("transactional_id", "up_to")
        def __new__(cls, transactional_id: str, up_to: int) -> Command.DeleteRedo: ...
        @property
        def transactional_id(self) -> str: ...
        @property
        def up_to(self) -> int: ...

    @final
    class ReadStopFence(Command):
        __match_args__ = ("group_id",)
        def __new__(cls, group_id: str) -> Command.ReadStopFence: ...
        @property
        def group_id(self) -> str: ...

    @final
    class CreateDt(Command):
        __match_args__ = ("dtid", "group_id", "epoch")
        def __new__(cls, dtid: str, group_id: str, epoch: int) -> Command.CreateDt: ...
        @property
        def dtid(self) -> str: ...
        @property
        def group_id(self) -> str: ...
        @property
        def epoch(self) -> int: ...

    @final
    class SetDtState(Command):
        __match_args__ = ("dtid", "from_state", "to_state", "message")
        def __new__(
            cls, dtid: str, from_state: _DtState, to_state: _DtState, message: str
        ) -> Command.SetDtState: ...
        @property
        def dtid(self) -> str: ...
        @property
        def from_state(self) -> _DtState: ...
        @property
        def to_state(self) -> _DtState: ...
        @property
        def message(self) -> str: ...

    @final
    class ReadDtState(Command):
        __match_args__ = ("dtid", "for_share")
        def __new__(cls, dtid: str, for_share: bool) -> Command.ReadDtState: ...
        @property
        def dtid(self) -> str: ...
        @property
        def for_share(self) -> bool: ...

    @final
    class ConcludeDt(Command):
        __match_args__ = ("dtid", "from_state")
        def __new__(cls, dtid: str, from_state: _DtState | None) -> Command.ConcludeDt: ...
        @property
        def dtid(self) -> str: ...
        @property
        def from_state(self) -> _DtState | None: ...

    @final
    class ReadDtStates(Command):
        __match_args__ = ("group_id",)
        def __new__(cls, group_id: str | None) -> Command.ReadDtStates: ...
        @property
        def group_id(self) -> str | None: ...

    @final
    class ReadParticipants(Command):
        __match_args__ = ("dtid",)
        def __new__(cls, dtid: str) -> Command.ReadParticipants: ...
        @property
        def dtid(self) -> str: ...

    @final
    class ReadParticipantDecisions(Command):
        __match_args__ = ()
        def __new__(cls) -> Command.ReadParticipantDecisions: ...

    @final
    class RunTasks(Command):
        __match_args__ = ("dtid", "epoch")
        def __new__(cls, dtid: str, epoch: int) -> Command.RunTasks: ...
        @property
        def dtid(self) -> str: ...
        @property
        def epoch(self) -> int: ...

    @final
    class ClaimEpoch(Command):
        __match_args__ = ("sink_id", "epoch", "row_count")
        def __new__(cls, sink_id: str, epoch: int, row_count: int) -> Command.ClaimEpoch: ...
        @property
        def sink_id(self) -> str: ...
        @property
        def epoch(self) -> int: ...
        @property
        def row_count(self) -> int: ...

    @final
    class MarkParticipants(Command):
        __match_args__ = ("dtid", "names", "state")
        def __new__(
            cls,
            dtid: str,
            names: list[str],
            state: Literal["claimed", "prepared", "committed", "rolled_back"],
        ) -> Command.MarkParticipants: ...
        @property
        def dtid(self) -> str: ...
        @property
        def names(self) -> list[str]: ...
        @property
        def state(self) -> Literal["claimed", "prepared", "committed", "rolled_back"]: ...

    @final
    class ListPrepared(Command):
        __match_args__ = ()
        def __new__(cls) -> Command.ListPrepared: ...

    @final
    class CommitPrepared(Command):
        __match_args__ = ("gid",)
        def __new__(cls, gid: str) -> Command.CommitPrepared: ...
        @property
        def gid(self) -> str: ...

    @final
    class RollbackPrepared(Command):
        __match_args__ = ("gid",)
        def __new__(cls, gid: str) -> Command.RollbackPrepared: ...
        @property
        def gid(self) -> str: ...

    @final
    class LockPartition(Command):
        __match_args__ = ("key",)
        def __new__(cls, key: str) -> Command.LockPartition: ...
        @property
        def key(self) -> str: ...

    @final
    class ClaimParticipants(Command):
        __match_args__ = ("dtid", "participants")
        def __new__(
            cls, dtid: str, participants: list[tuple[str, _ParticipantKind, str]]
        ) -> Command.ClaimParticipants: ...
        @property
        def dtid(self) -> str: ...
        @property
        def participants(self) -> list[tuple[str, _ParticipantKind, str]]: ...

    @final
    class PeekPartition(Command):
        __match_args__ = ()
        def __new__(cls) -> Command.PeekPartition: ...

    @final
    class WritePartition(Command):
        __match_args__ = ()
        def __new__(cls) -> Command.WritePartition: ...

    @final
    class ReleaseParticipants(Command):
        __match_args__ = ("prepared",)
        def __new__(cls, prepared: bool) -> Command.ReleaseParticipants: ...
        @property
        def prepared(self) -> bool: ...

#: What every driver performs alike (``laminar.engine.loop.perform_driver_side``).
_DriverSideCommand: TypeAlias = Command.Reached | Command.Sleep | Command.Log
#: A Kafka sink's commands that Kafka recovery, the group and the watcher share.
_KafkaSinkCommand: TypeAlias = (
    Command.InitSink
    | Command.KnownEpoch
    | Command.ReadMarker
    | Command.SinkBegin
    | Command.SinkCommit
    | Command.SinkAbort
    | Command.ProduceRedo
    | Command.EndTxn
)
#: The decision records' reads that Kafka recovery, the group and the watcher share.
_RecordsCommand: TypeAlias = (
    Command.ReadSinkEpochs
    | Command.ReadDecisions
    | Command.RedoExists
    | Command.ReadRedo
    | Command.DeleteRedo
)
#: Statements on the distributed protocol's records (and ``pg_prepared_xacts``): each committed
#: at once when no transaction is open.
_DistributedRecordCommand: TypeAlias = (
    Command.CreateDt
    | Command.SetDtState
    | Command.ReadDtState
    | Command.ConcludeDt
    | Command.ReadDtStates
    | Command.ReadParticipants
    | Command.ReadParticipantDecisions
    | Command.MarkParticipants
    | Command.ClaimEpoch
    | Command.ListPrepared
    | Command.RewriteDecision
)
#: The distributed protocol's records and PostgreSQL's prepared transactions.
_DistributedCommand: TypeAlias = (
    _DistributedRecordCommand
    | Command.ReadStopFence
    | Command.CommitPrepared
    | Command.RollbackPrepared
    | Command.FenceProducer
)
#: What `SingleEpochMachine` emits.
_SingleCommand: TypeAlias = (
    _DriverSideCommand
    | Command.SinkBegin
    | Command.SinkWrite
    | Command.SinkCommit
    | Command.SinkAbort
    | Command.SinkRecover
)
#: What `KafkaInDoubtMachine` emits.
_KafkaInDoubtCommand: TypeAlias = (
    _DriverSideCommand
    | Command.RetryCommit
    | Command.AbortProducer
    | Command.ReinitProducer
    | Command.ReadMarker
)
#: What `PostgresInDoubtMachine` emits.
_PostgresInDoubtCommand: TypeAlias = (
    _DriverSideCommand | Command.CommitPrepared | Command.RollbackPrepared | Command.ReadSinkEpochs
)
#: What `KafkaRecoveryMachine` emits.
_KafkaRecoveryCommand: TypeAlias = (
    _DriverSideCommand
    | Command.InitSink
    | Command.SinkBegin
    | Command.SinkCommit
    | Command.SinkAbort
    | Command.ReadMarker
    | Command.ProduceRedo
    | Command.EndTxn
    | Command.ReadDecisions
    | Command.RedoExists
    | Command.ReadRedo
    | Command.DeleteRedo
)
#: What a resolution of one distributed transaction emits (`protocol/resolution.rs`, which runs
#: Kafka recovery): the watcher, `ResolveMachine` and the scale-out coordinator run it.
_ResolutionCommand: TypeAlias = (
    _KafkaRecoveryCommand
    | Command.FenceProducer
    | Command.CommitPrepared
    | Command.RollbackPrepared
    | Command.ListPrepared
    | Command.ReadDtState
    | Command.SetDtState
    | Command.ConcludeDt
    | Command.ReadParticipants
)
#: What `ResolveMachine` emits (``laminar resolve``: it runs resolutions and Kafka recovery).
_ResolveCommand: TypeAlias = (
    _ResolutionCommand
    | Command.ReadDtStates
    | Command.ReadParticipantDecisions
    | Command.MarkParticipants
    | Command.RewriteDecision
)
#: What `WatcherPassMachine` emits (it runs resolutions and Kafka recovery).
_WatcherCommand: TypeAlias = (
    _ResolutionCommand | Command.Rollback | Command.ReadDtStates | Command.ReadParticipantDecisions
)
#: What `ScaleOutTaskMachine` emits.
_TaskCommand: TypeAlias = (
    _DriverSideCommand
    | Command.InitSink
    | Command.KnownEpoch
    | Command.SinkBegin
    | Command.SinkPrepare
    | Command.SinkAbort
    | Command.Commit
    | Command.ReadDecisions
    | Command.ReadSinkEpochs
    | Command.ReadStopFence
    | Command.CreateDt
    | Command.ReadDtState
    | Command.ListPrepared
    | Command.RollbackPrepared
    | Command.LockPartition
    | Command.ClaimParticipants
    | Command.PeekPartition
    | Command.WritePartition
    | Command.ReleaseParticipants
)
#: What `AtomicGroupMachine` emits (it runs watcher passes and the scale-out coordinator).
_AtomicCommand: TypeAlias = (
    _WatcherCommand
    | Command.KnownEpoch
    | Command.SinkPrepare
    | Command.SinkWrite
    | Command.RegisterGroup
    | Command.ReadSinkEpochs
    | Command.ReadOwnership
    | Command.SetOwner
    | Command.Commit
    | Command.BumpGeneration
    | Command.LockGroup
    | Command.ReadGeneration
    | Command.LockTable
    | Command.WriteRows
    | Command.ReplaceRedo
    | Command.RecordDecision
    | Command.CommitDecision
    | Command.ClaimEpoch
    | Command.CreateDt
    | Command.RunTasks
    | Command.MarkParticipants
)

@final
class Event:
    """The result of a command, built by the driver with one of these constructors."""

    @staticmethod
    def ack() -> Event: ...
    @staticmethod
    def failed(kind: _FailureKind, message: str, *, retriable: bool = True) -> Event:
        """The command failed; ``kind`` classifies the error the driver caught (which it
        re-raises if the machine ends ``"failed"``)."""
    @staticmethod
    def missing() -> Event:
        """The command names a sink the driver has no configuration for."""
    @staticmethod
    def began(opened: bool) -> Event: ...
    @staticmethod
    def claimed(claimed: bool) -> Event: ...
    @staticmethod
    def generation(generation: int | None) -> Event: ...
    @staticmethod
    def progress(epochs: Sequence[tuple[str, int | None]]) -> Event: ...
    @staticmethod
    def ownership(
        owner: str | None, epoch_base: int, member_owners: Sequence[tuple[str, str]]
    ) -> Event: ...
    @staticmethod
    def decisions(rows: Sequence[tuple[str, int, int | None, str, str, float]]) -> Event:
        """``(transactional_id, epoch, previous_epoch, prepared_state, group_id, age_s)``."""
    @staticmethod
    def marker(epoch: int | None, now_ms: int) -> Event:
        """The last committed epoch, with the driver's monotonic clock in ms."""
    @staticmethod
    def found(found: bool) -> Event: ...
    @staticmethod
    def applied(applied: bool) -> Event: ...
    @staticmethod
    def redo_read(blobs: int) -> Event: ...
    @staticmethod
    def prepared(prepared_state: str) -> Event: ...
    @staticmethod
    def end_txn(refused: str | None = None) -> Event: ...
    @staticmethod
    def dt_state(state: _DtState | None = None) -> Event: ...
    @staticmethod
    def stop_fence(epoch: int | None = None, writer: str | None = None) -> Event:
        """``read_stop_fence``: the group's fenced epoch (None: no fence) and the writer the
        next run reserved it for (None: not reserved)."""
    @staticmethod
    def dt_rows(rows: Sequence[tuple[str, int, _DtState, float]]) -> Event:
        """``(dtid, epoch, state, age_s)``."""
    @staticmethod
    def participants(rows: Sequence[tuple[str, _ParticipantKind, str]]) -> Event:
        """``(participant, kind, resource)``."""
    @staticmethod
    def participant_decisions(rows: Sequence[tuple[str, str, _DtState, str, str]]) -> Event:
        """``(dtid, group_id, state, participant, resource)``, newest decision first."""
    @staticmethod
    def prepared_list(gids: Sequence[tuple[str, str | None, int | None, float]]) -> Event:
        """``(gid, sink_id, epoch, age_s)``."""
    @staticmethod
    def task_results(results: Sequence[_ResultRow]) -> Event: ...
    @staticmethod
    def rows(count: int) -> Event: ...
    @property
    def kind(self) -> _EventKind: ...

_C = TypeVar("_C", bound=Command)

class _Machine(Generic[_C]):
    """What every protocol machine has (docs/engine.md, "The driver loop"); ``_C`` is the union
    of the command kinds it emits (a nominal parameter: `laminar.engine.loop.drive` checks that
    the performer takes every one of them)."""

    def poll(self) -> _C | None:
        """The next command to perform, or None once the machine has ended."""
    def handle(self, event: Event) -> None:
        """The result of the command ``poll`` returned last."""
    @property
    def end(self) -> _End | None:
        """``"ok"``, ``"refused"`` (raise ``raise_refusal()``), ``"failed"`` (re-raise the
        error caught for the failed command), or None while it runs."""
    @property
    def refusal(self) -> _RefusalKind | None:
        """The refusal's kind, when it ended refused."""
    @property
    def failure(self) -> tuple[_FailureKind, str] | None:
        """``(kind, message)`` of the failed command, when it ended failed."""
    def raise_refusal(self) -> None:
        """Raises the refusal as its ``laminar.errors`` class (the one error bridge)."""

@final
class AtomicGroupMachine(_Machine[_AtomicCommand]):
    """An atomic group's coordinator (docs/protocol.md §3): start-up, epochs, retries."""

    def __new__(
        cls,
        group_id: str,
        postgres: Sequence[str],
        kafka: Sequence[str],
        *,
        redo_log: bool = False,
        owner: str | None = None,
        restart_on_new_query: bool = False,
        retries: int = 3,
        retry_backoff_ms: int = 500,
        scale_out: bool = False,
    ) -> Self: ...
    def start(self) -> None:
        """Start the group: register, owner guard, fence, recover."""
    def write_epoch(self, batch: int) -> None:
        """Write Spark batch ``batch`` (epoch ``epoch_base + batch``), starting first if
        needed."""
    def commit_collected(self, batch: int, resume: tuple[int, int] | None = None) -> None:
        """Scale-out: decide and complete Spark batch ``batch`` whose tasks ran already and
        created its record (``run_tasks`` asks for the results they sent; the start-up's
        watcher pass spares that record). ``resume``: ``(generation, epoch_base)`` an earlier
        commit of the same query run started with; the start-up is skipped while the group still
        shows it and nothing else is left to resolve."""
    @property
    def resumed(self) -> bool:
        """Whether the last operation resumed a run's start (no start-up ran)."""
    @property
    def committed(self) -> bool:
        """Whether the last ``write_epoch`` committed (False: skipped)."""
    @property
    def attempts(self) -> int: ...
    @property
    def started(self) -> bool: ...
    @property
    def generation(self) -> int: ...
    @property
    def epoch_base(self) -> int: ...
    @property
    def awaiting(self) -> list[tuple[str, int]]:
        """Kafka sinks whose decided epoch only Spark's replay can complete."""
    @property
    def pending(self) -> list[str]:
        """Decided distributed transactions not concluded yet (scale-out)."""
    def last_committed(self, sink_id: str) -> int | None: ...

@final
class KafkaRecoveryMachine(_Machine[_KafkaRecoveryCommand]):
    """Bringing Kafka sinks level with the decision log (EndTxn, init, redo or replay)."""

    def __new__(cls, sinks: Sequence[str]) -> Self: ...
    @property
    def awaiting(self) -> list[tuple[str, int]]: ...

@final
class ScaleOutTaskMachine(_Machine[_TaskCommand]):
    """One attempt of one partition of a scale-out epoch (docs/protocol.md §4, "Task")."""

    def __new__(
        cls,
        dtid: str,
        epoch: int,
        part: int,
        attempt: str,
        postgres: Sequence[tuple[str, str]],
        kafka: Sequence[str],
        *,
        group_id: str | None = None,
        writer: str | None = None,
    ) -> Self:
        """``postgres``: ``(sink_id, gid)`` per PostgreSQL sink; ``kafka``: transactional
        ids; ``group_id``: create the epoch's record of this group if it is missing;
        ``writer``: the token of the Spark writer whose task this is (a stop fence reserved
        for another writer ends the attempt: docs/protocol.md §4)."""
    @property
    def results(self) -> list[_ResultRow]: ...

@final
class WatcherItem:
    """One unresolved transaction a watcher pass found, and what came of it."""

    @property
    def kind(self) -> Literal["kafka_behind", "corrupt_decision", "participant", "distributed"]: ...
    @property
    def id(self) -> str: ...
    @property
    def epoch(self) -> int | None: ...
    @property
    def age_s(self) -> float: ...
    @property
    def decision(self) -> _DtState | None: ...
    @property
    def dtid(self) -> str | None: ...
    @property
    def detail(self) -> str: ...
    @property
    def action(self) -> _WatcherAction: ...
    @property
    def outcome(self) -> Literal["unresolved", "resolved", "failed", "unreadable"]:
        """``unreadable``: a decided Kafka epoch whose marker could not be read."""
    @property
    def lingering(self) -> bool: ...

@final
class WatcherPassMachine(_Machine[_WatcherCommand]):
    """One pass of the resolution watcher (or, ``act=False``, the inspection of ``laminar
    status``)."""

    def __new__(
        cls,
        *,
        group_id: str | None = None,
        sink_ids: Sequence[str] | None = None,
        check_kafka: bool = True,
        resolve_after_s: float = 60.0,
        lingering_after_s: float = 300.0,
        act: bool = True,
    ) -> Self: ...
    @property
    def items(self) -> list[WatcherItem]: ...
    @property
    def lingering(self) -> int: ...

@final
class ResolveMachine(_Machine[_ResolveCommand]):
    """``laminar resolve``: never against a recorded decision without ``force``."""

    def __new__(
        cls,
        kind: Literal["kafka", "gid", "dtid"],
        target: str,
        *,
        commit: bool,
        force: bool = False,
    ) -> Self: ...
    @property
    def outcome(
        self,
    ) -> (
        tuple[Literal["resolved"], bool]
        | tuple[Literal["kafka_committed", "awaits_replay"], int]
        | tuple[Literal["moved_back"], int | None]
        | None
    ): ...

@final
class SingleEpochMachine(_Machine[_SingleCommand]):
    """One epoch of a lone sink, with the writer's retries and in-doubt resolution."""

    def __new__(
        cls,
        sink_id: str,
        epoch: int,
        last: int | None,
        *,
        refuse_backwards: bool,
        retries: int = 3,
        retry_backoff_ms: int = 500,
    ) -> Self: ...
    @property
    def committed(self) -> bool: ...
    @property
    def attempts(self) -> int: ...

@final
class KafkaInDoubtMachine(_Machine[_KafkaInDoubtCommand]):
    """A Kafka sink's commit whose outcome is unknown, resolved from the marker."""

    def __new__(cls, sink_id: str, epoch: int, commit_in_flight: bool) -> Self: ...
    @property
    def committed(self) -> bool | None: ...
    @property
    def marker(self) -> int | None: ...

@final
class PostgresInDoubtMachine(_Machine[_PostgresInDoubtCommand]):
    """A PostgreSQL sink's commit whose outcome is unknown, resolved from
    ``laminar.sink_epochs``."""

    def __new__(
        cls, sink_id: str, epoch: int, pending_gid: str | None = None, *, commit: bool = True
    ) -> Self: ...
    @property
    def committed(self) -> bool | None: ...
    @property
    def last(self) -> int | None: ...

def refusal_error(
    kind: _RefusalKind, message: str, *, sink_id: str | None = None, epoch: int | None = None
) -> Exception:
    """The ``laminar.errors`` exception for a refusal of the core (with a ``refusal``
    attribute naming its kind): the one error bridge."""

def owner_decision(
    registry_id: str,
    members: Sequence[str],
    *,
    owner: str | None,
    epoch_base: int,
    member_owners: Sequence[tuple[str, str]],
    last_committed: Sequence[int | None],
    mine: str | None,
    restart: bool,
) -> tuple[Literal["keep", "claim"], int, str | None]:
    """The checkpoint-reset guard (docs/protocol.md §5) from the registry row (``owner``,
    ``epoch_base``) and the members' owners and last committed epochs: ``("keep", base, None)``,
    or ``("claim", base, replaced)`` to record ``mine`` as the owner (``restart``: past every
    committed epoch). A foreign owner without ``restart`` raises ``ConfigError``."""

def retry_delay(
    attempt: int,
    retries: int,
    retry_backoff_s: float,
    kind: _FailureKind,
    *,
    retriable: bool = True,
    awaiting: bool = False,
) -> float | None:
    """The one retry rule of an epoch: the delay in seconds before the next attempt of an epoch
    whose attempt ``attempt`` (from 1) failed with ``kind``, or None to give up — after
    ``retries`` retries, for a failure that would fail again (an abortable one not
    ``retriable``, a fenced or fatal one), for an in-doubt one while a Kafka sink is
    ``awaiting`` Spark's replay. The delay is ``retry_backoff_s * 2**(attempt - 1)``, the backoff
    taken in whole milliseconds as the machines take it."""

def epoch_committed(last: int | None, epoch: int) -> bool:
    """Whether a sink whose last committed epoch is ``last`` holds ``epoch``."""

def next_epoch_base(base: int, committed: Sequence[int | None]) -> int:
    """The epoch base past every committed epoch: ``max(base, max(committed) + 1)``."""

def stop_fence_epoch(in_flight: Sequence[int], last_committed: int | None) -> int:
    """The epoch ``resolve_stopped`` fences a group up to: the highest of ``in_flight`` (the
    group's unconcluded records) and ``last_committed + 1`` (0 with neither)."""

def dtid(group_id: str, epoch: int) -> str:
    """The distributed transaction id of one epoch of a group (``laminar:<group>:<epoch>``)."""

def kafka_participant_id(transactional_id: str, part: int) -> str:
    """The transactional id of a Kafka sink in partition ``part`` (``<tid>.p<part>``)."""

def participant_base(participant_id: str) -> tuple[str, int] | None:
    """``(base transactional id, part)`` of a participant id, or None."""

def default_group_id(sink_ids: list[str], scale_out: bool = False) -> str:
    """A group's id when the user names none: the sink ids sorted and joined with ``+`` (hashed
    past 200 characters), ``+scale-out`` after a lone scale-out sink (docs/protocol.md §3)."""

def marker_group(transactional_id: str) -> str:
    """The consumer group whose committed offset on (topic, 0) is a Kafka sink's epoch marker."""

def identity_group(transactional_id: str) -> str:
    """The consumer group whose committed offset on (topic, 0) is a Kafka sink's identity."""

def postgres_participant_name(sink_id: str, part: int) -> str:
    """The participant name of PostgreSQL sink ``sink_id`` in partition ``part``."""

def kafka_participant_name(participant_id: str) -> str:
    """The participant name of a Kafka participant's transactional id."""

def participant_matches(resource: str, gid: str) -> bool:
    """Whether a prepared gid is the participant a ``dt_participant`` row names (exact)."""

def participant_open(state: str) -> bool:
    """Whether a scale-out participant in ``state`` (``laminar.dt_participant.state``) may still
    hold its transaction open: claimed or prepared, not yet committed or rolled back
    (``ValueError``: no such state)."""

# --- the PostgreSQL gid's format (core: protocol/gid.rs) ----------------------------------------

__all__ += ["GID_MAX_BYTES", "GID_PREFIX", "gid_prefix", "make_gid", "parse_gid"]

#: PostgreSQL's limit on a gid's length, in bytes.
GID_MAX_BYTES: int
#: Every gid laminar prepares starts with this.
GID_PREFIX: str

def make_gid(sink_id: str, epoch: int, part: int = 0) -> str:
    """The gid of ``sink_id``'s ``epoch``, partition ``part`` (docs/postgres.md, "gid format");
    ValueError for a negative epoch, OverflowError for values out of range."""

def gid_prefix(sink_id: str) -> str:
    """The prefix every gid of ``sink_id`` starts with (``laminar:<sink>:``)."""

def parse_gid(text: str) -> tuple[str, str | None, int, int] | None:
    """``(sink_part, sink_id, epoch, part)`` of a laminar gid (``sink_id`` None: hashed), or
    None if ``text`` is not one."""

# --- client time-outs derived from a sink's budgets (core: protocol/retry/clients.rs) -------------

__all__ += [
    "KafkaTimeouts",
    "attempt_next",
    "failover_pause_s",
    "identity_wait_s",
    "kafka_timeouts",
    "postgres_answer_timeout",
]

@final
class KafkaTimeouts:
    """Every client time-out of a Kafka sink, derived from its budgets (`kafka_timeouts`;
    docs/kafka.md, "Budgets")."""

    @property
    def request_s(self) -> float:
        """How long one request may wait for its answer: librdkafka's ``socket.timeout.ms`` and
        the wire client's request time-out."""
    @property
    def setup_s(self) -> float:
        """How long a new connection's set-up (TCP, TLS, ApiVersions, SASL) may take:
        ``socket.connection.setup.timeout.ms`` and the wire client's set-up deadline."""
    @property
    def grace_s(self) -> float:
        """How far a librdkafka transactional call may overrun its time-out before it is taken
        as stuck and its producer replaced."""
    @property
    def transaction_ms(self) -> int:
        """``transaction.timeout.ms`` in force (the sink's, else librdkafka's 60 s)."""
    def attempt_s(self, bound_s: float) -> float:
        """The time-out of one attempt of a transactional call bounded by ``bound_s``: two
        request time-outs, never more than the bound."""
    def librdkafka_settings(self) -> list[tuple[str, int]]:
        """The librdkafka settings derived from the budgets (name, milliseconds), for the
        producer and the marker consumer where the user set none."""

def kafka_timeouts(
    init_timeout_s: float,
    commit_timeout_s: float,
    flush_timeout_s: float,
    transaction_timeout_ms: int | None = None,
    *,
    socket_timeout_ms: int | None = None,
    setup_timeout_ms: int | None = None,
    reconnect_backoff_ms: int | None = None,
    reconnect_backoff_max_ms: int | None = None,
) -> KafkaTimeouts:
    """The client time-outs of a Kafka sink with these budgets (the core's one rule,
    ``protocol::retry``); the producer's explicit ``socket.timeout.ms`` /
    ``socket.connection.setup.timeout.ms`` / ``reconnect.backoff.ms`` /
    ``reconnect.backoff.max.ms`` win, and what derives from them follows. ``ConfigError`` for a
    ``socket.timeout.ms`` librdkafka refuses beside the transaction time-out, or a first reconnect
    back-off above its ceiling."""

def failover_pause_s(attempt: int, left_s: float) -> float | None:
    """The pause in seconds before the next attempt of a call that met a failover (attempt
    ``attempt``, from 1; 50 ms doubling to 1 s), or None to give up: when the pause would end
    past the deadline of the operation it belongs to (``left_s`` left of its budget — a sink's
    whole start-up shares one ``init_timeout_s``)."""

def identity_wait_s(statistics_interval_ms: int) -> float:
    """How long to wait for librdkafka's report of the producer id and epoch after an init or
    an abort, with reports every ``statistics_interval_ms``: two intervals and half a second, at
    most 5 s (then the identity is recorded as unknown)."""

def postgres_answer_timeout(statement_timeout_s: float) -> float:
    """The PostgreSQL performer's deadline on one wait for the server's answer, in seconds, for
    a sink whose budget for one answer is ``statement_timeout_s``."""

def attempt_next(
    call: Literal[
        "init_transactions",
        "send_offsets_to_transaction",
        "commit_transaction",
        "abort_transaction",
    ],
    *,
    retriable: bool,
    silent: bool,
    ran_out: bool,
    attempt: int,
    retries: int,
    time_left: bool,
) -> Literal["retry", "replace", "give_up"]:
    """What follows a failed attempt (from 1) of librdkafka transactional call ``call``:
    ``"replace"`` the producer when a marker or an abort ran out its whole time-out on silence (no
    broker answered: librdkafka keeps asking the role's holder it cached, a new producer looks
    every role up afresh) — never an ``init_transactions`` (a new producer caches nothing, and
    one replaced would go on sending its InitProducerId, fencing the next) nor a commit (in doubt:
    recovery retries it on its producer first); ``"retry"`` on the same producer a ``retriable``
    error while retries and time are left; else ``"give_up"``."""
