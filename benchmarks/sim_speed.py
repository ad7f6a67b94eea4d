"""Simulator speed: one 16-replica Llama-3.1-8B / H100 deployment fed the Azure conv trace at ~80% of capacity.

Capacity is measured, not assumed: the deployment is first saturated (the trace replayed far faster
than it can serve) and its completion rate in steady state is its capacity. The trace is then
compressed to 80% of that rate. The simulator runs on one core, compiled (as installed) and as pure
Python (the same source copied without its build, in a child process). The baseline is the same
model stepping every engine iteration as its own event (closed-form decode runs off), which the
tests show produces the same timeline. Each figure is the best of three runs (five for the headline),
with the median beside it: a shared machine's speed drifts by up to 1.8x from one second to the next.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.report import emit
from goodput.simulator.compiled import build_status, source_copy
from goodput.simulator.config import parse_fleet
from goodput.simulator.fleet import Fleet
from goodput.simulator.workload import generate

ROOT = Path(__file__).resolve().parents[1]
TRACE = ROOT / "examples" / "traces" / "azure_llm_inference_2023_conv.csv"
TRACE_RATE = 19_366 / 3501.7  # requests per second of the original trace


def fleet_config(time_scale: float):
    return parse_fleet({
        "name": "bench-16x8b", "seed": 1,
        "deployments": [{"name": "chat-8b-h100", "model": "Llama-3.1-8B", "gpu": "H100-80GB-SXM", "tp": 1,
                         "replicas": 16, "router": "least-outstanding",
                         "engine": {"max_num_seqs": 256, "max_num_batched_tokens": 8192,
                                    "prefill_chunk_tokens": 2048, "max_model_len": 32768,
                                    "max_waiting_requests": 100_000, "max_queue_time_s": 100_000}}],
        "workloads": [{"name": "azure-conv", "scene": "chat", "tier": "P0", "deployment": "chat-8b-h100",
                       "tenants": {"t": 1.0}, "max_tokens": 100_000,
                       "trace": {"path": str(TRACE), "format": "azure", "time_scale": time_scale}}],
    }, "bench")


def run(time_scale: float, duration: float, max_run_steps: int = 1 << 60, warmup: float = 60.0) -> dict:
    """Wall time of the steady state: the fleet is filled for ``warmup`` seconds (untimed), then ``duration``
    seconds of arrivals are timed. The drain after the last arrival is not part of any figure."""
    cfg = fleet_config(time_scale)
    arrivals = generate(cfg, warmup + duration, 1)
    fleet = Fleet(cfg, arrivals, max_run_steps=max_run_steps)
    fleet.run(warmup)
    t0 = time.perf_counter()
    fleet.run(warmup + duration)
    wall = time.perf_counter() - t0
    timed = int(((arrivals.queue_start >= warmup) & (arrivals.queue_start < warmup + duration)).sum())
    return {"requests": timed, "virtual_s": duration, "wall_s": wall, "done": fleet.done}


def capacity(probe_s: float = 60.0) -> float:
    """Completions per second of the saturated deployment, counted between 20 s and the end of the probe."""
    r = run(time_scale=200.0, duration=probe_s - 20.0, warmup=20.0)
    done = [q for q in r["done"] if q.completed >= 20.0]
    return len(done) / (probe_s - 20.0)


def best_of(scale: float, duration: float, max_run_steps: int = 1 << 60, repeats: int = 3) -> dict:
    # keep only the figures: a finished fleet left alive would slow the next run's garbage collections
    runs = [{k: v for k, v in run(scale, duration, max_run_steps).items() if k != "done"} for _ in range(repeats)]
    best = min(runs, key=lambda r: r["wall_s"])
    return {"virtual_s": round(duration, 1), "wall_s": round(best["wall_s"], 3),
            "speedup_x": round(duration / best["wall_s"], 1), "requests": best["requests"],
            "requests_per_wall_s": round(best["requests"] / best["wall_s"]),
            "median_speedup_x": round(duration / sorted(r["wall_s"] for r in runs)[len(runs) // 2], 1)}


def pure_python(scale: float, duration: float, max_run_steps: int = 1 << 60) -> dict:
    """``best_of`` in a child process that imports the simulator's source, not its build."""
    with tempfile.TemporaryDirectory() as tmp:
        source_copy(Path(tmp))
        code = ("import json, sys; from benchmarks.sim_speed import best_of; "
                "from goodput.simulator.compiled import build_status; "
                f"assert set(build_status().values()) == {{'python'}}; print(json.dumps(best_of({scale!r}, {duration!r}, "
                f"{max_run_steps!r})))")
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([tmp, str(ROOT)])}
        out = subprocess.run([sys.executable, "-c", code], env=env, cwd=tmp, check=True, capture_output=True, text=True)
        return json.loads(out.stdout)


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(prog="python -m benchmarks.sim_speed", description=__doc__)
    p.add_argument("--duration", type=float, default=540.0, help="timed virtual seconds after a 60 s warm-up (default 540)")
    p.add_argument("--baseline-duration", type=float, default=120.0, help="timed virtual seconds for the baselines")
    p.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = p.parse_args(argv if argv is not None else [])
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one core, inherited by the child process
    cap = capacity()
    scale = 0.8 * cap / TRACE_RATE
    short, one_step = args.baseline_duration, 1
    out = {
        "capacity_req_s": round(cap, 1),
        "offered_req_s": round(0.8 * cap, 1),
        "trace_time_scale": round(scale, 2),
        "build": sorted(set(build_status().values())),
        "compiled_closed_form": best_of(scale, args.duration, repeats=5),
        "compiled_closed_form_short_window": best_of(scale, short),
        "compiled_step_by_step_short_window": best_of(scale, short, one_step),
        "python_closed_form_short_window": pure_python(scale, short),
        "python_step_by_step_short_window": pure_python(scale, short, one_step),
        # where decode runs are long (few arrivals per step), the closed form is what pays
        "compiled_closed_form_20pct_load": best_of(scale / 4, short),
        "compiled_step_by_step_20pct_load": best_of(scale / 4, short, one_step),
    }
    title = "simulator speed (16 x Llama-3.1-8B / H100, Azure conv trace at 80% of measured capacity, one core)"
    return emit(title, out, args.json)


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
