"""Scale-out mode (docs/protocol.md §4): Spark tasks write the partitions of a batch as two-phase
participants, and the process that runs ``foreachBatch`` coordinates them (Vitess-style
distributed transaction, ``dtid = laminar:<group>:<epoch>``).

Both sides are machines of the core (docs/engine.md §2, "Scale-out"), and this module drives
them, deciding nothing:

- the coordinator's epoch is the group's `AtomicGroupMachine` with ``scale_out`` (create the
  record, run the tasks, the vote and the decision, completion, roll-back-and-conclude, the
  pending decided transactions), driven by `laminar.protocol.atomic.AtomicGroup`;
  `ScaleOutCoordinator` hands it the tasks to run;
- a task attempt is a `ScaleOutTaskMachine` (lock the partition, claim it while the record is
  ``prepare``, roll back what an earlier attempt left, write, prepare), driven by
  `ScaleOutTask.write_partition` on its own control connection.

Each ``scaleout.*`` crash point (`laminar._core.CrashPoint.for_protocol("scaleout")`) is a
``reached`` command of one of them. A failure before the decision rolls the epoch back and the
writer writes it again; a decided epoch is completed, here or by the watcher, the next start
or ``laminar recover``.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias

import psycopg

from laminar import _telemetry, _trace
from laminar._core import (
    Command,
    Event,
    ResolveMachine,
    ScaleOutTaskMachine,
    WatcherPassMachine,
    dtid,
    kafka_participant_name,
    participant_base,
    postgres_participant_name,
)
from laminar.engine import records as _records
from laminar.engine.loop import drive
from laminar.errors import ConfigError, FatalError, LaminarError
from laminar.kafka.sink import KafkaSink
from laminar.postgres._errors import map_pg_error
from laminar.postgres.sink import PostgresSink
from laminar.protocol.distributed import (
    DistributedDriver,
    DistributedDriverCommand,
    KafkaSinkLookup,
    kafka_participant,
    postgres_participant,
)
from laminar.protocol.driver import pg_mapped

if TYPE_CHECKING:
    import pyarrow as pa  # type: ignore[import-untyped]

    from laminar._core import _TaskCommand

#: What a task attempt's driver performs: every command of `ScaleOutTaskMachine` (its control
#: connection, the participants, the partition's batches) and `DistributedDriverCommand`.
TaskDriverCommand: TypeAlias = "_TaskCommand | DistributedDriverCommand"

__all__ = [
    "ControlConnections",
    "ParticipantResult",
    "ScaleOutCoordinator",
    "ScaleOutTask",
    "dtid_for",
    "kafka_participant",
    "participant_base",
    "postgres_participant",
    "result_schema",
    "roll_back_distributed",
]

log = logging.getLogger("laminar.protocol.scaleout")


@functools.cache
def result_schema() -> pa.Schema:
    """The rows a task yields (``mapInArrow``'s output schema). Built on first use: a
    process that only commits (Spark's commit runner, a new one per query) never imports pyarrow
    (about 50-70 ms of a fresh process: docs/benchmarks.md)."""
    import pyarrow as pa  # lazy: see the docstring

    return pa.schema(
        [
            ("part", pa.int32()),
            ("attempt", pa.string()),
            ("participant", pa.string()),
            ("kind", pa.string()),
            ("resource", pa.string()),
            ("records", pa.int64()),
            ("prepared_state", pa.string()),
            ("marker", pa.int64()),
            ("status", pa.string()),
        ]
    )


#: The same schema as Spark DDL (``df.mapInArrow(task, RESULT_DDL)``).
RESULT_DDL = (
    "part int, attempt string, participant string, kind string, resource string, "
    "records bigint, prepared_state string, marker bigint, status string"
)


def dtid_for(group_id: str, epoch: int) -> str:
    """The distributed transaction id of one epoch of a group (the core's `dtid`)."""
    return dtid(group_id, epoch)


@dataclass(frozen=True)
class ParticipantResult:
    """One participant of one task attempt, as the task reports it."""

    part: int
    #: The attempt's token (unique per attempt; the claim names it).
    attempt: str
    #: ``pg:<sink_id>:p<part>`` or ``kafka:<tid>.p<part>``.
    participant: str
    #: ``postgres`` or ``kafka``.
    kind: str
    #: The gid (Postgres) or the transactional id (Kafka).
    resource: str
    records: int
    #: The `PreparedTxnState` text (Kafka: producer id/epoch for EndTxn); empty when not prepared.
    prepared_state: str
    #: Kafka: the participant's marker before this epoch (``txn_state.previous_epoch``).
    marker: int | None
    #: ``prepared``; ``empty`` (no rows, nothing prepared); ``skipped`` (the epoch is decided
    #: already, or the participant holds it).
    status: str

    def row(self) -> dict[str, Any]:
        """As a row of `result_schema`."""
        return {
            "part": self.part,
            "attempt": self.attempt,
            "participant": self.participant,
            "kind": self.kind,
            "resource": self.resource,
            "records": self.records,
            "prepared_state": self.prepared_state,
            "marker": self.marker,
            "status": self.status,
        }

    @classmethod
    def from_row(cls, row: Any) -> ParticipantResult:
        """From a mapping or a Spark ``Row`` of `result_schema`."""
        get = row.asDict() if hasattr(row, "asDict") else dict(row)
        return cls(
            part=int(get["part"]),
            attempt=str(get["attempt"]),
            participant=str(get["participant"]),
            kind=str(get["kind"]),
            resource=str(get["resource"]),
            records=int(get["records"] or 0),
            prepared_state=str(get["prepared_state"] or ""),
            marker=None if get["marker"] is None else int(get["marker"]),
            status=str(get["status"]),
        )


def results_batch(results: Sequence[ParticipantResult]) -> pa.RecordBatch:
    """Results as one Arrow record batch of `result_schema`."""
    import pyarrow as pa  # lazy: see result_schema

    return pa.RecordBatch.from_pylist([r.row() for r in results], schema=result_schema())


# -- the task side -------------------------------------------------------------------------------


class ControlConnections(Protocol):
    """Where a task attempt's control connection (its partition's session lock, its claims)
    comes from and goes back to, when not a new connection per attempt closed at its end: the
    data source's tasks keep one per Spark Python worker (`laminar.spark._conn_cache`)."""

    def open(self) -> psycopg.Connection[Any]:
        """An idle connection with autocommit off that holds no lock."""
        ...

    def release(self, conn: psycopg.Connection[Any]) -> None:
        """The attempt is over: what it held (its transaction, its session lock) must be
        released here, as closing the connection would."""
        ...


class ScaleOutTask:
    """What one Spark task runs (``df.mapInArrow(task, RESULT_DDL)``): picklable configuration
    of the group's sinks and the epoch. `write_partition` is the Spark-free form."""

    def __init__(
        self,
        group_id: str,
        epoch: int,
        postgres: Sequence[PostgresSink],
        kafka: Sequence[KafkaSink],
        *,
        state_dsn: str | None = None,
    ) -> None:
        if not postgres and state_dsn is None:
            raise ConfigError("a scale-out write needs a PostgresSink (its database decides)")
        #: The decision database when it is not the first PostgresSink's (Kafka-only groups of
        #: the data source, `laminar.spark.source`); resolved in the task's process.
        self.state_dsn = state_dsn
        self.group_id = group_id
        self.epoch = epoch
        self.dtid = dtid_for(group_id, epoch)
        self.postgres = list(postgres)
        self.kafka = list(kafka)

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        # pyspark is imported only where a Spark task runs (it is an optional dependency)
        from pyspark import TaskContext

        ctx = TaskContext.get()
        part = ctx.partitionId() if ctx is not None else 0
        attempt = f"{ctx.attemptNumber() if ctx is not None else 0}-{uuid.uuid4().hex[:12]}"
        yield results_batch(self.write_partition(part, batches, attempt=attempt))

    def write_partition(
        self,
        part: int,
        batches: Iterable[pa.RecordBatch | pa.Table],
        *,
        attempt: str | None = None,
        create_record: bool = False,
        writer: str | None = None,
        control: ControlConnections | None = None,
    ) -> list[ParticipantResult]:
        """Write partition ``part`` of the epoch as prepared participants: the core's
        `ScaleOutTaskMachine`, driven on a control connection of its own (module docstring).
        ``create_record``: the task first creates the epoch's ``dt_state`` row if it is missing
        (the data source's tasks run before any coordinator step: docs/spark.md); ``writer``:
        the token of the data source's writer whose task this is (a stop fence reserved for
        another writer makes the attempt write nothing, docs/protocol.md §4); ``control``: where
        its control connection comes from (default: a new one, closed at the end)."""
        attempt = attempt or f"0-{uuid.uuid4().hex[:12]}"
        pgs = [postgres_participant(p, part) for p in self.postgres]
        kas = [kafka_participant(k, part) for k in self.kafka]
        machine = ScaleOutTaskMachine(
            self.dtid,
            self.epoch,
            part,
            attempt,
            [(p.sink_id, p.gid(self.epoch)) for p in pgs],
            [k.sink_id for k in self.kafka],
            group_id=self.group_id if create_record else None,
            writer=writer,
        )
        driver = _TaskDriver(self, part, batches, pgs, kas, control)
        try:
            with _telemetry.epoch("task", self.group_id, self.epoch):
                drive(machine, driver.perform)
        finally:
            driver.close()
        return [ParticipantResult(*row) for row in machine.results]


class _TaskDriver(DistributedDriver):
    """Performs a task attempt's commands: its control connection (autocommit off: the claim
    is one transaction), the participants' sinks, the partition's batches."""

    def __init__(
        self,
        task: ScaleOutTask,
        part: int,
        batches: Iterable[pa.RecordBatch | pa.Table],
        pgs: list[PostgresSink],
        kas: list[KafkaSink],
        control: ControlConnections | None = None,
    ) -> None:
        super().__init__({}, self._connect, log)
        self.control = control
        self.task = task
        self.part = part
        self.batches = iter(batches)
        self.first: Any = None
        #: Each participant by its name (the core's: the commands name it so).
        self.participants: dict[str, Any] = {
            **{postgres_participant_name(p.sink_id, part): p for p in pgs},
            **{kafka_participant_name(k.sink_id): k for k in kas},
        }
        self.conn: psycopg.Connection[Any] | None = None
        #: The machine released the participants (else `close` undoes them).
        self.released = False

    def what(self) -> str:
        return f"scale-out task {self.part} of {self.task.dtid}"

    def kafka_sink(self, sink_id: str) -> Any:
        return self.participants.get(sink_id)

    def _connect(self) -> psycopg.Connection[Any]:
        if self.conn is None:
            dsn = self.task.state_dsn or self.task.postgres[0].resolved_dsn
            try:
                if self.control is not None:
                    self.conn = self.control.open()
                else:
                    self.conn = psycopg.connect(dsn, application_name="laminar task")
            except psycopg.Error as e:
                raise map_pg_error(e, f"scale-out task {self.part}: connecting") from e
        return self.conn

    @pg_mapped
    def perform(self, c: TaskDriverCommand) -> Event:
        """Perform ``c``: the task's own commands here, the rest in `DistributedDriver`."""
        _trace.mark(c.kind, part=self.part)  # each step's start (docs/benchmarks.md)
        match c:
            case Command.LockPartition(key):
                conn = self._connect()
                _records.lock_partition(conn, key)
                conn.commit()  # a session lock: it outlives the transaction
                return Event.ack()
            case Command.ClaimParticipants(dtid, participants):
                conn = self._connect()
                _records.claim_participants(conn, dtid, participants)
                conn.commit()  # the claim, with the record's FOR SHARE read before it
                return Event.ack()
            case Command.PeekPartition():
                self.first = next((b for b in self.batches if b.num_rows > 0), None)
                return Event.found(self.first is not None)
            case Command.WritePartition():
                return Event.rows(self._write())
            case Command.SinkPrepare(sink_id):
                return Event.prepared(str(self.participants[sink_id].prepare_transaction()))
            case Command.ReleaseParticipants(prepared):
                self._release(prepared=prepared)
                return Event.ack()
            case _:
                return super().perform(c)

    def _write(self) -> int:
        count = nbytes = 0
        opened = list(self.participants.values())
        for batch in _chain(self.first, self.batches):
            if batch is None or batch.num_rows == 0:
                continue
            for sink in opened:
                sink.write(batch)
            count += batch.num_rows
            nbytes += batch.nbytes
        _telemetry.written("task", self.task.group_id, count, nbytes)
        return count

    def _release(self, *, prepared: bool) -> None:
        self.released = True
        for sink in self.participants.values():
            if prepared and isinstance(sink, KafkaSink):
                sink.release_prepared()  # its transaction stays open for the coordinator
            else:
                with contextlib.suppress(LaminarError):
                    sink.close()

    def close(self) -> None:
        """Close the control connection (which releases the partition's lock), or give it back
        to ``control`` (which releases it there). An attempt
        interrupted by what `drive` does not hand to the machine (a ``BaseException``: an
        interrupt, ``SystemExit`` from a signal handler) never reached its release: its sinks
        are closed here, which aborts an open Kafka transaction instead of leaving it open
        until ``transaction.timeout.ms``."""
        if not self.released:
            self.released = True
            for sink in self.participants.values():
                with contextlib.suppress(Exception):
                    sink.close()
        conn, self.conn = self.conn, None
        if conn is not None and self.control is not None:
            self.control.release(conn)
        elif conn is not None:
            with contextlib.suppress(psycopg.Error):
                conn.close()


def _chain(first: Any, rest: Iterator[Any]) -> Iterator[Any]:
    yield first
    yield from rest


# -- the coordinator side -------------------------------------------------------------------------


def roll_back_distributed(
    conn: psycopg.Connection[Any],
    dtid: str,
    kafka_sink: KafkaSinkLookup | None,
    *,
    why: str,
) -> bool:
    """Roll back ``dtid`` and conclude it — the core's one roll-back-and-conclude, as ``laminar
    resolve <dtid> --rollback`` runs it; False if it is decided ``commit`` (complete it
    instead), True once rolled back or if it is gone."""
    machine = ResolveMachine("dtid", dtid, commit=False)
    driver = DistributedDriver({}, lambda: conn, log, kafka_sink=kafka_sink)
    try:
        drive(machine, driver.perform)
    except LaminarError as e:
        if getattr(e, "refusal", None) == "against_decision":
            return False
        if getattr(e, "refusal", None) == "not_found":
            return True
        raise
    log.warning("%s rolled back (%s)", dtid, why)
    return True


#: ``run(task)``: runs the task on every partition and returns every result.
RunTasks = Callable[[ScaleOutTask], Iterable[ParticipantResult]]


class ScaleOutCoordinator:
    """The foreachBatch side of scale-out mode for one atomic group (module docstring): the
    group's scale-out machine, given the tasks to run."""

    def __init__(self, group: Any) -> None:
        if not getattr(group, "scale_out", False):
            raise FatalError("a scale-out coordinator needs an AtomicGroup(scale_out=True)")
        self.group = group
        #: Kafka sinks and their participants by transactional id (the group's lookup).
        self.kafka_sink: KafkaSinkLookup = group.kafka_sink

    @property
    def pending(self) -> set[str]:
        """Decided distributed transactions not concluded yet (completed before the next
        epoch is written)."""
        return set(self.group.machine.pending)

    def write_epoch(self, epoch: int, run: RunTasks) -> bool:
        """Write ``epoch`` (the epoch base included) through tasks run by ``run(task)``; False
        if it was committed before (a replay) or every partition was empty."""
        group = self.group

        def tasks(at: int) -> list[ParticipantResult]:
            return list(run(ScaleOutTask(group.group_id, at, group.postgres, group.kafka)))

        return bool(group.write_scaled(epoch, tasks))

    def recover(self) -> None:
        """Resolve this group's distributed transactions and participants at once, by the
        Vitess rules: the watcher pass a coordinator runs after fencing its predecessor (its
        start-up runs it too)."""
        group = self.group
        machine = WatcherPassMachine(
            group_id=group.group_id,
            sink_ids=[p.sink_id for p in group.postgres],
            resolve_after_s=0.0,
        )
        drive(machine, group.perform)
