"""``laminar exporter``'s metrics as data (no server): the families one snapshot gives, their
names and labels (Prometheus conventions, no secret), the histogram's buckets, and the command's
usage errors."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import Metric

from laminar._stats import BUCKETS_S, bucket_counts
from laminar.cli import main
from laminar.exporter import LaminarCollector, Snapshot, families

GROUP = "laminar-demo-orders+public.orders"


def snapshot() -> Snapshot:
    """A scale-out group with epoch 7 in doubt: two PostgreSQL participants prepared, two Kafka
    participants open; a lone PostgreSQL sink; a stop fence; the group's commit statistics."""
    return Snapshot(
        schema_version=4,
        sinks=[
            (GROUP, "atomic_group", ["public.orders", "laminar-demo-orders"], 3, None, None, None),
            ("public.orders", "postgres", None, 0, 6, 1_700_000_000.0, 12.5),
            ("laminar-demo-orders", "kafka", None, 0, None, None, None),
            ("public.lone", "postgres", None, 0, 2, 1_700_000_100.0, 99.0),
        ],
        decisions=[
            ("laminar-demo-orders.p0", 6, GROUP, 1_700_000_001.0, 11.0),
            ("laminar-demo-orders.p1", 6, GROUP, 1_700_000_002.0, 10.0),
        ],
        distributed=[(f"laminar:{GROUP}:7", GROUP, 7, "prepare", 400.0)],
        participants=[
            (
                f"laminar:{GROUP}:7",
                "kafka:laminar-demo-orders.p0",
                "kafka",
                "laminar-demo-orders.p0",
                "prepared",
            ),
            (
                f"laminar:{GROUP}:7",
                "kafka:laminar-demo-orders.p1",
                "kafka",
                "laminar-demo-orders.p1",
                "claimed",
            ),
        ],
        fences=[("other-group", 4, 7200.0)],
        stats=[(GROUP, 6, 2, 0.9, [0, 0, 1, 3, 2] + [0] * 9)],
        prepared=[
            ("laminar:public.orders:7:0", "public.orders", 398.0),
            ("laminar:public.orders:7:1", "public.orders", 399.0),
        ],
    )


def samples(metrics: list[Metric]) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for m in metrics for s in m.samples}


def test_a_group_with_an_epoch_in_doubt() -> None:
    got = samples(list(families(snapshot())))
    g = (("group", GROUP),)
    assert got[("laminar_group_epochs_in_doubt", g)] == 1
    assert got[("laminar_group_oldest_in_doubt_age_seconds", g)] == 400.0
    assert got[("laminar_group_last_committed_epoch", g)] == 6
    assert got[("laminar_group_last_commit_age_seconds", g)] == 10.0  # the newest decision
    assert got[("laminar_group_generation", g)] == 3
    sink = (("group", GROUP), ("sink", "public.orders"))
    assert got[("laminar_prepared_transactions", sink)] == 2
    assert got[("laminar_prepared_transaction_oldest_age_seconds", sink)] == 399.0
    kafka = (("group", GROUP), ("sink", "laminar-demo-orders"))
    assert got[("laminar_kafka_open_transactions", kafka)] == 2
    assert got[("laminar_kafka_open_transaction_oldest_age_seconds", kafka)] == 400.0
    pg = (("group", GROUP), ("kind", "postgres"), ("sink", "public.orders"))
    assert got[("laminar_sink_last_committed_epoch", pg)] == 6
    k = (("group", GROUP), ("kind", "kafka"), ("sink", "laminar-demo-orders"))
    assert got[("laminar_sink_last_committed_epoch", k)] == 6  # its participants' decisions
    lone = (("group", ""), ("kind", "postgres"), ("sink", "public.lone"))
    assert got[("laminar_sink_last_commit_age_seconds", lone)] == 99.0
    # nothing prepared for the lone sink: its series is there, at 0
    assert got[("laminar_prepared_transactions", (("group", ""), ("sink", "public.lone")))] == 0


def test_concluded_participants_are_not_open_and_an_unknown_state_counts_as_open() -> None:
    """The core's rule (`participant_open`) decides which Kafka participants are open; a state it
    does not know (a row written by hand) counts as open instead of failing the scrape."""
    snap = snapshot()
    p0, p1 = snap.participants
    snap.participants = [(*p0[:4], "committed"), (*p1[:4], "aborted")]
    got = samples(list(families(snap)))
    kafka = (("group", GROUP), ("sink", "laminar-demo-orders"))
    assert got[("laminar_kafka_open_transactions", kafka)] == 1  # p1: "aborted" is unknown
    snap.participants = [(*p0[:4], "committed"), (*p1[:4], "rolled_back")]
    got = samples(list(families(snap)))
    assert got[("laminar_kafka_open_transactions", kafka)] == 0


def test_counters_and_the_commit_latency_histogram() -> None:
    got = samples(list(families(snapshot())))
    g = (("group", GROUP),)
    assert got[("laminar_group_commits_total", g)] == 6
    assert got[("laminar_group_aborts_total", g)] == 2
    assert got[("laminar_group_commit_latency_seconds_count", g)] == 6
    assert got[("laminar_group_commit_latency_seconds_sum", g)] == 0.9
    # cumulative: le=0.005 0, 0.01 0, 0.025 1, 0.05 4, 0.1 6, ... +Inf 6
    assert got[("laminar_group_commit_latency_seconds_bucket", (*g, ("le", "0.025")))] == 1
    assert got[("laminar_group_commit_latency_seconds_bucket", (*g, ("le", "0.05")))] == 4
    assert got[("laminar_group_commit_latency_seconds_bucket", (*g, ("le", "+Inf")))] == 6
    fence = (("group", "other-group"),)
    assert got[("laminar_stop_fence_epoch", fence)] == 4
    assert got[("laminar_stop_fence_age_seconds", fence)] == 7200.0
    assert got[("laminar_stop_fences", ())] == 1


def test_names_follow_prometheus_conventions() -> None:
    for metric in families(snapshot()):
        assert metric.name.startswith("laminar_"), metric.name
        if metric.type == "counter":
            assert all(s.name.endswith("_total") for s in metric.samples), metric.name
        if "age" in metric.name or "latency" in metric.name or "timestamp" in metric.name:
            assert metric.name.endswith("_seconds"), metric.name
        for sample in metric.samples:
            assert set(sample.labels) <= {"group", "sink", "kind", "le"}, sample


def test_bucket_counts_put_a_commit_in_its_bucket() -> None:
    assert bucket_counts(0.001)[0] == 1
    assert bucket_counts(0.005)[0] == 1  # le: the bound is inclusive
    assert bucket_counts(0.0051)[1] == 1
    assert bucket_counts(1e9)[-1] == 1
    assert len(bucket_counts(0.3)) == len(BUCKETS_S) + 1
    assert sum(bucket_counts(0.3)) == 1


def test_an_unreadable_database_answers_up_0_without_its_password() -> None:
    collector = LaminarCollector(
        "postgresql://u:hunter2-secret@127.0.0.1:1/db", connect_timeout_s=1
    )
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    text = generate_latest(registry).decode()
    assert "laminar_up 0.0" in text
    assert 'laminar_exporter_scrape_errors_total{source="postgres"} 1.0' in text
    assert "hunter2" not in text
    assert "hunter2" not in collector.last_error
    assert "hunter2" not in repr(collector)


def test_the_command_takes_the_dsn_from_a_variable_never_an_argument(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("NO_SUCH_DSN_VAR", raising=False)
    assert main(["exporter", "--dsn-env", "NO_SUCH_DSN_VAR", "--once"]) == 2
    assert "$NO_SUCH_DSN_VAR is not set" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["exporter", "--dsn", "postgresql://x"])  # no such option (nor an abbreviation)
    assert main(["exporter", "--dsn-env", "postgresql://u:pw1@h/db"]) == 2
    assert main(["exporter", "--dsn-env", "V", "--kafka-config-env", "sasl.password=pw2"]) == 2
    err = capsys.readouterr().err
    assert "not a DSN" in err
    assert "pw1" not in err
    assert "pw2" not in err
    monkeypatch.setenv("EXPORTER_TEST_DSN", "postgresql://u:pw-in-env@127.0.0.1:1/db")
    monkeypatch.delenv("KAFKA_PW_VAR", raising=False)
    secret_var = ["--kafka-config-env", "sasl.password=KAFKA_PW_VAR"]
    assert main(["exporter", "--dsn-env", "EXPORTER_TEST_DSN", *secret_var]) == 2
    err = capsys.readouterr().err
    assert "$KAFKA_PW_VAR is not set" in err
    assert "pw-in-env" not in err
    assert main(["exporter", "--dsn-env", "EXPORTER_TEST_DSN", "--no-kafka", "--once"]) == 1
    out = capsys.readouterr()
    assert "laminar_up 0.0" in out.out
    assert "pw-in-env" not in out.out + out.err
