"""The `laminar` command line's interface (the commands themselves land in later issues)."""

from __future__ import annotations

import pytest

from laminar.cli import EXIT_NOT_IMPLEMENTED, main


def test_demo_says_coming_soon(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo"]) == 0
    assert "coming soon" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv", [["status"], ["recover"], ["resolve", "laminar:orders:7", "--commit"]]
)
def test_unimplemented_commands_fail_clearly(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == EXIT_NOT_IMPLEMENTED
    assert "not implemented yet" in capsys.readouterr().err


def test_resolve_needs_exactly_one_decision() -> None:
    with pytest.raises(SystemExit) as raised:
        main(["resolve", "laminar:orders:7"])
    assert raised.value.code == 2
    with pytest.raises(SystemExit):
        main(["resolve", "laminar:orders:7", "--commit", "--rollback"])


def test_no_command_prints_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "demo" in capsys.readouterr().out
