"""Charts the pages share: Prometheus range series as lines, a bucket width for a time window, and the markers
(releases, scale events, pages) every time chart carries."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from goodput.console import data, markers, promql
from goodput.console.palette import plain
from goodput.console.ui import Context, prom_down, step_for
from goodput.foundation.promapi import PromError

__all__ = ["bucket_for", "bucketed", "mark", "prom_charts"]

BUCKETS = ((timedelta(minutes=1), "1 minute"), (timedelta(minutes=5), "5 minutes"), (timedelta(minutes=15), "15 minutes"),
           (timedelta(hours=1), "1 hour"), (timedelta(days=1), "1 day"))


def bucket_for(since: datetime | None, until: datetime, first: datetime | None, points: int = 20) -> str:
    """The smallest bucket that gives at most about 4 x ``points`` buckets over the window."""
    span = until - (since or first or until - timedelta(hours=1))
    return next((name for width, name in BUCKETS if span / width <= 4 * points), BUCKETS[-1][1])


def bucketed(ctx: Context, name: str) -> tuple[str, pd.DataFrame]:
    """``goodput/console/sql/<name>.sql`` over the filters, per time bucket sized to the window; the bucket's name."""
    since, until = ctx.window()
    bucket = bucket_for(since, until, ctx.first)
    return bucket, data.store_query(ctx.db, ctx.db_version, name, {**ctx.sql_params(), "bucket": bucket})


def mark(ctx: Context, fig: go.Figure, start: datetime | None, end: datetime) -> None:
    """The releases, scale events and pages of [start, end] (``start`` None: from the store's first request)."""
    start = start or ctx.first or end - timedelta(hours=1)
    found = markers.releases(ctx.settings.releases, ctx.filters)
    found += markers.pages(ctx.settings.prometheus, ctx.filters, start, end, step_for(start, end))
    markers.draw(fig, found, start, end)


def prom_charts(ctx: Context, queries: dict[str, str], key: str) -> None:
    """One line chart per query over the time range; one banner if Prometheus is down."""
    start, end = ctx.prom_window()
    step = step_for(start, end)
    try:
        results = {title: data.prom_range(ctx.settings.prometheus, q, start, end, step) for title, q in queries.items()}
    except PromError as e:
        prom_down("Prometheus", e)
        return
    for i, (title, series) in enumerate(results.items()):
        fig = go.Figure()
        for s in series:
            name = " ".join(str(v) for k, v in sorted(s.labels.items()) if k != "__name__") or title
            fig.add_trace(go.Scatter(x=[datetime.fromtimestamp(t, UTC) for t in s.times], y=s.values,
                                     mode="lines" if len(s.times) > 2 else "markers", name=plain(name)))
        # the whole range, so a series that began late reads as late and an empty chart still has its time axis
        fig.update_layout(title=title, height=280, margin={"t": 40, "b": 20}, xaxis={"type": "date", "range": [start, end]})
        if title in promql.SHARES:
            fig.update_yaxes(tickformat=".0%", rangemode="tozero")
        mark(ctx, fig, start, end)
        if not series:
            fig.add_annotation(text="no data for these filters", showarrow=False, x=0.5, y=0.5, xref="paper",
                               yref="paper")
            fig.update_yaxes(showticklabels=False)  # Plotly's empty axis runs -1 to 4: numbers nothing measured
        st.plotly_chart(fig, width="stretch", key=f"{key}{i}")
