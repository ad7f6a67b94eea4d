"""Rendering of analyzer reports: a table for people, JSON and CSV for scripts (``--format``)."""

from __future__ import annotations

import csv
import io
import json
from datetime import datetime

from rich.console import Console
from rich.table import Table

__all__ = ["render"]


def _cell(v) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, datetime):
        return v.isoformat()
    if isinstance(v, (list, dict)):
        return json.dumps(v, default=str)
    return str(v)


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
    table = Table(title=title or None, show_lines=False)
    for c in cols:
        table.add_column(c, overflow="fold")
    for r in rows:
        table.add_row(*(_cell(r.get(c)) for c in cols))
    console = Console(width=200, record=True, file=io.StringIO())
    console.print(table)
    return console.export_text()
