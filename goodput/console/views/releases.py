"""Releases: p95 latency over time with the release, scale and page markers (buckets whose requests are still in
flight dotted: not final), and the analyzer's verdicts — which change points a release explains (the evidence
agrees), in its direction's colour (a regression red, an improvement green, a scale event grey, a release's queue
still building amber), and which are workload shifts or unexplained. A scale event is named as one, after the
releases, never as a release."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from goodput.analyzer.releases import load_releases
from goodput.console import data, flight
from goodput.console.columns import show
from goodput.console.palette import plain
from goodput.console.tables import verdict_table
from goodput.console.ui import Context, esc
from goodput.console.views.charts import BUCKETS, mark
from goodput.foundation.errors import ConfigError

__all__ = ["render"]

VERDICT_FIRST = ("release", "direction", "change", "metric", "blamed", "cause", "deployment", "tier", "time",
                 "before_p95_s", "after_p95_s", "segment")
BANNER = {"improvement": (st.success, ":material/trending_down:"), "scale": (st.info, ":material/stacks:")}
REGRESSION = (st.error, ":material/trending_up:")  # the analyzer's word, or none (then a blamed change is one)
METRIC = {"e2e_s": "E2E", "ttft_s": "TTFT", "tpot_s": "TPOT"}  # the others are segments: queue_s -> queue


def _metric(name: str) -> str:
    return METRIC.get(name, str(name).removesuffix("_s"))

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
            st.error(f"releases file: {esc(e)}")
    else:
        st.info(f"No releases file at {esc(path)} (GOODPUT_RELEASES); change points are shown without attribution.")
    bucket = st.selectbox("bucket", [name for _, name in BUCKETS[:3]], index=0, key="rel_bucket")
    since, until = ctx.window()
    series = data.bucket_series(ctx.db, ctx.db_version, bucket, since, until, f.deployment)
    if f.tier:
        series = series[series["tier"] == f.tier]
    series = flight.mark(ctx, series, bucket)
    flight.say(ctx, series, f"p95 per {bucket}")
    fig = go.Figure()
    for i, ((dep, tier), g) in enumerate(series.groupby(["deployment", "tier"], sort=True)):
        for j, metric in enumerate(("e2e_s", "ttft_s")):
            fig.add_traces(flight.lines(g["bucket"], g[metric], g["final"] == "final",
                                        plain(f"{dep} {tier} p95 {metric[:-2]}"), 2 * i + j))
    shown = [r for r in releases if (not f.deployment or r.deployment in (f.deployment, "*"))
             and (since is None or r.time >= since) and r.time < until]
    mark(ctx, fig, since, until)
    fig.update_layout(title=f"p95 latency (s) per {bucket}; open circles: not final; releases dashed, scale events dotted, "
                            "pages solid",
                      height=380, margin={"t": 40, "b": 20})
    st.plotly_chart(fig, width="stretch", key="p95")
    found, searched = data.regressions(ctx.db, ctx.db_version, str(path) if path.exists() else None,
                                       data.store_version(path), bucket, since, until, f.deployment)
    table = verdict_table(found, f.tier)
    st.subheader("The analyzer's verdicts")
    blamed = table[table["blamed"].fillna(False).astype(bool)]
    # the releases' verdicts first (three at most), then a scale event's (one): capacity changing, never a release
    scale_rows = (blamed["direction"] == "scale").to_numpy()
    for _, r in pd.concat([blamed[~scale_rows].head(3), blamed[scale_rows].head(1)]).iterrows():
        banner, icon = BANNER.get(r["direction"], REGRESSION)
        scale = r["direction"] == "scale"
        word = "" if not r["direction"] or scale else f" ({r['direction']})"
        after = (f"the scale event {str(r['release']).split(' ', 1)[-1]} replicas" if scale
                 else f"release {r['release']}")
        banner(esc(f"{r['deployment']} {r['tier']}: p95 {_metric(r['metric'])} {r['change']:+.0%}{word} after "
                   f"{after}: {r['cause']}"), icon=icon)
    if table.empty:
        st.info(esc(searched))
    show(table.assign(time=pd.to_datetime(table["time"], utc=True)), "verdicts", VERDICT_FIRST, colour_by="direction",
         formats={"metric": _metric})
    show(pd.DataFrame([{"released": r.time, "deployment": r.deployment, "release": r.label(), "note": r.note}
                       for r in shown], columns=["released", "deployment", "release", "note"]), "release_list")
