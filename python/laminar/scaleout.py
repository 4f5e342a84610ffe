"""Scale-out mode (docs/protocol.md §4): Spark tasks write the partitions of a batch as two-phase
participants, and the process that runs ``foreachBatch`` coordinates them (Vitess-style
distributed transaction, ``dtid = laminar:<group>:<epoch>``).

Coordinator, per epoch (each ``scaleout.*`` name is a crash point, reached after the step)::

    1  INSERT dt_state(dtid, 'prepare')  (committed)                       scaleout.after_create
    2  run the tasks (mapInArrow), collect one result row per participant   scaleout.after_tasks
    3  the decision, one transaction: group row lock + generation check; dt_state
       prepare -> commit (conditional); every partition's claimed attempt is the collected one;
       sink_epochs of each Postgres sink; participants marked; txn_state of each Kafka
       participant (producer id/epoch)                                      scaleout.after_decision
    4  COMMIT PREPARED each Postgres participant, EndTxn(commit) each Kafka participant
                                                                             scaleout.mid_completion
    5  conclude: DELETE dt_state (participants cascade)

Task (one attempt of partition ``p``), on its own control connection::

    a  session advisory lock on (dtid, p): attempts of one partition run one after the other
    b  claim, one transaction: dt_state is still 'prepare' (FOR SHARE, so a decision waits for
       the claim), upsert the partition's participant rows with this attempt's token
                                                                             scaleout.task_after_claim
    c  roll back what an earlier attempt of p left prepared (it can no longer be chosen: the
       claim names this attempt); Kafka's init_transactions fences it too
    d  write: Postgres ``two_phase_part=p`` (COPY), Kafka ``<tid>.p<p>`` (records + its marker)
                                                                             scaleout.task_before_prepare
    e  prepare: Kafka flush (left open, PreparedTxnState returned), PREPARE TRANSACTION
                                                                             scaleout.task_after_prepare
    f  one result row per participant; release the lock

A failure before the decision rolls back (``ROLLBACK PREPARED``; Kafka participants aborted by
a fresh producer's ``init_transactions``) and the epoch is written again. Spark retries a failed
task, and may run a speculative twin: the claim makes the *last* attempt of a partition the only
one with prepared participants, and the coordinator commits only when that attempt is the one
whose result it collected (otherwise it rolls back and writes the epoch again). A crash at any
step is resolved by the Vitess rules: decision ``commit`` → complete; ``prepare``, ``rollback``
or none → roll back (the next start of the writer, its watcher, ``laminar recover``).
"""

from __future__ import annotations

import contextlib
import logging
import re
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
import pyarrow as pa  # type: ignore[import-untyped]
from psycopg import sql

from laminar._core import check_generation, decide
from laminar._faults import crash_point
from laminar._records import LOCK_GROUP, UPSERT_DECISION
from laminar.errors import AbortableError, ConfigError, FencedError, InDoubtError, LaminarError
from laminar.metadata import table
from laminar.recovery import end_txn, resolve_kafka_sinks
from laminar.sinks._pg_errors import map_pg_error
from laminar.sinks._pg_steps import (
    claim_epoch,
    commit_prepared,
    list_prepared,
    record_epoch_totals,
    rollback_prepared,
)
from laminar.sinks.kafka import KafkaSink
from laminar.sinks.postgres import PostgresSink

__all__ = [
    "RESULT_SCHEMA",
    "ParticipantResult",
    "ScaleOutCoordinator",
    "ScaleOutTask",
    "dtid_for",
    "kafka_participant",
    "postgres_participant",
    "roll_back_distributed",
]

log = logging.getLogger("laminar.scaleout")

#: The rows a task yields (``mapInArrow``'s output schema).
RESULT_SCHEMA = pa.schema(
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

_PARTICIPANT_TID = re.compile(r"^(?P<base>.+)\.p(?P<part>[0-9]+)$")


def dtid_for(group_id: str, epoch: int) -> str:
    """The distributed transaction id of one epoch of a group."""
    return f"laminar:{group_id}:{epoch}"


def _clone(sink: Any) -> Any:
    copy = object.__new__(type(sink))
    copy.__setstate__(sink.__getstate__())
    return copy


def postgres_participant(base: PostgresSink, part: int) -> PostgresSink:
    """``base`` as scale-out participant ``part`` (same table and sink id, ``two_phase_part``)."""
    sink: PostgresSink = _clone(base)
    sink._two_phase_part = part
    return sink


def kafka_participant(base: KafkaSink, part: int) -> KafkaSink:
    """``base`` as scale-out participant ``part``: transactional id ``<tid>.p<part>``, with its
    own epoch marker (consumer group ``laminar.<tid>.p<part>``)."""
    sink: KafkaSink = _clone(base)
    sink._sink_id = f"{base.sink_id}.p{part}"
    sink._resolved = None
    return sink


def participant_base(transactional_id: str) -> tuple[str, int] | None:
    """``(base transactional id, part)`` of a participant id ``<tid>.p<part>``, else None."""
    m = _PARTICIPANT_TID.match(transactional_id)
    return None if m is None else (m["base"], int(m["part"]))


def participant_factory(
    kafka: Sequence[KafkaSink], fallback: Callable[[str], Any] | None = None
) -> Callable[[str], Any]:
    """A ``transactional_id → KafkaSink`` lookup that also builds the participants
    ``<tid>.p<n>`` of the given sinks (cached; the watcher and recovery read their markers)."""
    by_id = {k.sink_id: k for k in kafka}
    built: dict[str, Any] = {}

    def lookup(tid: str) -> Any:
        if tid in by_id:
            return by_id[tid]
        if tid in built:
            return built[tid]
        m = _PARTICIPANT_TID.match(tid)
        base: Any = None
        if m is not None:
            base = by_id.get(m["base"])
            if base is None and fallback is not None:
                base = fallback(m["base"])
        if base is None:
            return fallback(tid) if fallback is not None else None
        assert m is not None
        built[tid] = kafka_participant(base, int(m["part"]))
        return built[tid]

    lookup.built = built  # type: ignore[attr-defined]
    return lookup


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
        """As a row of `RESULT_SCHEMA`."""
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
        """From a mapping or a Spark ``Row`` of `RESULT_SCHEMA`."""
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
    """Results as one Arrow record batch of `RESULT_SCHEMA`."""
    return pa.RecordBatch.from_pylist([r.row() for r in results], schema=RESULT_SCHEMA)


# -- the task side -------------------------------------------------------------------------------


_CLAIM_STATE = sql.SQL("SELECT state FROM {t} WHERE dtid = %s FOR SHARE").format(
    t=table("dt_state")
)
_CLAIM_ROW = sql.SQL(
    "INSERT INTO {t} (dtid, participant, kind, resource, state) VALUES (%s, %s, %s, %s, 'claimed')"
    " ON CONFLICT (dtid, participant) DO UPDATE SET resource = EXCLUDED.resource,"
    " state = 'claimed'"
).format(t=table("dt_participant"))


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
        #: the data source, `laminar.spark_source`); resolved in the task's process.
        self.state_dsn = state_dsn
        self.group_id = group_id
        self.epoch = epoch
        self.dtid = dtid_for(group_id, epoch)
        self.postgres = list(postgres)
        self.kafka = list(kafka)

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
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
    ) -> list[ParticipantResult]:
        """Write partition ``part`` of the epoch as prepared participants (module doc, a-f).
        ``create_record``: the claim first creates the epoch's ``dt_state`` row if it is missing
        (the data source's tasks, which run before any coordinator step: docs/spark.md)."""
        attempt = attempt or f"0-{uuid.uuid4().hex[:12]}"
        dsn = self.state_dsn or self.postgres[0].resolved_dsn
        pgs = [postgres_participant(p, part) for p in self.postgres]
        kas = [kafka_participant(k, part) for k in self.kafka]
        names = [(f"pg:{p.sink_id}:p{part}", "postgres", p.gid(self.epoch)) for p in pgs] + [
            (f"kafka:{k.sink_id}", "kafka", k.sink_id) for k in kas
        ]

        def rows(status: str, **done: tuple[int, str, int | None]) -> list[ParticipantResult]:
            return [
                ParticipantResult(
                    part, attempt, name, kind, res, *done.get(name, (0, "", None)), status
                )
                for name, kind, res in names
            ]

        try:
            control = psycopg.connect(dsn, autocommit=True, application_name="laminar task")
        except psycopg.Error as e:
            raise map_pg_error(e, f"scale-out task {part}: connecting") from e
        try:
            with control:
                # a. attempts of one partition, one after the other
                control.execute(
                    "SELECT pg_advisory_lock(hashtextextended(%s, 0))", (f"{self.dtid}#{part}",)
                )
                # b. the claim
                with control.transaction():
                    if create_record:
                        control.execute(_CREATE, (self.dtid, self.group_id, self.epoch))
                    state = control.execute(_CLAIM_STATE, (self.dtid,)).fetchone()
                    if state is None or state[0] != "prepare":
                        log.warning(
                            "%s partition %d: the distributed transaction is %s: nothing written",
                            self.dtid,
                            part,
                            "gone" if state is None else state[0],
                        )
                        return rows("skipped")
                    control.execute(_CLAIM_ROW, (self.dtid, f"p{part}", "attempt", attempt))
                    for name, kind, res in names:
                        control.execute(_CLAIM_ROW, (self.dtid, name, kind, res))
                crash_point("scaleout.task_after_claim")
                # c. an earlier attempt's leftovers (Kafka: fenced by init_transactions below)
                mine = {p.gid(self.epoch) for p in pgs}
                for prepared in list_prepared(control):
                    if prepared.gid in mine:
                        log.warning(
                            "%s partition %d: rolling back %s left by an earlier attempt",
                            self.dtid,
                            part,
                            prepared.gid,
                        )
                        rollback_prepared(control, prepared.gid)
                return self._write(part, batches, pgs, kas, rows)
        except psycopg.Error as e:
            raise map_pg_error(e, f"scale-out task {part} of {self.dtid}") from e

    def _write(
        self,
        part: int,
        batches: Iterable[pa.RecordBatch | pa.Table],
        pgs: list[PostgresSink],
        kas: list[KafkaSink],
        rows: Callable[..., list[ParticipantResult]],
    ) -> list[ParticipantResult]:
        epoch = self.epoch
        it = iter(batches)
        first = next((b for b in it if b.num_rows > 0), None)
        if first is None:
            return rows("empty")
        opened: list[Any] = []
        try:
            markers: dict[str, int | None] = {}
            for k in kas:
                k.init_transactions()  # fences every earlier attempt's producer
                markers[k.sink_id] = k.tracker.last_committed_epoch
            for p in pgs:
                p.init_transactions()
            for sink in [*pgs, *kas]:
                if not sink.begin_transaction(epoch):
                    log.warning("%s: participant %s already holds the epoch", self.dtid, sink)
                    for s in opened:
                        s.abort_transaction(epoch)
                    return rows("skipped")
                opened.append(sink)
            count = 0
            for batch in _chain(first, it):
                if batch.num_rows == 0:
                    continue
                for sink in opened:
                    sink.write(batch)
                count += batch.num_rows
            crash_point("scaleout.task_before_prepare")
            done: dict[str, tuple[int, str, int | None]] = {}
            for k in kas:
                state = k.prepare_transaction()
                done[f"kafka:{k.sink_id}"] = (count, str(state), markers[k.sink_id])
            for p in pgs:
                pstate = p.prepare_transaction()
                done[f"pg:{p.sink_id}:p{part}"] = (count, str(pstate), None)
            crash_point("scaleout.task_after_prepare")
        except BaseException:
            for sink in opened:
                if sink.transaction_state.name in ("Active", "Prepared"):
                    with contextlib.suppress(LaminarError):
                        sink.abort_transaction(epoch)
            for sink in [*pgs, *kas]:
                with contextlib.suppress(LaminarError):
                    sink.close()
            raise
        for k in kas:
            k.release_prepared()
        for p in pgs:
            p.close()
        return rows("prepared", **done)


def _chain(first: Any, rest: Iterator[Any]) -> Iterator[Any]:
    yield first
    yield from rest


# -- the coordinator side -------------------------------------------------------------------------


_CREATE = sql.SQL(
    "INSERT INTO {t} (dtid, group_id, epoch, state) VALUES (%s, %s, %s, 'prepare')"
    " ON CONFLICT (dtid) DO NOTHING RETURNING 1"
).format(t=table("dt_state"))
_START_COMMIT = sql.SQL(
    "UPDATE {t} SET state = 'commit', updated_at = now() WHERE dtid = %s AND state = 'prepare'"
    " RETURNING 1"
).format(t=table("dt_state"))
_SET_ROLLBACK = sql.SQL(
    "UPDATE {t} SET state = 'rollback', updated_at = now(), message = %s"
    " WHERE dtid = %s AND state IN ('prepare', 'rollback') RETURNING 1"
).format(t=table("dt_state"))
_CLAIMS = sql.SQL("SELECT participant, kind, resource FROM {t} WHERE dtid = %s").format(
    t=table("dt_participant")
)
_MARK = sql.SQL(
    "UPDATE {t} SET state = 'prepared' WHERE dtid = %s AND participant = ANY(%s)"
).format(t=table("dt_participant"))
_CONCLUDE = sql.SQL("DELETE FROM {t} WHERE dtid = %s").format(t=table("dt_state"))


def roll_back_distributed(
    conn: psycopg.Connection[Any],
    dtid: str,
    kafka_sink: Callable[[str], Any] | None,
    *,
    why: str,
) -> bool:
    """Record ``rollback`` for ``dtid`` (conditional: False if it is decided ``commit``), roll
    back every participant its tasks claimed, and conclude it."""
    if conn.execute(_SET_ROLLBACK, (why[:500], dtid)).fetchone() is None:
        gone = conn.execute(
            sql.SQL("SELECT state FROM {t} WHERE dtid = %s").format(t=table("dt_state")), (dtid,)
        ).fetchone()
        conn.commit()
        return gone is None
    participants = conn.execute(_CLAIMS, (dtid,)).fetchall()
    conn.commit()
    gids = {res for _, kind, res in participants if kind == "postgres"}
    found = [p.gid for p in list_prepared(conn) if p.gid in gids]
    conn.commit()
    for gid in found:
        rollback_prepared(conn, gid)
    for _, kind, res in participants:
        if kind != "kafka" or kafka_sink is None:
            continue
        sink = kafka_sink(res)
        if sink is None:
            log.warning("%s: cannot reach Kafka participant %s to abort it", dtid, res)
            continue
        sink.init_transactions()  # a fresh producer aborts what the participant left open
        sink.close()
    conn.execute(_CONCLUDE, (dtid,))
    conn.commit()
    log.warning("%s rolled back (%s): %d participant(s)", dtid, why, len(participants))
    return True


RunTasks = Callable[["ScaleOutTask"], Iterable[ParticipantResult]]


class ScaleOutCoordinator:
    """The foreachBatch side of scale-out mode for one atomic group (module docstring)."""

    def __init__(self, group: Any) -> None:
        self.group = group
        self.kafka_sink = participant_factory(group.kafka)
        #: Decided distributed transactions not concluded yet (completed before the next epoch).
        self.pending: set[str] = set()

    def write_epoch(self, epoch: int, run: RunTasks) -> bool:
        """Write ``epoch`` through tasks run by ``run(task)``; False if it was committed
        before (a replay) or every partition was empty (nothing to write)."""
        from laminar._core import plan_epoch
        from laminar.recovery import refusal_error

        group = self.group
        if self.pending:
            self._settle_pending(epoch)
        progress = [(p.sink_id, group.last.get(p.sink_id)) for p in group.postgres]
        plan = plan_epoch(epoch, progress, [], refuse_backwards=group.owner is not None)
        if plan.action == "refuse":
            raise refusal_error(plan.refusal, plan.message, epoch=epoch)
        if plan.action == "skip":
            log.info("scale-out %s: epoch %d already committed, skipped", group.group_id, epoch)
            return False
        started = time.perf_counter()
        conn = group._connect()
        dtid = dtid_for(group.group_id, epoch)
        try:
            # 1. the record every participant is judged by
            if conn.execute(_CREATE, (dtid, group.group_id, epoch)).fetchone() is None:
                conn.commit()
                if not roll_back_distributed(
                    conn, dtid, self.kafka_sink, why="left by an earlier run"
                ):
                    # decided by an earlier call whose answer was lost: complete it instead
                    self.pending.add(dtid)
                    self._settle_pending(epoch)
                    return False
                conn.execute(_CREATE, (dtid, group.group_id, epoch))
            conn.commit()
        except psycopg.Error as e:
            raise map_pg_error(e, f"creating {dtid}", epoch=epoch) from e
        crash_point("scaleout.after_create")
        task = ScaleOutTask(group.group_id, epoch, group.postgres, group.kafka)
        return self.finish_epoch(epoch, lambda: list(run(task)), started)

    def finish_epoch(
        self,
        epoch: int,
        collect: Callable[[], list[ParticipantResult]],
        started: float | None = None,
    ) -> bool:
        """Steps 2-5 of an epoch whose ``dt_state`` row is in ``prepare``: ``collect()`` the
        participants' results, decide, complete; rolled back on a failure before the decision.
        `write_epoch` runs it after creating the row; the data source's driver-side ``commit``
        runs it with the results its tasks sent (docs/spark.md)."""
        group = self.group
        conn = group._connect()
        dtid = dtid_for(group.group_id, epoch)
        started = time.perf_counter() if started is None else started
        try:
            results = collect()
            crash_point("scaleout.after_tasks")
            if all(r.status == "empty" for r in results):
                # an empty batch: nothing was prepared, nothing to decide (like the
                # single-process path, which opens no transaction for it)
                conn.execute(_CONCLUDE, (dtid,))
                conn.commit()
                log.debug("%s: every partition is empty, nothing written", dtid)
                return False
            decided = self._decide(conn, dtid, epoch, results)
        except BaseException as err:
            self._roll_back(dtid, f"{type(err).__name__}: {err}")
            if isinstance(err, psycopg.Error):
                raise map_pg_error(err, f"deciding {dtid}", epoch=epoch) from err
            if isinstance(err, LaminarError):
                raise
            if isinstance(err, Exception):
                raise AbortableError(
                    f"scale-out epoch {epoch} of group {group.group_id!r} failed before its "
                    f"decision and was rolled back: {err}",
                    epoch=epoch,
                ) from err
            raise
        if not decided:
            raise AbortableError(
                f"scale-out epoch {epoch} of group {group.group_id!r}: a task attempt other than "
                "the collected one claimed a partition (Spark retry or speculation), or the "
                "watcher rolled it back; the epoch was rolled back and is written again",
                epoch=epoch,
            )
        crash_point("scaleout.after_decision")
        for p in group.postgres:
            group.last[p.sink_id] = epoch
        self.pending.add(dtid)
        try:
            self._complete(conn, dtid, epoch, results)
        except (LaminarError, psycopg.Error) as err:
            raise InDoubtError(
                f"{dtid} is decided but its completion failed ({err}); it is completed before "
                "the next epoch is written (or by the watcher, `laminar recover`)",
                epoch=epoch,
            ) from err
        self.pending.discard(dtid)
        group.last_commit_ms = (time.perf_counter() - started) * 1000
        return True

    def _decide(
        self,
        conn: psycopg.Connection[Any],
        dtid: str,
        epoch: int,
        results: list[ParticipantResult],
    ) -> bool:
        group = self.group
        attempts: dict[int, set[str]] = {}
        for r in results:
            attempts.setdefault(r.part, set()).add(r.attempt)
        row = conn.execute(LOCK_GROUP, (group.last_commit_ms, group.group_id)).fetchone()
        fenced = check_generation(group.group_id, group.generation, -1 if row is None else row[0])
        if fenced is not None:
            raise FencedError(fenced, epoch=epoch)
        if conn.execute(_START_COMMIT, (dtid,)).fetchone() is None:
            conn.rollback()
            return False
        claims = {
            int(p[1:]): res
            for p, kind, res in conn.execute(_CLAIMS, (dtid,)).fetchall()
            if kind == "attempt"
        }
        votes = [
            len(seen) == 1
            and claims.get(part) in seen
            and all(r.status in ("prepared", "empty") for r in results if r.part == part)
            for part, seen in attempts.items()
        ]
        votes += [False for part in claims if part not in attempts]
        if decide(votes, len(attempts)) != "start_commit":
            conn.rollback()
            log.warning(
                "%s: votes %s against claims %s: rolling back", dtid, sorted(attempts), claims
            )
            return False
        for p in group.postgres:
            if not claim_epoch(conn, p.sink_id, epoch):
                raise FencedError(
                    f"PostgreSQL sink {p.sink_id!r} already holds epoch {epoch}: another writer "
                    "uses its sink id outside this group",
                    sink_id=p.sink_id,
                    epoch=epoch,
                )
            mine = f"pg:{p.sink_id}:p"
            record_epoch_totals(
                conn,
                p.sink_id,
                sum(r.records for r in results if r.participant.startswith(mine)),
                0,
            )
        conn.execute(_MARK, (dtid, [r.participant for r in results if r.status == "prepared"]))
        for r in results:
            if r.kind == "kafka" and r.status == "prepared":
                conn.execute(
                    UPSERT_DECISION,
                    (r.resource, epoch, r.marker, r.prepared_state, group.group_id),
                )
        conn.commit()  # the decision
        return True

    def _complete(
        self, conn: psycopg.Connection[Any], dtid: str, epoch: int, results: list[ParticipantResult]
    ) -> None:
        from laminar._core import PreparedTxnState

        prepared = [r for r in results if r.status == "prepared"]
        try:
            for i, r in enumerate(r for r in prepared if r.kind == "postgres"):
                commit_prepared(conn, r.resource)
                if i == 0:
                    crash_point("scaleout.mid_completion")
            behind = []
            for r in (r for r in prepared if r.kind == "kafka"):
                state = PreparedTxnState.parse(r.prepared_state)
                sink = self.kafka_sink(r.resource)
                why = end_txn(
                    sink._bootstrap_servers,
                    sink._producer_config,
                    r.resource,
                    int(state.producer_id),
                    int(state.producer_epoch),
                )
                if why is not None:
                    log.warning("%s: EndTxn of %s refused (%s)", dtid, r.resource, why)
                    behind.append(sink)
            if behind:
                awaiting = resolve_kafka_sinks(conn, behind, init=lambda s: s.init_transactions())
                for sink in behind:
                    with contextlib.suppress(LaminarError):
                        sink.close()
                if awaiting:
                    raise InDoubtError(
                        f"{dtid} is decided (committed in PostgreSQL) but Kafka participants "
                        f"{sorted(awaiting)} could not be committed (the broker no longer holds "
                        "their transactions); it stays in laminar.dt_state for `laminar "
                        "status`/`laminar resolve`",
                        epoch=epoch,
                    )
            conn.execute(_CONCLUDE, (dtid,))
            conn.commit()
        except psycopg.Error as e:
            raise map_pg_error(e, f"completing {dtid}", epoch=epoch) from e

    def _settle_pending(self, epoch: int) -> None:
        """Complete the decided distributed transactions of this group that are not concluded
        (a completion that failed, a decision whose answer was lost); `InDoubtError` while one
        remains — no later epoch is written before it is complete."""
        self.recover()
        conn = self.group._connect()
        try:
            left = conn.execute(
                sql.SQL("SELECT dtid FROM {t} WHERE dtid = ANY(%s)").format(t=table("dt_state")),
                (sorted(self.pending),),
            ).fetchall()
            self.group._refresh_postgres(conn)
        except psycopg.Error as e:
            raise map_pg_error(e, "reading distributed transactions", epoch=epoch) from e
        self.pending = {r[0] for r in left}
        if self.pending:
            raise InDoubtError(
                f"decided distributed transaction(s) {sorted(self.pending)} of group "
                f"{self.group.group_id!r} could not be completed yet; see `laminar status`",
                epoch=epoch,
            )

    def _roll_back(self, dtid: str, why: str) -> None:
        group = self.group
        try:
            conn = group._connect()
            with contextlib.suppress(psycopg.Error):
                conn.rollback()
            roll_back_distributed(conn, dtid, self.kafka_sink, why=why)
        except (psycopg.Error, LaminarError) as e:
            log.warning(
                "%s: rollback failed (%s); the watcher or the next start resolves it", dtid, e
            )

    def recover(self) -> None:
        """At start-up (after fencing the previous coordinator): resolve this group's distributed
        transactions and participants at once, by the Vitess rules."""
        from laminar.watcher import Watcher

        watcher = Watcher(
            self.group.dsn,
            group_id=self.group.group_id,
            kafka_sink=self.kafka_sink,
            sink_ids=[p.sink_id for p in self.group.postgres],
            resolve_after_s=0.0,
        )
        report = watcher.run_once()
        if report.unresolved:
            log.warning(
                "scale-out %s: %d item(s) unresolved at start-up: %s",
                self.group.group_id,
                len(report.unresolved),
                [i.id for i in report.unresolved],
            )

    def close(self) -> None:
        """Close the participant sinks built for recovery."""
        for sink in getattr(self.kafka_sink, "built", {}).values():
            with contextlib.suppress(LaminarError):
                sink.close()
