"""The README and the pages of docs/ tell the truth about this repository: their links resolve to files in it, every
repository path and module they name in code exists, and the README's tour and the design's command block name
every command `goodput --help` offers, with flags each command takes."""

import fnmatch
import functools
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

DOCS = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")
CODE = re.compile(r"^```.*?^```|`[^`\n]+`", re.S | re.M)  # fenced blocks and inline code spans
PATH = re.compile(r"(?<![\w./~$-])\.?[\w-]+/[\w.*/-]*")  # a relative path: a folder, a slash, maybe more
MODULE = re.compile(r"(?<![\w./])(?:goodput|tests|benchmarks)(?:\.\w+)+")


def _ignored(name: str) -> bool:
    """Whether .gitignore leaves out a top-level folder of this name (a build or run output: .venv/, out/, ...)."""
    patterns = [line.strip().rstrip("/") for line in (REPO / ".gitignore").read_text().splitlines()
                if line.strip() and not line.startswith("#")]
    return any(fnmatch.fnmatch(name, p) for p in patterns if "/" not in p)


# the folders a path in the docs starts from; outputs (out/, demo-out/) are not the repository's
FOLDERS = {p.name for p in REPO.iterdir() if p.is_dir() and p.name != ".git" and not _ignored(p.name)}
PARTS = {p.name for p in (REPO / "goodput").iterdir() if p.is_dir() and not p.name.startswith("_")}
NAMES = {p.stem for p in (REPO / "goodput").rglob("*.py")} | PARTS  # what may follow "goodput." in a module name
RETIRED = {"capacity"}  # a top-level package before the one goodput package (loadtest, plan and review lived there)


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_links_resolve_inside_the_repository(doc):
    for target in LINK.findall(doc.read_text()):
        if re.match(r"[a-z]+://|mailto:", target):
            continue
        path = (doc.parent / target.split("#", 1)[0]).resolve()
        assert path.is_relative_to(REPO), f"{doc.name} links outside the repository: {target}"
        assert path.exists(), f"{doc.name} links to {target}, which does not exist"


@functools.cache
def _help(*words: str) -> str:
    """What `goodput WORDS --help` prints."""
    r = subprocess.run([sys.executable, "-m", "goodput", *words, "--help"], cwd=REPO, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout


def _subcommands(*words: str) -> tuple[str, ...]:
    """The subcommands `goodput WORDS --help` lists (argparse's indented COMMAND entries)."""
    section = _help(*words).partition("positional arguments:")[2].partition("options:")[0]
    return tuple(re.findall(r"^    ([a-z][\w-]*)(?:\s|$)", section, re.M))


def _leaves(*words: str) -> list[tuple[str, ...]]:
    """Every command path below ``words`` that has no subcommand of its own."""
    return [leaf for sub in _subcommands(*words) for leaf in (_leaves(*words, sub) or [(*words, sub)])]


def _tour(doc: str, heading: str) -> list[tuple[tuple[str, ...], str]]:
    """The commands of ``doc``'s section ``heading``: each ``goodput ...`` line, with the indented lines under it, as
    (its command path, its text)."""
    section = (REPO / doc).read_text().split(f"\n{heading}\n", 1)[1].split("\n## ", 1)[0]
    commands = {leaf[:n] for leaf in _leaves() for n in range(1, len(leaf) + 1)}  # every command path, inner too
    tour: list[tuple[tuple[str, ...], str]] = []
    for line in section.splitlines():
        if line.startswith("goodput "):
            words = tuple(re.match(r"goodput ((?:[a-z][\w-]* ?)*)", line)[1].split())
            tour.append((max((c for c in commands if words[:len(c)] == c), key=len, default=words), line))
        elif tour and line.startswith(" ") and line.strip():
            tour[-1] = (tour[-1][0], f"{tour[-1][1]}\n{line}")
    return tour


@pytest.mark.parametrize(("doc", "heading"), [("README.md", "## Commands"), ("docs/design.md", "## Command line")])
def test_the_command_tours_name_every_command_and_only_real_flags(doc, heading):
    """README's tour and the design's command block name every command `goodput --help` offers, no other, and only
    flags that command's `--help` lists."""
    commands = _leaves()
    assert ("simulate",) in commands and ("exporter", "engine", "normalize") in commands, commands
    tour = _tour(doc, heading)
    named = {path for path, _ in tour}
    missing = [" ".join(c) for c in commands if c not in named]
    assert not missing, f"{doc}'s {heading} lacks: {missing}"
    ghosts = [" ".join(p) for p in named if not any(c[:len(p)] == p for c in commands)]
    assert not ghosts, f"{doc}'s {heading} names commands that do not exist: {ghosts}"
    wrong = [f"goodput {' '.join(path)} {flag}" for path, text in tour
             for flag in re.findall(r"(?<![\w-])--[a-z][\w-]*", text)
             if not re.search(rf"(?<![\w-]){flag}(?![\w-])", _help(*path))]
    assert not wrong, f"{doc}'s {heading} names flags its command does not take: {wrong}"


def _code(doc: Path) -> list[str]:
    """The code in ``doc``: its fenced blocks and inline code spans."""
    return CODE.findall(doc.read_text())


def _module_exists(name: str) -> bool:
    """Whether ``name`` is a module of this repository, or a name (attribute) in one: its longest prefix that is a
    module file must exist and contain the next part."""
    parts = name.split(".")
    for n in range(len(parts), 0, -1):
        base = REPO.joinpath(*parts[:n])
        source = next((f for f in (base.with_suffix(".py"), base / "__init__.py") if f.is_file()), None)
        if source is not None:
            return n == len(parts) or re.search(rf"\b{parts[n]}\b", source.read_text()) is not None
    return False


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_repository_paths_in_code_exist(doc):
    """A path in code that starts at a folder of the repository (``goodput/plan/replicas.py``, ``rules/*.rules.yaml``)
    names something there; a part's module is written from the root (``goodput/plan/x.py``, not ``plan/x.py`` or
    ``capacity/plan/x.py``)."""
    missing, short = [], []
    for code in _code(doc):
        for path in (m.rstrip(".,;:") for m in PATH.findall(code)):
            first = path.split("/")[0]
            if first in FOLDERS and not list(REPO.glob(path.rstrip("/"))):
                missing.append(path)
            elif first in RETIRED or (first in PARTS and path.endswith((".py", ".sql"))):
                short.append(path)
    assert not missing and not short, (f"{doc.relative_to(REPO)} names paths that do not exist: {sorted(set(missing))}; "
                                       f"paths from a part, or from before the move into goodput/: {sorted(set(short))}")


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_modules_in_code_exist(doc):
    """A dotted name in code (``goodput.plan.demand.MAX_PEAK_RPS``, ``tests.contracts.test_catalog``) is a module of
    this repository or a name in one. ``goodput.`` followed by a word that is no part or module of the package
    (``goodput.dev``, a domain) is not a module name."""
    names = {m for code in _code(doc) for m in MODULE.findall(code)}
    stale = sorted(n for n in names if (not n.startswith("goodput.") or n.split(".")[1] in NAMES)
                   and not _module_exists(n))
    assert not stale, f"{doc.relative_to(REPO)} names modules that do not exist: {stale}"
