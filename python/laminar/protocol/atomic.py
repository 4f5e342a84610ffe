"""The atomic group: Kafka and PostgreSQL sinks written together, one decision per epoch
(docs/protocol.md §3, the KIP-939 dual-write recipe with PostgreSQL as the decision log).

The recipe is the core's `AtomicGroupMachine` (docs/engine.md §2, "The atomic group, step by
step"): start-up (register, the owner guard, fencing, Kafka recovery), each epoch's steps 1-8
with their crash points (``atomic.after_lock`` … ``atomic.after_kafka_commit``), the in-process
completion of a Kafka commit that failed after the decision, and the writer's retries.
`AtomicGroup` is its driver: it performs each command — a psycopg statement on the decision
connection (`laminar.engine.records`), a call on a sink — and reports the result; it decides
nothing.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import astuple
from typing import TYPE_CHECKING, Any, TypeAlias

import psycopg
from psycopg.conninfo import conninfo_to_dict

from laminar import _stats, _telemetry, _trace
from laminar._core import AtomicGroupMachine, Command, Event, owner_decision
from laminar._input import materialize
from laminar._redact import redact_config, redact_dsn
from laminar._types import ArrowData
from laminar.engine import records as _records
from laminar.engine.loop import drive
from laminar.errors import AbortableError, ConfigError, FatalError, InDoubtError, LaminarError
from laminar.kafka.sink import KafkaSink
from laminar.metadata import register_sink
from laminar.postgres._errors import map_pg_error
from laminar.postgres.sink import PostgresSink
from laminar.protocol.distributed import (
    DistributedDriver,
    DistributedDriverCommand,
    ParticipantLookup,
)
from laminar.protocol.driver import pg_mapped

if TYPE_CHECKING:
    import pyarrow as pa  # type: ignore[import-untyped]

    from laminar._core import _AtomicCommand

#: What `AtomicGroup` performs: every command of its `AtomicGroupMachine` (the group's decision
#: records, its PostgreSQL sinks, the scale-out tasks) and `DistributedDriverCommand`.
AtomicDriverCommand: TypeAlias = "_AtomicCommand | DistributedDriverCommand"

__all__ = [
    "AtomicGroup",
    "claim_ownership",
    "owner_decision_of",
    "same_database",
]

log = logging.getLogger("laminar.atomic")

#: ``laminar.sinks.kind`` of an atomic group's row.
GROUP_KIND = "atomic_group"


def _conninfo_key(dsn: str) -> tuple[tuple[str, str], ...]:
    try:
        params = conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return (("dsn", dsn),)
    ignored = {"password", "application_name", "connect_timeout", "passfile"}
    return tuple(sorted((k, str(v)) for k, v in params.items() if k not in ignored))


def same_database(a: str, b: str) -> bool:
    """Whether two DSNs name the same database (same connection parameters, passwords and
    client-side settings aside)."""
    return _conninfo_key(a) == _conninfo_key(b)


def owner_decision_of(
    conn: psycopg.Connection[Any],
    registry_id: str,
    member_ids: Sequence[str],
    owner: str | None,
    last_committed: dict[str, int | None],
    *,
    restart: bool,
) -> tuple[str, int, str | None] | None:
    """The core's `owner_decision` (docs/protocol.md §5) over the registry's rows, read in the
    current transaction (the registry row locked): ``(action, epoch_base, replaced)``, a
    `ConfigError` for a foreign owner without ``restart``; None if ``registry_id`` has no row."""
    found = _records.read_ownership(conn, registry_id, member_ids)
    if found is None:
        return None
    current, base, member_owners = found
    return owner_decision(
        registry_id,
        list(member_ids),
        owner=current,
        epoch_base=base,
        member_owners=member_owners,
        last_committed=[last_committed.get(m) for m in member_ids],
        mine=owner,
        restart=restart,
    )


def claim_ownership(
    conn: psycopg.Connection[Any],
    registry_id: str,
    member_ids: Sequence[str],
    owner: str | None,
    on_new_query: str,
    last_committed: dict[str, int | None],
) -> int:
    """The checkpoint-reset guard (docs/protocol.md §5) in the current transaction, for a lone
    PostgreSQL sink's writer (the atomic group's machine runs it in its start-up); returns the
    epoch base (Spark batch id + base = the epoch written).

    The decision is the core's `owner_decision`: a different owner is a `ConfigError` naming
    both — unless ``on_new_query="restart"``, which makes the new query the owner and moves the
    epoch base past every committed epoch.
    """
    decided = owner_decision_of(
        conn, registry_id, member_ids, owner, last_committed, restart=on_new_query == "restart"
    )
    if decided is None:
        raise ConfigError(f"{registry_id!r} is not registered in laminar.sinks")
    action, base, replaced = decided
    if action == "claim" and owner is not None:
        if replaced is not None:
            log.warning(
                "sinks %s: query %r replaces query %r (on_new_query='restart'); epochs now "
                "start at %d",
                sorted(member_ids),
                owner,
                replaced,
                base,
            )
        _records.set_owner(conn, [registry_id, *member_ids], owner, base)
    return base


class AtomicGroup(DistributedDriver):
    """The live side of an atomic writer in the process that writes (never pickled): the
    driver of the group's `AtomicGroupMachine` (module docstring).

    ``retries``/``retry_backoff_s`` are the writer's: the machine retries an epoch whose
    failure may pass. With ``scale_out`` the machine runs the scale-out coordinator
    (docs/protocol.md §4): `write_scaled` writes an epoch through tasks
    (`laminar.protocol.scaleout`), and the writer retries it (``retries=0`` here).
    """

    def __init__(
        self,
        group_id: str,
        kafka: Sequence[KafkaSink],
        postgres: Sequence[PostgresSink],
        *,
        owner: str | None,
        on_new_query: str,
        redo: str,
        retries: int = 0,
        retry_backoff_s: float = 0.5,
        scale_out: bool = False,
        state_dsn: str | None = None,
    ) -> None:
        #: The Kafka sinks' participants the group builds for recovery (closed with it).
        self.participants = ParticipantLookup(kafka)
        super().__init__(
            {k.sink_id: k for k in kafka},
            self._connect,
            log,
            kafka_sink=self.participants,
        )
        self.scale_out = scale_out
        #: ``tasks(epoch)``: the results of a scale-out epoch's tasks (set by `write_scaled`).
        self._tasks: Callable[[int], Sequence[Any]] | None = None
        self.group_id = group_id
        self.kafka = list(kafka)
        self.postgres = list(postgres)
        self.postgres_by_id = {p.sink_id: p for p in self.postgres}
        self.sinks: list[Any] = [*self.postgres, *self.kafka]
        self.owner = owner
        self.on_new_query = on_new_query
        self.redo = redo
        #: The decision database: ``state_dsn`` (a Kafka-only scale-out group of the data
        #: source, `laminar.spark.source`), else the first PostgreSQL sink's.
        self.dsn = state_dsn or self.postgres[0].resolved_dsn
        self.conn: psycopg.Connection[Any] | None = None
        self._retries = retries
        self._backoff_ms = round(retry_backoff_s * 1000)
        self.machine = self._new_machine()
        #: Each sink's last committed epoch as the machine knows it, read after each run (the
        #: scale-out writer moves it on for the epochs it writes itself).
        self.last: dict[str, int | None] = {}
        #: The last epoch's commit latency (steps 1-8 of its last attempt), in milliseconds.
        self.last_commit_ms: float | None = None
        self._batch: pa.Table | pa.RecordBatch | None = None
        self._kept: dict[str, list[Any]] = {}
        self._locked_at: float | None = None
        #: The epoch of the decision being recorded (named if its commit is lost).
        self._deciding: int | None = None

    # -- what the writer reads ------------------------------------------------------------------

    @property
    def started(self) -> bool:
        """Whether the start-up ran (a failed epoch that cannot read its progress back starts
        the group again)."""
        return self.machine.started

    @property
    def generation(self) -> int:
        """The group's generation: this coordinator's fencing token (docs/protocol.md §6)."""
        return self.machine.generation

    @property
    def epoch_base(self) -> int:
        """What is added to Spark's batch id to give the epoch written."""
        return self.machine.epoch_base

    @property
    def awaiting(self) -> dict[str, int]:
        """Kafka sinks whose decided epoch only Spark's replay can complete."""
        return dict(self.machine.awaiting)

    @property
    def attempts(self) -> int:
        """The attempts of the last `write_epoch`."""
        return self.machine.attempts

    # -- runs -----------------------------------------------------------------------------------

    def start(self) -> None:
        """Register, check the owner, fence the previous coordinator, recover."""
        self._run(self.machine.start)

    def write_epoch(self, batch_id: int, batch: ArrowData) -> bool:
        """Write Spark batch ``batch_id`` (epoch ``epoch_base + batch_id``) atomically to every
        sink that needs it, with the writer's retries; False if all had it. A stream is read
        once, here, so that every sink and every attempt write the same rows."""
        self._batch = data = materialize(batch)
        self._locked_at = None
        try:
            with _telemetry.epoch("epoch", self.group_id, None, rows=data.num_rows):
                self._counted(lambda: self._run(lambda: self.machine.write_epoch(batch_id)))
        finally:
            self._batch = None
            self._kept.clear()
        if self.machine.committed:
            _telemetry.written("epoch", self.group_id, data.num_rows, data.nbytes)
        return self.machine.committed

    def write_scaled(self, epoch: int, tasks: Callable[[int], Sequence[Any]]) -> bool:
        r"""Scale-out: write ``epoch`` (the epoch base included) through ``tasks(epoch)``, which
        runs the partitions' tasks and returns their
        `laminar.protocol.scaleout.ParticipantResult`\ s;
        False if it was committed before or every partition was empty."""
        if not self.scale_out:
            raise FatalError(f"{self.what()} is not a scale-out group")
        if not self.started:
            self.start()
        return self._scaled(lambda: self.machine.write_epoch(epoch - self.epoch_base), tasks)

    def commit_collected(
        self,
        batch_id: int,
        tasks: Callable[[int], Sequence[Any]],
        *,
        resume: tuple[int, int] | None = None,
    ) -> bool:
        r"""Scale-out: decide and complete Spark batch ``batch_id`` whose tasks ran already and
        created the epoch's record (the data source's driver-side ``commit``, docs/spark.md);
        ``tasks(epoch)`` returns the `laminar.protocol.scaleout.ParticipantResult`\ s they sent.
        The group starts up first, its watcher pass sparing that record — or resumes ``resume``,
        ``(generation, epoch_base)`` from an earlier commit of the query run, while the group
        still shows it (docs/protocol.md §4; `resumed`). False if the epoch was committed before
        (a repeated commit) or every partition was empty."""
        if not self.scale_out:
            raise FatalError(f"{self.what()} is not a scale-out group")
        return self._scaled(lambda: self.machine.commit_collected(batch_id, resume), tasks)

    @property
    def resumed(self) -> bool:
        """Whether the last operation resumed its run's start (no start-up ran)."""
        return self.machine.resumed

    def _scaled(self, begin: Callable[[], None], tasks: Callable[[int], Sequence[Any]]) -> bool:
        self._tasks = tasks
        self._locked_at = None
        self.end_txn_clients = {}  # one EndTxn client for all the epoch's Kafka participants
        try:
            with _telemetry.epoch("epoch", self.group_id, None):
                self._counted(lambda: self._run(begin))
        finally:
            self._tasks = None
            self.close_clients()
        return self.machine.committed

    def _counted(self, run: Callable[[], None]) -> None:
        """Run an epoch; keep its commit latency and count its outcome in
        ``laminar.commit_stats`` (`laminar._stats`: attempts rolled back, the commit)."""
        try:
            run()
        except InDoubtError:
            raise
        except Exception:
            _stats.count(self.conn, self.group_id, aborted=self.machine.attempts)
            raise
        if self.machine.committed and self._locked_at is not None:
            self.last_commit_ms = (time.perf_counter() - self._locked_at) * 1000
            committed_s = self.last_commit_ms / 1000
            _stats.count(
                self.conn, self.group_id, committed_s=committed_s, aborted=self.machine.attempts - 1
            )

    def _run(self, begin: Callable[[], None]) -> None:
        begin()
        try:
            drive(self.machine, self.perform)
        finally:
            self.last = {s.sink_id: self.machine.last_committed(s.sink_id) for s in self.sinks}

    def what(self) -> str:
        return f"atomic group {self.group_id!r}"

    def _connect(self) -> psycopg.Connection[Any]:
        conn = self.conn
        if conn is not None and not conn.closed and not conn.broken:
            return conn
        try:
            name = f"laminar group {self.group_id}"[:63]
            conn = (
                self.postgres[0].open_connection(self.dsn, application_name=name)
                if self.postgres
                else psycopg.connect(self.dsn, application_name=name)
            )
        except psycopg.Error as e:
            raise map_pg_error(
                e, f"connecting to the decision database ({redact_dsn(self.dsn)})"
            ) from e
        self.conn = conn
        return conn

    def _refresh_postgres(self, conn: psycopg.Connection[Any]) -> None:
        """Read the PostgreSQL sinks' last committed epochs into `last` (the scale-out
        writer)."""
        self.last.update(_records.read_sink_epochs(conn, [p.sink_id for p in self.postgres]))
        conn.commit()

    # -- the commands (docs/engine.md §3) -------------------------------------------------------

    @pg_mapped
    def perform(self, c: AtomicDriverCommand) -> Event:
        """Perform ``c``: the group's own commands here, the rest in `DistributedDriver`."""
        _trace.mark(c.kind)  # each step's start (docs/benchmarks.md)
        match c:
            case Command.InitSink(sink_id) if sink_id in self.postgres_by_id:
                self.postgres_by_id[sink_id].init_transactions()
                return Event.ack()
            case Command.Sleep():
                self._locked_at = None  # a retry: its commit is measured anew
                return super().perform(c)
            case Command.SinkPrepare(sink_id):
                return Event.prepared(str(self.kafka_by_id[sink_id].prepare_transaction()))
            case Command.SinkWrite(sink_id, _, keep):
                sink = self.kafka_by_id[sink_id]
                kept = self._kept.setdefault(sink.sink_id, []) if keep else None
                sink.write(self._data(), records_out=kept)
                return Event.ack()
            case Command.LockTable(sink_id):
                # the table locked until the decision, its definition checked and the COPY
                # planned: an incompatible change is a ConfigError before any byte is sent
                self.postgres_by_id[sink_id].check_in_transaction(
                    self._connect(), self._data().schema
                )
                return Event.ack()
            case Command.WriteRows(sink_id, epoch):
                sink = self.postgres_by_id[sink_id]
                written = sink.write_in_transaction(
                    self._connect(), epoch, self._data(), checked=True
                )
                return Event.claimed(written is not None)
            case Command.RunTasks(_, epoch):
                return self._run_tasks(epoch)
            case Command.RegisterGroup():
                return self._register(self._connect())
            case Command.ReadOwnership(registry_id, members):
                found = _records.read_ownership(self._connect(), registry_id, members)
                if found is None:
                    raise ConfigError(f"{registry_id!r} is not registered in laminar.sinks")
                return Event.ownership(*found)
            case Command.SetOwner(sink_ids, owner, epoch_base):
                conn = self._connect()
                _records.set_owner(conn, sink_ids, owner, epoch_base)
                conn.commit()
                return Event.ack()
            case Command.BumpGeneration():
                conn = self._connect()
                generation = _records.bump_generation(conn, self.group_id)
                conn.commit()
                return Event.generation(generation)
            case Command.ReadGeneration():
                return Event.generation(_records.read_generation(self._connect(), self.group_id))
            case Command.LockGroup():
                self._deciding = None  # a new decision transaction: RecordDecision names it
                if self._locked_at is None:
                    self._locked_at = time.perf_counter()
                conn = self._connect()
                return Event.generation(
                    _records.lock_group(conn, self.group_id, self.last_commit_ms)
                )
            case Command.ReplaceRedo(transactional_id, epoch, keep):
                kept = self._kept.get(transactional_id, []) if keep else None
                _records.replace_redo(self._connect(), transactional_id, epoch, kept)
                return Event.ack()
            case Command.RecordDecision(tid, epoch, previous_epoch, prepared_state, group_id):
                self._deciding = epoch
                _records.record_decision(
                    self._connect(), tid, epoch, previous_epoch, prepared_state, group_id
                )
                return Event.ack()
            case Command.CommitDecision():
                return self._commit_decision(self._connect())
            case _:
                return super().perform(c)

    def _run_tasks(self, epoch: int) -> Event:
        if self._tasks is None:
            raise FatalError(f"{self.what()}: tasks to run with no epoch written (a driver bug)")
        try:
            results = list(self._tasks(epoch))
        except LaminarError:
            raise
        except Exception as err:
            # a Spark job that failed: nothing is decided, the epoch is rolled back and retried
            raise AbortableError(
                f"scale-out epoch {epoch} of group {self.group_id!r} failed before its "
                f"decision and was rolled back: {err}",
                epoch=epoch,
            ) from err
        return Event.task_results([astuple(r) for r in results])

    def _data(self) -> pa.Table | pa.RecordBatch:
        if self._batch is None:
            raise FatalError(f"{self.what()}: a write command with no batch (a driver bug)")
        return self._batch

    def _register(self, conn: psycopg.Connection[Any]) -> Event:
        config = {"sinks": [s.sink_id for s in self.sinks], "redo": self.redo}
        register_sink(conn, self.group_id, GROUP_KIND, config)
        for k in self.kafka:
            register_sink(conn, k.sink_id, k.kind, _kafka_registry_config(k))
        conn.commit()
        return Event.ack()

    def _commit_decision(self, conn: psycopg.Connection[Any]) -> Event:
        epoch = self._deciding
        try:
            conn.commit()
        except psycopg.Error as e:
            if conn.broken or conn.closed:
                # the answer is lost, not the decision: the machine reads it back
                raise InDoubtError(
                    f"{self.what()}: the connection was lost during the decision of epoch "
                    f"{epoch}; its outcome is read back",
                    epoch=epoch,
                ) from e
            raise
        return Event.ack()

    def close(self) -> None:
        """Close the decision connection, every sink and every participant built."""
        for s in self.sinks:
            with contextlib.suppress(LaminarError):
                s.close()
        self.participants.close()
        conn, self.conn = self.conn, None
        if conn is not None:
            with contextlib.suppress(psycopg.Error):
                conn.close()
        self.machine = self._new_machine()  # closed: the next use starts again

    def _new_machine(self) -> AtomicGroupMachine:
        return AtomicGroupMachine(
            self.group_id,
            [p.sink_id for p in self.postgres],
            [k.sink_id for k in self.kafka],
            redo_log=self.redo == "log",
            owner=self.owner,
            restart_on_new_query=self.on_new_query == "restart",
            retries=self._retries,
            retry_backoff_ms=self._backoff_ms,
            scale_out=self.scale_out,
        )


def _kafka_registry_config(sink: KafkaSink) -> dict[str, Any]:
    """What `laminar status`/`recover` need to reach the sink again: no secrets (masked), no
    callables (an ``oauth_cb`` is given to those tools again: ``--kafka-config
    oauth_cb=module:function``)."""
    stored = {k: v for k, v in redact_config(sink.producer_config).items() if not callable(v)}
    return {
        "bootstrap_servers": sink.client_settings().bootstrap_servers,
        "topic": sink.topic,
        "key": sink.key,
        "value_format": sink.value_format,
        "producer_config": json.loads(json.dumps(stored, default=str)),
    }
