"""Baselines from git history: a file's past versions found across renames, and loaded against today's package.

Some benchmarks measure today's code beside the version it replaced, taken from this repository's history. That
version was written for the layout of its day (``simulator/``, ``capacity/loadtest/``, ``exporters/``: top-level
packages before the one ``goodput`` package), so a file is followed across its renames (``git log --follow``), and
its imports of the project are rewritten to where each name lives today (``modernize``): the module its old module
was renamed to, or, where the name itself moved (``TIER_RANK`` to ``goodput.contracts.vocabulary``), the one module
of today's package that defines it. A benchmark that runs a whole old version instead unpacks that commit's own
packages (``unpack``), whatever their layout.
"""

from __future__ import annotations

import ast
import functools
import subprocess
import sys
import types
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


@functools.cache
def git(*args: str) -> str:
    """What ``git ARGS`` prints in this repository (cached: history does not change under a benchmark)."""
    return subprocess.run(["git", "-C", str(REPO), *args], check=True, capture_output=True, text=True).stdout


@dataclass(frozen=True)
class Revision:
    """One past version of a file: the commit, and the file's path in that commit."""

    commit: str
    path: str

    def source(self, name: str | None = None) -> str:
        """The file's text at this commit, or that of ``name``, a file of the same folder."""
        path = self.path if name is None else f"{self.path.rpartition('/')[0]}/{name}".lstrip("/")
        return git("show", f"{self.commit}:{path}")


def history(path: str) -> Iterator[Revision]:
    """Every commit that changed ``path`` (today's name), newest first, each with the file's name in it."""
    for entry in git("log", "--follow", "--format=%x00%H", "--name-only", "--", path).split("\x00")[1:]:
        commit, *names = entry.split()
        if names:  # a merge lists no file
            yield Revision(commit, names[-1])


def last(path: str, marker: str) -> Revision:
    """The newest version of ``path`` whose source contains ``marker`` (SystemExit when none does)."""
    for rev in history(path):
        if marker in rev.source():
            return rev
    raise SystemExit(f"no revision of {path} containing {marker!r} in this repository's history")


def packages(commit: str) -> list[str]:
    """The top-level import packages of ``commit`` but its tests and benchmarks: what its command line imports."""
    files = git("ls-tree", "-r", "--name-only", commit).split()
    return sorted(f.split("/")[0] for f in files if f.count("/") == 1 and f.endswith("/__init__.py")
                  and not f.startswith(("tests/", "benchmarks/")))


def unpack(commit: str, dest: Path) -> Path:
    """``commit``'s packages (sources only: a compiled simulator runs as Python) extracted into ``dest``."""
    archive = subprocess.run(["git", "-C", str(REPO), "archive", commit, *packages(commit)], capture_output=True,
                             check=True).stdout
    dest.mkdir(parents=True)
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return dest


@functools.cache
def _renamed(commit: str) -> dict[str, str]:
    """Each path renamed since ``commit``, mapped to its name today: every commit's renames chained, oldest first
    (one commit's renames are found reliably; a diff across hundreds of commits misses the files edited most)."""
    today: dict[str, str] = {}
    log = git("log", "--reverse", "--format=%x00", "--name-status", "-M", "--diff-filter=R", f"{commit}..HEAD")
    for line in log.splitlines():
        status, *paths = line.strip("\x00").split("\t")
        if status.startswith("R") and len(paths) == 2:
            old, new = paths
            for origin, now in today.items():
                if now == old:
                    today[origin] = new
            today.setdefault(old, new)
    return today


def _module_path(module: str) -> str | None:
    """The file of ``module`` in today's checkout, relative to the repository, or None when there is none."""
    base = module.replace(".", "/")
    return next((p for p in (f"{base}.py", f"{base}/__init__.py") if (REPO / p).is_file()), None)


def _today(module: str, commit: str) -> str | None:
    """The name today of ``module`` as ``commit`` knew it, through the renames since; None when it is gone."""
    base = module.replace(".", "/")
    for old in (f"{base}.py", f"{base}/__init__.py"):
        new = _renamed(commit).get(old, old)
        if (REPO / new).is_file():
            return new.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
    return None


def _bound(tree: ast.Module, defined_only: bool) -> set[str]:
    """The names a module binds at import time: its functions, classes and assignments, and (unless
    ``defined_only``) its imports and lazy exports (``_EXPORTS``); ``if TYPE_CHECKING`` blocks bind nothing."""
    names: set[str] = set()
    body = list(tree.body)
    while body:
        node = body.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            bound = {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
            names |= bound
            if not defined_only and "_EXPORTS" in bound and isinstance(node.value, ast.Dict):
                names |= {k.value for k in node.value.keys if isinstance(k, ast.Constant)}
        elif isinstance(node, ast.Import | ast.ImportFrom) and not defined_only:
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, ast.If) and "TYPE_CHECKING" not in ast.unparse(node.test):
            body += node.body + node.orelse
        elif isinstance(node, ast.Try):
            body += node.body + node.orelse + node.finalbody + [n for h in node.handlers for n in h.body]
    return names


@functools.cache
def _binds(module: str) -> frozenset[str]:
    """What ``from MODULE import NAME`` finds in today's ``module``: its bound names and its submodules."""
    path = _module_path(module)
    if path is None:
        return frozenset()
    subs = {p.stem for p in (REPO / path).parent.glob("*.py")} if path.endswith("__init__.py") else set()
    return frozenset(_bound(ast.parse((REPO / path).read_text()), defined_only=False) | subs)


@functools.cache
def _homes() -> dict[str, list[str]]:
    """Every name a module of today's package defines, with the modules that define it."""
    homes: dict[str, list[str]] = {}
    for path in sorted((REPO / "goodput").rglob("*.py")):
        module = ".".join(path.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")
        for name in _bound(ast.parse(path.read_text()), defined_only=True):
            homes.setdefault(name, []).append(module)
    return homes


def _where(name: str, module: str, commit: str, keep: Iterable[str]) -> str:
    """The module of today's package to import ``name`` from, where ``commit`` imported it from ``module``."""
    renamed = _today(module, commit)
    if renamed is not None and (renamed in keep or name in _binds(renamed)):
        return renamed
    homes = _homes().get(name, [])
    if len(homes) == 1:
        return homes[0]
    raise SystemExit(f"{commit[:12]} imports {name} from {module}: today "
                     + (f"{len(homes)} modules define it ({', '.join(homes)})" if homes else "no module defines it"))


def modernize(source: str, commit: str, keep: Iterable[str] = ()) -> str:
    """``source``, a file of ``commit``, with each ``from M import ...`` of a package of that commit rewritten to
    import each name from where it lives today. Names from a module in ``keep`` (today's names of modules loaded
    from the same commit beside this one) are not looked up. Line numbers stay as they were."""
    project = set(packages(commit))
    keep = set(keep)
    edits = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] in project for a in node.names):
            raise SystemExit(f"{commit[:12]}: `{ast.unparse(node)}` (a plain import of the project) is not rewritten")
        if not isinstance(node, ast.ImportFrom) or node.level or (node.module or "").split(".")[0] not in project:
            continue
        groups: dict[str, list[str]] = {}
        for alias in node.names:
            target = _where(alias.name, node.module or "", commit, keep)
            groups.setdefault(target, []).append(alias.name + (f" as {alias.asname}" if alias.asname else ""))
        text = "; ".join(f"from {m} import {', '.join(n)}" for m, n in groups.items())
        edits.append((node, text + "\n" * ((node.end_lineno or node.lineno) - node.lineno)))
    lines = source.encode().splitlines(keepends=True)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))
    out = source.encode()
    for node, text in sorted(edits, key=lambda e: (e[0].lineno, e[0].col_offset), reverse=True):
        begin = starts[node.lineno - 1] + node.col_offset
        end = starts[(node.end_lineno or node.lineno) - 1] + (node.end_col_offset or 0)
        out = out[:begin] + text.encode() + out[end:]
    return out.decode()


def install(name: str, source: str, filename: str) -> types.ModuleType:
    """``source`` run as module ``name``, registered in ``sys.modules`` first (dataclasses and the imports of the
    modules installed after it look it up there), in place of any module of that name."""
    module = types.ModuleType(name)
    module.__file__ = filename
    sys.modules[name] = module
    exec(compile(source, filename, "exec"), module.__dict__)
    return module
