"""Overview: per deployment and tier, is it hurting — status (met, burning, paging), queue wait, KV usage, demand
against capacity, replicas up against needed, SLO attainment and burn; the firing alerts with their runbooks (served
from the repository), Alertmanager's silences and the alerts' history; then the traces' view."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from goodput.console import data, flight, promql, runbooks
from goodput.console.columns import show
from goodput.console.markers import spans
from goodput.console.slos import slo_params
from goodput.console.tables import alert_rows, live_table, silence_rows, status, trace_table
from goodput.console.ui import Context, esc, prom_down, step_for
from goodput.foundation.promapi import PromError

__all__ = ["render"]

# what on call reads first, each table within 1,400 px (one table of all fourteen was cut off after capacity): is the
# SLO met and how fast is it burning, then why (replicas short of needed, queue, KV, demand against capacity)
LIVE_SLO = ("deployment", "tier", "status", "ttft_attainment", "ttft_burn_1h", "tpot_attainment", "tpot_burn_1h")
LIVE_WHY = ("deployment", "tier", "short", "replicas_available", "replicas_required", "queue_wait_p95_s", "kv_usage",
            "demand_tokens_per_s", "capacity_tokens_per_s")
ALERT_FIRST = ("alert", "severity", "deployment", "tier", "since", "runbook", "summary")
TRACE_FIRST = ("deployment", "tier", "final", "p95 queue wait s", "p95 TTFT s", "demand tok/s", "goodput tok/s",
               "TTFT attainment", "TPOT attainment")


def _alerts(ctx: Context) -> pd.DataFrame | None:
    try:
        return alert_rows(data.alerts(ctx.settings.alertmanager_url), ctx.filters.deployment, ctx.filters.tier)
    except PromError as e:
        prom_down("Alertmanager", e)
        return None


def _live(ctx: Context, alerts: pd.DataFrame | None) -> None:
    s = ctx.settings
    try:
        at = ctx.prom_window()[1]
        results = {k: data.prom_instant(s.prometheus, q, at) for k, q in promql.overview(ctx.filters).items()}
    except PromError as e:
        prom_down("Prometheus", e)
        return
    table = live_table(results)
    if table.empty:
        st.info("Prometheus has no goodput series for these filters yet.")
        return
    table.insert(2, "status", status(table, alerts))
    short = (table["replicas_required"] - table["replicas_available"]).clip(lower=0)
    table["short"] = [f"{n:.0f} short" if n > 0 else "" for n in short.fillna(0)]
    show(table[[c for c in LIVE_SLO if c in table.columns]], "live", LIVE_SLO)
    st.caption("met: the share of requests within the SLO over 5 minutes; burn: the error budget's rate over the last "
               "hour (1 spends it in exactly the SLO's window, 14.4 pages)")
    show(table[[c for c in LIVE_WHY if c in table.columns]], "live_why", LIVE_WHY)


def _runbook(alerts: pd.DataFrame | None) -> None:
    """The runbooks of the repository, the paging alerts' first; open when one pages."""
    paging = [] if alerts is None else [r for r, sev in zip(alerts["runbook"], alerts["severity"], strict=True)
                                        if r and sev == "page"]
    firing = [] if alerts is None else [r for r in alerts["runbook"] if r]
    options = list(dict.fromkeys([*paging, *firing, *runbooks.names()]))
    if not options:
        return
    pick = st.selectbox("runbook (docs/runbooks, paging and firing alerts first)", options, key="runbook")
    with st.expander(f"Runbook: {pick}", expanded=bool(paging)):
        st.markdown(runbooks.safe_markdown(pick))


def _history(ctx: Context) -> None:
    with st.expander("Alert history (Prometheus) and silences (Alertmanager)"):
        start, end = ctx.prom_window()
        try:
            rows = [{"alert": s.labels.get("alertname", ""), "severity": s.labels.get("severity", ""),
                     "deployment": s.labels.get("deployment", ""), "tier": s.labels.get("tier", ""),
                     "since": f"{s.start:%Y-%m-%d %H:%M:%S}",
                     "until": "firing now" if s.ongoing else f"{s.end:%Y-%m-%d %H:%M:%S}"}
                    for s in spans(ctx.settings.prometheus, ctx.filters, start, end, step_for(start, end))]
        except PromError as e:
            prom_down("Prometheus", e)
        else:
            if rows:
                show(pd.DataFrame(rows).sort_values("since", ascending=False), "alert_history",
                     ("alert", "severity", "deployment", "tier", "since", "until"))
            else:
                st.caption("No alert fired in this time range.")
        try:
            silences = silence_rows(data.silences(ctx.settings.alertmanager_url))
        except PromError as e:
            prom_down("Alertmanager", e)
        else:
            if silences.empty:
                st.caption("No silences.")
            else:
                show(silences, "silences")


def render(ctx: Context) -> None:
    st.title("Overview")
    alerts = _alerts(ctx)
    st.subheader("Live (Prometheus)")
    _live(ctx, alerts)
    st.subheader("Firing alerts (Alertmanager)")
    if alerts is not None:
        paging = alerts[alerts["severity"] == "page"]
        if len(paging):
            st.error(f"{len(paging)} paging: " + ", ".join(esc(f"{a} {d}".strip())
                                                           for a, d in zip(paging["alert"], paging["deployment"],
                                                                           strict=True)), icon=":material/campaign:")
        show(alerts, "alerts", ALERT_FIRST)
    _runbook(alerts)
    _history(ctx)
    st.subheader("From the traces")
    if not ctx.store_ready():
        return
    df = data.store_query(ctx.db, ctx.db_version, "overview", {**ctx.sql_params(), **slo_params(ctx.settings.slos)})
    since, until = ctx.window()
    first, last = ctx.span()
    start, end = max(since or first, first), min(until, last)  # the span the traces cover in the range
    seconds = max((end - start).total_seconds(), 1.0)
    st.caption(f"rates over {start:%Y-%m-%d %H:%M} .. {end:%H:%M} UTC ({seconds / 60:.0f} min), the span the traces "
               "cover in this range")
    table = flight.mark(ctx, trace_table(df, seconds))
    flight.say(ctx, table, "From the traces")
    show(table, "traces", TRACE_FIRST)
