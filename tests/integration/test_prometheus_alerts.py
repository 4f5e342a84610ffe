"""The shipped alert rules (deploy/prometheus/laminar-rules.yml) for real: ``promtool check
rules``, ``promtool test rules`` at their production thresholds, and a real Prometheus (Debian's,
`laminar.embedded.PrometheusServer`) scraping a real ``laminar exporter`` while a scale-out epoch
is left in doubt by a coordinator SIGKILLed with every partition prepared — the in-doubt and
lingering-transaction alerts reach ``firing`` (Prometheus' ``/api/v1/alerts``) and clear after
``laminar recover``.

The live test runs the shipped rules with their thresholds scaled down (5 minutes → 2 seconds,
``for: 1m`` → ``for: 1s``): each replaced number must occur exactly once, so a rule changed in
the file fails here instead of being silently tested in an older form.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from laminar.cli import main
from laminar.cli.exporter import Exporter
from laminar.embedded import EmbeddedServerError, PrometheusServer, find_promtool, free_port
from tests.fixtures import unavailable
from tests.integration.test_scaleout_protocol import PARTS, leftovers, run_writer

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "laminar-rules.yml"
RULES_TEST = ROOT / "tests" / "prometheus" / "laminar-rules.test.yml"


@pytest.fixture(scope="module")
def promtool() -> Path:
    try:
        return find_promtool()
    except EmbeddedServerError as e:
        unavailable(str(e))


def test_promtool_checks_the_shipped_rules(promtool: Path) -> None:
    done = subprocess.run(
        [str(promtool), "check", "rules", str(RULES)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS: 7 rules found" in done.stdout


def test_promtool_unit_tests_every_alert_at_its_threshold(promtool: Path) -> None:
    done = subprocess.run(
        [str(promtool), "test", "rules", RULES_TEST.name],
        cwd=RULES_TEST.parent,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


#: The live test's thresholds: (pattern in the shipped file, replacement).
FAST = [
    (rf"{name} > 300\n", f"{name} > 2\n")
    for name in (
        "laminar_group_oldest_in_doubt_age_seconds",
        "laminar_prepared_transaction_oldest_age_seconds",
        "laminar_kafka_open_transaction_oldest_age_seconds",
    )
]


def fast_rules(directory: Path, promtool: Path) -> Path:
    text = RULES.read_text()
    for pattern, replacement in FAST:
        text, n = re.subn(pattern, replacement, text)
        assert n == 1, f"{pattern!r} occurs {n} times in {RULES}"
    text, n = re.subn(r"\bfor: 1m\n", "for: 1s\n", text)
    assert n == 3, f"'for: 1m' occurs {n} times in {RULES}"
    path = directory / "laminar-rules-fast.yml"
    path.write_text(text)
    checked = subprocess.run(
        [str(promtool), "check", "rules", str(path)], capture_output=True, text=True, check=False
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    return path


def metric(text: str, name: str, **labels: str) -> float | None:
    """The value of one sample of the exporter's text output (None: absent)."""
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        if all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return None


def wait(condition: Callable[[], Any], what: str, timeout: float = 90.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


@pytest.fixture
def exporter(pg_dsn: str) -> Iterator[Exporter]:
    served = Exporter(pg_dsn, host="127.0.0.1", port=free_port(), kafka_extra={}).start()
    try:
        yield served
    finally:
        served.stop()


def test_a_real_prometheus_fires_the_in_doubt_alerts_and_they_clear_after_recover(
    world: dict[str, str],
    exporter: Exporter,
    promtool: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # the coordinator dies after every partition prepared, before the decision: epoch 1 in doubt
    crashed = run_writer(world, {"LAMINAR_CRASH_AT": "scaleout.after_tasks@2"})
    assert crashed.returncode == -signal.SIGKILL, crashed.stdout + crashed.stderr[-3000:]
    with psycopg.connect(world["dsn"]) as conn:
        row = conn.execute(
            "SELECT group_id FROM laminar.dt_state WHERE dtid LIKE %s", (f"%{world['table']}%",)
        ).fetchone()
    assert row is not None
    group = str(row[0])

    text = exporter.text()
    with capsys.disabled():  # the exporter's answer for this group with an epoch in doubt (-s);
        # the database is the run's shared one, so other tests' groups are left out of the print
        mine = (world["table"], world["tid"], group)
        print(
            "\n".join(
                line
                for line in text.splitlines()
                if "{" not in line or any(m in line for m in mine)
            )
        )
    assert metric(text, "laminar_up") == 1.0
    assert metric(text, "laminar_group_epochs_in_doubt", group=group) == 1.0
    assert (metric(text, "laminar_group_oldest_in_doubt_age_seconds", group=group) or 0) > 0
    assert metric(text, "laminar_group_last_committed_epoch", group=group) == 0.0
    assert metric(text, "laminar_prepared_transactions", sink=f"public.{world['table']}") == PARTS
    assert metric(text, "laminar_kafka_open_transactions", sink=world["tid"]) == PARTS
    assert metric(text, "laminar_group_commits_total", group=group) == 1.0  # epoch 0
    assert world["dsn"] not in text
    # no connection setting in any label (other tests' table names may say "password": the
    # database is shared by the run, so the word alone is not the check)
    assert re.search(r"password\s*=|://[^\s\"]*@", text) is None

    prometheus = PrometheusServer(
        targets=[f"127.0.0.1:{exporter.port}"],
        rule_files=[fast_rules(tmp_path, promtool)],
        log_path=tmp_path / "prometheus.log",
    )
    try:
        prometheus.start()
    except EmbeddedServerError as e:
        unavailable(str(e))
    try:

        def alerts(name: str, state: str, **labels: str) -> list[dict[str, Any]]:
            return [
                a
                for a in prometheus.alerts()
                if a["labels"].get("alertname") == name
                and a["state"] == state
                and all(a["labels"].get(k) == v for k, v in labels.items())
            ]

        firing = wait(
            lambda: alerts("LaminarEpochInDoubt", "firing", group=group),
            "LaminarEpochInDoubt to fire",
        )
        with capsys.disabled():  # the API's answer (-s shows it)
            print(json.dumps(firing, indent=1))
        assert firing[0]["labels"]["severity"] == "critical"
        assert float(firing[0]["value"]) > 2
        wait(
            lambda: alerts(
                "LaminarPreparedTransactionLingering", "firing", sink=f"public.{world['table']}"
            ),
            "LaminarPreparedTransactionLingering to fire",
        )
        wait(
            lambda: alerts("LaminarKafkaTransactionLingering", "firing", sink=world["tid"]),
            "LaminarKafkaTransactionLingering to fire",
        )
        # the exporter answers Prometheus: a scrape succeeds (one scrape of the run's shared
        # database can outlast the fast rules' 1 s scrape time-out on a loaded machine, and
        # reads up == 0 until the next: a fresh clone's CI met it once)
        wait(
            lambda: prometheus.query('up{job="laminar"}')[0]["value"][1] == "1",
            "a scrape of the exporter to succeed",
            timeout=30.0,
        )

        # 5 only if another test's leftovers in the shared database stay unresolved
        assert main(["recover", "--dsn", world["dsn"], "--older-than", "0"]) in (0, 5)
        capsys.readouterr()
        assert leftovers(world) == {"prepared": [], "dt_state": []}
        wait(
            lambda: (
                not alerts("LaminarEpochInDoubt", "firing", group=group)
                and not alerts(
                    "LaminarPreparedTransactionLingering", "firing", sink=f"public.{world['table']}"
                )
                and not alerts("LaminarKafkaTransactionLingering", "firing", sink=world["tid"])
            ),
            "the alerts to clear after laminar recover",
        )
        text = exporter.text()
        assert metric(text, "laminar_group_epochs_in_doubt", group=group) == 0.0
        assert metric(text, "laminar_prepared_transactions", sink=f"public.{world['table']}") == 0.0
        assert metric(text, "laminar_kafka_open_transactions", sink=world["tid"]) == 0.0
    finally:
        prometheus.close()


def test_the_exporter_unable_to_read_fires_its_alert(promtool: Path, tmp_path: Path) -> None:
    """An exporter whose database refuses it answers ``laminar_up 0``: the alert fires."""
    dead = f"postgresql://nobody:secret-pw@127.0.0.1:{free_port()}/none"
    served = Exporter(dead, host="127.0.0.1", port=free_port(), kafka_extra=None).start()
    text = served.text()
    assert metric(text, "laminar_up") == 0.0
    assert "secret-pw" not in text
    rules = tmp_path / "rules.yml"
    rules.write_text(RULES.read_text().replace("for: 2m\n", "for: 1s\n"))
    prometheus = PrometheusServer(
        targets=[f"127.0.0.1:{served.port}"], rule_files=[rules], log_path=tmp_path / "p.log"
    )
    try:
        try:
            prometheus.start()
        except EmbeddedServerError as e:
            unavailable(str(e))
        wait(
            lambda: any(
                a["labels"].get("alertname") == "LaminarExporterCannotRead"
                and a["state"] == "firing"
                for a in prometheus.alerts()
            ),
            "LaminarExporterCannotRead to fire",
        )
    finally:
        prometheus.close()
        served.stop()
