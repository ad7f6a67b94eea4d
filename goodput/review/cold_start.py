"""The week's cold starts against the plan: per deployment, the replica starts the engine exporter measured in the
week (``llm_replica_cold_start_seconds``, each replica's longest) and the cold start its plan was sized on (the
``--plan`` file's, else ``llm_capacity_cold_start_seconds`` as the exporter published it). The p90 is Prometheus'
``quantile`` (linear interpolation), the figure ``LLMColdStartAbovePlan`` and ``plan --cold-start-from`` use."""

from __future__ import annotations

import numpy as np

from goodput.review.prom import Series

__all__ = ["cold_starts"]


def cold_starts(replicas: list[Series], planned: list[Series], plan) -> dict[str, dict]:
    """Deployment -> {replicas, p50_s, p90_s, max_s, plan_s, p90_over_plan}; ``plan``: an exporters ``Plan`` or
    None. A deployment with neither a measured start nor a planned figure is left out."""
    measured: dict[str, list[float]] = {}
    for s in replicas:
        if len(s.values) and np.isfinite(s.values[0]):
            measured.setdefault(s.labels.get("deployment", ""), []).append(float(s.values[0]))
    plan_s = {s.labels.get("deployment", ""): float(s.values[0]) for s in planned if len(s.values)}
    if plan is not None:
        plan_s |= plan.cold_start
    out = {}
    for dep in sorted(set(measured) | set(plan_s)):
        v = np.array(measured.get(dep, []))
        p90 = round(float(np.quantile(v, 0.9)), 1) if len(v) else None
        assumed = plan_s.get(dep)
        out[dep] = {"replicas": len(v), "p50_s": round(float(np.quantile(v, 0.5)), 1) if len(v) else None,
                    "p90_s": p90, "max_s": round(float(v.max()), 1) if len(v) else None, "plan_s": assumed,
                    "p90_over_plan": None if p90 is None or assumed is None else p90 > assumed}
    return out
