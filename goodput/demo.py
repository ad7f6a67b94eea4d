"""``goodput demo``: the whole stack on the embedded default, the simulated fleet of examples/fleet.yaml.

One process runs the live fleet, the three exporters (GPU on fake GPUs that follow the fleet's load,
engine scraping every replica, requests receiving the fleet's spans over OTLP/HTTP) and prints where
everything is. Ctrl-C or SIGTERM stops it, flushing the trace store.
"""

from __future__ import annotations

import argparse
import threading
from pathlib import Path

from exporters.config import load_plan, load_targets
from exporters.engine import EngineExporter
from exporters.fleet_gpus import fleet_gpus
from exporters.gpu import GpuCollector, Sampler
from exporters.requests import OTLP_MAX_BODY_BYTES, RequestMetrics, TraceReceiver
from exporters.trace_store import TraceStore
from goodput.foundation.args import port, positive_number
from goodput.foundation.http import Server, metrics_routes, serve_until_signal
from goodput.rulegen import build, load_spec
from goodput.stack import Process, alertmanager_available, prometheus_available, start_alertmanager, start_prometheus
from goodput.webhook import WebhookReceiver
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
    p.add_argument("--base-port", type=port, default=8100, help="first replica port (default 8100)")
    p.add_argument("--gpu-port", type=port, default=9400)
    p.add_argument("--engine-port", type=port, default=9401)
    p.add_argument("--requests-port", type=port, default=9402)
    p.add_argument("--otlp-port", type=port, default=4318)
    p.add_argument("--prometheus-port", type=port, default=9090)
    p.add_argument("--alertmanager-port", type=port, default=9093)
    p.add_argument("--webhook-port", type=port, default=9095, help="local receiver that logs pages (default 9095)")
    p.add_argument("--plan", type=Path, default=Path("examples/plan.yaml"), help="capacity plan for the engine exporter")
    p.add_argument("--no-prometheus", action="store_true", help="do not start Prometheus and Alertmanager")
    p.add_argument("--speed", type=positive_number, default=1.0, help="virtual seconds per wall second (default 1)")
    p.add_argument("--duration", type=positive_number, default=None, metavar="SECONDS", help="stop after this long")
    p.add_argument("--week", default=None, metavar="YYYY-Www",
                   help="instead of the live stack: simulate that week, backfill it into Prometheus (--prometheus-port), "
                        "write OUT/week/review/ and serve the week until Ctrl-C (docs/review.md)")
    p.set_defaults(func=_demo)


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
        self.otlp = Server(host, args.otlp_port, recv.routes(),
                           max_body_bytes=OTLP_MAX_BODY_BYTES)
        self.req_srv = Server(host, args.requests_port, metrics_routes(lambda: self.metrics.render(self.store)))
        self.sink = SpanSink(cfg, cfg.seed, f"http://{host}:{args.otlp_port}/v1/traces", None, interval_s=1.0)
        self.targets_path = out / "targets.yaml"
        self.live = LiveFleet(cfg, host=host, base_port=args.base_port, speed=args.speed, targets=self.targets_path,
                              sink=self.sink, releases=out / "releases.yaml")
        nvml, mapping = fleet_gpus(self.live)
        self.gpu = GpuCollector(nvml, mapping, hostname="goodput-demo")
        self.gpu_srv = Server(host, args.gpu_port, metrics_routes(
            self.gpu.render, lambda: self.sampler.heartbeat.problem() if self.sampler else None))
        self.engine: EngineExporter | None = None
        self.eng_srv = Server(host, args.engine_port, metrics_routes(
            lambda: self.engine.render() if self.engine else "",
            lambda: self.engine.heartbeat.problem() if self.engine else None))
        self.sampler: Sampler | None = None
        self._watch = threading.Event()
        self.plan = load_plan(args.plan) if args.plan and args.plan.exists() else None
        self.alerts_log = out / "alerts.log"
        self.hook = WebhookReceiver(host, args.webhook_port, on_alert=self._log_alert)
        self.processes: list[Process] = []

    def start(self) -> Demo:
        self.store.start()
        for s in (self.otlp, self.req_srv, self.gpu_srv, self.eng_srv):
            s.start()
        self.live.start()
        self.engine = EngineExporter(load_targets(self.targets_path), self.plan, interval_s=2.0)
        self.engine.start()
        self.gpu.init()
        self.hook.start()
        if not self.args.no_prometheus and prometheus_available() and alertmanager_available():
            self._start_prometheus()
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
                self.engine = EngineExporter(load_targets(self.targets_path), self.plan, interval_s=2.0)
                self.engine.start()
                old.stop()

    def _start_prometheus(self) -> None:
        """Prometheus with the committed rules; Alertmanager with routes whose webhooks reach the demo's receiver."""
        a, out = self.args, self.args.out
        spec = load_spec(Path("rules/slos.yaml"))
        spec.alertmanager["receivers"] = {r: f"{self.hook.url}/{r}" for r in ("pager", "ticket", "log")}
        (out / "alertmanager.yaml").write_text(build(spec)["alertmanager.yaml"])
        am = start_alertmanager(out / "alertmanager", a.alertmanager_port, out / "alertmanager.yaml", a.host)
        self.processes.append(am)
        hp = lambda s: s.url.removeprefix("http://")  # noqa: E731
        prom = start_prometheus(out / "prometheus", a.prometheus_port, {
            "llm-gpu": [hp(self.gpu_srv)], "llm-engine": [hp(self.eng_srv)], "llm-requests": [hp(self.req_srv)]},
            Path("rules"), hp(am), interval="5s", host=a.host)
        self.processes.append(prom)
        am.ready("/-/ready")
        prom.ready("/-/ready")

    def _log_alert(self, receiver: str, alert: dict) -> None:
        labels = alert.get("labels", {})
        line = (f"{alert.get('startsAt', '')} {receiver:6s} {alert.get('status', ''):8s} {labels.get('alertname', '')} "
                + " ".join(f"{k}={v}" for k, v in sorted(labels.items()) if k not in ("alertname",)))
        with self.alerts_log.open("a") as f:
            f.write(line + "\n")
        if receiver == "pager" and alert.get("status") == "firing":
            print(f"PAGE: {line}", flush=True)

    def urls(self) -> dict[str, str]:
        urls = {"gpu exporter": f"{self.gpu_srv.url}/metrics", "engine exporter": f"{self.eng_srv.url}/metrics",
                "request exporter": f"{self.req_srv.url}/metrics", "OTLP/HTTP traces": f"{self.otlp.url}/v1/traces"}
        for p in self.processes:
            urls[p.name] = p.url
        urls["webhook receiver"] = f"{self.hook.url}/{{pager,ticket,log}}  (log: {self.alerts_log})"
        return urls

    def stop(self) -> None:
        self._watch.set()
        for proc in self.processes:
            proc.stop()
        self.hook.stop()
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
    if args.week:
        from capacity.review.week import demo_week
        return demo_week(args.fleet, args.week, args.out / "week", args.prometheus_port, duration=args.duration)
    demo = Demo(args).start()
    try:
        print(f"goodput demo: fleet {demo.live.cfg.name!r} from {args.fleet}", flush=True)
        for rs in demo.live.servers:
            print(f"  {rs.name:24s} {rs.model:14s} http://{args.host}:{rs.port}/v1   /metrics")
        for name, url in demo.urls().items():
            print(f"  {name:24s} {url}")
        if not demo.processes:
            print("  (Prometheus and Alertmanager not started: install Debian's prometheus and "
                  "prometheus-alertmanager, or drop --no-prometheus)")
        print(f"  targets file             {demo.targets_path}")
        print(f"  trace store              {args.out / 'traces'}")
        db, traces, rel = args.out / "analyzer.duckdb", args.out / "traces", args.out / "releases.yaml"
        print("Analyze the stored traces (works while the demo runs; re-run ingest to add new ones):")
        print(f"  .venv/bin/goodput analyze ingest {traces} --db {db}")
        print(f"  .venv/bin/goodput analyze decompose --db {db} --by deployment,tier")
        print(f"  .venv/bin/goodput analyze regressions --db {db} --releases {rel}")
        first = demo.live.cfg.deployments[0].name
        print(f"  .venv/bin/goodput analyze triage --db {db} --deployment {first} --releases {rel}")
        print("Ctrl-C to stop.", flush=True)
        serve_until_signal(lambda: None, args.duration)
    except KeyboardInterrupt:
        pass
    finally:
        demo.stop()
        print("goodput demo stopped.", flush=True)
    return 0
