"""Imports run down the house, never up: one rank table says which part stands on which, and a module imports only
its own part and the parts ranked below it, never another part's ``_private`` names, and no two modules import
each other (not even for type hints)."""

import ast
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

# bottom first; a part may import the parts above it in this list (and itself), never those below
RANKS = (
    ("goodput", "goodput.foundation"),  # the package's own __init__ (its version) and what every part uses
    ("goodput.contracts",),  # the names every part shares: catalog, recorded rules, dashboard ids, vocabulary
    ("goodput.exporters",),
    ("goodput.analyzer",),
    ("goodput.simulator",),  # above what only observes or analyzes a fleet: a stale build breaks only what simulates
    ("goodput.loadtest",),
    ("goodput.review",),
    ("goodput.plan",),
    ("goodput.console",),
    ("goodput.monitoring",),
    ("goodput.deploy",),
    ("goodput.demo",),
    ("goodput.cli", "goodput.__main__"),
)
STDLIB_ONLY = ("goodput.contracts",)  # importable by every part without a third-party package behind it


def _part(module: str) -> str:
    """The part of the rank table ``module`` belongs to (the longest prefix that names one)."""
    parts = [p for rank in RANKS for p in rank if module == p or module.startswith(p + ".")]
    return max(parts, key=len)


RANK = {p: i for i, rank in enumerate(RANKS) for p in rank}


def _imports(path: Path) -> list[tuple[str, list[str]]]:
    """``(module, names)`` of every import in ``path`` at any depth of the file (TYPE_CHECKING blocks included)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(a.name, []) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append((node.module, [a.name for a in node.names]))
    return out


def _modules() -> dict[str, list[tuple[str, list[str]]]]:
    mods = {}
    for path in (REPO / "goodput").rglob("*.py"):
        name = ".".join(path.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")
        mods[name] = _imports(path)
    return mods


def _project(imports: list[tuple[str, list[str]]]) -> list[tuple[str, list[str]]]:
    return [(m, n) for m, n in imports if m == "goodput" or m.startswith("goodput.")]


def test_every_module_belongs_to_a_part_of_the_table():
    top = sorted({m.split(".")[1] for m in _modules() if "." in m})
    assert [t for t in top if f"goodput.{t}" not in RANK] == [], "a new part needs its row in RANKS"


def test_imports_run_down_the_rank_table():
    up = []
    for mod, imports in _modules().items():
        here = _part(mod)
        for target, names in _project(imports):
            # ``from goodput import x`` imports the submodule goodput.x: rank it as that
            targets = [f"{target}.{n}" for n in names if f"{target}.{n}" in RANK] if target == "goodput" else []
            for t in targets or [target]:
                there = _part(t)
                if there != here and RANK[there] > RANK[here]:
                    up.append(f"{mod} ({here}) imports {t} ({there})")
    assert up == [], "imports that run up the house:\n" + "\n".join(up)


def test_no_part_imports_another_parts_private_names():
    private = []
    for mod, imports in _modules().items():
        for target, names in _project(imports):
            if _part(target) == _part(mod):
                continue
            private += [f"{mod} imports {target}.{n}" for n in names if n.startswith("_") and not n.startswith("__")]
            private += [f"{mod} imports {target}" for seg in target.split(".") if seg.startswith("_") and seg != "__main__"]
    assert private == [], "\n".join(private)


@pytest.mark.parametrize("part", STDLIB_ONLY)
def test_the_shared_names_stand_on_the_standard_library_alone(part):
    bad = sorted({f"{m} imports {t}" for m, imports in _modules().items() if _part(m) == part for t, _ in imports
                  if t.split(".")[0] not in sys.stdlib_module_names and _part(t if t.startswith("goodput") else
                                                                                   "goodput.cli") != part})
    assert bad == [], f"{part} must import only the standard library and itself: {bad}"


def test_no_two_modules_import_each_other():
    mods = {m: {t for t, _ in _project(imps)} for m, imps in _modules().items()}
    pairs = sorted({tuple(sorted((a, b))) for a, imps in mods.items() for b in imps
                    if b != a and a in mods.get(b, ())})
    assert not pairs, f"import cycles: {pairs}"


def test_nothing_imports_the_old_top_level_packages():
    """One import package: the five generic top-level packages are gone, and nothing (tests and benchmarks too)
    imports them."""
    old = ("simulator", "exporters", "analyzer", "capacity", "console")
    assert [p for p in old if (REPO / p).exists()] == []
    found = [f"{path.relative_to(REPO)}: {t}" for folder in ("goodput", "tests", "benchmarks")
             for path in (REPO / folder).rglob("*.py") for t, _ in _imports(path) if t.split(".")[0] in old]
    assert found == []
