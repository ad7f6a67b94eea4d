"""Workload: arrival rate and request lengths over time, and the window's last quarter against the rest — the
same shift test (and thresholds) the analyzer applies before it blames a release."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from console import data
from console.columns import show
from console.pages.charts import bucketed, mark
from console.tables import shift_table
from console.ui import Context

__all__ = ["render"]


def rounded(v: float) -> str:
    """A rate (req/s) to two decimals, a token count to whole tokens."""
    return f"{v:,.2f}" if abs(v) < 100 else f"{v:,.0f}"


def render(ctx: Context) -> None:
    st.title("Workload")
    if not ctx.store_ready():
        return
    bucket, series = bucketed(ctx, "workload")
    if series.empty:
        st.info("No requests match these filters in this time range.")
        return
    width = pd.Timedelta(bucket).total_seconds()
    fig = go.Figure(go.Bar(x=series["bucket"], y=series["arrivals"] / width, name="arrivals / s"))
    fig.update_layout(title=f"arrival rate (req/s, per {bucket})", height=280, margin={"t": 40, "b": 20})
    since, until = ctx.window()
    mark(ctx, fig, since, until)
    st.plotly_chart(fig, width="stretch", key="arrivals")
    lengths = go.Figure([go.Scatter(x=series["bucket"], y=series[c], name=c.replace("_", " "), mode="lines+markers")
                         for c in ("input_p50", "input_p95", "output_p50", "output_p95")])
    lengths.update_layout(title="request lengths (tokens)", height=300, margin={"t": 40, "b": 20})
    mark(ctx, lengths, since, until)
    st.plotly_chart(lengths, width="stretch", key="lengths")

    start = since or ctx.first
    split = start + (until - start) * 3 / 4
    st.subheader(f"Now (from {split:%H:%M}) against before")
    shift = data.store_query(ctx.db, ctx.db_version, "shift", {**ctx.sql_params(), "split": split})
    table = shift_table(shift)
    if table["shift"].any():
        st.warning("workload shift: " + ", ".join(table.loc[table["shift"], "measure"]), icon=":material/trending_up:")
    show(table, "shift", formats=dict.fromkeys(("before", "now"), rounded))
    sample = data.store_query(ctx.db, ctx.db_version, "lengths", {**ctx.sql_params(), "split": split})
    hist = go.Figure([go.Histogram(x=sample.loc[sample["period"] == p, "input_tokens"], name=p, opacity=0.6,
                                   histnorm="probability") for p in ("before", "now")])
    hist.update_layout(barmode="overlay", title="input tokens, before and now", height=300, margin={"t": 40, "b": 20})
    st.plotly_chart(hist, width="stretch", key="length_hist")
