"""A candidate configuration and its demand streams as a simulator fleet, and whether a simulated request met its SLO.

The planner never builds the simulator's structures by hand: it writes the same mapping a user would put in a
fleet file and lets ``goodput.simulator.config.parse_fleet`` check it, so the memory budget, the catalog's model and GPU
names and the engine knobs are judged exactly as ``goodput simulate`` judges them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from goodput.plan.demand import Candidate, Stream, TierSlo
from goodput.simulator.config import DeploymentConfig, FleetConfig, parse_fleet

__all__ = ["deployment_config", "deployment_mapping", "fleet_config", "kv_pool_tokens", "meets_slo", "stream_workload",
           "ttft_tpot"]

OK_FINISH = ("stop", "length")


def deployment_mapping(name: str, cand: Candidate, replicas: int) -> dict[str, Any]:
    """``cand`` as a fleet file's deployment of ``replicas`` replicas."""
    return {"name": name, "model": cand.model, "gpu": cand.gpu, "tp": cand.tp, "replicas": replicas,
            "router": "least-outstanding", "engine": dict(cand.engine),
            **({"model_config": cand.model_config} if cand.model_config else {})}


def stream_workload(deployment: str, s: Stream, arrival: dict[str, Any]) -> dict[str, Any]:
    return {"name": f"{s.scene}-{s.tier}", "scene": s.scene, "tier": s.tier, "deployment": deployment,
            "tenants": {"demand": 1.0}, "input_tokens": dict(s.input_tokens), "output_tokens": dict(s.output_tokens),
            "max_tokens": int(math.ceil(max(s.output_tokens.values()))) + 1, "arrival": arrival}


def fleet_config(source: str, name: str, cand: Candidate, replicas: int, workloads: Sequence[dict[str, Any]],
                 events: Sequence[dict[str, Any]] = (), seed: int = 0) -> FleetConfig:
    """One deployment of ``cand`` with ``replicas`` replicas serving ``workloads``; bad set-ups raise
    ``ConfigError`` naming ``source`` (the demand file and candidate)."""
    data = {"name": name, "seed": seed, "deployments": [deployment_mapping(name, cand, replicas)],
            "workloads": list(workloads), "events": list(events)}
    return parse_fleet(data, source)


def deployment_config(source: str, cand: Candidate) -> DeploymentConfig:
    """The candidate checked by the simulator's fleet parser (memory budget included)."""
    wl = {"name": "probe", "scene": "chat", "tier": "P0", "deployment": "probe", "tenants": {"t": 1.0},
          "input_tokens": {"p50": 1, "max": 1}, "output_tokens": {"p50": 1, "max": 1}, "max_tokens": 2,
          "arrival": {"process": "poisson", "rate": 1.0}}
    return fleet_config(source, "probe", cand, 1, [wl]).deployments[0]


def kv_pool_tokens(cfg: DeploymentConfig) -> int:
    """KV tokens one replica holds: its memory budget's blocks (``parse_fleet`` sizes one for every deployment)."""
    if cfg.budget is None:
        raise ValueError(f"{cfg.name}: no memory budget (not a deployment parse_fleet checked)")
    return cfg.budget.num_blocks * cfg.engine.block_size


def ttft_tpot(req) -> tuple[float, float]:
    """A finished request's TTFT (from arrival) and TPOT (mean gap after the first token; 0 for one token)."""
    ttft = req.first_token - req.arrival
    n = req.generated
    tpot = (req.last_token - req.first_token) / (n - 1) if n > 1 else 0.0
    return ttft, tpot


def meets_slo(req, slo: TierSlo) -> bool:
    if req.finish_reason not in OK_FINISH:
        return False
    ttft, tpot = ttft_tpot(req)
    return ttft <= slo.ttft_s and tpot <= slo.tpot_s
