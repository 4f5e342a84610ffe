"""Server-side readiness, for real: a Spark Connect server whose Python has no laminar, or another
laminar version, or cannot reach a sink's server, or lacks an environment variable — each fails
before anything is written, with a message that says what to install where or which server.

One dedicated server serves every case: its ``PYSPARK_PYTHON`` is a small script that runs the
interpreter named in a file, and Python workers are neither pooled nor reused
(``spark.python.use.daemon=false``, ``spark.python.worker.reuse=false``), so every worker the
server starts is a fresh process of the interpreter the file names at that moment. The
interpreters are real environments made here: the test environment's dependencies without
laminar, and the same plus a copy of laminar that reports another version.
"""

from __future__ import annotations

import os
import pickle
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest

import laminar
import laminar.spark
from laminar import ConfigError
from laminar.embedded import SparkConnectServer, free_port
from laminar.spark._handoff import VERSION_MISMATCH
from tests.e2e.spark_helpers import (
    assert_exactly_once,
    client,
    pg_epoch,
    pg_ids,
    wait_for,
    wait_terminated,
)
from tests.fixtures import unavailable

OTHER_VERSION = "0.0.0+e2e-other"
SERVER_ONLY_DSN_VAR = "LAMINAR_E2E_SERVER_ONLY_DSN"


@dataclass
class SwitchServer:
    """The dedicated server and the interpreters its Python workers can be switched between."""

    server: SparkConnectServer
    switch_file: Path
    good: str
    without_laminar: str
    other_version: str

    def use(self, python: str) -> None:
        self.switch_file.write_text(python)


def make_env(root: Path, name: str, extra_paths: list[Path]) -> str:
    """A virtual environment whose site-packages sees the test environment's packages (but not
    its editable laminar: that .pth file is only read in a site directory) plus ``extra``."""
    env_dir = root / name
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(env_dir)],
        check=True,
        capture_output=True,
    )
    python = env_dir / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    lines = [*map(str, extra_paths), sysconfig.get_paths()["purelib"]]
    (Path(site) / "00-laminar-e2e.pth").write_text("\n".join(lines) + "\n")
    return str(python)


def laminar_copy(root: Path, version: str) -> Path:
    """This laminar (extension included), reporting another version: another build of it."""
    target = root / "other-laminar"
    shutil.copytree(
        Path(laminar.__file__).parent,
        target / "laminar",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    init = target / "laminar" / "__init__.py"
    init.write_text(init.read_text() + f"\n__version__ = {version!r}\n")
    return target


@pytest.fixture(scope="module")
def switch_server(
    laminar_servers: Any, tmp_path_factory: pytest.TempPathFactory, pg_dsn: str
) -> Iterator[SwitchServer]:
    if os.environ.get("LAMINAR_SPARK_REMOTE"):
        pytest.skip("LAMINAR_SPARK_REMOTE is an external server: these tests need their own")
    root = tmp_path_factory.mktemp("readiness")
    without = make_env(root, "without-laminar", [])
    other = make_env(root, "other-laminar-env", [laminar_copy(root, OTHER_VERSION)])
    for python, expect in ((without, "missing"), (other, OTHER_VERSION)):
        probe = (
            "try:\n import laminar; print(laminar.__version__)\n"
            "except ImportError: print('missing')"
        )
        out = subprocess.run([python, "-c", probe], capture_output=True, text=True, check=True)
        assert out.stdout.strip() == expect, (python, out.stdout, out.stderr)
    switch_file = root / "python-to-use"
    switch_file.write_text(sys.executable)
    wrapper = root / "python-switch"
    wrapper.write_text(f'#!/bin/sh\nexec "$(cat {switch_file})" "$@"\n')
    wrapper.chmod(0o755)
    server = SparkConnectServer(
        python=wrapper,
        conf={"spark.python.use.daemon": "false", "spark.python.worker.reuse": "false"},
        env={SERVER_ONLY_DSN_VAR: pg_dsn},
        log_path=laminar_servers.log_dir / "spark-readiness.log",
        port=free_port(),
    )
    try:
        server.start()
    except Exception as e:
        unavailable(f"embedded Spark Connect server could not be started: {e}")
    try:
        yield SwitchServer(server, switch_file, sys.executable, without, other)
    finally:
        server.stop()


@pytest.fixture
def session(switch_server: SwitchServer) -> Iterator[Any]:
    switch_server.use(switch_server.good)
    with client(switch_server.server.remote_url) as spark:
        yield spark
    switch_server.use(switch_server.good)


def orders(spark: Any) -> Any:
    return (
        spark.readStream.format("rate")
        .option("rowsPerSecond", 20)
        .load()
        .selectExpr("value AS id", "CAST(value AS double) AS amount")
    )


def make_table(dsn: str, table: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table} (id bigint NOT NULL, amount double precision)")


def assert_nothing_started(spark: Any) -> None:
    assert spark.streams.active == []


def test_a_server_python_without_laminar_fails_before_the_query_starts(
    switch_server: SwitchServer, session: Any, pg_dsn: str, table_name: str, tmp_path: Path
) -> None:
    switch_server.use(switch_server.without_laminar)
    sink = laminar.PostgresSink(pg_dsn, table_name)
    checkpoint = str(tmp_path / "checkpoint")

    with pytest.raises(ConfigError) as probed:
        laminar.spark.start(orders(session), sink, checkpoint_location=checkpoint)
    text = str(probed.value)
    assert f"the Spark server's Python ({switch_server.without_laminar} " in text
    assert "cannot import laminar" in text
    assert f"{switch_server.without_laminar} -m pip install laminar=={laminar.__version__}" in text
    assert "PYSPARK_PYTHON" in text
    assert_nothing_started(session)

    # Without the probe, Spark's own failure (unpickling the writer) becomes the same advice.
    with pytest.raises(ConfigError) as started:
        laminar.spark.start(
            orders(session), sink, checkpoint_location=checkpoint, check_server=False
        )
    assert "cannot import laminar (No module named 'laminar')" in str(started.value)
    assert f"laminar=={laminar.__version__}" in str(started.value)
    assert_nothing_started(session)


def test_a_server_python_with_another_laminar_version_fails_before_the_query_starts(
    switch_server: SwitchServer, session: Any, pg_dsn: str, table_name: str, tmp_path: Path
) -> None:
    switch_server.use(switch_server.other_version)
    sink = laminar.PostgresSink(pg_dsn, table_name)
    checkpoint = str(tmp_path / "checkpoint")

    with pytest.raises(ConfigError) as probed:
        laminar.spark.start(orders(session), sink, checkpoint_location=checkpoint)
    text = str(probed.value)
    assert text.startswith(VERSION_MISMATCH)
    assert f"client runs laminar {laminar.__version__}" in text
    assert f"has laminar {OTHER_VERSION}" in text
    assert f"{switch_server.other_version} -m pip install laminar=={laminar.__version__}" in text

    # The plain Spark API: the writer itself refuses to load in the other version.
    writer = laminar.exactly_once(sink)
    with pytest.raises(Exception, match=VERSION_MISMATCH) as plain:
        (
            orders(session)
            .writeStream.foreachBatch(writer)
            .option("checkpointLocation", checkpoint)
            .start()
        )
    assert f"configured with laminar {laminar.__version__}" in str(plain.value)
    assert f"has laminar {OTHER_VERSION}" in str(plain.value)
    assert_nothing_started(session)


def test_unreachable_servers_are_named_from_the_server_side(
    session: Any, pg_dsn: str, table_name: str, topic_name: str, tmp_path: Path
) -> None:
    dead = free_port()
    pg = laminar.PostgresSink(f"postgresql://app:Unre4chable-pw@127.0.0.1:{dead}/shop", table_name)
    kafka = laminar.KafkaSink(f"127.0.0.1:{dead}", topic_name, "readiness-tx")
    checkpoint = str(tmp_path / "checkpoint")

    with pytest.raises(ConfigError) as probed:
        laminar.spark.start(
            orders(session), kafka, pg, checkpoint_location=checkpoint, check_timeout_s=3
        )
    text = str(probed.value)
    assert "cannot reach 2 of the configured servers" in text
    assert f"PostgreSQL postgresql://app:***@127.0.0.1:{dead}/shop" in text
    assert f"Kafka 127.0.0.1:{dead} topic {topic_name}" in text
    assert "Unre4chable-pw" not in text
    assert_nothing_started(session)

    # Skipping the probe, the first batch checks from the foreachBatch worker itself.
    query = laminar.spark.start(
        orders(session), pg, checkpoint_location=checkpoint, check_server=False, check_timeout_s=3
    )
    error = str(wait_terminated(query, timeout=60))
    assert "the process running foreachBatch" in error
    assert "cannot reach 1 of the configured servers" in error
    assert f"127.0.0.1:{dead}" in error
    assert "Unre4chable-pw" not in error


def test_settings_from_the_server_environment_never_leave_it(
    session: Any, pg_dsn: str, table_name: str, tmp_path: Path
) -> None:
    assert SERVER_ONLY_DSN_VAR not in os.environ  # only the server has it
    make_table(pg_dsn, table_name)
    sink = laminar.PostgresSink(laminar.env(SERVER_ONLY_DSN_VAR), table_name, sink_id=table_name)
    writer = laminar.exactly_once(sink)
    assert pg_dsn.encode() not in pickle.dumps(writer)

    missing = laminar.PostgresSink(laminar.env("LAMINAR_E2E_NOWHERE"), table_name)
    with pytest.raises(ConfigError, match=r"LAMINAR_E2E_NOWHERE, which is not set"):
        laminar.spark.start(orders(session), missing, checkpoint_location=str(tmp_path / "x"))

    query = laminar.spark.start(
        orders(session),
        writer,
        checkpoint_location=str(tmp_path / "checkpoint"),
        trigger="500 milliseconds",
    )
    try:
        wait_for(lambda: (pg_epoch(pg_dsn, table_name) or 0) >= 3, query=query, what="epoch 3")
    finally:
        query.stop()
    ids = pg_ids(pg_dsn, table_name)
    assert_exactly_once(ids, set(range(max(ids) + 1)), "postgres")
