"""Is the load-test client ever the bottleneck? Its schedule lag and CPU per streamed token, beside a bare reader.

A one-replica live fleet (``benchmarks.fleet_server``'s, no replayed traffic) runs in its own process. In this
process, two loads:

- **burst**: ``--streams`` requests all due at once (open loop), ``--burst-tokens`` tokens each: does one process
  hold them all in flight, and how late were they sent?
- **rate**: Poisson arrivals at ``--rate`` req/s for ``--duration`` s, ``--tokens`` tokens each: schedule lag
  p50/p99 and the client's CPU per streamed token (its event loop thread).

The baseline, in the same run against the same fleet: ``benchmarks.fleet_server``'s bare aiohttp reader (no
records, no schedule) opening the burst's streams at once, its CPU per streamed token measured the same way. The
fleet's own CPU is not counted in either: it is another process.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np
import yaml

from benchmarks.fleet_server import FLEET, MODEL, NEW_RUNNER, REPO, _load, free_port, stop
from benchmarks.report import emit
from capacity.loadtest.client import Client, ClientOptions
from capacity.loadtest.runner import run_plan
from capacity.loadtest.workload import RequestSpec


@dataclass(frozen=True)
class _Step:  # what the runner reads of a step
    index: int
    start_s: float
    end_s: float
    arrivals_s: np.ndarray
    concurrency: int | None = None


def _ours(url: str, arrivals: np.ndarray, end_s: float, tokens: int, max_in_flight: int) -> dict:
    spec = RequestSpec(100, tokens, "bench", "P1", "chat", 0)

    async def go():
        client = Client([url], ClientOptions(model=MODEL, timeout_s=300.0), max_in_flight)
        try:
            return await run_plan(client, [_Step(0, 0.0, end_s, arrivals)], lambda i: spec, max_in_flight=max_in_flight)
        finally:
            await client.aclose()

    res = asyncio.run(go())
    streamed = sum(r.output_tokens for r in res.records if not r.error)
    return {
        "requests": len(res.records), "completed": sum(1 for r in res.records if not r.error),
        "errors": dict(Counter(r.error for r in res.records if r.error)),
        "schedule_lag_p50_ms": round(res.client.schedule_lag_p50_s * 1e3, 2),
        "schedule_lag_p99_ms": round(res.client.schedule_lag_p99_s * 1e3, 2),
        "tokens_streamed": streamed, "wall_s": round(res.client.wall_s, 2), "client_cpu_s": round(res.client.cpu_s, 2),
        "client_cpu_us_per_token": round(res.client.cpu_s / streamed * 1e6, 1) if streamed else None,
        "valid": res.valid, "invalid_reasons": res.invalid_reasons,
    }


def _bare(url: str, streams: int, tokens: int) -> dict:
    cpu0, t0 = time.thread_time(), time.monotonic()
    results = asyncio.run(_load(url + "/v1/chat/completions", streams, tokens, 300.0))
    cpu, wall = time.thread_time() - cpu0, time.monotonic() - t0
    streamed = sum(r[1] for r in results)
    return {"requests": streams, "completed": sum(1 for r in results if r[0] == "ok" and r[1] == tokens),
            "tokens_streamed": streamed, "wall_s": round(wall, 2), "client_cpu_s": round(cpu, 2),
            "client_cpu_us_per_token": round(cpu / streamed * 1e6, 1) if streamed else None}


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(prog="python -m benchmarks.loadtest_client", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--streams", type=int, default=2000, help="requests due at once in the burst (default 2000)")
    p.add_argument("--burst-tokens", type=int, default=32, help="tokens per burst stream (default 32)")
    p.add_argument("--rate", type=float, default=500.0, help="Poisson arrivals per second (default 500)")
    p.add_argument("--tokens", type=int, default=128, help="tokens per request at the rate (default 128)")
    p.add_argument("--duration", type=float, default=10.0, metavar="SECONDS", help="length of the rate load (default 10)")
    p.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = p.parse_args(argv if argv is not None else [])
    with tempfile.TemporaryDirectory() as tmp:
        fleet = Path(tmp) / "fleet.yaml"
        fleet.write_text(yaml.safe_dump(FLEET))
        port = free_port()
        proc = subprocess.Popen([sys.executable, "-c", NEW_RUNNER, tmp, str(fleet), str(port), str(Path(tmp) / "t.yaml")],
                                cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    if httpx.get(url + "/health", timeout=1).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit("the fleet did not start")
                time.sleep(0.2)
            rng = np.random.default_rng(1)
            arrivals = np.cumsum(rng.exponential(1 / args.rate, int(args.rate * args.duration * 1.2)))
            arrivals = arrivals[arrivals < args.duration]
            out = {
                f"burst: goodput loadtest, {args.streams} due at once": _ours(
                    url, np.zeros(args.streams), 0.0, args.burst_tokens, max(args.streams, 1)),
                f"burst: bare aiohttp reader (baseline), {args.streams} at once": _bare(url, args.streams, args.burst_tokens),
                f"rate: goodput loadtest, Poisson {args.rate:g}/s x {args.tokens} tokens": _ours(
                    url, arrivals, args.duration, args.tokens, 4096),
            }
        finally:
            stop(proc)
    return emit("load-test client: schedule lag and CPU per streamed token (fleet in another process)", out, args.json)


if __name__ == "__main__":
    main(sys.argv[1:])
