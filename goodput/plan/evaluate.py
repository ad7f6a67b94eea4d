"""``goodput plan evaluate``: a scenario replayed in the simulator for four policies side by side.

- ``static peak``: the plan's replicas all the time (provisioning for the peak);
- ``policy``: the policy.yaml policy, the autoscaler in the loop;
- ``GPU_UTIL 80%`` and ``SM_ACTIVE 80%``: the same bounds and behaviour, scaling on what NVML's utilisation and
  DCGM's SM activity read for the replicas (goodput/simulator/gpu_readings.py) at an 80% target.

Scenarios, at the plan's peak x growth (``P``): ``burst`` half of P with a jump to ``burst_factor`` x P for ten
minutes at one hour; ``diurnal`` a day between 20% and 100% of P; ``diurnal_peak`` the predictable morning ramp
alone, two hours from 20% of P to P (a four-hour cycle, peak at 1 h 50 min); ``release`` 70% of P with a release at
one hour that makes every step 30% slower; ``replica_loss`` 80% of P and two replicas lost at one hour;
``prefill_surge`` half of P and, for ten minutes at one hour, as many requests again with prompts
``PREFILL_SURGE_INPUT_SCALE`` x as long (the GPUs read busy either way while the prefill queue grows);
``cold_start_10m`` the burst with every new replica ten minutes from scale-up to serving. Every policy sees the same
arrivals (same seed). Attainment counts each request that arrived in the scenario: one rejected, aborted or outside
its tier's TTFT / TPOT misses. Each policy's Pareto position (attainment per tier against GPU-hours) and every run
of minutes whose attainment fell below the tier's objective (a 2-hour mean hides them) come with the figures.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from typing import Any

import numpy as np

from goodput.contracts.catalog import GATEWAY_BUCKETS
from goodput.contracts.vocabulary import TIER_RANK
from goodput.foundation.errors import ConfigError
from goodput.plan.fleetspec import fleet_config
from goodput.plan.pareto import pareto, standing
from goodput.plan.planfile import PlannedDeployment
from goodput.plan.prices import Prices, load_prices
from goodput.plan.scenarios import COLD_START_S, SCENARIOS, scenario
from goodput.simulator.autoscaler import Autoscaler, ScalingPolicy
from goodput.simulator.fleet import Fleet
from goodput.simulator.tally import SloTally
from goodput.simulator.workload import Arrivals, generate

__all__ = ["BASELINES", "dips", "evaluate", "initial_replicas"]

BUCKET_S = 60.0
RECOVERED_BUCKETS = 5  # met for this many buckets in a row: recovered
UTILISATION_TARGET = 0.8
BASELINES = {"GPU_UTIL 80%": "utilisation", "SM_ACTIVE 80%": "sm_active"}  # label -> autoscaler kind


def initial_replicas(d: PlannedDeployment, p: ScalingPolicy, workloads: list[dict]) -> int:
    """What the policy would settle at for the scenario's opening load."""
    if p.kind == "static":
        return p.min_replicas
    tokens = 0.0
    for wl, s in zip(workloads[:len(d.demand.streams)], d.demand.streams, strict=True):  # one per stream first
        a = wl["arrival"]
        rate = a["rate"] * (1 - a["diurnal"]["amplitude"] if "diurnal" in a else 1.0)
        tokens += rate * (s.input_mean + s.output_mean)
    n = math.ceil(tokens / p.goodput_tokens_per_s * p.redundancy - 1e-9)
    return min(max(n, p.min_replicas), p.max_replicas)


def dips(series: list[float | None], objective: float, bucket_s: float = BUCKET_S) -> list[dict[str, Any]]:
    """Each run of consecutive buckets whose attainment is below ``objective`` (a bucket without requests ends
    none): its start and end in seconds, its length in buckets and its worst bucket."""
    out: list[dict[str, Any]] = []
    run: list[tuple[int, float]] = []
    for b, v in enumerate([*series, None]):
        if v is not None and v < objective:
            run.append((b, v))
            continue
        if v is None and run and b < len(series):
            continue
        if run:
            out.append({"start_s": run[0][0] * bucket_s, "end_s": (run[-1][0] + 1) * bucket_s, "minutes": len(run),
                        "worst": min(x for _, x in run)})
            run = []
    return out


def _outcomes(tally: SloTally, d: PlannedDeployment, t_d: float) -> dict[str, Any]:
    tiers = d.demand.tiers()
    n_buckets = len(tally.total[0])
    tot = {t: np.asarray(tally.total[TIER_RANK[t]], dtype=float) for t in tiers}
    gd = {t: np.asarray(tally.good[TIER_RANK[t]], dtype=float) for t in tiers}
    attainment = {t: float(gd[t].sum() / tot[t].sum()) if tot[t].sum() else None for t in tiers}
    series = {t: np.where(tot[t] > 0, gd[t] / np.maximum(tot[t], 1), np.nan) for t in tiers}
    strict = min(tiers)  # P0 before P1 before P2
    ok = np.nan_to_num(series[strict], nan=1.0) >= d.slos[strict].objective
    first = int(t_d // BUCKET_S)
    missed = [b for b in range(first, n_buckets) if not ok[b]]
    if not missed:
        ttr: float | None = 0.0
    else:
        ttr = None
        for b in range(missed[0], n_buckets - RECOVERED_BUCKETS + 1):
            if ok[b:b + RECOVERED_BUCKETS].all():
                ttr = b * BUCKET_S - t_d
                break
    timeline = {t: [None if math.isnan(v) else round(float(v), 4) for v in series[t]] for t in tiers}
    below = {t: dips(timeline[t], d.slos[t].objective) for t in tiers}
    return {"attainment": attainment, "rejected": tally.rejected, "time_to_recover_s": ttr,
            "minutes_below_objective": {t: sum(x["minutes"] for x in below[t]) for t in tiers},
            "dips": below, "attainment_timeline": timeline}


def _run(d: PlannedDeployment, p: ScalingPolicy, workloads: list[dict], events: list[dict], duration_s: float,
         t_d: float, seed: int, arrivals: Arrivals, usd_per_gpu_hour: float | None) -> dict[str, Any]:
    cfg = fleet_config(f"plan {d.name}", d.name, d.candidate, initial_replicas(d, p, workloads), workloads, events, seed)
    # a day is ~10^6 requests: count each as it finishes instead of keeping it
    fleet = Fleet(cfg, arrivals, keep_done=False)
    tally = SloTally({TIER_RANK[t]: (d.slos[t].ttft_s, d.slos[t].tpot_s) for t in d.demand.tiers()}, BUCKET_S,
                     duration_s)
    fleet.watch(tally)
    scaler = Autoscaler(fleet, d.name, p, tp=d.candidate.tp, wait_buckets=GATEWAY_BUCKETS)
    scaler.run(duration_s)
    fleet.drain(duration_s + 600.0)
    out = _outcomes(tally, d, t_d)
    samples = scaler.samples
    out.update({
        "gpu_hours": round(scaler.gpu_seconds / 3600.0, 2),
        # dollars beside GPU-hours, from the unrounded GPU-seconds; None where the GPU has no price
        "usd": None if usd_per_gpu_hour is None else round(scaler.gpu_seconds / 3600.0 * usd_per_gpu_hour, 2),
        "max_replicas": max((s.provisioned for s in samples), default=0),
        "timeline": {"t": [s.t for s in samples], "ready": [s.ready for s in samples],
                     "provisioned": [s.provisioned for s in samples], "desired": [s.desired for s in samples],
                     "demand_tokens_per_s": [round(s.signals["tokens_per_s"], 1) for s in samples]},
    })
    return out


def evaluate(planned: list[PlannedDeployment], policies: dict[str, ScalingPolicy], scenario_name: str, *,
             deployment: str | None = None, duration_s: float | None = None, seed: int = 0,
             max_replicas: int | None = None, progress: Callable[[float], None] | None = None,
             policies_to_run: str | None = None, jobs: int = 1, prices: Prices | None = None) -> dict[str, Any]:
    """The scenario for each policy (or only ``policies_to_run``, one label), side by side; ``jobs`` processes
    (0: one per policy, up to the cores); each policy's dollars at ``prices`` (default: the shipped prices)."""
    if scenario_name not in SCENARIOS:
        raise ConfigError("--scenario", scenario_name, f"must be one of {', '.join(SCENARIOS)}")
    by_name = {d.name: d for d in planned}
    name = deployment or planned[0].name
    if name not in by_name:
        raise ConfigError("--deployment", name, f"not in the plan; have {', '.join(by_name)}")
    if name not in policies:
        raise ConfigError("--policy", name, f"the policy file has no deployment {name!r}; have {', '.join(policies)}")
    d = by_name[name]
    ours = policies[name] if max_replicas is None else replace(policies[name], max_replicas=max_replicas)
    duration = duration_s or (86400.0 if scenario_name == "diurnal" else 7200.0)
    workloads, events, t_d = scenario(scenario_name, d, duration)
    if scenario_name in COLD_START_S:
        ours = replace(ours, cold_start_s=COLD_START_S[scenario_name])
    static = replace(ours, kind="static", min_replicas=d.desired_replicas, max_replicas=d.desired_replicas, warm_pool=0)
    candidates = [("static peak", static), ("policy", ours),
                  *((label, replace(ours, kind=kind, utilisation_target=UTILISATION_TARGET))
                    for label, kind in BASELINES.items())]
    runs = [(label, p) for label, p in candidates if policies_to_run in (None, label)]
    results = {}
    # every policy replays the same requests: the arrivals depend on the workloads and the seed, not the replicas
    probe = fleet_config(f"plan {d.name}", d.name, d.candidate, 1, workloads, events, seed)
    arrivals = generate(probe, duration, seed)
    prices = prices or load_prices()
    price = prices.usd_per_gpu_hour(d.candidate.gpu)
    args = [(d, p, workloads, events, duration, t_d, seed, arrivals, price) for _, p in runs]
    if jobs == 1 or len(runs) == 1:
        for i, ((label, _), a) in enumerate(zip(runs, args, strict=True)):
            results[label] = _run(*a)
            if progress is not None:
                progress(i + 1)
    else:  # the policies are independent replays: one process each
        with ProcessPoolExecutor(max_workers=min(len(runs), jobs or os.cpu_count() or 1)) as pool:
            futures = [pool.submit(_run, *a) for a in args]
            for i, ((label, _), f) in enumerate(zip(runs, futures, strict=True)):
                results[label] = f.result()
                if progress is not None:
                    progress(i + 1)
    out: dict[str, Any] = {"scenario": scenario_name, "deployment": name, "duration_s": duration, "disturbance_s": t_d,
           "cold_start_s": ours.cold_start_s, "slo_objectives": {t: d.slos[t].objective for t in d.demand.tiers()},
           "gpu": d.candidate.gpu, "pricing": prices.pricing, "usd_per_gpu_hour": price, "policies": results,
           "headroom": d.headroom}
    if len(results) > 1:
        out["pareto"] = pareto(results)
        if "policy" in results:  # the claim: at least the baselines' attainment per tier, at no more GPU-hours
            out["standing"] = standing(results, "policy", [b for b in BASELINES if b in results], out["slo_objectives"])
    return out
