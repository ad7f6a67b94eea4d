"""``goodput loadtest run --pattern sweep`` against one live simulated replica, beside the offline simulator's answer.

The offline simulator (``goodput.simulator.run.simulate``, what ``goodput simulate`` runs) gives the replica's saturation rate:
offered four times what it can serve, the rate at which it completes requests over 60 s. The live sweep runs against
the same replica (``goodput fleet serve`` in its own process, no traffic of its own) with the same fleet-file workload
and a TTFT SLO that only queueing breaks. Goal: the knee in at most 8 steps, within 10% of the saturation rate.

Not a CI test: near saturation a step's TTFT p95 swings with its Poisson draws, so the steps must be long (40 s of
the replica's time, 10 s of it settling) for the knee to sit within a few percent of saturation: 5-8 minutes at
``--speed 1``. A faster replica clock (``--speed 4``: rates four times higher, times a quarter) needs the CPU to
keep the simulated replica on time; on a loaded 2-core machine it falls behind and serves less than offline.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml

from benchmarks.fleet_server import REPO, free_port, stop
from benchmarks.loadtest_client import wait_healthy
from benchmarks.report import emit
from goodput.cli import main as goodput
from goodput.simulator.config import parse_fleet
from goodput.simulator.run import simulate

# eight sequences at a time: the replica saturates near 22 req/s; lengths barely vary, so its capacity is one number
FLEET = {
    "name": "sweep-fleet", "start_time": "2026-11-23T09:00:00Z", "seed": 3,
    "deployments": [{"name": "chat", "model": "Llama-3.1-8B", "gpu": "H100-80GB-SXM", "tp": 1, "replicas": 1,
                     "router": "least-outstanding",
                     "engine": {"max_num_seqs": 8, "max_num_batched_tokens": 4096, "prefill_chunk_tokens": 2048,
                                "max_queue_time_s": 600}}],
    "workloads": [{"name": "chat", "scene": "chat", "tier": "P0", "deployment": "chat", "tenants": {"acme": 1.0},
                   "input_tokens": {"p50": 200, "p95": 220, "p99": 230, "max": 240},
                   "output_tokens": {"p50": 64, "p95": 68, "p99": 70, "max": 72},
                   "arrival": {"process": "poisson", "rate": 1.0}}],
}
SERVE = """
import sys
from goodput.cli import main
sys.exit(main(["fleet", "serve", sys.argv[1], "--base-port", sys.argv[2], "--traffic", "0", "--targets", sys.argv[3],
               "--speed", sys.argv[4]]))
"""


def offline_saturation(data: dict, seed: int = 1) -> float:
    """Requests per second the replica completes offline when offered four times what it serves (80 req/s), over
    60 s of a 70 s run after its first 10 s."""
    wl = dict(data["workloads"][0], arrival={"process": "poisson", "rate": 80.0})
    result = simulate(parse_fleet(dict(data, workloads=[wl]), "sweep-fleet.yaml"), 70.0, seed=seed, drain_s=0.0)
    done = np.array([r.completed for r in result.fleet.done if r.finish_reason in ("stop", "length")])
    return float(((done >= 10.0) & (done < 70.0)).sum() / 60.0)


def live_sweep(fleet_file: Path, tmp: Path, speed: float, step_s: float, settle_s: float, ttft_s: float,
               start: float) -> dict:
    """The live sweep's summary.json; step rates and times are the replica's (divided by ``speed``)."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-c", SERVE, str(fleet_file), str(port), str(tmp / "t.yaml"), str(speed)],
                            cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_healthy(f"http://127.0.0.1:{port}", proc)
        with contextlib.redirect_stdout(io.StringIO()):
            code = goodput(["loadtest", "run", "--target", f"http://127.0.0.1:{port}", "--workload",
                            f"{fleet_file}:chat", "--pattern", "sweep", "--rate", str(start * speed),
                            "--step-s", str(step_s / speed), "--settle", str(settle_s / speed),
                            "--slo", f"ttft_p95={ttft_s / speed}s", "--server-metrics", "none",
                            "--out", str(tmp / "run"), "--format", "json"])
    finally:
        stop(proc)
    if code != 0:
        raise SystemExit(f"goodput loadtest run exited {code}")
    return json.loads((tmp / "run" / "summary.json").read_text())


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(prog="python -m benchmarks.loadtest_sweep", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--speed", type=float, default=1.0, help="the live replica's virtual seconds per wall second")
    p.add_argument("--step-s", type=float, default=40.0, help="each sweep step, replica seconds (default 40)")
    p.add_argument("--settle", type=float, default=10.0, help="settling part of each step, replica seconds")
    p.add_argument("--ttft", type=float, default=2.0, help="the SLO's TTFT p95, replica seconds (default 2)")
    p.add_argument("--start", type=float, default=8.0, help="the sweep's first rate, replica req/s (default 8)")
    p.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = p.parse_args(argv if argv is not None else [])
    with tempfile.TemporaryDirectory() as tmp:
        fleet_file = Path(tmp) / "fleet.yaml"
        fleet_file.write_text(yaml.safe_dump(FLEET))
        saturation = offline_saturation(FLEET)
        t0 = time.monotonic()
        summary = live_sweep(fleet_file, Path(tmp), args.speed, args.step_s, args.settle, args.ttft, args.start)
        wall = time.monotonic() - t0
    steps = [{"rate": round(s["offered_rate"] / args.speed, 2), "slo_met": s["slo_met"],
              "ttft_p95_s": None if s["ttft_s"]["p95"] is None else round(s["ttft_s"]["p95"] * args.speed, 3)}
             for s in summary["steps"]]
    knee = summary["knee"]["offered_rate"] / args.speed if summary["knee"] else None
    out = {"offline_saturation_req_s": round(saturation, 2), "live_knee_req_s": knee, "steps": steps,
           "steps_taken": len(steps), "knee_vs_saturation": None if knee is None else round(knee / saturation - 1, 3),
           "goal_met": knee is not None and len(steps) <= 8 and abs(knee / saturation - 1) <= 0.1,
           "client": summary["client"], "valid": summary["valid"], "wall_s": round(wall, 1)}
    return emit(f"sweep vs the offline simulator: one replica, {args.step_s:g} s steps at speed {args.speed:g}",
                out, args.json)


if __name__ == "__main__":
    main(sys.argv[1:])
