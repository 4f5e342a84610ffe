"""``KafkaSink``: one Kafka transaction per epoch, exactly once across restarts (protocol.md §1).

(Over 500 lines for now: `KafkaSink` — its configuration, producing, the witness and in-doubt
resolution — is still one class. Its split into `laminar.kafka` pieces waits until the branches
that edit it are merged: git's rename detection needs this file mostly whole to carry their
edits here (docs/engine.md, "Package layout").)

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

Errors follow KIP-691 through one mapping (`laminar.kafka._errors.map_kafka_error`): a
commit whose outcome is unknown is an `InDoubtError` (state Failed), which `recover()` resolves
from the marker — re-initialising the producer first when needed, so that the broker completes or
aborts the pending transaction before the marker is read.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import time
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any, ClassVar

import pyarrow as pa  # type: ignore[import-untyped]
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from laminar._core import (
    Command,
    Event,
    KafkaInDoubtMachine,
    PreparedTxnState,
    check_kafka_schema,
    encode_kafka,
    epoch_committed,
)
from laminar._faults import crash_point
from laminar._input import check_epoch, materialize
from laminar._redact import redact_config, redact_text
from laminar._settings import Setting, is_deferred, resolve, resolve_mapping
from laminar._sink import TransactionalSink
from laminar._types import ArrowData
from laminar.errors import (
    AbortableError,
    ConfigError,
    DataError,
    FatalError,
    FencedError,
    IllegalStateError,
    InDoubtError,
    LaminarError,
    RecordTooLargeError,
)
from laminar.kafka import _shape as shape
from laminar.kafka._calls import StuckCallError as _StuckCallError
from laminar.kafka._calls import bounded_call as _bounded_call
from laminar.kafka._config import (
    DEFAULT_MESSAGE_MAX_BYTES,
    build_producer_config,
    consumer_config,
    marker_group,
    secret_values,
    validate_producer_config,
)
from laminar.kafka._errors import (
    AUTH_CODES,
    ErrorContext,
    as_kafka_error,
    describe,
    map_kafka_error,
)
from laminar.kafka.log import (
    ClientSecurity,
    KafkaLogClient,
    KafkaLogError,
    ReadStats,
    UnsupportedSecurityError,
)
from laminar.protocol.driver import drive, now_ms, perform_driver_side

__all__ = ["HEADER_EPOCH", "HEADER_SINK", "KafkaSink", "StartupRead"]

log = logging.getLogger("laminar.kafka")

#: Header naming the sink (its transactional id) on every record.
HEADER_SINK = "laminar.sink"
#: Header carrying the epoch (decimal text) on every record.
HEADER_EPOCH = "laminar.epoch"

_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]{1,249}")
#: Printable ASCII only: a NUL or non-ASCII transactional id passes librdkafka's checks but fails
#: every transactional request, as a retriable error, forever.
_TRANSACTIONAL_ID = re.compile(r"[\x20-\x7e]+")
#: Rows per slice encoded at once. Not overlapped with the produce loop (as the COPY path is):
#: the loop holds the GIL, and a worker building the next slice's `bytes` made the write path
#: 1.4x slower, not faster (docs/serialization.md, "Performance").
_CHUNK_ROWS = 65_536
_TXN_CALLS = frozenset({"commit_transaction", "abort_transaction", "init_transactions"})
_IGNORED_DELIVERY_CODES = frozenset({KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT})
_CONNECTION_CODES = frozenset(
    {
        KafkaError._TRANSPORT,
        KafkaError._ALL_BROKERS_DOWN,
        KafkaError._RESOLVE,
        KafkaError._AUTHENTICATION,
        KafkaError._SSL,
    }
)
_WITNESS_FIRST_WINDOW = 1_024
#: How far back (records per partition) the witness looks for this sink's records, unless
#: `KafkaSink.witness_max_records` or the environment variable below says otherwise.
_WITNESS_MAX_RECORDS = 1_000_000
WITNESS_MAX_RECORDS_ENV = "LAMINAR_KAFKA_WITNESS_MAX_RECORDS"
#: The identity's explicit retention (OffsetCommit v2-v4's retention_time_ms): 100 years.
_IDENTITY_RETENTION_MS = 100 * 365 * 24 * 3600 * 1000
#: (bootstrap servers, topic, sink id) whose identity this process saw or recorded.
_IDENTIFIED: set[tuple[str, str, str]] = set()


@dataclass(frozen=True)
class StartupRead:
    """How the last committed epoch was found at the sink's last read of it (docs/protocol.md
    §1): ``source`` is ``"marker"``, ``"new"`` (no marker, no history: nothing read),
    ``"witness"`` (the bounded search ran) or ``"unreadable"`` (no marker, and the wire client
    cannot connect); ``read`` counts what `laminar.kafka.log` read for it."""

    source: str
    epoch: int | None
    read: ReadStats = field(default_factory=ReadStats)


class _Runtime:
    """The live part of a sink in the process that writes (never pickled)."""

    def __init__(self) -> None:
        self.producer: Any = None
        self.consumer: Any = None
        self.group_metadata: Any = None
        self.fenced: FencedError | None = None
        # failures heard through callbacks
        self.delivery_errors: list[tuple[KafkaError, bytes | None, int]] = []
        self.delivery_failures = 0
        self.client_errors: deque[KafkaError] = deque(maxlen=16)
        # producer identity from librdkafka's statistics
        self.stats_json: str | None = None
        self.identity_since_us = 0
        self.identity: tuple[int, int] | None = None
        self.identity_warned = False
        # the open epoch
        self.headers: list[tuple[str, bytes]] = []
        #: Topics other than the home topic that the open epoch wrote (its markers go there too).
        self.epoch_topics: set[str] = set()
        #: Partition counts of the topics rows named (Spark's shape), from metadata.
        self.partition_counts: dict[str, int] = {}
        self.records = 0
        self.last_epoch: int | None = None
        self.attempt = 0
        self.failed_operation: str | None = None
        self.positional_produce = True
        # the last committed epoch found without a marker: (answer, whether a writer found it)
        self.without_marker: tuple[int | None, bool] | None = None

    # -- callbacks (called by librdkafka from poll/flush, in this thread) ---------------------

    def on_stats(self, stats_json: str) -> None:
        self.stats_json = stats_json

    def on_error(self, error: KafkaError) -> None:
        self.client_errors.append(error)

    def on_delivery(self, error: KafkaError | None, message: Any) -> None:
        if error is None or error.code() in _IGNORED_DELIVERY_CODES:
            return
        self.delivery_failures += 1
        if len(self.delivery_errors) < 8:
            value = message.value() if message is not None else None
            key = message.key() if message is not None else None
            self.delivery_errors.append((error, key, len(value) if value is not None else 0))

    # -- identity -----------------------------------------------------------------------------

    def identity_changed(self) -> None:
        """The producer id/epoch may have changed (new producer, or an abort that bumps it)."""
        self.identity = None
        self.identity_since_us = time.monotonic_ns() // 1000

    def fresh_identity(self) -> tuple[int, int] | None:
        """The producer id/epoch from a statistics report emitted since the last change."""
        if self.stats_json is None:
            return None
        try:
            stats = json.loads(self.stats_json)
            eos = stats.get("eos") or {}
            emitted_us = int(stats.get("ts", 0))
        except (ValueError, TypeError, AttributeError):
            return None
        if emitted_us < self.identity_since_us or eos.get("idemp_state") != "Assigned":
            return None
        try:
            return int(eos["producer_id"]), int(eos["producer_epoch"])
        except (KeyError, TypeError, ValueError):
            return None


class KafkaSink(TransactionalSink):
    """Writes each epoch to a Kafka topic in one transaction, exactly once across restarts.

    ``key`` names the column that becomes the record key; ``value_format`` is ``"json"`` (one
    object per row) or ``"raw"`` (the bytes of ``value_column``). ``producer_config`` is passed to
    librdkafka as given (security, batching, compression, …); Laminar adds ``transactional.id``,
    ``enable.idempotence``, ``acks=all`` and statistics, and refuses settings that break
    exactly-once. The topic must exist: Laminar never creates topics.

    Keyword-only tuning: ``transaction_timeout_ms`` (librdkafka's ``transaction.timeout.ms``),
    ``commit_timeout_s`` (how long a commit may take before its outcome is in doubt),
    ``init_timeout_s`` (connecting, fencing and reading the marker at start-up),
    ``flush_timeout_s`` (how long prepare waits for every record to be acknowledged),
    ``retries`` (local retries of retriable send-offsets/commit/abort errors).
    """

    kind: ClassVar[str] = "kafka"
    _runtime_attrs: ClassVar[tuple[str, ...]] = ("_rt", "_resolved")

    def __init__(
        self,
        bootstrap_servers: Setting,
        topic: str,
        transactional_id: str,
        key: str | None = None,
        value_format: str | None = None,
        producer_config: Mapping[str, Any] | None = None,
        *,
        value_column: str | None = None,
        transaction_timeout_ms: int | None = None,
        commit_timeout_s: float = 30.0,
        init_timeout_s: float = 30.0,
        flush_timeout_s: float = 120.0,
        retries: int = 3,
    ) -> None:
        if not is_deferred(bootstrap_servers) and (
            not isinstance(bootstrap_servers, str) or not bootstrap_servers.strip()
        ):
            raise ConfigError("KafkaSink needs bootstrap_servers, e.g. 'broker1:9092,broker2:9092'")
        if not isinstance(topic, str) or not _TOPIC_NAME.fullmatch(topic) or topic in (".", ".."):
            raise ConfigError(
                f"KafkaSink topic {topic!r} is not a valid Kafka topic name (1-249 characters "
                "of a-z A-Z 0-9 . _ -, and not '.' or '..')"
            )
        if not isinstance(transactional_id, str) or not transactional_id.strip():
            raise ConfigError(
                "KafkaSink needs a transactional_id: a name that stays the same across restarts "
                "(e.g. 'orders-sink'), unique per writer"
            )
        if not _TRANSACTIONAL_ID.fullmatch(transactional_id):
            raise ConfigError(
                f"KafkaSink transactional_id {transactional_id!r} has a character outside "
                "printable ASCII (letters, digits, punctuation, space): brokers and clients do "
                "not agree on other characters, and every epoch would fail. Choose an ASCII name "
                "(e.g. 'orders-sink')"
            )
        if value_format not in (None, "json", "raw", "spark"):
            raise ConfigError(
                f"value_format must be 'json', 'raw' or 'spark', not {value_format!r}"
            )
        if value_format == "spark" and key is not None:
            raise ConfigError(
                "value_format='spark' reads the 'key' column by name; drop key= (or rename the "
                "column to 'key')"
            )
        if key is not None and not isinstance(key, str):
            raise ConfigError(f"key must be a column name or None, not {type(key).__name__}")
        if value_column is not None and value_format != "raw":
            raise ConfigError("value_column is only used with value_format='raw'")
        for name, value in (
            ("commit_timeout_s", commit_timeout_s),
            ("init_timeout_s", init_timeout_s),
            ("flush_timeout_s", flush_timeout_s),
        ):
            if not value > 0:
                raise ConfigError(f"{name} must be > 0, got {value!r}")
        if retries < 0:
            raise ConfigError(f"retries must be >= 0, got {retries}")
        if transaction_timeout_ms is not None and transaction_timeout_ms <= 0:
            raise ConfigError(f"transaction_timeout_ms must be > 0, got {transaction_timeout_ms}")
        # Settings given as laminar.env(...) are checked once read, in the writing process.
        config = validate_producer_config(
            _known(producer_config),
            bootstrap_servers=str(bootstrap_servers),
            transactional_id=transactional_id,
            transaction_timeout_ms=transaction_timeout_ms,
        )
        if producer_config is not None:
            for name in producer_config:
                if not isinstance(name, str):
                    raise ConfigError(f"producer_config keys must be strings, got {name!r}")
            config = dict(producer_config)
        super().__init__(transactional_id)
        self._bootstrap_setting: Setting = bootstrap_servers
        self._resolved: tuple[str, dict[str, Any]] | None = None
        self._topic = topic
        self._key = key
        self._value_format = value_format
        self._value_column = value_column
        self._producer_setting = config
        self._transaction_timeout_ms = transaction_timeout_ms
        self._commit_timeout_s = float(commit_timeout_s)
        self._init_timeout_s = float(init_timeout_s)
        self._flush_timeout_s = float(flush_timeout_s)
        self._retries = int(retries)
        self._rt: _Runtime | None = None

    # -- configuration ------------------------------------------------------------------------

    @property
    def bootstrap_servers(self) -> Setting:
        """The cluster's ``bootstrap.servers`` (or the ``laminar.env`` it is read from)."""
        return self._bootstrap_setting

    @property
    def _bootstrap_servers(self) -> str:
        return self._resolve_settings()[0]

    @property
    def _producer_config(self) -> dict[str, Any]:
        return self._resolve_settings()[1]

    def _resolve_settings(self) -> tuple[str, dict[str, Any]]:
        """``bootstrap_servers`` and ``producer_config`` in this process: ``laminar.env``
        settings are read here (the writing process), then checked like direct ones."""
        if self._resolved is None:
            what = f"KafkaSink {self.sink_id!r}:"
            bootstrap = resolve(self._bootstrap_setting, f"{what} bootstrap_servers")
            config = resolve_mapping(self._producer_setting, f"{what} producer_config")
            if not bootstrap.strip():
                raise ConfigError(f"{what} bootstrap_servers is empty")
            config = validate_producer_config(
                config,
                bootstrap_servers=bootstrap,
                transactional_id=self.sink_id,
                transaction_timeout_ms=self._transaction_timeout_ms,
            )
            self._resolved = (bootstrap, config)
        return self._resolved

    @property
    def topic(self) -> str:
        """The topic the records go to."""
        return self._topic

    @property
    def transactional_id(self) -> str:
        """The producer's ``transactional.id`` (the sink id)."""
        return self.sink_id

    @property
    def key(self) -> str | None:
        """The key column, if any."""
        return self._key

    @property
    def value_format(self) -> str:
        """``"json"``, ``"raw"`` or ``"spark"``. Not given: ``"json"``, except that a batch of
        exactly Spark's Kafka-sink shape is written as ``"spark"`` (docs/kafka.md)."""
        return self._value_format or "json"

    @property
    def marker_group(self) -> str:
        """The consumer group whose committed offset on (topic, 0) is the last committed epoch."""
        return marker_group(self.sink_id)

    @property
    def producer_config(self) -> dict[str, Any]:
        """The user's producer settings, secrets masked (``***``)."""
        return redact_config(self._producer_setting)

    def __repr__(self) -> str:
        return (
            f"KafkaSink(bootstrap_servers={self._bootstrap_setting!r}, topic={self._topic!r}, "
            f"transactional_id={self.sink_id!r}, key={self._key!r}, "
            f"value_format={self._value_format!r}, producer_config={self.producer_config!r})"
        )

    # -- lifecycle ----------------------------------------------------------------------------

    def init_transactions(self) -> None:
        """Open the producer, fence any previous instance, read back the last committed epoch,
        and settle whatever this instance left open or in doubt."""
        rt = self._rt or _Runtime()
        self._rt = rt
        rt.fenced = None
        try:
            self._open_consumer(rt)
            self._open_producer(rt)
            last = self._read_last_committed(rt, stable=True)  # after our own InitProducerId
        except FatalError as err:
            if not isinstance(err, FencedError):
                # Unreachable brokers, bad credentials, a missing topic: the clients would
                # otherwise go on reconnecting (and logging) in the background until close().
                # The next call opens new ones.
                self._release_clients(rt)
            raise
        self._settle_after_reinit(last)

    def begin_transaction(self, epoch: int) -> bool:
        """Open the epoch's transaction; False (nothing opened) if the epoch is committed."""
        epoch = check_epoch(epoch, sink_id=self.sink_id)
        rt = self._live()
        if self.tracker.state.name == "Failed":
            self.recover()
        if not self.tracker.begin(epoch):
            return False
        try:
            rt.producer.begin_transaction()
        except KafkaException as e:
            self.tracker.abort_started(epoch=epoch)
            self.tracker.abort_ok()
            raise self._error(e, "begin_transaction", epoch, rt) from e
        rt.attempt = rt.attempt + 1 if rt.last_epoch == epoch else 0
        rt.last_epoch = epoch
        rt.records = 0
        rt.epoch_topics = set()
        rt.delivery_errors.clear()
        rt.delivery_failures = 0
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
            check_kafka_schema(
                data.schema,
                value_format=fmt,  # type: ignore[arg-type]
                key=self._key,
                value_column=self._value_column,
            )
            first = True
            row = 0
            for chunk in _arrow_chunks(data):
                records = encode_kafka(
                    chunk,
                    value_format=fmt,  # type: ignore[arg-type]
                    key=self._key,
                    value_column=self._value_column,
                    topic=self._topic,
                    headers=rt.headers,
                    first_row=row,
                )
                count = records.num_rows
                if count == 0:
                    continue
                routed = records if records.topics is not None else None
                if routed is not None:
                    self._route(rt, routed, epoch, row, records_out is not None)
                self._produce(rt, records.values, records.keys, epoch, row, first, routed)
                if records_out is not None:
                    records_out.append(records)
                first = False
                row += count
                rt.records += count
                self.tracker.record_write(count, records.total_bytes)
        except (ConfigError, DataError) as err:
            # The batch cannot be written: abort the epoch so the sink stays usable.
            err.sink_id, err.epoch = err.sink_id or self.sink_id, epoch
            self._abort_quietly(rt, epoch)
            raise

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
        self._produce(rt, values, keys, epoch, 0, True, rows)
        rt.records += len(values)
        size = sum(len(v) for v in values if v) + sum(len(k) for k in keys or () if k)
        self.tracker.record_write(len(values), size)

    def prepare_transaction(self) -> PreparedTxnState:
        """Send the epoch marker and flush: every record acknowledged, nothing visible yet."""
        rt = self._live()
        epoch = self._open_epoch("prepare_transaction")
        self._finish_writes(rt, epoch)
        producer_id, producer_epoch = self._producer_identity(rt)
        self.tracker.prepare(epoch=epoch)
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
        state = self.tracker.state
        if state.name in ("Active", "Prepared") and state.epoch != epoch:
            raise IllegalStateError(
                f"commit_transaction({epoch}) but the open transaction is epoch {state.epoch}",
                sink_id=self.sink_id,
                epoch=epoch,
            )
        if state.name == "Active":
            self._finish_writes(rt, epoch)
        self.tracker.commit_started(epoch=epoch)
        try:
            self._retrying(rt, "commit_transaction", epoch, self._commit_timeout_s)
        except FencedError as err:
            self.tracker.commit_failed()
            rt.failed_operation = "commit"
            rt.fenced = err
            raise
        except AbortableError:
            # A definite failure: nothing was committed. Abort here (the state machine has no
            # Committing -> Aborting edge) and let the caller retry the epoch.
            self.tracker.commit_failed()
            self._abort_producer_quietly(rt)
            self.tracker.resolve(False, epoch=epoch)
            raise
        except LaminarError:
            self.tracker.commit_failed()
            rt.failed_operation = "commit"
            raise
        crash_point("kafka.after_commit")
        self.tracker.commit_ok()

    def abort_transaction(self, epoch: int) -> None:
        """Discard the epoch's records (and its marker)."""
        epoch = check_epoch(epoch, sink_id=self.sink_id)
        rt = self._live()
        if self.tracker.state.name == "Idle":
            # Opening a new producer (after one was given up) aborted the epoch already.
            return
        self.tracker.abort_started(epoch=epoch)
        try:
            self._retrying(rt, "abort_transaction", epoch, self._commit_timeout_s)
        except FencedError as err:
            self.tracker.abort_failed()
            rt.failed_operation = "abort"
            rt.fenced = err
            raise
        except LaminarError as err:
            # An abort never commits; replacing the producer makes it final (the broker aborts
            # the transaction when the new producer fences the old one).
            self.tracker.abort_failed()
            rt.failed_operation = "abort"
            log.warning(
                "sink %s: abort of epoch %d failed (%s); re-initialising the producer",
                self.sink_id,
                epoch,
                err,
            )
            self._reinit_producer(rt)
            self.tracker.resolve(False, epoch=epoch)
            return
        rt.identity_changed()
        self.tracker.abort_ok()

    def last_committed_epoch(self) -> int | None:
        """The last committed epoch, read from the marker group (or the record headers)."""
        rt = self._rt or _Runtime()
        self._rt = rt
        self._open_consumer(rt)
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
        state = self.tracker.state
        if state.name == "Failed":
            return self._resolve_failed(rt, state.epoch)
        if state.name != "Idle":
            raise IllegalStateError(
                f"recover() while a transaction is open ({state!r}); commit or abort it first",
                sink_id=self.sink_id,
            )
        last = self._read_last_committed(rt)
        self._set_last_committed(last)
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
        state = self.tracker.state
        if rt.producer is not None and rt.fenced is None and state.name in ("Active", "Prepared"):
            with contextlib.suppress(LaminarError):
                assert state.epoch is not None
                self.abort_transaction(state.epoch)
        self._release_clients(rt)

    def _release_clients(self, rt: _Runtime) -> None:
        """Close the producer and the consumer; the next use opens new ones."""
        self._close_producer(rt)
        if rt.consumer is not None:
            with contextlib.suppress(KafkaException, RuntimeError):
                rt.consumer.close()
            rt.consumer = None
        self._rt = None

    # -- producing ----------------------------------------------------------------------------

    def _produce(
        self,
        rt: _Runtime,
        values: list[bytes | None],
        keys: list[bytes | None] | None,
        epoch: int,
        first_row: int,
        first_chunk: bool,
        routed: Any = None,
    ) -> None:
        """Produces the rows (``routed``: Spark's shape, each row to its own topic, partition
        and headers); the crash point ``kafka.mid_produce`` halfway through the first chunk."""
        ranges = (
            [(0, len(values) // 2), (len(values) // 2, len(values))]
            if first_chunk
            else [(0, len(values))]
        )
        for i, (start, stop) in enumerate(ranges):
            if i:
                crash_point("kafka.mid_produce")
            if routed is None:
                self._produce_range(rt, values, keys, epoch, first_row, start, stop)
                continue
            try:
                shape.produce_routed(
                    rt.producer.produce,
                    routed,
                    rt.headers,
                    start,
                    stop,
                    lambda: self._wait_for_room(rt, epoch),
                )
            except KafkaException as e:
                raise self._produce_error(e, epoch, first_row + start, None, None, rt) from e

    def _route(self, rt: _Runtime, records: Any, epoch: int, first_row: int, redo: bool) -> None:
        """Before a routed chunk is produced: its topics exist and its partitions are in range
        (metadata), and every topic other than the home topic is recorded in the identity
        (docs/protocol.md §1, "Several topics") and gets the epoch's marker."""

        def metadata() -> Any:
            try:
                return rt.producer.list_topics(timeout=self._init_timeout_s)
            except KafkaException as e:
                raise self._error(e, "metadata", epoch, rt) from e

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
            self._record_topics(new)
        rt.epoch_topics.update(others)

    def _produce_range(
        self,
        rt: _Runtime,
        values: list[bytes | None],
        keys: list[bytes | None] | None,
        epoch: int,
        first_row: int,
        start: int,
        stop: int,
    ) -> None:
        if start != 0 or stop != len(values):
            values = values[start:stop]
            keys = keys[start:stop] if keys is not None else None
        pairs = zip(keys, values, strict=True) if keys is not None else zip(repeat(None), values)
        producer = rt.producer
        produce = producer.produce
        topic = self._topic
        headers = rt.headers
        key: bytes | None = None
        value: bytes | None = None
        try:
            if rt.positional_produce:
                # produce(topic, value, key, partition, callback, on_delivery, timestamp,
                # headers) positionally: about a third faster than keywords in confluent-kafka.
                try:
                    for key, value in pairs:
                        try:
                            produce(topic, value, key, -1, None, None, 0, headers)
                        except BufferError:
                            self._wait_for_room(rt, epoch)
                            produce(topic, value, key, -1, None, None, 0, headers)
                    return
                except TypeError:
                    if len(producer) or value is not values[0]:
                        raise
                    rt.positional_produce = False  # another confluent-kafka argument order
                    pairs = (
                        zip(keys, values, strict=True)
                        if keys is not None
                        else zip(repeat(None), values)
                    )
            for key, value in pairs:
                try:
                    produce(topic, value, key, headers=headers)
                except BufferError:
                    self._wait_for_room(rt, epoch)
                    produce(topic, value, key, headers=headers)
        except KafkaException as e:
            row = first_row + start + next((i for i, v in enumerate(values) if v is value), 0)
            raise self._produce_error(e, epoch, row, key, value, rt) from e

    def _wait_for_room(self, rt: _Runtime, epoch: int) -> None:
        """The local queue is full: serve callbacks until the broker acknowledged some."""
        deadline = time.monotonic() + self._flush_timeout_s
        queued = len(rt.producer)
        while time.monotonic() < deadline:
            rt.producer.poll(0.005)
            if len(rt.producer) < queued:
                return
        raise AbortableError(
            f"the producer's queue stayed full for {self._flush_timeout_s:g} s: the brokers at "
            f"{self._bootstrap_servers} do not acknowledge records (see flush_timeout_s)",
            sink_id=self.sink_id,
            epoch=epoch,
        )

    def _produce_error(
        self,
        e: KafkaException,
        epoch: int,
        row: int,
        key: bytes | None,
        value: bytes | None,
        rt: _Runtime,
    ) -> LaminarError:
        kafka_error = as_kafka_error(e)
        if kafka_error is not None and kafka_error.code() == KafkaError.MSG_SIZE_TOO_LARGE:
            size = len(value or b"") + len(key or b"")
            limit = self._producer_config.get("message.max.bytes", DEFAULT_MESSAGE_MAX_BYTES)
            return RecordTooLargeError(
                f"row {row} (key {_show_key(key)}) is a record of {size:,} bytes, larger than "
                f"message.max.bytes={limit}; raise message.max.bytes in producer_config (and the "
                "topic's max.message.bytes on the broker) or write smaller rows",
                sink_id=self.sink_id,
                epoch=epoch,
            )
        return self._error(e, "produce", epoch, rt, hint=f"row {row} (key {_show_key(key)})")

    def _finish_writes(self, rt: _Runtime, epoch: int) -> None:
        """Epoch marker, then flush: after this every record is acknowledged by the brokers."""
        offsets = [TopicPartition(t, 0, epoch) for t in [self._topic, *sorted(rt.epoch_topics)]]
        self._retrying(rt, "send_offsets_to_transaction", epoch, self._commit_timeout_s, offsets)
        crash_point("kafka.after_markers")
        remaining = rt.producer.flush(self._flush_timeout_s)
        if rt.delivery_errors:
            error, key, size = rt.delivery_errors[0]
            hint = (
                f"{rt.delivery_failures} record(s) failed; the first has key {_show_key(key)} "
                f"and a {size:,}-byte value"
            )
            raise self._error(KafkaException(error), "delivery", epoch, rt, hint=hint)
        if remaining:
            raise AbortableError(
                f"{remaining} record(s) were not acknowledged within flush_timeout_s="
                f"{self._flush_timeout_s:g} s by the brokers at {self._bootstrap_servers}",
                sink_id=self.sink_id,
                epoch=epoch,
            )
        crash_point("kafka.after_flush")

    def _retrying(
        self,
        rt: _Runtime,
        operation: str,
        epoch: int | None,
        timeout_s: float,
        offsets: list[TopicPartition] | None = None,
    ) -> None:
        """Run a transactional call, retrying retriable errors (as librdkafka documents for
        send_offsets/commit/abort) a bounded number of times within ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        attempt = 0
        while True:
            attempt += 1
            remaining = max(deadline - time.monotonic(), 0.001)
            if operation == "send_offsets_to_transaction":
                args: tuple[Any, ...] = (offsets, rt.group_metadata, remaining)
            elif operation in _TXN_CALLS:
                args = (remaining,)
            else:  # pragma: no cover - a bug
                raise IllegalStateError(f"unknown operation {operation}")
            try:
                _bounded_call(rt.producer, operation, args, remaining)
                return
            except _StuckCallError:
                raise self._stuck(rt, operation, epoch, timeout_s) from None
            except KafkaException as e:
                kafka_error = as_kafka_error(e)
                retry = (
                    kafka_error is not None
                    and kafka_error.retriable()
                    and not kafka_error.fatal()
                    and not kafka_error.txn_requires_abort()
                    and attempt <= self._retries
                    and time.monotonic() < deadline
                )
                if retry:
                    log.info(
                        "sink %s: %s: %s; retry %d/%d",
                        self.sink_id,
                        operation,
                        describe(kafka_error, self._context(epoch)) if kafka_error else e,
                        attempt,
                        self._retries,
                    )
                    continue
                raise self._error(e, operation, epoch, rt) from e

    def _stuck(
        self, rt: _Runtime, operation: str, epoch: int | None, timeout_s: float
    ) -> LaminarError:
        """The error for a call that did not return in time. The producer is given up (the next
        use opens a new one, whose ``init_transactions`` fences it and aborts what it left
        open); a commit's outcome is then unknown until the marker is read."""
        producer, rt.producer = rt.producer, None
        del producer  # referenced by _kafka_calls.ABANDONED until the stuck call returns
        what = (
            f"sink {self.sink_id!r}: {operation} did not return within {timeout_s:g} s (and a "
            f"grace period) from the brokers at {self._bootstrap_servers} — a broker restarted "
            "or unreachable; librdkafka can block past its timeout there (librdkafka #5456)"
        )
        log.warning("%s; the producer is replaced", what)
        if operation == "commit_transaction":
            return InDoubtError(
                f"{what}: the commit may or may not have happened; recover() reads the "
                "outcome from the epoch marker",
                sink_id=self.sink_id,
                epoch=epoch,
            )
        return AbortableError(
            f"{what}: nothing was committed; the epoch is aborted and can be written again",
            sink_id=self.sink_id,
            epoch=epoch,
        )

    def _abort_quietly(self, rt: _Runtime, epoch: int) -> None:
        if self.tracker.state.name in ("Active", "Prepared"):
            try:
                self.abort_transaction(epoch)
            except LaminarError as err:
                log.warning("sink %s: abort of epoch %d failed: %s", self.sink_id, epoch, err)

    def _abort_producer_quietly(self, rt: _Runtime) -> None:
        """Abort the producer's transaction after a failed commit; if that fails too (or the
        producer was given up after a stuck call), a new producer's init aborts it."""
        if rt.producer is not None:
            try:
                _bounded_call(
                    rt.producer,
                    "abort_transaction",
                    (self._commit_timeout_s,),
                    self._commit_timeout_s,
                )
                rt.identity_changed()
                return
            except _StuckCallError:
                self._stuck(rt, "abort_transaction", None, self._commit_timeout_s)
            except KafkaException as e:
                log.warning(
                    "sink %s: abort after a failed commit failed (%s); re-initialising the "
                    "producer",
                    self.sink_id,
                    self._scrub(str(e)),
                )
        with contextlib.suppress(LaminarError):
            self._reinit_producer(rt)

    # -- producer identity --------------------------------------------------------------------

    def _producer_identity(self, rt: _Runtime) -> tuple[int, int]:
        """librdkafka's current producer id and epoch (waiting briefly for the first statistics
        report after an init or abort); (-1, -1) if they do not arrive in time."""
        if rt.identity is not None:
            return rt.identity
        interval_ms = int(self._producer_config.get("statistics.interval.ms", 100))
        deadline = time.monotonic() + min(5.0, 2 * interval_ms / 1000 + 0.5)
        while True:
            identity = rt.fresh_identity()
            if identity is not None:
                rt.identity = identity
                return identity
            if time.monotonic() >= deadline:
                if not rt.identity_warned:
                    log.warning(
                        "sink %s: librdkafka reported no producer id/epoch in time; the "
                        "prepared state records them as unknown (-1)",
                        self.sink_id,
                    )
                    rt.identity_warned = True
                return (-1, -1)
            rt.producer.poll(0.01)

    # -- clients ------------------------------------------------------------------------------

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
        state = self.tracker.state
        if state.name != "Active" or state.epoch is None:
            raise IllegalStateError(
                f"{call}() needs an open transaction, but the sink is {state!r}; call "
                "begin_transaction(epoch) first",
                sink_id=self.sink_id,
            )
        return state.epoch

    def _open_consumer(self, rt: _Runtime) -> None:
        if rt.consumer is not None:
            return
        config = consumer_config(
            self._producer_config,
            bootstrap_servers=self._bootstrap_servers,
            group_id=self.marker_group,
        )
        # The marker is read as committed, not waiting for stable offsets (KIP-447): under
        # read_committed librdkafka's committed() asks for them, and Apache Kafka answers
        # UNSTABLE_OFFSET_COMMIT while any transaction holding a marker of this group is open —
        # so recovery's first read (and the watcher's, and `laminar status`), made before its
        # EndTxn completes that very prepared transaction, would wait until the broker aborts it.
        # A pending marker is not returned, so this never reports an epoch not committed. A read
        # that decides a write follows init_transactions, which returns once the previous
        # transaction is complete; `last_committed_epoch` adds what this instance committed.
        config["isolation.level"] = "read_uncommitted"
        try:
            rt.consumer = Consumer(config)
            rt.group_metadata = rt.consumer.consumer_group_metadata()
        except KafkaException as e:
            raise self._error(e, "init_transactions", None, rt) from e

    def _open_producer(self, rt: _Runtime) -> None:
        """A new producer: topic check, ``init_transactions`` (fences every older producer with
        this transactional id, and aborts their open transactions)."""
        self._close_producer(rt)
        config = build_producer_config(
            self._producer_config,
            bootstrap_servers=self._bootstrap_servers,
            transactional_id=self.sink_id,
            transaction_timeout_ms=self._transaction_timeout_ms,
            stats_cb=rt.on_stats,
            error_cb=rt.on_error,
            on_delivery=rt.on_delivery,
        )
        try:
            producer = Producer(config)
        except KafkaException as e:
            raise self._error(e, "init_transactions", None, rt) from e
        except (TypeError, ValueError) as e:
            raise ConfigError(
                f"invalid producer_config: {self._scrub(str(e))}", sink_id=self.sink_id
            ) from e
        rt.producer = producer
        rt.client_errors.clear()
        rt.stats_json = None
        self._check_topic(rt)
        self._retrying(rt, "init_transactions", None, self._init_timeout_s)
        rt.identity_changed()
        rt.identity_warned = False

    def _reinit_producer(self, rt: _Runtime) -> None:
        self._open_producer(rt)

    def _close_producer(self, rt: _Runtime) -> None:
        producer, rt.producer = rt.producer, None
        if producer is None:
            return
        with contextlib.suppress(KafkaException, RuntimeError, BufferError):
            producer.purge(in_queue=True, in_flight=True, blocking=False)
            producer.poll(0)
        # Dropping the last reference destroys the handle; an open transaction is left to the
        # broker's timeout or the next init_transactions (which aborts it).
        del producer

    def _check_topic(self, rt: _Runtime) -> None:
        """The topic exists (listing all topics never auto-creates one) and the brokers answer."""
        try:
            metadata = rt.producer.list_topics(timeout=self._init_timeout_s)
        except KafkaException as e:
            rt.producer.poll(0)  # serve error_cb: authentication failures arrive there
            raise self._connection_error(e, rt) from e
        topic = metadata.topics.get(self._topic)
        if topic is None:
            raise ConfigError(
                f"topic {self._topic!r} does not exist on {self._bootstrap_servers}; create it "
                f"(e.g. kafka-topics.sh --create --topic {self._topic} --partitions N "
                "--replication-factor 3) — Laminar never creates topics",
                sink_id=self.sink_id,
            )
        if topic.error is not None:
            raise self._error(KafkaException(topic.error), "metadata", None, rt)

    def _connection_error(self, e: KafkaException, rt: _Runtime) -> LaminarError:
        for seen in reversed(rt.client_errors):
            if seen.code() in AUTH_CODES:
                return self._error(KafkaException(seen), "init_transactions", None, rt)
        detail = ""
        for seen in reversed(rt.client_errors):
            if seen.code() in _CONNECTION_CODES and seen.code() != KafkaError._ALL_BROKERS_DOWN:
                detail = f"; last error: {describe(seen, self._context(None))}"
                break
        return FatalError(
            f"could not reach the Kafka cluster at bootstrap.servers={self._bootstrap_servers} "
            f"within init_timeout_s={self._init_timeout_s:g} s ({self._scrub(str(e))}{detail}); "
            "check the address, that the brokers run, and the security settings "
            "(security.protocol, sasl.*, ssl.*)",
            sink_id=self.sink_id,
        )

    # -- the last committed epoch: marker, identity, witness (docs/protocol.md §1) -------------

    @property
    def identity_group(self) -> str:
        """The consumer group whose committed offset on (topic, 0) is the sink's identity: "this
        sink has started here and may have committed epochs" (docs/protocol.md §1)."""
        return f"{self.marker_group}.identity"

    @property
    def recorded_history(self) -> str:
        """Why a record outside Kafka says this sink has written before (a decision row in
        ``laminar.txn_state``, set by recovery), or ``""``. With it, a sink whose marker *and*
        identity groups are gone (deleted by hand, expired) is not taken as new: the witness
        reads the topic (docs/protocol.md §1)."""
        return str(getattr(self, "_recorded_history", ""))

    @recorded_history.setter
    def recorded_history(self, why: str) -> None:
        self._recorded_history = why
        if self._rt is not None:
            self._rt.without_marker = None  # decide again with what is now known

    @property
    def witness_max_records(self) -> int:
        """How many records per partition the witness may read when the marker is lost (-1: no
        limit); default `LAMINAR_KAFKA_WITNESS_MAX_RECORDS`, else 1,000,000."""
        chosen: int | None = getattr(self, "_witness_max_records", None)
        if chosen is not None:
            return chosen
        text = os.environ.get(WITNESS_MAX_RECORDS_ENV, "").strip()
        try:
            return int(text) if text else _WITNESS_MAX_RECORDS
        except ValueError:
            raise ConfigError(
                f"{WITNESS_MAX_RECORDS_ENV}={text!r} is not a whole number of records",
                sink_id=self.sink_id,
            ) from None

    @witness_max_records.setter
    def witness_max_records(self, value: int) -> None:
        if not isinstance(value, int) or value < -1:
            raise ConfigError(
                f"witness_max_records must be a number of records >= 0, or -1 (no limit), "
                f"not {value!r}",
                sink_id=self.sink_id,
            )
        self._witness_max_records: int | None = value

    @property
    def startup_read(self) -> StartupRead | None:
        """How the last committed epoch was last found (``None`` before the first read)."""
        return getattr(self, "_startup_read", None)

    def _read_last_committed(self, rt: _Runtime, *, stable: bool = False) -> int | None:
        """The last committed epoch by docs/protocol.md §1's rule: the marker; without it, the
        identity, the producer epoch and the watermarks say whether the bounded witness runs.
        An epoch this instance committed itself counts even before its marker reads back."""
        writer = rt.producer is not None
        marker = self._read_marker(rt, stable=stable)
        known = self.tracker.last_committed_epoch
        if known is not None and (marker is None or marker < known):
            marker = known
        if marker is not None:
            read = self._ensure_identity() if writer else ReadStats()
            self._startup_read = StartupRead("marker", marker, read)
            return marker
        cached = rt.without_marker
        if cached is not None and (cached[1] or not writer):
            return cached[0]
        answer = self._without_marker(rt, writer)
        rt.without_marker = (answer, writer)
        return answer

    def _read_marker(self, rt: _Runtime, *, stable: bool = False) -> int | None:
        """The marker group's committed offset on (topic, 0): the last committed epoch.

        Never a *stable* read (KIP-447): that would wait out the timeout of a transaction that
        another writer — one that fenced this instance, or one that died and that recovery is
        about to complete with EndTxn — holds open. Both paths answer the last committed value
        (a pending one is never returned): ``stable`` (right after this instance's
        InitProducerId, which completed whatever its transactional id had in flight, so nothing
        is pending) reads through the marker consumer (``isolation.level=read_uncommitted``,
        see `_open_consumer`); otherwise the wire client's OffsetFetch without
        ``require_stable``, falling back to the consumer for security settings the wire client
        does not speak."""
        if not stable:
            try:
                client = self._log_client()
            except UnsupportedSecurityError:
                client = None
            if client is not None:
                try:
                    with client:
                        found = client.committed_offset(self.marker_group, self._topic, 0)
                except KafkaLogError as e:
                    raise self._wire_failure("read the marker", e) from e
                return None if found is None else found[0]
        if rt.consumer is None:
            self._open_consumer(rt)
        try:
            (committed,) = rt.consumer.committed(
                [TopicPartition(self._topic, 0)], timeout=self._init_timeout_s
            )
        except KafkaException as e:
            rt.consumer.poll(0)
            raise self._error(e, "init_transactions", None, rt, hint="reading the marker") from e
        if committed.error is not None:
            raise self._error(
                KafkaException(committed.error), "init_transactions", None, rt, hint="marker"
            )
        return int(committed.offset) if committed.offset >= 0 else None

    def _log_client(self) -> KafkaLogClient:
        security = ClientSecurity.from_config(self._producer_config)
        return KafkaLogClient(
            self._bootstrap_servers,
            timeout=self._init_timeout_s,
            client_id=f"laminar-sink-{self.sink_id}"[:200],
            security=security,
        )

    def _wire_failure(self, what: str, error: KafkaLogError) -> FatalError:
        return FatalError(
            f"could not {what} of topic {self._topic!r}: {self._scrub(str(error))}",
            sink_id=self.sink_id,
        )

    def _without_marker(self, rt: _Runtime, writer: bool) -> int | None:
        """No marker: the identity (and, for the writer, the producer epoch InitProducerId
        returned) says whether the sink has history; only then the witness reads the topic."""
        where = f"group {self.marker_group} has no committed offset on {self._topic}[0]"
        try:
            client = self._log_client()
        except UnsupportedSecurityError as e:
            self._startup_read = StartupRead("unreadable", None)
            log.warning(
                "sink %s: %s and laminar's wire client cannot connect (%s): neither the "
                "identity nor the witness can be read; the sink is taken as new "
                "(docs/protocol.md §8)",
                self.sink_id,
                where,
                e,
            )
            return None
        try:
            with client:
                identity = client.committed_offset(self.identity_group, self._topic, 0)
                if identity is not None:
                    history = f"its identity ({self.identity_group}) is recorded"
                elif self.recorded_history:
                    history = self.recorded_history
                else:
                    epoch = self._producer_identity(rt)[1] if writer else -1
                    history = (
                        f"no identity, but the transaction coordinator knew the transactional "
                        f"id (producer epoch {epoch})"
                        if epoch > 0
                        else ""
                    )
                if not history:
                    log.info(
                        "sink %s: %s, no identity and %s: a new sink; the topic is not read",
                        self.sink_id,
                        where,
                        "a new transactional id (producer epoch 0)"
                        if writer
                        else "no producer opened to ask the transaction coordinator",
                    )
                    answer, source = None, "new"
                else:
                    topics = shape.recorded_topics(identity[1] if identity else None)
                    why = f"{where} but {history}"
                    answer, source = self._witness(client, why, topics), "witness"
                if writer and identity is None:
                    self._record_identity(client)
                self._startup_read = StartupRead(source, answer, client.stats)
        except KafkaLogError as e:
            raise self._wire_failure("read the identity and witness", e) from e
        return answer

    def _witness(
        self, client: KafkaLogClient, why: str, topics: list[str] | None = None
    ) -> int | None:
        """The bounded witness (docs/protocol.md §1, step 5) over the home topic and every
        other topic the identity lists; `FatalError` if not conclusive."""
        limit = self.witness_max_records
        started = time.monotonic()
        found = client.witness(
            self._topic, self.sink_id, max_records=limit, first_window=_WITNESS_FIRST_WINDOW
        )
        for topic in topics or ():
            if topic == self._topic:
                continue
            more = client.witness(
                topic, self.sink_id, max_records=limit, first_window=_WITNESS_FIRST_WINDOW
            )
            found = shape.merge_witness(found, more)
        read = found.read
        done = (
            f"the witness read {read.records} record(s) ({read.bytes} bytes, {read.fetches} "
            f"fetches) of {found.nonempty} non-empty partition(s) out of {found.partitions} in "
            f"{time.monotonic() - started:.2f} s"
        )
        if not found.conclusive:
            raise FatalError(
                f"sink {self.sink_id}: {why}; {done} and found "
                + (f"epoch {found.epoch}" if found.epoch is not None else "no record of this sink")
                + f", but partitions {list(found.undecided)} hold more than "
                f"witness_max_records={limit} records after the last one it read: the last "
                "committed epoch cannot be proven. Raise the limit (KafkaSink.witness_max_records "
                f"or {WITNESS_MAX_RECORDS_ENV}; -1 reads everything) and start again",
                sink_id=self.sink_id,
            )
        log.warning(
            "sink %s: %s; %s and concludes %s",
            self.sink_id,
            why,
            done,
            f"epoch {found.epoch} is the last committed"
            if found.epoch is not None
            else "no epoch of this sink is in the topic",
        )
        return found.epoch

    def _ensure_identity(self) -> ReadStats:
        """Records the identity if missing (checked once per process and sink)."""
        key = (self._bootstrap_servers, self._topic, self.sink_id)
        if key in _IDENTIFIED:
            return ReadStats()
        try:
            client = self._log_client()
        except UnsupportedSecurityError:
            return ReadStats()
        try:
            with client:
                if client.committed_offset(self.identity_group, self._topic, 0) is None:
                    self._record_identity(client)
        except KafkaLogError as e:
            raise self._wire_failure("record the sink's identity", e) from e
        _IDENTIFIED.add(key)
        return client.stats

    def _record_topics(self, topics: list[str]) -> None:
        """Adds ``topics`` to the identity's list of the topics this sink writes besides its
        home topic, before any record goes there: start-up recovery then witnesses them too
        (docs/protocol.md §1, "Several topics")."""
        try:
            client = self._log_client()
        except UnsupportedSecurityError:
            return  # no identity either: docs/protocol.md §8
        try:
            with client:
                found = client.committed_offset(self.identity_group, self._topic, 0)
                metadata = found[1] if found else None
                listed = shape.recorded_topics(metadata)
                if not set(topics) <= set(listed):
                    now = time.time_ns() // 1_000_000
                    self._record_identity(
                        client,
                        shape.identity_metadata(
                            shape.since_of(metadata, now),
                            [*listed, *topics],
                            sink_id=self.sink_id,
                            limit=shape.metadata_limit(
                                self._bootstrap_servers, self._producer_config, self._init_timeout_s
                            ),
                        ),
                    )
        except KafkaLogError as e:
            raise self._wire_failure("record the sink's topics in its identity", e) from e
        _IDENTIFIED.update((self._bootstrap_servers, t, self.sink_id) for t in topics)

    def _record_identity(self, client: KafkaLogClient, metadata: str | None = None) -> None:
        if metadata is None:
            metadata = json.dumps({"laminar": 1, "since_ms": time.time_ns() // 1_000_000})
        kept = client.commit_offset(
            self.identity_group, self._topic, 0, 0, metadata, _IDENTITY_RETENTION_MS
        )
        if not kept:
            log.warning(
                "sink %s: the broker offers no OffsetCommit version with retention_time_ms "
                "(v2-v4): the identity (group %s) expires after offsets.retention.minutes like "
                "the marker (docs/protocol.md §1)",
                self.sink_id,
                self.identity_group,
            )
        _IDENTIFIED.add((self._bootstrap_servers, self._topic, self.sink_id))

    # -- in-doubt resolution ------------------------------------------------------------------

    def _resolve_failed(self, rt: _Runtime, epoch: int | None) -> int | None:
        """Drive the core's `KafkaInDoubtMachine` (docs/protocol.md §1): retry a commit that is
        still in flight (librdkafka allows it), else re-initialise the producer, and let the
        marker decide; this method only performs its commands and records the outcome."""
        assert epoch is not None
        commit_in_flight = rt.failed_operation == "commit" and rt.producer is not None
        machine = KafkaInDoubtMachine(self.sink_id, epoch, commit_in_flight)

        def perform(c: Command) -> Event:
            if (event := perform_driver_side(c, log)) is not None:
                return event
            if c.kind == "retry_commit":
                self._retrying(rt, "commit_transaction", epoch, self._commit_timeout_s)
            elif c.kind == "abort_producer":
                self._abort_producer_quietly(rt)
            elif c.kind == "reinit_producer":
                self._reinit_producer(rt)
            elif c.kind == "read_marker":
                return Event.marker(self._read_marker(rt), now_ms())
            else:
                raise FatalError(f"in-doubt resolution: unexpected command {c.kind!r}")
            return Event.ack()

        try:
            drive(machine, perform)
        except FencedError as err:
            # fenced, or refused: the brokers answer but not this producer's commit (Tansu drops
            # a fenced producer's requests), or another instance committed past this epoch
            rt.fenced = err
            raise
        finally:
            committed = machine.committed
            if committed is not None and self.tracker.state.name == "Failed":
                self.tracker.resolve(committed, epoch=epoch)
            if machine.end == "ok" or (machine.end == "refused" and committed is not None):
                rt.failed_operation = None
            self._set_last_committed(machine.marker)
        return self.tracker.last_committed_epoch

    def _settle_after_reinit(self, last: int | None) -> None:
        """After a new producer's init: whatever this instance had open is aborted; an in-doubt
        commit is decided by the marker."""
        tracker = self.tracker
        state = tracker.state
        if state.name in ("Active", "Prepared"):
            tracker.abort_started()
            tracker.abort_ok()
        elif state.name == "Aborting":
            tracker.abort_ok()
        elif state.name == "Committing":
            tracker.commit_failed()
        state = tracker.state
        if state.name == "Failed" and state.epoch is not None:
            tracker.resolve(epoch_committed(last, state.epoch), epoch=state.epoch)
        if self._rt is not None:
            self._rt.failed_operation = None
        self._set_last_committed(last)

    def _set_last_committed(self, last: int | None) -> None:
        if self.tracker.state.name != "Idle":
            return
        known = self.tracker.last_committed_epoch
        if last is not None and (known is None or last > known):
            self.tracker.last_committed_epoch = last

    # -- errors -------------------------------------------------------------------------------

    def _context(self, epoch: int | None) -> ErrorContext:
        return ErrorContext(
            sink_id=self.sink_id,
            bootstrap_servers=self._bootstrap_servers,
            topic=self._topic,
            epoch=epoch,
            secrets=secret_values(self._producer_config),
        )

    def _error(
        self,
        error: BaseException | KafkaError,
        operation: str,
        epoch: int | None,
        rt: _Runtime,
        *,
        hint: str | None = None,
    ) -> LaminarError:
        mapped = map_kafka_error(error, operation, self._context(epoch), hint=hint)
        if isinstance(mapped, FencedError):
            rt.fenced = mapped
        return mapped

    def _scrub(self, text: str) -> str:
        return redact_text(text, secret_values(self._producer_config))


# -- helpers ----------------------------------------------------------------------------------


def _show_key(key: bytes | None) -> str:
    if key is None:
        return "null"
    shown = key[:64].decode("utf-8", "backslashreplace")
    return repr(shown + ("…" if len(key) > 64 else ""))


def _arrow_chunks(data: pa.Table | pa.RecordBatch) -> Iterator[Any]:
    """``data`` in slices of at most ``_CHUNK_ROWS`` rows (zero-copy), so that encoding holds
    one slice's payloads at a time whatever the batch size."""
    if data.num_rows <= _CHUNK_ROWS:
        yield data
        return
    for offset in range(0, data.num_rows, _CHUNK_ROWS):
        yield data.slice(offset, _CHUNK_ROWS)


def _known(config: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """The settings whose values are known now (``laminar.env`` ones are checked later)."""
    if config is None or not isinstance(config, Mapping):
        return config
    return {key: value for key, value in config.items() if not is_deferred(value)}
