"""``goodput demo``: the whole stack on the embedded default, the simulated fleet of examples/fleet.yaml.

One process runs the live fleet, the three exporters (GPU on fake GPUs that follow the fleet's load,
engine scraping every replica, requests receiving the fleet's spans over OTLP/HTTP) and prints where
everything is. Ctrl-C or SIGTERM stops it, flushing the trace store.
"""

from __future__ import annotations

import argparse
import threading
import time
from pathlib import Path

from exporters.config import load_targets
from exporters.engine import EngineExporter
from exporters.exposition import CONTENT_TYPE
from exporters.fleet_gpus import fleet_gpus
from exporters.gpu import GpuCollector, Sampler
from exporters.http import Server
from exporters.requests import OTLP_MAX_BODY_BYTES, RequestMetrics, TraceReceiver
from exporters.trace_store import TraceStore
from simulator.config import load_fleet
from simulator.live import LiveFleet
from simulator.span_sink import SpanSink

__all__ = ["Demo", "register"]

DEFAULT_FLEET = Path("examples/fleet.yaml")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="run the stack on the simulated fleet until Ctrl-C",
                       description="Start the simulated fleet of examples/fleet.yaml (OpenAI API and vLLM /metrics per "
                                   "replica) with the GPU, engine and request exporters, print every endpoint, and run "
                                   "until Ctrl-C or SIGTERM.")
    p.add_argument("--fleet", type=Path, default=DEFAULT_FLEET, help="fleet file (default examples/fleet.yaml)")
    p.add_argument("--out", type=Path, default=Path("demo-out"), metavar="DIR",
                   help="where the demo keeps its files: targets, trace store (default demo-out/)")
    p.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    p.add_argument("--base-port", type=int, default=8100, help="first replica port (default 8100)")
    p.add_argument("--gpu-port", type=int, default=9400)
    p.add_argument("--engine-port", type=int, default=9401)
    p.add_argument("--requests-port", type=int, default=9402)
    p.add_argument("--otlp-port", type=int, default=4318)
    p.add_argument("--speed", type=float, default=1.0, help="virtual seconds per wall second (default 1)")
    p.add_argument("--duration", type=float, default=None, metavar="SECONDS", help="stop after this long")
    p.set_defaults(func=_demo)


def _routes(render) -> dict:
    return {("GET", "/metrics"): lambda h, b: (200, CONTENT_TYPE, render().encode(), {}),
            ("GET", "/healthz"): lambda h, b: (200, "text/plain", b"ok\n", {})}


class Demo:
    """Everything ``make demo`` runs, startable and stoppable from tests."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        cfg = load_fleet(args.fleet)
        out = args.out
        out.mkdir(parents=True, exist_ok=True)
        host = args.host
        self.metrics = RequestMetrics()
        self.store = TraceStore(out / "traces", flush_interval_s=2.0)
        recv = TraceReceiver(self.metrics, self.store)
        self.otlp = Server(host, args.otlp_port, {
            ("POST", "/v1/traces"): lambda h, b: recv.handle(h.headers.get("Content-Type", ""),
                                                             (h.headers.get("Content-Encoding") or "").lower(), b),
            ("GET", "/healthz"): lambda h, b: (200, "text/plain", b"ok\n", {})}, max_body_bytes=OTLP_MAX_BODY_BYTES)
        self.req_srv = Server(host, args.requests_port, _routes(lambda: self.metrics.render(self.store)))
        self.sink = SpanSink(cfg, cfg.seed, f"http://{host}:{args.otlp_port}/v1/traces", None, interval_s=1.0)
        self.targets_path = out / "targets.yaml"
        self.live = LiveFleet(cfg, host=host, base_port=args.base_port, speed=args.speed, targets=self.targets_path,
                              sink=self.sink)
        nvml, mapping = fleet_gpus(self.live)
        self.gpu = GpuCollector(nvml, mapping, hostname="goodput-demo")
        self.gpu_srv = Server(host, args.gpu_port, _routes(self.gpu.render))
        self.engine: EngineExporter | None = None
        self.eng_srv = Server(host, args.engine_port, _routes(lambda: self.engine.render() if self.engine else ""))
        self.sampler: Sampler | None = None
        self._watch = threading.Event()

    def start(self) -> Demo:
        self.store.start()
        for s in (self.otlp, self.req_srv, self.gpu_srv, self.eng_srv):
            s.start()
        self.live.start()
        self.engine = EngineExporter(load_targets(self.targets_path), interval_s=2.0)
        self.engine.start()
        self.gpu.init()
        self.sampler = Sampler(self.gpu, 2.0).start()
        threading.Thread(target=self._follow_targets, daemon=True).start()
        return self

    def _follow_targets(self) -> None:
        """Replicas come and go (lost, added after a cold start): keep the engine exporter's targets current."""
        seen = self.targets_path.stat().st_mtime_ns
        while not self._watch.wait(1.0):
            now = self.targets_path.stat().st_mtime_ns
            if now != seen:
                seen = now
                old = self.engine
                self.engine = EngineExporter(load_targets(self.targets_path), interval_s=2.0)
                self.engine.start()
                old.stop()

    def urls(self) -> dict[str, str]:
        return {"gpu exporter": f"{self.gpu_srv.url}/metrics", "engine exporter": f"{self.eng_srv.url}/metrics",
                "request exporter": f"{self.req_srv.url}/metrics", "OTLP/HTTP traces": f"{self.otlp.url}/v1/traces"}

    def stop(self) -> None:
        self._watch.set()
        if self.sampler:
            self.sampler.stop()
        if self.engine:
            self.engine.stop()
        self.live.close()  # flushes the fleet's last spans to the receiver
        self.otlp.stop()
        self.store.close()
        for s in (self.req_srv, self.gpu_srv, self.eng_srv):
            s.stop()


def _demo(args: argparse.Namespace) -> int:
    demo = Demo(args).start()
    try:
        print(f"goodput demo: fleet {demo.live.cfg.name!r} from {args.fleet}", flush=True)
        for rs in demo.live.servers:
            print(f"  {rs.name:24s} {rs.model:14s} http://{args.host}:{rs.port}/v1   /metrics")
        for name, url in demo.urls().items():
            print(f"  {name:24s} {url}")
        print(f"  targets file             {demo.targets_path}")
        print(f"  trace store              {args.out / 'traces'}")
        print("Ctrl-C to stop.", flush=True)
        from exporters.http import serve_until_signal

        deadline = time.monotonic() + args.duration if args.duration else None
        if deadline is None:
            serve_until_signal(lambda: None)
        else:
            while time.monotonic() < deadline:
                time.sleep(0.2)
    except KeyboardInterrupt:
        pass
    finally:
        demo.stop()
        print("goodput demo stopped.", flush=True)
    return 0
