"""The review from a trace store instead of Prometheus: the same answers, computed from requests, plus the
analyzer's regressions attributed to releases. The store is what ``--db`` names (``goodput/analyzer/backend.py``): the
analyzer's DuckDB file, or the Collector's ``otel_traces`` read in place in ClickHouse (``clickhouse://``, ``chdb:``).

One SQL statement (``sql/week_buckets.sql``, ``sql/clickhouse/week_buckets.sql``) buckets the week and the history
weeks before it by 5 minutes; the rest reshapes its rows into the series ``summarize`` reads, so both sources share every
number after the query. Traces carry no KV usage, replica counts or alerts: those sections say so.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pandas as pd

from goodput.analyzer.opening import open_backend
from goodput.analyzer.regressions import find_regressions
from goodput.analyzer.releases import load_releases
from goodput.exporters.config import load_plan
from goodput.foundation.yamlfile import load_mapping
from goodput.review.prom import Series
from goodput.review.queries import STEP_S, WEEK_S
from goodput.review.recommend import recommend
from goodput.review.review import DEFAULT_RULES, releases_in_week
from goodput.review.summarize import summarize
from goodput.simulator.week import parse_week

__all__ = ["db_review", "load_slos"]


def load_slos(path: Path) -> pd.DataFrame:
    """tier, route, ttft_seconds, tpot_seconds, objective from ``rules/slos.yaml``."""
    rows = load_mapping(path, "a mapping with 'slos'").get("slos") or []
    return pd.DataFrame([{k: r[k] for k in ("tier", "route", "ttft_seconds", "tpot_seconds", "objective")}
                         for r in rows], columns=["tier", "route", "ttft_seconds", "tpot_seconds", "objective"])


def _series(frame: pd.DataFrame, keys: list[str], value: pd.Series) -> list[Series]:
    out = []
    f = frame.assign(_v=value)
    for k, g in f.groupby(keys, sort=True):
        k = k if isinstance(k, tuple) else (k,)
        g = g.groupby("t")["_v"].sum()
        out.append(Series(dict(zip(keys, map(str, k), strict=True)), g.index.to_numpy(float), g.to_numpy(float)))
    return out


def _instant(frame: pd.DataFrame, keys: list[str], col: str, t: float) -> list[Series]:
    g = frame.groupby(keys, sort=True)[col].sum()
    return [Series(dict(zip(keys, map(str, k if isinstance(k, tuple) else (k,)), strict=True)), np.array([t]),
                   np.array([float(v)])) for k, v in g.items()]


def _raw(rows: pd.DataFrame, tenants: pd.DataFrame, slos: pd.DataFrame, start: float) -> dict[str, list[Series]]:
    end = start + WEEK_S
    rows = rows.assign(t=rows["bucket"].map(lambda b: b.timestamp()) + STEP_S)
    week = rows[(rows.t > start) & (rows.t <= end)]
    prev = rows[(rows.t > start - WEEK_S) & (rows.t <= start)]
    rate = lambda col: week[col] / STEP_S  # noqa: E731
    dt, dtr = ["deployment", "tier"], ["deployment", "tier", "route"]
    by_route = week.groupby(dtr + ["t"], as_index=False)[["ttft_n", "ttft_good", "tpot_n", "tpot_good"]].sum()
    err = lambda n, good: np.where(by_route[n] > 0, 1 - by_route[good] / by_route[n].clip(lower=1), 0.0)  # noqa: E731
    week_tokens = week.input_tokens.fillna(0) + week.output_tokens.fillna(0)
    prev_tokens = prev.assign(tok=prev.input_tokens.fillna(0) + prev.output_tokens.fillna(0))
    hourly = rows.assign(h=(rows.t // 3600) * 3600, tok=rows.input_tokens.fillna(0) + rows.output_tokens.fillna(0))
    hist = hourly.groupby(["deployment", "h"], as_index=False)["tok"].sum()
    rej = week.melt(id_vars=dt, value_vars=["kv_rejections", "other_rejections"], var_name="reason", value_name="n")
    rej["reason"] = rej["reason"].map({"kv_rejections": "kv_capacity", "other_rejections": "other"})
    return {
        "requests": _series(week, dt, rate("requests")), "input": _series(week, dt, rate("input_tokens").fillna(0)),
        "output": _series(week, dt, rate("output_tokens").fillna(0)),
        "tokens": _series(week, ["deployment"], week_tokens / STEP_S),
        "by_route": _series(week, dtr, rate("requests")),
        "ttft_errors": _series(by_route, dtr, pd.Series(err("ttft_n", "ttft_good"), index=by_route.index)),
        "tpot_errors": _series(by_route, dtr, pd.Series(err("tpot_n", "tpot_good"), index=by_route.index)),
        "objective": [Series({"tier": r.tier, "route": r.route}, np.array([end]), np.array([float(r.objective)]))
                      for r in slos.itertuples()],
        "queue_p95": [], "ttft_p95": [], "tpot_p95": [], "kv_max": [], "available": [], "desired": [], "gpus": [],
        "alerts": [],
        "preemptions": _series(week, ["deployment"], rate("preemptions")),
        "kv_rejections": _series(week, ["deployment"], rate("kv_rejections")),
        "tenant_requests": _instant(tenants, dt + ["tenant"], "requests", end),
        "tenant_tokens": _instant(tenants, dt + ["tenant"], "tokens", end),
        "requests_week": _instant(week, dt, "requests", end), "requests_prev": _instant(prev, dt, "requests", end),
        "tokens_week": _instant(week.assign(tok=week_tokens), dt, "tok", end),
        "tokens_prev": _instant(prev_tokens, dt, "tok", end),
        "rejections_week": _instant(rej, dt + ["reason"], "n", end),
        "timeouts_week": _instant(week, dt, "timeouts", end),
        "history": [Series({"deployment": str(d)}, g.h.to_numpy(float), g.tok.to_numpy(float) / 3600)
                    for d, g in hist.groupby("deployment")],
    }


def db_review(db: str | Path, week: str, *, plan: Path | None = None, releases: Path | None = None,
              slos: Path = DEFAULT_RULES / "slos.yaml", history_weeks: int = 3, redundancy: float = 1.2) -> dict:
    start = parse_week(week).timestamp()
    the_plan = load_plan(plan) if plan is not None else None
    slo = load_slos(slos)
    store = open_backend(db)
    since, until = datetime.fromtimestamp(start, UTC), datetime.fromtimestamp(start + WEEK_S, UTC)
    lists = {"slo_tier": slo.tier.astype(str).tolist(), "slo_route": slo.route.astype(str).tolist(),
             "slo_ttft": slo.ttft_seconds.astype(float).tolist(), "slo_tpot": slo.tpot_seconds.astype(float).tolist()}
    try:
        rows = store.frame("goodput.review:week_buckets",
                           {**lists, "since": datetime.fromtimestamp(start - history_weeks * WEEK_S, UTC),
                            "until": until})
        tenants = store.frame("goodput.review:week_tenants", {"since": since, "until": until})
        rel_objs = load_releases(releases) if releases is not None else []
        regs = find_regressions(store, rel_objs, since=since, until=until)
    finally:
        store.close()
    if len(rows):
        rows["bucket"] = pd.to_datetime(rows["bucket"], utc=True)
    raw = _raw(rows, tenants, slo, start) if len(rows) else {k: [] for k in _raw_keys()}
    review = summarize(raw, week, start, the_plan, [], redundancy)
    review["source"] = f"{'ClickHouse' if store.dialect == 'clickhouse' else 'DuckDB'} {db}"
    review["page_source"] = "none (a trace store has no alerts; review Prometheus for pages)"
    review["releases"] = releases_in_week(releases, start)
    for r in regs:
        e = review["deployments"].get(r.deployment)
        if e is not None:
            e.setdefault("regressions", []).append(r.record())
    review["recommendations"] = recommend(review)
    return review


def _raw_keys() -> tuple[str, ...]:
    return ("requests", "input", "output", "tokens", "by_route", "ttft_errors", "tpot_errors", "objective", "queue_p95",
            "ttft_p95", "tpot_p95", "kv_max", "available", "desired", "gpus", "alerts", "preemptions", "kv_rejections",
            "tenant_requests", "tenant_tokens", "requests_week", "requests_prev", "tokens_week", "tokens_prev",
            "rejections_week", "timeouts_week", "history")
