"""Performance gates: a measured figure against a threshold, pass or fail, and one table of all.

A benchmark that should fail the run when a path gets slower calls the ``gate`` fixture (wired
in ``benches/conftest.py``) once per figure::

    def bench_startup(gate: Gate) -> None:
        ...
        gate("kafka start-up: 1 M-record topic / empty topic", ratio, at_most=2.0, unit="x")

The call records the figure, then raises `GateError` (an ``AssertionError``, so the test fails
with the figure and its threshold in the message) when it is out of bounds. At the end of the
session every recorded gate is printed as one table — gate, figure, threshold, our own target
where there is one, pass/fail — and written to ``.benchmarks/gates.json``; ``./dev test`` prints
the same table after its summary (``python -m benches.gates`` renders the JSON).

What a gate may measure, on a machine shared with other work (docs/benchmarks.md): ratios of
paths measured side by side in the same run, interleaved, best of N (`interleaved`); instruction
counts (``benches/bench_hotpath.py``); or absolute budgets far above the noise (the
F-E2E-002 figures of ``benches/bench_budgets.py``).
"""

from __future__ import annotations

import functools
import gc
import json
import math
import statistics
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Protocol

GATES_FILE = Path(".benchmarks") / "gates.json"


class GateError(AssertionError):
    """A gated figure is out of bounds."""


@dataclass(frozen=True)
class GateResult:
    """One gated figure and its verdict."""

    name: str
    figure: float
    unit: str = ""
    at_least: float | None = None
    at_most: float | None = None
    #: Our own (tighter) goal, reported beside the gate and not asserted, e.g. "<= 20 ms".
    target: str = ""
    #: How the figure was made (rounds, sizes, the compared figures).
    detail: str = ""
    test: str = ""
    #: False: the figure is shown against its threshold but does not fail the run (a gate the
    #: code does not meet yet on a busy machine; docs/benchmarks.md lists which and why).
    enforced: bool = True

    @property
    def verdict(self) -> str:
        if self.passed:
            return "pass"
        return "FAIL" if self.enforced else "below (not enforced)"

    @property
    def passed(self) -> bool:
        if math.isnan(self.figure):
            return False
        if self.at_least is not None and self.figure < self.at_least:
            return False
        return self.at_most is None or self.figure <= self.at_most

    def threshold(self) -> str:
        """The bounds as text: ``>= 0.9 x``, ``<= 200 ms`` or ``90 .. 110 Ir/row``."""
        unit = f" {self.unit}" if self.unit else ""
        lo, hi = self.at_least, self.at_most
        if lo is not None and hi is not None:
            return f"{number(lo)} .. {number(hi)}{unit}"
        if lo is not None:
            return f">= {number(lo)}{unit}"
        if hi is not None:
            return f"<= {number(hi)}{unit}"
        return "(none)"

    def message(self) -> str:
        unit = f" {self.unit}" if self.unit else ""
        verdict = {"pass": "passed", "FAIL": "FAILED"}.get(self.verdict, self.verdict)
        figure = f"{number(self.figure)}{unit}"
        text = f"gate {self.name!r} {verdict}: {figure}, needs {self.threshold()}"
        return f"{text} ({self.detail})" if self.detail else text


def number(value: float) -> str:
    """A figure with as many digits as it deserves: 1,234,567 / 123.4 / 1.23 / 0.012."""
    if math.isnan(value):
        return "n/a"
    magnitude = abs(value)
    if magnitude >= 1_000:
        return f"{value:,.0f}"
    if magnitude >= 100:
        return f"{value:.1f}".removesuffix(".0")
    if magnitude >= 1 or magnitude == 0:
        return f"{value:.2f}".rstrip("0").rstrip(".")
    return f"{value:.3g}"


class Gate(Protocol):
    """The ``gate`` fixture: records one figure and fails the test when it is out of bounds."""

    def __call__(
        self,
        name: str,
        figure: float,
        *,
        at_least: float | None = None,
        at_most: float | None = None,
        unit: str = "",
        target: str = "",
        detail: str = "",
        enforced: bool = True,
    ) -> GateResult: ...


@dataclass
class GateBook:
    """Every gate of one pytest session, in the order they were checked."""

    results: list[GateResult] = field(default_factory=list)

    def check(
        self,
        name: str,
        figure: float,
        *,
        at_least: float | None = None,
        at_most: float | None = None,
        unit: str = "",
        target: str = "",
        detail: str = "",
        test: str = "",
        enforced: bool = True,
    ) -> GateResult:
        if at_least is None and at_most is None:
            raise ValueError(f"gate {name!r}: give at_least=, at_most= or both")
        result = GateResult(
            name=name,
            figure=float(figure),
            unit=unit,
            at_least=at_least,
            at_most=at_most,
            target=target,
            detail=detail,
            test=test,
            enforced=enforced,
        )
        self.results.append(result)
        if not result.passed and enforced:
            raise GateError(result.message())
        return result

    def bound_to(self, test: str) -> Gate:
        """The ``gate`` callable of one test (its node id goes into the table's JSON)."""
        return functools.partial(self.check, test=test)

    def write(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        payload = {
            "written_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "passed": all(r.passed or not r.enforced for r in self.results),
            "gates": [{**asdict(r), "passed": r.passed} for r in self.results],
        }
        path.write_text(json.dumps(payload, indent=2) + "\n")


def table(results: list[GateResult]) -> list[str]:
    """The gate table: gate, figure, threshold, target, pass/fail; a count line at the end."""
    rows = [("gate", "figure", "threshold", "target", "result")]
    for r in results:
        unit = f" {r.unit}" if r.unit else ""
        rows.append((r.name, number(r.figure) + unit, r.threshold(), r.target, r.verdict))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for i, row in enumerate(rows):
        cells = [row[0].ljust(widths[0]), row[1].rjust(widths[1])]
        cells += [cell.ljust(width) for cell, width in zip(row[2:], widths[2:], strict=True)]
        lines.append("  " + "  ".join(cells).rstrip())
        if i == 0:
            lines.append("  " + "  ".join("-" * w for w in widths))
    failed = sum(r.verdict == "FAIL" for r in results)
    watched = sum(r.verdict != "FAIL" and not r.passed for r in results)
    summary = f"  {len(results)} gates: {len(results) - failed - watched} passed, {failed} failed"
    if watched:
        summary += f", {watched} below their threshold but not enforced"
    lines.append(summary)
    return lines


def load(path: Path) -> list[GateResult]:
    data = json.loads(path.read_text())
    names = GateResult.__dataclass_fields__
    return [GateResult(**{k: v for k, v in g.items() if k in names}) for g in data["gates"]]


# -- measuring side by side -----------------------------------------------------------------------


@dataclass(frozen=True)
class Contender:
    """One path in a side-by-side comparison: ``run`` is timed; ``before``/``after`` (truncate a
    table, open or commit a transaction) are not."""

    run: Callable[[], object]
    before: Callable[[], object] | None = None
    after: Callable[[], object] | None = None
    #: Run in this many rounds at most (None: every round). For a peer many times slower than
    #: Laminar, whose gate has a margin far beyond the noise: its slow rounds would only stretch
    #: the run, and the other contenders' rounds still interleave with its own.
    max_rounds: int | None = None


def interleaved(
    contenders: Mapping[str, Contender],
    rounds: int,
    *,
    max_rounds: int | None = None,
    settled: Callable[[dict[str, list[float]]], bool] | None = None,
) -> dict[str, list[float]]:
    """Runs every contender once per round, in an order rotated each round, and returns each
    one's wall-clock seconds per round. Interleaving makes a burst of load from another process
    hit every contender alike; the best round of each is then its figure (`best`).

    With ``max_rounds`` and ``settled``, rounds go on past ``rounds`` (up to ``max_rounds``) while
    ``settled(seconds)`` is false: on a busy machine a contender may need more rounds before one
    of them runs undisturbed. A path that really is slower stays slower however many rounds run.
    """
    names = list(contenders)
    seconds: dict[str, list[float]] = {name: [] for name in names}
    # The test process's heap (pytest, pyspark, fixtures) is not what is measured: move it out of
    # the collector's reach, or the path that allocates pays for traversing it.
    gc.collect()
    gc.freeze()
    limit = max(rounds, max_rounds or rounds)
    for r in range(limit):
        if r >= rounds and (settled is None or settled(seconds)):
            break
        shift = r % len(names)
        for name in names[shift:] + names[:shift]:
            c = contenders[name]
            if c.max_rounds is not None and len(seconds[name]) >= c.max_rounds:
                continue
            if c.before is not None:
                c.before()
            started = time.perf_counter()
            c.run()
            seconds[name].append(time.perf_counter() - started)
            if c.after is not None:
                c.after()
    gc.unfreeze()
    return seconds


def best(seconds: list[float]) -> float:
    return min(seconds)


def paired(numerator: list[float], denominator: list[float]) -> float:
    """The median of the rounds' own ratios, ``numerator[i] / denominator[i]``: the figure for
    two contenders measured side by side in the same rounds (`interleaved`, or alternating
    batches). A burst of load that lands on one round moves one ratio of many, where it can move a
    best or a median of its own contender's rounds alone; a contender whose latency has two modes
    (a broker's commit that sometimes waits a tick) is judged against its partner's same round,
    not against the partner's one lucky round. A path that really is slower is slower in most
    rounds, so the median of the ratios still shows it."""
    ratios = [n / d for n, d in zip(numerator, denominator, strict=False) if d > 0]
    if not ratios:
        raise ValueError("no paired rounds to compare")
    return statistics.median(ratios)


def spread(seconds: list[float]) -> str:
    """Best and worst round, for the gate's detail: how noisy the run was."""
    return f"best {min(seconds) * 1000:.1f} ms, worst {max(seconds) * 1000:.1f} ms"


def main(argv: list[str]) -> int:
    """``python -m benches.gates [FILE]``: print the table of a gates JSON; exit 1 if any gate
    failed or none was recorded."""
    path = Path(argv[0]) if argv else GATES_FILE
    if not path.is_file():
        print(f"  no gates recorded ({path} is missing: the benchmarks did not get that far)")
        return 1
    results = load(path)
    for line in table(results):
        print(line)
    return 0 if results and all(r.passed or not r.enforced for r in results) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
