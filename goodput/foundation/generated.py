"""Committed generated files (rules, dashboards): ``--check`` compares them with a fresh build and names the stale."""

from __future__ import annotations

import sys
from pathlib import Path

__all__ = ["report_stale"]


def report_stale(files: dict[str, str], out: Path, command: str) -> int:
    """Exit status of ``--check``: 1, listing each file under ``out`` that is missing or differs from ``files``."""
    stale = [out / name for name, text in files.items() if not (out / name).exists() or (out / name).read_text() != text]
    for path in stale:
        print(f"stale: {path}", file=sys.stderr)
    if stale:
        print(f"run `{command}` and commit the result", file=sys.stderr)
    return 1 if stale else 0
