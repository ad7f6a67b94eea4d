"""The week's cost from the cost rules' series (rules/cost.rules.yaml, docs/cost.md): pure functions, no I/O.

Dollars are the recorded $/hour integrated over the week's 5-minute steps; GPU-hours likewise from
``llm_deployment_gpus`` by GPU type, so ``gpu_hours x usd_per_gpu_hour`` is the check on ``usd`` (they agree
wherever every GPU of the deployment has a price). Waste is the idle cost (``llm_idle_hourly_cost``: GPU time that
served no goodput); its trend is the slope of the daily idle share, in percentage points a day.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["DeploymentCost", "deployment_cost", "fleet_cost"]

DAY_S = 86400.0


@dataclass(frozen=True)
class DeploymentCost:
    """One deployment's cost series on the week's grid (each 0 where the step has no point)."""

    usd_per_hour: np.ndarray
    idle_usd_per_hour: np.ndarray
    goodput_tokens_per_second: np.ndarray
    gpus_by_type: dict[str, np.ndarray]
    usd_per_gpu_hour: dict[str, float]


def _per_million(usd: float, tokens: float) -> float | None:
    return round(usd / tokens * 1e6, 4) if tokens > 0 else None


def _daily(usd: np.ndarray, idle: np.ndarray, good: np.ndarray, grid: np.ndarray, step_s: float) -> list[dict]:
    """Dollars, idle dollars and dollars per 1M goodput tokens for each day of the week (steps in it)."""
    day = ((grid - grid[0]) // DAY_S).astype(int)
    out = []
    for d in range(int(day.max()) + 1 if len(day) else 0):
        m = day == d
        u, i = float(usd[m].sum()), float(idle[m].sum())
        out.append({"day": d + 1, "usd": round(u, 2), "idle_usd": round(i, 2),
                    "idle_share": round(i / u, 4) if u > 0 else None,
                    "usd_per_million_goodput_tokens": _per_million(u, float(good[m].sum() * step_s))})
    return out


def _trend(daily: list[dict]) -> float | None:
    """The least-squares slope of the daily idle share, percentage points a day (None with fewer than 2 days)."""
    pts = [(d["day"], d["idle_share"]) for d in daily if d["idle_share"] is not None]
    if len(pts) < 2:
        return None
    x, y = np.array(pts, dtype=float).T
    return round(float(np.polyfit(x, y, 1)[0]) * 100, 3)


def _summary(usd: np.ndarray, idle: np.ndarray, good: np.ndarray, grid: np.ndarray, step_s: float) -> dict:
    total, idle_total = float(usd.sum()), float(idle.sum())
    daily = _daily(usd, idle, good, grid, step_s)
    return {"usd": round(total, 2), "goodput_tokens": round(float(good.sum() * step_s)),
            "usd_per_million_goodput_tokens": _per_million(total, float(good.sum() * step_s)),
            "idle_usd": round(idle_total, 2), "idle_share": round(idle_total / total, 4) if total > 0 else None,
            "idle_share_trend_pp_per_day": _trend(daily), "daily": daily}


def deployment_cost(c: DeploymentCost, tenants: dict[tuple[str, str], np.ndarray], grid: np.ndarray,
                    elapsed: np.ndarray, step_s: float) -> dict:
    """A deployment's week: dollars, GPU-hours and prices by GPU type, per 1M goodput tokens, idle and its trend,
    and each (tier, tenant)'s dollars (``tenants``: their $/hour series)."""
    h = step_s / 3600 * elapsed  # hours each step adds, 0 for the steps still to come
    usd, idle, good = c.usd_per_hour * h, c.idle_usd_per_hour * h, c.goodput_tokens_per_second * elapsed
    gpu_hours = {t: round(float((g * h).sum()), 2) for t, g in sorted(c.gpus_by_type.items())}
    priced = sum(gpu_hours[t] * p for t, p in c.usd_per_gpu_hour.items() if t in gpu_hours)
    return {**_summary(usd, idle, good, grid, step_s), "gpu_hours": gpu_hours,
            "usd_per_gpu_hour": {t: p for t, p in sorted(c.usd_per_gpu_hour.items()) if t in gpu_hours},
            "gpu_hours_x_price_usd": round(priced, 2),
            "unpriced_gpu_hours": gpu_hours.get("", 0.0),
            "tenants": sorted(({"tier": tier, "tenant": tn, "usd": round(float((s * h).sum()), 2)}
                               for (tier, tn), s in tenants.items()), key=lambda x: -x["usd"])}


def fleet_cost(costs: list[DeploymentCost], grid: np.ndarray, elapsed: np.ndarray, step_s: float) -> dict:
    """The fleet's week: the deployments' dollars, idle and goodput added up, per day and in all."""
    h = step_s / 3600 * elapsed
    zero = np.zeros(len(grid))
    usd = sum((c.usd_per_hour * h for c in costs), zero)
    idle = sum((c.idle_usd_per_hour * h for c in costs), zero)
    good = sum((c.goodput_tokens_per_second * elapsed for c in costs), zero)
    return _summary(usd, idle, good, grid, step_s)
