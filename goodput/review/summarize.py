"""The week's numbers per deployment and tier, from the query answers: pure functions, no I/O.

Attainment over the week weighs each 5-minute error ratio by that step's requests; the error-budget
burn is the week's error ratio over the budget (1 - objective), so 1.0 spends exactly the week's budget.
SLO goodput is the requests that met both the TTFT and the TPOT objective, approximated per step as
requests x (1 - the larger of the two error ratios).

The week's latency p95s are the p95 over the week of the rules' 5-minute ``histogram_quantile``s: a number only
between two finite gateway buckets, else a bound (``goodput.foundation.histogram.bounded``).

A week still in progress is summarized up to ``now``: means are over the steps that have passed, and ``partial``
says until when. A replica shortfall counts only where both the desired and the available count were scraped, and
only when it lasted ``SUSTAINED_STEPS`` samples: a scrape that read 0 replicas for a few seconds (an exporter
restarting with its targets) is no lost replica.
"""

from __future__ import annotations

import time
from collections import defaultdict
from datetime import UTC, datetime
from typing import Any

import numpy as np

from goodput.contracts.catalog import by_name
from goodput.foundation.histogram import bounded
from goodput.review.cold_start import cold_starts
from goodput.review.cost import DeploymentCost, deployment_cost, fleet_cost
from goodput.review.forecast import forecast_peaks
from goodput.review.prom import Series
from goodput.review.queries import STEP_S, WEEK_S, Page, pages_from_series

__all__ = ["latency_p95", "summarize"]

HIGH_LOAD = 0.8  # "hours above 80 % of capacity"
SUSTAINED_STEPS = 2  # a shortfall seen in fewer consecutive 5-minute samples is a blip (10 min: LLMEngineDown's for x 5)
QUEUEING_S = 1.0  # a step whose p95 queue wait is above this queues
PINNED_SHARE = 0.8  # running at its ceiling in this share of the queueing steps: the sequence limit binds


def _buckets(histogram: str) -> tuple[float, ...]:
    """A histogram's bucket bounds, as the catalog holds them."""
    buckets = by_name(histogram).buckets
    if buckets is None:
        raise ValueError(f"{histogram} has no buckets in the catalog")
    return buckets


# the gateway histograms behind the recorded p95s (queries.RECORDED's queue_p95, ttft_p95, tpot_p95)
LATENCY_BUCKETS = {"queue": _buckets("llm_gateway_queue_wait_seconds"),
                   "ttft": _buckets("llm_gateway_time_to_first_token_seconds"),
                   "tpot": _buckets("llm_gateway_time_per_output_token_seconds")}


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat().replace("+00:00", "Z")


def _by(series: list[Series], *keys: str) -> dict[tuple, Series]:
    return {tuple(s.labels.get(k, "") for k in keys): s for s in series}


def _scalar(series: list[Series], *keys: str) -> dict[tuple, float]:
    return {k: float(s.values[0]) for k, s in _by(series, *keys).items() if len(s.values)}


def latency_p95(metric: str, values: np.ndarray) -> dict:
    """The week's p95 of one latency's 5-minute p95s, with its bound kind (``Quantile.to_dict``, seconds).
    ``values``: at least one, none NaN (``review.prom`` drops NaN points)."""
    q = bounded(round(float(np.percentile(values, 95)), 4), LATENCY_BUCKETS[metric])
    if q is None:
        raise ValueError(f"no {metric} p95 to take the week's p95 of")
    return q.to_dict()


def _grid(s: Series | None, grid: np.ndarray) -> np.ndarray:
    """A series on the week's grid, 0 where it has no point (no traffic, or no series yet)."""
    out = np.zeros(len(grid))
    if s is not None and len(s.times):
        idx = np.searchsorted(grid, s.times)
        ok = (idx < len(grid)) & (np.abs(grid[np.minimum(idx, len(grid) - 1)] - s.times) < 1)
        out[idx[ok]] = s.values[ok]
    return out


def _present(s: Series | None, grid: np.ndarray) -> np.ndarray:
    """Where ``s`` has a point on the grid (``_grid``'s 0 is no reading there, not a reading of 0)."""
    out = np.zeros(len(grid), dtype=bool)
    if s is not None and len(s.times):
        idx = np.clip(np.searchsorted(grid, s.times), 0, len(grid) - 1)
        out[idx[np.abs(grid[idx] - s.times) < 1]] = True
    return out


def _shortfall(grid: np.ndarray, available: Series | None, desired: Series | None) -> dict | None:
    """The most replicas missing (desired - available at the same step) for ``SUSTAINED_STEPS`` samples in a
    row, and when: None without a desired count or without such a run."""
    if desired is None or available is None:
        return None
    both = _present(available, grid) & _present(desired, grid)
    short = np.where(both, _grid(desired, grid) - _grid(available, grid), 0.0)
    n = SUSTAINED_STEPS
    if len(short) < n:
        return None
    held = np.lib.stride_tricks.sliding_window_view(short, n).min(axis=1)  # missing through n samples from i
    lost = float(held.max())
    if lost < 1:
        return None
    i = int(np.argmax(held))
    j = i
    while j + 1 < len(short) and short[j + 1] >= lost:
        j += 1
    return {"replicas": int(lost), "start": _iso(grid[i] - STEP_S), "end": _iso(grid[j]),
            "minutes": round((grid[j] - grid[i] + STEP_S) / 60)}


def _running(grid: np.ndarray, running: Series | None, queue: np.ndarray) -> dict:
    """The most sequences any replica ran, and in what share of the steps that queued (p95 above ``QUEUEING_S``)
    the busiest replica ran exactly that many: near 1, the engine's sequence limit (``max_num_seqs``) binds."""
    if running is None or not len(running.values):
        return {"max": None, "at_max_while_queueing": None}
    ceiling = float(running.values.max())
    seen = _present(running, grid) & (queue > QUEUEING_S)
    pinned = _grid(running, grid)[seen] >= ceiling - 0.5  # sequence counts are whole numbers
    return {"max": ceiling, "at_max_while_queueing": round(float(pinned.mean()), 3) if seen.any() else None}


def _pct_change(now: float | None, before: float | None) -> float | None:
    return None if not now or not before else round(100.0 * (now - before) / before, 1)


def _peak_hour(grid: np.ndarray, values: np.ndarray) -> tuple[str | None, float]:
    if not values.any():
        return None, 0.0
    per_hour = int(3600 / STEP_S)
    n = len(values) // per_hour * per_hour
    hourly = values[:n].reshape(-1, per_hour).mean(axis=1)
    i = int(np.argmax(hourly))
    return _iso(grid[i * per_hour] - STEP_S), float(hourly[i])


def _slo(raw: dict, grid: np.ndarray, dep: str, tier: str, elapsed: np.ndarray | None = None) -> list[dict]:
    """Per route of (dep, tier); ``elapsed``: the steps that have passed (default all), what the means cover."""
    el = np.ones(len(grid), dtype=bool) if elapsed is None else elapsed
    routes = _by(raw["by_route"], "deployment", "tier", "route")
    ttft, tpot = (_by(raw[k], "deployment", "tier", "route") for k in ("ttft_errors", "tpot_errors"))
    objective = _scalar(raw["objective"], "tier", "route")
    out = []
    for (d, t, route), s in sorted(routes.items()):
        if (d, t) != (dep, tier) or (t, route) not in objective:
            continue
        req = _grid(s, grid)
        e1, e2 = _grid(ttft.get((d, t, route)), grid), _grid(tpot.get((d, t, route)), grid)
        n = req.sum()
        if n <= 0:
            continue
        obj = objective[(t, route)]
        if not 0 < obj <= 1:
            continue  # not an objective: no attainment to judge against it
        e1, e2 = np.clip(e1, 0.0, 1.0), np.clip(e2, 0.0, 1.0)  # a ratio of errors to requests
        err1, err2 = float((e1 * req).sum() / n), float((e2 * req).sum() / n)
        worst = np.maximum(e1, e2)
        out.append({"route": route, "objective": obj, "ttft_attainment": round(1 - err1, 5),
                    "tpot_attainment": round(1 - err2, 5), "met": bool(1 - max(err1, err2) >= obj),
                    # an objective of 1.0 has no budget to burn: None, shown empty, not a division by zero
                    "error_budget_burn": round(max(err1, err2) / (1 - obj), 3) if obj < 1 else None,
                    "goodput_requests_per_second": round(float((req * (1 - worst))[el].mean()), 3) if el.any() else 0.0,
                    "attainment_series": np.round(1 - worst, 4).tolist()})
    return out


def _pages(raw: dict, rules: list) -> tuple[list[Page], str]:
    if raw.get("alerts"):
        return [p for s in raw["alerts"] for p in pages_from_series(s.labels.get("alertname", "?"), [s], 0.0)], "ALERTS"
    pages = [p for i, a in enumerate(rules) for p in pages_from_series(a.name, raw.get(f"alert:{i}", []), a.for_s)]
    return pages, "alert expressions evaluated over the week"


def summarize(raw: dict[str, list[Series]], week: str, start: float, plan, rules: list, redundancy: float,
              gpu_hour_cost: float | None = None, now: float | None = None) -> dict:
    """The review's content (JSON-ready). ``plan``: ``goodput.exporters.config.Plan`` or None; ``now`` (default:
    the clock) ends a week in progress."""
    step_n = int(WEEK_S / STEP_S)
    grid = start + STEP_S * np.arange(1, step_n + 1)
    now = time.time() if now is None else now
    el = grid <= now

    def mean(v: np.ndarray) -> float:
        return float(v[el].mean()) if el.any() else 0.0
    req, inp, out = (_by(raw[k], "deployment", "tier") for k in ("requests", "input", "output"))
    deployments = sorted({d for d, _ in req} | {s.labels.get("deployment", "") for s in raw["tokens"]})
    pages, page_source = _pages(raw, rules)
    review: dict = {"week": week, "start": _iso(start), "end": _iso(start + WEEK_S), "step_s": STEP_S,
                    "grid": [_iso(t) for t in grid], "has_data": bool(deployments), "plan": plan is not None,
                    "page_source": page_source, "deployments": {},
                    # a week in progress: its figures cover start .. as_of
                    "partial": {"as_of": _iso(now)} if now < start + WEEK_S else None}
    if not deployments:
        return review
    tenants = _scalar(raw["tenant_requests"], "deployment", "tier", "tenant")
    tenant_tokens = _scalar(raw["tenant_tokens"], "deployment", "tier", "tenant")
    weeks = {k: _scalar(raw[k], "deployment", "tier") for k in ("requests_week", "requests_prev", "tokens_week",
                                                                  "tokens_prev", "timeouts_week")}
    rejections = _scalar(raw["rejections_week"], "deployment", "tier", "reason")
    routes = _by(raw["by_route"], "deployment", "tier", "route")
    lat = {k: _by(raw[k], "deployment", "tier") for k in ("queue_p95", "ttft_p95", "tpot_p95")}
    per_dep = {k: _by(raw.get(k, []), "deployment") for k in ("tokens", "kv_max", "preemptions", "kv_rejections",
                                                               "available", "desired", "running")}
    history = _by(raw["history"], "deployment")
    cost_by = {k: _by(raw.get(k, []), "deployment") for k in ("cost", "idle_cost", "goodput_tokens")}
    gpus_by_type, tenant_cost = _by(raw.get("gpus_by_type", []), "deployment", "gpu_type"), \
        _by(raw.get("tenant_cost", []), "deployment", "tier", "tenant")
    prices = _scalar(raw.get("prices", []), "deployment", "gpu_type")  # at each deployment's own pricing
    costs = []
    cold = cold_starts(raw.get("pod_cold_starts", []), raw.get("cold_starts", []), raw.get("cold_start_plan", []),
                       plan)
    gpus = defaultdict(list)
    for s in raw["gpus"]:
        gpus[s.labels.get("deployment", "")].append(float(np.median(s.values)) if len(s.values) else 0.0)
    for dep in deployments:
        tiers = {}
        for (d, tier), s in sorted(req.items()):
            if d != dep:
                continue
            r = _grid(s, grid)
            peak_at, peak = _peak_hour(grid, r)
            key = (dep, tier)
            tiers[tier] = {
                "requests_per_second": {"mean": round(mean(r), 3), "peak_hour": peak_at,
                                        "peak_hour_mean": round(peak, 3), "series": np.round(r, 3).tolist()},
                "input_tokens_per_second": round(mean(_grid(inp.get(key), grid)), 1),
                "output_tokens_per_second": round(mean(_grid(out.get(key), grid)), 1),
                "requests": round(weeks["requests_week"].get(key, 0.0)),
                "requests_previous_week": round(weeks["requests_prev"].get(key, 0.0)),
                "requests_week_over_week_pct": _pct_change(weeks["requests_week"].get(key),
                                                           weeks["requests_prev"].get(key)),
                "tokens_week_over_week_pct": _pct_change(weeks["tokens_week"].get(key), weeks["tokens_prev"].get(key)),
                "by_route": {rt: round(mean(_grid(s2, grid)), 3) for (d2, t2, rt), s2 in routes.items()
                             if (d2, t2) == key},
                "tenants": sorted(({"tenant": tn, "requests": round(v), "tokens": round(tenant_tokens.get((d2, t2, tn), 0))}
                                   for (d2, t2, tn), v in tenants.items() if (d2, t2) == key),
                                  key=lambda x: -x["requests"]),
                "slo": _slo(raw, grid, dep, tier, el),
                "latency_p95_s": {k.removesuffix("_p95"): latency_p95(k.removesuffix("_p95"), v.values)
                                  for k in lat if (v := lat[k].get(key)) is not None and len(v.values)},
                "latency_p95_series": {k.removesuffix("_p95"): np.round(_grid(lat[k].get(key), grid), 4).tolist()
                                       for k in lat},
                "rejections": {rs: round(v) for (d2, t2, rs), v in rejections.items() if (d2, t2) == key and v >= 1},
                "timeouts": round(weeks["timeouts_week"].get(key, 0.0)),
            }
        tokens = _grid(per_dep["tokens"].get((dep,)), grid)
        available_s = per_dep["available"].get((dep,))
        available = _grid(available_s, grid)
        seen = _present(available_s, grid)
        kv = per_dep["kv_max"].get((dep,))
        desired_s = per_dep["desired"].get((dep,))
        queue = np.max([_grid(lat["queue_p95"].get((dep, t)), grid) for t in tiers] or [np.zeros(len(grid))], axis=0)
        peak_at, peak_tokens = _peak_hour(grid, tokens)
        entry: dict[str, Any] = {
            "tiers": tiers,
            "tokens_per_second": {"mean": round(mean(tokens), 1), "peak_5m": round(float(tokens.max()), 1),
                                  "peak_hour": peak_at, "peak_hour_mean": round(peak_tokens, 1),
                                  "series": np.round(tokens, 1).tolist()},
            "replicas": {"available_series": available.tolist(),
                         "min_available": float(available[seen].min()) if seen.any() else None,
                         "desired": float(np.max(desired_s.values)) if desired_s is not None and len(desired_s.values)
                         else None,
                         "shortfall": _shortfall(grid, available_s, desired_s)},
            "running": _running(grid, per_dep["running"].get((dep,)), queue),
            "kv": {"usage_p95": round(float(np.percentile(kv.values, 95)), 3) if kv is not None and len(kv.values)
                   else None,
                   "preemptions": round(float(_grid(per_dep["preemptions"].get((dep,)), grid).sum() * STEP_S)),
                   "allocation_failures": round(float(_grid(per_dep["kv_rejections"].get((dep,)), grid).sum() * STEP_S)),
                   "usage_max_series": np.round(_grid(kv, grid), 3).tolist()},
            "pages": [{"alert": p.alert, "labels": p.labels, "start": _iso(p.start), "end": _iso(p.end),
                       "duration_s": round(p.duration_s)} for p in pages if p.labels.get("deployment") == dep],
        }
        gpr = float(np.median(gpus[dep])) if gpus.get(dep) else None
        replica_hours = float(available.sum() * STEP_S / 3600)
        entry["usage"] = {"replica_hours": round(replica_hours, 1), "gpus_per_replica": gpr,
                          "gpu_hours": round(replica_hours * gpr, 1) if gpr else None}
        entry["capacity"] = _capacity(plan, dep, tokens, available, redundancy, gpr, gpu_hour_cost)
        if (dep,) in cost_by["cost"]:
            hourly, idle, good = (_grid(cost_by[k].get((dep,)), grid) for k in ("cost", "idle_cost", "goodput_tokens"))
            c = DeploymentCost(hourly, idle, good,
                               {t: _grid(s, grid) for (d, t), s in gpus_by_type.items() if d == dep},
                               {t: v for (d, t), v in prices.items() if d == dep})
            costs.append(c)
            entry["cost"] = deployment_cost(c, {(t, tn): _grid(s, grid) for (d, t, tn), s in tenant_cost.items()
                                                if d == dep}, grid, el, STEP_S)
        entry["cold_start"] = cold.get(dep)
        h = history.get((dep,))
        fc = forecast_peaks(h.times, h.values, origin=start - 4 * WEEK_S) if h is not None else None
        entry["forecast"] = None if fc is None else {
            "growth_per_week_pct": round(100 * fc.growth_per_week, 2), "residual_sd_log": round(fc.residual_sd, 4),
            "history": [{"week_start": _iso(t), "peak": round(v, 1)} for t, v in fc.history_peaks],
            "weeks": [{"week_start": _iso(w.week_start), "peak": round(w.peak, 1), "low": round(w.low, 1),
                       "high": round(w.high, 1),
                       "replicas_needed": None if plan is None or dep not in plan.goodput else
                       int(np.ceil(w.high * redundancy / plan.goodput[dep]))} for w in fc.weeks]}
        review["deployments"][dep] = entry
    review["cost"] = fleet_cost(costs, grid, el, STEP_S) if costs else None
    review["pages"] = sorted(({"alert": p.alert, "labels": p.labels, "start": _iso(p.start), "end": _iso(p.end),
                               "duration_s": round(p.duration_s)} for p in pages), key=lambda p: p["start"])
    return review


def _capacity(plan, dep: str, tokens: np.ndarray, available: np.ndarray, redundancy: float, gpr: float | None,
              cost: float | None) -> dict:
    if plan is None or dep not in plan.goodput:
        return {"plan": None, "note": "no plan" if plan is None else f"no plan for {dep}"}
    g = plan.goodput[dep]
    desired = plan.desired.get(dep) or (int(available.max()) if available.any() else None)
    capacity = desired * g if desired else None
    live_capacity = available * g
    load = np.divide(tokens, live_capacity, out=np.zeros_like(tokens), where=live_capacity > 0)
    needed = np.ceil(tokens * redundancy / g)
    peak = float(tokens.max())
    out = {"plan": True, "replica_goodput_tokens_per_second": g, "desired_replicas": desired,
           "capacity_tokens_per_second": capacity, "peak_tokens_per_second": round(peak, 1),
           "headroom_pct": round(100 * (1 - peak / capacity), 1) if capacity else None,
           "hours_above_80pct": round(float((load > HIGH_LOAD).sum() * STEP_S / 3600), 2),
           "peak_load": round(float(load.max()), 3),
           "replicas_needed_at_peak": int(np.ceil(peak * redundancy / g)),
           "replica_hours_needed": round(float(needed.sum() * STEP_S / 3600), 1),
           "load_series": np.round(load, 3).tolist()}
    if gpr and cost:
        used = float(available.sum() * STEP_S / 3600) * gpr
        out["cost"] = {"gpu_hour": cost, "used": round(used * cost), "needed": round(out["replica_hours_needed"] * gpr * cost)}
    return out
