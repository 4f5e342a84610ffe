"""The benchmark gates' mechanism (benches/gates.py, benches/hotpath.py): verdicts, the failure
message, the table and its JSON, interleaving, and the instruction-count baseline's bounds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from benches import hotpath
from benches.gates import Contender, GateBook, GateError, GateResult, interleaved, load, table


def test_a_figure_within_bounds_passes_and_is_recorded() -> None:
    book = GateBook()
    result = book.check("ratio", 0.95, at_least=0.9, unit="x", test="t::x")
    assert result.passed
    assert book.results == [result]


@pytest.mark.parametrize(
    ("figure", "bounds"),
    [
        (0.89, {"at_least": 0.9}),
        (201.0, {"at_most": 200.0}),
        (1_111.0, {"at_least": 900.0, "at_most": 1_100.0}),
        (float("nan"), {"at_most": 1.0}),
    ],
)
def test_a_figure_out_of_bounds_fails_with_figure_and_threshold(
    figure: float, bounds: dict[str, float]
) -> None:
    book = GateBook()
    with pytest.raises(GateError) as failure:
        book.check("the gate", figure, unit="ms", detail="how it was measured", **bounds)
    message = str(failure.value)
    assert "the gate" in message
    assert "FAILED" in message
    assert "how it was measured" in message
    assert book.results[0].threshold() in message
    assert not book.results[0].passed  # recorded even though it failed


def test_the_fixture_callable_records_its_test() -> None:
    book = GateBook()
    result = book.bound_to("benches/bench_x.py::bench_y")("g", 1.0, at_most=2.0, unit="ms")
    assert result.test == "benches/bench_x.py::bench_y"
    assert book.results == [result]


def test_a_gate_needs_a_bound() -> None:
    with pytest.raises(ValueError, match="at_least"):
        GateBook().check("no bound", 1.0)


def test_the_table_lists_every_gate_and_the_json_reads_back(tmp_path: Path) -> None:
    book = GateBook()
    book.check("fast enough", 2.0, at_least=1.3, unit="x", target="goal 3x")
    with pytest.raises(GateError):
        book.check("small enough", 300.0, at_most=200.0, unit="ms")
    lines = table(book.results)
    assert lines[0].split() == ["gate", "figure", "threshold", "target", "result"]
    assert any("fast enough" in line and "goal 3x" in line and "pass" in line for line in lines)
    assert any("small enough" in line and "FAIL" in line and "<= 200 ms" in line for line in lines)
    assert lines[-1].strip() == "2 gates: 1 passed, 1 failed"
    path = tmp_path / "gates.json"
    book.write(path)
    data = json.loads(path.read_text())
    assert data["passed"] is False
    assert [g["passed"] for g in data["gates"]] == [True, False]
    assert load(path) == book.results


def test_interleaved_rotates_the_order_and_times_only_run() -> None:
    calls: list[str] = []

    def contender(name: str) -> Contender:
        return Contender(
            run=lambda: calls.append(name),
            before=lambda: calls.append(f"{name}:before"),
            after=lambda: calls.append(f"{name}:after"),
        )

    seconds = interleaved({"a": contender("a"), "b": contender("b")}, rounds=2)
    runs = [c for c in calls if ":" not in c]
    assert runs == ["a", "b", "b", "a"]
    assert calls[:3] == ["a:before", "a", "a:after"]
    assert {name: len(s) for name, s in seconds.items()} == {"a": 2, "b": 2}


def test_interleaved_goes_on_until_settled_or_the_limit() -> None:
    seen: list[int] = []

    def settled(seconds: dict[str, list[float]]) -> bool:
        seen.append(len(seconds["a"]))
        return len(seconds["a"]) >= 4

    seconds = interleaved({"a": Contender(run=lambda: None)}, 2, max_rounds=10, settled=settled)
    assert len(seconds["a"]) == 4
    assert seen == [2, 3, 4]
    never = interleaved(
        {"a": Contender(run=lambda: None)}, 2, max_rounds=5, settled=lambda s: False
    )
    assert len(never["a"]) == 5


def test_a_contender_with_max_rounds_stops_while_the_others_go_on() -> None:
    calls: list[str] = []
    seconds = interleaved(
        {
            "fast": Contender(run=lambda: calls.append("fast")),
            "slow": Contender(run=lambda: calls.append("slow"), max_rounds=2),
        },
        4,
    )
    assert {name: len(s) for name, s in seconds.items()} == {"fast": 4, "slow": 2}
    assert calls == ["fast", "slow", "slow", "fast", "fast", "fast"]


def test_instruction_bounds_are_ten_percent_either_way() -> None:
    lo, hi = hotpath.bounds(1_000.0)
    assert (round(lo, 6), round(hi, 6)) == (900.0, 1_100.0)


def test_the_baseline_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "instructions.json"
    counts = {"json_encode": hotpath.Count("json_encode", 1_704.8, "row")}
    hotpath.write_baseline(counts, path)
    assert hotpath.load_baseline(path) == counts
    assert set(hotpath.baseline_toolchain(path)) == {"rustc", "valgrind"}


def test_the_committed_baseline_covers_the_documented_cases() -> None:
    assert set(hotpath.load_baseline()) == {
        "epoch_cycle",
        "prepared_encode",
        "prepared_parse",
        "json_encode",
        "copy_encode",
    }


def test_gate_results_say_which_side_failed() -> None:
    low = GateResult("g", 0.5, unit="x", at_least=0.9)
    assert not low.passed
    assert low.threshold() == ">= 0.9 x"
    assert GateResult("g", 5.0, unit="ms", at_most=1.0).threshold() == "<= 1 ms"
