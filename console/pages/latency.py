"""Latency: where E2E went (gateway, queue, prefill, decode, send) per deployment, tenant or route, as the
analyzer decomposes it; the slowest requests; one request's trace."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from console import data
from console.ui import Context

__all__ = ["SEGMENTS", "decomposition_rows", "render"]

SEGMENTS = ("gateway", "queue", "prefill", "decode", "send", "other")
SLOWEST = 20
MAX_GROUPS = 12


def decomposition_rows(ctx: Context, by: str) -> list[dict]:
    """The analyzer's decomposition grouped by ``by`` (plus tier and tenant when the filters set them), the
    rows the filters select."""
    f = ctx.filters
    dims = [by] + [d for d in ("tier", "tenant") if getattr(f, d) and d != by]
    since, until = ctx.window()
    recs = data.decomposition(ctx.db, ctx.db_version, tuple(dims), since, until, f.deployment)
    return [r for r in recs if all(r.get(d) == getattr(f, d) for d in ("tier", "tenant") if getattr(f, d))]


def _waterfall(rec: dict, name: str) -> go.Figure:
    values = [rec[f"{s}_s"] or 0.0 for s in SEGMENTS]
    fig = go.Figure(go.Waterfall(x=[*SEGMENTS, "mean E2E"], y=[*values, None],
                                 measure=["relative"] * len(SEGMENTS) + ["total"], name=name))
    fig.update_layout(title=f"mean seconds per segment: {name}", height=320, margin={"t": 40, "b": 20})
    return fig


def _trace_figure(seg: pd.DataFrame) -> go.Figure:
    t0 = seg["start_ns"].min()
    fig = go.Figure()
    for _, row in seg.iterrows():
        start = (row["start_ns"] - t0) / 1e9 if pd.notna(row["start_ns"]) else 0.0
        fig.add_trace(go.Bar(y=[f"{row['request_id'] or ''} {row['segment']}"], x=[row["duration_s"]], base=[start],
                             orientation="h", name=str(row["segment"]), showlegend=False))
    fig.update_layout(title="segments (seconds from the first)", height=60 + 28 * len(seg), margin={"t": 40, "b": 20},
                      yaxis={"autorange": "reversed"})
    return fig


def render(ctx: Context) -> None:
    st.title("Latency")
    if not ctx.store_ready():
        return
    by = st.radio("decompose by", ["deployment", "tenant", "route"], horizontal=True, key="lat_by")
    recs = decomposition_rows(ctx, by)
    if not recs:
        st.info("No requests match these filters in this time range.")
        return
    table = pd.DataFrame(recs)
    st.dataframe(table, hide_index=True, width="stretch", key="decomposition")
    top = sorted(recs, key=lambda r: -(r["requests"] or 0))[:MAX_GROUPS]
    stacked = go.Figure([go.Bar(name=s, x=[str(r[by]) for r in top], y=[r[f"{s}_s"] or 0.0 for r in top])
                         for s in SEGMENTS])
    stacked.update_layout(barmode="relative", title=f"mean seconds per segment, by {by}", height=340,
                          margin={"t": 40, "b": 20})
    st.plotly_chart(stacked, width="stretch", key="stacked")
    names = [str(r[by]) for r in top]
    pick = st.selectbox(f"waterfall of one {by}", names, key="lat_group")
    st.plotly_chart(_waterfall(top[names.index(pick)], pick), width="stretch", key="waterfall")

    st.subheader("Slowest requests")
    slow = data.store_query(ctx.db, ctx.db_version, "slowest", {**ctx.sql_params(), "limit": SLOWEST})
    st.dataframe(slow, hide_index=True, width="stretch", key="slowest")
    if slow.empty:
        return
    trace_id = st.selectbox("drill into trace", list(slow["trace_id"]), key="lat_trace")
    seg = data.store_query(ctx.db, ctx.db_version, "trace", {"trace_id": trace_id})
    if seg.empty:
        st.info("This request has no segment rows (a vLLM span carries its segments as attributes only).")
        return
    st.plotly_chart(_trace_figure(seg), width="stretch", key="trace")


