"""Helpers for the Spark Connect e2e tests: client sessions, waiting on queries, reading the stores.

This module is pickled *by value* into the server's Python worker (``register_pickle_by_value``),
so the test-only foreachBatch wrappers defined here run there without the test tree installed.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg

from tests.integration.kafka_fill import settled_committed as read_committed

try:  # registered so that the wrappers below travel by value to the server's Python
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
except ImportError:  # pragma: no cover - pyspark is in the dev extras
    pass


@contextlib.contextmanager
def client(remote: str) -> Iterator[Any]:
    """A Spark Connect client session of its own (stopped at the end)."""
    from pyspark.sql import SparkSession

    session = SparkSession.builder.remote(remote).create()
    try:
        yield session
    finally:
        with contextlib.suppress(Exception):
            session.stop()


#: The variable that holds the test database's DSN in the data-source server's environment (what
#: ``postgres.dsn.env`` / ``laminar.state.dsn.env`` name in the data-source tests).
DS_DSN_VAR = "LAMINAR_TEST_DS_PG_DSN"


@contextlib.contextmanager
def datasource_server(log_dir: Path, env: dict[str, str], log_name: str) -> Iterator[Any]:
    """The Spark Connect server of the ``format("laminar")`` tests (one per run, shared by
    their modules: tests/e2e/conftest.py): ``env`` in its environment (the DSN
    ``postgres.dsn.env`` names), task retries on (``local[4,3]``: 4 slots, a task may fail 3
    times), Spark's Kafka connector and spark-avro, its log in ``log_dir``; the tests skip
    against an external one."""
    import pytest

    from laminar.embedded import SparkConnectServer

    if os.environ.get("LAMINAR_SPARK_REMOTE"):
        pytest.skip("LAMINAR_SPARK_REMOTE is an external server: this module needs its own")
    server = SparkConnectServer(
        master="local[4,3]",
        env=env,
        kafka_connector=True,
        avro_functions=True,
        log_path=log_dir / log_name,
    )
    server.start()
    try:
        yield server
    finally:
        server.stop()


def abandon(session: Any) -> None:
    """Forget a session whose server was killed: stopping it then only closes the channel
    (releasing it would retry against the dead server for minutes)."""
    session.release_session_on_close = False


#: How Spark reports that a new Python worker missed its start-up window: PythonWorkerFactory
#: waits a fixed 10 s (not configurable) for a worker it started (the foreachBatch function's, a
#: data source's driver-side writer or commit) to connect back. On a loaded 2-core machine a
#: worker can miss it; the query then fails before any of laminar's code runs in that worker.
WORKER_STARTUP_TIMEOUTS = (
    "Python worker failed to connect back",
    "Timed out while waiting for the Python worker to connect back",
)


def worker_startup_timeout(error: Any) -> bool:
    """Whether a query's error is Spark's Python worker start-up timeout (nothing else)."""
    return error is not None and any(s in str(error) for s in WORKER_STARTUP_TIMEOUTS)


class RestartingQuery:
    """A streaming query that is restarted from its checkpoint when — and only when — it failed
    with Spark's own Python worker start-up timeout (`WORKER_STARTUP_TIMEOUTS`), as a user's
    restart (or a job scheduler's) would. Any other end (success, a SIGKILLed worker, laminar's
    errors) is the test's to judge, unchanged. What the tests judge afterwards — every row once in
    each store with its exact value — is the same: a restart from the checkpoint replays the
    batch in flight, and replays are part of what laminar makes exactly-once.

    It stands for the `StreamingQuery` (attributes go to the current run); ``restarts`` lists the
    errors that caused a restart (printed, so a run that needed them says so)."""

    def __init__(self, start: Callable[[], Any], *, max_restarts: int = 3) -> None:
        self._start = start
        self._max = max_restarts
        self.restarts: list[str] = []
        self.query = start()

    @property
    def isActive(self) -> bool:  # StreamingQuery's name
        if self.query.isActive:
            return True
        error = self.query.exception()
        if worker_startup_timeout(error) and len(self.restarts) < self._max:
            self.restarts.append(str(error).splitlines()[0][:300])
            print(
                f"[spark] the query failed with Spark's Python worker start-up timeout; "
                f"restarting it from its checkpoint ({len(self.restarts)}/{self._max})",
                flush=True,
            )
            self.query = self._start()
            return True
        return False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.query, name)


def restarting(start: Callable[[], Any]) -> RestartingQuery:
    """``start()`` (a function that starts a streaming query from its checkpoint) as a
    `RestartingQuery`."""
    return RestartingQuery(start)


def wait_for(
    condition: Callable[[], bool],
    *,
    query: Any = None,
    timeout: float = 120.0,
    what: str = "condition",
    interval: float = 0.5,
) -> None:
    """Poll ``condition``; fail with the query's error if it died, or after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not condition():
        if query is not None and not query.isActive:
            error = query.exception()
            if condition():
                return
            raise AssertionError(f"the query stopped while waiting for {what}: {error}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


def wait_terminated(query: Any, timeout: float = 120.0) -> Any:
    """Wait until the query ends (availableNow, a failure or a kill); return its error."""
    deadline = time.monotonic() + timeout
    while query.isActive:
        if time.monotonic() > deadline:
            raise AssertionError(f"the query did not end within {timeout:.0f} s")
        time.sleep(0.25)
    return query.exception()


def stop(query: Any) -> None:
    """Stop a query that may already have ended (or whose server is gone)."""
    with contextlib.suppress(Exception):
        query.stop()


# -- the stores ---------------------------------------------------------------------------------


def pg_ids(dsn: str, table: str, column: str = "id") -> list[int]:
    """Every value of ``column`` in ``table`` (duplicates kept)."""
    with psycopg.connect(dsn) as conn:
        return [int(r[0]) for r in conn.execute(f"SELECT {column} FROM {table}")]


def pg_epoch(dsn: str, sink_id: str) -> int | None:
    """The last committed epoch recorded for ``sink_id``."""
    with psycopg.connect(dsn) as conn:
        exists = conn.execute("SELECT to_regclass('laminar.sink_epochs')").fetchone()
        if exists is None or exists[0] is None:
            return None
        row = conn.execute(
            "SELECT epoch FROM laminar.sink_epochs WHERE sink_id = %s", (sink_id,)
        ).fetchone()
    return None if row is None else int(row[0])


def kafka_ids(bootstrap: str, topic: str) -> list[int]:
    """The ``id`` of every committed record of ``topic`` (JSON values), duplicates kept —
    read with `laminar.kafka.log`, which does not trust the broker's read_committed."""
    return [int(json.loads(r.value)["id"]) for r in read_committed(bootstrap, topic)]


def kafka_epochs(bootstrap: str, topic: str) -> Counter[int]:
    """Committed records per ``laminar.epoch`` header."""
    return Counter(int(r.header("laminar.epoch")) for r in read_committed(bootstrap, topic))


def duplicates(values: list[int]) -> dict[int, int]:
    """Values that occur more than once, with their counts."""
    return {v: n for v, n in Counter(values).items() if n > 1}


def assert_exactly_once(values: list[int], expected: set[int], where: str) -> None:
    """Every expected value exactly once, nothing else."""
    dups = duplicates(values)
    assert not dups, f"{where}: duplicated {len(dups)} values, e.g. {sorted(dups.items())[:5]}"
    got = set(values)
    missing = expected - got
    extra = got - expected
    assert not missing, f"{where}: missing {len(missing)} values, e.g. {sorted(missing)[:10]}"
    assert not extra, f"{where}: unexpected {len(extra)} values, e.g. {sorted(extra)[:10]}"


# -- files for the file source ------------------------------------------------------------------


def write_json_files(directory: Path, first_id: int, files: int, rows_per_file: int) -> int:
    """Write ``files`` JSON-lines files of ``rows_per_file`` orders each, atomically (a file
    appears complete: written aside, then renamed); return the next id."""
    directory.mkdir(parents=True, exist_ok=True)
    next_id = first_id
    for _ in range(files):
        lines = []
        for _ in range(rows_per_file):
            lines.append(json.dumps({"id": next_id, "amount": next_id % 97 + 0.5}))
            next_id += 1
        tmp = directory / f".part-{next_id}.tmp"
        tmp.write_text("\n".join(lines) + "\n")
        os.replace(tmp, directory / f"orders-{next_id:09d}.json")
    return next_id


# -- test-only wrappers that run in the server's Python worker ------------------------------------


class ArmedForeachBatch:
    """Arms laminar's crash points in the worker that runs it, then delegates every batch to
    the real laminar foreachBatch function (``inner``). ``spec`` as in ``LAMINAR_CRASH_AT``
    (counted in that worker process); with ``hold_file`` the point holds (the process sleeps
    with its transaction open, its pid in the file) instead of killing itself."""

    def __init__(self, inner: Any, spec: str, hold_file: str | None = None) -> None:
        self.inner = inner
        self.spec = spec
        self.hold_file = hold_file
        self.armed = False

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "armed": False}

    def __call__(self, df: Any, batch_id: int) -> None:
        if not self.armed:
            from laminar import _faults

            _faults.rearm(self.spec, hold_file=self.hold_file)
            self.armed = True
        self.inner(df, batch_id)


def held_pid(hold_file: Path) -> int | None:
    """The pid a held crash point wrote, once it did."""
    try:
        text = hold_file.read_text().split()
    except FileNotFoundError:
        return None
    return int(text[0]) if text else None


def start_files_query(spark: Any, source: Path, checkpoint: str, function: Any) -> Any:
    """A streaming query over the JSON files in ``source`` (one file per batch, as
    `write_json_files` writes them) into ``foreachBatch(function)``, run to the end of the files
    (a `RestartingQuery`)."""
    orders = (
        spark.readStream.schema("id long, amount double")
        .option("maxFilesPerTrigger", 1)
        .json(str(source))
    )
    return restarting(
        lambda: (
            orders.writeStream.foreachBatch(function)
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )
    )


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting to be reaped does not count)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "State:\tZ" not in status
