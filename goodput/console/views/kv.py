"""KV & scheduler: KV-cache usage per replica, preemptions and KV-capacity rejections, waiting against running
(Prometheus); preemptions per request over time (traces; buckets whose requests are still in flight marked not final)."""

from __future__ import annotations

import plotly.graph_objects as go
import streamlit as st

from goodput.console import flight, promql
from goodput.console.columns import show
from goodput.console.palette import plain
from goodput.console.ui import Context
from goodput.console.views.charts import bucketed, mark, prom_charts

__all__ = ["render"]


def _whole(most: float) -> dict:
    """A count's axis: under five, one tick per whole request (no 0.2/0.4 ticks over a flat zero)."""
    return {"tickmode": "linear", "tick0": 0, "dtick": 1, "range": [0, max(1.0, float(most)) * 1.05]} if not (
        most >= 5) else {}


def render(ctx: Context) -> None:
    st.title("KV cache & scheduler")
    prom_charts(ctx, promql.kv(ctx.filters), "kv")
    st.subheader("From the traces")
    if not ctx.store_ready():
        return
    bucket, df = bucketed(ctx, "kv")
    df = flight.mark(ctx, df, bucket)
    flight.say(ctx, df, f"Preemptions per {bucket}")
    fig = go.Figure()
    for i, (dep, g) in enumerate(df.groupby("deployment", sort=True)):
        final = g["final"] == "final"
        fig.add_traces(flight.lines(g["bucket"], g["preemptions"] / g["requests"], final,
                                    plain(f"{dep} preemptions/request"), i))
        fig.add_trace(go.Bar(x=g["bucket"], y=g["kv_rejections"], name=plain(f"{dep} KV rejections"), yaxis="y2",
                             opacity=0.4, marker_pattern_shape=["" if f else "/" for f in final]))
    fig.update_layout(title=f"preemptions per request and KV-capacity rejections (per {bucket}; open circles, hatched: "
                            "not final)", height=320,
                      margin={"t": 40, "b": 20},
                      # counts and a ratio: never below zero, so a flat zero line has no -1/-0.5 ticks; the legend
                      # clear of the right axis' ticks
                      yaxis={"rangemode": "nonnegative"},
                      yaxis2={"overlaying": "y", "side": "right", "rangemode": "nonnegative", "tickmode": "auto",
                              "showgrid": False, **_whole(df["kv_rejections"].max())},
                      legend={"x": 1.06})
    since, until = ctx.window()
    mark(ctx, fig, since, until)
    st.plotly_chart(fig, width="stretch", key="kv_traces")
    show(df, "kv_table", ("bucket", "deployment", "final"))
