"""Which simulator modules are compiled with Cython, and whether the compiled ones match their source.

The hot loop (requests, the replica's scheduler, the roofline, routers, the fleet's event loop) is
plain Python that Cython compiles unchanged; the ``.pxd`` file beside each module adds the static
types. Without a C compiler the same modules run as Python, slower but identical. Python imports a
compiled module in preference to its source, so an edited ``.py`` with an old build beside it would
run the old code: ``check_fresh`` refuses that instead. Standard library only: ``setup.py`` reads
this file before anything else is installed.
"""

from __future__ import annotations

import importlib.machinery
import shutil
from pathlib import Path

__all__ = ["COMPILED_MODULES", "build_status", "check_fresh", "source_copy"]

COMPILED_MODULES = ("simulator.request", "simulator.roofline", "simulator.replica", "simulator.replica_queue",
                    "simulator.router", "simulator.fleet", "simulator.tally")

# wheel installs unpack the sources and the builds within moments of each other, in any order
_MTIME_SLACK_S = 2.0
_ROOT = Path(__file__).resolve().parent.parent


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


def check_fresh() -> None:
    stale = [m for m, s in build_status().items() if s == "stale"]
    if stale:
        raise ImportError(f"{', '.join(stale)}: source changed after it was compiled; "
                          "rebuild with `make build` (or `pip install -e .`), or delete the stale .so")


def source_copy(dest: Path) -> Path:
    """Copy the simulator package without its builds into ``dest``: with ``dest`` first on the path,
    the same checkout runs as pure Python (to compare or time the two)."""
    shutil.copytree(_ROOT / "simulator", dest / "simulator",
                    ignore=shutil.ignore_patterns("*.so", "*.pyd", "*.c", "__pycache__"))
    return dest
