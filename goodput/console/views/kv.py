"""KV & scheduler: KV-cache usage per replica, preemptions and KV-capacity rejections, waiting against running
(Prometheus); preemptions per request over time (traces)."""

from __future__ import annotations

import plotly.graph_objects as go
import streamlit as st

from goodput.console import promql
from goodput.console.columns import show
from goodput.console.palette import plain
from goodput.console.ui import Context
from goodput.console.views.charts import bucketed, mark, prom_charts

__all__ = ["render"]


def render(ctx: Context) -> None:
    st.title("KV cache & scheduler")
    prom_charts(ctx, promql.kv(ctx.filters), "kv")
    st.subheader("From the traces")
    if not ctx.store_ready():
        return
    bucket, df = bucketed(ctx, "kv")
    fig = go.Figure()
    for dep, g in df.groupby("deployment", sort=True):
        fig.add_trace(go.Scatter(x=g["bucket"], y=g["preemptions"] / g["requests"], name=plain(f"{dep} preemptions/request"),
                                 mode="lines+markers"))
        fig.add_trace(go.Bar(x=g["bucket"], y=g["kv_rejections"], name=plain(f"{dep} KV rejections"), yaxis="y2",
                             opacity=0.4))
    fig.update_layout(title=f"preemptions per request and KV-capacity rejections (per {bucket})", height=320,
                      margin={"t": 40, "b": 20}, yaxis2={"overlaying": "y", "side": "right"})
    since, until = ctx.window()
    mark(ctx, fig, since, until)
    st.plotly_chart(fig, width="stretch", key="kv_traces")
    show(df, "kv_table")
