"""Latency: where E2E went (gateway, queue, prefill, decode, send; and kv_transfer where a P/D-disaggregated
deployment moves the KV cache from its prefill to its decode replicas) per deployment, tenant or route, as the
analyzer decomposes it; the slowest requests; one request's trace."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from goodput.console import data, flight
from goodput.console.columns import show
from goodput.console.palette import SEGMENT_COLOURS, SEGMENTS, plain, segment_order
from goodput.console.ui import Context

__all__ = ["decomposition_rows", "render", "shown_segments"]

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


def _segment_bars(rows: list[tuple[str, str, float, float]], title: str) -> go.Figure:
    """Horizontal bars (label, segment, start s, seconds), each in its segment's colour, one legend entry each."""
    fig = go.Figure()
    seen: set[str] = set()
    for label, segment, start, seconds in rows:
        fig.add_trace(go.Bar(y=[plain(label)], x=[seconds], base=[start], orientation="h", name=plain(segment),
                             marker_color=SEGMENT_COLOURS.get(segment, "#444444"), legendgroup=segment,
                             showlegend=segment not in seen))
        seen.add(segment)
    fig.update_layout(title=title, height=80 + 28 * len(rows), margin={"t": 40, "b": 20},
                      yaxis={"autorange": "reversed"}, xaxis_title="seconds")
    return fig


def shown_segments(recs: list[dict]) -> list[str]:
    """The segments to draw: every one, less kv_transfer where no group has one (no P/D disaggregation)."""
    return [s for s in SEGMENTS if s != "kv_transfer" or any(r.get("kv_transfer_s") for r in recs)]


def _waterfall(rec: dict, name: str, segments: list[str]) -> go.Figure:
    """The mean request of one group, its segments one after the other."""
    rows, t = [], 0.0
    for seg in segments:
        v = rec.get(f"{seg}_s") or 0.0
        rows.append((seg, seg, t, v))
        t += v
    return _segment_bars(rows, f"mean seconds per segment: {plain(name)} (mean E2E {t:.2f} s)")


def _trace_figure(seg: pd.DataFrame) -> go.Figure:
    """One trace's requests (retries apart, in time order: "try N"), each one's segments in a request's path order."""
    t0 = seg["start_ns"].min()
    seg = seg.assign(rid=seg["request_id"].fillna(""), order=seg["segment"].map(segment_order))
    seg = seg.assign(first=seg.groupby("rid")["start_ns"].transform("min")).sort_values(["first", "order"],
                                                                                       kind="stable")
    tries = {rid: i for i, rid in enumerate(seg["rid"].unique(), 1)}  # a retried request's segments: "try 2 queue"
    rows = [(f"try {tries[r['rid']]} {r['segment']}" if len(tries) > 1 else str(r["segment"]), str(r["segment"]),
             (r["start_ns"] - t0) / 1e9 if pd.notna(r["start_ns"]) else 0.0, r["duration_s"])
            for r in seg.to_dict("records")]
    return _segment_bars(rows, "segments (seconds from the first)")


def render(ctx: Context) -> None:
    st.title("Latency")
    if not ctx.store_ready():
        return
    by = st.radio("decompose by", ["deployment", "tenant", "route"], horizontal=True, key="lat_by")
    recs = decomposition_rows(ctx, by)
    if not recs:
        st.info("No requests match these filters in this time range.")
        return
    segments = shown_segments(recs)
    table = flight.mark(ctx, pd.DataFrame(recs).drop(columns=[f"{s}_s" for s in SEGMENTS if s not in segments]))
    flight.say(ctx, table, "Latency decomposition")
    # the split first (what the page is for), then which segment dominates the slowest: at 1,400 px the segments fit
    show(table, "decomposition", (by, "tier", "tenant", "final", "requests", "e2e_p95_s", "ttft_p95_s",
                                  *(f"{s}_s" for s in segments), "e2e_p95_top_segment"))
    top = sorted(recs, key=lambda r: -(r["requests"] or 0))[:MAX_GROUPS]
    stacked = go.Figure([go.Bar(name=s, x=[plain(r[by]) for r in top], y=[r[f"{s}_s"] or 0.0 for r in top],
                                marker_color=SEGMENT_COLOURS[s]) for s in segments])
    stacked.update_layout(barmode="relative", title=f"mean seconds per segment, by {by}", height=340,
                          margin={"t": 40, "b": 20})
    st.plotly_chart(stacked, width="stretch", key="stacked")
    names = [str(r[by]) for r in top]
    pick = st.selectbox(f"waterfall of one {by}", names, key="lat_group")
    st.plotly_chart(_waterfall(top[names.index(pick)], pick, segments), width="stretch", key="waterfall")

    st.subheader("Slowest requests")
    if (table["final"] != "final").any():
        st.caption("The slowest finished requests: those still in flight are not listed, and the slowest of the range "
                   "may be among them.")
    slow = data.store_query(ctx.db, ctx.db_version, "slowest", {**ctx.sql_params(), "limit": SLOWEST})
    kv: tuple[str, ...] = ("kv_transfer_s", "prefill_replica")
    if not slow.empty and slow["kv_transfer_s"].isna().all():  # no P/D disaggregation among them
        slow, kv = slow.drop(columns=list(kv)), ()
    show(slow, "slowest", ("e2e_s", "ttft_s", "queue_s", "prefill_s", *kv, "decode_s", "deployment", "tier", "tenant",
                           "replica", "outcome", "input_tokens", "output_tokens"))
    if slow.empty:
        return
    trace_id = st.selectbox("drill into trace", list(slow["trace_id"]), key="lat_trace")
    seg = data.store_query(ctx.db, ctx.db_version, "trace", {"trace_id": trace_id})
    if seg.empty:
        st.info("This request has no segment rows (a vLLM span carries its segments as attributes only).")
        return
    st.plotly_chart(_trace_figure(seg), width="stretch", key="trace")


