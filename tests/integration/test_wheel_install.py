"""The wheel users install, installed where Spark runs (real PostgreSQL, real Kafka broker).

``scripts/wheel.sh`` (``./dev wheel``) builds one abi3 wheel for manylinux2014; this module checks
its tag and contents, then installs it into a fresh virtualenv whose PATH has no Rust toolchain
(what a Spark client or a Spark Connect server's ``PYSPARK_PYTHON`` is), with binary-only
dependencies resolved by pip as a user's install would, and runs ``wheel_round_trip.py`` there:
two epochs through ``exactly_once(KafkaSink, PostgresSink)`` and a replay. Both stores must then
hold every row once and only once with its exact value — Kafka judged by its committed records
(``laminar.kafka.log``). The wheel is built before any test by ``./dev build``
(scripts/build.sh, which ``./dev test`` runs): a cold build takes minutes on 2 cores, too long for
a timed test.
"""

from __future__ import annotations

import json
import os
import platform
import re
import subprocess
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

import psycopg
import pytest

from tests.artifacts import ArtifactError, artifact
from tests.fixtures import unavailable
from tests.integration.kafka_fill import settled_committed as read_committed

REPO = Path(__file__).resolve().parents[2]
ROUND_TRIP = Path(__file__).with_name("wheel_round_trip.py")
ARCH = platform.machine()
#: As wheel_round_trip.py writes them.
ROWS_PER_EPOCH = 10
#: The system directories of a machine without a Rust toolchain (no ~/.cargo/bin).
SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"
#: What ``import laminar`` needs, and nothing else (no build or dev tools).
#: typing-extensions: `assert_never` on Python 3.10 (the exhaustive command performers).
RUNTIME_DEPENDENCIES = {"pyarrow", "confluent-kafka", "psycopg", "typing-extensions"}

# pip installing the wheel's binary dependencies into fresh virtualenvs takes a while.
pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def wheel() -> Path:
    """The wheel of this machine's architecture, as ``./dev build`` built it (scripts/wheel.sh:
    never built here, under pytest-timeout's clock)."""
    try:
        return artifact("wheel")
    except ArtifactError as e:
        unavailable(str(e))


def run_in(
    venv: Path, args: list[str], cwd: Path, timeout: float
) -> subprocess.CompletedProcess[str]:
    """Runs ``venv``'s python with ``args`` as on a machine where laminar is only pip-installed:
    no Rust on PATH, no repository on the import path, no build settings."""
    dropped = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "CARGO_", "RUSTUP_", "MATURIN_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(dropped)}
    env["PATH"] = f"{venv / 'bin'}:{SYSTEM_PATH}"
    return subprocess.run(
        [str(venv / "bin" / "python"), *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@pytest.fixture(scope="module")
def fresh_venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A new virtualenv (this interpreter's base Python) with only the wheel pip-installed."""
    venv = tmp_path_factory.mktemp("fresh") / "venv"
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", str(venv)], check=True, timeout=120)
    pip = ["-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    # --only-binary: nothing compiled on the way, as on a server without a toolchain.
    install = run_in(venv, [*pip, "--only-binary=:all:", str(wheel)], cwd=venv, timeout=600)
    assert install.returncode == 0, f"pip install {wheel.name} failed:\n{install.stderr[-4000:]}"
    return venv


def test_the_wheel_is_abi3_manylinux2014_with_runtime_dependencies_only(wheel: Path) -> None:
    tag = f"manylinux_2_17_{ARCH}"
    assert re.fullmatch(
        rf"laminar-[0-9.]+-cp310-abi3-manylinux2014_{ARCH}\.{tag}\.whl", wheel.name
    ), wheel.name

    show = subprocess.run(
        [str(Path(sys.executable).with_name("auditwheel")), "show", str(wheel)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    report = " ".join(show.stdout.split())
    assert f'consistent with the following platform tag: "{tag}"' in report, report
    glibc = {tuple(map(int, v.split("."))) for v in re.findall(r"GLIBC_(\d+(?:\.\d+)+)", report)}
    assert glibc, f"no glibc symbol versions in auditwheel's report: {report}"
    assert max(glibc) <= (2, 17), f"symbols newer than glibc 2.17: {sorted(glibc)[-3:]}"

    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        metadata_name = next(n for n in names if n.endswith(".dist-info/METADATA"))
        metadata = Parser().parsestr(archive.read(metadata_name).decode())
    assert {"laminar/_core.abi3.so", "laminar/_core.pyi", "laminar/py.typed"} <= names
    assert metadata["Requires-Python"] == ">=3.10"
    unconditional = {
        re.split(r"[\s\[<>=!~;]", requirement, maxsplit=1)[0].lower()
        for requirement in metadata.get_all("Requires-Dist", [])
        if "extra ==" not in requirement
    }
    assert unconditional == RUNTIME_DEPENDENCIES


def test_a_round_trip_from_the_wheel_in_a_fresh_virtualenv_is_exactly_once(
    fresh_venv: Path, world: dict[str, str], tmp_path: Path
) -> None:
    bootstrap, topic, dsn, table, tid = (
        world[k] for k in ("bootstrap", "topic", "dsn", "table", "tid")
    )
    run = run_in(
        fresh_venv, [str(ROUND_TRIP), bootstrap, topic, dsn, table, tid], cwd=tmp_path, timeout=240
    )
    assert run.returncode == 0, f"round trip failed:\n{run.stderr[-4000:]}"
    report = json.loads(run.stdout.strip().splitlines()[-1])

    # It ran the installed wheel, on a PATH without a Rust toolchain.
    site = str(fresh_venv / "lib")
    assert report["laminar"].startswith(site), report["laminar"]
    assert report["core"].startswith(site), report["core"]
    assert report["core"].endswith("_core.abi3.so"), report["core"]
    assert report["toolchain"] == {"cargo": None, "rustc": None, "maturin": None}
    # The replay of epoch 1 was skipped, not written twice.
    assert report["outcomes"] == [[0, "committed"], [1, "committed"], [1, "skipped"]]

    expected = [
        (epoch * 1000 + i, f"row-{epoch * 1000 + i}", epoch)
        for epoch in (0, 1)
        for i in range(ROWS_PER_EPOCH)
    ]
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(f"SELECT id, name, epoch FROM {table} ORDER BY id").fetchall()
    assert rows == expected

    kafka = [
        (r.key, json.loads(r.value or b"null"), r.header("laminar.epoch"), r.header("laminar.sink"))
        for r in read_committed(bootstrap, topic)
    ]
    wanted = [
        (
            str(i).encode(),
            {"id": i, "name": name, "epoch": epoch},
            str(epoch).encode(),
            tid.encode(),
        )
        for i, name, epoch in expected
    ]
    assert sorted(kafka, key=repr) == sorted(wanted, key=repr)
