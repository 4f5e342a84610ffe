"""Secret redaction and the crash-injection hook."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

from laminar._redact import is_secret_key, parse_dsn, redact_config, redact_dsn, redact_text
from laminar.errors import ConfigError


@pytest.mark.parametrize(
    ("dsn", "expected"),
    [
        ("postgresql://app:s3cr3t@db:5432/x", "postgresql://app:***@db:5432/x"),
        ("postgres://app:p%40ss@db/x?sslmode=require", "postgres://app:***@db/x?sslmode=require"),
        ("host=db user=app password=s3cr3t dbname=x", "host=db user=app password=*** dbname=x"),
        ("host=db password='a b\\'c' dbname=x", "host=db password=*** dbname=x"),
        ("host=db sslpassword=k dbname=x", "host=db sslpassword=*** dbname=x"),
        ("postgresql://app@db/x", "postgresql://app@db/x"),
        # a query parameter, its key percent-encoded as libpq accepts it
        ("postgresql://app@db/x?passwor%64=S3cret", "postgresql://app@db/x?passwor%64=***"),
        (
            "postgresql://app@db/x?sslmode=require&password=pw&application_name=a",
            "postgresql://app@db/x?sslmode=require&password=***&application_name=a",
        ),
        (
            "PostgresSink(dsn='postgresql://h/d?%70assword=pw')",
            "PostgresSink(dsn='postgresql://h/d?%70assword=***')",
        ),
    ],
)
def test_dsn_passwords_are_redacted(dsn: str, expected: str) -> None:
    assert redact_dsn(dsn) == expected


def test_config_secrets_are_redacted() -> None:
    config = {
        "bootstrap.servers": "k:9092",
        "sasl.username": "alice",
        "sasl.password": "hunter2",
        "ssl.key.password": "pw",
        "sasl.oauthbearer.client.secret": "cs",
        "sasl.jaas.config": "x",
    }
    out = redact_config(config)
    assert out["bootstrap.servers"] == "k:9092"
    assert out["sasl.username"] == "alice"
    for key in ("sasl.password", "ssl.key.password", "sasl.oauthbearer.client.secret"):
        assert out[key] == "***"
    assert out["sasl.jaas.config"] == "***"
    assert config["sasl.password"] == "hunter2"  # the input is not modified


def test_known_secret_values_are_redacted_from_text() -> None:
    text = "failed: connection to postgresql://u:pw1@h/d refused; token hunter2 rejected"
    assert redact_text(text, ["hunter2"]) == (
        "failed: connection to postgresql://u:***@h/d refused; token *** rejected"
    )


MALFORMED = [
    "postgresql//app:S3CRETxyz@db/orders",  # a missing ':' after the scheme
    "app:S3CRETxyz@db/orders",  # no scheme at all
    "host=db password=S3CRETxyz junk",
    "postgresql://app:S3CRETxyz@db/orders?bogus=1",
    "host=db password='S3CRETxyz",  # unterminated quote
]


@pytest.mark.parametrize("dsn", MALFORMED)
def test_a_malformed_dsn_is_refused_without_quoting_it(dsn: str) -> None:
    """libpq's parse errors quote the rest of the string, password included: the refusal
    names the option and the fix but never the text (hostile pass, stop 21)."""
    with pytest.raises(ConfigError) as info:
        parse_dsn(dsn, "PostgresSink 'orders': dsn")
    message = str(info.value)
    assert "S3CRETxyz" not in message
    assert "malformed dsn" in message
    assert "postgresql://user@host:5432/db" in message


@pytest.mark.parametrize("dsn", MALFORMED)
def test_libpq_parse_errors_are_redacted_in_free_text(dsn: str) -> None:
    with pytest.raises(psycopg.ProgrammingError) as info:
        conninfo_to_dict(dsn)
    assert "S3CRETxyz" not in redact_text(str(info.value))


def test_parse_dsn_returns_the_parameters() -> None:
    assert parse_dsn("postgresql://u:pw@h:5433/d", "x") == {
        "user": "u",
        "password": "pw",
        "host": "h",
        "port": "5433",
        "dbname": "d",
    }


def test_a_java_pem_private_key_option_is_a_secret() -> None:
    assert is_secret_key("ssl.keystore.key")
    assert is_secret_key("kafka.ssl.keystore.key")


def _run_with_crash(spec: str) -> subprocess.CompletedProcess[str]:
    code = (
        "from laminar._faults import crash_point\n"
        "for i in range(3):\n"
        "    print('before', i, flush=True)\n"
        "    crash_point('kafka.after_begin')\n"
        "print('survived', flush=True)\n"
    )
    env = {**os.environ, "LAMINAR_CRASH_AT": spec}
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False
    )


def test_crash_point_kills_on_the_nth_hit() -> None:
    result = _run_with_crash("postgres.after_claim, kafka.after_begin@2")
    assert result.returncode == -signal.SIGKILL
    assert result.stdout.split("\n")[:2] == ["before 0", "before 1"]
    assert "survived" not in result.stdout


def test_crash_point_is_inert_when_not_armed() -> None:
    result = _run_with_crash("")
    assert result.returncode == 0
    assert "survived" in result.stdout


def test_a_misspelt_crash_point_is_an_error_not_a_no_op() -> None:
    result = _run_with_crash("kafka.after_begun")
    assert result.returncode == 1
    assert "ConfigError" in result.stderr
    assert "'kafka.after_begun' is not a crash point" in result.stderr
    assert "before" not in result.stdout


def test_names_arm_their_points_and_a_numbered_name_of_before_is_refused() -> None:
    from laminar import _faults

    assert _faults._parse("atomic.after_decision@2, kafka.after_begin") == {
        "atomic.after_decision": 2,
        "kafka.after_begin": 1,
    }
    with pytest.raises(ConfigError, match=r"'atomic\.step7' is not a crash point"):
        _faults._parse("atomic.step7")
