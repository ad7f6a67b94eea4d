"""Rendering of analyzer reports: a plain aligned table for people (a terminal or a pipe alike), JSON and CSV
for scripts (``--format``)."""

from __future__ import annotations

import csv
import io
import json
import math
from datetime import datetime

__all__ = ["render"]

MAX_CELL = 28  # longer values are abbreviated in tables (all but the last column); JSON and CSV keep them whole
ZERO = 1e-9  # |x| below this (one nanosecond, in seconds) prints as 0


def _cell(v) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        if math.isfinite(v) and abs(v) < ZERO:
            return "0"
        return f"{v:.4g}"
    if isinstance(v, datetime):
        return v.isoformat()
    if isinstance(v, (list, dict)):
        return json.dumps(v, default=str)
    return str(v)


def _header(col: str) -> str:
    """A short column title: ``e2e_p95_s`` -> ``e2e p95``, ``queue_s`` -> ``queue``."""
    return col.removesuffix("_s").replace("_top_segment", " tail").replace("_", " ")


def _table(rows: list[dict], cols: list[str], title: str) -> str:
    cells = [[_cell(r.get(c)) for c in cols] for r in rows]
    for line in cells:
        for i, text in enumerate(line[:-1]):
            if len(text) > MAX_CELL:
                line[i] = text[:MAX_CELL - 1] + "…"
    heads = [_header(c) for c in cols]
    numeric = [all(isinstance(r.get(c), (int, float)) and not isinstance(r.get(c), bool) or r.get(c) is None
                   for r in rows) for c in cols]
    widths = [max([len(h), *(len(line[i]) for line in cells)]) for i, h in enumerate(heads)]

    def fmt(line: list[str]) -> str:
        return "  ".join(t.rjust(w) if num else t.ljust(w) for t, w, num in zip(line, widths, numeric, strict=True)).rstrip()

    out = [title] if title else []
    out += [fmt(heads), *(fmt(line) for line in cells)]
    return "\n".join(out)


def render(rows: list[dict], fmt: str, title: str = "", columns: list[str] | None = None) -> str:
    cols = columns or (list(rows[0]) if rows else [])
    if fmt == "json":
        return json.dumps(rows, indent=2, default=str)
    if fmt == "csv":
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=cols, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({k: _cell(r.get(k)) for k in cols})
        return buf.getvalue()
    return _table(rows, cols, title)
