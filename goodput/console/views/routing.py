"""Routing: does the router spread load — requests and p95 queue wait per replica, their skew, prefix-cache hits,
retries and fallbacks (traces; replicas a scale-out added are compared apart from the old ones, the event named);
live load and cache hits per replica, rejections (Prometheus); what the gateway decided per tenant and tier over the
range — from Prometheus when it answers with gateway series, else from the traces' reject reasons; and the overload
ladder's step per deployment now, each primary's circuit breaker (now, since when, openings, timeline) and the fallback
paths (Prometheus)."""

from __future__ import annotations

from datetime import datetime

import plotly.graph_objects as go
import streamlit as st

from goodput.analyzer.releases import load_releases
from goodput.console import data, flight, promql
from goodput.console.columns import show
from goodput.console.palette import CIRCUIT, plain
from goodput.console.prom import Sample
from goodput.console.tables import (
    CIRCUIT_WORDS,
    circuit_breakers,
    circuit_timeline,
    fallback_paths,
    gateway_tables,
    ladder_state,
    samples_frame,
    skew,
)
from goodput.console.ui import Context, esc, prom_down, step_for
from goodput.console.views.charts import mark, prom_charts
from goodput.contracts.catalog import OVERLOAD_STEPS, by_name
from goodput.contracts.vocabulary import GATEWAY_REJECT_REASONS, SCALE_KIND
from goodput.foundation.errors import ConfigError
from goodput.foundation.promapi import PromError

__all__ = ["render"]

def _scale_events(ctx: Context) -> dict[str, str]:
    """Per deployment, its latest scale event of the range in the releases file (none: no file, or one that does not
    parse, which the Releases page reports), as the skew table names it."""
    since, until = ctx.window()
    try:
        found = load_releases(ctx.settings.releases) if ctx.settings.releases.exists() else []
    except ConfigError:
        return {}
    return {r.deployment: f"{r.from_version} -> {r.to_version} replicas at {r.time:%H:%M}" for r in found
            if r.kind == SCALE_KIND and (since is None or r.time >= since) and r.time < until}


def render(ctx: Context) -> None:
    st.title("Routing")
    st.subheader("From the traces")
    if ctx.store_ready():
        df = data.store_query(ctx.db, ctx.db_version, "routing", ctx.sql_params())
        if df.empty:
            st.info("No requests with a replica match these filters.")
        else:
            table = flight.mark(ctx, skew(df, _scale_events(ctx)))
            flight.say(ctx, table, "Per replica")
            for dep, note in zip(table["deployment"], table["scale_note"], strict=True):
                if note:
                    st.info(esc(f"{dep}: {note}. Not a routing skew."), icon=":material/stacks:")
            show(table.drop(columns="scale_note"), "skew", ("deployment", "final", "replicas", "scale"))
            label = (df["deployment"] + " / " + df["replica"]).map(plain)
            fig = go.Figure([go.Bar(x=label, y=df["requests"], name="requests"),
                             go.Scatter(x=label, y=df["queue_p95_s"], name="p95 queue wait (s)", yaxis="y2",
                                        mode="markers", marker={"size": 10})])
            # the legend above the plot: at its default place, right of it, it hides the right axis' top ticks
            fig.update_layout(title="requests and p95 queue wait per replica", height=320, margin={"t": 60, "b": 20},
                              legend={"orientation": "h", "x": 0, "y": 1.02, "yanchor": "bottom"},
                              yaxis={"title": "requests", "rangemode": "tozero"},
                              # its own round ticks (synced to the left axis' grid they read 11.36, 22.72, ...)
                              yaxis2={"overlaying": "y", "side": "right", "rangemode": "tozero", "tickmode": "auto",
                                      "showgrid": False, "title": "p95 queue wait (s)"})
            st.plotly_chart(fig, width="stretch", key="replicas")
            show(flight.mark(ctx, df), "routing_table", ("deployment", "replica", "final", "requests", "queue_p95_s",
                                                         "first_seen"))
    st.subheader("Live (Prometheus)")
    prom_charts(ctx, promql.routing(ctx.filters), "routing")
    _gateway(ctx)
    _overload(ctx)


def _gateway(ctx: Context) -> None:
    st.subheader("Gateway: admission per tenant and tier")
    start, end = ctx.prom_window()
    try:
        got = {k: data.prom_instant(ctx.settings.prometheus, q, end)
               for k, q in promql.gateway(ctx.filters, int((end - start).total_seconds())).items()}
    except PromError as e:
        got, why = {}, f"Prometheus is unreachable ({esc(e)})"
    else:
        why = "Prometheus has no gateway series for these filters"
    if got.get("decisions"):
        names = ", ".join(by_name(m).name for m in ("llm_gateway_admissions_total", "llm_gateway_rejections_total"))
        st.caption(esc(f"From Prometheus ({names}), {start:%Y-%m-%d %H:%M} to {end:%H:%M} UTC; an engine's queue_full or "
                       "queue_timeout counts among the rejections too."))
        tables = gateway_tables(samples_frame(got["decisions"], ("tenant", "tier", "decision"), "requests"),
                                samples_frame(got.get("rejections", []), ("tenant", "tier", "reason"), "requests"))
    elif ctx.store_ready():
        df = data.store_query(ctx.db, ctx.db_version, "gateway",
                              {**ctx.sql_params(), "reasons": list(GATEWAY_REJECT_REASONS)})
        st.caption(f"{why}: from the traces instead, the requests of the range the gateway refused (its "
                   "reject reason, never sent to a replica) and those it admitted.")
        keys = ["tenant", "tier"]
        tables = gateway_tables(df.groupby([*keys, "decision"], as_index=False)["requests"].sum(),
                                df[df["decision"] == "rejected"][[*keys, "reason", "requests"]])
    else:
        return
    decisions, rejections = tables
    if decisions.empty:
        st.info("No requests reached the gateway for these filters.")
        return
    show(decisions, "gateway_decisions", ("tenant", "tier", "decision", "requests", "share"))
    if rejections.empty:
        st.info("The gateway rejected none of these requests.")
    else:
        show(rejections, "gateway_rejections", ("tenant", "tier", "reason", "requests", "share"))


def _overload(ctx: Context) -> None:
    st.subheader("Gateway: overload ladder and fallback paths")
    start, end = ctx.prom_window()
    queries = promql.overload(ctx.filters, int((end - start).total_seconds()))
    try:
        got = {k: data.prom_instant(ctx.settings.prometheus, q, end)  # the shares' parts at one instant
               for k, q in queries.items()}
    except PromError as e:
        st.info(esc(f"Prometheus is unreachable ({e}): the ladder's state and the fallback paths are live only."))
        return
    steps = ladder_state(got["steps"])
    if steps.empty:
        st.info("Prometheus has no overload ladder series (llm_gateway_overload_step) for these filters.")
    else:
        ticks = ["none", *OVERLOAD_STEPS, "unknown"]
        st.caption(esc(f"The ladder's highest step at each deployment's newest admission "
                       f"({by_name('llm_gateway_overload_step').name}), in the order it steps in: "
                       + " -> ".join(OVERLOAD_STEPS) + "; it lets go in the reverse order."))
        if (steps["step_index"] > 0).any():  # bars of length 0 would draw an empty chart
            fig = go.Figure(go.Bar(x=steps["step_index"], y=steps["deployment"].map(plain), orientation="h",
                                   text=steps["step"].map(plain), textposition="auto"))
            fig.update_layout(title="ladder step now, per deployment", height=120 + 40 * len(steps),
                              margin={"t": 40, "b": 20}, xaxis={"range": [0, len(ticks) - 0.5], "tickvals":
                              list(range(len(ticks))), "ticktext": ticks}, yaxis={"autorange": "reversed"})
            st.plotly_chart(fig, width="stretch", key="ladder")
        else:
            st.caption("No deployment's ladder is engaged: every one admits at step none.")
        show(steps, "ladder_state", ("deployment", "step", "step_index"))
    _breakers(ctx, got["circuits"], queries["circuits"], start, end)
    paths = fallback_paths(got["fallbacks"])
    if paths.empty:
        st.info("No fallback route carried requests over the range (llm_gateway_fallbacks_total).")
    else:
        st.caption(esc(f"Requests a backup served instead of their primary, {start:%Y-%m-%d %H:%M} to {end:%H:%M} UTC "
                       "(circuit_open: the primary's circuit breaker is open; capacity; unavailable)."))
        show(paths[["path", "reason", "requests_per_s"]], "fallback_paths", ("path", "reason", "requests_per_s"))
    # the counter's step label is what the step did to the request (output_cap, context_trim), not the ladder's step
    degraded = samples_frame(got["degradations"], ("deployment", "tier", "step"), "requests").rename(
        columns={"step": "degraded"})
    degraded = degraded[degraded["requests"] > 0].sort_values("requests", ascending=False, ignore_index=True)
    if not degraded.empty:
        st.caption("Requests the ladder degraded over the range, per deployment, tier and step (output cap, context "
                   f"trim; {by_name('llm_gateway_degradations_total').name}).")
        show(degraded, "ladder_degradations", ("deployment", "tier", "degraded", "requests"))


def _breakers(ctx: Context, now: list[Sample], query: str, start: datetime, end: datetime) -> None:
    """Each primary's circuit breaker: its state now, since when and how often it opened over the range (from the
    same series over the range, at the charts' step), and its timeline."""
    name = by_name("llm_gateway_circuit_state").name
    if not now:
        st.info(f"Prometheus has no circuit breaker series ({name}) for these filters: no primary with a breaker "
                "sent its gateway spans.")
        return
    step = step_for(start, end)
    try:
        timeline = circuit_timeline(data.prom_range(ctx.settings.prometheus, query, start, end, step))
    except PromError as e:
        prom_down("Prometheus", e)
        return
    breakers = circuit_breakers(now, timeline)
    st.markdown("**Circuit breakers**")
    st.caption(esc(f"Each primary's breaker at its newest admission ({name}): OPEN sends its traffic to a backup, "
                   f"HALF-OPEN lets one probe through. Since when and how many times it opened from "
                   f"{start:%Y-%m-%d %H:%M} to {end:%H:%M} UTC, read every {step:g} s (a state held for less can be "
                   "missed; no since: it did not change in the range)."))
    show(breakers, "circuit_breakers", ("deployment", "breaker", "since", "opened"))
    levels = list(CIRCUIT_WORDS)[::-1]  # closed at the bottom, open at the top
    fig = go.Figure()
    for dep, seen in timeline.groupby("deployment", sort=True):  # each point in its state's colour
        fig.add_trace(go.Scatter(x=seen["time"], y=seen["state"].map(levels.index), name=plain(dep),
                                 mode="lines+markers", line={"shape": "hv", "width": 1.5},
                                 marker={"size": 5, "color": seen["state"].map(CIRCUIT_WORDS).map(CIRCUIT).tolist()}))
    fig.update_layout(title="circuit breaker over the range, per primary", height=280, margin={"t": 40, "b": 20},
                      xaxis={"type": "date", "range": [start, end]},
                      yaxis={"range": [-0.3, 2.3], "tickvals": [0, 1, 2],
                             "ticktext": [CIRCUIT_WORDS[x] for x in levels]},
                      showlegend=True,  # the primary's name, one or many
                      legend={"orientation": "h", "x": 1, "y": 1.02, "yanchor": "bottom", "xanchor": "right"})
    mark(ctx, fig, start, end)  # the releases, scale events and pages (LLMCircuitOpen) of the range
    st.plotly_chart(fig, width="stretch", key="circuits")
