"""The core's hot paths gated by instruction counts (callgrind ``Ir``), which machine load does
not move: the begin → write → prepare → commit cycle, PreparedTxnState encode and parse, JSON
and COPY encoding per row (`benches.hotpath`, harness ``rust/laminar_core/examples/hotpath.rs``).

Each case must stay within ±10 % of ``benches/baseline/instructions.json``; a failure prints both
counts. An intended change is recorded with ``./dev bench --update-baseline``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from benches import hotpath
from benches.gates import Gate

from tests.artifacts import ArtifactError, artifact
from tests.fixtures import unavailable

BASELINE = hotpath.load_baseline()
LABELS = {
    "epoch_cycle": "core: begin-write-prepare-commit",
    "prepared_encode": "core: PreparedTxnState encode",
    "prepared_parse": "core: PreparedTxnState parse",
    "json_encode": "core: JSON encoding (key + value)",
    "copy_encode": "core: COPY BINARY encoding",
}


@pytest.fixture(scope="module")
def harness() -> Path:
    """The harness `./dev build` built (never built here, under pytest-timeout's clock)."""
    try:
        hotpath.valgrind()
        return artifact("hotpath")
    except (hotpath.HotpathError, ArtifactError) as e:
        unavailable(str(e))


def bench_hotpath_cases_match_baseline(harness: Path) -> None:
    """Every case of the harness has a baseline and every baseline a case."""
    listed = set(hotpath.cases(harness))
    assert listed == set(BASELINE), (
        f"harness cases {sorted(listed)} vs baseline {sorted(BASELINE)}: "
        "run ./dev bench --update-baseline and commit benches/baseline/instructions.json"
    )


@pytest.mark.parametrize("case", sorted(BASELINE))
def bench_hotpath_instructions(harness: Path, gate: Gate, case: str) -> None:
    per, unit = hotpath.cases(harness)[case]
    now = hotpath.count(harness, case, per, unit)
    base = BASELINE[case]
    lo, hi = hotpath.bounds(base.instructions)
    toolchain = hotpath.toolchain()
    recorded = hotpath.baseline_toolchain()
    note = (
        ""
        if recorded.get("rustc") == toolchain["rustc"]
        else (f"; baseline made with {recorded.get('rustc', '?')}, this is {toolchain['rustc']}")
    )
    gate(
        LABELS.get(case, f"core: {case}"),
        now.instructions,
        at_least=lo,
        at_most=hi,
        unit=f"Ir/{unit}",
        detail=(
            f"baseline {base.instructions:,.1f} Ir/{unit}, now {now.instructions:,.1f} "
            f"({now.instructions / base.instructions - 1:+.1%}); if intended: "
            f"./dev bench --update-baseline{note}"
        ),
    )
