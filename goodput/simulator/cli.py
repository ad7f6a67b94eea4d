"""``goodput simulate`` and ``goodput fleet serve``: thin faces over the simulator library."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from goodput.foundation.args import (
    http_url,
    non_negative_number,
    output_dir,
    port,
    positive_number,
    positive_number_at_most,
    seed,
)

__all__ = ["MAX_DURATION_S", "register"]

MAX_DURATION_S = 31 * 86400.0  # of one simulated run; its arrivals are bounded apart (config.MAX_REQUESTS)
LADDER_LINES = 12  # ladder changes the text summary lists; --format json has them all


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "simulate", help="run a fleet in virtual time and write its requests, spans and releases",
        description="Simulate FLEET.yaml in virtual time. Writes DIR/requests.parquet (one row per request), "
                    "DIR/spans.otlp.jsonl (OTLP JSON, one trace per request) and DIR/releases.yaml.",
    )
    p.add_argument("fleet", metavar="FLEET.yaml", help="fleet file (see examples/fleet.yaml)")
    p.add_argument("--duration", type=positive_number_at_most(MAX_DURATION_S, " s (31 days)"), required=True,
                   metavar="SECONDS", help="arrival window, seconds (at most 31 days)")
    p.add_argument("--out", type=output_dir, required=True, metavar="DIR", help="output directory (created)")
    p.add_argument("--seed", type=seed, default=None, help="random seed (default: the fleet file's seed)")
    p.add_argument("--drain", type=non_negative_number, default=600.0, metavar="SECONDS",
                   help="after the window, let in-flight requests finish for at most this long (default 600)")
    p.add_argument("--format", choices=("table", "json"), default="table", help="summary format")
    p.set_defaults(func=_simulate)

    fleet = sub.add_parser("fleet", help="the live simulated fleet", description="The live simulated fleet.")
    fsub = fleet.add_subparsers(dest="fleet_command", metavar="COMMAND")
    fsub.required = True
    s = fsub.add_parser(
        "serve", help="serve the fleet in real time (OpenAI API + vLLM /metrics per replica)",
        description="Run FLEET.yaml in real time: every replica is an HTTP server on HOST, from --base-port up, "
                    "serving the OpenAI completions and chat API (streaming and not), /v1/models, /health and "
                    "/metrics in vLLM V1's exposition. Stops cleanly on Ctrl-C or SIGTERM: no new requests, --drain "
                    "seconds for those in flight to finish, the rest aborted, every request's final spans exported.",
    )
    s.add_argument("fleet", metavar="FLEET.yaml")
    s.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    s.add_argument("--base-port", type=port, default=8100, help="first replica port (default 8100)")
    s.add_argument("--speed", type=positive_number, default=1.0, help="virtual seconds per wall second (default 1)")
    s.add_argument("--targets", type=Path, default=Path("targets.yaml"), metavar="FILE",
                   help="write the engine exporter's targets file here (default targets.yaml)")
    s.add_argument("--otlp-endpoint", type=http_url, default=None, metavar="URL",
                   help="POST request spans to this OTLP/HTTP traces endpoint (e.g. http://127.0.0.1:4318/v1/traces)")
    s.add_argument("--spans-file", type=Path, default=None, metavar="FILE", help="append request spans here (OTLP JSON lines)")
    s.add_argument("--span-format", choices=("goodput", "vllm", "both"), default="goodput",
                   help="request spans in goodput's shape (llm.request + segment spans), vLLM's (one llm_request "
                        "span with gen_ai.latency.*), or both (default goodput)")
    s.add_argument("--traffic", type=non_negative_number, default=1.0, metavar="FACTOR",
                   help="replay the fleet's own workloads at this rate factor (0 = only external requests; default 1)")
    s.add_argument("--seed", type=seed, default=None, help="random seed (default: the fleet file's seed)")
    s.add_argument("--duration", type=positive_number, default=None, metavar="SECONDS",
                   help="stop after this many wall seconds")
    s.add_argument("--drain", type=positive_number_at_most(600.0, " s"), default=10.0, metavar="SECONDS",
                   help="on Ctrl-C or SIGTERM, wall seconds the requests in flight get to finish before the rest are "
                        "aborted (default 10, at most 600)")
    s.add_argument("--admin-port", type=port, default=None, metavar="PORT",
                   help="serve the admin API (lose or add replicas) on HOST:PORT; without a token, loopback peers "
                        "only, same-origin JSON requests only (docs/simulator.md#admin-api)")
    s.add_argument("--admin-token", default=None, metavar="TOKEN",
                   help="require 'Authorization: Bearer TOKEN' on the admin API and answer any peer that sends it; "
                        "required when --host is not loopback (default: the GOODPUT_ADMIN_TOKEN environment variable)")
    s.set_defaults(func=_serve)


def _simulate(args: argparse.Namespace) -> int:
    from goodput.foundation.progress import progress_bar
    from goodput.simulator.compiled import build_status
    from goodput.simulator.config import check_request_budget, load_fleet
    from goodput.simulator.run import simulate, write_outputs

    cfg = load_fleet(args.fleet)
    check_request_budget(cfg, args.duration)
    with progress_bar("simulating", args.duration, unit="virtual s") as update:
        result = simulate(cfg, args.duration, args.seed, drain_s=args.drain, progress=update)
    paths = write_outputs(result, args.out)
    t = result.table
    outcomes: dict[str, int] = {}
    for o in t.outcome:
        outcomes[o] = outcomes.get(o, 0) + 1
    summary: dict[str, object] = {
        "fleet": cfg.name,
        "requests": t.n,
        "outcomes": outcomes,
        "virtual_seconds": round(result.fleet.now, 3),
        "wall_seconds": round(result.wall_s, 3),
        "speedup": round(result.speedup, 1),
        "engine": "compiled" if set(build_status().values()) == {"compiled"} else "python",
        "files": {k: str(v) for k, v in paths.items()},
    }
    gw = result.fleet.gateway
    gateway: dict[str, dict[str, int]] = {}  # the summary's "gateway" section, when the fleet has one
    if gw is not None:  # what the gateway decided, and why it refused
        gateway.update(admission=_counts(t.admission), reject_reasons=_counts(t.reject_reason))
        summary["gateway"] = gateway
        if gw.cfg.fallbacks:  # who stood in for whom, and why
            gateway["fallbacks"] = _counts([f"{f} -> {d} ({r})" if f else None for f, d, r in zip(
                t.decisions["fallback_from"], t.deployment, t.decisions["fallback_reason"], strict=True)])
        circuits = gw.circuits
        if circuits and args.format == "json":  # each primary's breaker timeline: [virtual s, state, why]
            summary["circuits"] = {name: [[round(at, 3), state, why] for at, state, why in c.log]
                                   for name, c in circuits.items()}
    ladder = gw.ladder if gw is not None else None
    changes: list[dict[str, object]] = []
    if ladder is not None:  # the overload ladder's steps in and out, and what it did to requests
        gateway.update(overload_steps=_counts(t.overload_step), degraded=_counts(t.degraded))
        changes = [{"t": round(c.t, 3), "deployment": c.deployment, "step": c.step, "on": c.on,
                    "signal": c.signal, "value": round(c.value, 4)} for c in ladder.log]
        summary["ladder"] = changes
    if args.format == "json":
        print(json.dumps(summary, indent=2))
    else:
        print(f"{t.n:,} requests in {result.fleet.now:,.0f} virtual s ({result.wall_s:.1f} s wall, {result.speedup:,.0f}x)"
              + ("" if summary["engine"] == "compiled" else " as pure Python (not compiled: docs/simulator.md#speed)"))
        print("outcomes: " + ", ".join(f"{k} {v:,}" for k, v in sorted(outcomes.items())))
        for k, v in gateway.items():
            print(f"gateway {k.replace('_', ' ')}: " + (", ".join(f"{x} {n:,}" for x, n in v.items()) or "none"))
        for c in changes[:LADDER_LINES]:
            print(f"  ladder {c['t']:10,.1f} s  {c['deployment']} {c['step']} {'on' if c['on'] else 'off'}"
                  f" ({c['signal']} {c['value']:g})")
        if len(changes) > LADDER_LINES:
            print(f"  ladder: {len(changes) - LADDER_LINES:,} more changes (--format json lists them all)")
        for k, path in paths.items():
            print(f"  {k:9s} {path}")
    return 0


def _counts(values: list) -> dict[str, int]:
    out: dict[str, int] = {}
    for v in values:
        if v is not None:
            out[v] = out.get(v, 0) + 1
    return dict(sorted(out.items()))


def _serve(args: argparse.Namespace) -> int:
    from goodput.simulator.admin_api import TOKEN_ENV
    from goodput.simulator.config import load_fleet
    from goodput.simulator.live import serve

    cfg = load_fleet(args.fleet)
    return serve(cfg, host=args.host, base_port=args.base_port, speed=args.speed, targets=args.targets,
                 otlp_endpoint=args.otlp_endpoint, spans_file=args.spans_file, traffic=args.traffic,
                 seed=args.seed, duration=args.duration, span_format=args.span_format, admin_port=args.admin_port,
                 drain_s=args.drain, admin_token=args.admin_token or os.environ.get(TOKEN_ENV) or None)
