"""The driver of the distributed (scale-out) protocol's commands (docs/engine.md §3).

The scale-out coordinator (`laminar.protocol.atomic.AtomicGroup` with ``scale_out``), its tasks
(`laminar.protocol.scaleout.ScaleOutTask`), the resolution watcher (`laminar.protocol.watcher`)
and ``laminar resolve`` (`laminar.protocol.admin`) run machines of the core that share these
commands: the ``laminar.dt_state``/``dt_participant`` records (statements in
`laminar.engine.records`), PostgreSQL's prepared transactions and the Kafka participants.
`DistributedDriver` performs them and decides nothing: which state a record goes to, which gid
belongs to which record, which participant is rolled back or committed, is the core's
(its ``dt_next`` table, ``participant_matches``, the ``Resolution`` every machine above runs).

The participants' sinks are built here too: a Kafka sink ``<tid>`` writes partition ``p`` as
``<tid>.p<p>`` (its own producer and marker), a PostgreSQL sink as ``two_phase_part=p``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import psycopg

from laminar._core import Command, Event, participant_base
from laminar.engine import records as _records
from laminar.kafka.sink import KafkaSink
from laminar.postgres._steps import (
    claim_epoch,
    commit_prepared,
    list_prepared,
    record_epoch_totals,
    rollback_prepared,
)
from laminar.postgres.sink import PostgresSink
from laminar.protocol.driver import KafkaDriver

__all__ = [
    "DistributedDriver",
    "KafkaSinkLookup",
    "kafka_participant",
    "participant_factory",
    "postgres_participant",
]

#: ``transactional_id -> KafkaSink`` (None: no configuration for it).
KafkaSinkLookup = Callable[[str], Any]


def _clone(sink: Any) -> Any:
    copy = object.__new__(type(sink))
    copy.__setstate__(sink.__getstate__())
    return copy


def postgres_participant(base: PostgresSink, part: int) -> PostgresSink:
    """``base`` as scale-out participant ``part`` (same table and sink id, ``two_phase_part``)."""
    return base.partition(part)


#: librdkafka settings of a participant's short-lived clients, unless the sink's own
#: ``producer_config`` says otherwise: a participant opens a new producer (and marker reader) per
#: task attempt, so what a long-lived producer amortizes is paid per task — with librdkafka's
#: defaults about 50 ms waiting to connect to the broker the bootstrap metadata names (it holds a
#: new connection back for half of ``reconnect.backoff.ms``, 100 ms by default) and up to one
#: ``statistics.interval.ms`` (100 ms) for the report that carries the producer id and epoch the
#: prepared state records (docs/benchmarks.md, "format('laminar') at streaming cadence").
PARTICIPANT_CLIENT_DEFAULTS = {"reconnect.backoff.ms": 20, "statistics.interval.ms": 20}


def kafka_participant(base: KafkaSink, part: int) -> KafkaSink:
    """``base`` as scale-out participant ``part``: transactional id ``<tid>.p<part>``, with its
    own epoch marker (consumer group ``laminar.<tid>.p<part>``) and the client settings of
    `PARTICIPANT_CLIENT_DEFAULTS` where ``base``'s configuration has none."""
    return base.as_participant(part, PARTICIPANT_CLIENT_DEFAULTS)


def participant_factory(
    kafka: Sequence[KafkaSink], fallback: KafkaSinkLookup | None = None
) -> KafkaSinkLookup:
    """A ``transactional_id → KafkaSink`` lookup that also builds the participants
    ``<tid>.p<n>`` of the given sinks (cached in ``lookup.built``; the watcher and recovery
    read their markers). ``fallback`` builds a sink the list does not hold."""
    by_id = {k.sink_id: k for k in kafka}
    built: dict[str, Any] = {}

    def lookup(tid: str) -> Any:
        if tid in by_id:
            return by_id[tid]
        if tid in built:
            return built[tid]
        parsed = participant_base(tid)
        base: Any = None
        if parsed is not None:
            base = by_id.get(parsed[0])
            if base is None and fallback is not None:
                base = fallback(parsed[0])
        if base is None:
            return fallback(tid) if fallback is not None else None
        assert parsed is not None
        built[tid] = kafka_participant(base, parsed[1])
        return built[tid]

    lookup.built = built  # type: ignore[attr-defined]
    return lookup


class DistributedDriver(KafkaDriver):
    """`KafkaDriver` plus the commands of the distributed protocol (module docstring).

    ``kafka_sink`` finds a Kafka sink or participant by transactional id (``kafka:`` prefixed
    participant names included). A statement outside a transaction is committed at once; inside
    one (the coordinator's decision, after ``lock_group``; a task's claim, after ``read_dt_state``
    ``for_share``; a task's record creation, after ``read_stop_fence``) it is left to the command
    that ends it.
    """

    def __init__(
        self,
        kafka: Mapping[str, Any],
        connect: Callable[[], psycopg.Connection[Any]],
        log: logging.Logger,
        *,
        kafka_sink: KafkaSinkLookup | None = None,
        init: Callable[[Any], None] | None = None,
    ) -> None:
        super().__init__(kafka, connect, log, init=init)
        self._lookup = kafka_sink

    def kafka_sink(self, sink_id: str) -> Any:
        """The sink (or participant) a command names, or None."""
        tid = sink_id.removeprefix("kafka:")
        if self._lookup is not None:
            return self._lookup(tid)
        return super().kafka_sink(tid)

    def _records(self, c: Command) -> Event:
        handler = _DT_COMMANDS.get(c.kind)
        if handler is None:
            return super()._records(c)
        conn = self.connect()
        idle = conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        event = handler(self, conn, c)
        if idle and not c.for_share and c.kind not in _LEFT_OPEN:
            conn.commit()
        return event

    def _create_dt(self, conn: psycopg.Connection[Any], c: Command) -> Event:
        assert c.dtid is not None
        assert c.group_id is not None
        assert c.epoch is not None
        return Event.applied(_records.create_dt(conn, c.dtid, c.group_id, c.epoch))

    def _read_stop_fence(self, conn: psycopg.Connection[Any], c: Command) -> Event:
        assert c.group_id is not None
        epoch, writer = _records.read_stop_fence(conn, c.group_id)
        return Event.stop_fence(epoch, writer)

    def _set_dt_state(self, conn: psycopg.Connection[Any], c: Command) -> Event:
        assert c.dtid is not None
        assert c.from_state is not None
        assert c.to_state is not None
        applied = _records.set_dt_state(conn, c.dtid, c.from_state, c.to_state, c.message or "")
        return Event.applied(applied)

    def _read_dt_state(self, conn: psycopg.Connection[Any], c: Command) -> Event:
        assert c.dtid is not None
        state = _records.read_dt_state(conn, c.dtid, for_share=bool(c.for_share))
        return Event.dt_state(state)  # type: ignore[arg-type]

    def _conclude_dt(self, conn: psycopg.Connection[Any], c: Command) -> Event:
        assert c.dtid is not None
        return Event.applied(_records.conclude_dt(conn, c.dtid, c.from_state))

    def _read_dt_states(self, conn: psycopg.Connection[Any], c: Command) -> Event:
        return Event.dt_rows(_records.read_dt_states(conn, c.group_id))  # type: ignore[arg-type]

    def _read_participants(self, conn: psycopg.Connection[Any], c: Command) -> Event:
        assert c.dtid is not None
        return Event.participants(_records.read_participants(conn, c.dtid))  # type: ignore[arg-type]

    def _read_participant_decisions(self, conn: psycopg.Connection[Any], c: Command) -> Event:
        rows = _records.read_participant_decisions(conn)
        return Event.participant_decisions(rows)  # type: ignore[arg-type]

    def _mark_participants(self, conn: psycopg.Connection[Any], c: Command) -> Event:
        assert c.dtid is not None
        assert c.state is not None
        _records.mark_participants(conn, c.dtid, c.names or [], c.state)
        return Event.ack()

    def _claim_epoch(self, conn: psycopg.Connection[Any], c: Command) -> Event:
        assert c.sink_id is not None
        assert c.epoch is not None
        claimed = claim_epoch(conn, c.sink_id, c.epoch)
        if claimed:
            record_epoch_totals(conn, c.sink_id, int(c.row_count or 0), 0)
        return Event.claimed(claimed)

    def _list_prepared(self, conn: psycopg.Connection[Any], c: Command) -> Event:
        return Event.prepared_list(
            [(p.gid, p.sink_id, p.epoch, p.age_s) for p in list_prepared(conn)]
        )

    def _commit_prepared(self, conn: psycopg.Connection[Any], c: Command) -> Event:
        assert c.gid is not None
        return Event.found(commit_prepared(conn, c.gid))

    def _rollback_prepared(self, conn: psycopg.Connection[Any], c: Command) -> Event:
        assert c.gid is not None
        return Event.found(rollback_prepared(conn, c.gid))

    def _rewrite_decision(self, conn: psycopg.Connection[Any], c: Command) -> Event:
        assert c.transactional_id is not None
        assert c.epoch is not None
        assert c.prepared_state is not None
        _records.rewrite_decision(
            conn, c.transactional_id, c.epoch, c.previous_epoch, c.prepared_state
        )
        return Event.ack()

    def _fence_producer(self, conn: psycopg.Connection[Any], c: Command) -> Event:
        assert c.transactional_id is not None
        sink = self.kafka_sink(c.transactional_id)
        if sink is None:
            return Event.missing()
        sink.init_transactions()  # a fresh producer aborts what the participant left open
        sink.close()
        return Event.ack()


_Handler = Callable[[DistributedDriver, psycopg.Connection[Any], Command], Event]

_DT_COMMANDS: dict[str, _Handler] = {
    "read_stop_fence": DistributedDriver._read_stop_fence,
    "create_dt": DistributedDriver._create_dt,
    "set_dt_state": DistributedDriver._set_dt_state,
    "read_dt_state": DistributedDriver._read_dt_state,
    "conclude_dt": DistributedDriver._conclude_dt,
    "read_dt_states": DistributedDriver._read_dt_states,
    "read_participants": DistributedDriver._read_participants,
    "read_participant_decisions": DistributedDriver._read_participant_decisions,
    "mark_participants": DistributedDriver._mark_participants,
    "claim_epoch": DistributedDriver._claim_epoch,
    "list_prepared": DistributedDriver._list_prepared,
    "commit_prepared": DistributedDriver._commit_prepared,
    "rollback_prepared": DistributedDriver._rollback_prepared,
    "fence_producer": DistributedDriver._fence_producer,
    "rewrite_decision": DistributedDriver._rewrite_decision,
}

#: Commands that run outside any transaction themselves (nothing to commit after them).
_OUTSIDE_TRANSACTIONS = frozenset({"commit_prepared", "rollback_prepared", "fence_producer"})

#: Commands whose transaction is left open after them: those that run outside any transaction
#: themselves, and the fence read (its lock covers the record's creation, ended by a ``commit``).
_LEFT_OPEN = _OUTSIDE_TRANSACTIONS | {"read_stop_fence"}
