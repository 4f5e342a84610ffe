"""The options of ``writeStream.format("laminar")`` (docs/spark.md, "The data source"): parsed
and checked where Spark first hands them over (``DataSource.__init__``), in Spark's own option
style — ``kafka.*`` like Spark's Kafka sink, ``postgres.*`` for the table, ``laminar.*`` for the
group.

Secrets never travel as options (Spark shows them in plans, logs and the UI): a DSN or a
password-looking option is a `ConfigError` that names the ``….env`` form to use instead, whose
value is the *name* of an environment variable read on the server (`laminar.env`).
"""

from __future__ import annotations

import csv
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from laminar._core import default_group_id
from laminar._redact import is_secret_key, parse_dsn
from laminar._settings import EnvValue, env
from laminar.errors import ConfigError
from laminar.spark._avro_options import AVRO_KNOWN, AvroSparkOptions, parse_avro_options

if TYPE_CHECKING:
    from laminar.kafka.sink import KafkaSink
    from laminar.postgres.sink import PostgresSink

__all__ = ["SinkOptions", "parse_options"]

#: Options read by laminar itself (the rest of ``kafka.*`` goes to the producer's config).
KNOWN = {
    "kafka.bootstrap.servers": "the brokers, e.g. broker:9092",
    "kafka.topic": "the topic (alias: topic)",
    "topic": "the topic (alias of kafka.topic)",
    "kafka.transactional.id": "the Kafka sink's id (default laminar-<topic>)",
    "kafka.key.column": "the column written as the record key (default: none)",
    "kafka.value.format": "json (the row as a JSON object), raw, spark (Spark's Kafka-sink "
    "shape: key, value, topic, partition, headers) or avro (with schema.registry.url); default: "
    "spark when the DataFrame has exactly that shape, else json",
    "postgres.dsn.env": "the name of the environment variable holding the DSN on the server",
    "postgres.table": "the table, e.g. public.orders",
    "postgres.sink.id": "the PostgreSQL sink's id (default: the qualified table name)",
    "postgres.mode": "append (default: every row is added) or upsert (rows replaced by "
    "postgres.key)",
    "postgres.key": "upsert mode's key: the columns of a unique index of the table, comma-"
    "separated, e.g. window_start,user_id",
    "laminar.group": "the group id (alias: group); default from the sink ids",
    "group": "the group id (alias of laminar.group)",
    "laminar.state.dsn.env": "the decision database's DSN variable (needed without PostgreSQL)",
    "laminar.check.servers": "true (default) or false: check the servers once per process",
}
#: Options Spark itself passes along (never refused).
_SPARK_OWN = {"checkpointlocation", "path", "queryname"}
#: Options that would carry a DSN, refused for their ``.env`` form.
_DSN_KEYS = {"postgres.dsn", "postgres.url", "url", "dsn", "laminar.state.dsn"}


@dataclass(frozen=True)
class SinkOptions:
    """The checked options of one ``format("laminar")`` query (picklable: no secret inside,
    only environment variable names)."""

    bootstrap_servers: str | None = None
    topic: str | None = None
    transactional_id: str | None = None
    key_column: str | None = None
    #: None: Spark's Kafka-sink shape when the batch has exactly it, else JSON (KafkaSink's rule)
    value_format: str | None = None
    producer_config: dict[str, Any] = field(default_factory=dict)
    postgres_dsn_env: str | None = None
    postgres_table: str | None = None
    postgres_sink_id: str | None = None
    #: ``postgres.mode`` and ``postgres.key`` (PostgresSink's ``mode=`` and ``key=``)
    postgres_mode: str = "append"
    postgres_key: tuple[str, ...] | None = None
    state_dsn_env: str | None = None
    group: str | None = None
    check_servers: bool = True
    #: Avro (laminar.spark._avro_options): the key's format, the registry, the records' options
    avro: AvroSparkOptions | None = None

    def check_sinks(self) -> None:
        """The sinks' own checks (topic name, producer settings, table name): `ConfigError`."""
        self.kafka_sinks()
        self.postgres_sinks()

    def kafka_sinks(self) -> list[KafkaSink]:
        """The Kafka sink (none without a topic)."""
        if self.topic is None or self.bootstrap_servers is None:
            return []
        # Imported here: the sinks are built in tasks and in `commit`, not where the options
        # are parsed (a fresh driver-side process per micro-batch: docs/spark.md, Throughput).
        from laminar.kafka.sink import KafkaSink

        return [
            KafkaSink(
                self.bootstrap_servers,
                self.topic,
                self.transactional_id or f"laminar-{self.topic}",
                key=self.key_column,
                value_format=self.value_format,
                producer_config=dict(self.producer_config) or None,
                key_format=self.avro.key_format if self.avro else None,
                schema_registry=self.avro.schema_registry if self.avro else None,
                avro=self.avro.avro if self.avro else None,
                key_avro=self.avro.key_avro if self.avro else None,
            )
        ]

    def postgres_sinks(self) -> list[PostgresSink]:
        """The PostgreSQL sink (none without a table)."""
        if self.postgres_table is None or self.postgres_dsn_env is None:
            return []
        from laminar.postgres.sink import PostgresSink  # lazy: see top

        return [
            PostgresSink(
                env(self.postgres_dsn_env),
                self.postgres_table,
                sink_id=self.postgres_sink_id,
                mode=self.postgres_mode,
                key=None if self.postgres_key is None else list(self.postgres_key),
            )
        ]

    def state_dsn(self) -> EnvValue:
        """Where the decisions are recorded: ``laminar.state.dsn.env``, else the PostgreSQL
        sink's database."""
        name = self.state_dsn_env or self.postgres_dsn_env
        assert name is not None  # parse_options requires one
        return env(name)

    def resolved_state_dsn(self) -> str:
        """`state_dsn` read where the task runs, checked to be a connection string (a
        `ConfigError` naming the option, never quoting the value)."""
        option = "laminar.state.dsn.env" if self.state_dsn_env else "postgres.dsn.env"
        dsn = self.state_dsn().resolve("the decision database (format('laminar'))")
        parse_dsn(dsn, f"format('laminar'): the variable of {option}")
        return dsn

    def env_names(self) -> list[str]:
        """The environment variables the ``….env`` options name (sorted): where the query's
        credentials come from on the driver and the executors."""
        names = {self.postgres_dsn_env, self.state_dsn_env}
        names.update(v.name for v in self.producer_config.values() if isinstance(v, EnvValue))
        return sorted(n for n in names if n is not None)

    def group_id(self, sink_ids: list[str]) -> str:
        """``laminar.group``, else the id `laminar.exactly_once(..., scale_out=True)` gives the
        same sinks (so both ways in share one group's records)."""
        if self.group:
            return self.group
        return default_group_id(sink_ids, scale_out=True)


def _flag(key: str, value: str) -> bool:
    word = value.strip().lower()
    if word in ("true", "1", "yes"):
        return True
    if word in ("false", "0", "no"):
        return False
    raise ConfigError(f"option {key!r} takes true or false, not {value!r}")


def _env_name(key: str, value: str) -> str:
    name = value
    if not name.isascii() or not name.replace("_", "").isalnum() or name[0].isdigit():
        raise ConfigError(
            f"option {key!r} takes the *name* of an environment variable on the Spark server "
            f"(letters, digits, '_'), e.g. ORDERS_PG_DSN; got a value that is not a name"
        )
    return name


def _upsert_options(
    found: Mapping[str, str], table: str | None
) -> tuple[str, tuple[str, ...] | None]:
    """``postgres.mode`` and ``postgres.key``, checked together (PostgresSink's own checks of
    ``mode=``/``key=``, said in options): the mode and the key's column names."""
    mode = found.get("postgres.mode", "append").strip().lower()
    text = found.get("postgres.key")
    if mode not in ("append", "upsert"):
        raise ConfigError(
            f"option 'postgres.mode' takes append (add every row) or upsert (replace rows by "
            f"postgres.key), not {found['postgres.mode']!r}"
        )
    if table is None and ("postgres.mode" in found or text is not None):
        raise ConfigError(
            "options 'postgres.mode' and 'postgres.key' are for a PostgreSQL target: add "
            "postgres.table and postgres.dsn.env, or drop them"
        )
    if text is None:
        if mode == "upsert":
            raise ConfigError(
                "option 'postgres.mode' is upsert: give option 'postgres.key', the column(s) of a "
                "unique index or primary key of the table, comma-separated (e.g. user_id or "
                "window_start,user_id)"
            )
        return mode, None
    if mode != "upsert":
        raise ConfigError(
            "option 'postgres.key' is only used in upsert mode: add option('postgres.mode', "
            "'upsert') to replace rows by key, or drop postgres.key to append"
        )
    # comma-separated, as Spark's list options; a name with a comma goes in double quotes
    names = [n.strip() for n in next(csv.reader([text], skipinitialspace=True), [])]
    if not names or "" in names:
        raise ConfigError(
            f"option 'postgres.key' lists column names separated by commas, e.g. "
            f"window_start,user_id; got {text!r}"
        )
    if len(set(names)) != len(names):
        raise ConfigError(f"option 'postgres.key' names a column twice: {names}")
    return mode, tuple(names)


def parse_options(options: Mapping[str, Any], *, check_sinks: bool = True) -> SinkOptions:
    """Check ``format("laminar")``'s options (keys case-insensitive, as Spark passes them);
    `ConfigError` naming the option and the fix. ``check_sinks=False`` leaves out the sinks'
    own checks (`SinkOptions.check_sinks`: they import the sinks, psycopg and pyarrow), for a
    process that only needs the parsed options."""
    opts = {str(k).lower(): str(v) for k, v in options.items()}
    found: dict[str, Any] = {}
    producer: dict[str, Any] = {}
    for key, value in opts.items():
        if key in _DSN_KEYS:
            fix = "laminar.state.dsn.env" if key.startswith("laminar.") else "postgres.dsn.env"
            raise ConfigError(
                f"option {key!r} would put a DSN (and its password) where Spark logs and shows "
                f"options; use option('{fix}', '<VARIABLE>') with the name of an environment "
                "variable set on the Spark server that holds the DSN"
            )
        if key in AVRO_KNOWN or key.startswith(("schema.registry.", "avro.")):
            continue  # the Avro options: parse_avro_options
        if key.endswith(".env") and key.startswith("kafka.") and key not in KNOWN:
            producer[key[len("kafka.") : -len(".env")]] = env(_env_name(key, value))
            continue
        if is_secret_key(key) and not key.endswith(".env"):
            raise ConfigError(
                f"option {key!r} looks like a secret, and Spark logs and shows options; use "
                f"option('{key}.env', '<VARIABLE>') with the name of an environment variable "
                "set on the Spark server instead"
            )
        if key in KNOWN:
            found[key] = value
        elif key.startswith("kafka."):
            producer[key[len("kafka.") :]] = value
        elif key.startswith(("postgres.", "laminar.")):
            raise ConfigError(
                f"unknown option {key!r}; format('laminar') knows: {', '.join(sorted(KNOWN))}"
            )
        elif key not in _SPARK_OWN:
            continue  # Spark's own and other sources' options pass by, as with Spark's sinks
    topic = found.get("kafka.topic") or found.get("topic")
    bootstrap = found.get("kafka.bootstrap.servers")
    if (topic is None) != (bootstrap is None):
        missing = "kafka.topic" if topic is None else "kafka.bootstrap.servers"
        raise ConfigError(f"a Kafka target needs option {missing!r} too")
    table = found.get("postgres.table")
    dsn_env = found.get("postgres.dsn.env")
    if (table is None) != (dsn_env is None):
        missing = "postgres.table" if table is None else "postgres.dsn.env"
        raise ConfigError(f"a PostgreSQL target needs option {missing!r} too")
    if topic is None and table is None:
        raise ConfigError(
            "format('laminar') needs a target: options kafka.bootstrap.servers + kafka.topic, "
            "and/or postgres.dsn.env + postgres.table"
        )
    postgres_mode, postgres_key = _upsert_options(found, table)
    state_env = found.get("laminar.state.dsn.env")
    if table is None and state_env is None:
        raise ConfigError(
            "a Kafka-only format('laminar') needs option 'laminar.state.dsn.env' (the name of "
            "the environment variable holding the DSN of the PostgreSQL database that records "
            "the decisions)"
        )
    value_format = found.get("kafka.value.format")
    if value_format not in (None, "json", "raw", "spark", "avro"):
        raise ConfigError(
            f"option 'kafka.value.format' takes json, raw, spark or avro, not {value_format!r}"
        )
    avro = parse_avro_options(opts)
    both = (found.get("kafka.topic"), found.get("topic"))
    if None not in both and both[0] != both[1]:
        raise ConfigError(
            f"options 'kafka.topic' ({both[0]!r}) and 'topic' ({both[1]!r}) disagree; give one"
        )
    if found.get("kafka.transactional.id") == "":
        raise ConfigError(
            "option 'kafka.transactional.id' is empty; give an id, or leave the option out for "
            "laminar-<topic>"
        )
    parsed = SinkOptions(
        bootstrap_servers=bootstrap,
        topic=topic,
        transactional_id=found.get("kafka.transactional.id"),
        key_column=found.get("kafka.key.column"),
        value_format=value_format,
        producer_config=producer,
        postgres_dsn_env=None if dsn_env is None else _env_name("postgres.dsn.env", dsn_env),
        postgres_table=table,
        postgres_sink_id=found.get("postgres.sink.id"),
        postgres_mode=postgres_mode,
        postgres_key=postgres_key,
        state_dsn_env=None if state_env is None else _env_name("laminar.state.dsn.env", state_env),
        group=found.get("laminar.group") or found.get("group"),
        check_servers=_flag("laminar.check.servers", found.get("laminar.check.servers", "true")),
        avro=avro if value_format == "avro" or avro.schema_registry or avro.key_format else None,
    )
    if check_sinks:
        parsed.check_sinks()
    return parsed
