"""The input of ``goodput plan disagg``: a demand file (``goodput.plan.demand``) whose deployments each add a
``disaggregation`` block, read into the pure planner's terms (``goodput.plan.disagg``).

    disaggregation:
      prefill_pool: {gpu: H100, tp: 1, engine: {prefill_chunk_tokens: 8192}}   # each key defaults to the candidate's
      decode_pool: {tp: 1}
      kv_link_gbps: 400         # Gbit/s per prefill GPU, as the simulator's fleet file says it (one NIC a TP rank)
      kv_link_latency_ms: 1.0   # per transfer

Each candidate of the deployment is the aggregated layout and the default of both pools (a pool's ``engine`` keys
override the candidate's); every pool is checked by the simulator's fleet parser, memory budget included, so its
KV cache is the one ``goodput simulate`` would give it, and the link is the simulator's ``DisaggConfig`` of the
disaggregated deployment, so a transfer takes what it takes there. ``planned_fleet`` writes the plan back as that
fleet file. Bad keys are one ``ConfigError`` with the dotted path.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from goodput.foundation.errors import ConfigError
from goodput.foundation.reader import Reader
from goodput.foundation.yamlfile import load_mapping
from goodput.plan.demand import MAX_TP, Candidate, DeploymentDemand, Stream, parse_demand
from goodput.plan.disagg import Comparison, Load, Pool
from goodput.plan.fleetspec import deployment_config, deployment_mapping, kv_pool_tokens, stream_workload
from goodput.plan.prices import Prices
from goodput.plan.sides import roofline_of
from goodput.simulator.catalog import resolve_gpu
from goodput.simulator.config import MAX_LINK_GBPS, DisaggConfig, parse_fleet
from goodput.simulator.distributions import QuantileDistribution

__all__ = ["DisaggCase", "MAX_LINK_LATENCY_MS", "load_disagg", "planned_fleet"]

MAX_LINK_LATENCY_MS = 10_000.0
POOL_KEYS = {"gpu", "tp", "engine"}
GRID = np.linspace(0.0005, 0.9995, 2000)  # the quantile levels a stream's token lengths are read at


@dataclass(frozen=True)
class DisaggCase:
    """One candidate of one deployment: the load, the three pools and the link, and what a fleet file of them needs:
    the streams (at peak; ``growth`` multiplies them) and each pool's candidate."""

    deployment: str
    candidate: str
    model: str
    load: Load
    aggregated: Pool
    prefill: Pool
    decode: Pool
    link: DisaggConfig
    streams: tuple[Stream, ...]
    growth: float
    candidates: dict[str, Candidate]  # per role: "aggregated", "prefill", "decode"


def _load(dep: DeploymentDemand, slos: dict, growth: float) -> Load:
    """The streams as one mix at peak x growth; the strictest SLO of their tiers."""
    weights, inputs = [], []
    for s in dep.streams:
        inputs.append(QuantileDistribution.from_quantiles(s.input_tokens).quantile(GRID))
        weights.append(np.full(len(GRID), s.peak_rps))
    x, w = np.concatenate(inputs), np.concatenate(weights)
    w = w / w.sum()
    mean = float(np.sum(w * x))
    order = np.argsort(x)
    tiers = [slos[s.tier] for s in dep.streams]
    objective = max(t.objective for t in tiers)
    rps = sum(s.peak_rps for s in dep.streams)
    quantile = float(np.interp(objective, np.cumsum(w[order]), x[order]))
    return Load(rps=rps * growth, input_mean=mean, input_p=quantile,
                input_max=max(max(s.input_tokens.values()) for s in dep.streams),
                input_cv2=float(np.sum(w * (x - mean) ** 2)) / mean**2,
                output_mean=sum(s.peak_rps * s.output_mean for s in dep.streams) / rps,
                ttft_s=min(t.ttft_s for t in tiers), tpot_s=min(t.tpot_s for t in tiers), objective=objective)


def _pool(role: str, source: str, cand: Candidate, prices: Prices) -> Pool:
    cfg = deployment_config(source, cand)
    e = cfg.engine
    return Pool(role=role, gpu=cfg.gpu, tp=cfg.tp, roofline=roofline_of(cfg), kv_tokens=kv_pool_tokens(cfg),
                block_size=e.block_size, max_num_seqs=e.max_num_seqs, max_num_batched_tokens=e.max_num_batched_tokens,
                prefill_chunk_tokens=e.prefill_chunk_tokens, usd_per_gpu_hour=prices.usd_per_gpu_hour(cfg.gpu))


def _pool_candidate(r: Reader, cand: Candidate) -> Candidate:
    r.unknown(POOL_KEYS)
    gpu = r.get("gpu", str, None)
    engine = r.child("engine", None)
    return replace(cand, gpu=resolve_gpu(gpu, r.source, r.key("gpu")).name if gpu else cand.gpu,
                   tp=r.get("tp", int, cand.tp, minimum=1, maximum=MAX_TP),
                   engine={**cand.engine, **(engine.data if engine else {})})


def _disaggregated(name: str, prefill: Candidate, decode: Candidate, replicas: tuple[int, int], gbps: float,
                   latency_ms: float) -> dict[str, Any]:
    """The fleet file's disaggregated deployment: ``prefill`` replicas whose decode pool runs ``decode``."""
    pool = deployment_mapping(name, decode, replicas[1])
    return {**deployment_mapping(name, prefill, replicas[0]),
            "disaggregation": {"decode_pool": {k: pool[k] for k in ("replicas", "gpu", "tp", "engine")},
                               "kv_link_gbps": gbps, "kv_link_latency_ms": latency_ms}}


def _link(source: str, cands: dict[str, Candidate], gbps: float, latency_ms: float) -> DisaggConfig:
    """The simulator's link between the two pools, from its own parser."""
    wl = stream_workload("probe", Stream("chat", "P0", 1.0, {"p50": 1, "max": 1}, {"p50": 1, "max": 1}, 1.0, 1.0),
                         {"process": "poisson", "rate": 1.0})
    dep = _disaggregated("probe", cands["prefill"], cands["decode"], (1, 1), gbps, latency_ms)
    link = parse_fleet({"name": "probe", "deployments": [dep], "workloads": [wl]}, source).deployments[0].disaggregation
    if link is None:
        raise ValueError(f"{source}: the probe deployment was parsed without its disaggregation")
    return link


def planned_fleet(planned: Sequence[tuple[DisaggCase, Comparison]]) -> dict[str, Any]:
    """Both layouts of every plan as one fleet file for ``goodput simulate``: the aggregated deployment at its
    planned replicas and prefill chunk, the disaggregated one at its P:D replicas over the planned link, each sent
    its own copy of the streams at peak x growth (Poisson); deployments are named DEPLOYMENT-CANDIDATE-LAYOUT."""
    deployments, workloads = [], []
    for case, c in planned:
        names = {layout: f"{case.deployment}-{case.candidate}-{layout}" for layout in ("aggregated", "disaggregated")}
        agg = case.candidates["aggregated"]
        agg = replace(agg, engine={**agg.engine, "prefill_chunk_tokens": c.aggregated.at.chunk})
        deployments += [deployment_mapping(names["aggregated"], agg, c.aggregated.replicas),
                        _disaggregated(names["disaggregated"], case.candidates["prefill"], case.candidates["decode"],
                                       (c.prefill.replicas, c.decode.replicas), c.link.kv_link_gbps,
                                       c.link.kv_link_latency_ms)]
        for name in names.values():
            for s in case.streams:
                wl = stream_workload(name, s, {"process": "poisson", "rate": s.peak_rps * case.growth})
                workloads.append({**wl, "name": f"{name}-{wl['name']}"})
    return {"name": "goodput-plan-disagg", "seed": 0, "deployments": deployments, "workloads": workloads}


def load_disagg(path: str | Path, prices: Prices, deployment: str | None = None) -> list[DisaggCase]:
    """Every candidate of every deployment (or of ``deployment``) of the file at ``path``."""
    src = str(path)
    raw: Any = copy.deepcopy(load_mapping(path, "a demand mapping with 'deployments'"))
    deployments = raw.get("deployments")
    blocks: dict[str, Reader] = {}
    for name, d in deployments.items() if isinstance(deployments, dict) else ():
        if isinstance(d, dict):  # anything else parse_demand refuses with its path
            key = f"deployments.{name}.disaggregation"
            if d.get("disaggregation") is None:
                raise ConfigError(src, key, "is required: the prefill_pool, decode_pool and kv_link_gbps to plan")
            blocks[str(name)] = Reader(src, d.pop("disaggregation"), key)
    demand = parse_demand(raw, src)
    if deployment is not None and deployment not in blocks:
        raise ConfigError("--deployment", deployment, f"no such deployment in {src}; have {', '.join(blocks)}")
    out = []
    for dep in demand.deployments:
        if deployment is not None and dep.name != deployment:
            continue
        if not dep.candidates:
            raise ConfigError(src, f"deployments.{dep.name}.candidates", "name at least one candidate")
        r = blocks[dep.name]
        r.unknown({"prefill_pool", "decode_pool", "kv_link_gbps", "kv_link_latency_ms"})
        gbps = r.get("kv_link_gbps", float, minimum=0.001, maximum=MAX_LINK_GBPS)
        latency_ms = r.get("kv_link_latency_ms", float, 0.0, minimum=0.0, maximum=MAX_LINK_LATENCY_MS)
        load = _load(dep, demand.slos, demand.growth)
        for i, cand in enumerate(dep.candidates):
            at = f"{src}: deployments.{dep.name}"
            cands, pools = {"aggregated": cand}, {}
            for role in ("prefill", "decode"):
                pr = r.child(f"{role}_pool", None) or Reader(src, {}, r.key(f"{role}_pool"))
                cands[role] = _pool_candidate(pr, cand)
                pools[role] = _pool(role, f"{at}.disaggregation.{role}_pool", cands[role], prices)
            out.append(DisaggCase(dep.name, cand.name, cand.model, load,
                                  _pool("aggregated", f"{at}.candidates[{i}] ({cand.name})", cand, prices),
                                  pools["prefill"], pools["decode"], _link(f"{at}.disaggregation", cands, gbps,
                                                                           latency_ms),
                                  dep.streams, demand.growth, cands))
    return out
