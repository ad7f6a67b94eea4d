"""Routing: does the router spread load — requests and p95 queue wait per replica, their skew, prefix-cache hits,
retries and fallbacks (traces); live load and cache hits per replica, rejections (Prometheus)."""

from __future__ import annotations

import plotly.graph_objects as go
import streamlit as st

from console import data, promql
from console.columns import show
from console.pages.charts import prom_charts
from console.palette import plain
from console.tables import skew
from console.ui import Context

__all__ = ["render"]



def render(ctx: Context) -> None:
    st.title("Routing")
    st.subheader("From the traces")
    if ctx.store_ready():
        df = data.store_query(ctx.db, ctx.db_version, "routing", ctx.sql_params())
        if df.empty:
            st.info("No requests with a replica match these filters.")
        else:
            show(skew(df), "skew")
            label = (df["deployment"] + " / " + df["replica"]).map(plain)
            fig = go.Figure([go.Bar(x=label, y=df["requests"], name="requests"),
                             go.Scatter(x=label, y=df["queue_p95_s"], name="p95 queue wait (s)", yaxis="y2",
                                        mode="markers", marker={"size": 10})])
            fig.update_layout(title="requests and p95 queue wait per replica", height=320, margin={"t": 40, "b": 20},
                              yaxis={"title": "requests", "rangemode": "tozero"},
                              yaxis2={"overlaying": "y", "side": "right", "rangemode": "tozero", "tickformat": ".2f",
                                      "title": "p95 queue wait (s)"})
            st.plotly_chart(fig, width="stretch", key="replicas")
            show(df, "routing_table", ("deployment", "replica", "requests", "queue_p95_s"))
    st.subheader("Live (Prometheus)")
    prom_charts(ctx, promql.routing(ctx.filters), "routing")
