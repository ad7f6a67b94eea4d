"""Durations as Prometheus writes them (``500ms``, ``5m``, ``1h30m``), and a bare number of seconds (``180``).

The rules' ``for:`` and windows, a cold-start time on the command line and the review's reading of alert rules
all mean the same thing by a duration, so they read it here.
"""

from __future__ import annotations

import re

__all__ = ["seconds"]

_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0, "y": 31536000.0}
_TERM = re.compile(r"(\d+(?:\.\d+)?)(ms|[smhdwy])")


def seconds(text: str) -> float:
    """Seconds in ``text``; ``ValueError`` naming it when it is not a duration."""
    t = text.strip()
    try:
        return float(t) if t and _TERM.search(t) is None else _terms(t)
    except ValueError:
        raise ValueError(f"not a duration (180, 180s, 500ms, 1h30m): {text!r}") from None


def _terms(t: str) -> float:
    total, end = 0.0, 0
    for m in _TERM.finditer(t):
        if m.start() != end:
            raise ValueError(t)
        total += float(m.group(1)) * _UNIT_S[m.group(2)]
        end = m.end()
    if end != len(t) or not t:
        raise ValueError(t)
    return total
