"""The `laminar` command line's interface (argument handling; the commands run against real
servers in tests/integration/test_cli_*)."""

from __future__ import annotations

import pytest

from laminar.cli import EXIT_USAGE, main


def test_demo_options_are_checked_before_anything_starts(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # (the demo itself runs in tests/e2e/test_demo.py)
    assert main(["demo", "--duration", "0"]) == 2
    assert "--duration" in capsys.readouterr().err
    with pytest.raises(SystemExit) as raised:
        main(["demo", "--crash-at", "nowhere"])
    assert raised.value.code == 2


@pytest.mark.parametrize(
    "argv", [["status"], ["recover"], ["resolve", "laminar:orders:7:0", "--commit"]]
)
def test_commands_need_a_decision_database(
    argv: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LAMINAR_PG_DSN", raising=False)
    assert main(argv) == EXIT_USAGE
    assert "--dsn" in capsys.readouterr().err


def test_kafka_config_takes_key_value(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status", "--dsn", "dbname=x", "--kafka-config", "novalue"]) == EXIT_USAGE
    assert "KEY=VALUE" in capsys.readouterr().err


def test_a_malformed_kafka_config_item_is_not_echoed(capsys: pytest.CaptureFixture[str]) -> None:
    # ':' typed for '=': the item holds a secret and must not be printed back
    code = main(["status", "--dsn", "dbname=x", "--kafka-config", "sasl.password:S3cretB"])
    assert code == EXIT_USAGE
    err = capsys.readouterr().err
    assert "KEY=VALUE" in err
    assert "S3cretB" not in err


def test_resolve_needs_exactly_one_decision() -> None:
    with pytest.raises(SystemExit) as raised:
        main(["resolve", "laminar:orders:7:0"])
    assert raised.value.code == 2
    with pytest.raises(SystemExit):
        main(["resolve", "laminar:orders:7:0", "--commit", "--rollback"])


def test_no_command_prints_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "demo" in capsys.readouterr().out
