"""``writeStream.format("laminar")``: the Spark-native sink, on Spark's Python Data Source API
(``DataSourceStreamArrowWriter``), registered by `laminar.spark.register`.

It is the scale-out protocol (docs/protocol.md §4, `laminar.protocol.scaleout`) with Spark's own
entry points, not a second protocol:

- ``write(iterator)`` runs in each task on the executors: the task is a two-phase participant
  exactly as `ScaleOutTask.write_partition` makes one (the claim, ``PREPARE TRANSACTION``, a
  Kafka transaction per task under ``<tid>.p<partition>``), writing Spark's Arrow record batches
  one at a time (a slice in memory, never the partition). Tasks run before any driver-side
  step, so the claim first creates the epoch's ``dt_state`` row if it is missing; a task of an
  epoch already committed (a replayed batch) writes nothing. It returns a `LaminarCommitMessage`
  (the participants' results: small, no rows).
- ``commit(messages, batch_id)`` runs on the driver, in a Python process of its own per call:
  the group's scale-out machine decides and completes the epoch from the results the tasks
  sent (`AtomicGroup.commit_collected`: the core's ``AtomicGroupMachine.commit_collected``),
  after the group's start-up (registry row, the owner guard, a new generation fencing older
  coordinators; its watcher pass spares this epoch's record). A second ``commit`` of the same
  batch finds the epoch committed and does nothing; a ``commit`` after one that died between
  decision and completion completes it; a failed vote rolls the epoch back.
- ``abort(messages, batch_id)`` (a failed job, or ``query.stop()`` in the middle of a batch)
  fences the group at the batch's epoch and resolves its leftovers by the watcher's rules, as
  `resolve_stopped` does: an undecided epoch rolled back, a decided one completed.

The epoch is Spark's batch id (``streaming.sql.batchId``, a task's local property) plus the
group's epoch base; the owner is ``spark:<query id>`` (``sql.streaming.queryId``), the same
owner `laminar.spark.start` records, so the checkpoint-reset guard (docs/protocol.md §5) holds.
"""

from __future__ import annotations

import logging
import sys
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSource,
    DataSourceStreamArrowWriter,
    DataSourceStreamWriter,
    WriterCommitMessage,
)

from laminar import _stats, _trace
from laminar.errors import ConfigError
from laminar.spark.options import SinkOptions, parse_options

if TYPE_CHECKING:
    import psycopg
    import pyarrow as pa  # type: ignore[import-untyped]

    from laminar.kafka.sink import KafkaSink
    from laminar.postgres.sink import PostgresSink
    from laminar.protocol.scaleout import ParticipantResult

# Light at import: Spark starts fresh driver-side Python processes for every micro-batch (the
# data source's creation, the writer's, `commit`), and each imports this module. psycopg,
# pyarrow, the sinks and the protocol are imported by the functions that use them, in the
# processes that use them (docs/spark.md, "Throughput").

__all__ = ["LaminarCommitMessage", "LaminarDataSource", "LaminarStreamWriter", "resolve_stopped"]

log = logging.getLogger("laminar.spark.source")

#: What ``format(...)`` names.
FORMAT = "laminar"

_trace.mark("imported laminar.spark.source")

#: Processes (Spark Python workers) that checked the servers of a configuration already.
_checked: set[str] = set()

#: The module Spark runs a streaming sink's ``commit`` and ``abort`` under, in a Python process
#: of its own per call: it creates the writer only to call one of them (pyspark's
#: ``python_streaming_sink_runner``), never to ship it to tasks.
_COMMIT_RUNNER = "pyspark.sql.worker.python_streaming_sink_runner"


def _in_commit_runner() -> bool:
    """Whether this process is Spark's commit runner (`_COMMIT_RUNNER`): a forked worker of its
    daemon imported the module before calling it; without a daemon it is ``__main__``."""
    main = getattr(sys.modules.get("__main__"), "__spec__", None)
    return _COMMIT_RUNNER in sys.modules or getattr(main, "name", None) == _COMMIT_RUNNER


@dataclass
class LaminarCommitMessage(WriterCommitMessage):
    """What one task attempt sends to the driver: its participants' results (no rows)."""

    epoch: int
    part: int
    #: ``spark:<query id>``, the owner the task checked (None outside a streaming query).
    owner: str | None
    results: list[ParticipantResult]
    #: The query run's id (Spark's job group of the batch): the commits of one run share its
    #: start-up (`laminar.spark._run_memo`). None when Spark did not set it.
    run: str | None = None


class LaminarDataSource(DataSource):
    """``format("laminar")``: options are checked here, where Spark first hands them over
    (`laminar.spark.options`)."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        _trace.mark("data source created")
        # The sinks' own checks run where the writer is created (`streamWriter`, before any
        # task): Spark also creates the data source in a process that only needs the options.
        self.sink_options = parse_options(options, check_sinks=False)

    def streamWriter(self, schema: Any, overwrite: bool) -> DataSourceStreamWriter:  # noqa: N802
        if overwrite and self.sink_options.postgres_mode != "upsert":
            # complete mode: every batch is the whole result table. Upserted by key, the table
            # becomes it (Spark gives Python sinks no update mode: docs/spark.md, "Upsert mode")
            raise ConfigError(
                "format('laminar') appends each micro-batch exactly once; use outputMode "
                "'append', or 'complete' with option postgres.mode=upsert (each batch's rows "
                "replace the table's rows by postgres.key); plain 'complete' asks to overwrite"
            )
        return LaminarStreamWriter(self.sink_options)


class LaminarStreamWriter(DataSourceStreamArrowWriter):
    """The tasks' ``write`` and the driver's ``commit``/``abort`` (module docstring)."""

    def __init__(self, options: SinkOptions) -> None:
        self.options = options
        #: This writer's token, pickled with it to its tasks: the stop fence it lifts is
        #: reserved for them (a worker of an earlier writer stays fenced, docs/protocol.md §4).
        self.token = uuid.uuid4().hex
        if _in_commit_runner():
            # Spark's commit runner creates the writer to call commit or abort only: no task
            # carries this token, so there is no fence to reserve for it, and the commit reaches
            # (and checks) the servers it uses itself. The writer that Spark ships to the batch's
            # tasks was created, checked and its fence lifted in another process before them.
            _trace.mark("stream writer created", commit_runner=True)
            return
        # the sinks are built once here: their own checks, then the servers, then the fence
        kafka, postgres, group_id = _sinks(options)
        _check_servers_once(options, [*postgres, *kafka], where="the Spark driver's Python")
        _lift_stop_fence(options, group_id, self.token)
        _trace.mark("stream writer created")

    def write(self, iterator: Iterator[pa.RecordBatch]) -> LaminarCommitMessage:
        ctx = TaskContext.get()
        if ctx is None:
            raise ConfigError("format('laminar') writes from Spark tasks only")
        _trace.mark("write called", part=ctx.partitionId())
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
            # Spark's stream execution runs each batch's job in the job group of its run id
            run=ctx.getLocalProperty("spark.jobGroup.id"),
            writer=self.token,
        )

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        commit_batch(self.options, messages, batchId)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        abort_batch(self.options, messages, batchId)


def _check_servers_once(
    options: SinkOptions, sinks: list[Any], *, where: str, servers_only: bool = False
) -> None:
    """Check the servers of ``sinks`` (built from ``options``) once per process; ``where``
    names the process (its pid, host and Python are added).

    ``servers_only`` (a task): once per set of servers and client settings, whatever the topic
    or table — a task's check proves that *its* process reaches the servers, while the topic's
    existence was checked for these options on the driver before the batch's tasks ran. A
    worker writing a second topic of the same cluster then pays no second check (an
    AdminClient and a PostgreSQL connection: 20-80 ms of a task)."""
    key = _servers_key(sinks) if servers_only else repr(options)  # repr: no secrets in it
    if not options.check_servers or key in _checked:
        return
    from laminar.readiness import describe_process, require_reachable  # lazy: see top

    require_reachable(sinks, where=f"{where} ({describe_process()})")
    _checked.add(key)


def _servers_key(sinks: list[Any]) -> str:
    """A digest of the servers ``sinks`` reach and how (resolved addresses and client settings,
    never kept in the clear: they may hold credentials)."""
    import hashlib  # in-function: only a task's check asks

    parts: list[tuple[Any, ...]] = []
    for sink in sinks:
        if sink.kind == "kafka":
            settings = sink.client_settings()
            config = sorted((k, repr(v)) for k, v in settings.producer_config.items())
            parts.append(("kafka", settings.bootstrap_servers, config))
        else:
            parts.append((sink.kind, sink.resolved_dsn))
    return "servers:" + hashlib.sha256(repr(parts).encode()).hexdigest()


def _lift_stop_fence(options: SinkOptions, group_id: str, writer: str) -> None:
    """A new run (Spark creates the writer on the driver before each batch's tasks): lift the
    group's stop fence that `resolve_stopped` left for the tasks of ``writer`` (its token) only
    (`laminar.spark._stop_fence`)."""
    # in-function: the driver-side processes import only what their entry point needs
    from laminar.spark import _stop_fence

    _stop_fence.lift(options.resolved_state_dsn(), group_id, writer)


def _sinks(options: SinkOptions) -> tuple[list[KafkaSink], list[PostgresSink], str]:
    kafka, postgres = options.kafka_sinks(), options.postgres_sinks()
    group_id = options.group_id([s.sink_id for s in [*postgres, *kafka]])
    return kafka, postgres, group_id


def _epoch_base(
    conn: psycopg.Connection[Any], group_id: str, members: Sequence[str], owner: str | None
) -> int:
    """The group's epoch base, after the owner guard (docs/protocol.md §5; a task never claims):
    0 before the group's first commit registers it."""
    from laminar.engine import records as _records  # lazy: see top
    from laminar.protocol.atomic import owner_decision_of  # lazy: see top

    last = dict(_records.read_sink_epochs(conn, list(members)))
    decided = owner_decision_of(conn, group_id, members, owner, last, restart=False)
    return 0 if decided is None else decided[1]


def _read_epoch_base(
    dsn: str, group_id: str, members: Sequence[str], owner: str | None, part: int
) -> int:
    """`_epoch_base` on the worker's kept connection (`laminar.spark._conn_cache`: Spark reuses the
    worker for its next task). A kept connection can have died since its last task (a server
    restart shows only on use): on an error it is dropped and the read tried once more on a
    new connection, which also runs the schema check again."""
    import psycopg  # lazy: see top

    from laminar._redact import redact_dsn  # lazy: see top
    from laminar.metadata import ensure_schema  # lazy: see top
    from laminar.postgres._errors import map_pg_error  # lazy: see top
    from laminar.spark._conn_cache import cached_connection, discard  # lazy: see top

    for last_try in (False, True):
        try:
            conn = cached_connection(
                dsn,
                # not "laminar task": that names a task still writing (docs/spark.md)
                application_name="laminar worker",
                prepare=lambda c: ensure_schema(c, where=redact_dsn(dsn)),
            )
            return _epoch_base(conn, group_id, members, owner)
        except psycopg.Error as e:
            discard(dsn)
            if last_try:
                raise map_pg_error(e, f"format('laminar') task {part}: reading {group_id!r}") from e
    raise AssertionError("unreachable")  # pragma: no cover


def write_task(
    options: SinkOptions,
    batch_id: int,
    owner: str | None,
    part: int,
    batches: Iterator[pa.RecordBatch],
    *,
    attempt: str,
    run: str | None = None,
    writer: str | None = None,
) -> LaminarCommitMessage:
    """One task attempt: partition ``part`` of Spark batch ``batch_id`` as prepared participants
    (`ScaleOutTask.write_partition` with ``create_record``: the core's task machine skips an
    epoch committed already — a replayed batch — and creates the epoch's record if missing,
    unless the group's stop fence covers the epoch: an abandoned worker of a batch
    `resolve_stopped` resolved then writes nothing, and so does one that arrives after the next
    run's writer reserved the fence, ``writer`` being that of the task's writer: its token)."""
    from laminar.protocol.scaleout import ScaleOutTask  # lazy: see top
    from laminar.spark._conn_cache import KeptControl  # lazy: see top

    kafka, postgres, group_id = _sinks(options)
    dsn = options.resolved_state_dsn()
    _check_servers_once(
        options, [*postgres, *kafka], where="a Spark task's Python", servers_only=True
    )
    members = [s.sink_id for s in [*postgres, *kafka]]
    epoch = batch_id + _read_epoch_base(dsn, group_id, members, owner, part)
    _trace.mark("epoch base read", part=part)
    task = ScaleOutTask(group_id, epoch, postgres, kafka, state_dsn=dsn)
    results = task.write_partition(
        part, batches, attempt=attempt, create_record=True, writer=writer, control=KeptControl(dsn)
    )
    _trace.mark("task done", part=part, rows=sum(r.records for r in results))
    return LaminarCommitMessage(epoch, part, owner, results, run)


def _messages(messages: Sequence[Any]) -> list[LaminarCommitMessage]:
    return [m for m in messages if isinstance(m, LaminarCommitMessage)]


def _single(values: Iterable[str | None]) -> str | None:
    """The one value the messages agree on (None if none or several)."""
    found = {v for v in values if v is not None}
    return found.pop() if len(found) == 1 else None


def commit_batch(options: SinkOptions, messages: Sequence[Any], batch_id: int) -> bool:
    """The driver's ``commit``: decide and complete the epoch of ``batch_id`` through the
    group's scale-out machine (`AtomicGroup.commit_collected`: start-up with the owner guard
    and a new generation, then the vote, the decision and the completion of what the tasks
    prepared). A repeated commit finds the epoch committed and does nothing; a commit after one
    that died between decision and completion completes it; a failed vote rolls the epoch's
    participants back. False if nothing was committed by this call.

    The start-up runs once per query run: the run's later commits resume what its first one
    left (`laminar.spark._run_memo`, checked against the group's rows by the core:
    docs/protocol.md §4, "A run's start-up, once"); a commit that fails forgets it."""
    from laminar.protocol.atomic import AtomicGroup  # lazy: see top
    from laminar.spark import _run_memo  # lazy: see top

    _trace.mark("commit called", batch=batch_id)
    kafka, postgres, group_id = _sinks(options)
    got = _messages(messages)
    dsn = options.resolved_state_dsn()
    owner = _single(m.owner for m in got)
    run = _single(m.run for m in got)
    start = _run_memo.recall(group_id, owner, run) if owner and run else None
    group = AtomicGroup(
        group_id,
        kafka,
        postgres,
        owner=owner,
        on_new_query="fail",
        redo="replay",
        scale_out=True,
        state_dsn=dsn,
    )

    def results(epoch: int) -> list[ParticipantResult]:
        if any(m.epoch != epoch for m in got):
            raise ConfigError(
                f"group {group_id!r}: the tasks of batch {batch_id} wrote epoch(s) "
                f"{sorted({m.epoch for m in got})} but the group's epoch base makes it {epoch} "
                "(was the group reset while the batch ran?); restart the query"
            )
        return [r for m in got for r in m.results]

    try:
        done = group.commit_collected(batch_id, results, resume=start)
        resumed, generation, base = group.resumed, group.generation, group.epoch_base
    except BaseException:
        _run_memo.forget(group_id)  # Spark fails the query; its next run starts up
        raise
    finally:
        group.close()
    if owner and run:
        _run_memo.remember(group_id, owner, run, generation, base)
    _trace.mark("commit done", batch=batch_id, resumed=resumed)
    log.info("%s: batch %d %s", group_id, batch_id, "committed" if done else "had nothing to do")
    return done


def abort_batch(options: SinkOptions, messages: Sequence[Any], batch_id: int) -> Any:
    """The driver's ``abort``: Spark calls it when a batch's job failed, and when the query is
    stopped in the middle of the batch (``query.stop()`` cancels the job, then aborts; it returns
    once this did — docs/spark.md, "Stopping a query"). What `resolve_stopped` does, for this
    batch: fence the group at the batch's epoch (its batch id plus the epoch base, and the
    epochs of the messages: a task Spark has not killed yet that connects after this writes
    nothing), then resolve the group's leftovers by the watcher's rules — an undecided epoch
    rolled back and concluded, a decided one completed, never a decided one rolled back.
    Returns the `laminar.protocol.watcher.WatcherReport`."""
    import psycopg  # lazy: see top

    from laminar.engine import records as _records  # lazy: see top
    from laminar.postgres._errors import map_pg_error  # lazy: see top
    from laminar.spark import _run_memo  # lazy: see top

    _trace.mark("abort called", batch=batch_id)
    _, _, group_id = _sinks(options)
    _run_memo.forget(group_id)  # a failed batch: the next commit starts up
    epochs = {m.epoch for m in _messages(messages)}
    dsn = options.resolved_state_dsn()
    try:
        with psycopg.connect(dsn, application_name=f"laminar abort {group_id}"[:63]) as conn:
            found = _records.read_ownership(conn, group_id, [])
            epochs.add(batch_id + (0 if found is None else found[1]))
            conn.commit()
            _stats.count(conn, group_id, aborted=1)  # laminar.commit_stats: Spark's aborts
    except psycopg.Error as e:
        raise map_pg_error(e, f"aborting batch {batch_id} of group {group_id!r}") from e
    report = _resolve_group(options, batch_epochs=epochs)
    _trace.mark("abort done", batch=batch_id)
    log.info(
        "%s: Spark aborted batch %d (epochs %s): fenced, %d resolved, %d unresolved",
        group_id,
        batch_id,
        sorted(epochs),
        report.resolved,
        len(report.unresolved),
    )
    return report


def resolve_stopped(options: Mapping[str, str]) -> Any:
    """Resolve what a query stopped in the middle of a batch left prepared: the watcher's rules
    for this group (docs/protocol.md §4b), as the query's next start would through its replay —
    for a stop Spark did not follow with ``abort`` (the driver died, or the abort could not
    reach the database) of a query that will not run again. ``options`` are the query's
    ``format("laminar")`` options; returns the `laminar.protocol.watcher.WatcherReport`.

    First it fences the group (`laminar.spark._stop_fence`): a worker of the stopped batch that
    connects only after the resolution finds its record missing and writes nothing instead of
    creating it again; the query's next run lifts the fence when it creates its writer."""
    return _resolve_group(parse_options(options))


def _resolve_group(options: SinkOptions, *, batch_epochs: Iterable[int] = ()) -> Any:
    """Fence the group (at ``batch_epochs`` too), then one watcher pass over its leftovers with
    no waiting (``resolve_after_s=0``): `abort_batch` and `resolve_stopped`."""
    from laminar.protocol.distributed import ParticipantLookup  # lazy: see top
    from laminar.protocol.watcher import Watcher  # lazy: see top
    from laminar.spark import _stop_fence  # lazy: see top

    kafka, postgres, group_id = _sinks(options)
    dsn = options.resolved_state_dsn()
    members = [s.sink_id for s in [*postgres, *kafka]]
    _stop_fence.fence_stopped(dsn, group_id, members, batch_epochs=batch_epochs)
    lookup = ParticipantLookup(kafka)
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
        lookup.close()
