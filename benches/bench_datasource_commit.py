"""``format("laminar")``'s per-batch commit against the size of the topic it writes (issue:
production topology, defect 1), on the session's Apache Kafka broker and PostgreSQL:

    .venv/bin/pytest benches/bench_datasource_commit.py -p no:cacheprovider -s

A query's batches are run through the data source's own entry points, as Spark calls them — the
tasks' ``write`` (`write_task`, one per partition) and the driver's ``commit``
(`LaminarStreamWriter.commit`) — on an empty topic and on one that other producers already
filled with 5,000,000 records (4 partitions, every codec mixed). The driver's ``commit`` of each
batch is timed, the two queries' batches alternating (a burst of load falls on both); the first
batch (the group's registration) is left out. Gate (`benches.gates`):
each batch's commit on the filled topic over the empty topic's batch beside it, the median of
these ratios within 1.2x (`benches.gates.paired`), for Kafka alone
and for Kafka with PostgreSQL. Before the fix every commit read the topic back from its start
(its own sink's marker never exists in scale-out: the witness ran, twice), growing with every
record ever written until the query died at the witness's limit.

Results in ``.benchmarks/datasource_commit_summary.json``.
"""

from __future__ import annotations

import json
import statistics
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
from benches.gates import Gate, paired

from laminar.spark.options import parse_options
from laminar.spark.source import LaminarStreamWriter, write_task
from tests.integration.datasource_helpers import OWNER, VAR, partition
from tests.integration.kafka_fill import fill

FILLED = 5_000_000
PARTITIONS = 4
BATCHES = 16
SUMMARY = Path(".benchmarks/datasource_commit_summary.json")
RESULTS: dict[str, dict[str, float]] = {}

pytestmark = pytest.mark.timeout(1200)


@pytest.fixture(scope="module")
def topics(kafka_broker: Any, kafka_bootstrap: str) -> dict[int, str]:
    """An empty topic and one filled by foreign producers with `FILLED` records."""
    out = {}
    for size in (0, FILLED):
        name = f"ds-commit-{size}-{uuid.uuid4().hex[:6]}"
        kafka_broker.create_topic(name, PARTITIONS)
        if size:
            began = time.monotonic()
            fill(kafka_bootstrap, name, size, partitions=PARTITIONS, keep_values=False)
            print(f"\nfilled {name} with {size:,} records in {time.monotonic() - began:.1f} s")
        out[size] = name
    return out


def run_batch(options: Any, batch: int) -> float:
    """Spark's calls for one batch: the writer's creation, each partition's task, the commit
    (timed: the seconds returned)."""
    writer = LaminarStreamWriter(options)
    messages = [
        write_task(options, batch, OWNER, p, iter(partition(p)), attempt=f"{batch}-{p}")
        for p in range(PARTITIONS)
    ]
    began = time.perf_counter()
    writer.commit(messages, batch)
    return time.perf_counter() - began


@pytest.mark.parametrize("targets", ["kafka", "kafka+postgres"])
def test_commit_time_does_not_grow_with_the_topic(
    topics: dict[int, str],
    kafka_bootstrap: str,
    clean_prepared_xacts: str,
    unique_name: Any,
    monkeypatch: pytest.MonkeyPatch,
    gate: Gate,
    targets: str,
) -> None:
    dsn = clean_prepared_xacts
    monkeypatch.setenv(VAR, dsn)
    options = {}
    for size, topic in topics.items():
        raw = {
            "kafka.bootstrap.servers": kafka_bootstrap,
            "kafka.topic": topic,
            "kafka.key.column": "id",
            "kafka.transactional.id": unique_name("ds"),
            "laminar.check.servers": "false",
        }
        if "postgres" in targets:
            table = unique_name("tbl")
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute(f"CREATE TABLE {table} (id bigint, name text)")
            raw |= {"postgres.dsn.env": VAR, "postgres.table": table}
        else:
            raw |= {"laminar.state.dsn.env": VAR}
        options[size] = parse_options(raw)
    # The two queries' batches alternate, so a burst of load on this shared machine falls on
    # both alike; the first batch of each registers its group and is left out.
    commits: dict[int, list[float]] = {size: [] for size in topics}
    for batch in range(BATCHES + 1):
        for size in topics:
            took = run_batch(options[size], batch)
            if batch:
                commits[size].append(took)
    medians = {}
    for size, times in commits.items():
        medians[size] = statistics.median(times)
        RESULTS[f"{targets} {size:,} records"] = {
            "median_commit_s": medians[size],
            "max_commit_s": max(times),
            "batches": len(times),
        }
        print(
            f"\n{targets}, topic of {size:,} records: commit median "
            f"{medians[size] * 1000:.0f} ms, max {max(times) * 1000:.0f} ms "
            f"({len(times)} batches)"
        )
    SUMMARY.parent.mkdir(exist_ok=True)
    SUMMARY.write_text(json.dumps(RESULTS, indent=2))
    # Each batch on the filled topic against the empty topic's batch beside it: the median of
    # these ratios (a reading of 5,000,000 records would make every one of them many times 1).
    ratio = paired(commits[FILLED], commits[0])
    gate(
        f"format('laminar') commit: {FILLED:,}-record topic / empty ({targets})",
        ratio,
        at_most=1.2,
        unit="x",
        detail=(
            f"median of the batches' own ratios; driver-side commit over {BATCHES} batches "
            f"of {PARTITIONS} tasks, medians: "
            f"{medians[FILLED] * 1000:.0f} ms on {FILLED:,} foreign records, "
            f"{medians[0] * 1000:.0f} ms on the empty topic"
        ),
    )
