"""Releases: p95 latency over time with the release markers, and the analyzer's verdicts — which change points a
release explains (the evidence agrees) and which are workload shifts or unexplained."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from analyzer.releases import load_releases
from console import data
from console.pages.charts import BUCKETS
from console.tables import verdict_table
from console.ui import Context
from goodput.foundation.errors import ConfigError

__all__ = ["render"]

COLUMNS = ["deployment", "tier", "metric", "time", "change", "before_p95_s", "after_p95_s", "segment", "cause", "release",
           "blamed"]



def render(ctx: Context) -> None:
    st.title("Releases")
    if not ctx.store_ready():
        return
    f, path = ctx.filters, ctx.settings.releases
    releases = []
    if path.exists():
        try:
            releases = load_releases(path)
        except ConfigError as e:
            st.error(f"releases file: {e}")
    else:
        st.info(f"No releases file at {path} (GOODPUT_RELEASES); change points are shown without attribution.")
    bucket = st.selectbox("bucket", [name for _, name in BUCKETS[:3]], index=0, key="rel_bucket")
    since, until = ctx.window()
    series = data.bucket_series(ctx.db, ctx.db_version, bucket, since, until, f.deployment)
    if f.tier:
        series = series[series["tier"] == f.tier]
    fig = go.Figure()
    for (dep, tier), g in series.groupby(["deployment", "tier"], sort=True):
        for metric in ("e2e_s", "ttft_s"):
            fig.add_trace(go.Scatter(x=g["bucket"], y=g[metric], mode="lines", name=f"{dep} {tier} p95 {metric[:-2]}"))
    shown = [r for r in releases if (not f.deployment or r.deployment in (f.deployment, "*"))
             and (since is None or r.time >= since) and r.time < until]
    for r in shown:
        fig.add_vline(x=r.time, line_dash="dash", line_color="#c0392b")
        fig.add_annotation(x=r.time, y=1, yref="paper", text=f"{r.deployment}: {r.label()}", showarrow=False,
                           textangle=-90, xanchor="right", yanchor="top", font={"size": 10})
    fig.update_layout(title=f"p95 latency (s) per {bucket}, releases dashed", height=380, margin={"t": 40, "b": 20})
    st.plotly_chart(fig, width="stretch", key="p95")
    found, searched = data.regressions(ctx.db, ctx.db_version, str(path) if path.exists() else None,
                                       data.store_version(path), bucket, since, until, f.deployment)
    table = verdict_table(found, f.tier)
    st.subheader("The analyzer's verdicts")
    blamed = table[table["blamed"]]
    for _, r in blamed.head(3).iterrows():
        st.error(f"{r['deployment']} {r['tier']}: p95 {r['metric'][:-2]} {r['change']:+.0%} after release "
                 f"{r['release']} — {r['cause']}", icon="🏷️")
    if table.empty:
        st.info(searched)
    st.dataframe(table, hide_index=True, width="stretch", key="verdicts")
    st.dataframe(pd.DataFrame([{"time": r.time, "deployment": r.deployment, "release": r.label(), "note": r.note}
                               for r in shown]), hide_index=True, width="stretch", key="release_list")
