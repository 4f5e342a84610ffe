"""Instruction counts of the core's hot paths, and the committed baseline they are gated against.

The Rust harness ``rust/laminar_core/examples/hotpath.rs`` runs one case per process under
valgrind's callgrind, which counts the instructions (``Ir``) executed inside the case's
``measured_*`` function only. For one binary and one input that count is the same on every run,
however loaded the machine is — unlike a timing.

    python -m benches.hotpath                      # measure, compare with the baseline
    python -m benches.hotpath --update-baseline    # measure and write the baseline
                                                   # (what `./dev bench --update-baseline` runs)

The baseline is ``benches/baseline/instructions.json``. ``benches/bench_hotpath.py`` gates each
case at ±10 % of it (``./dev test``): a path that costs more fails, and so does one that got much
cheaper, so that the baseline follows the improvement and the next regression is measured from
there. Updating it is always this explicit command, committed with the change that moved it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BASELINE = ROOT / "benches" / "baseline" / "instructions.json"
#: A change of more than this fraction, either way, fails the gate.
TOLERANCE = 0.10
_TOTALS = re.compile(r"^(?:summary|totals):\s+(\d+)", re.M)


class HotpathError(RuntimeError):
    """The harness could not be built or counted (message says what to install or fix)."""


@dataclass(frozen=True)
class Count:
    """Instructions of one case, per operation (``unit``: cycle, state, row)."""

    case: str
    instructions: float
    unit: str


def valgrind() -> str:
    path = shutil.which("valgrind")
    if path is None:
        raise HotpathError(
            "valgrind is not installed: `./dev bootstrap` installs it (Debian package valgrind)"
        )
    return path


def build() -> Path:
    """Builds the harness in release (the profile the wheel ships) and returns its path."""
    cargo = shutil.which("cargo")
    if cargo is None:
        raise HotpathError("cargo is not on PATH: the harness is a Rust example")
    command = [
        cargo,
        "build",
        "--release",
        "--locked",
        "--quiet",
        "-p",
        "laminar_core",
        "--example",
        "hotpath",
        "--message-format=json",
    ]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise HotpathError(f"building the hotpath harness failed:\n{done.stderr[-4000:]}")
    for line in done.stdout.splitlines():
        message = json.loads(line)
        if (
            message.get("reason") == "compiler-artifact"
            and message.get("executable")
            and message["target"]["name"] == "hotpath"
        ):
            return Path(message["executable"])
    raise HotpathError("cargo built no hotpath executable (see `cargo build --example hotpath`)")


def cases(binary: Path) -> dict[str, tuple[int, str]]:
    """The harness's cases: name → (operations the count is divided by, unit)."""
    out = subprocess.run([binary, "--list"], capture_output=True, text=True, check=True).stdout
    listed = {}
    for line in out.splitlines():
        name, per, unit = line.split()
        listed[name] = (int(per), unit)
    return listed


def count(binary: Path, case: str, per: int, unit: str) -> Count:
    """Instructions executed inside the case's ``measured_*`` function, per operation."""
    with tempfile.TemporaryDirectory(prefix="laminar-callgrind-") as tmp:
        out = Path(tmp) / "callgrind.out"
        command = [
            valgrind(),
            "--tool=callgrind",
            "--collect-atstart=no",
            "--toggle-collect=*hotpath::measured_*",
            f"--callgrind-out-file={out}",
            str(binary),
            case,
        ]
        # A fixed environment: the harness reads none, but the stack layout depends on its size.
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C"}
        done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
        if done.returncode != 0:
            raise HotpathError(f"callgrind run of {case} failed:\n{done.stderr[-4000:]}")
        match = _TOTALS.search(out.read_text())
    if match is None or int(match[1]) == 0:
        raise HotpathError(f"callgrind counted nothing for {case}: is measured_* inlined?")
    return Count(case, round(int(match[1]) / per, 1), unit)


def measure_all(binary: Path) -> dict[str, Count]:
    return {name: count(binary, name, per, unit) for name, (per, unit) in cases(binary).items()}


def toolchain() -> dict[str, str]:
    """What the counts depend on besides the code: the compiler and valgrind."""

    def version(*command: str) -> str:
        try:
            done = subprocess.run(command, capture_output=True, text=True, check=False)
        except FileNotFoundError:
            return "missing"
        return done.stdout.strip() or done.stderr.strip()

    return {"rustc": version("rustc", "--version"), "valgrind": version("valgrind", "--version")}


def load_baseline(path: Path = BASELINE) -> dict[str, Count]:
    if not path.is_file():
        return {}
    data = json.loads(path.read_text())
    return {
        name: Count(name, float(entry["instructions"]), entry["unit"])
        for name, entry in data["cases"].items()
    }


def baseline_toolchain(path: Path = BASELINE) -> dict[str, str]:
    if not path.is_file():
        return {}
    return dict(json.loads(path.read_text()).get("toolchain", {}))


def write_baseline(counts: dict[str, Count], path: Path = BASELINE) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "about": (
            "Instructions (callgrind Ir) per operation of the core's hot paths "
            "(rust/laminar_core/examples/hotpath.rs). Gated at +-10 % by "
            "benches/bench_hotpath.py; rewrite with `./dev bench --update-baseline`."
        ),
        "toolchain": toolchain(),
        "cases": {
            c.case: {"instructions": c.instructions, "unit": c.unit} for c in counts.values()
        },
    }
    path.write_text(json.dumps(payload, indent=2) + "\n")


def bounds(base: float) -> tuple[float, float]:
    return base * (1 - TOLERANCE), base * (1 + TOLERANCE)


def compare_line(name: str, base: Count | None, now: Count) -> str:
    if base is None:
        return f"  {name:<18} (no baseline) -> {now.instructions:>12,.1f} Ir/{now.unit}"
    change = now.instructions / base.instructions - 1
    return (
        f"  {name:<18} {base.instructions:>12,.1f} -> {now.instructions:>12,.1f} "
        f"Ir/{now.unit} ({change:+.1%})"
    )


def main(argv: list[str]) -> int:
    update = "--update-baseline" in argv
    try:
        binary = build()
        counts = measure_all(binary)
    except HotpathError as e:
        print(f"hotpath: {e}", file=sys.stderr)
        return 1
    baseline = load_baseline()
    print("instructions per operation (baseline -> now):")
    for name, now in counts.items():
        print(compare_line(name, baseline.get(name), now))
    for name in sorted(baseline.keys() - counts.keys()):
        print(f"  {name:<18} in the baseline, no longer in the harness")
    if update:
        write_baseline(counts)
        print(f"baseline written: {BASELINE.relative_to(ROOT)} (commit it with the change)")
        return 0
    outside = [
        name
        for name, now in counts.items()
        if name not in baseline
        or not bounds(baseline[name].instructions)[0]
        <= now.instructions
        <= bounds(baseline[name].instructions)[1]
    ]
    if outside:
        print(
            f"outside +-{TOLERANCE:.0%} of the baseline: {', '.join(outside)} "
            "(if intended: ./dev bench --update-baseline)"
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
