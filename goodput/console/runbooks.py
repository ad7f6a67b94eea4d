"""The runbooks of ``docs/runbooks/`` served from the repository inside the console: an alert's runbook is found
by its name (the alert name, or the file its ``runbook_url`` ends in), never by a path from the alert."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

__all__ = ["RUNBOOKS", "for_alert", "names", "safe_markdown"]

RUNBOOKS = Path(__file__).resolve().parents[2] / "docs" / "runbooks"
_IMAGE = re.compile(r"!\[")
_HTML = re.compile(r"<")
_HEADING = re.compile(r"^(#{1,4}) ", re.MULTILINE)


@cache
def names() -> tuple[str, ...]:
    return tuple(sorted(p.stem for p in RUNBOOKS.glob("*.md")))


def for_alert(alertname: str, runbook_url: str = "") -> str:
    """The runbook's name when the repository has one for this alert; else ''."""
    tail = runbook_url.rstrip("/").rsplit("/", 1)[-1].removesuffix(".md")
    return next((n for n in (tail, alertname) if n in names()), "")


def safe_markdown(name: str) -> str:
    """The runbook as markdown that fetches nothing and runs nothing (no images, no raw HTML), its headings two
    levels down so it reads as a part of the page."""
    text = (RUNBOOKS / f"{name}.md").read_text() if name in names() else ""
    return _HEADING.sub(r"##\1 ", _HTML.sub("&lt;", _IMAGE.sub(r"\\![", text)))
