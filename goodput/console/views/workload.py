"""Workload: arrival rate and request lengths over time, and the window's last quarter against the quarter before
it (like windows: equal length, enough requests each, or no comparison) — the same shift test (and thresholds) the
analyzer applies before it blames a release.

Arrivals count requests in flight too (their early spans); a bucket whose requests are not all finished is
drawn as incomplete (hatched, shaded, labelled with what is in flight) and the shift table reads only the final
part of the window (goodput/analyzer/completeness.py), so survivors of a queue build-up never look like a workload shift."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from goodput.analyzer.completeness import final_window
from goodput.analyzer.triage import MIN_OK
from goodput.console import data, flight
from goodput.console.columns import show
from goodput.console.tables import shift_table
from goodput.console.ui import Context
from goodput.console.views.charts import bucketed, mark

__all__ = ["render"]


def _incomplete(comps: dict) -> tuple[object, int]:
    """Where the selected deployments stop being final (the earliest of them), and how many requests are in flight."""
    cuts = [c.final_before for c in comps.values()]
    cut = None if not cuts or None in cuts else min(cuts)
    return cut, sum(c.in_flight or 0 for c in comps.values())


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
    width = pd.Timedelta(bucket)
    params = ctx.sql_params()
    comps = data.completeness(ctx.db, ctx.db_version, ctx.filters.deployment)
    cut, n_open = _incomplete(comps)
    oldest = max((c.oldest_age_s for c in comps.values() if c.oldest_age_s is not None), default=None)
    arr = data.arrivals(ctx.db, ctx.db_version, bucket, params).groupby("bucket", as_index=False)[
        ["arrivals", "in_flight"]].sum()
    start, end = arr["bucket"].min(), arr["bucket"].max() + width
    st.caption(f"traces cover {start:%Y-%m-%d %H:%M} .. {end:%H:%M} UTC; {n_open} requests in flight"
               + (f", the oldest for {oldest:.0f} s" if oldest is not None else "")
               + (f"; final before {cut:%H:%M:%S}" if cut is not None else "; nothing final yet"))
    final = arr["bucket"] + width <= cut if cut is not None else pd.Series(False, index=arr.index)
    done, open_ = arr[final], arr[~final]
    fig = go.Figure([go.Bar(x=done["bucket"], y=done["arrivals"] / width.total_seconds(), name="arrivals / s"),
                     go.Bar(x=open_["bucket"], y=open_["arrivals"] / width.total_seconds(), opacity=0.5,
                            name="incomplete", marker_pattern_shape="/",
                            text=[f"incomplete: {n} in flight" for n in open_["in_flight"]], textposition="outside")])
    fig.update_layout(title=f"arrival rate (req/s, per {bucket}, counted at arrival)", height=280,
                      margin={"t": 40, "b": 20})
    since, until = ctx.window()
    mark(ctx, fig, since, until)
    st.plotly_chart(fig, width="stretch", key="arrivals")
    series = flight.mark(ctx, series, bucket)
    lengths = go.Figure([t for i, c in enumerate(("input_p50", "input_p95", "output_p50", "output_p95"))
                         for t in flight.lines(series["bucket"], series[c], series["final"] == "final",
                                               c.replace("_", " "), i)])
    if cut is not None and cut < end:
        lengths.add_vrect(x0=cut, x1=end, fillcolor="grey", opacity=0.2, line_width=0,
                          annotation_text=f"incomplete: {n_open} in flight", annotation_position="top left")
    lengths.update_layout(title="request lengths (tokens; shaded, open circles: requests still in flight)", height=300,
                          margin={"t": 40, "b": 20})
    mark(ctx, lengths, since, until)
    st.plotly_chart(lengths, width="stretch", key="lengths")
    _shift(ctx, comps, params)


def _shift(ctx: Context, comps: dict, params: dict) -> None:
    """Now against before: the last quarter of the window's final part against the quarter just before it (like
    windows: equal length, the same time of the range's end), each with ``MIN_OK`` requests or not compared."""
    since, until = ctx.window()
    first = since or ctx.span()[0]
    earliest = min(comps.values(), key=lambda c: c.final_before or first, default=None)  # the least complete
    final_until = final_window(earliest, until) or until  # None only for an open window; this one ends at until
    length = (final_until - first) / 4
    split, start = final_until - length, final_until - 2 * length
    minutes = length.total_seconds() / 60
    st.subheader(f"Now ({split:%H:%M}–{final_until:%H:%M}) against the {minutes:.0f} min before")
    if final_until < until:
        st.caption(f"requests that arrived from {final_until:%H:%M} on are left out: their buckets are not final")
    window = {**params, "since": start, "until": final_until, "split": split}
    shift = data.store_query(ctx.db, ctx.db_version, "shift", window)
    n = dict(zip(shift["period"], shift["requests"], strict=True))
    if min(n.get("before", 0), n.get("now", 0)) < MIN_OK or length.total_seconds() <= 0:
        st.info(f"Not enough to compare: {n.get('before', 0)} requests before ({start:%H:%M}–{split:%H:%M}) and "
                f"{n.get('now', 0)} now, {minutes:.0f} min each; each side needs {MIN_OK}. Widen the time range.")
        return
    table = shift_table(shift, length.total_seconds())
    if table["shift"].any():
        st.warning("workload shift: " + ", ".join(table.loc[table["shift"], "measure"]), icon=":material/trending_up:")
    show(table, "shift", formats=dict.fromkeys(("before", "now"), rounded))
    sample = data.store_query(ctx.db, ctx.db_version, "lengths", window)
    hist = go.Figure([go.Histogram(x=sample.loc[sample["period"] == p, "input_tokens"], name=p, opacity=0.6,
                                   histnorm="probability") for p in ("before", "now")])
    hist.update_layout(barmode="overlay", title="input tokens, before and now (share of each window's requests)",
                       height=300, margin={"t": 40, "b": 20}, yaxis={"tickformat": ".0%"})  # a share, as the tables
    st.plotly_chart(hist, width="stretch", key="length_hist")
