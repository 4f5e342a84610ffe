"""The client time-outs derived from a KafkaSink's budgets (the core's ``protocol::retry``, bound
as `laminar._core.kafka_timeouts` / `attempt_next`; docs/kafka.md "Budgets"): the values at the
defaults and at their limits, a user's setting winning, the settings librdkafka would refuse named
at once, and the producer and marker consumer configurations carrying them."""

from __future__ import annotations

import re
from typing import Any

import pytest

import laminar
from laminar._core import attempt_next, kafka_timeouts, postgres_answer_timeout
from laminar.errors import ConfigError
from laminar.kafka._config import (
    build_producer_config,
    client_timeouts,
    consumer_config,
    validate_producer_config,
)

DERIVED = {
    "socket.timeout.ms": 3750,
    "socket.connection.setup.timeout.ms": 1000,
    "reconnect.backoff.max.ms": 1000,
    "reconnect.backoff.ms": 20,
    "request.timeout.ms": 3000,
    "retry.backoff.ms": 10,
}


def noop(*_: Any) -> None:
    return None


def producer(config: dict[str, Any], **budgets: float) -> dict[str, Any]:
    """The producer configuration of a sink with these budgets (defaults as `KafkaSink`'s)."""
    timeouts = client_timeouts(
        config,
        init_timeout_s=budgets.get("init", 30.0),
        commit_timeout_s=budgets.get("commit", 30.0),
        flush_timeout_s=120.0,
        transaction_timeout_ms=None,
    )
    return build_producer_config(
        config,
        bootstrap_servers="b:9092",
        transactional_id="tid",
        transaction_timeout_ms=None,
        stats_cb=noop,
        error_cb=noop,
        on_delivery=noop,
        timeouts=timeouts,
    )


def test_the_defaults_give_a_hung_broker_seconds_not_librdkafkas_minute() -> None:
    t = kafka_timeouts(30.0, 30.0, 120.0)
    assert (t.request_s, t.setup_s, t.grace_s, t.transaction_ms) == (3.75, 1.0, 1.0, 60_000)
    assert dict(t.librdkafka_settings()) == DERIVED
    assert t.attempt_s(30.0) == 7.5  # two request time-outs
    assert t.attempt_s(5.0) == 5.0  # never more than the bound


def test_the_request_time_out_follows_the_shortest_budget_within_its_limits() -> None:
    assert kafka_timeouts(30.0, 15.0, 120.0).request_s == 2.0  # at least 2 s
    assert kafka_timeouts(600.0, 600.0, 120.0).request_s == 30.0  # at most 30 s
    # below the transaction time-out, as librdkafka requires
    assert kafka_timeouts(30.0, 30.0, 120.0, 1000).request_s == pytest.approx(0.9)


def test_a_users_setting_wins_and_what_derives_from_it_follows() -> None:
    t = kafka_timeouts(30.0, 30.0, 120.0, socket_timeout_ms=20_000)
    assert (t.request_s, t.setup_s, t.attempt_s(30.0)) == (20.0, 2.0, 30.0)
    config = producer({"socket.timeout.ms": 20_000, "reconnect.backoff.max.ms": 50})
    assert config["socket.timeout.ms"] == 20_000
    assert config["reconnect.backoff.max.ms"] == 50
    assert config["socket.connection.setup.timeout.ms"] == 2000  # 20 s / 4, at most 2 s
    assert config["request.timeout.ms"] == 16_000


def test_the_reconnect_back_off_starts_low_under_the_users_ceiling() -> None:
    # librdkafka holds every new connection back for half of reconnect.backoff.ms, and a new
    # client opens one as soon as the bootstrap metadata names the brokers: 50 ms of each
    # producer's and marker reader's start-up at librdkafka's 100 ms
    assert producer({})["reconnect.backoff.ms"] == 20
    assert producer({"reconnect.backoff.ms": 250})["reconnect.backoff.ms"] == 250
    # librdkafka refuses a first step above its ceiling: the user's setting wins, the derived
    # one follows it (the core's rule)
    capped = producer({"reconnect.backoff.max.ms": 8})
    assert (capped["reconnect.backoff.ms"], capped["reconnect.backoff.max.ms"]) == (8, 8)
    as_text = producer({"reconnect.backoff.max.ms": "8"})
    assert (as_text["reconnect.backoff.ms"], as_text["reconnect.backoff.max.ms"]) == (8, "8")
    assert producer({"reconnect.backoff.ms": 50.0})["reconnect.backoff.max.ms"] == 1000
    raised = producer({"reconnect.backoff.ms": 5000})
    assert (raised["reconnect.backoff.ms"], raised["reconnect.backoff.max.ms"]) == (5000, 5000)
    consumer = consumer_config(
        {"reconnect.backoff.ms": 5000},
        bootstrap_servers="b:9092",
        group_id="g",
        timeouts=client_timeouts(
            {"reconnect.backoff.ms": 5000},
            init_timeout_s=30.0,
            commit_timeout_s=30.0,
            flush_timeout_s=120.0,
            transaction_timeout_ms=None,
        ),
    )
    assert (consumer["reconnect.backoff.ms"], consumer["reconnect.backoff.max.ms"]) == (5000, 5000)


@pytest.mark.parametrize(
    ("config", "named"),
    [
        (
            {"reconnect.backoff.ms": 5000, "reconnect.backoff.max.ms": 10},
            "reconnect.backoff.ms=5000",
        ),
        ({"reconnect.backoff.ms": "soon"}, "reconnect.backoff.ms='soon'"),
        ({"reconnect.backoff.max.ms": -1}, "reconnect.backoff.max.ms=-1"),
        ({"reconnect.backoff.max.ms": 3_600_001}, "reconnect.backoff.max.ms=3600001"),
        # librdkafka reads C's octal and hex: "010" is 8 ms there
        ({"reconnect.backoff.ms": 9, "reconnect.backoff.max.ms": "010"}, "max.ms='010'"),
        ({"reconnect.backoff.ms": "0x10"}, "reconnect.backoff.ms='0x10'"),
        ({"reconnect.backoff.ms": "\u00b2"}, "reconnect.backoff.ms="),
        ({"reconnect.backoff.ms": "\u0665\u0660"}, "reconnect.backoff.ms="),
        ({"reconnect.backoff.ms": 50.5}, "reconnect.backoff.ms=50.5"),
    ],
)
def test_a_reconnect_back_off_librdkafka_refuses_is_a_config_error_naming_it(
    config: dict[str, Any], named: str
) -> None:
    with pytest.raises(ConfigError, match=re.escape(named)):
        producer(config)


def test_the_producer_and_the_marker_consumer_carry_the_derived_settings() -> None:
    config = producer({})
    assert {k: config[k] for k in DERIVED} == DERIVED
    consumer = consumer_config(
        {}, bootstrap_servers="b:9092", group_id="g", timeouts=kafka_timeouts(30.0, 30.0, 120.0)
    )
    # librdkafka's request.timeout.ms is the producer's acknowledgement time-out only
    assert {k: consumer.get(k) for k in DERIVED} == {
        **DERIVED,
        "request.timeout.ms": None,
        "retry.backoff.ms": None,
    }
    # the budgets of the tests' failover writers: 2 s requests, 1 s set-ups
    assert producer({}, commit=15.0)["socket.timeout.ms"] == 2000


@pytest.mark.parametrize(
    ("config", "setting"),
    [
        ({"socket.timeout.ms": "soon"}, "socket.timeout.ms"),
        ({"socket.timeout.ms": 5}, "socket.timeout.ms"),
        ({"socket.timeout.ms": 400_000}, "socket.timeout.ms"),
        ({"socket.timeout.ms": 59_950}, "socket.timeout.ms"),  # within 100 ms of the 60 s txn
        ({"socket.connection.setup.timeout.ms": 999}, "socket.connection.setup.timeout.ms"),
    ],
)
def test_a_time_out_librdkafka_would_refuse_is_refused_when_the_sink_is_made(
    config: dict[str, Any], setting: str
) -> None:
    with pytest.raises(ConfigError, match=setting.replace(".", r"\.")):
        laminar.KafkaSink("b:9092", "t", "tid", producer_config=config)
    with pytest.raises(ConfigError, match=setting.replace(".", r"\.")):
        validate_producer_config(config, bootstrap_servers="b:9092", transactional_id="tid")


def test_a_socket_time_out_beside_the_sinks_transaction_time_out_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"socket\.timeout\.ms=9950"):
        laminar.KafkaSink(
            "b:9092",
            "t",
            "tid",
            transaction_timeout_ms=10_000,
            producer_config={"socket.timeout.ms": 9950},
        )


@pytest.mark.parametrize(
    ("call", "retriable", "silent", "ran_out", "attempt", "expected"),
    [
        ("send_offsets_to_transaction", True, True, True, 1, "replace"),  # no broker answered
        ("abort_transaction", True, True, True, 1, "replace"),
        ("init_transactions", True, True, True, 1, "retry"),  # a new producer: resumed
        ("commit_transaction", True, True, True, 1, "retry"),  # in doubt: stays on its producer
        ("send_offsets_to_transaction", True, True, False, 1, "retry"),  # refused at once
        ("send_offsets_to_transaction", True, False, True, 3, "retry"),  # the cluster answered
        ("send_offsets_to_transaction", True, False, True, 4, "give_up"),  # past the retries
        ("commit_transaction", False, False, False, 1, "give_up"),  # not retriable
    ],
)
def test_what_follows_a_failed_attempt(
    call: Any, retriable: bool, silent: bool, ran_out: bool, attempt: int, expected: str
) -> None:
    assert (
        attempt_next(
            call,
            retriable=retriable,
            silent=silent,
            ran_out=ran_out,
            attempt=attempt,
            retries=3,
            time_left=True,
        )
        == expected
    )


def test_the_postgres_answer_deadline_is_the_statement_budget() -> None:
    assert postgres_answer_timeout(30.0) == 30.0
    with pytest.raises(ConfigError, match="statement_timeout_s"):
        laminar.PostgresSink("postgresql://u@h/db", "t", statement_timeout_s=0)
    with pytest.raises(ConfigError, match="statement_timeout_s"):
        laminar.PostgresSink("postgresql://u@h/db", "t", statement_timeout_s=float("inf"))
