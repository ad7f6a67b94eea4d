"""``goodput demo``: the whole stack on the embedded default, the simulated fleet of examples/fleet.yaml.

One process runs the live fleet, the three exporters (GPU on fake GPUs that follow the fleet's load,
engine scraping every replica, requests receiving the fleet's spans over OTLP/HTTP), Prometheus,
Alertmanager, an ingest loop that keeps the analyzer's database current, and the triage console, and
prints where everything is. Unless ``--no-incident``, the fleet runs the scripted incident of
goodput/demo/incident.py. The terminal then tells the timeline as it happens (goodput/demo/timeline.py: releases,
scale-outs, replicas ready, pages and resolutions, with their times) and says when a child (Prometheus,
Alertmanager, the console) exits. Ctrl-C or SIGTERM stops it, flushing the trace store.

At ``--speed`` above 1 the fleet's clock runs that much faster than Prometheus': the rules are generated
with every window and ``for`` divided by the speed (into DIR/rules), Alertmanager's waits likewise, and the
plan's per-replica goodput is multiplied by it (tokens per wall second are that many virtual seconds' worth).
``--headless`` runs the incident on the RAG deployment alone and checks it (goodput/demo/headless.py).
"""

from __future__ import annotations

import argparse
import shlex
import signal
import time
from pathlib import Path

import yaml

from goodput.demo.fleet_gpus import fleet_gpus
from goodput.demo.incident import (
    ADDED_REPLICAS,
    ALERT,
    COLD_START_S,
    INCIDENT_AT_S,
    RESCUE_AT_S,
    incident_fleet,
    incident_plan,
    rag_deployment,
)
from goodput.demo.ingest_loop import IngestLoop
from goodput.demo.stack import (
    Process,
    alertmanager_available,
    prometheus_available,
    start_alertmanager,
    start_console,
    start_prometheus,
)
from goodput.demo.timeline import Timeline, alert_line
from goodput.demo.webhook import WebhookReceiver
from goodput.exporters.config import Plan, load_plan
from goodput.exporters.engine import EngineExporter
from goodput.exporters.gpu import GpuCollector, Sampler
from goodput.exporters.requests import OTLP_MAX_BODY_BYTES, RequestMetrics, TraceReceiver
from goodput.exporters.targets_file import TargetsFile
from goodput.exporters.trace_store import TraceStore
from goodput.foundation.args import port, positive_number
from goodput.foundation.http import Server, metrics_routes, serve_until_signal
from goodput.foundation.yamlfile import load_mapping
from goodput.monitoring.costrules import FILE as COST_FILE
from goodput.monitoring.costrules import build as cost_rules
from goodput.monitoring.rulegen import build, load_spec, write
from goodput.simulator.config import load_fleet
from goodput.simulator.live import LiveFleet
from goodput.simulator.span_sink import SpanSink

__all__ = ["Demo", "register"]

DEFAULT_FLEET = Path("examples/fleet.yaml")
# what each child serves that a person opens: Debian's Prometheus 2.42 serves its classic UI only (/alerts is a
# 404 there), Debian's Alertmanager no UI at all (its API; the console's Overview reads it)
PAGES = {"prometheus": ("/classic/alerts", "alerts and rules; /classic/graph to query"),
         "alertmanager": ("/api/v2/alerts", "API; /api/v2/silences; no web UI in Debian's package"),
         "console": ("", "the triage console")}


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
    p.add_argument("--console-port", type=port, default=8501, help="the triage console (default 8501)")
    p.add_argument("--no-console", action="store_true", help="do not start the triage console")
    p.add_argument("--no-incident", action="store_true", help="run the fleet file as it is, without the scripted incident")
    p.add_argument("--headless", action="store_true",
                   help="run the incident on the RAG deployment alone and check its story: SLO met before the release, "
                        "the page, the release found by the printed commands, resolved after the scale-out, no page "
                        "after it; exit 0 (1 when a check fails); use with --speed 20")
    p.add_argument("--week", default=None, metavar="YYYY-Www",
                   help="instead of the live stack: simulate that week, backfill it into Prometheus (--prometheus-port), "
                        "write OUT/week/review/ and serve the week until Ctrl-C (docs/review.md)")
    p.set_defaults(func=_demo)


class Demo:
    """Everything ``make demo`` runs, startable and stoppable from tests."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        out = args.out
        out.mkdir(parents=True, exist_ok=True)
        self.fleet_path = args.fleet
        self.plan_path: Path | None = args.plan if args.plan and args.plan.exists() else None
        if not args.no_incident:
            self.fleet_path = out / "fleet.yaml"
            fleet = incident_fleet(load_mapping(args.fleet, "a fleet"), str(args.fleet), only_rag=args.headless)
            self.fleet_path.write_text("# the demo's fleet: " + str(args.fleet) + " with the scripted incident "
                                       "(goodput/demo/incident.py)\n" + yaml.safe_dump(fleet, sort_keys=False))
            if self.plan_path is not None:
                plan_doc = incident_plan(load_mapping(self.plan_path, "a plan"), rag_deployment(fleet, str(args.fleet)))
                self.plan_path = out / "plan.yaml"
                self.plan_path.write_text(f"# the demo's plan: {args.plan} with the incident's RAG pool "
                                          "(goodput/demo/incident.py)\n" + yaml.safe_dump(plan_doc, sort_keys=False))
        cfg = load_fleet(self.fleet_path)
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
        plan = load_plan(self.plan_path) if self.plan_path is not None else None
        # goodput per wall second; the cold start stays in virtual seconds, as the replicas publish it
        self.plan = plan and Plan({d: g * args.speed for d, g in plan.goodput.items()}, plan.desired, plan.cold_start)
        self.db = out / "analyzer.duckdb"
        self.ingester = IngestLoop(out / "traces", self.db, interval_s=10.0 / min(args.speed, 5.0))
        self.alerts_log = out / "alerts.log"
        self.hook = WebhookReceiver(host, args.webhook_port, on_alert=self._log_alert)
        self.processes: list[Process] = []
        self.timeline = Timeline(self.live)
        self.received: list[tuple[float, str, dict]] = []  # (wall time, receiver, alert) as the webhook got them
        self.died: dict[str, int] = {}  # child -> exit code, for those that exited while the demo ran

    def start(self) -> Demo:
        self.store.start()
        for s in (self.otlp, self.req_srv, self.gpu_srv, self.eng_srv):
            s.start()
        self.live.start()
        # replicas come and go (lost, added after a cold start): the exporter follows the targets file, keeping each
        # replica's state (its measured cold start among it) across reloads
        tf = TargetsFile(self.targets_path)
        self.engine = EngineExporter(tf.targets, self.plan, interval_s=2.0, targets_file=tf)
        self.engine.start()
        self.gpu.init()
        self.hook.start()
        if not self.args.no_prometheus and prometheus_available() and alertmanager_available():
            self._start_prometheus()
        self.sampler = Sampler(self.gpu, 2.0).start()
        self.ingester.start()
        if not self.args.no_console and not self.args.headless:
            self._start_console()
        self.timeline.start(self._watch_children)
        return self

    def _watch_children(self) -> None:
        """Say once when Prometheus, Alertmanager or the console exits without being stopped."""
        for p in self.processes:
            code = p.died()
            if code is not None and p.name not in self.died:
                self.died[p.name] = code
                how = f"was killed by {_signal_name(-code)}" if code < 0 else f"exited with code {code}"
                self.timeline.say(self.live.virtual_now(), "DIED", f"{p.name} {how}; its log: {p.log}; the demo "
                                  "goes on without it (Ctrl-C to stop)")

    def _start_console(self) -> None:
        a = self.args
        urls = {p.name: p.url for p in self.processes}
        env = {"GOODPUT_DB": str(self.db.resolve()), "GOODPUT_RELEASES": str((a.out / "releases.yaml").resolve()),
               "GOODPUT_PLAN": str((self.plan_path or a.plan).resolve()), "GOODPUT_FLEET": str(self.fleet_path.resolve()),
               "GOODPUT_PROMETHEUS_URL": urls.get("prometheus", f"http://{a.host}:{a.prometheus_port}"),
               "GOODPUT_ALERTMANAGER_URL": urls.get("alertmanager", f"http://{a.host}:{a.alertmanager_port}")}
        console = start_console(a.out / "console", a.console_port, env, a.host)
        self.processes.append(console)
        console.ready("/_stcore/health", timeout=60)

    def _start_prometheus(self) -> None:
        """Prometheus with the committed rules; Alertmanager with routes whose webhooks reach the demo's receiver."""
        a, out = self.args, self.args.out
        spec = load_spec(Path("rules/slos.yaml"))
        spec.alertmanager["receivers"] = {r: f"{self.hook.url}/{r}" for r in ("pager", "ticket", "log")}
        if not a.no_console:  # alerts link to this demo's console (where it would run, when headless)
            spec.links["console_base"] = f"http://{a.host}:{a.console_port}"
        scale, interval, resend = 1.0, "5s", "1m"
        if a.speed > 1:  # the compressed clock: every window, `for` and wait divided by the speed
            scale = 1.0 / a.speed
            interval, resend = "1s", f"{max(1, round(60 * scale))}s"
            for key, default in (("group_wait", 30), ("group_interval", 300)):
                spec.alertmanager[key] = f"{max(1, round(default * scale))}s"
        rules = out / "rules"
        write(spec, rules, scale)
        (rules / COST_FILE).write_text(cost_rules(spec, scale)[COST_FILE])  # the Capacity page's cost (docs/cost.md)
        (out / "alertmanager.yaml").write_text(build(spec)["alertmanager.yaml"])
        am = start_alertmanager(out / "alertmanager", a.alertmanager_port, out / "alertmanager.yaml", a.host)
        self.processes.append(am)
        hp = lambda s: s.url.removeprefix("http://")  # noqa: E731
        prom = start_prometheus(out / "prometheus", a.prometheus_port, {
            "llm-gpu": [hp(self.gpu_srv)], "llm-engine": [hp(self.eng_srv)], "llm-requests": [hp(self.req_srv)]},
            rules, hp(am), interval=interval, host=a.host, resend_delay=resend)
        self.processes.append(prom)
        am.ready("/-/ready")
        prom.ready("/-/ready")

    def _log_alert(self, receiver: str, alert: dict) -> None:
        self.received.append((time.time(), receiver, alert))
        with self.alerts_log.open("a") as f:
            f.write(alert_line(receiver, alert) + "\n")
        self.timeline.alert(receiver, alert)

    def incident_deployment(self) -> str:
        return rag_deployment(load_mapping(self.fleet_path, "a fleet"), str(self.fleet_path))

    def commands(self, db: Path | None = None) -> dict[str, list[str]]:
        """The analyzer commands the demo prints (``goodput`` arguments), on the traces it stores; the headless run
        runs exactly these. ``db``: a database of your own (the console's is replaced as the ingest loop refreshes)."""
        out = self.args.out
        dep = self.live.cfg.deployments[0].name if self.args.no_incident else self.incident_deployment()
        am = next((p.url for p in self.processes if p.name == "alertmanager"), None)
        names = ("ingest", "decompose", "regressions", "triage")
        printed = analysis_commands(db or out / "my-analysis.duckdb", out / "traces", out / "releases.yaml", am, dep)
        return dict(zip(names, (shlex.split(c) for c in printed), strict=True))

    def urls(self) -> dict[str, str]:
        urls = {"gpu exporter": f"{self.gpu_srv.url}/metrics", "engine exporter": f"{self.eng_srv.url}/metrics",
                "request exporter": f"{self.req_srv.url}/metrics", "OTLP/HTTP traces": f"{self.otlp.url}/v1/traces"}
        for p in self.processes:
            path, what = PAGES.get(p.name, ("", ""))
            urls[p.name] = f"{p.url}{path}" + (f"  ({what})" if what else "")
        urls["webhook receiver"] = f"{self.hook.url}/{{pager,ticket,log}}  (log: {self.alerts_log})"
        return urls

    def stop(self) -> None:
        for proc in self.processes:
            proc.stopping = True
        self.timeline.stop()
        self.ingester.stop()
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


def analysis_commands(db: Path, traces: Path, releases: Path, alertmanager: str | None,
                      deployment: str | None = None) -> list[str]:
    """The analyzer commands the demo prints (tests and the headless run run them as printed). With an Alertmanager,
    triage names no deployment: it takes the one paging there (else the worst SLO attainment in the store)."""
    who = f" --alertmanager {alertmanager}" if alertmanager else (f" --deployment {deployment}" if deployment else "")
    return [f"analyze ingest {traces} --db {db}", f"analyze decompose --db {db} --by deployment,tier",
            f"analyze regressions --db {db} --releases {releases}", f"analyze triage --db {db} --releases {releases}{who}"]


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _demo(args: argparse.Namespace) -> int:
    if args.week:
        from goodput.review.week import demo_week
        return demo_week(args.fleet, args.week, args.out / "week", args.prometheus_port, duration=args.duration)
    demo = Demo(args).start()
    if args.headless:
        from goodput.demo.headless import check_incident

        try:
            return check_incident(demo)
        finally:
            demo.stop()
    try:
        print(f"goodput demo: fleet {demo.live.cfg.name!r} from {demo.fleet_path}", flush=True)
        for rs in demo.live.servers:
            print(f"  {rs.name:24s} {rs.model:14s} http://{args.host}:{rs.port}/v1   /metrics")
        for name, url in demo.urls().items():
            print(f"  {name:24s} {url}")
        if not demo.processes:
            print("  (Prometheus and Alertmanager not started: install Debian's prometheus and "
                  "prometheus-alertmanager, or drop --no-prometheus)")
        print(f"  targets file             {demo.targets_path}")
        print(f"  trace store              {args.out / 'traces'}")
        print(f"The analyzer database {demo.db} is refreshed every {demo.ingester.interval_s:g} s.")
        print("Analyze the stored traces yourself (works while the demo runs; re-run ingest to add new ones):")
        for argv in demo.commands().values():
            print("  .venv/bin/goodput " + shlex.join(argv))
        if not args.no_incident:
            dep = demo.incident_deployment()
            stamp = demo.timeline.stamp
            print(f"Scripted incident (goodput/demo/incident.py; --no-incident to skip), every tier within its SLO before "
                  f"it:\n  {stamp(INCIDENT_AT_S)} a prompt-template release doubles {dep}'s input; its queue builds "
                  f"and {ALERT} pages some minutes later\n  {stamp(RESCUE_AT_S)} {ADDED_REPLICAS} replicas are "
                  f"added, serving from {stamp(RESCUE_AT_S + COLD_START_S)}; the queue drains and the alert resolves\n"
                  "Watch the console's Overview, Workload and Releases pages (docs/console.md). As it happens:")
        print("Ctrl-C to stop.", flush=True)
        serve_until_signal(lambda: None, args.duration)
    except KeyboardInterrupt:
        pass
    finally:
        demo.stop()
        print("goodput demo stopped.", flush=True)
    return 0
