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

import contextlib
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias

import psycopg
from typing_extensions import assert_never

from laminar._core import Command, Event, participant_base
from laminar.engine import records as _records
from laminar.errors import LaminarError
from laminar.kafka.sink import KafkaSink
from laminar.postgres._steps import (
    claim_epoch,
    commit_prepared,
    list_prepared,
    record_epoch_totals,
    rollback_prepared,
)
from laminar.postgres.sink import PostgresSink
from laminar.protocol.driver import KafkaDriver, KafkaDriverCommand, pg_mapped

if TYPE_CHECKING:
    from laminar._core import _DistributedCommand, _DistributedRecordCommand

#: What `DistributedDriver` performs: `KafkaDriverCommand` and the distributed protocol's
#: (every command of `WatcherPassMachine` and `ResolveMachine`).
DistributedDriverCommand: TypeAlias = "KafkaDriverCommand | _DistributedCommand"

__all__ = [
    "DistributedDriver",
    "DistributedDriverCommand",
    "KafkaSinkLookup",
    "ParticipantLookup",
    "kafka_participant",
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
#: ``producer_config`` says otherwise: a participant opens a new producer per task attempt, so
#: what a long-lived producer amortizes is paid per task — with the sink's default up to one
#: ``statistics.interval.ms`` (100 ms) for the report that carries the producer id and epoch the
#: prepared state records (docs/benchmarks.md, "format('laminar') at streaming cadence"). The
#: connection back-off every sink's clients take is the core's rule (docs/kafka.md, "Budgets").
PARTICIPANT_CLIENT_DEFAULTS = {"statistics.interval.ms": 20}


def kafka_participant(base: KafkaSink, part: int) -> KafkaSink:
    """``base`` as scale-out participant ``part``: transactional id ``<tid>.p<part>``, with its
    own epoch marker (consumer group ``laminar.<tid>.p<part>``) and the client settings of
    `PARTICIPANT_CLIENT_DEFAULTS` where ``base``'s configuration has none."""
    return base.as_participant(part, PARTICIPANT_CLIENT_DEFAULTS)


class ParticipantLookup:
    """A ``transactional_id → KafkaSink`` lookup (`KafkaSinkLookup`) that also builds the
    participants ``<tid>.p<n>`` of the given sinks, once each (the watcher and recovery read
    their markers and end their transactions). It owns what it built: `close` closes them — a
    sink left unclosed keeps its clients reconnecting for the life of the process, since a
    librdkafka client and the callbacks it holds are a cycle the garbage collector cannot see
    through. ``fallback`` builds a sink the list does not hold (its owner closes it)."""

    def __init__(self, kafka: Sequence[KafkaSink], fallback: KafkaSinkLookup | None = None) -> None:
        self._by_id = {k.sink_id: k for k in kafka}
        self._fallback = fallback
        self._built: dict[str, KafkaSink] = {}

    def __call__(self, tid: str) -> Any:
        if tid in self._by_id:
            return self._by_id[tid]
        if tid in self._built:
            return self._built[tid]
        parsed = participant_base(tid)
        base: Any = None
        if parsed is not None:
            base = self._by_id.get(parsed[0])
            if base is None and self._fallback is not None:
                base = self._fallback(parsed[0])
        if base is None:
            return self._fallback(tid) if self._fallback is not None else None
        assert parsed is not None
        built = self._built[tid] = kafka_participant(base, parsed[1])
        return built

    def close(self) -> None:
        """Close every participant built (a failing close is not an error of the caller's);
        the next lookup builds it again."""
        built, self._built = self._built, {}
        for sink in built.values():
            with contextlib.suppress(LaminarError):
                sink.close()


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

    @pg_mapped
    def perform(self, c: DistributedDriverCommand) -> Event:
        """Perform ``c``: the distributed protocol's records here, the rest in `KafkaDriver`."""
        match c:
            case Command.CommitPrepared(gid):
                # outside any transaction (PostgreSQL's own)
                return Event.found(commit_prepared(self.connect(), gid))
            case Command.RollbackPrepared(gid):
                return Event.found(rollback_prepared(self.connect(), gid))
            case Command.FenceProducer(transactional_id):
                sink = self.kafka_sink(transactional_id)
                if sink is None:
                    return Event.missing()
                sink.init_transactions()  # a fresh producer aborts what the participant left open
                sink.close()
                return Event.ack()
            case Command.ReadStopFence(group_id):
                # its lock covers the record's creation: the ``commit`` that follows ends it
                return Event.stop_fence(*_records.read_stop_fence(self.connect(), group_id))
            case Command.ReadDtState(dtid, for_share) if for_share:
                # the task's claim: its transaction is ended by the claim's commit
                state = _records.read_dt_state(self.connect(), dtid, for_share=True)
                return Event.dt_state(state)  # type: ignore[arg-type]
            case (
                Command.CreateDt()
                | Command.SetDtState()
                | Command.ReadDtState()
                | Command.ConcludeDt()
                | Command.ReadDtStates()
                | Command.ReadParticipants()
                | Command.ReadParticipantDecisions()
                | Command.MarkParticipants()
                | Command.ClaimEpoch()
                | Command.ListPrepared()
                | Command.RewriteDecision()
            ):
                conn = self.connect()
                idle = conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
                event = self._record(conn, c)
                if idle:
                    conn.commit()  # a statement on its own; inside a transaction: left to it
                return event
            case _:
                return super().perform(c)

    def _record(self, conn: psycopg.Connection[Any], c: _DistributedRecordCommand) -> Event:
        """A statement on the distributed protocol's records (or ``pg_prepared_xacts``)."""
        match c:
            case Command.CreateDt(dtid, group_id, epoch):
                return Event.applied(_records.create_dt(conn, dtid, group_id, epoch))
            case Command.SetDtState(dtid, from_state, to_state, message):
                return Event.applied(
                    _records.set_dt_state(conn, dtid, from_state, to_state, message)
                )
            case Command.ReadDtState(dtid):
                state = _records.read_dt_state(conn, dtid, for_share=False)
                return Event.dt_state(state)  # type: ignore[arg-type]
            case Command.ConcludeDt(dtid, from_state):
                return Event.applied(_records.conclude_dt(conn, dtid, from_state))
            case Command.ReadDtStates(group_id):
                return Event.dt_rows(_records.read_dt_states(conn, group_id))  # type: ignore[arg-type]
            case Command.ReadParticipants(dtid):
                return Event.participants(_records.read_participants(conn, dtid))  # type: ignore[arg-type]
            case Command.ReadParticipantDecisions():
                rows = _records.read_participant_decisions(conn)
                return Event.participant_decisions(rows)  # type: ignore[arg-type]
            case Command.MarkParticipants(dtid, names, state):
                _records.mark_participants(conn, dtid, names, state)
                return Event.ack()
            case Command.ClaimEpoch(sink_id, epoch, row_count):
                claimed = claim_epoch(conn, sink_id, epoch)
                if claimed:
                    record_epoch_totals(conn, sink_id, row_count, 0)
                return Event.claimed(claimed)
            case Command.ListPrepared():
                return Event.prepared_list(
                    [(p.gid, p.sink_id, p.epoch, p.age_s) for p in list_prepared(conn)]
                )
            case Command.RewriteDecision(transactional_id, epoch, previous_epoch, prepared_state):
                _records.rewrite_decision(
                    conn, transactional_id, epoch, previous_epoch, prepared_state
                )
                return Event.ack()
            case _:
                assert_never(c)
