"""The run memo's sweep of ended runs (`laminar.spark._run_memo._drop_stale`) against foreign
files, a planted symlink, an unreadable directory, thousands of files and concurrent drivers:
it deletes only its own files, never through a link, and never loses the memo it writes."""

from __future__ import annotations

import os
import tempfile
import threading
import time
from pathlib import Path

import pytest

from laminar.spark import _run_memo


def _age(path: Path) -> None:
    old = time.time() - _run_memo.STALE_S - 60
    os.utime(path, (old, old), follow_symlinks=True)


@pytest.fixture
def memo_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(_run_memo.ENV, str(tmp_path / "runs"))
    return tmp_path / "runs"


def test_the_sweep_deletes_any_old_json_file_not_only_memo_files(memo_dir: Path) -> None:
    """the sweep takes every ``*.json`` older than a day, though memo files are named
    ``<32 hex>.json``. A user who points LAMINAR_RUN_MEMO_DIR at a directory that holds other
    files (a job's config dir, a shared scratch dir) loses their JSON files the next time a
    group's memo is created. The unit test in test_run_memo.py keeps only a ``.txt`` file."""
    memo_dir.mkdir(parents=True)
    settings = memo_dir / "settings.json"
    settings.write_text('{"keep": "me"}')
    _age(settings)
    _run_memo.remember("g", "spark:q1", "run-1", 1, 0)
    assert settings.exists(), "a file laminar never wrote was deleted by the memo sweep"


def test_a_planted_symlink_makes_the_sweep_delete_another_directorys_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """the default directory ``<tmp>/laminar-<uid>/runs`` lives in a shared,
    world-writable temp dir, and `remember` uses it without checking it is a directory it owns
    (``mkdir(exist_ok=True)`` accepts a symlink or someone else's directory). Another local user
    who creates ``/tmp/laminar-<uid>/`` first with ``runs`` a symlink into the victim's files
    has every ``*.json`` there older than a day deleted by the victim's next Spark run. (Before
    7e201cb the memo only ever wrote one hash-named file.) Simulated here with one user."""
    monkeypatch.delenv(_run_memo.ENV, raising=False)
    shared_tmp = tmp_path / "tmp"
    monkeypatch.setattr(tempfile, "tempdir", str(shared_tmp))
    victim = tmp_path / "victim-project"
    victim.mkdir()
    precious = victim / "pipeline.json"
    precious.write_text('{"months": "of work"}')
    _age(precious)
    planted = shared_tmp / f"laminar-{os.getuid()}"
    planted.mkdir(parents=True, mode=0o777)
    (planted / "runs").symlink_to(victim)

    _run_memo.remember("g", "spark:q1", "run-1", 1, 0)
    assert precious.exists(), "the memo sweep followed a planted symlink and deleted a file"


def test_a_directory_that_cannot_be_listed_loses_the_memo(
    memo_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """the sweep is a side job, but an OSError from listing the directory (a
    directory with -r, mode 0300: writable, not listable) is caught by `remember`'s write
    handler, so the memo itself is not written and every commit of the run starts up. As root
    chmod does not bite, so the listing failure is injected with Path.iterdir."""
    memo_dir.mkdir(parents=True)

    def unreadable(self: Path) -> None:
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "iterdir", unreadable)
    _run_memo.remember("g", "spark:q1", "run-1", 7, 100)
    assert _run_memo.recall("g", "spark:q1", "run-1") == (7, 100)


def test_thousands_of_files_cost_a_new_groups_memo_milliseconds(memo_dir: Path) -> None:
    """20,000 live files; creating a new group's memo (the only time the sweep runs)
    takes well under a second, and a rewrite of an existing group's memo does not sweep."""
    memo_dir.mkdir(parents=True)
    for i in range(20_000):
        (memo_dir / f"{i:032x}.json").write_text("{}")
    started = time.perf_counter()
    _run_memo.remember("new", "spark:q", "run-1", 1, 0)
    sweep = time.perf_counter() - started
    started = time.perf_counter()
    _run_memo.remember("new", "spark:q", "run-1", 2, 0)
    rewrite = time.perf_counter() - started
    assert sweep < 1.0, f"{sweep:.3f} s"
    assert rewrite < sweep, (rewrite, sweep)
    assert len(list(memo_dir.iterdir())) == 20_001


def test_concurrent_drivers_sweeping_at_once_lose_no_live_memo(memo_dir: Path) -> None:
    """16 threads (drivers) create their groups' memos at once over 500 stale files;
    no error, every live memo is recalled, every stale file is gone, no scratch file left."""
    memo_dir.mkdir(parents=True)
    for i in range(500):
        stale = memo_dir / f"{i:032x}.json"
        stale.write_text("{}")
        _age(stale)
    errors: list[BaseException] = []

    def driver(n: int) -> None:
        try:
            for round_ in range(5):
                _run_memo.remember(f"g{n}-{round_}", f"spark:q{n}", "run", n, round_)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=driver, args=(n,)) for n in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for n in range(16):
        for round_ in range(5):
            assert _run_memo.recall(f"g{n}-{round_}", f"spark:q{n}", "run") == (n, round_)
    names = sorted(p.name for p in memo_dir.iterdir())
    assert len(names) == 80
    assert not any(name.startswith(".memo-") for name in names)


def test_a_symlinked_memo_file_is_unlinked_not_its_target(memo_dir: Path) -> None:
    """a stale ``*.json`` symlink in the memo directory is removed as a link; the file it
    points at stays."""
    memo_dir.mkdir(parents=True)
    target = memo_dir.parent / "elsewhere.json"
    target.write_text("{}")
    _age(target)
    (memo_dir / ("0" * 32 + ".json")).symlink_to(target)
    _run_memo.remember("g", "spark:q1", "run-1", 1, 0)
    assert target.exists()
