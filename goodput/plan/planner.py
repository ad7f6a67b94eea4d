"""``goodput plan replicas``: every candidate of every deployment sized, the cheapest chosen, written as plan.yaml.

Per-replica goodput comes from load-test runs or from the simulator's knee search (candidates in parallel
processes, a progress bar over them). The written plan keeps the two keys the engine exporter reads
(``replica_goodput_tokens_per_second``, ``desired_replicas``) and adds, beside them, what ``plan autoscale``
and ``plan evaluate`` need: the chosen candidate, its demand streams and SLOs, the headroom terms and inputs.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from typing import Any

from goodput.foundation.errors import ConfigError
from goodput.plan.demand import Candidate, Demand, DeploymentDemand
from goodput.plan.fleetspec import deployment_config
from goodput.plan.prices import Prices
from goodput.plan.replicas import CandidatePlan, peak_tokens_per_s, plan_candidate
from goodput.plan.runs import RunGoodput
from goodput.plan.sides import Sides, check_sides
from goodput.plan.simknee import Knee, knee_search

__all__ = ["DeploymentPlan", "PLAN_VERSION", "build_plan", "plan_dict"]

PLAN_VERSION = 1


@dataclass(frozen=True)
class DeploymentPlan:
    demand: DeploymentDemand
    candidates: tuple[CandidatePlan, ...]
    unmeasured: tuple[str, ...]  # candidates without a run (with --runs)

    @property
    def chosen(self) -> CandidatePlan:
        def cost(c: CandidatePlan) -> tuple:
            return (c.usd_per_hour is None, c.usd_per_hour or 0.0, c.gpus, c.name)
        return min(self.candidates, key=cost)


def _source(demand: Demand, dep: DeploymentDemand, cand: Candidate) -> str:
    return f"{demand.source}: deployments.{dep.name}.candidates[{dep.candidates.index(cand)}] ({cand.name})"


def _guess(dep: DeploymentDemand, sides: Sides, growth: float) -> float:
    """A first rate for the knee search: what the analytic checks say one replica serves, less a margin."""
    rps = sum(s.peak_rps for s in dep.streams) * growth
    ratio = min(sides.prefill_tokens_per_s / sides.input_tokens_per_s,
                sides.max_concurrency / sides.concurrent_sequences if sides.concurrent_sequences else 1e9)
    return max(rps * ratio * 0.7, 0.05)


def _knee_job(args: tuple) -> Knee:
    return knee_search(*args[:5], duration_s=args[5], seed=args[6])


def build_plan(demand: Demand, prices: Prices, *, runs: dict[str, RunGoodput] | None = None, jobs: int = 0,
               sim_duration_s: float = 120.0, progress: Callable[[float], None] | None = None,
               seed: int = 0) -> list[DeploymentPlan]:
    """Size every candidate; with ``runs`` None, measure each in the simulator (``jobs`` processes, 0: all cores)."""
    work: list[tuple[DeploymentDemand, Candidate, Sides]] = []
    for dep in demand.deployments:
        if not dep.candidates:
            raise ConfigError(demand.source, f"deployments.{dep.name}.candidates", "name at least one candidate")
        for cand in dep.candidates:
            cfg = deployment_config(_source(demand, dep, cand), cand)
            work.append((dep, cand, check_sides(cfg, dep.streams, demand.slos, demand.growth)))
    if runs is not None:
        known = {c.name for _, c, _ in work}
        unknown = sorted(set(runs) - known)
        if unknown:
            raise ConfigError("--runs", unknown[0], f"no such candidate in {demand.source}; have {', '.join(sorted(known))}")
    goodput: dict[tuple[str, str], tuple[float, float, str]] = {}
    if runs is not None:
        for dep, cand, _ in work:
            if cand.name in runs:
                r = runs[cand.name]
                goodput[(dep.name, cand.name)] = (r.goodput_tokens_per_s, r.concurrency,
                                                  f"load-test run {r.run_dir} (SLO {r.slo})")
    else:
        tasks = [(_source(demand, dep, cand), cand, dep.streams, demand.slos, _guess(dep, sides, demand.growth),
                  sim_duration_s, seed) for dep, cand, sides in work]
        workers = min(len(tasks), jobs or os.cpu_count() or 1)
        done = 0
        if workers <= 1:
            knees = []
            for t in tasks:
                knees.append(_knee_job(t))
                done += 1
                if progress:
                    progress(done)
        else:
            with ProcessPoolExecutor(max_workers=workers) as pool:
                futures = [pool.submit(_knee_job, t) for t in tasks]
                knees = []
                for f in futures:
                    knees.append(f.result())
                    done += 1
                    if progress:
                        progress(done)
        for (dep, cand, _), knee in zip(work, knees, strict=True):
            if knee.goodput_tokens_per_s <= 0:
                raise ConfigError(_source(demand, dep, cand), "slo",
                                  f"no load meets the SLO in the simulator (attainment {knee.attainment})")
            goodput[(dep.name, cand.name)] = (
                knee.goodput_tokens_per_s, knee.concurrency,
                f"simulator knee search: {knee.rate_rps:.3g} req/s per replica, {knee.probes} probes")
    out = []
    for dep in demand.deployments:
        plans, missing = [], []
        for d, cand, sides in work:
            if d is not dep:
                continue
            if (dep.name, cand.name) not in goodput:
                missing.append(cand.name)
                continue
            g, conc, src = goodput[(dep.name, cand.name)]
            plans.append(plan_candidate(dep, cand, g, conc, src, sides, demand.growth, prices.get(cand.gpu)))
        if not plans:
            raise ConfigError("--runs", dep.name, f"no run for any candidate of deployment {dep.name} "
                                                  f"({', '.join(c.name for c in dep.candidates)})")
        out.append(DeploymentPlan(dep, tuple(plans), tuple(missing)))
    return out


def candidate_row(c: CandidatePlan) -> dict[str, Any]:
    s = c.sides
    return {
        "name": c.name, "model": c.model, "gpu": c.gpu, "tp": c.tp,
        "replica_goodput_tokens_per_second": round(c.goodput_tokens_per_s, 1), "goodput_source": c.goodput_source,
        "replica_concurrency_at_slo": round(c.concurrency, 1),
        "replicas": c.replicas, "gpus": c.gpus, "headroom": c.terms.as_dict(),
        "usd_per_hour": None if c.usd_per_hour is None else round(c.usd_per_hour, 2),
        "usd_per_million_tokens": None if c.usd_per_million_tokens is None else round(c.usd_per_million_tokens, 4),
        "price_source": None if c.price is None else f"{c.price.source} (as of {c.price.as_of})",
        "checks": {
            "binding": s.binding, "raised_base": c.raised_by or None,
            "prefill": {"input_tokens_per_s": round(s.input_tokens_per_s, 1),
                        "replica_prefill_tokens_per_s": round(s.prefill_tokens_per_s, 1), "replicas": s.prefill_replicas},
            "decode": {"concurrent_sequences": round(s.concurrent_sequences, 1), "replica_max_concurrency": s.max_concurrency,
                       "limited_by": s.decode_limit, "kv_tokens": s.kv_tokens, "tpot_batch": s.tpot_batch,
                       "replicas": s.decode_replicas},
        },
    }


def plan_dict(demand: Demand, plans: Sequence[DeploymentPlan]) -> dict[str, Any]:
    """plan.yaml: the exporter's two keys per deployment, then the rest of the plan beside them."""
    deployments = {}
    for p in plans:
        c, dep = p.chosen, p.demand
        cand = next(x for x in dep.candidates if x.name == c.name)
        tiers = dep.tiers()
        deployments[dep.name] = {
            "replica_goodput_tokens_per_second": round(c.goodput_tokens_per_s, 1),
            "desired_replicas": c.replicas,
            "replica_concurrency_at_slo": round(c.concurrency, 1),
            "candidate": {"name": cand.name, "model": cand.model, "gpu": cand.gpu, "tp": cand.tp,
                          "engine": dict(cand.engine)},
            "peak_tokens_per_second": round(peak_tokens_per_s(dep), 1),
            "growth": demand.growth,
            "headroom": c.terms.as_dict(),
            "headroom_inputs": asdict(dep.headroom),
            "streams": [{"scene": s.scene, "tier": s.tier, "peak_rps": s.peak_rps, "input_tokens": s.input_tokens,
                         "output_tokens": s.output_tokens} for s in dep.streams],
            "slos": {t: asdict(demand.slos[t]) for t in tiers},
            "compared": [candidate_row(x) for x in p.candidates],
            "unmeasured_candidates": list(p.unmeasured),
        }
    return {"plan_version": PLAN_VERSION, "generated_by": "goodput plan replicas", "demand": demand.source,
            "deployments": deployments}
