"""`./dev test`'s workers: a module's tests run in one pytest-xdist worker, under the group
`tests.fixtures.worker_group` names — checked by running pytest as `./dev test` does, since a
pytest or pytest-xdist upgrade can make ``--dist loadgroup`` group nothing without an error."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: A module of quick tests of pure logic (no server).
MODULE = "tests/unit/test_names_persisted.py"


def test_a_module_runs_in_one_worker_under_its_group() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", MODULE, "-n", "2", "--dist", "loadgroup", "-v",
         "-p", "no:cacheprovider"],
        cwd=ROOT, capture_output=True, text=True, check=False, timeout=240,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    ran = re.findall(r"^\[(gw\d+)\] .*PASSED (\S+)", done.stdout, re.M)
    assert len(ran) > 10, done.stdout[-3000:]
    assert {worker for worker, _ in ran} == {ran[0][0]}, ran
    assert all(nodeid.endswith(f"@{MODULE}") for _, nodeid in ran), ran[:3]
