"""Reading a plan.yaml that ``plan replicas`` wrote, for ``plan autoscale`` and ``plan evaluate``.

The file itself, its deployments and the two keys the engine exporter reads are read by the exporters' one plan
reader (``goodput.exporters.config.read_plan``), so a malformed plan is the same line here as at the exporter.
The streams, SLOs, headroom inputs and candidate are checked by the demand file's own parser, so a hand-edited
plan is judged by the same rules (and named in the same ``file: key: problem`` form) as the demand it came from.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from goodput.exporters.config import PlanEntry, read_plan
from goodput.foundation.errors import ConfigError
from goodput.plan.demand import Candidate, DeploymentDemand, TierSlo, parse_demand
from goodput.simulator.config import MAX_REPLICAS

__all__ = ["PlannedDeployment", "load_plan_file"]


@dataclass(frozen=True)
class PlannedDeployment:
    name: str
    desired_replicas: int
    goodput_tokens_per_s: float
    concurrency: float  # requests one replica holds at its SLO knee (0: unknown)
    headroom: dict[str, int]  # the terms, as plan replicas wrote them
    demand: DeploymentDemand  # streams, headroom inputs, the chosen candidate
    slos: dict[str, TierSlo]
    growth: float

    @property
    def candidate(self) -> Candidate:
        return self.demand.candidates[0]

    @property
    def base_replicas(self) -> int:
        return self.headroom.get("base", self.desired_replicas)


def _non_negative(src: str, key: str, v: object) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v < 0:
        raise ConfigError(src, key, f"expected a finite number >= 0, got {v!r}")
    return float(v)


def _planned(src: str, e: PlanEntry) -> PlannedDeployment:
    """One entry as ``plan replicas`` wrote it: its demand keys checked by the demand file's own parser, its
    replicas and headroom terms within the simulator's bounds."""
    d, key = e.fields, e.key
    for k in ("candidate", "streams", "slos", "headroom"):
        if k not in d:
            raise ConfigError(src, f"{key}.{k}", "missing: this plan was not written by `goodput plan replicas`")
    sub = {"growth": d.get("growth", 1.0), "slos": d["slos"],
           "deployments": {e.name: {"streams": d["streams"], "headroom": d.get("headroom_inputs"),
                                    "candidates": [d["candidate"]]}}}
    demand = parse_demand(sub, f"{src}: {key}")
    desired = e.desired_replicas
    if desired is None or not 1 <= desired <= MAX_REPLICAS:
        raise ConfigError(src, f"{key}.desired_replicas",
                          f"expected an integer in 1..{MAX_REPLICAS}, got {d.get('desired_replicas')!r}")
    headroom = d["headroom"]
    if not isinstance(headroom, dict) or not all(isinstance(v, int) and not isinstance(v, bool)
                                                and 0 <= v <= MAX_REPLICAS for v in headroom.values()):
        raise ConfigError(src, f"{key}.headroom", f"expected a mapping of term -> replicas (integers in 0..{MAX_REPLICAS})")
    concurrency = _non_negative(src, f"{key}.replica_concurrency_at_slo", d.get("replica_concurrency_at_slo", 0.0))
    return PlannedDeployment(e.name, desired, e.goodput_tokens_per_s, concurrency, dict(headroom), demand.deployments[0],
                             demand.slos, demand.growth)


def load_plan_file(path: str | Path) -> list[PlannedDeployment]:
    """The plan at ``path``, read by the exporters' ``read_plan`` (so what both check fails alike), each deployment
    then held to what ``plan replicas`` writes."""
    entries = read_plan(path)
    if not entries:
        raise ConfigError(str(path), "deployments", "expected a mapping of deployment -> plan")
    return [_planned(str(path), e) for e in entries]
