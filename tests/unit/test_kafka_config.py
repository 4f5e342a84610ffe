"""KafkaSink configuration: what Laminar adds, what it refuses by name, what it never shows."""

from __future__ import annotations

import pickle
from typing import Any

import pytest

import laminar
from laminar._core import marker_group
from laminar.errors import ConfigError, IllegalStateError
from laminar.kafka._config import (
    build_producer_config,
    consumer_config,
    secret_values,
    validate_producer_config,
)

SASL = {
    "security.protocol": "SASL_SSL",
    "sasl.mechanisms": "PLAIN",
    "sasl.username": "alice",
    "sasl.password": "hunter2-secret",
}


def validate(config: dict[str, Any] | None, **kw: Any) -> dict[str, Any]:
    return validate_producer_config(
        config, bootstrap_servers="b:9092", transactional_id="tid", **kw
    )


def noop(*_: Any) -> None:
    return None


def build(config: dict[str, Any], **kw: Any) -> dict[str, Any]:
    kw.setdefault("transaction_timeout_ms", None)
    return build_producer_config(
        config,
        bootstrap_servers="b:9092",
        transactional_id="tid",
        stats_cb=noop,
        error_cb=noop,
        on_delivery=noop,
        **kw,
    )


@pytest.mark.parametrize(
    ("config", "setting"),
    [
        ({"enable.idempotence": False}, "enable.idempotence"),
        ({"enable.idempotence": "false"}, "enable.idempotence"),
        ({"acks": 1}, "acks"),
        ({"acks": "0"}, "acks"),
        ({"request.required.acks": "1"}, "request.required.acks"),
        ({"transactional.id": "other"}, "transactional.id"),
        ({"bootstrap.servers": "elsewhere:9092"}, "bootstrap.servers"),
        ({"statistics.interval.ms": 0}, "statistics.interval.ms"),
        ({"stats_cb": "not callable"}, "stats_cb"),
    ],
)
def test_settings_that_break_exactly_once_are_refused_by_name(
    config: dict[str, Any], setting: str
) -> None:
    with pytest.raises(ConfigError, match=f"producer_config {setting}="):
        validate(config)


@pytest.mark.parametrize(
    "config",
    [
        {"acks": "all"},
        {"acks": -1},
        {"enable.idempotence": True},
        {"transactional.id": "tid"},
        {"bootstrap.servers": "b:9092"},
        {"linger.ms": 50, "compression.type": "gzip"},
    ],
)
def test_compatible_settings_pass(config: dict[str, Any]) -> None:
    assert validate(config) == config


def test_transaction_timeout_keyword_and_setting_must_agree() -> None:
    with pytest.raises(ConfigError, match=r"transaction\.timeout\.ms"):
        validate({"transaction.timeout.ms": 1000}, transaction_timeout_ms=2000)
    assert validate({"transaction.timeout.ms": 2000}, transaction_timeout_ms=2000)


def test_laminar_adds_only_what_exactly_once_requires() -> None:
    user = {"linger.ms": 20, **SASL}
    before = dict(user)
    config = build(user)
    assert user == before  # the user's dict is not touched
    for key, value in user.items():
        assert config[key] == value
    added = set(config) - set(user)
    assert added == {
        "bootstrap.servers",
        "transactional.id",
        "enable.idempotence",
        "acks",
        "statistics.interval.ms",
        "stats_cb",
        "error_cb",
        "on_delivery",
        "delivery.report.only.error",
    }
    assert config["enable.idempotence"] is True
    assert config["acks"] == "all"


def test_user_callbacks_are_chained_after_laminars() -> None:
    calls: list[str] = []
    config = build_producer_config(
        {
            "stats_cb": lambda s: calls.append("user-stats"),
            "on_delivery": lambda e, m: calls.append("user-dr"),
        },
        bootstrap_servers="b:9092",
        transactional_id="tid",
        transaction_timeout_ms=None,
        stats_cb=lambda s: calls.append("stats"),
        error_cb=noop,
        on_delivery=lambda e, m: calls.append("dr"),
    )
    config["stats_cb"]("{}")
    config["on_delivery"](None, None)
    assert calls == ["stats", "user-stats", "dr", "user-dr"]
    # with their own delivery callback, the user keeps success reports
    assert "delivery.report.only.error" not in config


def test_user_statistics_interval_is_kept() -> None:
    assert build({"statistics.interval.ms": 5000})["statistics.interval.ms"] == 5000


def test_the_marker_consumer_connects_like_the_producer() -> None:
    config = consumer_config(
        {"linger.ms": 5, "compression.type": "lz4", **SASL},
        bootstrap_servers="b:9092",
        group_id=marker_group("tid"),
    )
    assert config["group.id"] == "laminar.tid"
    assert config["sasl.password"] == "hunter2-secret"
    assert "linger.ms" not in config
    assert "compression.type" not in config
    assert config["isolation.level"] == "read_committed"


def test_secret_values_are_collected() -> None:
    assert secret_values(SASL) == ("hunter2-secret",)


def test_sink_arguments_are_checked() -> None:
    with pytest.raises(ConfigError, match="topic"):
        laminar.KafkaSink("b:9092", "bad topic!", "tid")
    with pytest.raises(ConfigError, match="transactional_id"):
        laminar.KafkaSink("b:9092", "t", "")
    with pytest.raises(ConfigError, match="value_format"):
        laminar.KafkaSink("b:9092", "t", "tid", value_format="avro")
    with pytest.raises(ConfigError, match=r"enable\.idempotence"):
        laminar.KafkaSink("b:9092", "t", "tid", producer_config={"enable.idempotence": False})


def test_repr_and_properties_never_show_secrets() -> None:
    sink = laminar.KafkaSink("b:9092", "t", "tid", key="id", producer_config=SASL)
    assert "hunter2-secret" not in repr(sink)
    assert sink.producer_config["sasl.password"] == "***"
    assert sink.marker_group == "laminar.tid"
    assert sink.transactional_id == "tid"


def test_the_sink_pickles_as_configuration_without_a_client() -> None:
    sink = laminar.KafkaSink("b:9092", "t", "tid", key="id", producer_config={"linger.ms": 5})
    copy = pickle.loads(pickle.dumps(sink))
    assert repr(copy) == repr(sink)
    assert copy.transaction_state == laminar.TransactionState.Idle()


def test_lifecycle_calls_out_of_order_are_illegal_without_touching_the_network() -> None:
    sink = laminar.KafkaSink("127.0.0.1:1", "t", "tid")
    sink._rt = __import__("laminar.kafka._runtime", fromlist=["_Runtime"])._Runtime()
    sink._rt.producer = object()  # never used: the state check comes first
    with pytest.raises(IllegalStateError, match="begin_transaction"):
        sink.write(None)
    with pytest.raises(IllegalStateError):
        sink.prepare_transaction()


def test_producer_config_does_not_replace_the_key_column() -> None:
    sink = laminar.KafkaSink(
        "b:9092", "orders", "tx", key="id", producer_config={"message.max.bytes": 20_000}
    )
    assert sink.key == "id"


def test_a_participant_is_a_copy_with_its_own_id_and_client_defaults_under_the_users() -> None:
    base = laminar.KafkaSink(
        "b:9092",
        "orders",
        "orders-tx",
        key="id",
        producer_config={"linger.ms": 5, "reconnect.backoff.ms": 50},
    )
    defaults = {"reconnect.backoff.ms": 20, "statistics.interval.ms": 20}
    part = base.as_participant(3, defaults)
    assert type(part) is laminar.KafkaSink
    assert part.sink_id == part.transactional_id == "orders-tx.p3"
    assert (part.topic, part.key, part.marker_group) == ("orders", "id", "laminar.orders-tx.p3")
    config = part.client_settings().producer_config
    assert (config["linger.ms"], config["reconnect.backoff.ms"]) == (5, 50)  # the user's win
    assert config["statistics.interval.ms"] == 20
    assert base.sink_id == "orders-tx"  # the base is untouched
    assert "statistics.interval.ms" not in base.client_settings().producer_config
