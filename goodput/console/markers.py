"""Releases, scale events and pages as markers on every time chart, so a change in a line reads against what
happened then.

Releases and scale events (release kind ``scale``) come from the releases file, pages from Prometheus' own
``ALERTS`` series (firing, severity page), which holds their history; Alertmanager's API holds only what fires now.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

import plotly.graph_objects as go

from goodput.analyzer.releases import load_releases
from goodput.console import data
from goodput.console.filters import Filters, label_matchers
from goodput.console.palette import MARKER, plain
from goodput.foundation.errors import ConfigError
from goodput.foundation.promapi import Endpoint, PromError

__all__ = ["Firing", "Marker", "draw", "pages", "releases", "spans"]

MAX_MARKERS = 40  # per chart, the newest: more would hide the lines
HALO = "1px 1px 2px white, -1px -1px 2px white, 1px -1px 2px white, -1px 1px 2px white"
FIRING = 'ALERTS{{alertstate="firing"{sel}}}'


@dataclass(frozen=True)
class Marker:
    time: datetime
    kind: str  # release, scale, page
    text: str


def releases(path, f: Filters) -> list[Marker]:
    """The releases file's releases and scale events for the filters' deployment; none when it cannot be read (the
    Releases page says why)."""
    try:
        found = load_releases(path) if path.exists() else []
    except ConfigError:
        return []
    return [Marker(r.time, "scale" if r.kind == "scale" else "release", f"{r.deployment}: {r.label()}")
            for r in found if not f.deployment or r.deployment in (f.deployment, "*")]


@dataclass(frozen=True)
class Firing:
    labels: dict[str, str]
    start: datetime
    end: datetime
    ongoing: bool  # still firing at the end of the range


def spans(server: Endpoint, f: Filters, start: datetime, end: datetime, step_s: float, severity: str = "") -> list[Firing]:
    """Each time an alert fired in [start, end], from ``ALERTS`` (a gap of more than two steps ends a span).
    Raises ``PromError``."""
    sel = ",".join(filter(None, (label_matchers(f), f'severity="{severity}"' if severity else "")))
    out = []
    for s in data.prom_range(server, FIRING.format(sel="," + sel if sel else ""), start, end, step_s):
        run: list[float] = []
        for t in [*s.times, None]:
            if run and (t is None or t - run[-1] > 2 * step_s):
                out.append(Firing(s.labels, datetime.fromtimestamp(run[0], UTC), datetime.fromtimestamp(run[-1], UTC),
                                  ongoing=end.timestamp() - run[-1] <= 2 * step_s))
                run = []
            if t is not None:
                run.append(t)
    return out


def pages(server: Endpoint, f: Filters, start: datetime, end: datetime, step_s: float) -> list[Marker]:
    """Where each page began firing in [start, end]; none when Prometheus is down (the page's banner says so)."""
    try:
        found = spans(server, f, start, end, step_s, "page")
    except PromError:
        return []
    return [Marker(s.start, "page", "page: " + " ".join(filter(None, (s.labels.get(k) for k in
                                                                      ("alertname", "deployment", "tier")))))
            for s in found]


def draw(fig: go.Figure, markers: list[Marker], start: datetime | None, end: datetime) -> None:
    """A vertical line per marker inside [start, end], its text along it; the x range is left to the data."""
    inside = sorted((m for m in markers if (start is None or m.time >= start) and m.time <= end), key=lambda m: m.time)
    for m in inside[-MAX_MARKERS:]:
        colour, dash = MARKER[m.kind]
        fig.add_vline(x=m.time, line_dash=dash, line_color=colour, line_width=1.5)
        # no background box, which would hide the tops of the bars it crosses (a bar read 1.3 for 2.35): a white
        # halo keeps the text readable over bars and lines while they show through
        fig.add_annotation(x=m.time, y=1, yref="paper", text=plain(m.text), showarrow=False, textangle=-90,
                           xanchor="right", yanchor="top", font={"size": 10, "color": colour, "shadow": HALO})
