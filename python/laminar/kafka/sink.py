"""``KafkaSink``: one Kafka transaction per epoch, exactly once across restarts (protocol.md §1).

Per epoch::

    begin_transaction(e)   skip if e <= last committed epoch; producer.begin_transaction()
    write(batch)           encode in Rust; produce every record with the headers
                           laminar.sink=<transactional_id> and laminar.epoch=<e>
    prepare_transaction()  send_offsets_to_transaction({(topic, 0): e}, group laminar.<id>)
                           (the epoch marker, atomic with the records); flush: every record
                           acknowledged; the PreparedTxnState (with librdkafka's producer id/epoch)
    commit_transaction(e)  producer.commit_transaction()

A sink is picklable configuration: the producer (and the consumer that reads the marker group) open
lazily in the process that writes; ``init_transactions`` there fences any previous instance with the
same transactional id and reads the last committed epoch back by docs/protocol.md §1's rule: the
marker group; without it, the sink's identity group and the producer epoch say whether the sink
has history, and only then does the bounded witness read the ``laminar.epoch`` headers of the
committed records at the tail of each partition (with `laminar.kafka.log`, which does not trust
the broker's ``read_committed``, over plaintext, TLS and SASL alike).

Errors follow KIP-691 through one classification (`laminar.kafka._errors.classify`, worded by
`map_kafka_error`): a commit whose outcome is unknown is an `InDoubtError` (state Failed), which
`recover()` resolves from the marker — re-initialising the producer first when needed, so that
the broker completes or aborts the pending transaction before the marker is read.

The core's `SinkTransaction` (`TransactionalSink._machine`, with ``durable_prepare=False``: a
prepared Kafka transaction dies with its producer) decides each step of the lifecycle
(docs/engine.md, "The sink's transaction": skip a replay, which commit, what a failed commit or
abort means, what close and a new producer's init settle); this module performs its answers. The
class holds the lifecycle and its parts, each in its own module (docs/engine.md, "Package
layout"): `_base` (the settings, the public properties, the error wording), `_clients.Clients`
(producer and consumer, bounded and retried calls, an in-doubt commit resolved with them),
`_produce.Producing` (producing, markers, flush), `_witness.Witness` (which evidence proves the
last committed epoch; the identity) and `_runtime` (the live state of the writing process).
The parts are made per call over that live state and talk through their arguments.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import time
from typing import Any, ClassVar

from confluent_kafka import KafkaException

from laminar._core import (
    PreparedTxnState,
    SinkAnswer,
    check_kafka_schema,
)
from laminar._faults import crash_point
from laminar._input import check_epoch, materialize
from laminar._types import ArrowData
from laminar.errors import (
    ConfigError,
    DataError,
    IllegalStateError,
    LaminarError,
)
from laminar.kafka import _shape as shape
from laminar.kafka._avro import AvroPlan, plan_avro, resolve_registry
from laminar.kafka._base import WITNESS_MAX_RECORDS_ENV, _SinkBase
from laminar.kafka._clients import Clients
from laminar.kafka._produce import Producing
from laminar.kafka._runtime import _Runtime
from laminar.kafka._witness import _IDENTIFIED, StartupRead, Witness

__all__ = [
    "HEADER_EPOCH",
    "HEADER_SINK",
    "WITNESS_MAX_RECORDS_ENV",
    "KafkaSink",
    "StartupRead",
]

log = logging.getLogger("laminar.kafka")

#: Header naming the sink (its transactional id) on every record.
HEADER_SINK = "laminar.sink"
#: Header carrying the epoch (decimal text) on every record.
HEADER_EPOCH = "laminar.epoch"


class KafkaSink(_SinkBase):
    """Writes each epoch to a Kafka topic in one transaction, exactly once across restarts.

    ``key`` names the column that becomes the record key; ``value_format`` is ``"json"`` (one
    object per row), ``"raw"`` (the bytes of ``value_column``), ``"spark"`` (Spark's Kafka-sink
    shape) or ``"avro"`` (one Avro record per row in the Confluent wire format, its schema in
    the registry ``schema_registry`` names; ``key_format="avro"`` writes the key in Avro too,
    ``avro``/``key_avro`` are their `AvroOptions`: docs/kafka.md). ``producer_config`` is passed to
    librdkafka as given (security, batching, compression, …); Laminar adds ``transactional.id``,
    ``enable.idempotence``, ``acks=all`` and statistics, and refuses settings that break
    exactly-once. The topic must exist: Laminar never creates topics.

    Keyword-only tuning: ``transaction_timeout_ms`` (librdkafka's ``transaction.timeout.ms``),
    ``commit_timeout_s`` (how long a commit may take before its outcome is in doubt),
    ``init_timeout_s`` (connecting, fencing and reading the marker at start-up),
    ``flush_timeout_s`` (how long prepare waits for every record to be acknowledged),
    ``retries`` (local retries of retriable send-offsets/commit/abort errors).
    """

    _logger_name = "laminar.kafka"

    kind: ClassVar[str] = "kafka"
    _runtime_attrs: ClassVar[tuple[str, ...]] = ("_rt", "_resolved", "_part_settings")

    @property
    def startup_read(self) -> StartupRead | None:
        """How the last committed epoch was last found (``None`` before the first read)."""
        return getattr(self, "_startup_read", None)

    # -- its parts ----------------------------------------------------------------------------

    def _clients(self, rt: _Runtime) -> Clients:
        """The producer and consumer held in ``rt`` and the calls made on them."""
        return Clients(self._parts(), rt)

    def _producing(self, rt: _Runtime) -> Producing:
        """The produce path of the open epoch, through ``rt``'s producer."""
        return Producing(self._parts(), Clients(self._parts(), rt))

    def _witness(self, rt: _Runtime) -> Witness:
        """The evidence of the last committed epoch, read through ``rt``'s clients."""
        return Witness(
            self._parts(),
            Clients(self._parts(), rt),
            recorded_history=self.recorded_history,
            max_records=lambda: self.witness_max_records,
        )

    def _live(self) -> _Runtime:
        """The runtime with an initialised producer (``init_transactions`` on first use)."""
        rt = self._rt
        if rt is None or rt.producer is None:
            self.init_transactions()
            rt = self._rt
            assert rt is not None
        if rt.fenced is not None:
            raise rt.fenced
        return rt

    def _open_epoch(self, call: str) -> int:
        epoch = self._machine.writing
        if epoch is None:
            raise IllegalStateError(
                f"{call}() needs an open transaction, but the sink is {self.tracker.state!r}; "
                "call begin_transaction(epoch) first",
                sink_id=self.sink_id,
            )
        return epoch

    def _release_clients(self, rt: _Runtime) -> None:
        """Close the producer and the consumer; the next use opens new ones."""
        self._clients(rt).release()
        self._rt = None

    def _read_last_committed(self, rt: _Runtime, *, stable: bool = False) -> int | None:
        """The last committed epoch by docs/protocol.md §1's rule (`Witness`); `startup_read`
        records how it was found."""
        witness = self._witness(rt)
        try:
            return witness.read_last_committed(self.tracker.last_committed_epoch, stable=stable)
        finally:
            if witness.found is not None:
                self._startup_read = witness.found

    # -- lifecycle ----------------------------------------------------------------------------

    def init_transactions(self) -> None:
        """Open the producer, fence any previous instance, read back the last committed epoch,
        and resolve whatever this instance left open or in doubt."""
        rt = self._rt or _Runtime()
        self._rt = rt
        rt.fenced = None
        # one budget for the whole start-up, whatever failovers its calls meet (core rule:
        # protocol::retry::failover_pause)
        rt.begin_startup(self._init_timeout_s)
        try:
            self._clients(rt).open_consumer()
            self._clients(rt).open_producer()
            last = self._read_last_committed(rt, stable=True)  # after our own InitProducerId
        except LaminarError as err:
            if err.failure_kind != "fenced":
                # Unreachable brokers, bad credentials, a missing topic: the clients would
                # otherwise go on reconnecting (and logging) in the background until close().
                # A start-up that failed retriably (a failover outlasting init_timeout_s) is
                # released too: its producer is open but the last committed epoch unread, and
                # the next call (`_live`: begin_transaction without init_transactions) must
                # start again, not write an epoch it may hold.
                self._release_clients(rt)
            raise
        finally:
            rt.startup_deadline = None
        self._reopened(last)

    def begin_transaction(self, epoch: int) -> bool:
        """Open the epoch's transaction; False (nothing opened) if the epoch is committed."""
        epoch = check_epoch(epoch, sink_id=self.sink_id)
        rt = self._live()
        machine = self._machine
        if self._replayed(epoch):
            return False
        machine.opened(epoch)
        try:
            rt.producer.begin_transaction()
        except KafkaException as e:
            machine.abort_after_error()
            machine.abort_ok()
            raise self._parts().error(e, "begin_transaction", epoch, rt) from e
        rt.attempt = rt.attempt + 1 if rt.last_epoch == epoch else 0
        rt.last_epoch = epoch
        rt.records = 0
        rt.epoch_topics = set()
        rt.delivery_errors.clear()
        rt.delivery_failures = 0
        rt.purged = 0
        rt.headers = [
            (HEADER_SINK, self.sink_id.encode()),
            (HEADER_EPOCH, str(epoch).encode()),
        ]
        crash_point("kafka.after_begin")
        return True

    def write(self, batch: ArrowData, *, records_out: list[Any] | None = None) -> None:
        """Encode ``batch`` (Arrow) and produce every row into the open transaction.

        ``records_out``: a list that receives the encoded records (`KafkaRecords`, one per
        chunk) — how an atomic group's coordinator keeps them for its redo log without encoding
        the batch twice.
        """
        rt = self._live()
        epoch = self._open_epoch("write")
        try:
            # A stream is read once, here: a retry of this call then fails loudly (a spent
            # reader is refused) instead of writing nothing (laminar._input).
            data = materialize(batch)
            fmt = shape.value_format_for(
                data.schema, self._value_format, self._key, self._value_column
            )
            avro = None
            if fmt == "avro":
                # Every registry call of the write, before its first record (_avro).
                avro = self._plan_avro(data.schema)
            else:
                check_kafka_schema(
                    data.schema,
                    value_format=fmt,  # type: ignore[arg-type]
                    key=self._key,
                    value_column=self._value_column,
                )
            producing = self._producing(rt)
            route = functools.partial(self._route, rt)
            for count, size in producing.write(data, fmt, avro, epoch, records_out, route):
                rt.records += count
                self._machine.wrote(count, size)
        except (ConfigError, DataError) as err:
            # The batch cannot be written: abort the epoch so the sink stays usable.
            err.sink_id, err.epoch = err.sink_id or self.sink_id, epoch
            self._abort_quietly(rt, epoch)
            raise

    def _plan_avro(self, schema: Any) -> AvroPlan:
        """The batch's Avro writer schemas and ids (registered when new: docs/kafka.md)."""
        assert self._registry_setting is not None  # value_format='avro' needs it (_base)
        return plan_avro(
            schema,
            topic=self._topic,
            key=self._key,
            key_format="avro" if self._key_format == "avro" else None,
            registry=resolve_registry(self._registry_setting, self.sink_id),
            avro=self._avro,
            key_avro=self._key_avro,
        )

    def write_records(
        self, values: list[bytes | None], keys: list[bytes | None] | None, routed: Any = None
    ) -> None:
        """Produce already-encoded records (value, key) into the open transaction, with this
        sink's headers — how recovery re-produces a decided epoch from the redo log.
        ``routed``: each record's (topic, partition, user headers), from a version-2 redo blob
        (docs/formats.md §2); the records go where the epoch's first attempt sent them."""
        rt = self._live()
        epoch = self._open_epoch("write_records")
        if not values:
            return
        rows = None
        if routed is not None:
            rows = shape.redo_rows(values, keys, routed, home=self._topic, sink_headers=rt.headers)
            self._route(rt, rows, epoch, 0, False)
        self._producing(rt).produce(values, keys, epoch, 0, True, rows)
        rt.records += len(values)
        size = sum(len(v) for v in values if v) + sum(len(k) for k in keys or () if k)
        self._machine.wrote(len(values), size)

    def prepare_transaction(self) -> PreparedTxnState:
        """Send the epoch marker and flush: every record acknowledged, nothing visible yet."""
        rt = self._live()
        epoch = self._open_epoch("prepare_transaction")
        self._producing(rt).finish_writes(epoch)
        producer_id, producer_epoch = self._clients(rt).producer_identity()
        self._machine.prepared(epoch)
        return PreparedTxnState(
            self.sink_id,
            epoch,
            attempt=rt.attempt,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            record_count=rt.records,
            created_at_ms=time.time_ns() // 1_000_000,
        )

    def commit_transaction(self, epoch: int) -> None:
        """Commit the epoch's records and its marker atomically (from Active: one phase)."""
        epoch = check_epoch(epoch, sink_id=self.sink_id)
        rt = self._live()
        machine = self._machine
        open_epoch = machine.writing if machine.writing is not None else machine.prepared_epoch
        if open_epoch is not None and open_epoch != epoch:
            raise IllegalStateError(
                f"commit_transaction({epoch}) but the open transaction is epoch {open_epoch}",
                sink_id=self.sink_id,
                epoch=epoch,
            )
        if isinstance(machine.commit(epoch), SinkAnswer.Commit):  # one phase: from Active
            self._producing(rt).finish_writes(epoch)
        machine.commit_started(epoch)
        try:
            self._clients(rt).retrying("commit_transaction", epoch, self._commit_timeout_s)
        except LaminarError as err:
            # The broker refused the commit (an abortable error): nothing was committed, even
            # after prepare — the machine says rolled back, the producer's transaction is aborted
            # and the caller retries the epoch. Any other failure leaves the outcome unknown.
            failure = machine.commit_failed(err.failure_kind != "abortable")
            if isinstance(failure, SinkAnswer.RolledBack):
                self._clients(rt).abort_producer_quietly()
                raise
            # in doubt: the machine keeps the commit pending for recover()
            if err.failure_kind == "fenced":
                rt.fenced = err
            raise
        crash_point("kafka.after_commit")
        machine.commit_ok()

    def abort_transaction(self, epoch: int) -> None:
        """Discard the epoch's records (and its marker)."""
        epoch = check_epoch(epoch, sink_id=self.sink_id)
        machine = self._machine
        rt = self._rt
        # Idle: nothing (opening a new producer after one was given up aborted the epoch
        # already). A given-up producer (a call that did not return in time) sends nothing: the
        # next producer's init_transactions fences it and aborts what it left open, and no epoch
        # can begin before that init. Opening one here instead would make the abort fail
        # whenever the cluster is still moving its coordinators, leaving this epoch open and its
        # retry refused.
        answer = machine.abort_via(epoch, _Runtime.client_of(rt))
        if isinstance(answer, SinkAnswer.Reopen):
            rt = self._live()  # its init settles the epoch
            answer = machine.abort_via(epoch, "live")
        if isinstance(answer, SinkAnswer.Fenced) and rt is not None and rt.fenced is not None:
            raise rt.fenced
        if isinstance(answer, SinkAnswer.Nothing):
            return
        assert rt is not None  # a live producer
        try:
            self._clients(rt).retrying("abort_transaction", epoch, self._commit_timeout_s)
        except LaminarError as err:
            failure = machine.abort_failed()  # in doubt, the abort pending
            if err.failure_kind == "fenced" or not isinstance(failure, SinkAnswer.Reopen):
                if err.failure_kind == "fenced":
                    rt.fenced = err
                raise
            # An abort never commits; replacing the producer makes it final (the broker aborts
            # the transaction when the new producer fences the old one).
            log.warning(
                "sink %s: abort of epoch %d failed (%s); re-initialising the producer",
                self.sink_id,
                epoch,
                err,
            )
            self._clients(rt).reinit_producer()
            machine.abort_reopened()
            return
        rt.identity_changed()
        machine.abort_ok()

    def last_committed_epoch(self) -> int | None:
        """The last committed epoch, read from the marker group (or the record headers)."""
        rt = self._rt or _Runtime()
        self._rt = rt
        self._clients(rt).open_consumer()
        last = self._read_last_committed(rt)
        # Right after this instance's own commit the marker may not read back yet (the broker
        # writes the transaction's markers after answering the commit).
        known = self.tracker.last_committed_epoch
        return known if known is not None and (last is None or known > last) else last

    def recover(self) -> int | None:
        """Resolve an in-doubt commit (state Failed) from the durable marker; return the last
        committed epoch. Raises `FencedError` when the marker shows that another instance
        committed past this one."""
        rt = self._rt
        if rt is None or rt.producer is None:
            self.init_transactions()  # settles a Failed state from the marker
            return self.tracker.last_committed_epoch
        if rt.fenced is not None:
            raise rt.fenced
        machine = self._machine
        answer = machine.recover()
        if isinstance(answer, SinkAnswer.Resolve):
            return self._resolve_failed(rt, answer.epoch)
        if not machine.between_epochs:
            raise IllegalStateError(
                f"recover() while a transaction is open ({self.tracker.state!r}); commit or "
                "abort it first",
                sink_id=self.sink_id,
            )
        last = self._read_last_committed(rt)
        machine.saw_committed(last)
        return self.tracker.last_committed_epoch

    def release_prepared(self) -> None:
        """Release the clients *without* aborting a prepared transaction: it stays open on the
        broker for a coordinator's ``EndTxn`` with the producer id/epoch of its
        `PreparedTxnState` (scale-out participants, docs/protocol.md §4). librdkafka's destroy
        does not abort; the next ``init_transactions`` of this transactional id would."""
        rt = self._rt
        if rt is not None:
            self._release_clients(rt)

    def close(self) -> None:
        """Abort an open transaction (best effort) and release the clients."""
        rt = self._rt
        if rt is None:
            return
        # The machine: abort an open or prepared epoch (a Kafka prepare is not durable).
        answer = self._machine.close()
        live = rt.producer is not None and rt.fenced is None
        if live and isinstance(answer, SinkAnswer.AbortOpen):
            with contextlib.suppress(LaminarError):
                self.abort_transaction(answer.epoch)
        self._release_clients(rt)

    def _route(self, rt: _Runtime, records: Any, epoch: int, first_row: int, redo: bool) -> None:
        """Before a routed chunk is produced: its topics exist and its partitions are in range
        (metadata), and every topic other than the home topic is recorded in the identity
        (docs/protocol.md §1, "Several topics") and gets the epoch's marker."""

        def metadata() -> Any:
            try:
                return rt.producer.list_topics(self._init_timeout_s)
            except KafkaException as e:
                raise self._parts().error(e, "metadata", epoch, rt) from e

        shape.check_chunk(
            records,
            rt.partition_counts,
            metadata,
            home=self._topic,
            first_row=first_row,
            redo=redo,
            sink_id=self.sink_id,
            epoch=epoch,
            servers=self._bootstrap_servers,
        )
        others = [t for t in records.topic_names if t != self._topic]
        new = [t for t in others if (self._bootstrap_servers, t, self.sink_id) not in _IDENTIFIED]
        if new:
            self._witness(rt).record_topics(new)
        rt.epoch_topics.update(others)

    def _abort_quietly(self, rt: _Runtime, epoch: int) -> None:
        if self._machine.writing is not None or self._machine.prepared_epoch is not None:
            try:
                self.abort_transaction(epoch)
            except LaminarError as err:
                log.warning("sink %s: abort of epoch %d failed: %s", self.sink_id, epoch, err)

    # -- in-doubt resolution ------------------------------------------------------------------

    def _resolve_failed(self, rt: _Runtime, epoch: int | None) -> int | None:
        """Resolve an in-doubt commit of ``epoch`` (`Clients.resolve_in_doubt`: the core's
        `KafkaInDoubtMachine` performed, the witness reading the marker); the last committed
        epoch after it."""
        assert epoch is not None
        witness = self._witness(rt)
        witness.clients.resolve_in_doubt(epoch, self._machine, witness.read_marker)
        return self.tracker.last_committed_epoch

    def _reopened(self, last: int | None) -> None:
        """After a new producer's init: the machine aborts whatever this instance had open and
        decides an in-doubt commit by ``last`` (`SinkTransaction.reopened`)."""
        self._machine.reopened(last)
