"""Imports run down the house, never up: the foundation imports no part, no part imports the command line,
and no two modules import each other (not even for type hints)."""

import ast
from pathlib import Path

from tests.conftest import REPO

PARTS = ("simulator", "exporters", "analyzer", "capacity", "console", "goodput")
FOUNDATION = "goodput.foundation"


def _project_imports(path: Path) -> set[str]:
    """Every project module ``path`` imports, at any depth of the file (TYPE_CHECKING blocks included)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
            [node.module] if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 else []
        out.update(n for n in names if n.split(".")[0] in PARTS)
    return out


def _modules() -> dict[str, set[str]]:
    mods = {}
    for part in PARTS:
        for path in (REPO / part).rglob("*.py"):
            name = ".".join(path.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")
            mods[name] = _project_imports(path)
    return mods


def test_the_foundation_imports_no_part_of_the_project():
    bad = {m: sorted(i for i in imps if not i.startswith(FOUNDATION))
           for m, imps in _modules().items() if m.startswith(FOUNDATION)}
    assert not {m: i for m, i in bad.items() if i}, "the foundation must stand on the standard library alone"


def test_no_part_imports_the_command_line_or_the_demo():
    top = [i for m, imps in _modules().items() if not m.startswith("goodput")
           for i in imps if i.startswith("goodput") and not i.startswith(FOUNDATION) and i != "goodput"]
    assert not top, f"parts import from the top of the house: {top}"


def test_no_two_modules_import_each_other():
    mods = _modules()
    pairs = sorted({tuple(sorted((a, b))) for a, imps in mods.items() for b in imps
                    if b != a and a in mods.get(b, ())})
    assert not pairs, f"import cycles: {pairs}"
