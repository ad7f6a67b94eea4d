"""The README and the design document tell the truth about this repository: their links resolve to files in it,
and the README's tour names every command `goodput --help` offers."""

import functools
import re
import subprocess
import sys

import pytest

from tests.conftest import REPO

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_links_resolve_inside_the_repository(doc):
    for target in LINK.findall(doc.read_text()):
        if re.match(r"[a-z]+://|mailto:", target):
            continue
        path = (doc.parent / target.split("#", 1)[0]).resolve()
        assert path.is_relative_to(REPO), f"{doc.name} links outside the repository: {target}"
        assert path.exists(), f"{doc.name} links to {target}, which does not exist"


@functools.cache
def _subcommands(*words: str) -> tuple[str, ...]:
    """The subcommands `goodput WORDS --help` lists (argparse's indented COMMAND entries)."""
    r = subprocess.run([sys.executable, "-m", "goodput", *words, "--help"], cwd=REPO, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    section = r.stdout.partition("positional arguments:")[2].partition("options:")[0]
    return tuple(re.findall(r"^    ([a-z][\w-]*)(?:\s|$)", section, re.M))


def _leaves(*words: str) -> list[tuple[str, ...]]:
    """Every command path below ``words`` that has no subcommand of its own."""
    return [leaf for sub in _subcommands(*words) for leaf in (_leaves(*words, sub) or [(*words, sub)])]


def test_the_readme_tours_every_command():
    commands = _leaves()
    assert ("simulate",) in commands and ("exporter", "engine", "normalize") in commands, commands
    tour = (REPO / "README.md").read_text().split("## Commands", 1)[1].split("\n## ", 1)[0]
    missing = [" ".join(c) for c in commands if not re.search(rf"^goodput {' '.join(c)}(\s|$)", tour, re.M)]
    assert not missing, f"README.md's tour lacks: {missing}"
    named = [m.split() for m in re.findall(r"^goodput ((?:[a-z][\w-]* ?)+)", tour, re.M)]
    ghosts = [" ".join(n) for n in named if not any(list(c[:len(n)]) == n for c in commands)]
    assert not ghosts, f"README.md's tour names commands that do not exist: {ghosts}"
