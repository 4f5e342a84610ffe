"""`KafkaSink`'s configuration: the constructor's checks, the settings read in the writing
process (``laminar.env``, `ClientSettings`), the public properties, and `PartSettings`: what
every part of the sink is given, built once — the resolved settings and the error wording
(`PartSettings.error`, docs/errors.md)."""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

from confluent_kafka import KafkaError

from laminar._core import (
    KafkaTimeouts,
    identity_group,
    is_internal_kafka_topic,
    kafka_participant_id,
    marker_group,
)
from laminar._redact import SECRET, redact_config, redact_text
from laminar._settings import Setting, is_deferred, resolve, resolve_mapping
from laminar._sink import TransactionalSink
from laminar.errors import (
    ConfigError,
    LaminarError,
)
from laminar.kafka._avro import check_avro_settings
from laminar.kafka._config import (
    client_timeouts,
    secret_values,
    validate_producer_config,
)
from laminar.kafka._errors import (
    ErrorContext,
    map_kafka_error,
)
from laminar.kafka._runtime import _Runtime
from laminar.kafka.registry import AvroOptions
from laminar.kafka.registry import secret_values as secret_values_of_registry

_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]{1,249}")
#: Printable ASCII only: a NUL or non-ASCII transactional id passes librdkafka's checks but fails
#: every transactional request, as a retriable error, forever.
_TRANSACTIONAL_ID = re.compile(r"[\x20-\x7e]+")
_Sink = TypeVar("_Sink", bound="_SinkBase")
#: How far back (records per partition) the witness looks for this sink's records, unless
#: `KafkaSink.witness_max_records` or the environment variable below says otherwise.
_WITNESS_MAX_RECORDS = 1_000_000
WITNESS_MAX_RECORDS_ENV = "LAMINAR_KAFKA_WITNESS_MAX_RECORDS"


@dataclass(frozen=True)
class ClientSettings:
    """A `KafkaSink`'s cluster as its clients reach it, resolved in this process
    (`KafkaSink.client_settings`). ``producer_config`` may hold secrets: the repr masks them."""

    #: ``bootstrap.servers``, read (``laminar.env``) and checked.
    bootstrap_servers: str
    #: The producer settings as librdkafka takes them (secrets included: never log them).
    producer_config: dict[str, Any]
    #: How long a commit (or an ``EndTxn`` completing one) may take before its outcome is in doubt.
    commit_timeout_s: float
    #: How long connecting and reading the marker may take at start-up.
    init_timeout_s: float

    def __repr__(self) -> str:
        return (
            f"ClientSettings(bootstrap_servers={self.bootstrap_servers!r}, "
            f"producer_config={redact_config(self.producer_config)!r}, "
            f"commit_timeout_s={self.commit_timeout_s!r}, init_timeout_s={self.init_timeout_s!r})"
        )


@dataclass(frozen=True)
class PartSettings:
    """What the parts of one `KafkaSink` read — its clients (`laminar.kafka._clients.Clients`),
    its produce path (`_produce.Producing`), its witness (`_witness.Witness`) — built once per
    process when the sink's settings are resolved (`_SinkBase._parts`), with the sink's error
    wording: nothing in it changes while the sink lives, and no part reads the sink itself.
    What does change (the live clients, what their callbacks reported) is the `_Runtime`.
    ``producer_config`` may hold secrets: the repr masks them."""

    sink_id: str
    topic: str
    bootstrap_servers: str
    producer_config: dict[str, Any]
    key: str | None
    value_column: str | None
    init_timeout_s: float
    commit_timeout_s: float
    flush_timeout_s: float
    retries: int
    transaction_timeout_ms: int | None
    #: Every client time-out, derived from the budgets by the core (docs/kafka.md "Budgets").
    timeouts: KafkaTimeouts
    marker_group: str
    identity_group: str

    def __repr__(self) -> str:
        return (
            f"PartSettings(sink_id={self.sink_id!r}, topic={self.topic!r}, "
            f"bootstrap_servers={self.bootstrap_servers!r}, "
            f"producer_config={redact_config(self.producer_config)!r})"
        )

    def context(self, epoch: int | None) -> ErrorContext:
        """What an error of this sink names (docs/errors.md), its secrets to mask."""
        return ErrorContext(
            sink_id=self.sink_id,
            bootstrap_servers=self.bootstrap_servers,
            topic=self.topic,
            epoch=epoch,
            secrets=secret_values(self.producer_config),
        )

    def error(
        self,
        error: BaseException | KafkaError,
        operation: str,
        epoch: int | None,
        rt: _Runtime,
        *,
        hint: str | None = None,
        topic: str | None = None,
    ) -> LaminarError:
        """``error`` as a `LaminarError` (`map_kafka_error`: the one classification); a fencing
        is kept in ``rt``. ``topic``: the topic the failed record went to (a routed row's own,
        named instead of the sink's)."""
        ctx = self.context(epoch)
        if topic:
            ctx = dataclasses.replace(ctx, topic=topic)
        mapped = map_kafka_error(error, operation, ctx, hint=hint, reached=rt.reached)
        if mapped.failure_kind == "fenced":
            rt.fenced = mapped
        return mapped

    def scrub(self, text: str) -> str:
        """``text`` with the producer settings' secrets masked."""
        return redact_text(text, secret_values(self.producer_config))


class _SinkBase(TransactionalSink):
    """What every piece of `KafkaSink` reads: its settings, its runtime and its errors."""

    #: A prepared Kafka transaction dies with its producer (`TransactionalSink._machine`).
    _durable_prepare: ClassVar[bool] = False

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
        # -- Avro with a Schema Registry (laminar.kafka._avro, docs/kafka.md) ---------------
        key_format: str | None = None,
        schema_registry: Mapping[str, Any] | None = None,
        avro: AvroOptions | None = None,
        key_avro: AvroOptions | None = None,
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
        if is_internal_kafka_topic(topic):
            raise ConfigError(
                f"KafkaSink topic {topic!r} is one of Kafka's internal topics (the brokers' own "
                "state), which no client may write; name a topic of your own"
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
        if value_format not in (None, "json", "raw", "spark", "avro"):
            raise ConfigError(
                f"value_format must be 'json', 'raw', 'spark' or 'avro', not {value_format!r}"
            )
        check_avro_settings(value_format, key_format, key, schema_registry, avro, key_avro)
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
        self._part_settings: PartSettings | None = None
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
        self._key_format = key_format
        self._registry_setting = dict(schema_registry) if schema_registry is not None else None
        self._avro = avro
        self._key_avro = key_avro

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

    @property
    def _timeouts(self) -> KafkaTimeouts:
        """Every client time-out, derived from the sink's budgets by the core's rule (the user's
        explicit settings winning): docs/kafka.md, "Budgets"."""
        return client_timeouts(
            self._producer_config,
            init_timeout_s=self._init_timeout_s,
            commit_timeout_s=self._commit_timeout_s,
            flush_timeout_s=self._flush_timeout_s,
            transaction_timeout_ms=self._transaction_timeout_ms,
        )

    def client_settings(self) -> ClientSettings:
        """What a client of this sink's cluster needs, read in this process (``laminar.env``
        settings resolved, then checked): how the drivers reach the cluster (``EndTxn``, the
        readiness check, the registry of `laminar status`). The producer settings may hold
        secrets (SASL passwords): its repr masks them; never log its fields."""
        bootstrap, config = self._resolve_settings()
        return ClientSettings(bootstrap, dict(config), self._commit_timeout_s, self._init_timeout_s)

    def as_participant(
        self: _Sink, part: int, client_defaults: Mapping[str, Any] | None = None
    ) -> _Sink:
        """A copy of this sink as scale-out participant ``part``: transactional id
        ``<tid>.p<part>`` (`kafka_participant_id`), so its own epoch marker (consumer group
        ``laminar.<tid>.p<part>``), with ``client_defaults`` under its producer settings where
        these have none. Nothing live is copied (as when pickled)."""
        copy = object.__new__(type(self))
        copy.__setstate__(self.__getstate__())
        copy._sink_id = kafka_participant_id(self.sink_id, part)
        copy._resolved = None
        copy._part_settings = None
        copy._producer_setting = {**(client_defaults or {}), **self._producer_setting}
        return copy

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
    def key_format(self) -> str | None:
        """``"avro"`` (the key column in Avro) or None (docs/serialization.md, "Kafka keys")."""
        return self._key_format

    @property
    def schema_registry(self) -> dict[str, Any] | None:
        """The Schema Registry client's settings (Avro), secrets masked (``***``)."""
        if self._registry_setting is None:
            return None
        secrets = secret_values_of_registry(self._registry_setting)
        return {
            k: (SECRET if not is_deferred(v) and str(v) in secrets else v)
            for k, v in self._registry_setting.items()
        }

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

    # -- the last committed epoch (laminar.kafka._witness, docs/protocol.md §1) --------------

    @property
    def identity_group(self) -> str:
        """The consumer group whose committed offset on (topic, 0) is the sink's identity: "this
        sink has started here and may have committed epochs" (docs/protocol.md §1)."""
        return identity_group(self.sink_id)

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

    # -- errors -------------------------------------------------------------------------------

    def _parts(self) -> PartSettings:
        """What the sink's parts read (`PartSettings`), built once in this process."""
        parts = self._part_settings
        if parts is None:
            bootstrap, config = self._resolve_settings()
            parts = PartSettings(
                sink_id=self.sink_id,
                topic=self._topic,
                bootstrap_servers=bootstrap,
                producer_config=config,
                key=self._key,
                value_column=self._value_column,
                init_timeout_s=self._init_timeout_s,
                commit_timeout_s=self._commit_timeout_s,
                flush_timeout_s=self._flush_timeout_s,
                retries=self._retries,
                transaction_timeout_ms=self._transaction_timeout_ms,
                timeouts=self._timeouts,
                marker_group=self.marker_group,
                identity_group=self.identity_group,
            )
            self._part_settings = parts
        return parts


def _known(config: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """The settings whose values are known now (``laminar.env`` ones are checked later)."""
    if config is None or not isinstance(config, Mapping):
        return config
    return {key: value for key, value in config.items() if not is_deferred(value)}
