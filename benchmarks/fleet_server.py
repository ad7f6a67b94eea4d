"""The live fleet's OpenAI server under 2,000 concurrent streams, beside the thread-per-connection server it replaced.

Each server runs a one-replica fleet (Llama-3.1-8B on an H100, no replayed traffic) in its own process;
an asyncio client on loopback opens ``--streams`` streaming chat completions at once (``max_tokens``
tokens each, ``ignore_eos``) and reads them to the end. Reported for each: streams completed, HTTP
statuses, connections refused or reset (must be 0 for the new server; the engine's own admission may
still answer 429/503), tokens streamed, and the fleet process's CPU seconds (all its threads) per
streamed token over the load.

The baseline is the old server, taken from git history (the last revision of ``goodput/simulator/openai_api.py``
built on ``http.server``, found across its renames, with ``live.py`` of the same commit) into a temporary directory,
its imports rewritten for today's package (``benchmarks/history.py``), and run in a subprocess over the current
engine; it is not part of the package.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import aiohttp
import httpx
import yaml

from benchmarks import history
from benchmarks.report import emit

REPO = Path(__file__).resolve().parents[1]
MODEL = "Llama-3.1-8B"
FLEET = {
    "name": "bench-fleet", "start_time": "2026-11-23T09:00:00Z", "seed": 1,
    "deployments": [{"name": "chat", "model": MODEL, "gpu": "H100-80GB-SXM", "replicas": 1,
                     "engine": {"max_num_seqs": 2048, "max_num_batched_tokens": 65536, "max_waiting_requests": 8192,
                                "max_model_len": 4096}}],
    "workloads": [{"name": "chat", "scene": "chat", "tier": "P0", "deployment": "chat", "tenants": {"a": 1.0},
                   "input_tokens": {"p50": 100, "p95": 200, "p99": 300}, "output_tokens": {"p50": 50, "p95": 90, "p99": 100},
                   "arrival": {"process": "poisson", "rate": 1.0}}],
}
# the old server over the current engine: its two modules (imports modernized) installed in place of today's
BASELINE_RUNNER = """
import sys
from pathlib import Path
from benchmarks.history import install
from goodput.simulator.config import load_fleet
src = Path(sys.argv[1])
for name in ("openai_api", "live"):
    install(f"goodput.simulator.{name}", (src / f"{name}.py").read_text(), str(src / f"{name}.py"))
sys.modules["goodput.simulator.live"].serve(load_fleet(sys.argv[2]), host="127.0.0.1", base_port=int(sys.argv[3]),
    speed=1.0, targets=None, otlp_endpoint=None, spans_file=None, traffic=0.0, seed=None, duration=None)
"""
NEW_RUNNER = """
import sys
from goodput.cli import main
sys.exit(main(["fleet", "serve", sys.argv[2], "--base-port", sys.argv[3], "--traffic", "0", "--targets", sys.argv[4]]))
"""


def baseline_sources(dest: Path) -> str:
    """Write the thread-per-connection ``openai_api.py`` and the ``live.py`` of its commit from git history into
    ``dest``, their imports rewritten for today's package (each loads the other's old version); returns the
    commit."""
    rev = history.last("goodput/simulator/openai_api.py", "ThreadingHTTPServer")
    pair = {"goodput.simulator.openai_api", "goodput.simulator.live"}
    for name in ("openai_api.py", "live.py"):
        (dest / name).write_text(history.modernize(rev.source(name), rev.commit, keep=pair))
    return rev.commit[:12]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop(proc: subprocess.Popen) -> None:
    """SIGTERM the fleet process, and kill it if it has not stopped within 20 s."""
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process, all its threads (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _one(session: aiohttp.ClientSession, url: str, i: int, max_tokens: int) -> tuple[str, int, float]:
    body = {"model": MODEL, "messages": [{"role": "user", "content": f"request {i} " * 20}], "max_tokens": max_tokens,
            "stream": True, "ignore_eos": True}
    t0 = time.monotonic()
    ttft, tokens = float("nan"), 0
    try:
        async with session.post(url, json=body) as r:
            if r.status != 200:
                await r.read()
                return f"http_{r.status}", 0, ttft
            async for line in r.content:
                if line.startswith(b"data: {"):
                    for c in json.loads(line[6:])["choices"]:
                        n = len(c["delta"].get("content", "").split())
                        if n and tokens == 0:
                            ttft = time.monotonic() - t0
                        tokens += n
        return "ok", tokens, ttft
    except aiohttp.ClientConnectorError:
        return "refused", tokens, ttft
    except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError, aiohttp.ClientPayloadError):
        return "reset", tokens, ttft
    except TimeoutError:
        return "timeout", tokens, ttft


async def _load(url: str, streams: int, max_tokens: int, timeout_s: float) -> list[tuple[str, int, float]]:
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=timeout_s)) as session:
        return await asyncio.gather(*(_one(session, url, i, max_tokens) for i in range(streams)))


def measure(runner: str, args: list[str], port: int, streams: int, max_tokens: int, timeout_s: float) -> dict:
    proc = subprocess.Popen([sys.executable, "-c", runner, *args], cwd=REPO, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"server did not start: {proc.stderr.read()[-2000:] if proc.stderr else ''}")
            time.sleep(0.2)
        time.sleep(1.0)
        cpu0, t0 = cpu_seconds(proc.pid), time.monotonic()
        results = asyncio.run(_load(f"http://127.0.0.1:{port}/v1/chat/completions", streams, max_tokens, timeout_s))
        cpu, wall = cpu_seconds(proc.pid) - cpu0, time.monotonic() - t0
    finally:
        stop(proc)
    outcomes = Counter(r[0] for r in results)
    tokens = sum(r[1] for r in results)
    ttfts = sorted(r[2] for r in results if r[2] == r[2])
    return {
        "streams": streams, "completed": sum(1 for r in results if r[0] == "ok" and r[1] == max_tokens),
        "outcomes": dict(outcomes), "refused_or_reset": outcomes["refused"] + outcomes["reset"],
        "tokens_streamed": tokens, "wall_s": round(wall, 2), "server_cpu_s": round(cpu, 2),
        "server_cpu_us_per_token": round(cpu / tokens * 1e6, 1) if tokens else None,
        "ttft_p50_s": round(ttfts[len(ttfts) // 2], 3) if ttfts else None,
        "ttft_p99_s": round(ttfts[int(len(ttfts) * 0.99)], 3) if ttfts else None,
    }


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(prog="python -m benchmarks.fleet_server", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--streams", type=int, default=2000, help="concurrent streaming requests (default 2000)")
    p.add_argument("--max-tokens", type=int, default=64, help="tokens per stream (default 64)")
    p.add_argument("--timeout", type=float, default=300.0, metavar="SECONDS", help="bound on each load run (default 300)")
    p.add_argument("--skip-baseline", action="store_true", help="measure only the current server")
    p.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = p.parse_args(argv if argv is not None else [])
    with tempfile.TemporaryDirectory() as tmp:
        fleet = Path(tmp) / "fleet.yaml"
        fleet.write_text(yaml.safe_dump(FLEET))
        port = free_port()
        out = {"aiohttp_event_loop": measure(NEW_RUNNER, [tmp, str(fleet), str(port), str(Path(tmp) / "targets.yaml")],
                                             port, args.streams, args.max_tokens, args.timeout)}
        if not args.skip_baseline:
            old = Path(tmp) / "old"
            old.mkdir()
            rev = baseline_sources(old)
            port = free_port()
            out[f"baseline_thread_per_connection@{rev}"] = measure(BASELINE_RUNNER, [str(old), str(fleet), str(port)],
                                                                   port, args.streams, args.max_tokens, args.timeout)
    return emit(f"fleet server: {args.streams} concurrent streams x {args.max_tokens} tokens, one replica", out, args.json)


if __name__ == "__main__":
    main(sys.argv[1:])
