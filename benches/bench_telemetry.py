"""OpenTelemetry's hooks cost nothing while no SDK is set up (`laminar._telemetry`; issue 27).

The hooks run on every write path: `laminar.engine.loop.drive` wraps each machine's
performer (`_telemetry.traced`), the atomic group's epoch and each scale-out task open a span
(`_telemetry.epoch`) and count rows and bytes (`_telemetry.written`). With no SDK each returns at
once. Two gates, measured in this run with ``opentelemetry`` imported (the API's default proxy
providers in place: the disabled path that looks furthest, as an application that imports the
API but configures nothing):

- **the write path with and without the hooks**: one ``exactly_once(KafkaSink, PostgresSink)``
  writing small epochs on the session's servers, its rounds alternating between the code as
  shipped and the same code with the three hooks replaced by bare no-ops; the median of the
  rounds' own ratios (`benches.gates.paired`: a broker commit's latency has two modes, and a
  best-of-each would compare one lucky round with another) is gated near 1 (the noise of a
  round trip dominates it: a hook that imported or allocated per command would not move it,
  which is why the second gate exists);
- **the hooks' share of an epoch**: the hooks an epoch calls (``traced`` per protocol run,
  ``epoch`` and ``written`` once), timed alone in a tight loop, over the same epoch's best time:
  gated at a fraction of a percent, so a hook made 100x dearer (an import, a span object per
  call) fails it.
"""

from __future__ import annotations

import contextlib
import os
import sys
import timeit
import uuid
from collections.abc import Iterator
from typing import Any

import opentelemetry.metrics
import opentelemetry.trace  # the API present, no SDK: the disabled path that looks furthest
import psycopg
import pyarrow as pa
import pytest
from benches.gates import Contender, Gate, best, interleaved, paired, spread

import laminar
from laminar import _telemetry

QUICK = os.environ.get("LAMINAR_BENCH_QUICK") == "1"
ROWS = 100
ROUNDS = 15 if QUICK else 40
EPOCHS_PER_ROUND = 3
#: Hook calls of one epoch of the atomic group: ``traced`` per protocol run (the epoch's, and
#: the start-up's or a retry's at most once more), ``epoch`` and ``written`` once.
TRACED_PER_EPOCH = 2


def table(epoch: int) -> pa.Table:
    ids = [epoch * 1_000_000 + i for i in range(ROWS)]
    return pa.table({"id": ids, "name": [f"row-{i}" for i in ids]})


@contextlib.contextmanager
def without_hooks() -> Iterator[None]:
    """The hooks replaced by bare no-ops: the code as if it had no instrumentation."""
    saved = (_telemetry.traced, _telemetry.epoch, _telemetry.written)
    null = contextlib.nullcontext()
    _telemetry.traced = lambda perform: perform  # type: ignore[assignment]
    _telemetry.epoch = lambda *a, **k: null  # type: ignore[assignment]
    _telemetry.written = lambda *a, **k: None  # type: ignore[assignment]
    try:
        yield
    finally:
        _telemetry.traced, _telemetry.epoch, _telemetry.written = saved


class Writer:
    """An atomic pair of its own topic and table, writing the next epochs on each run."""

    def __init__(self, broker: Any, bootstrap: str, dsn: str) -> None:
        name = f"bench_otel_{uuid.uuid4().hex[:8]}"
        broker.create_topic(name, partitions=1)
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"CREATE TABLE {name} (id bigint, name text)")
        self.writer = laminar.exactly_once(
            laminar.KafkaSink(bootstrap, name, f"tid-{name}", key="id"),
            laminar.PostgresSink(dsn, name),
        )
        self.epoch = 0
        self.writer.write_epoch(self.epoch, table(self.epoch))  # start-up out of the measure

    def run(self) -> None:
        for _ in range(EPOCHS_PER_ROUND):
            self.epoch += 1
            assert self.writer.write_epoch(self.epoch, table(self.epoch)).committed

    def close(self) -> None:
        self.writer.close()


@pytest.fixture(scope="module")
def writer(kafka_broker: Any, kafka_bootstrap: str, pg_dsn: str) -> Iterator[Writer]:
    made = Writer(kafka_broker, kafka_bootstrap, pg_dsn)
    yield made
    made.close()


def bench_telemetry_disabled_costs_nothing_on_the_write_path(writer: Writer, gate: Gate) -> None:
    assert "opentelemetry.trace" in sys.modules
    assert opentelemetry.trace.get_tracer_provider() is not None
    assert opentelemetry.metrics.get_meter_provider() is not None
    assert not _telemetry.enabled(), "an SDK is set up in the benchmark process"

    def run_bare() -> None:
        with without_hooks():
            writer.run()

    seconds = interleaved(
        {"hooks": Contender(writer.run), "bare": Contender(run_bare)},
        ROUNDS,
        max_rounds=ROUNDS * 3,
        settled=lambda s: bool(s["hooks"]) and paired(s["hooks"], s["bare"]) <= 1.05,
    )
    ratio = paired(seconds["hooks"], seconds["bare"])
    gate(
        "telemetry off: atomic write path with hooks / without",
        ratio,
        at_most=1.10,
        unit="x",
        target="1.00 x",
        detail=f"median of the rounds' own ratios; {EPOCHS_PER_ROUND} epochs of {ROWS} rows a "
        f"round, {len(seconds['hooks'])} rounds, best-round ratio "
        f"{best(seconds['hooks']) / best(seconds['bare']):.2f} x; "
        f"hooks {spread(seconds['hooks'])}, bare {spread(seconds['bare'])}",
    )

    # the hooks an epoch calls, alone, against that epoch's best time
    def hooks_of_one_epoch() -> None:
        for _ in range(TRACED_PER_EPOCH):
            _telemetry.traced(run_bare)
        with _telemetry.epoch("epoch", "group", None, rows=ROWS):
            pass
        _telemetry.written("epoch", "group", ROWS, 4096)

    calls = 20_000
    hook_s = min(timeit.repeat(hooks_of_one_epoch, number=calls, repeat=5)) / calls
    epoch_s = best(seconds["hooks"]) / EPOCHS_PER_ROUND
    share = hook_s / epoch_s * 100
    gate(
        "telemetry off: the hooks' share of an atomic epoch",
        share,
        at_most=0.5,
        unit="%",
        target="< 0.05 %",
        detail=f"hooks {hook_s * 1e9:.0f} ns per epoch, epoch {epoch_s * 1000:.2f} ms "
        f"(best round, {ROWS} rows)",
    )
