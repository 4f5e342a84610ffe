"""The atomic pair (Kafka + PostgreSQL) writing Spark's Kafka-sink shape routed over three topics
— explicit partitions on some rows, user headers (several, null values) on others — killed with
SIGKILL at a sample of the core's crash points (`test_atomic_crash.ENCODING_STEPS` and
`ENCODING_RECOVERY`: what an encoding can change; test_atomic_crash.py walks every point of the
same protocol), for ``redo="replay"`` and ``redo="log"``, then
restarted: every record is in its topic once and only once with its exact key, value, partition
and headers (committed records with control batches replayed by ``laminar.kafka.log``), and
every row once in PostgreSQL (docs/protocol.md §3; docs/formats.md §2, the redo blob's version 2).

The harness is `test_atomic_crash`'s (one writer process per run, `atomic_crash_writer.py` with
its ``routed`` argument); epochs 0-3, killed in epoch 1 at the point's second occurrence. The
production-shape run does the same on topics other producers filled first (every codec mixed
in each partition, committed and aborted transactions, 8 to 16 partitions).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.integration.atomic_helpers import (
    abort_prepared,
    kill_at_step_and_restart,
    kill_in_recovery_and_finish,
    killed,
    run_writer,
)
from tests.integration.atomic_routed_helpers import assert_routed_exactly_once, create_stores
from tests.integration.kafka_fill import CODECS, fill, settled_committed
from tests.integration.kafka_shape_helpers import topics_of
from tests.integration.test_atomic_crash import (
    DECIDED_PREPARED,
    ENCODING_RECOVERY,
    ENCODING_STEPS,
    EPOCHS,
)

REDO = ["replay", "log"]


@pytest.fixture
def routed(
    kafka_broker: Any, kafka_bootstrap: str, pg_dsn: str, unique_name: Any, tmp_path: Path
) -> dict[str, str]:
    """Three fresh topics and a table on the session's servers, and the writer's arguments."""
    topic, table = unique_name("routed"), unique_name("routed")
    create_stores(kafka_broker, pg_dsn, topic, table)
    return world_of(kafka_bootstrap, pg_dsn, topic, table, tmp_path)


def world_of(bootstrap: str, dsn: str, topic: str, table: str, tmp: Path) -> dict[str, str]:
    """What a crash writer subprocess needs to write ``topic`` (and the two others) and
    ``table``."""
    return {
        "bootstrap": bootstrap,
        "topic": topic,
        "dsn": dsn,
        "table": table,
        "tid": f"tid-{topic}",
        "checkpoint": str(tmp / "checkpoint"),
    }


def args(w: dict[str, str], redo: str) -> list[str]:
    return [
        w["bootstrap"], w["topic"], w["dsn"], w["table"], w["tid"], str(EPOCHS), w["checkpoint"],
        redo, "routed",
    ]  # fmt: skip


def check(w: dict[str, str]) -> None:
    assert_routed_exactly_once(w["bootstrap"], w["topic"], w["tid"], w["dsn"], w["table"], EPOCHS)
    with psycopg.connect(w["dsn"]) as conn:
        decided = conn.execute(
            "SELECT epoch FROM laminar.txn_state WHERE transactional_id = %s", (w["tid"],)
        ).fetchone()
    assert decided == (EPOCHS - 1,)


@pytest.mark.parametrize("redo", REDO)
@pytest.mark.parametrize("point", ENCODING_STEPS)
def test_routed_rows_killed_at_a_step_land_exactly_once(
    routed: dict[str, str], point: str, redo: str
) -> None:
    kill_at_step_and_restart(args(routed, redo), point)
    check(routed)


@pytest.mark.parametrize("redo", REDO)
def test_a_routed_epoch_aborted_by_the_broker_after_the_decision_is_redone(
    routed: dict[str, str], redo: str
) -> None:
    """The decided epoch's Kafka transaction is gone: ``redo="log"`` re-produces its records
    from the version-2 blobs (each to its topic and partition, with its headers), the replay
    writes them otherwise."""
    assert killed(run_writer(args(routed, redo), f"{DECIDED_PREPARED}@2"))
    with psycopg.connect(routed["dsn"]) as conn:
        (versions,) = conn.execute(
            "SELECT array_agg(DISTINCT get_byte(records, 2)) FROM laminar.redo "
            "WHERE transactional_id = %s",
            (routed["tid"],),
        ).fetchone() or (None,)
    assert versions == ([2] if redo == "log" else None)
    abort_prepared(routed["bootstrap"], routed["tid"])
    restarted = run_writer(args(routed, redo), None)
    assert restarted.returncode == 0, restarted.stdout + restarted.stderr[-3000:]
    if redo == "log":
        assert "completed in Kafka from the redo log" in restarted.stderr
        assert restarted.stdout.splitlines()[0] == "epoch 1: skipped"
    else:
        assert "waiting for Spark's replay of batch 1" in restarted.stderr
        assert restarted.stdout.splitlines()[0] == "epoch 1: committed"
    check(routed)


@pytest.mark.parametrize("redo", REDO)
@pytest.mark.parametrize("point", ENCODING_RECOVERY)
def test_routed_rows_killed_again_during_recovery_land_exactly_once(
    routed: dict[str, str], point: str, redo: str
) -> None:
    kill_in_recovery_and_finish(
        args(routed, redo), routed["bootstrap"], routed["tid"], point, redo, DECIDED_PREPARED
    )
    check(routed)


def test_routed_redo_on_topics_other_producers_filled(
    kafka_broker: Any,
    kafka_bootstrap: str,
    pg_dsn: str,
    unique_name: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Production shape: the three topics already hold other producers' records (every codec
    in each partition, aborted transactions among them, 8/12/16 partitions), the sink compresses
    with zstd; the decided epoch's transaction is aborted by the broker and redone from the log.
    Laminar's records are exact and every foreign committed record is still there, once."""
    topic, table = unique_name("prod"), unique_name("prod")
    partitions = (8, 12, 16)
    create_stores(kafka_broker, pg_dsn, topic, table, partitions)
    filled = {
        t: fill(kafka_bootstrap, t, 1_500, partitions=n, aborted_per_codec=3)
        for t, n in zip(topics_of(topic, 3), partitions, strict=True)
    }
    monkeypatch.setenv("LAMINAR_TEST_KAFKA_COMPRESSION", "zstd")
    w = world_of(kafka_bootstrap, pg_dsn, topic, table, tmp_path)
    assert killed(run_writer(args(w, "log"), f"{DECIDED_PREPARED}@2"))
    abort_prepared(kafka_bootstrap, w["tid"])
    restarted = run_writer(args(w, "log"), None)
    assert restarted.returncode == 0, restarted.stdout + restarted.stderr[-3000:]
    assert "completed in Kafka from the redo log" in restarted.stderr
    check(w)
    for t, f in filled.items():
        foreign = [r.value for r in settled_committed(kafka_bootstrap, t) if r.header("producer")]
        assert sorted(foreign) == sorted(f.committed), t
        assert {r.header("producer") for r in settled_committed(kafka_bootstrap, t)} >= {
            c.encode() for c in CODECS
        }
