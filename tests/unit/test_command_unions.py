"""Each machine's type in `_core.pyi` names every command kind it can emit.

The performers match the union a machine's ``_Machine[...]`` parameter names and end in
``assert_never`` (docs/engine.md §1): a kind the core emits but the union lacks would pass mypy and
fail at run time. This reads the core's sources — the ``Command::X`` each machine's module writes,
and those of the machines it runs as children (``KafkaRecovery::new``, ``Resolution::…``,
``WatcherPass::new``, ``ScaleOutEpoch::new``) — and checks the stub's unions cover them.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROTOCOL = ROOT / "rust/laminar_core/src/protocol"
STUB = ROOT / "python/laminar/_core.pyi"

#: The core's machine types and the source files that make each one's commands.
MACHINES = {
    "KafkaRecovery": ["kafka_recovery/mod.rs", "kafka_recovery/completion.rs"],
    "Resolution": ["resolution.rs"],
    "Resolve": ["watcher/resolve.rs"],
    "WatcherPass": ["watcher/mod.rs", "watcher/rules.rs", "watcher/item.rs"],
    "ScaleOutEpoch": [
        "distributed/coordinator/mod.rs",
        "distributed/coordinator/decision.rs",
        "distributed/coordinator/collected.rs",
        "distributed/vote.rs",
    ],
    "AtomicGroup": [
        "atomic/mod.rs",
        "atomic/start.rs",
        "atomic/resume.rs",
        "atomic/run.rs",
        "atomic/epoch.rs",
    ],
    "ScaleOutTask": ["distributed/task.rs"],
    "SingleEpoch": ["single/mod.rs"],
}
#: The machines Python drives, by the union their binding's type names.
BOUND = {
    "AtomicGroup": "_AtomicCommand",
    "KafkaRecovery": "_KafkaRecoveryCommand",
    "ScaleOutTask": "_TaskCommand",
    "WatcherPass": "_WatcherCommand",
    "Resolve": "_ResolveCommand",
    "SingleEpoch": "_SingleCommand",
}
#: A crash point, a log line, a sleep: every performer takes them (`perform_driver_side`).
DRIVER_SIDE = {"Reached", "Log", "Sleep"}


def code(path: Path) -> str:
    """The file without its comments and its tests."""
    text = path.read_text()
    text = text.split("#[cfg(test)]", 1)[0]
    return "\n".join(line.split("//", 1)[0] for line in text.splitlines())


@cache
def emitted(machine: str) -> frozenset[str]:
    """The command kinds ``machine`` and the machines it runs can emit."""
    text = "\n".join(code(PROTOCOL / f) for f in MACHINES[machine])
    kinds = set(re.findall(r"\bCommand::([A-Z]\w+)", text))
    if re.search(r"\bCommand::(?:warn|log)\(", text):
        kinds.add("Log")
    for child in MACHINES:
        if child != machine and re.search(rf"\b{child}::(?:new|complete|roll_back)\b", text):
            kinds |= emitted(child)
    return frozenset(kinds)


@cache
def declared(alias: str) -> frozenset[str]:
    """The ``Command.X`` classes a ``_core.pyi`` alias names, through the aliases it names."""
    stub = STUB.read_text()
    found = re.search(rf"^{alias}: TypeAlias = \(?(.*?)\)?\n(?=\S)", stub, re.S | re.M)
    assert found is not None, f"{alias} is not a type alias in _core.pyi"
    kinds: set[str] = set()
    for part in (p.strip(" ()\n") for p in found.group(1).split("|")):
        if part.startswith("Command."):
            kinds.add(part.removeprefix("Command."))
        elif part.startswith("_"):
            kinds |= declared(part)
    return frozenset(kinds)


@pytest.mark.parametrize(("machine", "alias"), sorted(BOUND.items()))
def test_the_union_a_machine_is_typed_with_names_every_kind_it_emits(
    machine: str, alias: str
) -> None:
    found = emitted(machine)
    assert found, f"no command found in {machine}'s sources: the file list is out of date"
    missing = found - declared(alias) - DRIVER_SIDE
    assert not missing, f"{machine} emits {sorted(missing)}; add them to {alias} in _core.pyi"


def test_the_in_doubt_machines_are_typed_with_their_own_kinds() -> None:
    """`KafkaInDoubt` and `PostgresInDoubt` share a file: each ``impl`` block is read alone."""
    text = code(PROTOCOL / "sink/in_doubt.rs")
    kafka, postgres = text.split("impl PostgresInDoubt", 1)
    for part, alias in ((kafka, "_KafkaInDoubtCommand"), (postgres, "_PostgresInDoubtCommand")):
        kinds = set(re.findall(r"\bCommand::([A-Z]\w+)", part))
        if re.search(r"\bCommand::(?:warn|log)\(", part):
            kinds.add("Log")
        assert kinds
        assert not kinds - declared(alias) - DRIVER_SIDE, alias
