"""Capacity: the plan against live demand, what the fleet costs now (the cost rules' series: $/hour, $ per 1M tokens
and per 1M goodput tokens, idle), a what-if (demand, per-replica goodput, redundancy -> replicas; model, GPU, TP,
dtypes -> memory budget) that starts from the selected deployment's own model, GPU, TP and dtypes (the fleet file),
the load-test runs' goodput curves, and the weekly review when one exists, with its cost, cost per good token, waste
and its trend."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from goodput.console import data, promql
from goodput.console.columns import show
from goodput.console.palette import plain
from goodput.console.ui import Context, esc, prom_down
from goodput.console.whatif import kv_budget, plan_terms, required_replicas
from goodput.contracts.catalog import by_name
from goodput.exporters.config import load_plan
from goodput.foundation.errors import ConfigError
from goodput.foundation.jsonfile import load_json
from goodput.foundation.promapi import PromError
from goodput.foundation.yamlfile import load_mapping
from goodput.loadtest.results import SUMMARY_FILE, read_run
from goodput.simulator.catalog import gpus, models
from goodput.simulator.config import DeploymentConfig, EngineConfig, load_fleet
from goodput.simulator.memory import LINEAR_BYTES

__all__ = ["COST_QUERIES", "cost_table", "latest_review", "plan_table", "render", "review_cost_tables", "runs"]

MAX_RUNS = 50
DEFAULT = DeploymentConfig("", "Llama-3.1-8B", "H100-80GB-SXM", 1, 1, "", EngineConfig())  # no fleet entry
ASSUMED_DEMAND = 10_000.0  # tokens/s, when Prometheus has no demand for the deployment
TP = (1, 2, 4, 8)
# the live cost columns: each a catalog family recorded by rules/cost.rules.yaml, per deployment (docs/cost.md)
_PER_M = by_name("llm_cost_per_million_tokens").name
COST_QUERIES = {
    "$/hour": f"sum by (deployment) ({by_name('llm_total_hourly_cost').name})",
    "$ per 1M goodput tokens": f"max by (deployment) ({by_name('llm_cost_per_million_goodput_tokens').name})",
    "$ per 1M prompt tokens": f'max by (deployment) ({_PER_M}{{phase="prompt"}})',
    "$ per 1M generated tokens": f'max by (deployment) ({_PER_M}{{phase="generation"}})',
    "idle $/hour": f"sum by (deployment) ({by_name('llm_idle_hourly_cost').name})",
}


def _index(options: list[str], preferred: str) -> int:
    return options.index(preferred) if preferred in options else 0


def _redundancy(slos: Path) -> float:
    try:
        return float(load_mapping(slos, "a mapping with thresholds")["thresholds"]["capacity_redundancy"])
    except (ConfigError, KeyError, TypeError, ValueError):
        return 1.0


def plan_table(goodput: dict[str, float], desired: dict[str, int], demand: dict[str, float],
               available: dict[str, float], redundancy: float) -> pd.DataFrame:
    rows = []
    for dep, g in sorted(goodput.items()):
        d = demand.get(dep)
        rows.append({"deployment": dep, "per-replica goodput tok/s": g, "desired (plan)": desired.get(dep),
                     "available": available.get(dep), "demand tok/s": d,
                     "required now": required_replicas(d, g, redundancy) if d is not None and not math.isnan(d) else None})
    return pd.DataFrame(rows)


def cost_table(figures: dict[str, dict[str, float]]) -> pd.DataFrame:
    """One row per deployment of the live cost figures (``COST_QUERIES``' columns), with the idle share of the
    spend; a figure Prometheus has not recorded is empty."""
    deps = sorted({d for col in figures.values() for d in col})
    rows = []
    for dep in deps:
        row: dict = {"deployment": dep, **{k: figures.get(k, {}).get(dep) for k in COST_QUERIES}}
        hourly, idle = row["$/hour"], row["idle $/hour"]
        row["idle share"] = idle / hourly if hourly and idle is not None else None
        rows.append(row)
    return pd.DataFrame(rows, columns=["deployment", *COST_QUERIES, "idle share"])


def _num(v: object) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def review_cost_tables(review: dict) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """The review's cost per deployment (with the fleet's as "(fleet)"), per tenant, and the daily idle share per
    deployment (the waste's trend); a review from before the cost rules has none."""
    deps = review.get("deployments")
    deps = deps if isinstance(deps, dict) else {}
    per = {d: e["cost"] for d, e in deps.items() if isinstance(e, dict) and isinstance(e.get("cost"), dict)}
    if isinstance(review.get("cost"), dict):
        per["(fleet)"] = review["cost"]
    rows, tenants, daily = [], [], []
    for dep, c in per.items():
        rows.append({"deployment": dep, "USD": _num(c.get("usd")),
                     "$ per 1M goodput tokens": _num(c.get("usd_per_million_goodput_tokens")),
                     "idle USD": _num(c.get("idle_usd")), "idle share": _num(c.get("idle_share")),
                     "idle trend pp/day": _num(c.get("idle_share_trend_pp_per_day")),
                     "GPU-hours": sum(v for v in (c.get("gpu_hours") or {}).values() if _num(v) is not None) or None})
        tenants += [{"deployment": dep, "tier": str(t.get("tier")), "tenant": str(t.get("tenant")),
                     "USD": _num(t.get("usd"))} for t in c.get("tenants") or [] if isinstance(t, dict)]
        daily += [{"deployment": dep, "day": d.get("day"), "idle share": _num(d.get("idle_share")),
                   "$ per 1M goodput tokens": _num(d.get("usd_per_million_goodput_tokens"))}
                  for d in c.get("daily") or [] if isinstance(d, dict)]
    return (pd.DataFrame(rows, columns=["deployment", "USD", "$ per 1M goodput tokens", "idle USD", "idle share",
                                        "idle trend pp/day", "GPU-hours"]),
            pd.DataFrame(tenants, columns=["deployment", "tier", "tenant", "USD"]),
            pd.DataFrame(daily, columns=["deployment", "day", "idle share", "$ per 1M goodput tokens"]))


def _live_cost(ctx: Context) -> pd.DataFrame | None:
    """The live cost figures per deployment; None when Prometheus does not answer (the page's banner says so once)."""
    at = ctx.prom_window()[1]
    try:
        figures = {k: {x.labels["deployment"]: x.value for x in data.prom_instant(ctx.settings.prometheus, q, at)
                       if "deployment" in x.labels and math.isfinite(x.value)} for k, q in COST_QUERIES.items()}
    except PromError:
        st.caption("No live cost: Prometheus did not answer.")
        return None
    return cost_table(figures)


def _cost_section(ctx: Context) -> None:
    st.subheader("Cost")
    cost = _live_cost(ctx)
    if cost is not None and cost.empty:
        st.info("Prometheus has no cost series: load rules/cost.rules.yaml (`goodput rules generate`; the prices "
                "file is rules/slos.yaml's `prices:`, docs/cost.md).")
    elif cost is not None:
        show(cost, "cost", ("deployment", "$/hour", "$ per 1M goodput tokens", "idle $/hour", "idle share"))
        st.caption("idle: GPU time that served no goodput (tokens of requests that met their SLO); a generated token "
                   "costs as many prompt tokens as the cost rules' decode weight")


def _review_cost(review: dict) -> None:
    costs, tenants, daily = review_cost_tables(review)
    if costs.empty:
        st.info("This review has no cost (reviewed without rules/cost.rules.yaml).")
        return
    st.markdown("**The week's cost, cost per good token and waste**")
    show(costs, "review_cost", ("deployment", "USD", "$ per 1M goodput tokens", "idle USD", "idle share"))
    show(tenants, "review_tenant_cost", ("deployment", "tier", "tenant", "USD"))
    trend = go.Figure()
    for dep, rows in daily.groupby("deployment", sort=True):
        trend.add_trace(go.Scatter(x=rows["day"].tolist(), y=rows["idle share"].tolist(), mode="lines+markers",
                                   name=plain(str(dep))))
    trend.update_layout(title="waste: the share of each day's spend that served no goodput", height=300,
                        xaxis_title="day of the week", yaxis_tickformat=".0%", margin={"t": 40, "b": 20})
    st.plotly_chart(trend, width="stretch", key="review_waste")


def latest_review(root: Path) -> Path | None:
    """The newest ``review.json`` at most three folders under ``root``."""
    if not root.is_dir():
        return None
    found = [p for depth in ("", "*/", "*/*/", "*/*/*/") for p in root.glob(f"{depth}review.json")]
    return max(found, key=lambda p: p.stat().st_mtime, default=None)


def runs(root: Path) -> list[Path]:
    """Load-test run directories under ``root`` (newest first)."""
    if not root.is_dir():
        return []
    found = sorted((p.parent for p in root.glob(f"*/{SUMMARY_FILE}")), key=lambda p: p.stat().st_mtime, reverse=True)
    return found[:MAX_RUNS]


def fleet(path: Path) -> dict[str, DeploymentConfig]:
    """The fleet file's deployments; none when there is no fleet file or it does not load (said on the page)."""
    if not path.exists():
        return {}
    try:
        return {d.name: d for d in load_fleet(path).deployments}
    except ConfigError as e:
        st.warning(esc(f"fleet file (GOODPUT_FLEET): {e}"), icon=":material/warning:")
        return {}


def _live(ctx: Context) -> tuple[dict[str, float], dict[str, float]]:
    """Demand and replicas available per deployment; a NaN or a series without a deployment is no figure."""
    q = promql.overview(ctx.filters)
    at = ctx.prom_window()[1]  # demand and replicas at one instant: they are compared
    try:
        got = [{s.labels["deployment"]: s.value for s in data.prom_instant(ctx.settings.prometheus, q[k], at)
                if "deployment" in s.labels and math.isfinite(s.value)}
               for k in ("demand_tokens_per_s", "replicas_available")]
    except PromError as e:
        prom_down("Prometheus", e)
        return {}, {}
    return got[0], got[1]


def render(ctx: Context) -> None:
    st.title("Capacity")
    s = ctx.settings
    redundancy = _redundancy(s.slos)
    demand, avail = _live(ctx)
    st.subheader("The plan")
    plan = None
    if s.plan.exists():
        try:
            plan = load_plan(s.plan)
        except ConfigError as e:
            st.error(esc(f"plan: {e}"))
    else:
        st.info(esc(f"No plan at {s.plan} (GOODPUT_PLAN)."))
    if plan is not None:
        show(plan_table(plan.goodput, plan.desired, demand, avail, redundancy), "plan",
             ("deployment", "demand tok/s", "required now", "available", "desired (plan)"))
    fleet_deps = fleet(s.fleet)

    _cost_section(ctx)

    st.subheader("What if")
    c1, c2 = st.columns(2)
    with c1:
        deps = sorted(set(plan.goodput if plan else ()) | set(fleet_deps))
        dep = st.selectbox("deployment", deps or ["(none)"], key="cap_dep",
                           index=deps.index(ctx.filters.deployment) if ctx.filters.deployment in deps else 0)
        live = dep in demand
        base = demand.get(dep, ASSUMED_DEMAND)
        factor = st.slider("demand x", 0.25, 4.0, 1.0, 0.25, key="cap_factor")
        # each deployment's inputs are its own widgets, so choosing another starts from its figures
        per = st.number_input("per-replica goodput (tok/s at the SLO)", 1.0, 1e7,
                              float(plan.goodput.get(dep, 5000.0)) if plan else 5000.0, key=f"cap_goodput:{dep}")
        red = st.number_input("redundancy", 1.0, 3.0, redundancy, 0.1, key="cap_red")
        need = required_replicas(base * factor, per, red)
        st.metric("replicas required", need, delta=None if dep not in avail else int(need - avail[dep]),
                  delta_color="inverse")
        st.caption(f"demand {base * factor:,.0f} tok/s ({'live' if live else 'no live demand; assumed'} "
                   f"{base:,.0f} x {factor:g})")
        growth = st.slider("growth (x peak)", 1.0, 2.0, 1.0, 0.05, key="cap_growth")
        cold = st.number_input("cold start (s)", 0.0, 3600.0, 180.0, 30.0, key="cap_cold")
        burst = st.slider("burst (x peak within 5 min)", 1.0, 3.0, 1.0, 0.1, key="cap_burst")
        terms_r = plan_terms(base * factor, per, growth, cold, burst)
        show(pd.DataFrame([{"term": k.replace("_", " "), "replicas": v} for k, v in terms_r.as_dict().items()]
                          + [{"term": "total (goodput plan replicas)", "replicas": terms_r.total}]), "cap_terms")
    with c2:
        d = fleet_deps.get(dep, DEFAULT)
        st.caption(esc(f"from the fleet file: {d.model} on {d.tp}x {d.gpu}, weights {d.engine.weight_dtype}, KV "
                       f"{d.engine.kv_dtype}") if dep in fleet_deps else
                   f"not in the fleet file ({esc(s.fleet)}): starting from {DEFAULT.model} on {DEFAULT.gpu}")
        names, kinds = sorted(models()), sorted(gpus())
        model = st.selectbox("model", names, index=_index(names, d.model), key=f"cap_model:{dep}")
        gpu = st.selectbox("GPU", kinds, index=_index(kinds, d.gpu), key=f"cap_gpu:{dep}")
        tps = sorted({*TP, d.tp})
        tp = st.selectbox("tensor parallel", tps, index=tps.index(d.tp), key=f"cap_tp:{dep}")
        wds = [x for x in models()[model].weight_dtypes if x in LINEAR_BYTES]
        wd = st.selectbox("weights", wds, index=_index(wds, d.engine.weight_dtype), key=f"cap_wd:{dep}:{model}")
        kds = list(models()[model].kv_dtypes)
        kd = st.selectbox("KV cache", kds, index=_index(kds, d.engine.kv_dtype), key=f"cap_kd:{dep}:{model}")
        util = st.slider("GPU memory utilization (vLLM --gpu-memory-utilization)", 0.5, 0.98,
                         float(d.engine.gpu_memory_utilization), 0.01, key=f"cap_util:{dep}")
        try:
            budget, terms = kv_budget(model, gpu, tp, wd, kd, util)
        except ConfigError as e:
            st.error(esc(e))
        else:
            parts = ["weights GiB", "activation GiB", "non-torch GiB", "CUDA graphs GiB"]
            fig = go.Figure(go.Bar(x=[p.removesuffix(" GiB") for p in parts] + ["KV cache"],
                                   y=[terms[p] for p in parts] + [max(terms["KV GiB"], 0)]))
            fig.update_layout(title=f"per-GPU memory (GiB) of {terms['requested GiB']:.1f} requested",
                              height=300, margin={"t": 40, "b": 20})
            st.plotly_chart(fig, width="stretch", key="memory")
            broken = budget.problem()
            if broken:
                st.error(esc(f"Does not fit ({broken[0]}): {broken[1]}"))
            else:
                st.caption(f"GPU KV cache size: {budget.kv_tokens:,} tokens ({budget.num_blocks:,} blocks); maximum "
                           f"concurrency for {budget.max_model_len:,} tokens per request: {budget.max_concurrency:.2f}x "
                           "(`goodput plan memory`)")

    st.subheader("Load-test runs")
    found = runs(s.runs)
    if not found:
        st.info(f"No load-test runs under {esc(s.runs)} (GOODPUT_RUNS); `goodput loadtest run ... --out RUNS/NAME` "
                "makes one.")
    else:
        curve = go.Figure()
        for run in found[:8]:
            try:
                _, summary = read_run(run)
            except ConfigError as e:
                st.warning(esc(f"{run.name}: {e}"))
                continue
            steps = summary.get("steps") or []
            x = [st_.get("offered_rate") if st_.get("offered_rate") is not None else st_.get("concurrency") for st_ in steps]
            curve.add_trace(go.Scatter(x=x, y=[st_.get("goodput_requests_per_s") for st_ in steps], mode="lines+markers",
                                       name=plain(run.name)))
        curve.update_layout(title="goodput (req/s meeting the SLO) per step", height=320, margin={"t": 40, "b": 20})
        st.plotly_chart(curve, width="stretch", key="runs")
    st.subheader("Weekly review")
    review_path = latest_review(s.reviews)
    if review_path is None:
        st.info(f"No weekly review under {esc(s.reviews)} (GOODPUT_REVIEWS); `goodput review --prometheus URL --week "
                "2026-W48 --out REVIEWS/review` writes one (`goodput demo --week 2026-W48` simulates a week).")
        return
    try:
        review = load_json(review_path)
    except ConfigError as e:
        st.warning(esc(f"not a review: {e}"))
        return
    if not isinstance(review, dict):
        st.warning(esc(f"{review_path}: not a review (a {type(review).__name__}, not a mapping)"))
        return
    st.caption(esc(f"{review.get('week', '?')} ({review.get('start', '?')} to {review.get('end', '?')}), from "
                   f"{review.get('source', '?')}: {review_path.parent / 'review.html'}"))
    if not review.get("has_data"):
        st.info("The review found no data for its week.")
    recs = [r for r in review.get("recommendations") or [] if isinstance(r, dict)]
    show(pd.DataFrame([{"deployment": str(r.get("deployment")), "action": str(r.get("action")),
                        "reason": str(r.get("reason")),
                        "numbers": ", ".join(f"{k} {v}" for k, v in numbers.items())
                        if isinstance(numbers := r.get("numbers") or {}, dict) else str(numbers)}
                       for r in recs], columns=["deployment", "action", "reason", "numbers"]), "review_recs")
    _review_cost(review)
