"""A benchmark's table on the terminal (past pytest's capture) and its summary as JSON in
``.benchmarks/`` (docs/benchmarks.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

__all__ = ["report"]


def report(pytestconfig: pytest.Config, lines: list[str], name: str, summary: Any) -> None:
    """Print ``lines`` even under capture, and write ``summary`` to ``.benchmarks/<name>``."""
    capture = pytestconfig.pluginmanager.get_plugin("capturemanager")
    reporter = pytestconfig.pluginmanager.get_plugin("terminalreporter")
    if capture is not None and reporter is not None:
        with capture.global_and_fixture_disabled():
            for line in lines:
                reporter.write_line(line)
    out = Path(".benchmarks")
    out.mkdir(exist_ok=True)
    (out / name).write_text(json.dumps(summary, indent=2))
