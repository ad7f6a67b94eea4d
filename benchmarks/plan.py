"""goodput plan: (1) a replica plan over 6 candidate configurations, each measured by a simulator knee search,
on 2 cores (two processes) beside the same plan on one; (2) ``plan evaluate`` of a 24-hour diurnal day for a
16-replica deployment on one core: four days (static peak, the policy with the autoscaler in the loop, the
GPU_UTIL and SM_ACTIVE baselines), each policy's share of the CPU time beside the total.

Targets (issue 12): (1) <= 60 s; (2) <= 60 s for the three policies evaluate then had (each day's share is
reported, so the three are still comparable). Each figure has its wall time and its CPU time
(this process and its children): on a shared machine the wall clock also measures the neighbours. The
deployment of (2) is Llama-3.1-70B on 4x H100 with a chat mix of long answers, sized by the planner to 16
replicas at its peak. To compare with an older checkout, run the same ``evaluate`` call there in the same
session (``docs/capacity.md`` gives the figures before and after the lean replay).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from benchmarks.report import emit
from goodput.plan.autoscale import derive
from goodput.plan.demand import parse_demand
from goodput.plan.evaluate import evaluate
from goodput.plan.planfile import load_plan_file
from goodput.plan.planner import build_plan, plan_dict
from goodput.plan.prices import load_prices

STREAMS = [
    {"scene": "chat", "tier": "P0", "peak_rps": 24, "input_tokens": {"p50": 700, "p95": 2600, "max": 6000},
     "output_tokens": {"p50": 130, "p95": 480, "max": 1000}},
    {"scene": "code", "tier": "P1", "peak_rps": 8, "input_tokens": {"p50": 1500, "p95": 5200, "max": 7500},
     "output_tokens": {"p50": 13, "p95": 120, "max": 250}},
]
SLOS = {"P0": {"ttft_s": 0.5, "tpot_s": 0.05, "objective": 0.95}, "P1": {"ttft_s": 1.0, "tpot_s": 0.075, "objective": 0.95}}
HEADROOM = {"failure_domains": 3, "tolerate": 1, "release_surge": 0.25, "cold_start_s": 180, "burst_factor": 1.5,
            "burst_rise_s": 600}
SIX = [
    {"name": "8b-h100", "model": "Llama-3.1-8B", "gpu": "H100-80GB-SXM", "tp": 1},
    {"name": "8b-a100", "model": "Llama-3.1-8B", "gpu": "A100-80GB", "tp": 1},
    {"name": "8b-l40s", "model": "Llama-3.1-8B", "gpu": "L40S-48GB", "tp": 1,
     "engine": {"max_num_seqs": 128, "max_model_len": 16384}},
    {"name": "7b-h100", "model": "Qwen2.5-7B", "gpu": "H100-80GB-SXM", "tp": 1},
    {"name": "32b-h100-tp2", "model": "Qwen2.5-32B", "gpu": "H100-80GB-SXM", "tp": 2},
    {"name": "70b-h200-tp4", "model": "Llama-3.1-70B", "gpu": "H200-141GB", "tp": 4},
]
# (2): long answers, so a day is ~10^6 requests rather than ~10^7
DAY_STREAMS = [
    {"scene": "chat", "tier": "P0", "peak_rps": 28, "input_tokens": {"p50": 700, "p95": 2600, "max": 6000},
     "output_tokens": {"p50": 400, "p95": 900, "max": 1200}},
]
DAY_CANDIDATE = {"name": "70b-h100-tp4", "model": "Llama-3.1-70B", "gpu": "H100-80GB-SXM", "tp": 4}


def _demand(streams, candidates):
    return parse_demand({"growth": 1.2, "slos": SLOS, "deployments": {
        "chat": {"streams": streams, "headroom": HEADROOM, "candidates": candidates}}}, "benchmark")


def _cpu() -> float:
    """CPU seconds of this process and its finished children: on a shared box the wall clock measures the
    neighbours as much as the work."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def plan_six(jobs: int) -> dict:
    demand = _demand(STREAMS, SIX)
    t0, c0 = time.perf_counter(), _cpu()
    plans = build_plan(demand, load_prices(), jobs=jobs)
    wall, cpu = time.perf_counter() - t0, _cpu() - c0
    rows = plan_dict(demand, plans)["deployments"]["chat"]["compared"]
    return {"jobs": jobs, "wall_s": round(wall, 2), "cpu_s": round(cpu, 2), "candidates": len(rows),
            "replicas": {r["name"]: r["replicas"] for r in rows}}


def diurnal_day(tmp: Path, duration_s: float) -> dict:
    import yaml

    demand = _demand(DAY_STREAMS, [DAY_CANDIDATE])
    plan_path = tmp / "plan.yaml"
    plan_path.write_text(yaml.safe_dump(plan_dict(demand, build_plan(demand, load_prices(), jobs=1))))
    d = load_plan_file(plan_path)[0]
    ours = derive(d, 180.0)
    out = {"desired_replicas": d.desired_replicas, "virtual_s": duration_s, "load_average": os.getloadavg()[0]}
    # what `goodput plan evaluate --jobs 1` does: four such days (static, policy, two baselines) in this process;
    # the CPU time at the end of each day splits the total per policy
    marks = []
    t0, c0 = time.perf_counter(), _cpu()
    r = evaluate([d], {d.name: ours}, "diurnal", duration_s=duration_s, jobs=1, progress=lambda _: marks.append(_cpu()))
    wall, cpu = time.perf_counter() - t0, _cpu() - c0
    out["evaluate_all_policies"] = {"wall_s": round(wall, 2), "cpu_s": round(cpu, 2),
                                  "speedup_x_cpu": round(duration_s * len(r["policies"]) / cpu)}
    for (label, v), start, end in zip(r["policies"].items(), [c0, *marks[:-1]], marks, strict=True):
        out[label] = {"cpu_s_incl_setup" if start == c0 else "cpu_s": round(end - start, 2),
                      "gpu_hours": v["gpu_hours"], "P0": v["attainment"]["P0"], "max_replicas": v["max_replicas"]}
    return out


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(prog="python -m benchmarks.plan", description=__doc__)
    p.add_argument("--day", type=float, default=86400.0, help="virtual seconds of the diurnal day (default 86400)")
    p.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = p.parse_args(argv if argv is not None else [])
    import tempfile
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    out = {"cores_available": len(cores)}
    if len(cores) >= 2:
        os.sched_setaffinity(0, set(cores[:2]))
    out["plan_6_candidates_2_processes"] = plan_six(2)
    if cores:
        os.sched_setaffinity(0, {cores[0]})
    out["plan_6_candidates_1_process"] = plan_six(1)
    with tempfile.TemporaryDirectory() as tmp:
        out["diurnal_day_16_replicas_1_core"] = diurnal_day(Path(tmp), args.day)
    return emit("goodput plan (knee searches on 2 cores; a simulated diurnal day with the autoscaler on one core)",
                out, args.json)


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
