"""Overview: per deployment and tier, is it hurting — SLO attainment and burn, firing alerts, replicas
available against required, queue wait, KV usage, demand against capacity; then the traces' view."""

from __future__ import annotations

import streamlit as st

from console import data, promql
from console.prom import Unreachable
from console.slos import slo_params
from console.tables import alert_rows, live_table, trace_table
from console.ui import Context, esc, prom_down

__all__ = ["render"]

# how each live query folds onto a (deployment, tier) row: min attainment and max burn over the routes
FOLD = {"ttft_attainment": "min", "tpot_attainment": "min", "ttft_burn_1h": "max", "tpot_burn_1h": "max"}





def render(ctx: Context) -> None:
    st.title("Overview")
    f, s = ctx.filters, ctx.settings
    st.subheader("Live (Prometheus)")
    try:
        results = {k: data.prom_instant(s.prometheus_url, q) for k, q in promql.overview(f).items()}
    except Unreachable as e:
        prom_down("Prometheus", e)
    else:
        table = live_table(results)
        short = table["replicas_available"] < table["replicas_required"]
        table.insert(2, "status", ["replicas short" if x else "" for x in short])
        if table.empty:
            st.info("Prometheus has no goodput series for these filters yet.")
        else:
            st.dataframe(table, hide_index=True, width="stretch", key="live")
    st.subheader("Firing alerts (Alertmanager)")
    try:
        alerts = alert_rows(data.alerts(s.alertmanager_url), f.deployment, f.tier)
    except Unreachable as e:
        prom_down("Alertmanager", e)
    else:
        paging = alerts[alerts["severity"] == "page"]
        if len(paging):
            st.error(f"{len(paging)} paging: " + ", ".join(esc(f"{a} {d}".strip())
                                                           for a, d in zip(paging["alert"], paging["deployment"],
                                                                           strict=True)), icon="🚨")
        st.dataframe(alerts, hide_index=True, width="stretch", key="alerts",
                     column_config={"runbook": st.column_config.LinkColumn("runbook", display_text="runbook")})
    st.subheader("From the traces")
    if not ctx.store_ready():
        return
    df = data.store_query(ctx.db, ctx.db_version, "overview", {**ctx.sql_params(), **slo_params(ctx.settings.slos)})
    since, until = ctx.window()
    start, end = max(since or ctx.first, ctx.first), min(until, ctx.last)  # the span the traces cover in the range
    seconds = max((end - start).total_seconds(), 1.0)
    st.caption(f"rates over {start:%Y-%m-%d %H:%M} .. {end:%H:%M} UTC ({seconds / 60:.0f} min), the span the traces "
               "cover in this range")
    st.dataframe(trace_table(df, seconds), hide_index=True, width="stretch", key="traces")

