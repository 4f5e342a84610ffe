"""``laminar.env``: settings read from the environment of the writing process, never pickled or
shown; and the held crash points used by the Spark crash tests."""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import laminar
from laminar import ConfigError, EnvValue, KafkaSink, PostgresSink

SECRET_DSN = "postgresql://app:Env-S3cret@db.example:5432/shop"


def test_env_is_exported() -> None:
    assert "env" in laminar.__all__
    assert "EnvValue" in laminar.__all__
    assert laminar.env("X") == EnvValue("X")


@pytest.mark.parametrize("name", ["", "1ABC", "A-B", "A B", None])
def test_env_names_must_be_variable_names(name: object) -> None:
    with pytest.raises(ConfigError, match="environment variable"):
        laminar.env(name)  # type: ignore[arg-type]


def test_resolution_reads_the_variable_each_time(monkeypatch: pytest.MonkeyPatch) -> None:
    value = laminar.env("LAMINAR_UNIT_SETTING")
    monkeypatch.setenv("LAMINAR_UNIT_SETTING", "one")
    assert value.resolve("x") == "one"
    monkeypatch.setenv("LAMINAR_UNIT_SETTING", "two")
    assert value.resolve("x") == "two"


def test_missing_or_empty_variables_name_the_variable_and_the_setting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("LAMINAR_UNIT_SETTING", raising=False)
    with pytest.raises(ConfigError, match=r"PostgresSink dsn .*LAMINAR_UNIT_SETTING.*not set"):
        laminar.env("LAMINAR_UNIT_SETTING").resolve("PostgresSink dsn")
    monkeypatch.setenv("LAMINAR_UNIT_SETTING", "")
    with pytest.raises(ConfigError, match="is empty"):
        laminar.env("LAMINAR_UNIT_SETTING").resolve("x")
    assert laminar.env("LAMINAR_UNIT_SETTING", default="d").resolve("x") == "d"


def test_the_repr_never_shows_a_default() -> None:
    assert repr(laminar.env("PW", default="hunter22")) == "laminar.env('PW', default=...)"


def test_postgres_dsn_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LAMINAR_UNIT_DSN", raising=False)
    sink = PostgresSink(laminar.env("LAMINAR_UNIT_DSN"), "orders")  # no variable needed here
    assert sink.dsn == laminar.env("LAMINAR_UNIT_DSN")
    assert "laminar.env('LAMINAR_UNIT_DSN')" in repr(sink)
    shipped = pickle.dumps(sink)
    monkeypatch.setenv("LAMINAR_UNIT_DSN", SECRET_DSN)
    assert b"Env-S3cret" not in shipped
    clone = pickle.loads(shipped)
    assert clone.resolved_dsn == SECRET_DSN  # read in the process that writes
    assert clone.connection_secrets() == ("Env-S3cret",)
    assert "Env-S3cret" not in repr(clone)
    # what was read is not pickled on
    assert b"Env-S3cret" not in pickle.dumps(clone)


def test_a_malformed_dsn_from_the_environment_fails_when_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LAMINAR_UNIT_DSN", "host=x password='Env-S3cret unterminated")
    sink = PostgresSink(laminar.env("LAMINAR_UNIT_DSN"), "orders")
    with pytest.raises(ConfigError, match="malformed dsn") as info:
        _ = sink.resolved_dsn
    assert "Env-S3cret" not in str(info.value)


def test_kafka_settings_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LAMINAR_UNIT_BOOTSTRAP", raising=False)
    sink = KafkaSink(
        laminar.env("LAMINAR_UNIT_BOOTSTRAP"),
        "orders",
        "orders-tx",
        producer_config={
            "security.protocol": "SASL_SSL",
            "sasl.username": "app",
            "sasl.password": laminar.env("LAMINAR_UNIT_KAFKA_PW"),
            "linger.ms": 5,
        },
    )
    shown = repr(sink)
    assert "laminar.env('LAMINAR_UNIT_BOOTSTRAP')" in shown
    assert "LAMINAR_UNIT_KAFKA_PW" not in shown  # a secret key's value is masked, whatever it is
    assert sink.producer_config["sasl.password"] == "***"
    monkeypatch.setenv("LAMINAR_UNIT_BOOTSTRAP", "k1:9092,k2:9092")
    monkeypatch.setenv("LAMINAR_UNIT_KAFKA_PW", "Kafka-S3cret")
    clone = pickle.loads(pickle.dumps(sink))
    assert clone._bootstrap_servers == "k1:9092,k2:9092"
    assert clone._producer_config["sasl.password"] == "Kafka-S3cret"
    assert clone._producer_config["linger.ms"] == 5
    assert b"Kafka-S3cret" not in pickle.dumps(clone)
    client = clone.client_settings()  # the drivers' one interface to the resolved settings
    assert client.bootstrap_servers == "k1:9092,k2:9092"
    assert client.producer_config["sasl.password"] == "Kafka-S3cret"
    assert "Kafka-S3cret" not in repr(client)
    assert "'sasl.password': '***'" in repr(client)
    assert client.commit_timeout_s == 30.0


def test_kafka_settings_read_later_are_checked_like_direct_ones(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LAMINAR_UNIT_ACKS", "1")
    sink = KafkaSink(
        "k:9092", "orders", "orders-tx", producer_config={"acks": laminar.env("LAMINAR_UNIT_ACKS")}
    )
    with pytest.raises(ConfigError, match="acks"):
        _ = sink._producer_config


# -- held crash points ----------------------------------------------------------------------------


def test_a_held_crash_point_records_its_pid_and_waits_to_be_killed(tmp_path: Path) -> None:
    hold = tmp_path / "held"
    code = (
        "from laminar._faults import crash_point\n"
        "crash_point('kafka.after_begin')\n"
        "crash_point('kafka.after_begin')\n"
        "print('passed the point', flush=True)\n"
    )
    env = {**os.environ, "LAMINAR_CRASH_AT": "kafka.after_begin@2"}
    env["LAMINAR_CRASH_HOLD"] = str(hold)
    proc = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while not hold.exists() or not hold.read_text().strip():
            assert proc.poll() is None, "the process ended instead of holding"
            assert time.monotonic() < deadline, "the crash point was never reached"
            time.sleep(0.05)
        assert hold.read_text().split() == [str(proc.pid), "kafka.after_begin"]
        time.sleep(0.2)
        assert proc.poll() is None  # still holding
    finally:
        proc.kill()
        out, _ = proc.communicate()
    assert proc.returncode == -signal.SIGKILL
    assert b"passed the point" not in out
