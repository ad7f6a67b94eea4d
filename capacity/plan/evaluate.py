"""``goodput plan evaluate``: a scenario replayed in the simulator for three policies side by side.

- ``static``: the plan's replicas all the time (provisioning for the peak);
- ``policy``: the policy.yaml policy, the autoscaler in the loop;
- ``utilisation``: the same bounds and behaviour, scaling on GPU utilisation at 80%.

Scenarios, at the plan's peak x growth (``P``): ``burst`` half of P with a jump to ``burst_factor`` x P for ten
minutes at one hour; ``diurnal`` a day between 20% and 100% of P; ``release`` 70% of P with a release at one
hour that makes every step 30% slower; ``replica_loss`` 80% of P and two replicas lost at one hour. Every
policy sees the same arrivals (same seed). Attainment counts each request that arrived in the scenario: one
rejected, aborted or outside its tier's TTFT / TPOT misses.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from typing import Any

import numpy as np

from capacity.plan.fleetspec import fleet_config, stream_workload
from capacity.plan.planfile import PlannedDeployment
from exporters.catalog import GATEWAY_BUCKETS
from goodput.foundation.errors import ConfigError
from simulator.autoscaler import Autoscaler, ScalingPolicy
from simulator.fleet import Fleet
from simulator.request import TIER_RANK
from simulator.tally import SloTally
from simulator.workload import Arrivals, generate

__all__ = ["SCENARIOS", "evaluate", "initial_replicas", "scenario"]

SCENARIOS = ("burst", "diurnal", "release", "replica_loss")
DISTURBANCE_S = 3600.0
BUCKET_S = 60.0
RECOVERED_BUCKETS = 5  # met for this many buckets in a row: recovered
UTILISATION_TARGET = 0.8


def scenario(name: str, d: PlannedDeployment, duration_s: float) -> tuple[list[dict], list[dict], float]:
    """(workloads, events, disturbance time) of a scenario for deployment ``d``."""
    g, h = d.growth, d.demand.headroom
    events: list[dict] = []
    t_d = min(DISTURBANCE_S, duration_s / 2)

    def arrival(rate: float) -> dict:
        if name == "burst":
            return {"process": "burst", "rate": 0.5 * rate,
                    "bursts": [{"at": t_d, "factor": 2.0 * h.burst_factor, "duration": 600.0}]}
        if name == "diurnal":  # mean 0.6 P, amplitude 2/3: between 0.2 P and P, peak at 14:00
            return {"process": "diurnal", "rate": 0.6 * rate, "diurnal": {"amplitude": 2 / 3}}
        return {"process": "poisson", "rate": (0.7 if name == "release" else 0.8) * rate}

    if name == "diurnal":
        t_d = 0.0
    elif name == "release":
        events.append({"at": t_d, "kind": "release", "deployment": d.name, "release_kind": "framework",
                       "from": "v1", "to": "v2", "effects": {"step_time_scale": 1.3}, "note": "a slower release"})
    elif name == "replica_loss":
        events += [{"at": t_d, "kind": "replica_lost", "deployment": d.name, "replica": i} for i in (0, 1)]
    workloads = [stream_workload(d.name, s, arrival(s.peak_rps * g)) for s in d.demand.streams]
    return workloads, events, t_d


def initial_replicas(d: PlannedDeployment, p: ScalingPolicy, workloads: list[dict]) -> int:
    """What the policy would settle at for the scenario's opening load."""
    if p.kind == "static":
        return p.min_replicas
    tokens = 0.0
    for wl, s in zip(workloads, d.demand.streams, strict=True):
        a = wl["arrival"]
        rate = a["rate"] * (1 - a["diurnal"]["amplitude"] if "diurnal" in a else 1.0)
        tokens += rate * (s.input_mean + s.output_mean)
    n = math.ceil(tokens / p.goodput_tokens_per_s * p.redundancy - 1e-9)
    return min(max(n, p.min_replicas), p.max_replicas)


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
    return {"attainment": attainment, "rejected": tally.rejected, "time_to_recover_s": ttr,
            "attainment_timeline": {t: [None if math.isnan(v) else round(float(v), 4) for v in series[t]]
                                    for t in tiers}}


def _run(d: PlannedDeployment, p: ScalingPolicy, workloads: list[dict], events: list[dict], duration_s: float,
         t_d: float, seed: int, arrivals: Arrivals) -> dict[str, Any]:
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
        "max_replicas": max((s.provisioned for s in samples), default=0),
        "timeline": {"t": [s.t for s in samples], "ready": [s.ready for s in samples],
                     "provisioned": [s.provisioned for s in samples], "desired": [s.desired for s in samples],
                     "demand_tokens_per_s": [round(s.signals["tokens_per_s"], 1) for s in samples]},
    })
    return out


def evaluate(planned: list[PlannedDeployment], policies: dict[str, ScalingPolicy], scenario_name: str, *,
             deployment: str | None = None, duration_s: float | None = None, seed: int = 0,
             max_replicas: int | None = None, progress: Callable[[float], None] | None = None,
             policies_to_run: str | None = None, jobs: int = 1) -> dict[str, Any]:
    """The scenario for each policy (or only ``policies_to_run``, one label), side by side; ``jobs`` processes
    (0: one per policy, up to the cores)."""
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
    static = replace(ours, kind="static", min_replicas=d.desired_replicas, max_replicas=d.desired_replicas, warm_pool=0)
    util = replace(ours, kind="utilisation", utilisation_target=UTILISATION_TARGET)
    runs = [(label, p) for label, p in (("static peak", static), ("policy", ours), ("utilisation 80%", util))
            if policies_to_run in (None, label)]
    results = {}
    # every policy replays the same requests: the arrivals depend on the workloads and the seed, not the replicas
    probe = fleet_config(f"plan {d.name}", d.name, d.candidate, 1, workloads, events, seed)
    arrivals = generate(probe, duration, seed)
    args = [(d, p, workloads, events, duration, t_d, seed, arrivals) for _, p in runs]
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
    return {"scenario": scenario_name, "deployment": name, "duration_s": duration, "disturbance_s": t_d,
            "slo_objectives": {t: d.slos[t].objective for t in d.demand.tiers()}, "policies": results,
            "headroom": d.headroom}
