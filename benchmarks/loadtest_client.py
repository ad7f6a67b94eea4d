"""Is the load-test client ever the bottleneck? Its schedule lag and CPU per streamed token, beside its old self.

A one-replica live fleet (``benchmarks.fleet_server``'s, ``goodput fleet serve``, no replayed traffic) runs in its
own process **on the same machine**: its CPU is measured too and reported beside the client's, since on a small box
the two compete for cores (``fleet_cpu_s``; the fleet costs about as much per streamed token as the client). Loads,
each run with the current client (aiohttp) and with the old one (httpx, taken from git history into a temporary
module, same runner) against the same fleet in the same run:

- **burst**: ``--streams`` requests all due at once (open loop), ``--burst-tokens`` tokens each: does one process
  hold them all in flight, and how late were they sent?
- **rate**: Poisson arrivals at each ``--rate`` req/s for ``--duration`` s, ``--tokens`` tokens each: schedule lag
  p50/p99 and the client's CPU per streamed token (its event loop thread).

``client_waited_for_cpu_s`` is how long the client's thread was ready to run but given no CPU (Linux schedstat): on
a shared machine that, not the client's own cost, is most of its schedule lag.

A third reader, ``benchmarks.fleet_server``'s bare aiohttp reader (no records, no schedule), opens the burst's
streams at once: the floor for any client in Python.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import tempfile
import time
import types
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np
import yaml

from benchmarks.fleet_server import FLEET, MODEL, NEW_RUNNER, REPO, _load, cpu_seconds, free_port, stop
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


def httpx_client() -> tuple[str, type]:
    """The last httpx revision of ``capacity/loadtest/client.py`` from git history, loaded as a module of its own;
    returns (its revision, its ``Client``)."""
    revs = subprocess.run(["git", "log", "--format=%H", "--", "capacity/loadtest/client.py"], cwd=REPO, check=True,
                          capture_output=True, text=True).stdout.split()
    for rev in revs:
        src = subprocess.run(["git", "show", f"{rev}:capacity/loadtest/client.py"], cwd=REPO, capture_output=True,
                             text=True).stdout
        if "httpx.AsyncClient" in src:
            mod = types.ModuleType("capacity.loadtest.client_httpx")
            sys.modules[mod.__name__] = mod  # dataclasses look their module up
            exec(compile(src, f"{rev[:12]}:capacity/loadtest/client.py", "exec"), mod.__dict__)
            return rev[:12], mod.Client
    raise SystemExit("no httpx revision of capacity/loadtest/client.py in this repository's history")


def _measure(client_cls: type, url: str, fleet_pid: int, arrivals: np.ndarray, end_s: float, tokens: int,
             max_in_flight: int) -> dict:
    spec = RequestSpec(100, tokens, "bench", "P1", "chat", 0)

    async def go():
        client = client_cls([url], ClientOptions(model=MODEL, timeout_s=300.0), max_in_flight)
        try:
            return await run_plan(client, [_Step(0, 0.0, end_s, arrivals)], lambda i: spec, max_in_flight=max_in_flight)
        finally:
            await client.aclose()

    fleet0 = cpu_seconds(fleet_pid)
    res = asyncio.run(go())
    fleet_cpu = cpu_seconds(fleet_pid) - fleet0
    streamed = sum(r.output_tokens for r in res.records if not r.error)
    return {
        "requests": len(res.records), "completed": sum(1 for r in res.records if not r.error),
        "errors": dict(Counter(r.error for r in res.records if r.error)),
        "schedule_lag_p50_ms": round(res.client.schedule_lag_p50_s * 1e3, 2),
        "schedule_lag_p99_ms": round(res.client.schedule_lag_p99_s * 1e3, 2),
        "tokens_streamed": streamed, "wall_s": round(res.client.wall_s, 2), "client_cpu_s": round(res.client.cpu_s, 2),
        "client_cpu_us_per_token": round(res.client.cpu_s / streamed * 1e6, 1) if streamed else None,
        "client_waited_for_cpu_s": None if res.client.cpu_wait_s is None else round(res.client.cpu_wait_s, 2),
        "fleet_cpu_s": round(fleet_cpu, 2),
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


def wait_healthy(url: str, proc: subprocess.Popen) -> None:
    """Until the fleet at ``url`` answers /health (it is ``proc``); SystemExit if it dies or takes over 60 s."""
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit("the fleet did not start")
        time.sleep(0.2)


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(prog="python -m benchmarks.loadtest_client", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--streams", type=int, default=2000, help="requests due at once in the burst (default 2000)")
    p.add_argument("--burst-tokens", type=int, default=32, help="tokens per burst stream (default 32)")
    p.add_argument("--rate", type=float, action="append", default=None,
                   help="Poisson arrivals per second; repeat for several (default 200 and 500)")
    p.add_argument("--tokens", type=int, default=128, help="tokens per request at the rate (default 128)")
    p.add_argument("--duration", type=float, default=10.0, metavar="SECONDS", help="length of each rate load (default 10)")
    p.add_argument("--skip-baseline", action="store_true", help="measure only the current client")
    p.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = p.parse_args(argv if argv is not None else [])
    rates = args.rate or [200.0, 500.0]
    clients = {"aiohttp (current)": Client}
    if not args.skip_baseline:
        rev, old = httpx_client()
        clients[f"httpx (baseline, {rev})"] = old
    out: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        fleet = Path(tmp) / "fleet.yaml"
        fleet.write_text(yaml.safe_dump(FLEET))
        port = free_port()
        proc = subprocess.Popen([sys.executable, "-c", NEW_RUNNER, tmp, str(fleet), str(port), str(Path(tmp) / "t.yaml")],
                                cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        url = f"http://127.0.0.1:{port}"
        try:
            wait_healthy(url, proc)
            for name, cls in clients.items():
                out[f"burst: {name}, {args.streams} due at once x {args.burst_tokens} tokens"] = _measure(
                    cls, url, proc.pid, np.zeros(args.streams), 0.0, args.burst_tokens, max(args.streams, 1))
            out[f"burst: bare aiohttp reader (floor), {args.streams} at once"] = _bare(url, args.streams,
                                                                                      args.burst_tokens)
            for rate in rates:
                arrivals = np.cumsum(np.random.default_rng(1).exponential(1 / rate, int(rate * args.duration * 1.2)))
                arrivals = arrivals[arrivals < args.duration]
                for name, cls in clients.items():
                    out[f"rate: {name}, Poisson {rate:g}/s x {args.tokens} tokens"] = _measure(
                        cls, url, proc.pid, arrivals, args.duration, args.tokens, 4096)
        finally:
            stop(proc)
    return emit("load-test client: schedule lag and CPU per streamed token (fleet in another process, same machine)",
                out, args.json)


if __name__ == "__main__":
    main(sys.argv[1:])
