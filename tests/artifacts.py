"""What `./dev build` (scripts/build.sh) built for the tests and benchmarks — the hotpath harness
and the wheel — read from ``.laminar/artifacts.json``. Nothing is built here: a test that needs an
artifact finds it, or fails as a set-up failure that says how to build it."""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MANIFEST = ROOT / ".laminar" / "artifacts.json"
#: What the artifacts are built from: a newer file here makes them stale.
SOURCES = (ROOT / "rust", ROOT / "Cargo.toml", ROOT / "Cargo.lock", ROOT / "pyproject.toml")


class ArtifactError(Exception):
    """An artifact is missing or older than its sources: a set-up failure, not a test's."""


def _newest_source() -> tuple[float, Path | None]:
    newest, which = 0.0, None
    for source in SOURCES:
        files = [source] if source.is_file() else source.rglob("*") if source.exists() else []
        for path in files:
            if path.is_file() and path.stat().st_mtime > newest:
                newest, which = path.stat().st_mtime, path
    return newest, which


def artifact(name: str) -> Path:
    """The path of artifact ``name`` (``hotpath``, ``wheel``) as ./dev build recorded it."""
    how = "run ./dev build (./dev test and ./dev bench run it before any test)"
    try:
        recorded = json.loads(MANIFEST.read_text())
    except FileNotFoundError:
        raise ArtifactError(f"set-up: {MANIFEST.relative_to(ROOT)} is missing; {how}") from None
    path = Path(recorded.get(name, ""))
    if not recorded.get(name) or not path.exists():
        raise ArtifactError(f"set-up: the {name} artifact ({path}) was not built; {how}")
    newest, which = _newest_source()
    if newest > path.stat().st_mtime:
        raise ArtifactError(
            f"set-up: the {name} artifact ({path}) is older than {which}; {how} again"
        )
    return path
