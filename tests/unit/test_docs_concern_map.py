"""docs/protocol.md's map of concerns stays true: every spec section it links is a heading of
docs/, and every ``path::name`` it names is a file of the repository that defines that name — a
Rust ``fn``/``struct``/``enum``/``trait``/``type``/``const`` (or ``Type::method``: the type and
the ``fn``), a Python ``def``/``class``/top-level assignment (or ``Class::method``: the method in
that class). A rename or a move that forgets the map fails here."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
PROTOCOL = DOCS / "protocol.md"

#: The concerns the map must cover (docs/protocol.md, "Map of concerns").
CONCERNS = (
    "commit timeout",
    "replay skip",
    "decision write",
    "redo",
    "fencing",
    "witness",
    "watcher",
    "owner guard",
    "stop fence",
    "failover retry",
    "retry budgets",
    "reading the decision back after a crash",
)

REF = re.compile(r"`((?:rust|python)/[^`\s]+?\.(?:rs|py))::([A-Za-z_][\w:]*)`")
LINK = re.compile(r"\]\(([\w.-]*)#([^)\s]+)\)")


def concern_rows() -> list[list[str]]:
    """The map's table rows, each as its four cells."""
    text = PROTOCOL.read_text()
    start = text.index("## Map of concerns")
    end = text.index("\n## ", start + 1)
    rows = []
    for line in text[start:end].splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and len(cells) == 4 and cells[0] not in ("concern", "---"):
            rows.append(cells)
    return rows


def slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it: lower case, punctuation dropped, spaces hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(doc: Path) -> set[str]:
    return {slug(line.lstrip("#")) for line in doc.read_text().splitlines() if line.startswith("#")}


def rust_defines(source: str, name: str) -> bool:
    kinds = r"(?:fn|struct|enum|trait|type|const|static|mod)"
    return re.search(rf"\b{kinds}\s+{re.escape(name)}\b", source) is not None


def python_defines(tree: ast.Module, names: list[str]) -> bool:
    scope: list[ast.stmt] = tree.body
    for i, name in enumerate(names):
        found = None
        for node in scope:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                if node.name == name:
                    found = node
            elif i == 0 and isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                    found = node
        if found is None:
            return False
        scope = found.body if isinstance(found, ast.ClassDef) else []
    return True


def test_the_map_covers_every_concern_and_names_code_in_each_row() -> None:
    rows = concern_rows()
    names = [row[0] for row in rows]
    assert [c for c in CONCERNS if not any(n.startswith(c) for n in names)] == []
    for concern, spec, core, python in rows:
        assert LINK.search(spec), concern
        assert REF.search(core) or core.startswith("—"), concern
        assert REF.search(python), concern


@pytest.mark.parametrize(
    ("file", "name"),
    sorted({m.groups() for row in concern_rows() for cell in row for m in REF.finditer(cell)}),
)
def test_every_path_and_name_resolves(file: str, name: str) -> None:
    path = ROOT / file
    assert path.is_file(), f"{file} does not exist"
    parts = name.split("::")
    source = path.read_text()
    if file.endswith(".rs"):
        missing = [p for p in parts if not rust_defines(source, p)]
    else:
        missing = [] if python_defines(ast.parse(source), parts) else [name]
    assert missing == [], f"{file} defines no {missing}"


@pytest.mark.parametrize(
    ("doc", "anchor"),
    sorted({m.groups() for row in concern_rows() for m in LINK.finditer(row[1])}),
)
def test_every_spec_section_is_a_heading(doc: str, anchor: str) -> None:
    target = DOCS / doc if doc else PROTOCOL
    assert target.is_file(), f"docs/{doc} does not exist"
    assert anchor in anchors(target), f"no heading #{anchor} in {target.relative_to(ROOT)}"


def test_the_checks_catch_what_is_gone() -> None:
    """The resolvers are not vacuous: a name that is not there, or a method of another class,
    is caught."""
    rs = "pub struct Witness {}\nimpl Witness {\n    pub fn feed(&mut self) {}\n}\n"
    assert rust_defines(rs, "Witness")
    assert rust_defines(rs, "feed")
    assert not rust_defines(rs, "highest")
    py = ast.parse("X = 1\nclass A:\n    def m(self): ...\ndef f(): ...\n")
    assert python_defines(py, ["X"])
    assert python_defines(py, ["A", "m"])
    assert python_defines(py, ["f"])
    assert not python_defines(py, ["A", "f"])
    assert not python_defines(py, ["m"])
    assert (
        slug("3. Kafka + Postgres atomically (KIP-939; x)")
        == "3-kafka--postgres-atomically-kip-939-x"
    )


#: A core path the glossary cites: `protocol::<module>[::<name>]`.
CORE_PATH = re.compile(r"`(protocol(?:::\w+)+)`")
CORE_SRC = ROOT / "rust" / "laminar_core" / "src"


def glossary_paths() -> list[str]:
    """The core paths docs/engine.md's glossary ("Words") cites."""
    text = (DOCS / "engine.md").read_text()
    start = text.index("## 9. Words")
    end = text.find("\n## ", start + 1)
    return sorted(set(CORE_PATH.findall(text[start : None if end == -1 else end])))


def test_the_glossary_cites_the_core() -> None:
    assert len(glossary_paths()) >= 4, "the glossary ties its words to the core's names"


@pytest.mark.parametrize("path", glossary_paths())
def test_every_core_path_of_the_glossary_resolves(path: str) -> None:
    """`protocol::gid` is a module (a file or a folder), `protocol::names::dtid` a name that
    module defines."""
    parts = path.split("::")
    for cut in range(len(parts), 0, -1):
        base = CORE_SRC.joinpath(*parts[:cut])
        module = base.with_suffix(".rs") if base.with_suffix(".rs").is_file() else base / "mod.rs"
        if module.is_file():
            source = module.read_text()
            missing = [name for name in parts[cut:] if not rust_defines(source, name)]
            assert missing == [], f"{module.relative_to(ROOT)} defines no {missing}"
            return
    raise AssertionError(f"no module of the core is {path}")
