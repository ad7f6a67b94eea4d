"""Capacity: the plan against live demand, a what-if (demand, per-replica goodput, redundancy -> replicas; model,
GPU, TP, dtypes -> memory budget), the load-test runs' goodput curves, and the weekly review when one exists."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from capacity.loadtest.results import SUMMARY_FILE, read_run
from console import data, promql
from console.prom import Unreachable
from console.ui import Context, prom_down
from console.whatif import kv_budget, plan_terms, required_replicas
from exporters.config import load_plan
from goodput.foundation.errors import ConfigError
from goodput.foundation.yamlfile import load_mapping
from simulator.catalog import gpus, models
from simulator.memory import LINEAR_BYTES

__all__ = ["latest_review", "plan_table", "render", "runs"]

MAX_RUNS = 50
DEFAULT_MODEL, DEFAULT_GPU = "Llama-3.1-8B", "H100-80GB-SXM"
ASSUMED_DEMAND = 10_000.0  # tokens/s, when Prometheus has no demand for the deployment


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


def _live(ctx: Context) -> tuple[dict[str, float], dict[str, float]]:
    q = promql.overview(ctx.filters)
    try:
        demand = {s.labels["deployment"]: s.value
                  for s in data.prom_instant(ctx.settings.prometheus_url, q["demand_tokens_per_s"])}
        avail = {s.labels["deployment"]: s.value
                 for s in data.prom_instant(ctx.settings.prometheus_url, q["replicas_available"])}
    except Unreachable as e:
        prom_down("Prometheus", e)
        return {}, {}
    return demand, avail


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
            st.error(f"plan: {e}")
    else:
        st.info(f"No plan at {s.plan} (GOODPUT_PLAN).")
    if plan is not None:
        st.dataframe(plan_table(plan.goodput, plan.desired, demand, avail, redundancy), hide_index=True,
                     width="stretch", key="plan")

    st.subheader("What if")
    c1, c2 = st.columns(2)
    with c1:
        deps = sorted(plan.goodput) if plan else []
        dep = st.selectbox("deployment", deps or ["(none)"], key="cap_dep",
                           index=deps.index(ctx.filters.deployment) if ctx.filters.deployment in deps else 0)
        live = dep in demand
        base = demand.get(dep, ASSUMED_DEMAND)
        factor = st.slider("demand x", 0.25, 4.0, 1.0, 0.25, key="cap_factor")
        per = st.number_input("per-replica goodput (tok/s at the SLO)", 1.0, 1e7,
                              float(plan.goodput.get(dep, 5000.0)) if plan else 5000.0, key="cap_goodput")
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
        st.dataframe(pd.DataFrame([{"term": k, "replicas": v} for k, v in terms_r.as_dict().items()]
                                  + [{"term": "total (goodput plan replicas)", "replicas": terms_r.total}]),
                     hide_index=True, width="stretch", key="cap_terms")
    with c2:
        names, kinds = sorted(models()), sorted(gpus())
        model = st.selectbox("model", names, index=_index(names, DEFAULT_MODEL), key="cap_model")
        gpu = st.selectbox("GPU", kinds, index=_index(kinds, DEFAULT_GPU), key="cap_gpu")
        tp = st.selectbox("tensor parallel", [1, 2, 4, 8], key="cap_tp")
        wd = st.selectbox("weights", [d for d in models()[model].weight_dtypes if d in LINEAR_BYTES], key="cap_wd")
        kd = st.selectbox("KV cache", list(models()[model].kv_dtypes), key="cap_kd")
        util = st.slider("gpu_memory_utilization", 0.5, 0.98, 0.9, 0.01, key="cap_util")
        try:
            budget, terms = kv_budget(model, gpu, tp, wd, kd, util)
        except ConfigError as e:
            st.error(str(e))
        else:
            parts = ["weights GiB", "activation GiB", "non-torch GiB", "CUDA graphs GiB"]
            fig = go.Figure(go.Bar(x=[p.removesuffix(" GiB") for p in parts] + ["KV cache"],
                                   y=[terms[p] for p in parts] + [max(terms["KV GiB"], 0)]))
            fig.update_layout(title=f"per-GPU memory (GiB) of {terms['requested GiB']:.1f} requested",
                              height=300, margin={"t": 40, "b": 20})
            st.plotly_chart(fig, width="stretch", key="memory")
            broken = budget.problem()
            if broken:
                st.error(f"Does not fit ({broken[0]}): {broken[1]}")
            else:
                st.caption(f"GPU KV cache size: {budget.kv_tokens:,} tokens ({budget.num_blocks:,} blocks); maximum "
                           f"concurrency for {budget.max_model_len:,} tokens per request: {budget.max_concurrency:.2f}x "
                           "(`goodput plan memory`)")

    st.subheader("Load-test runs")
    found = runs(s.runs)
    if not found:
        st.info(f"No load-test runs under {s.runs} (GOODPUT_RUNS); `goodput loadtest run ... --out {s.runs}/NAME` "
                "makes one.")
    else:
        curve = go.Figure()
        for run in found[:8]:
            try:
                _, summary = read_run(run)
            except ConfigError as e:
                st.warning(f"{run.name}: {e}")
                continue
            steps = summary.get("steps") or []
            x = [st_.get("offered_rate") if st_.get("offered_rate") is not None else st_.get("concurrency") for st_ in steps]
            curve.add_trace(go.Scatter(x=x, y=[st_.get("goodput_requests_per_s") for st_ in steps], mode="lines+markers",
                                       name=run.name))
        curve.update_layout(title="goodput (req/s meeting the SLO) per step", height=320, margin={"t": 40, "b": 20})
        st.plotly_chart(curve, width="stretch", key="runs")
    st.subheader("Weekly review")
    found = latest_review(s.reviews)
    if found is None:
        st.info(f"No weekly review under {s.reviews} (GOODPUT_REVIEWS); `goodput review --prometheus URL --week "
                f"2026-W48 --out {s.reviews}/review` writes one (`goodput demo --week 2026-W48` simulates a week).")
        return
    try:
        review = json.loads(found.read_text())
    except (OSError, ValueError) as e:
        st.warning(f"{found}: not a review ({e})")
        return
    st.caption(f"{review.get('week', '?')} ({review.get('start', '?')} to {review.get('end', '?')}), from "
               f"{review.get('source', '?')}: {found.parent / 'review.html'}")
    if not review.get("has_data"):
        st.info("The review found no data for its week.")
    recs = review.get("recommendations") or []
    st.dataframe(pd.DataFrame([{"deployment": r.get("deployment"), "action": r.get("action"), "reason": r.get("reason"),
                                "numbers": ", ".join(f"{k} {v}" for k, v in (r.get("numbers") or {}).items())}
                               for r in recs], columns=["deployment", "action", "reason", "numbers"]),
                 hide_index=True, width="stretch", key="review_recs")
