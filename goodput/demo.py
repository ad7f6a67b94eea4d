"""``goodput demo``: the whole stack on the embedded default, the simulated fleet of examples/fleet.yaml."""

from __future__ import annotations

import argparse
from pathlib import Path

from simulator.config import load_fleet
from simulator.live import serve

__all__ = ["register"]

DEFAULT_FLEET = Path("examples/fleet.yaml")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="run the stack on the simulated fleet until Ctrl-C",
                       description="Start the simulated fleet of examples/fleet.yaml (OpenAI API and vLLM /metrics "
                                   "per replica, request spans to DIR/spans.otlp.jsonl), print its endpoints, and "
                                   "run until Ctrl-C or SIGTERM.")
    p.add_argument("--fleet", type=Path, default=DEFAULT_FLEET, help="fleet file (default examples/fleet.yaml)")
    p.add_argument("--out", type=Path, default=Path("demo-out"), metavar="DIR",
                   help="where the demo keeps its files (default demo-out/)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--base-port", type=int, default=8100)
    p.add_argument("--speed", type=float, default=1.0, help="virtual seconds per wall second")
    p.add_argument("--duration", type=float, default=None, metavar="SECONDS", help="stop after this long")
    p.set_defaults(func=_demo)


def _demo(args: argparse.Namespace) -> int:
    cfg = load_fleet(args.fleet)
    args.out.mkdir(parents=True, exist_ok=True)
    return serve(cfg, host=args.host, base_port=args.base_port, speed=args.speed, targets=args.out / "targets.yaml",
                 otlp_endpoint=None, spans_file=args.out / "spans.otlp.jsonl", traffic=1.0, seed=None,
                 duration=args.duration)
