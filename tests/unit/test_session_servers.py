"""The test suite's own servers are stopped by the run that started them, in a pytest-xdist worker
too (`tests.fixtures`, ``pytest_sessionfinish``): a worker that reports itself finished is ended by
the controller — a SIGINT 5 s later — and a server whose stop outlasted that was left running
after the run, on the next run's cores."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

INNER_TEST = textwrap.dedent(
    """
    import time
    from pathlib import Path

    STOPPED = Path(__file__).with_name("stopped")


    class SlowToStop:
        '''A server whose stop takes longer than the controller waits for a finished worker.'''

        def stop(self) -> None:
            time.sleep(7)
            STOPPED.write_text("stopped")


    def test_a_session_server(laminar_servers):
        laminar_servers._owned.append(SlowToStop())
    """
)


def test_a_worker_stops_its_servers_before_it_reports_itself_finished(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text('pytest_plugins = ["tests.fixtures"]\n')
    (tmp_path / "test_inner.py").write_text(INNER_TEST)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "1", "-q", "-p", "no:cacheprovider"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "stopped").read_text() == "stopped", result.stdout + result.stderr
