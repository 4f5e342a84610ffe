"""`laminar.spark._run_memo`: a memo is only ever handed back to the same group, query and run
(docs/protocol.md §4, "A run's start-up, once"); anything else — forgotten, another run or
owner, a damaged or foreign file — is no memo, and the commit starts up."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from laminar.spark import _run_memo


@pytest.fixture(autouse=True)
def memo_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(_run_memo.ENV, str(tmp_path / "runs"))
    return tmp_path / "runs"


def test_the_same_run_gets_its_start_back_and_nothing_else_does() -> None:
    _run_memo.remember("g", "spark:q1", "run-1", 7, 100)
    assert _run_memo.recall("g", "spark:q1", "run-1") == (7, 100)
    assert _run_memo.recall("g", "spark:q1", "run-2") is None, "a new run starts up"
    assert _run_memo.recall("g", "spark:q2", "run-1") is None, "another query starts up"
    assert _run_memo.recall("other", "spark:q1", "run-1") is None, "another group has none"


def test_forget_drops_it_and_a_later_remember_replaces_it() -> None:
    _run_memo.remember("g", "spark:q1", "run-1", 7, 100)
    _run_memo.forget("g")
    assert _run_memo.recall("g", "spark:q1", "run-1") is None
    _run_memo.forget("g")  # nothing to forget: no error
    _run_memo.remember("g", "spark:q1", "run-1", 8, 100)
    _run_memo.remember("g", "spark:q1", "run-2", 9, 0)
    assert _run_memo.recall("g", "spark:q1", "run-1") is None
    assert _run_memo.recall("g", "spark:q1", "run-2") == (9, 0)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "not json",
        "[]",
        '{"version": "0.0.0-other", "group": "g", "owner": "spark:q1", '
        '"run": "run-1", "generation": 7, "epoch_base": 100}',
        '{"generation": "x"}',
    ],
)
def test_a_damaged_or_foreign_file_is_no_memo(memo_dir: Path, text: str) -> None:
    _run_memo.remember("g", "spark:q1", "run-1", 7, 100)
    (file,) = memo_dir.glob("*.json")
    file.write_text(text)
    assert _run_memo.recall("g", "spark:q1", "run-1") is None


def test_a_directory_that_cannot_be_written_is_no_memo(memo_dir: Path) -> None:
    memo_dir.parent.joinpath("runs").write_text("a file where the directory should be")
    _run_memo.remember("g", "spark:q1", "run-1", 7, 100)  # logged, not raised
    assert _run_memo.recall("g", "spark:q1", "run-1") is None


def test_creating_a_groups_file_drops_files_of_runs_that_ended(memo_dir: Path) -> None:
    """A driver that runs queries for months keeps one file per live group, not one per group
    it ever ran: files not rewritten for `STALE_S` (and a killed writer's scratch file) go when
    another group's file is created; a live run's file and foreign files stay."""
    _run_memo.remember("ended", "spark:q1", "run-1", 1, 0)
    _run_memo.remember("live", "spark:q2", "run-1", 2, 0)
    scratch = memo_dir / ".memo-killed"
    scratch.write_text("{")
    foreign = memo_dir / "notes.txt"
    foreign.write_text("not a memo")
    old = time.time() - _run_memo.STALE_S - 60
    for path in (_run_memo._path("ended"), scratch, foreign):
        os.utime(path, (old, old))
    _run_memo.remember("live", "spark:q2", "run-1", 3, 0)  # a rewrite creates nothing: no sweep
    assert _run_memo.recall("ended", "spark:q1", "run-1") == (1, 0)
    _run_memo.remember("new", "spark:q3", "run-1", 4, 0)
    assert _run_memo.recall("ended", "spark:q1", "run-1") is None
    assert not scratch.exists()
    assert foreign.exists()
    assert _run_memo.recall("live", "spark:q2", "run-1") == (3, 0)
    assert _run_memo.recall("new", "spark:q3", "run-1") == (4, 0)
