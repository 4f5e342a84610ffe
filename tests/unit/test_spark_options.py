"""``format("laminar")``'s options (`laminar.spark.options`): Spark-style keys, secrets only by
environment variable name, a `ConfigError` naming the option and the fix for anything else."""

from __future__ import annotations

import pickle
import re

import pytest

from laminar._settings import EnvValue
from laminar.errors import ConfigError
from laminar.spark.options import parse_options

PG = {"postgres.dsn.env": "ORDERS_PG_DSN", "postgres.table": "public.orders"}
KAFKA = {"kafka.bootstrap.servers": "broker:9092", "kafka.topic": "orders"}


def test_postgres_only_takes_the_dsn_by_variable_name() -> None:
    opts = parse_options({**PG, "checkpointLocation": "/tmp/c"})
    (sink,) = opts.postgres_sinks()
    assert opts.kafka_sinks() == []
    assert sink.sink_id == "public.orders"
    assert opts.state_dsn() == EnvValue("ORDERS_PG_DSN")
    assert opts.group_id([sink.sink_id]) == "public.orders+scale-out"


def test_kafka_options_follow_sparks_kafka_sink() -> None:
    opts = parse_options(
        {
            **KAFKA,
            "kafka.acks": "all",
            "kafka.linger.ms": "5",
            "kafka.sasl.password.env": "KAFKA_PW",
            "kafka.key.column": "id",
            "laminar.state.dsn.env": "STATE_DSN",
        }
    )
    (sink,) = opts.kafka_sinks()
    assert sink.sink_id == "laminar-orders"
    assert sink.topic == "orders"
    assert opts.producer_config == {
        "acks": "all",
        "linger.ms": "5",
        "sasl.password": EnvValue("KAFKA_PW"),
    }
    assert opts.state_dsn() == EnvValue("STATE_DSN")
    # Spark's Kafka-sink shape is detected as KafkaSink detects it (one changed line from
    # format("kafka")); value.format spark/json/raw force one
    assert opts.value_format is None
    assert sink.value_format == "json"  # before a batch shows its shape
    forced = parse_options({**KAFKA, "kafka.value.format": "spark", "laminar.state.dsn.env": "S"})
    assert forced.kafka_sinks()[0].value_format == "spark"


def test_both_targets_make_one_group_and_topic_is_an_alias() -> None:
    options = {**PG, "kafka.bootstrap.servers": "b:9092", "TOPIC": "orders", "group": "g1"}
    opts = parse_options(options)
    assert [s.sink_id for s in opts.kafka_sinks()] == ["laminar-orders"]
    assert opts.group_id(["public.orders", "laminar-orders"]) == "g1"
    assert parse_options(PG | KAFKA).group_id(["b", "a"]) == "a+b"


def test_the_options_pickle_without_a_secret() -> None:
    opts = parse_options({**PG, **KAFKA, "kafka.ssl.key.password.env": "KEY_PW"})
    assert b"KEY_PW" in pickle.dumps(opts)
    assert pickle.loads(pickle.dumps(opts)) == opts


def test_an_oidc_cluster_takes_its_client_secret_from_the_server_environment() -> None:
    """OAUTHBEARER's OIDC method as options: the endpoint is an address, shown like any option;
    the client secret only through ``….env`` (docs/kafka.md, "Secured clusters")."""
    oidc = {
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "OAUTHBEARER",
        "kafka.sasl.oauthbearer.method": "oidc",
        "kafka.sasl.oauthbearer.token.endpoint.url": "https://idp.example/token",
        "kafka.sasl.oauthbearer.client.id": "orders",
    }
    with pytest.raises(ConfigError, match=re.escape("kafka.sasl.oauthbearer.client.secret.env")):
        parse_options({**PG, **KAFKA, **oidc, "kafka.sasl.oauthbearer.client.secret": "pw"})
    opts = parse_options(
        {**PG, **KAFKA, **oidc, "kafka.sasl.oauthbearer.client.secret.env": "IDP_SECRET"}
    )
    assert b"https://idp.example/token" in pickle.dumps(opts)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"postgres.dsn": "host=db password=x", "postgres.table": "t"}, "'postgres.dsn.env'"),
        ({"url": "jdbc:postgresql://db/x", "postgres.table": "t"}, "'postgres.dsn.env'"),
        ({**KAFKA, "laminar.state.dsn": "host=db"}, "'laminar.state.dsn.env'"),
        ({**PG, **KAFKA, "kafka.sasl.password": "pw"}, "kafka.sasl.password.env"),
        ({**PG, "password": "pw"}, "password.env"),
        ({"postgres.table": "t"}, "'postgres.dsn.env' too"),
        ({"postgres.dsn.env": "X"}, "'postgres.table' too"),
        ({"kafka.topic": "t"}, "'kafka.bootstrap.servers' too"),
        ({"kafka.bootstrap.servers": "b:9092"}, "'kafka.topic' too"),
        ({}, "needs a target"),
        (KAFKA, "laminar.state.dsn.env"),
        ({**PG, "postgres.tabel": "x"}, "unknown option 'postgres.tabel'"),
        ({**PG, "postgres.dsn.env": "host=db password=x"}, "the \\*name\\* of an environment"),
        ({**PG, "laminar.check.servers": "maybe"}, "takes true or false"),
        ({**PG, **KAFKA, "kafka.value.format": "protobuf"}, "json, raw, spark or avro"),
        ({**PG, **KAFKA, "topic": "other"}, "'kafka.topic' .* and 'topic' .* disagree"),
        ({**PG, **KAFKA, "kafka.transactional.id": ""}, "'kafka.transactional.id' is empty"),
        ({**PG, "postgres.dsn.env": "ORDERS_PG_DSN "}, "the \\*name\\* of an environment"),
        ({**PG, "postgres.dsn.env": "\u00c4BC"}, "the \\*name\\* of an environment"),
        ({**PG, **KAFKA, "kafka.enable.idempotence": "false"}, "enable.idempotence"),
    ],
)
def test_bad_options_name_the_option_and_the_fix(options: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        parse_options(options)
    assert "password=x" not in str(info.value)
    assert "pw" not in str(info.value).replace("password", "")


# -- upsert mode (issue 29): postgres.mode and postgres.key -----------------------------------


def test_upsert_mode_and_key_reach_the_postgres_sink() -> None:
    opts = parse_options({**PG, "postgres.mode": "upsert", "postgres.key": "window_start, user_id"})
    (sink,) = opts.postgres_sinks()
    assert (sink.mode, sink.key) == ("upsert", ("window_start", "user_id"))
    assert (opts.postgres_mode, opts.postgres_key) == ("upsert", ("window_start", "user_id"))
    # one column; a name with a comma in double quotes; the mode's case does not matter
    one = parse_options({**PG, "POSTGRES.MODE": "Upsert", "postgres.key": "id"})
    assert one.postgres_sinks()[0].key == ("id",)
    quoted = parse_options({**PG, "postgres.mode": "upsert", "postgres.key": '"a,b",c'})
    assert quoted.postgres_key == ("a,b", "c")
    # append is the default, and may be said
    for options in (PG, {**PG, "postgres.mode": "append"}):
        (sink,) = parse_options(options).postgres_sinks()
        assert (sink.mode, sink.key) == ("append", None)
    assert pickle.loads(pickle.dumps(opts)) == opts


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({**PG, "postgres.mode": "upsert"}, "give option 'postgres.key'"),
        ({**PG, "postgres.key": "id"}, "only used in upsert mode"),
        ({**PG, "postgres.mode": "append", "postgres.key": "id"}, "only used in upsert mode"),
        ({**PG, "postgres.mode": "merge", "postgres.key": "id"}, "append .* or upsert"),
        ({**PG, "postgres.mode": "upsert", "postgres.key": ""}, "separated by commas"),
        ({**PG, "postgres.mode": "upsert", "postgres.key": "a,,b"}, "separated by commas"),
        ({**PG, "postgres.mode": "upsert", "postgres.key": "a, a"}, "names a column twice"),
        (
            {**KAFKA, "laminar.state.dsn.env": "S", "postgres.mode": "upsert"},
            "for a PostgreSQL target",
        ),
    ],
)
def test_bad_upsert_options_name_the_option_and_the_fix(
    options: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_options(options)
