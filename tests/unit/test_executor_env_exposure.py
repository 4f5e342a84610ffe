"""Which credentials handed to executors through ``spark.executorEnv.NAME`` Spark shows in full
(`laminar.readiness.exposed_executor_env`), the warning `laminar.spark` logs for them, and the
variables a query's settings name (`laminar._settings.env_names`, `SinkOptions.env_names`).
Spark's own redaction is what the e2e test on the cluster reads
(tests/e2e/test_spark_cluster_secrets.py); here only the rule that mirrors it."""

from __future__ import annotations

import logging
from typing import Any

import pytest

import laminar
import laminar.spark
from laminar._settings import env_names
from laminar.readiness import SPARK_REDACTION_REGEX, exposed_executor_env
from laminar.spark.options import parse_options

PW = "Hunter2-pw"


def conf(**variables: str) -> dict[str, str]:
    return {f"spark.executorEnv.{k}": v for k, v in variables.items()}


def names(found: list[Any]) -> list[str]:
    return [v.name for v in found]


def test_a_dsn_with_a_password_under_a_plain_name_is_shown() -> None:
    c = conf(ORDERS_PG_DSN=f"postgresql://app:{PW}@db/shop", PYSPARK_PYTHON="/venv/bin/python")
    found = exposed_executor_env(c)
    assert names(found) == ["ORDERS_PG_DSN"]
    assert found[0].why == "its value holds a password"
    assert PW not in found[0].message()
    assert "spark.redaction.regex" in found[0].message()


@pytest.mark.parametrize(
    "variables",
    [
        {"ORDERS_PG_DSN_SECRET": f"postgresql://app:{PW}@db/shop"},  # the name: redacted
        {"ORDERS_PG_PASSWORD": PW},
        {"ORDERS_PG_DSN": f"host=db user=app password={PW}"},  # the value's password=: redacted
        {"ORDERS_PG_DSN": "postgresql://app@db/shop", "PGPASSFILE": "/etc/laminar/pgpass"},
        {"KAFKA_TOKEN": PW},
    ],
)
def test_what_spark_redacts_or_holds_no_secret_is_not_flagged(
    variables: dict[str, str],
) -> None:
    assert exposed_executor_env(conf(**variables), ["ORDERS_PG_DSN"]) == []


def test_a_variable_a_sink_reads_is_flagged_unless_it_evidently_holds_no_secret() -> None:
    c = conf(KAFKA_SASL=PW, PG="postgresql://app@db/shop", BROKERS="k1:9092, k2:9093", X=PW)
    found = exposed_executor_env(c, ["KAFKA_SASL", "PG", "BROKERS"])
    assert names(found) == ["KAFKA_SASL"]
    assert found[0].why == "a sink reads a setting from it"


def test_a_name_that_reads_as_a_credential_is_flagged() -> None:
    found = exposed_executor_env(conf(KAFKA_PW=PW, DB_PASSWD=PW, API_KEY_ID="x", PW_X="y"))
    assert names(found) == ["DB_PASSWD", "KAFKA_PW", "PW_X"]


def test_the_sessions_redaction_regex_is_the_one_applied() -> None:
    c = conf(ORDERS_PG_DSN=f"postgresql://app:{PW}@db/shop")
    assert exposed_executor_env({**c, "spark.redaction.regex": "(?i)secret|dsn"}) == []
    # one Python cannot compile (Java's syntax) covers nothing: the variable is flagged
    found = exposed_executor_env({**c, "spark.redaction.regex": r"(?i)\p{Alpha}dsn"})
    assert names(found) == ["ORDERS_PG_DSN"]
    assert SPARK_REDACTION_REGEX == r"(?i)secret|password|token|access[.]?key"  # Spark's default


class FakeConf:
    def __init__(self, entries: dict[str, str]) -> None:
        self.getAll = entries  # a property in pyspark 4


class FakeSession:
    def __init__(self, entries: dict[str, str]) -> None:
        self.conf = FakeConf(entries)


def test_warn_exposed_credentials_logs_each_one(caplog: pytest.LogCaptureFixture) -> None:
    session = FakeSession(conf(ORDERS_PG_DSN=f"postgresql://app:{PW}@db/shop", SASL="x"))
    with caplog.at_level(logging.WARNING, logger="laminar.spark"):
        found = laminar.spark.warn_exposed_credentials(
            session,
            options={
                "postgres.dsn.env": "ORDERS_PG_DSN",
                "postgres.table": "t",
                "kafka.bootstrap.servers": "k:9092",
                "topic": "t",
                "kafka.sasl.password.env": "SASL",
            },
        )
    assert names(found) == ["ORDERS_PG_DSN", "SASL"]
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2
    assert all(PW not in m for m in messages)


def test_a_session_without_a_readable_conf_gives_nothing() -> None:
    assert laminar.spark.warn_exposed_credentials(object()) == []


def test_the_variables_a_query_names() -> None:
    options = parse_options(
        {
            "postgres.dsn.env": "PG",
            "postgres.table": "t",
            "kafka.bootstrap.servers": "k:9092",
            "topic": "t",
            "kafka.sasl.password.env": "SASL",
            "laminar.state.dsn.env": "STATE",
        },
        check_sinks=False,
    )
    assert options.env_names() == ["PG", "SASL", "STATE"]
    sinks = [
        laminar.PostgresSink(laminar.env("ORDERS_PG"), "public.orders"),
        laminar.KafkaSink(
            laminar.env("BROKERS"),
            "orders",
            "orders-eo",
            producer_config={"sasl.password": laminar.env("KAFKA_PW"), "acks": "all"},
        ),
    ]
    assert env_names(sinks) == ["BROKERS", "KAFKA_PW", "ORDERS_PG"]
    assert env_names(laminar.PostgresSink("postgresql://app@db/shop", "t")) == []
