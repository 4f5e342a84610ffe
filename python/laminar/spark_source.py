"""``writeStream.format("laminar")``: the Spark-native sink, on Spark's Python Data Source API
(``DataSourceStreamArrowWriter``), registered by `laminar.spark.register`.

It is the scale-out protocol (docs/protocol.md §4, `laminar.scaleout`) with Spark's own entry
points, not a second protocol:

- ``write(iterator)`` runs in each task on the executors: the task is a two-phase participant
  exactly as `ScaleOutTask.write_partition` makes one (the claim, ``PREPARE TRANSACTION``, a
  Kafka transaction per task under ``<tid>.p<partition>``), writing Spark's Arrow record batches
  one at a time (a slice in memory, never the partition). Tasks run before any driver-side
  step, so the claim first creates the epoch's ``dt_state`` row if it is missing; a task of an
  epoch already committed (a replayed batch) writes nothing. It returns a `LaminarCommitMessage`
  (the participants' results: small, no rows).
- ``commit(messages, batch_id)`` runs on the driver, in a Python process of its own per call:
  the coordinator's decide + complete (`ScaleOutCoordinator.finish_epoch`), after the group's
  start-up (registry row, the owner guard, a new generation fencing older coordinators). A
  second ``commit`` of the same batch finds the epoch committed and does nothing; a ``commit``
  after a crash between decision and completion completes it (`ScaleOutCoordinator.recover`).
- ``abort(messages, batch_id)`` rolls the epoch's participants back (conditional: never a
  decided one) and concludes it.

The epoch is Spark's batch id (``streaming.sql.batchId``, a task's local property) plus the
group's epoch base; the owner is ``spark:<query id>`` (``sql.streaming.queryId``), the same
owner `laminar.spark.start` records, so the checkpoint-reset guard (docs/protocol.md §5) holds.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
import pyarrow as pa  # type: ignore[import-untyped]
from psycopg import sql
from pyspark.sql.datasource import (
    DataSource,
    DataSourceStreamArrowWriter,
    DataSourceStreamWriter,
    WriterCommitMessage,
)

from laminar import _records
from laminar._atomic import GROUP_KIND, _kafka_registry_config, claim_ownership
from laminar._redact import redact_dsn
from laminar.errors import AbortableError, ConfigError, InDoubtError, LaminarError
from laminar.metadata import ensure_schema, register_sink, table
from laminar.readiness import describe_process, require_reachable
from laminar.scaleout import (
    ParticipantResult,
    ScaleOutCoordinator,
    ScaleOutTask,
    dtid_for,
    participant_factory,
    roll_back_distributed,
)
from laminar.sinks._pg_errors import map_pg_error
from laminar.sinks.kafka import KafkaSink
from laminar.sinks.postgres import PostgresSink
from laminar.spark_options import SinkOptions, parse_options

__all__ = ["LaminarCommitMessage", "LaminarDataSource", "LaminarStreamWriter", "resolve_stopped"]

log = logging.getLogger("laminar.spark_source")

#: What ``format(...)`` names.
FORMAT = "laminar"

_GROUP_ROW = sql.SQL("SELECT owner, epoch_base FROM {t} WHERE sink_id = %s").format(
    t=table("sinks")
)
_DT_STATE = sql.SQL("SELECT state FROM {t} WHERE dtid = %s").format(t=table("dt_state"))
_KAFKA_DECIDED = sql.SQL("SELECT max(epoch) FROM {t} WHERE group_id = %s").format(
    t=table("txn_state")
)

#: Processes (Spark Python workers) that checked the servers of a configuration already.
_checked: set[str] = set()


@dataclass
class LaminarCommitMessage(WriterCommitMessage):
    """What one task attempt sends to the driver: its participants' results (no rows)."""

    epoch: int
    part: int
    #: ``spark:<query id>``, the owner the task checked (None outside a streaming query).
    owner: str | None
    results: list[ParticipantResult]


class LaminarDataSource(DataSource):
    """``format("laminar")``: options are checked here, where Spark first hands them over
    (`laminar.spark_options`)."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self.sink_options = parse_options(options)

    def streamWriter(self, schema: Any, overwrite: bool) -> DataSourceStreamWriter:  # noqa: N802
        if overwrite:
            raise ConfigError(
                "format('laminar') appends each micro-batch exactly once; use outputMode "
                "'append' or 'update' (not 'complete', which asks to overwrite)"
            )
        return LaminarStreamWriter(self.sink_options)


class LaminarStreamWriter(DataSourceStreamArrowWriter):
    """The tasks' ``write`` and the driver's ``commit``/``abort`` (module docstring)."""

    def __init__(self, options: SinkOptions) -> None:
        self.options = options
        _check_servers_once(options, where=f"the Spark driver's Python ({describe_process()})")

    def write(self, iterator: Iterator[pa.RecordBatch]) -> LaminarCommitMessage:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        if ctx is None:
            raise ConfigError("format('laminar') writes from Spark tasks only")
        batch = ctx.getLocalProperty("streaming.sql.batchId")
        if batch is None:
            raise ConfigError("format('laminar') is a streaming sink: use df.writeStream")
        query_id = ctx.getLocalProperty("sql.streaming.queryId")
        attempt = f"{ctx.attemptNumber()}-{uuid.uuid4().hex[:12]}"
        return write_task(
            self.options,
            int(batch),
            None if query_id is None else f"spark:{query_id}",
            ctx.partitionId(),
            iterator,
            attempt=attempt,
        )

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        commit_batch(self.options, messages, batchId)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        abort_batch(self.options, messages, batchId)


def _check_servers_once(options: SinkOptions, *, where: str) -> None:
    key = repr(options)  # environment variable names, no secrets
    if not options.check_servers or key in _checked:
        return
    sinks: list[Any] = [*options.postgres_sinks(), *options.kafka_sinks()]
    require_reachable(sinks, where=where)
    _checked.add(key)


def _sinks(options: SinkOptions) -> tuple[list[KafkaSink], list[PostgresSink], str]:
    kafka, postgres = options.kafka_sinks(), options.postgres_sinks()
    group_id = options.group_id([s.sink_id for s in [*postgres, *kafka]])
    return kafka, postgres, group_id


def _committed(
    conn: psycopg.Connection[Any], group_id: str, postgres: Sequence[PostgresSink], epoch: int
) -> bool:
    """Whether the group committed ``epoch`` (its PostgreSQL sinks' ``sink_epochs``; Kafka-only:
    its participants' decisions in ``txn_state``)."""
    if postgres:
        found = _records.read_sink_epochs(conn, [p.sink_id for p in postgres])
        return all(e is not None and e >= epoch for _, e in found)
    row = conn.execute(_KAFKA_DECIDED, (group_id,)).fetchone()
    return row is not None and row[0] is not None and int(row[0]) >= epoch


def write_task(
    options: SinkOptions,
    batch_id: int,
    owner: str | None,
    part: int,
    batches: Iterator[pa.RecordBatch],
    *,
    attempt: str,
) -> LaminarCommitMessage:
    """One task attempt: partition ``part`` of Spark batch ``batch_id`` as prepared participants
    (`ScaleOutTask.write_partition`, the claim creating the epoch's record)."""
    kafka, postgres, group_id = _sinks(options)
    dsn = options.state_dsn().resolve("the decision database (format('laminar'))")
    _check_servers_once(options, where=f"a Spark task's Python ({describe_process()})")
    try:
        with psycopg.connect(dsn, autocommit=True, application_name="laminar task") as conn:
            ensure_schema(conn, where=redact_dsn(dsn))
            row = conn.execute(_GROUP_ROW, (group_id,)).fetchone()
            if row is not None and row[0] is not None and owner is not None and row[0] != owner:
                raise ConfigError(
                    f"group {group_id!r} is owned by query {row[0]!r}, not {owner!r} (a new "
                    "checkpoint?): restart the old query from its own checkpoint, or start over "
                    f"with `laminar reset {group_id}` (docs/protocol.md §5)"
                )
            epoch = batch_id + (0 if row is None else int(row[1]))
            if _committed(conn, group_id, postgres, epoch):
                log.info("%s: epoch %d is committed already (a replay): skipped", group_id, epoch)
                return LaminarCommitMessage(epoch, part, owner, [])
    except psycopg.Error as e:
        raise map_pg_error(e, f"format('laminar') task {part}: reading {group_id!r}") from e
    task = ScaleOutTask(group_id, epoch, postgres, kafka, state_dsn=dsn)
    results = task.write_partition(part, batches, attempt=attempt, create_record=True)
    return LaminarCommitMessage(epoch, part, owner, results)


class _DriverGroup:
    """The group as `ScaleOutCoordinator` needs it in a driver-side ``commit``/``abort``
    process: its decision connection, its sinks, its generation (fencing token)."""

    def __init__(
        self, group_id: str, kafka: list[KafkaSink], postgres: list[PostgresSink], dsn: str
    ) -> None:
        self.group_id = group_id
        self.kafka = kafka
        self.postgres = postgres
        self.dsn = dsn
        self.owner: str | None = None
        self.generation = -1
        self.last: dict[str, int | None] = {}
        self.last_commit_ms: float | None = None
        self.conn: psycopg.Connection[Any] | None = None

    def _connect(self) -> psycopg.Connection[Any]:
        if self.conn is None or self.conn.closed or self.conn.broken:
            try:
                self.conn = psycopg.connect(
                    self.dsn, application_name=f"laminar commit {self.group_id}"[:63]
                )
            except psycopg.Error as e:
                raise map_pg_error(
                    e, f"connecting to the decision database ({redact_dsn(self.dsn)})"
                ) from e
        return self.conn

    def _refresh_postgres(self, conn: psycopg.Connection[Any]) -> None:
        self.last.update(_records.read_sink_epochs(conn, [p.sink_id for p in self.postgres]))
        conn.commit()

    def start(self, owner: str | None) -> int:
        """Register the group, apply the owner guard (docs/protocol.md §5), take a new
        generation (§6); the epoch base."""
        conn = self._connect()
        ids = [s.sink_id for s in [*self.postgres, *self.kafka]]
        try:
            ensure_schema(conn, where=redact_dsn(self.dsn))
            register_sink(conn, self.group_id, GROUP_KIND, {"sinks": ids, "redo": "replay"})
            for k in self.kafka:  # what `laminar status`/`recover` need to reach it
                register_sink(conn, k.sink_id, k.kind, _kafka_registry_config(k))
            conn.commit()
            last = dict(_records.read_sink_epochs(conn, [p.sink_id for p in self.postgres]))
            self.owner = owner
            base = claim_ownership(conn, self.group_id, ids, owner, "fail", last)
            conn.commit()
            generation = _records.bump_generation(conn, self.group_id)
            conn.commit()
        except psycopg.Error as e:
            raise map_pg_error(e, f"starting group {self.group_id!r}") from e
        self.generation = -1 if generation is None else generation
        return base

    def close(self) -> None:
        conn, self.conn = self.conn, None
        if conn is not None:
            with contextlib.suppress(psycopg.Error):
                conn.close()


def _messages(messages: Sequence[Any]) -> list[LaminarCommitMessage]:
    return [m for m in messages if isinstance(m, LaminarCommitMessage)]


def commit_batch(options: SinkOptions, messages: Sequence[Any], batch_id: int) -> None:
    """The driver's ``commit``: decide and complete the epoch of ``batch_id`` (a no-op when it
    is committed already)."""
    kafka, postgres, group_id = _sinks(options)
    got = _messages(messages)
    dsn = options.state_dsn().resolve("the decision database (format('laminar'))")
    group = _DriverGroup(group_id, kafka, postgres, dsn)
    coordinator = ScaleOutCoordinator(group)
    try:
        owners = {m.owner for m in got if m.owner is not None}
        base = group.start(owners.pop() if len(owners) == 1 else None)
        epoch = batch_id + base
        if any(m.epoch != epoch for m in got):
            raise ConfigError(
                f"group {group_id!r}: the tasks of batch {batch_id} wrote epoch(s) "
                f"{sorted({m.epoch for m in got})} but the group's epoch base makes it {epoch} "
                "(was the group reset while the batch ran?); restart the query"
            )
        dtid = dtid_for(group_id, epoch)
        conn = group._connect()
        state = conn.execute(_DT_STATE, (dtid,)).fetchone()
        committed = _committed(conn, group_id, postgres, epoch)
        conn.commit()
        results = [r for m in got for r in m.results]
        if state is None:
            if committed or all(r.status == "empty" for r in results):
                log.info("%s: batch %d (epoch %d) has nothing to commit", group_id, batch_id, epoch)
                return
            raise AbortableError(
                f"{dtid} was rolled back before Spark's commit of batch {batch_id} (the "
                "watcher, `laminar recover` or an abort); restart the query: the batch is "
                "written again",
                epoch=epoch,
            )
        if state[0] == "commit":  # decided by a commit that died before completing it
            coordinator.pending.add(dtid)
            coordinator.recover()
            if conn.execute(_DT_STATE, (dtid,)).fetchone() is not None:
                conn.commit()
                raise InDoubtError(
                    f"{dtid} is decided but could not be completed yet; see `laminar status`",
                    epoch=epoch,
                )
            conn.commit()
            log.info("%s: completed the decided epoch %d", group_id, epoch)
            return
        try:
            done = coordinator.finish_epoch(epoch, lambda: results)
        except AbortableError:
            # not decided (the votes of another attempt, a watcher's rollback): nothing of the
            # batch may stay prepared until Spark runs it again
            roll_back_distributed(conn, dtid, coordinator.kafka_sink, why="not decided")
            raise
        log.info("%s: batch %d (epoch %d) %s", group_id, batch_id, epoch, done)
    except psycopg.Error as e:
        raise map_pg_error(e, f"committing batch {batch_id} of group {group_id!r}") from e
    finally:
        coordinator.close()
        group.close()


def abort_batch(options: SinkOptions, messages: Sequence[Any], batch_id: int) -> None:
    """The driver's ``abort``: roll back what the batch's tasks prepared (never a decided
    epoch: the rollback is conditional on ``prepare``)."""
    kafka, postgres, group_id = _sinks(options)
    got = _messages(messages)
    dsn = options.state_dsn().resolve("the decision database (format('laminar'))")
    group = _DriverGroup(group_id, kafka, postgres, dsn)
    try:
        conn = group._connect()
        epochs = {m.epoch for m in got}
        if not epochs:
            row = conn.execute(_GROUP_ROW, (group_id,)).fetchone()
            epochs = {batch_id + (0 if row is None else int(row[1]))}
        conn.commit()
        lookup = participant_factory(kafka)
        for epoch in sorted(epochs):
            why = f"Spark aborted batch {batch_id}"
            with contextlib.suppress(LaminarError):
                roll_back_distributed(conn, dtid_for(group_id, epoch), lookup, why=why)
        for sink in getattr(lookup, "built", {}).values():
            with contextlib.suppress(LaminarError):
                sink.close()
    except psycopg.Error as e:
        raise map_pg_error(e, f"aborting batch {batch_id} of group {group_id!r}") from e
    finally:
        group.close()


def resolve_stopped(options: Mapping[str, str]) -> Any:
    """Resolve what a query stopped in the middle of a batch left prepared (the tasks Spark
    interrupted may still prepare after the batch was abandoned): the watcher's rules for this
    group (docs/protocol.md §4b), as the query's next start would through its replay — for a
    query that will not run again. ``options`` are the query's ``format("laminar")`` options;
    returns the `laminar.watcher.WatcherReport`."""
    from laminar.watcher import Watcher

    kafka, postgres, group_id = _sinks(parse_options(options))
    dsn = parse_options(options).state_dsn().resolve("the decision database (format('laminar'))")
    lookup = participant_factory(kafka)
    watcher = Watcher(
        dsn,
        group_id=group_id,
        kafka_sink=lookup,
        sink_ids=[p.sink_id for p in postgres],
        resolve_after_s=0.0,
    )
    try:
        return watcher.run_once()
    finally:
        for sink in getattr(lookup, "built", {}).values():
            with contextlib.suppress(LaminarError):
                sink.close()
