"""The measured cold start for ``plan replicas --cold-start-from`` and ``plan autoscale --cold-start-from``: per
deployment, the p90 over its replicas of the longest measure it has over a window, in place of a typed guess.

On Kubernetes with kube-state-metrics, ``llm_replica_pod_cold_start_seconds`` (rules/kube.rules.yaml: the pod's
creation to its first Ready, scheduling and image pull included); else ``llm_replica_cold_start_seconds`` (the engine
exporter's, from the process's start to its first answered scrape: what happens before the process is not in it).
Each replica counts once, with its longest start in the window (``max_over_time``), gone replicas included; the p90 is
the quantile across them — the same figure, chosen the same way, that the ``LLMColdStartAbovePlan`` ticket compares
with the plan's (its ``measured`` label names which).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass

from goodput.contracts.catalog import by_name
from goodput.contracts.vocabulary import COLD_START_MEASURES
from goodput.foundation import promapi
from goodput.foundation.errors import ConfigError
from goodput.plan.demand import Demand

__all__ = ["FLAG", "MeasuredColdStart", "apply_cold_starts", "measure_cold_starts", "parse_source"]

FLAG = "--cold-start-from"
COLD_START = by_name("llm_replica_cold_start_seconds").name
POD_COLD_START = by_name("llm_replica_pod_cold_start_seconds").name
# the measures a deployment may have, the fuller first; each one's name as LLMColdStartAbovePlan's `measured` label
MEASURES = tuple(zip((POD_COLD_START, COLD_START), COLD_START_MEASURES, strict=True))
PROMQL = "quantile by (deployment) (0.9, max_over_time({name}[{window}]))"
PROMQL_COUNT = "count by (deployment) (max_over_time({name}[{window}]))"


@dataclass(frozen=True)
class MeasuredColdStart:
    deployment: str
    p90_s: float
    replicas: int  # replica starts measured in the window
    measured: str  # which measure (MEASURES): pod_created_to_ready or process_start_to_first_scrape

    def as_dict(self) -> dict[str, float | int | str]:
        return {"p90_s": round(self.p90_s, 1), "replicas": self.replicas, "measured": self.measured}


def parse_source(text: str) -> str:
    """``prometheus:URL`` -> URL."""
    kind, _, where = text.partition(":")
    if kind == "prometheus" and where.startswith(("http://", "https://")):
        return where.rstrip("/")
    raise ConfigError(FLAG, text, "expected prometheus:http(s)://HOST:PORT")


def measure_cold_starts(source: str, window: str, until: float,
                        server: Callable[[str], promapi.Endpoint] = promapi.Endpoint) -> dict[str, MeasuredColdStart]:
    """Per deployment, the p90 cold start over ``window`` (a PromQL duration) ending at ``until`` (unix s); a window
    without any measured replica is one ConfigError."""
    url = parse_source(source)
    queries = [promapi.Query(f"{key}:{name}", q.format(name=name, window=window), until, until)
               for name, _ in MEASURES for key, q in (("p90", PROMQL), ("count", PROMQL_COUNT))]
    try:
        got = promapi.run_queries(server(url), queries)
    except promapi.PromError as e:
        raise promapi.config_error(url, e, FLAG) from None
    out: dict[str, MeasuredColdStart] = {}
    for name, label in MEASURES:  # the fuller measure first: a deployment keeps the first it has
        count = {s.labels.get("deployment", ""): int(s.values[0]) for s in got[f"count:{name}"]}
        for s in got[f"p90:{name}"]:
            dep = s.labels.get("deployment", "")
            if dep and dep not in out and math.isfinite(s.values[0]):
                out[dep] = MeasuredColdStart(dep, s.values[0], count.get(dep, 0), label)
    if not out:
        raise ConfigError(source, FLAG, f"no {POD_COLD_START} or {COLD_START} in the {window} before the window's "
                                        "end: no replica started while kube-state-metrics or the engine exporter "
                                        "watched")
    return dict(sorted(out.items()))


def apply_cold_starts(demand: Demand, measured: dict[str, MeasuredColdStart]) -> Demand:
    """``demand`` with each measured deployment's headroom sized on its measured cold start (the others keep theirs)."""
    deps = tuple(dataclasses.replace(d, headroom=dataclasses.replace(d.headroom, cold_start_s=measured[d.name].p90_s))
                 if d.name in measured else d for d in demand.deployments)
    return dataclasses.replace(demand, deployments=deps)
