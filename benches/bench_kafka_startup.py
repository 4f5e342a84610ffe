"""KafkaSink start-up time against topic size and partition count (issue 15), on the session's
Apache Kafka broker:

    .venv/bin/pytest benches/bench_kafka_startup.py -p no:cacheprovider -s

For each topic (0, 100 K and 1 M foreign records, every codec mixed; 1, 16 and 64 partitions),
the wall time of ``init_transactions`` for a **new** sink (no marker, no identity: nothing of the
topic is read), for a **restarted** one (the marker answers), and for one whose marker was
**lost** (its identity is recorded: the bounded witness reads back from each partition's end to
its last epoch, written after the foreign records). The bar, a gate (``benches.gates``): a new
sink on 1 M foreign records starts within 2x of a new sink on an empty topic (best of 3 each).
``./dev test``'s quick mode (LAMINAR_BENCH_QUICK=1) measures 0 and 100 K records on 1 and 16
partitions. Results in ``.benchmarks/kafka_startup_summary.json``.
"""

from __future__ import annotations

import json
import os
import statistics
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from benches.gates import Gate
from confluent_kafka.admin import AdminClient

import laminar
from tests.integration.kafka_fill import fill
from tests.integration.kafka_helpers import epoch_table, make_sink

QUICK = os.environ.get("LAMINAR_BENCH_QUICK") == "1"
SIZES = (0, 100_000) if QUICK else (0, 100_000, 1_000_000)
PARTITIONS = (1, 16) if QUICK else (1, 16, 64)
ROUNDS = 3
RESULTS: dict[str, dict[str, float]] = {}
SUMMARY = Path(".benchmarks/kafka_startup_summary.json")


@pytest.fixture(scope="module")
def topics(kafka_broker: Any, kafka_bootstrap: str) -> dict[tuple[int, int], str]:
    """One topic per (records, partitions), filled once."""
    out = {}
    for partitions in PARTITIONS:
        for size in SIZES:
            name = f"startup-{size}-{partitions}-{uuid.uuid4().hex[:6]}"
            kafka_broker.create_topic(name, partitions)
            if size:
                fill(kafka_bootstrap, name, size, partitions=partitions, keep_values=False)
            out[(size, partitions)] = name
    return out


def start(bootstrap: str, topic: str, tid: str) -> tuple[float, laminar.KafkaSink]:
    sink = make_sink(bootstrap, topic, tid)
    started = time.perf_counter()
    sink.init_transactions()
    return time.perf_counter() - started, sink


@pytest.mark.parametrize("partitions", PARTITIONS)
@pytest.mark.parametrize("size", SIZES)
def test_startup_time(
    kafka_bootstrap: str,
    topics: dict[tuple[int, int], str],
    size: int,
    partitions: int,
    gate: Gate,
) -> None:
    topic = topics[(size, partitions)]
    new, restarted, lost = [], [], []
    for _ in range(ROUNDS):
        tid = f"startup-{uuid.uuid4().hex[:8]}"
        elapsed, sink = start(kafka_bootstrap, topic, tid)
        assert sink.startup_read is not None
        assert (sink.startup_read.source, sink.startup_read.read.fetches) == ("new", 0)
        new.append(elapsed)
        writer = laminar.exactly_once(sink)
        writer.write_epoch(0, epoch_table(0, 20 * partitions))
        writer.close()
        elapsed, sink = start(kafka_bootstrap, topic, tid)
        assert sink.startup_read is not None
        assert sink.startup_read.source == "marker"
        restarted.append(elapsed)
        sink.close()
        admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
        admin.delete_consumer_groups([sink.marker_group])[sink.marker_group].result(15)
        elapsed, sink = start(kafka_bootstrap, topic, tid)
        assert sink.startup_read is not None
        assert (sink.startup_read.source, sink.startup_read.epoch) == ("witness", 0)
        lost.append(elapsed)
        sink.close()
    result = {
        "new_best_s": min(new),
        "new_s": statistics.median(new),
        "restarted_s": statistics.median(restarted),
        "marker_lost_s": statistics.median(lost),
    }
    RESULTS[f"{size}x{partitions}"] = result
    print(
        f"\n{size:>9,} records, {partitions:>2} partitions: new {result['new_s']:.3f} s, "
        f"restarted {result['restarted_s']:.3f} s, marker lost {result['marker_lost_s']:.3f} s"
    )
    SUMMARY.parent.mkdir(exist_ok=True)
    SUMMARY.write_text(json.dumps(RESULTS, indent=2))
    empty = RESULTS.get(f"0x{partitions}")
    if size and empty is not None:
        # Best of ROUNDS each (a start-up is a few round trips: one stall of the shared machine
        # would double a single figure); the medians are in the detail.
        gate(
            f"kafka start-up: {size:,}-record topic / empty, {partitions} partition(s)",
            result["new_best_s"] / empty["new_best_s"],
            at_most=2.0,
            unit="x",
            detail=(
                f"best of {ROUNDS} new sinks each: {result['new_best_s'] * 1000:.0f} ms on "
                f"{size:,} records, {empty['new_best_s'] * 1000:.0f} ms on the empty topic "
                f"(medians {result['new_s'] * 1000:.0f} / {empty['new_s'] * 1000:.0f} ms)"
            ),
        )
