"""The week's cold starts against the plan: per deployment, the replica starts measured in the week (each replica's
longest) and the cold start its plan was sized on (the ``--plan`` file's, else ``llm_capacity_cold_start_seconds`` as
the exporter published it). Measured as ``LLMColdStartAbovePlan`` and ``plan --cold-start-from`` measure: a pod's
creation to Ready (``llm_replica_pod_cold_start_seconds``, kube-state-metrics) where the deployment has it, else the
engine process' start to its first answered scrape (``llm_replica_cold_start_seconds``); ``measured`` says which. The
p90 is Prometheus' ``quantile`` (linear interpolation), the figure the ticket and the plan use."""

from __future__ import annotations

import numpy as np

from goodput.contracts.vocabulary import COLD_START_MEASURES
from goodput.review.prom import Series

__all__ = ["cold_starts"]


def _by_deployment(series: list[Series]) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for s in series:
        if len(s.values) and np.isfinite(s.values[0]):
            out.setdefault(s.labels.get("deployment", ""), []).append(float(s.values[0]))
    return out


def cold_starts(pods: list[Series], replicas: list[Series], planned: list[Series], plan) -> dict[str, dict]:
    """Deployment -> {replicas, p50_s, p90_s, max_s, measured, plan_s, p90_over_plan}; ``pods`` and ``replicas``
    each pod's and each engine process' longest start, ``plan`` an exporters ``Plan`` or None. A deployment with
    neither a measured start nor a planned figure is left out."""
    measured: dict[str, tuple[list[float], str | None]] = {}
    for measure, series in zip(COLD_START_MEASURES, (pods, replicas), strict=True):  # the fuller measure first
        for dep, starts in _by_deployment(series).items():
            measured.setdefault(dep, (starts, measure))
    plan_s = {s.labels.get("deployment", ""): float(s.values[0]) for s in planned if len(s.values)}
    if plan is not None:
        plan_s |= plan.cold_start
    out = {}
    for dep in sorted(set(measured) | set(plan_s)):
        got, how = measured.get(dep, ([], None))
        v = np.array(got)
        p90 = round(float(np.quantile(v, 0.9)), 1) if len(v) else None
        assumed = plan_s.get(dep)
        out[dep] = {"replicas": len(v), "p50_s": round(float(np.quantile(v, 0.5)), 1) if len(v) else None,
                    "p90_s": p90, "max_s": round(float(v.max()), 1) if len(v) else None, "measured": how,
                    "plan_s": assumed, "p90_over_plan": None if p90 is None or assumed is None else p90 > assumed}
    return out
