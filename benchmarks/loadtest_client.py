"""Is the load-test client ever the bottleneck? Its schedule lag and CPU per streamed token, in one process and
sharded over worker processes (``--workers``), side by side against the same target in one run.

Targets (``--target``; each figure names the one it used), each in its own process **on the same machine**:

- ``stub`` (default): ``benchmarks.stub_target``, a minimal OpenAI-compatible streaming server (raw asyncio,
  pre-encoded SSE chunks, one timer emitting every stream's next token each ``--itl-ms``): cheap, so the client is
  what is measured.
- ``fleet``: a one-replica live fleet (``benchmarks.fleet_server``'s, ``goodput fleet serve``, no replayed traffic),
  which costs about 30 µs per streamed token itself: on a small box it competes with the client for the cores.

The target's CPU is reported beside the client's (``target_cpu_s``). Client configurations: ``--workers 1`` (the
single-process client, the baseline: the runner on this process's event loop, as ``goodput loadtest run --workers
1`` runs it) and each other ``--workers`` value (``auto`` resolves by ``workers.auto_workers``). Loads, each run with
every configuration:

- **burst**: ``--streams`` requests all due at once (open loop), ``--burst-tokens`` tokens each: are they all held
  in flight, and how late were they sent?
- **rate**: Poisson arrivals at each ``--rate`` req/s for ``--duration`` s, ``--tokens`` tokens each: schedule lag
  p50/p99 over every request, the client's CPU per streamed token (its event loops' threads, all workers summed).

``client_waited_for_cpu_s`` is how long the client's threads were ready to run but given no CPU (Linux schedstat,
summed over workers): on a shared machine that, not the client's own cost, is most of its schedule lag. ``--httpx``
adds the previous client (httpx, taken from git history) at one worker; a bare aiohttp reader (no records, no
schedule) opens the burst's streams at once: the floor for any client in one Python process.
"""

from __future__ import annotations

import argparse
import asyncio
import os
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

from benchmarks import history, stub_target
from benchmarks.fleet_server import FLEET, MODEL, NEW_RUNNER, REPO, _load, cpu_seconds, free_port, stop
from benchmarks.report import emit
from goodput.loadtest.client import Client, ClientOptions
from goodput.loadtest.runner import RunResult, run_plan
from goodput.loadtest.workers import auto_workers, run_workers
from goodput.loadtest.workload import RequestSpec


@dataclass(frozen=True)
class _Step:  # what the runner reads of a step
    index: int
    start_s: float
    end_s: float
    arrivals_s: np.ndarray
    concurrency: int | None = None


@dataclass(frozen=True)
class Same:
    """Every request the same spec; a module-level callable, so a spawned worker can unpickle it."""

    spec: RequestSpec

    def __call__(self, _i: int) -> RequestSpec:
        return self.spec


def httpx_client() -> tuple[str, type]:
    """The last httpx revision of ``goodput/loadtest/client.py`` from git history (across its renames), its imports
    rewritten for today's package, loaded as a module of its own; returns (its commit, its ``Client``)."""
    rev = history.last("goodput/loadtest/client.py", "httpx.AsyncClient")
    source = history.modernize(rev.source(), rev.commit)
    module = history.install("goodput.loadtest.client_httpx", source, f"{rev.commit[:12]}:{rev.path}")

    class Before(module.Client):
        def start_clock(self, origin: float | None = None) -> None:
            """Today's runner passes the workers' shared time 0, which the old client predates; in one process, as
            this benchmark runs it, that is None: the run starts now."""
            assert origin is None, "the httpx client runs at --workers 1 only"
            super().start_clock()

    return rev.commit[:12], Before


def _measure(client_cls: type, workers: int, url: str, model: str, target_pid: int, arrivals: np.ndarray,
             end_s: float, tokens: int, max_in_flight: int) -> dict:
    specs = Same(RequestSpec(100, tokens, "bench", "P1", "chat", 0))
    steps = [_Step(0, 0.0, end_s, arrivals)]
    opts = ClientOptions(model=model, timeout_s=300.0)

    async def go() -> RunResult:
        if workers > 1:
            return await run_workers([url], opts, steps, specs, workers=workers, max_in_flight=max_in_flight)
        client = client_cls([url], opts, max_in_flight)
        try:
            return await run_plan(client, steps, specs, max_in_flight=max_in_flight)
        finally:
            await client.aclose()

    target0, t0 = cpu_seconds(target_pid), time.monotonic()
    res = asyncio.run(go())
    wall, target_cpu = time.monotonic() - t0, cpu_seconds(target_pid) - target0
    streamed = sum(r.output_tokens for r in res.records if not r.error)
    errors = Counter(r.error for r in res.records if r.error)
    return {
        "workers": workers, "requests": len(res.records), "completed": sum(1 for r in res.records if not r.error),
        "refused": errors["http_429"] + errors["http_5xx"] + errors["connect"], "errors": dict(errors),
        "schedule_lag_p50_ms": round(res.client.schedule_lag_p50_s * 1e3, 2),
        "schedule_lag_p99_ms": round(res.client.schedule_lag_p99_s * 1e3, 2),
        "tokens_streamed": streamed, "run_wall_s": round(res.client.wall_s, 2),
        "wall_with_start_s": round(wall, 2),  # with the workers' start-up (spawn, imports) and exit
        "client_cpu_s": round(res.client.cpu_s, 2),
        "client_cpu_us_per_token": round(res.client.cpu_s / streamed * 1e6, 1) if streamed else None,
        "busiest_worker_cpu_s": round(res.client.busiest_cpu_s or res.client.cpu_s, 2),
        "client_waited_for_cpu_s": None if res.client.cpu_wait_s is None else round(res.client.cpu_wait_s, 2),
        "target_cpu_s": round(target_cpu, 2),
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


def _start_target(kind: str, tmp: Path, itl_ms: float) -> tuple[subprocess.Popen, str, str]:
    """The target in a process of its own: (the process, its URL, the model it serves)."""
    port = free_port()
    if kind == "stub":
        proc, model = stub_target.start(port, itl_ms), stub_target.MODEL
    else:
        fleet = tmp / "fleet.yaml"
        fleet.write_text(yaml.safe_dump(FLEET))
        cmd = [sys.executable, "-c", NEW_RUNNER, str(tmp), str(fleet), str(port), str(tmp / "t.yaml")]
        proc, model = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL), MODEL
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc)
    except SystemExit:
        stop(proc)
        raise
    return proc, url, model


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(prog="python -m benchmarks.loadtest_client", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--target", choices=("stub", "fleet", "both"), default="stub",
                   help="stub: benchmarks.stub_target (cheap); fleet: the live simulated fleet (default stub)")
    p.add_argument("--itl-ms", type=float, default=10.0, help="the stub's gap between tokens (default 10)")
    p.add_argument("--workers", action="append", default=None, metavar="auto|N",
                   help="client configurations; repeat (default 1, auto, 2, 4; 1 is the single-process baseline)")
    p.add_argument("--streams", type=int, default=2000, help="requests due at once in the burst (default 2000)")
    p.add_argument("--burst-tokens", type=int, default=32, help="tokens per burst stream (default 32)")
    p.add_argument("--rate", type=float, action="append", default=None,
                   help="Poisson arrivals per second; repeat for several (default 500)")
    p.add_argument("--tokens", type=int, default=128, help="tokens per request at the rate (default 128)")
    p.add_argument("--duration", type=float, default=10.0, metavar="SECONDS", help="length of each rate load (default 10)")
    p.add_argument("--httpx", action="store_true", help="also the previous client (httpx), at one worker")
    p.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = p.parse_args(argv if argv is not None else [])
    rates = args.rate or [500.0]
    targets = ["stub", "fleet"] if args.target == "both" else [args.target]
    configs = args.workers or ["1", "auto", "2", "4"]
    clients: list[tuple[str, type, str]] = [(f"aiohttp, --workers {w}", Client, w) for w in configs]
    if args.httpx:
        rev, old = httpx_client()
        clients.append((f"httpx (before, {rev}), --workers 1", old, "1"))
    load = os.getloadavg()
    out: dict = {"machine": {"cpus": os.cpu_count(), "load_average_at_start": [round(x, 2) for x in load]}}
    burst = np.zeros(args.streams)
    for kind in targets:
        with tempfile.TemporaryDirectory() as tmp:
            proc, url, model = _start_target(kind, Path(tmp), args.itl_ms)
            try:
                for name, cls, w in clients:
                    n = auto_workers([_Step(0, 0.0, 0.0, burst)], Same(RequestSpec(100, args.burst_tokens, "b", "P1",
                                                                                   "chat", 0))) if w == "auto" else int(w)
                    out[f"{kind} target | burst {args.streams} at once x {args.burst_tokens} tokens | {name}"] = \
                        _measure(cls, n, url, model, proc.pid, burst, 0.0, args.burst_tokens, max(args.streams, 1))
                out[f"{kind} target | burst {args.streams} at once | bare aiohttp reader (floor)"] = _bare(
                    url, args.streams, args.burst_tokens)
                for rate in rates:
                    arrivals = np.cumsum(np.random.default_rng(1).exponential(1 / rate, int(rate * args.duration * 1.2)))
                    arrivals = arrivals[arrivals < args.duration]
                    for name, cls, w in clients:
                        n = auto_workers([_Step(0, 0.0, args.duration, arrivals)],
                                         Same(RequestSpec(100, args.tokens, "b", "P1", "chat", 0))) if w == "auto" \
                            else int(w)
                        out[f"{kind} target | Poisson {rate:g}/s x {args.tokens} tokens | {name}"] = _measure(
                            cls, n, url, model, proc.pid, arrivals, args.duration, args.tokens, 4096)
            finally:
                stop(proc)
    return emit("load-test client: schedule lag and CPU per streamed token, one process vs workers "
                "(target in another process, same machine)", out, args.json)


if __name__ == "__main__":
    main(sys.argv[1:])
