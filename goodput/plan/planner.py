"""``goodput plan replicas``: every candidate of every deployment sized, the cheapest chosen, written as plan.yaml.

Per-replica goodput comes from load-test runs or from the simulator's knee search (candidates in parallel
processes, a progress bar over them). The written plan keeps the two keys the engine exporter reads
(``replica_goodput_tokens_per_second``, ``desired_replicas``) and adds, beside them, what ``plan autoscale``
and ``plan evaluate`` need: the chosen candidate, its demand streams and SLOs, the headroom terms and inputs.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from typing import Any

from goodput.foundation.errors import ConfigError
from goodput.plan.demand import Candidate, Demand, DeploymentDemand
from goodput.plan.fleetspec import deployment_config
from goodput.plan.prices import ON_DEMAND, Prices
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


@dataclass(frozen=True)
class _Work:
    """One candidate of one deployment to size, with what the analytic checks say of it."""

    dep: DeploymentDemand
    cand: Candidate
    sides: Sides


@dataclass(frozen=True)
class _Goodput:
    """A candidate's per-replica SLO goodput, the concurrency it holds there, and where the figure came from."""

    tokens_per_s: float
    concurrency: float
    source: str


def _work(demand: Demand) -> list[_Work]:
    """Every candidate, checked by the simulator's parser and the prefill/decode sides before anything is measured:
    a deployment without candidates, or a candidate the parser refuses, stops the plan here."""
    work = []
    for dep in demand.deployments:
        if not dep.candidates:
            raise ConfigError(demand.source, f"deployments.{dep.name}.candidates", "name at least one candidate")
        for cand in dep.candidates:
            cfg = deployment_config(_source(demand, dep, cand), cand)
            work.append(_Work(dep, cand, check_sides(cfg, dep.streams, demand.slos, demand.growth)))
    return work


def _from_runs(demand: Demand, work: list[_Work], runs: dict[str, RunGoodput]) -> dict[tuple[str, str], _Goodput]:
    """Goodput from load-test runs, by candidate name; a run naming no candidate is an error (a typo would
    otherwise plan without it)."""
    known = {w.cand.name for w in work}
    unknown = sorted(set(runs) - known)
    if unknown:
        raise ConfigError("--runs", unknown[0], f"no such candidate in {demand.source}; have {', '.join(sorted(known))}")
    return {(w.dep.name, w.cand.name): _Goodput(r.goodput_tokens_per_s, r.concurrency,
                                                 f"load-test run {r.run_dir} (SLO {r.slo})")
            for w in work if (r := runs.get(w.cand.name)) is not None}


def _knees(tasks: list[tuple], jobs: int, progress: Callable[[float], None] | None) -> list[Knee]:
    """The knee searches, in order: in this process for one worker, else ``jobs`` processes (0: all cores);
    ``progress`` is told how many are done."""
    workers = min(len(tasks), jobs or os.cpu_count() or 1)
    if workers <= 1:
        return _counted(map(_knee_job, tasks), progress)
    with ProcessPoolExecutor(max_workers=workers) as pool:
        futures = [pool.submit(_knee_job, t) for t in tasks]
        return _counted((f.result() for f in futures), progress)


def _counted(knees: Iterable[Knee], progress: Callable[[float], None] | None) -> list[Knee]:
    """The knees as each finishes, ``progress`` told the count so far."""
    out = []
    for knee in knees:
        out.append(knee)
        if progress:
            progress(len(out))
    return out


def _simulated(demand: Demand, work: list[_Work], jobs: int, sim_duration_s: float,
               progress: Callable[[float], None] | None, seed: int) -> dict[tuple[str, str], _Goodput]:
    """Goodput from the simulator's knee search of every candidate; one that meets the SLO at no load is an error."""
    tasks = [(_source(demand, w.dep, w.cand), w.cand, w.dep.streams, demand.slos, _guess(w.dep, w.sides, demand.growth),
              sim_duration_s, seed) for w in work]
    out = {}
    for w, knee in zip(work, _knees(tasks, jobs, progress), strict=True):
        if knee.goodput_tokens_per_s <= 0:
            raise ConfigError(_source(demand, w.dep, w.cand), "slo",
                              f"no load meets the SLO in the simulator (attainment {knee.attainment})")
        out[(w.dep.name, w.cand.name)] = _Goodput(
            knee.goodput_tokens_per_s, knee.concurrency,
            f"simulator knee search: {knee.rate_rps:.3g} req/s per replica, {knee.probes} probes")
    return out


def _deployment_plan(demand: Demand, prices: Prices, dep: DeploymentDemand, work: list[_Work],
                     goodput: dict[tuple[str, str], _Goodput]) -> DeploymentPlan:
    """``dep``'s measured candidates sized; those without a run are listed as unmeasured, and none measured is an
    error."""
    plans, missing = [], []
    for w in (w for w in work if w.dep is dep):
        g = goodput.get((dep.name, w.cand.name))
        if g is None:
            missing.append(w.cand.name)
            continue
        plans.append(plan_candidate(dep, w.cand, g.tokens_per_s, g.concurrency, g.source, w.sides, demand.growth,
                                    prices.get(w.cand.gpu)))
    if not plans:
        raise ConfigError("--runs", dep.name, f"no run for any candidate of deployment {dep.name} "
                                              f"({', '.join(c.name for c in dep.candidates)})")
    return DeploymentPlan(dep, tuple(plans), tuple(missing))


def build_plan(demand: Demand, prices: Prices, *, runs: dict[str, RunGoodput] | None = None, jobs: int = 0,
               sim_duration_s: float = 120.0, progress: Callable[[float], None] | None = None,
               seed: int = 0) -> list[DeploymentPlan]:
    """Size every candidate; with ``runs`` None, measure each in the simulator (``jobs`` processes, 0: all cores)."""
    work = _work(demand)
    goodput = (_from_runs(demand, work, runs) if runs is not None
               else _simulated(demand, work, jobs, sim_duration_s, progress, seed))
    return [_deployment_plan(demand, prices, dep, work, goodput) for dep in demand.deployments]


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


def plan_dict(demand: Demand, plans: Sequence[DeploymentPlan], pricing: str = ON_DEMAND) -> dict[str, Any]:
    """plan.yaml: the exporter's two keys per deployment, then the rest of the plan beside them; its dollars are at
    ``pricing`` (goodput/plan/prices.py)."""
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
            "pricing": pricing, "deployments": deployments}
