"""The atomic group: Kafka and PostgreSQL sinks written together, one decision per epoch
(docs/protocol.md §3, the KIP-939 dual-write recipe with PostgreSQL as the decision log).

Per epoch ``e`` (each step is a crash point ``atomic.stepN``, reached after the step)::

    1  BEGIN on the decision database; lock the group's row and check its generation (§6)
    2  begin the Kafka transaction of every Kafka sink that needs e
    3  produce the records (headers laminar.sink / laminar.epoch) — kept for the redo log
    4  prepare Kafka: epoch marker + flush; each sink's PreparedTxnState (producer id/epoch)
    5  COPY the rows of every Postgres sink (same transaction); redo rows if redo="log"
    6  upsert laminar.txn_state(transactional_id → e, previous marker, prepared state)
    7  COMMIT = the decision
    8  commit Kafka (its marker commits with it)

Start-up: register the group, check the owner (§5), bump the generation (fences a previous
coordinator), then `laminar.recovery.settle_kafka_sinks` (EndTxn → init_transactions → redo log
or wait for the replay). A Kafka commit that fails after the decision runs the same recovery in
process; if only Spark's replay can complete the epoch, the call raises so that Spark retries it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import time
from collections.abc import Sequence
from typing import Any

import psycopg
import pyarrow as pa  # type: ignore[import-untyped]
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from laminar._core import check_generation, encode_redo, plan_epoch
from laminar._faults import crash_point
from laminar._input import materialize
from laminar._redact import redact_config, redact_dsn
from laminar._types import ArrowData
from laminar.errors import (
    AbortableError,
    ConfigError,
    FencedError,
    InDoubtError,
    LaminarError,
)
from laminar.metadata import register_sink, table
from laminar.recovery import refusal_error, settle_kafka_sinks
from laminar.sinks._pg_errors import map_pg_error
from laminar.sinks.kafka import KafkaSink
from laminar.sinks.postgres import PostgresSink

__all__ = ["AtomicGroup", "claim_ownership", "default_group_id", "same_database"]

log = logging.getLogger("laminar.atomic")

#: ``laminar.sinks.kind`` of an atomic group's row.
GROUP_KIND = "atomic_group"


def default_group_id(sink_ids: Sequence[str]) -> str:
    """A stable id for the group of these sinks: their ids sorted and joined with ``+`` (hashed
    past 200 characters)."""
    joined = "+".join(sorted(sink_ids))
    if len(joined) <= 200:
        return joined
    digest = hashlib.sha256(joined.encode()).hexdigest()[:16]
    return f"{joined[:180]}~{digest}"


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


def claim_ownership(
    conn: psycopg.Connection[Any],
    registry_id: str,
    member_ids: Sequence[str],
    owner: str | None,
    on_new_query: str,
    last_committed: dict[str, int | None],
) -> int:
    """The checkpoint-reset guard (docs/protocol.md §5) in the current transaction; returns the
    epoch base (Spark batch id + base = the epoch written).

    The registry row (a group, or a lone Postgres sink) records which query owns the sinks. A
    different owner is a `ConfigError` naming both — unless ``on_new_query="restart"``, which
    makes the new query the owner and moves the epoch base past every committed epoch, so the
    new query's batch 0 is written instead of being taken for a replay.
    """
    row = conn.execute(
        sql.SQL("SELECT owner, epoch_base FROM {t} WHERE sink_id = %s FOR UPDATE").format(
            t=table("sinks")
        ),
        (registry_id,),
    ).fetchone()
    if row is None:
        raise ConfigError(f"{registry_id!r} is not registered in laminar.sinks")
    current, base = row[0], int(row[1])
    members = conn.execute(
        sql.SQL(
            "SELECT sink_id, owner FROM {t} WHERE sink_id = ANY(%s) AND owner IS NOT NULL"
        ).format(t=table("sinks")),
        (list(member_ids),),
    ).fetchall()
    foreign = {sink: o for sink, o in members if owner is not None and o != owner}
    if owner is None:
        return base
    if (current is not None and current != owner) or foreign:
        previous = (
            current if current is not None and current != owner else next(iter(foreign.values()))
        )
        if on_new_query != "restart":
            raise ConfigError(
                f"sinks {sorted(member_ids)} are owned by query {previous!r}, not by {owner!r}: "
                "their committed epochs belong to that query (a query restarted from a new "
                "checkpoint starts again at batch 0, and every batch would be taken for a replay "
                "and skipped). To make this query the owner and start over, run `laminar reset "
                f'{registry_id}` or pass exactly_once(..., on_new_query="restart"); to continue '
                "the old query, restart it from its own checkpoint"
            )
        top = max((e for e in last_committed.values() if e is not None), default=-1)
        base = max(base, top + 1)
        log.warning(
            "sinks %s: query %r replaces query %r (on_new_query='restart'); epochs now start at %d",
            sorted(member_ids),
            owner,
            previous,
            base,
        )
    elif current == owner:
        return base
    conn.execute(
        sql.SQL(
            "UPDATE {t} SET owner = %s, owner_since = now(), epoch_base = %s, updated_at = now()"
            " WHERE sink_id = ANY(%s)"
        ).format(t=table("sinks")),
        (owner, base, [registry_id, *member_ids]),
    )
    return base


# Shared with laminar.scaleout: the group's lock and the decision row are the same there.
LOCK_GROUP = sql.SQL(
    "UPDATE {t} SET last_commit_ms = coalesce(%s, last_commit_ms) WHERE sink_id = %s"
    " RETURNING generation"
).format(t=table("sinks"))
UPSERT_DECISION = sql.SQL(
    "INSERT INTO {t} AS s (transactional_id, epoch, previous_epoch, prepared_state, group_id,"
    " decided_at) VALUES (%s, %s, %s, %s, %s, now())"
    " ON CONFLICT (transactional_id) DO UPDATE SET epoch = EXCLUDED.epoch,"
    " previous_epoch = EXCLUDED.previous_epoch, prepared_state = EXCLUDED.prepared_state,"
    " group_id = EXCLUDED.group_id, decided_at = EXCLUDED.decided_at"
).format(t=table("txn_state"))
_INSERT_REDO = sql.SQL(
    "INSERT INTO {t} (transactional_id, epoch, seq, records) VALUES (%s, %s, %s, %s)"
).format(t=table("redo"))
_DROP_OLD_REDO = sql.SQL("DELETE FROM {t} WHERE transactional_id = %s AND epoch < %s").format(
    t=table("redo")
)
_READ_EPOCHS = sql.SQL("SELECT sink_id, epoch FROM {t} WHERE sink_id = ANY(%s)").format(
    t=table("sink_epochs")
)


class AtomicGroup:
    """The live side of an atomic writer in the process that writes (never pickled)."""

    def __init__(
        self,
        group_id: str,
        kafka: Sequence[KafkaSink],
        postgres: Sequence[PostgresSink],
        *,
        owner: str | None,
        on_new_query: str,
        redo: str,
    ) -> None:
        self.group_id = group_id
        self.kafka = list(kafka)
        self.postgres = list(postgres)
        self.sinks: list[Any] = [*self.postgres, *self.kafka]
        self.owner = owner
        self.on_new_query = on_new_query
        self.redo = redo
        self.dsn = self.postgres[0].resolved_dsn
        self.conn: psycopg.Connection[Any] | None = None
        self.generation = 0
        self.epoch_base = 0
        self.awaiting: dict[str, int] = {}
        self.last: dict[str, int | None] = {}
        self.last_commit_ms: float | None = None
        self.started = False

    # -- start-up -------------------------------------------------------------------------------

    def _connect(self) -> psycopg.Connection[Any]:
        conn = self.conn
        if conn is not None and not conn.closed and not conn.broken:
            return conn
        try:
            conn = psycopg.connect(self.dsn, application_name=f"laminar group {self.group_id}"[:63])
        except psycopg.Error as e:
            raise map_pg_error(
                e, f"connecting to the decision database ({redact_dsn(self.dsn)})"
            ) from e
        self.conn = conn
        return conn

    def start(self) -> None:
        """Register, check the owner, fence the previous coordinator, recover (module doc)."""
        self.started = False
        for pg in self.postgres:
            pg.init_transactions()
        conn = self._connect()
        try:
            with conn.transaction():
                register_sink(
                    conn,
                    self.group_id,
                    GROUP_KIND,
                    {"sinks": [s.sink_id for s in self.sinks], "redo": self.redo},
                )
                for k in self.kafka:
                    register_sink(conn, k.sink_id, k.kind, _kafka_registry_config(k))
            self._refresh_postgres(conn)
            for k in self.kafka:
                self.last[k.sink_id] = k.last_committed_epoch()
            with conn.transaction():
                self.epoch_base = claim_ownership(
                    conn,
                    self.group_id,
                    [s.sink_id for s in self.sinks],
                    self.owner,
                    self.on_new_query,
                    dict(self.last),
                )
            # §6: waits for an in-flight decision of the previous coordinator, then fences it
            with conn.transaction():
                row = conn.execute(
                    sql.SQL(
                        "UPDATE {t} SET generation = generation + 1, updated_at = now()"
                        " WHERE sink_id = %s RETURNING generation"
                    ).format(t=table("sinks")),
                    (self.group_id,),
                ).fetchone()
            assert row is not None
            self.generation = int(row[0])
            crash_point("atomic.after_fence")
            self.awaiting = settle_kafka_sinks(conn, self.kafka, init=_init_kafka)
        except psycopg.Error as e:
            raise map_pg_error(e, f"starting atomic group {self.group_id!r}") from e
        for k in self.kafka:
            self.last[k.sink_id] = k.tracker.last_committed_epoch
        self.started = True
        log.info(
            "atomic group %s: generation %d, epoch base %d, sinks %s%s",
            self.group_id,
            self.generation,
            self.epoch_base,
            [s.sink_id for s in self.sinks],
            f", awaiting Spark's replay of {self.awaiting}" if self.awaiting else "",
        )

    def _refresh_postgres(self, conn: psycopg.Connection[Any]) -> None:
        ids = [p.sink_id for p in self.postgres]
        found = dict(conn.execute(_READ_EPOCHS, (ids,)).fetchall())
        conn.commit()
        for sink_id in ids:
            value = found.get(sink_id)
            self.last[sink_id] = None if value is None else int(value)

    # -- one epoch ------------------------------------------------------------------------------

    def write_epoch(self, epoch: int, batch: ArrowData) -> bool:
        """Write ``epoch`` atomically to every sink that needs it; False if all had it. A
        stream is read once, here, so that every sink writes the same rows."""
        batch = materialize(batch)
        if not self.started:
            self.start()
        progress = [(s.sink_id, self.last.get(s.sink_id)) for s in self.sinks]
        plan = plan_epoch(
            epoch,
            progress,
            list(self.awaiting.items()),
            refuse_backwards=self.owner is not None,
        )
        if plan.action == "refuse":
            raise refusal_error(plan.refusal, plan.message, epoch=epoch)
        if plan.action == "skip":
            log.info("atomic group %s: epoch %d already committed, skipped", self.group_id, epoch)
            return False
        needs = dict(zip((s.sink_id for s in self.sinks), plan.sinks, strict=True))
        postgres = [p for p in self.postgres if needs[p.sink_id]]
        kafka = [k for k in self.kafka if needs[k.sink_id]]
        try:
            self._write(epoch, batch, postgres, kafka)
        except BaseException:
            self.last.clear()
            self.started = self.started and self.conn is not None and not self.conn.broken
            if self.started:
                with contextlib.suppress(LaminarError, psycopg.Error):
                    self._refresh_postgres(self._connect())
                    for k in self.kafka:
                        self.last[k.sink_id] = k.tracker.last_committed_epoch
            raise
        return True

    def _write(
        self,
        epoch: int,
        batch: pa.Table | pa.RecordBatch,
        postgres: list[PostgresSink],
        kafka: list[KafkaSink],
    ) -> None:
        started = time.perf_counter()
        conn = self._connect()
        opened: list[KafkaSink] = []
        decided = False
        try:
            # 1. the decision transaction; the group's row lock and fencing token
            row = conn.execute(LOCK_GROUP, (self.last_commit_ms, self.group_id)).fetchone()
            stored = -1 if row is None else int(row[0])
            fenced = check_generation(self.group_id, self.generation, stored)
            if fenced is not None:
                raise FencedError(fenced, epoch=epoch)
            # every Postgres sink's table: locked until the decision, its definition checked
            # (read again if it changed) and the COPY planned — an incompatible change is a
            # ConfigError here, before any byte is sent to Kafka or PostgreSQL
            for p in postgres:
                p.check_in_transaction(conn, batch.schema)
            crash_point("atomic.step1")
            # 2. Kafka transactions
            for k in kafka:
                if not k.begin_transaction(epoch):
                    raise FencedError(
                        f"Kafka sink {k.sink_id!r} already holds epoch {epoch}: another writer "
                        "uses its transactional id",
                        sink_id=k.sink_id,
                        epoch=epoch,
                    )
                opened.append(k)
            crash_point("atomic.step2")
            # 3. records (kept for the redo log)
            kept: dict[str, list[Any]] = {}
            for k in kafka:
                records: list[Any] = []
                k.write(batch, records_out=records if self.redo == "log" else None)
                kept[k.sink_id] = records
            crash_point("atomic.step3")
            # 4. prepare: marker + flush
            prepared = {k.sink_id: k.prepare_transaction() for k in kafka}
            crash_point("atomic.step4")
            # 5. rows (+ redo)
            for p in postgres:
                if p.write_in_transaction(conn, epoch, batch, checked=True) is None:
                    raise FencedError(
                        f"PostgreSQL sink {p.sink_id!r} already holds epoch {epoch}: another "
                        "writer uses its sink id outside this group",
                        sink_id=p.sink_id,
                        epoch=epoch,
                    )
            for k in kafka:
                conn.execute(_DROP_OLD_REDO, (k.sink_id, epoch))
                if self.redo == "log":
                    self._write_redo(conn, k.sink_id, epoch, kept[k.sink_id])
            crash_point("atomic.step5")
            # 6. the decision rows
            for k in kafka:
                conn.execute(
                    UPSERT_DECISION,
                    (
                        k.sink_id,
                        epoch,
                        self.last.get(k.sink_id),
                        str(prepared[k.sink_id]),
                        self.group_id,
                    ),
                )
            crash_point("atomic.step6")
            # 7. the decision
            try:
                conn.commit()
            except psycopg.Error as e:
                if conn.broken or conn.closed:
                    decided = self._decided_after_lost_commit(epoch, kafka, postgres)
                    if not decided:
                        raise AbortableError(
                            f"the connection was lost during the decision of epoch {epoch}; it "
                            "did not commit: the epoch is written again",
                            epoch=epoch,
                        ) from e
                else:
                    raise
            decided = True
            crash_point("atomic.step7")
        except psycopg.Error as e:
            self._abort(conn, opened, epoch)
            raise map_pg_error(
                e, f"deciding epoch {epoch} of group {self.group_id!r}", epoch=epoch
            ) from e
        except BaseException:
            if not decided:
                self._abort(conn, opened, epoch)
            raise
        for p in postgres:
            self.last[p.sink_id] = epoch
        # 8. Kafka commits; a failure is completed from the decision
        incomplete: list[KafkaSink] = []
        for k in kafka:
            try:
                k.commit_transaction(epoch)
                self.last[k.sink_id] = epoch
            except LaminarError as err:
                log.warning(
                    "atomic group %s: Kafka commit of decided epoch %d failed for sink %s (%s); "
                    "completing it from the decision",
                    self.group_id,
                    epoch,
                    k.sink_id,
                    err,
                )
                incomplete.append(k)
        crash_point("atomic.step8")
        for sink_id, awaited in list(self.awaiting.items()):
            last = self.last.get(sink_id)
            if last is not None and last >= awaited:
                log.warning(
                    "atomic group %s: Spark's replay completed epoch %d in Kafka sink %s",
                    self.group_id,
                    awaited,
                    sink_id,
                )
                del self.awaiting[sink_id]
        if incomplete:
            self._complete_in_process(epoch, incomplete)
        self.last_commit_ms = (time.perf_counter() - started) * 1000

    def _write_redo(
        self, conn: psycopg.Connection[Any], sink_id: str, epoch: int, kept: list[Any]
    ) -> None:
        values: list[bytes | None] = []
        keys: list[bytes | None] = []
        for records in kept:
            values.extend(records.values)
            keys.extend(records.keys if records.keys is not None else [None] * records.num_rows)
        blobs = encode_redo(values, keys)
        with conn.cursor() as cur:
            cur.executemany(
                _INSERT_REDO, [(sink_id, epoch, seq, blob) for seq, blob in enumerate(blobs)]
            )

    def _abort(self, conn: psycopg.Connection[Any], opened: list[KafkaSink], epoch: int) -> None:
        with contextlib.suppress(psycopg.Error):
            if not conn.closed and not conn.broken:
                conn.rollback()
        for k in opened:
            if k.transaction_state.name in ("Active", "Prepared"):
                try:
                    k.abort_transaction(epoch)
                except LaminarError as err:
                    log.warning("sink %s: abort of epoch %d failed: %s", k.sink_id, epoch, err)

    def _decided_after_lost_commit(
        self, epoch: int, kafka: list[KafkaSink], postgres: list[PostgresSink]
    ) -> bool:
        """After a COMMIT whose answer was lost: read the decision back (a new connection)."""
        self.conn = None
        conn = self._connect()
        if kafka:
            row = conn.execute(
                sql.SQL("SELECT epoch FROM {t} WHERE transactional_id = %s").format(
                    t=table("txn_state")
                ),
                (kafka[0].sink_id,),
            ).fetchone()
        else:
            row = conn.execute(
                sql.SQL("SELECT epoch FROM {t} WHERE sink_id = %s").format(t=table("sink_epochs")),
                (postgres[0].sink_id,),
            ).fetchone()
        conn.commit()
        return row is not None and int(row[0]) >= epoch

    def _complete_in_process(self, epoch: int, sinks: list[KafkaSink]) -> None:
        conn = self._connect()
        try:
            awaiting = settle_kafka_sinks(conn, sinks, init=_init_kafka)
        except psycopg.Error as e:
            raise map_pg_error(e, f"completing epoch {epoch} in Kafka", epoch=epoch) from e
        self.awaiting.update(awaiting)
        for k in sinks:
            self.last[k.sink_id] = k.tracker.last_committed_epoch
        if awaiting:
            raise InDoubtError(
                f"epoch {epoch} is decided (committed in PostgreSQL) but Kafka sinks "
                f"{sorted(awaiting)} could not commit it and the broker no longer holds the "
                "transaction: Spark's retry of this batch completes it",
                epoch=epoch,
            )

    def close(self) -> None:
        """Close the decision connection and every sink."""
        for s in self.sinks:
            with contextlib.suppress(LaminarError):
                s.close()
        conn, self.conn = self.conn, None
        if conn is not None:
            with contextlib.suppress(psycopg.Error):
                conn.close()
        self.started = False


def _init_kafka(sink: KafkaSink) -> None:
    sink.init_transactions()


def _kafka_registry_config(sink: KafkaSink) -> dict[str, Any]:
    """What `laminar status`/`recover` need to reach the sink again: no secrets (masked)."""
    return {
        "bootstrap_servers": sink._bootstrap_servers,
        "topic": sink.topic,
        "key": sink.key,
        "value_format": sink.value_format,
        "producer_config": json.loads(json.dumps(redact_config(sink.producer_config), default=str)),
    }
