"""The time budget of `./dev test` (issue: CI's limit is 90 minutes; we keep a safe margin): one
line per check with its time and its budget, and a warning for each check, and for the whole
run, past its budget. Budgets are for this project's reference machine — 2 cores — warm (caches
in place: pip, Maven, cargo's target dir, ~/.cache/laminar) or from nothing (a new machine: the
set-up downloads and compiles everything). A warning never fails the run: it says what moved.

    python scripts/time_budget.py SUMMARY.tsv    # lines: name \\t outcome \\t seconds
"""

from __future__ import annotations

import sys

#: check → (warm budget, from-nothing budget), in seconds. Tests are the same either way.
BUDGETS: dict[str, tuple[int, int]] = {
    "bootstrap": (60, 900),
    "build (hotpath harness, wheel)": (60, 900),
    "cargo fmt --check": (10, 10),
    "cargo clippy (no features)": (120, 420),
    "cargo clippy (--features python)": (90, 300),
    "cargo test": (150, 420),
    "ruff check": (20, 20),
    "ruff format --check": (20, 20),
    "mypy --strict python/laminar": (90, 180),
    "stubtest laminar._core": (60, 90),
    "pytest tests (unit, integration, e2e)": (1500, 1500),
    "benchmarks (quick)": (420, 420),
}
#: The whole run: warm, and from nothing (CI's limit is 5,400 s).
TOTAL = (2400, 3600)
#: A set-up slower than this was a cold one (something was downloaded or compiled from nothing).
COLD_SETUP_S = 300


def main(path: str) -> int:
    rows = []
    with open(path, encoding="utf-8") as lines:
        for line in lines:
            name, outcome, seconds = line.rstrip("\n").split("\t")
            rows.append((name, outcome, int(seconds)))
    setup = sum(s for n, _, s in rows if n in ("bootstrap", "build (hotpath harness, wheel)"))
    cold = setup > COLD_SETUP_S
    which = 1 if cold else 0
    kind = "from nothing" if cold else "warm"
    print(f"  {'check':<40} {'outcome':<18} {'time':>6} {'budget':>7}")
    over = []
    for name, outcome, seconds in rows:
        budget = BUDGETS.get(name, (600, 600))[which]
        flag = "  OVER BUDGET" if seconds > budget else ""
        print(f"  {name:<40} {outcome:<18} {seconds:>5}s {budget:>6}s{flag}")
        if flag:
            over.append(f"{name} took {seconds} s (budget {budget} s)")
    total = sum(s for _, _, s in rows)
    limit = TOTAL[which]
    print(f"  {'total':<40} {'':<18} {total:>5}s {limit:>6}s  ({kind}: set-up took {setup} s)")
    for line in over:
        print(f"  WARNING: {line}")
    if total > limit:
        print(
            f"  WARNING: the run took {total // 60} min {total % 60} s, over its {kind} budget of "
            f"{limit // 60} min (CI's limit: 90 min); see which checks grew above"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
