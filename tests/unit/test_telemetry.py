"""`laminar._telemetry`: nothing at all until the process set an OpenTelemetry SDK up (the hooks
return what they were given, no span, no import), then a span per step of an epoch with its
epoch, sink and rows, the epoch's span as their parent, and the rows/bytes counters — checked
with the SDK's in-memory exporters in a child process (a tracer provider is set once per
process)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from laminar import _telemetry


def perform(command: object) -> str:
    return "event"


def test_off_without_an_sdk_the_performer_is_returned_as_it_is() -> None:
    assert not _telemetry.enabled()
    assert _telemetry.traced(perform) is perform
    with _telemetry.epoch("epoch", "g", 1, rows=10):
        _telemetry.written("task", "g", 10, 100)


def test_laminar_never_imports_opentelemetry_itself() -> None:
    code = (
        "import sys, laminar, laminar.engine.loop, laminar.protocol.driver, "
        "laminar.protocol.scaleout, "
        "laminar.protocol.atomic, laminar._telemetry as t; t.traced(print); "
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


SDK_RUN = textwrap.dedent(
    """
    import json
    from opentelemetry import metrics, trace
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    trace.set_tracer_provider(provider)
    reader = InMemoryMetricReader()
    metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))

    from laminar import _telemetry

    class Command:  # the step each kind is: the core's (Command.step, tested in Rust)
        STEPS = {"claim_participants": "begin", "write_partition": "write",
                 "sink_prepare": "prepare", "lock_group": "begin", "commit_decision": "decide",
                 "sink_commit": "commit"}

        def __init__(self, kind, epoch=None, sink_id=None):
            self.kind, self.epoch, self.sink_id = kind, epoch, sink_id
            self.step = self.STEPS.get(kind)

    def perform(c):
        if c.kind == "write_partition":  # as the task's driver does, inside the step
            _telemetry.written("task", "orders+tid", 120, 4096)
        return c.kind

    traced = _telemetry.traced(perform)
    assert _telemetry.enabled()
    with _telemetry.epoch("task", "orders+tid", 7):
        for c in [Command("lock_partition"), Command("claim_participants"),
                  Command("write_partition", 7), Command("sink_prepare", 7, "kafka:tid.p0")]:
            traced(c)
    with _telemetry.epoch("epoch", "orders+tid", None, rows=120):
        for c in [Command("lock_group"), Command("commit_decision", 7),
                  Command("sink_commit", 7, "tid")]:
            traced(c)
    found = [
        {"name": s.name, "attributes": dict(s.attributes),
         "parent": s.parent.span_id if s.parent else None, "id": s.context.span_id}
        for s in spans.get_finished_spans()
    ]
    data = reader.get_metrics_data()
    counters = {
        m.name: sum(p.value for p in m.data.data_points)
        for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics
    }
    print(json.dumps({"spans": found, "counters": counters}))
    """
)


def test_with_an_sdk_each_step_of_an_epoch_is_a_span_with_its_epoch_sink_and_rows() -> None:
    done = subprocess.run(
        [sys.executable, "-c", SDK_RUN], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    spans = {s["name"]: s for s in got["spans"]}
    names = [s["name"] for s in got["spans"]]
    # lock_partition is no step: no span of its own
    assert names == [
        "laminar.begin",
        "laminar.write",
        "laminar.prepare",
        "laminar.task",
        "laminar.begin",
        "laminar.decide",
        "laminar.commit",
        "laminar.epoch",
    ]
    task = spans["laminar.task"]
    assert task["attributes"] == {
        "laminar.group": "orders+tid",
        "laminar.epoch": 7,
        "laminar.rows": 120,
        "laminar.bytes": 4096,
    }
    for step in got["spans"][:3]:
        assert step["parent"] == task["id"]
    write = spans["laminar.write"]["attributes"]
    assert write["laminar.epoch"] == 7
    assert write["laminar.rows"] == 120
    assert write["laminar.command"] == "write_partition"
    prepare = spans["laminar.prepare"]["attributes"]
    assert prepare["laminar.sink"] == "kafka:tid.p0"
    commit = spans["laminar.commit"]["attributes"]
    assert (commit["laminar.sink"], commit["laminar.epoch"]) == ("tid", 7)
    assert spans["laminar.epoch"]["attributes"]["laminar.rows"] == 120
    assert got["counters"] == {"laminar.rows.written": 120, "laminar.bytes.written": 4096}
