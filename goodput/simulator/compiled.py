"""Which simulator modules are compiled with Cython, and whether the compiled ones match their source.

The hot loop (requests, the replica's scheduler, the roofline, routers, the fleet's event loop) is
plain Python that Cython compiles unchanged; the ``.pxd`` file beside each module adds the static
types. Without a C compiler the same modules run as Python, slower but identical. Python imports a
compiled module in preference to its source, so an edited ``.py`` with an old build beside it would
run the old code: ``check_fresh`` makes the import of a stale module fail instead (``StaleBuildError``,
one line), and only that import, so what never simulates (the memory budget, the catalog of models) keeps working.
Standard library only at import: ``setup.py`` reads this file before anything else is installed.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import shutil
import sys
from pathlib import Path

__all__ = ["COMPILED_MODULES", "build_status", "check_fresh", "source_copy"]

COMPILED_MODULES = tuple(f"goodput.simulator.{m}" for m in ("request", "roofline", "replica", "replica_queue", "router",
                                                             "fleet", "tally"))

# wheel installs unpack the sources and the builds within moments of each other, in any order
_MTIME_SLACK_S = 2.0
_ROOT = Path(__file__).resolve().parents[2]  # the folder holding the goodput package


def _built(stem: Path) -> Path | None:
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        path = stem.with_name(stem.name + suffix)
        if path.exists():
            return path
    return None


def build_status() -> dict[str, str]:
    """``compiled``, ``python`` (no build: runs as source) or ``stale`` for each module."""
    out = {}
    for module in COMPILED_MODULES:
        stem = _ROOT.joinpath(*module.split("."))
        built = _built(stem)
        if built is None:
            out[module] = "python"
            continue
        newest = max(p.stat().st_mtime for p in (stem.with_suffix(".py"), stem.with_suffix(".pxd")) if p.exists())
        out[module] = "stale" if newest > built.stat().st_mtime + _MTIME_SLACK_S else "compiled"
    return out


class _RefuseStale(importlib.abc.MetaPathFinder):
    """Fails the import of each module in ``stale`` with one line; every other import goes on as usual."""

    def __init__(self, stale: dict[str, str]) -> None:
        self.stale = stale

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> None:
        if fullname in self.stale:
            from goodput.foundation.errors import StaleBuildError  # setup.py runs this file bare

            raise StaleBuildError(self.stale[fullname], name=fullname)


def check_fresh() -> None:
    """Refuse, from now on, each compiled module whose source is newer than its build (once per process)."""
    if any(isinstance(f, _RefuseStale) for f in sys.meta_path):
        return
    stale = {m: f"{m}: source changed after it was compiled; rebuild with `make build` (or `pip install -e .`), "
                "or delete the stale .so" for m, s in build_status().items() if s == "stale"}
    if stale:
        sys.meta_path.insert(0, _RefuseStale(stale))


def source_copy(dest: Path) -> Path:
    """Copy the goodput package without the simulator's builds into ``dest``: with ``dest`` first on the path,
    the same checkout runs as pure Python (to compare or time the two)."""
    shutil.copytree(_ROOT / "goodput", dest / "goodput",
                    ignore=shutil.ignore_patterns("*.so", "*.pyd", "*.c", "__pycache__"))
    return dest
