"""The generated rules in a real Prometheus over a simulated fleet: series, rule-group evaluation time, the budget.

``python -m benchmarks rules_scale [--seconds 150] [--json FILE]`` builds the exposition of a fleet of 1,000 replicas
(50 deployments of 20), 200 tenants, 3 tiers and 20 routes, each from goodput's own code: the engine exporter's
``/metrics`` after one scrape round of 1,000 vLLM targets (real vLLM text from the simulator, on local sockets); the
request exporter's after ingesting one request per tenant, route, serving deployment and outcome (so every series
a day of traffic would create exists); and one GPU per replica in the catalog's GPU families. Three stub targets
serve them (jobs ``llm-engine``, ``llm-requests``, ``llm-gpu``), every value growing with each scrape so that
``rate()`` is never empty, and a real Prometheus (the ``prometheus`` on PATH) scrapes them every 15 s and evaluates
``goodput rules generate``'s files, generated from ``rules/slos.yaml`` with an SLO for every tier and route (60).

Live scraping rather than ``promtool tsdb create-blocks-from openmetrics``: backfilled blocks never enter the head,
so neither ``prometheus_tsdb_head_series`` nor a rule group's evaluation over fresh samples would be what a
production Prometheus sees.

Reported: series scraped per job, head series, recorded series, series per replica and per tenant, every rule
group's ``prometheus_rule_group_last_duration_seconds`` beside its interval, rule evaluation failures, Prometheus'
CPU and memory; and, from the exposition alone, the request exporter's series at ``--max-tenants`` 50 (its default)
and 200. docs/cardinality.md reads these figures.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import yaml

from benchmarks.exporters import MetricsStub, fleet_dumps, free_port
from benchmarks.report import emit
from goodput.contracts.catalog import GPU
from goodput.contracts.vocabulary import TIERS
from goodput.exporters.config import Target, Targets
from goodput.exporters.engine import EngineExporter
from goodput.exporters.otlp import Span
from goodput.exporters.requests import RequestMetrics

REPO = Path(__file__).resolve().parents[1]
RULE_FILES = ("llm.rules.yaml", "slo.rules.yaml", "gpu.rules.yaml", "alerts.rules.yaml")
JOBS = ("llm-engine", "llm-requests", "llm-gpu")


@dataclass(frozen=True)
class Fleet:
    """The simulated fleet's shape. Deployment ``d`` serves model ``d % models`` on route ``d % routes``; tenant
    ``t`` is in tier ``t % 3`` and sends to ``routes_per_tenant`` routes, each through every deployment serving it."""

    replicas: int = 1000
    replicas_per_deployment: int = 20
    tenants: int = 200
    routes: int = 20
    routes_per_tenant: int = 3
    models: int = 10

    @property
    def deployments(self) -> int:
        return self.replicas // self.replicas_per_deployment

    def routes_of(self, tenant: int) -> list[int]:
        return sorted({(tenant + 7 * k) % self.routes for k in range(self.routes_per_tenant)})

    def serving(self, route: int) -> list[int]:
        return [d for d in range(self.deployments) if d % self.routes == route]


# what one (tenant, route, deployment) sees over a day: (outcome, reject reason, the gateway's decision)
OUTCOMES = (("ok", "", "admitted"), ("ok", "", "queued"), ("error", "", "admitted"),
            ("rejected", "rate_limit", "rejected"), ("rejected", "queue_full", "admitted"), ("timeout", "", "queued"))


def request_exposition(fleet: Fleet, max_tenants: int) -> str:
    """The request exporter's ``/metrics`` after one request per tenant, route, serving deployment and outcome."""
    metrics = RequestMetrics(max_tenants=max_tenants)
    spans: list[Span] = []
    t0 = 1_795_424_400 * 10**9
    for tenant in range(fleet.tenants):
        for route in fleet.routes_of(tenant):
            for dep in fleet.serving(route):
                for outcome, reason, decision in OUTCOMES:
                    n = len(spans)
                    trace, root = f"{n:032x}", f"{n + 1:016x}"
                    attrs = {"llm.tenant": f"tenant-{tenant:03d}", "llm.tier": TIERS[tenant % 3],
                             "llm.route": f"route-{route:02d}", "llm.deployment": f"dep-{dep:02d}",
                             "gen_ai.request.model": f"model-{dep % fleet.models}", "llm.outcome": outcome,
                             "gen_ai.usage.input_tokens": 800, "gen_ai.usage.output_tokens": 150}
                    if reason:
                        attrs["llm.reject_reason"] = reason
                    spans.append(Span(trace, root, "", "llm.request", 2, t0, t0 + 3 * 10**9, 0, "", "gw", attrs, {}))
                    for i, (name, start, end) in enumerate((("llm.gateway", 0, 0.01), ("llm.queue", 0.01, 0.2),
                                                            ("llm.prefill", 0.2, 0.4), ("llm.decode", 0.4, 3.0))):
                        extra = {"llm.admission": decision, "llm.gateway_wait_s": 0.01} if i == 0 else {}
                        spans.append(Span(trace, f"{n + 2 + i:016x}", root, name, 1, t0 + int(start * 1e9),
                                          t0 + int(end * 1e9), 0, "", "gw", extra, {}))
    metrics.ingest(spans)
    return metrics.render()


def engine_exposition(fleet: Fleet, dumps: list[str]) -> str:
    """The engine exporter's ``/metrics`` after one round over ``fleet.replicas`` vLLM targets (the dumps in turn)."""
    bodies = [d.encode() for d in dumps[:fleet.replicas]]
    stub = MetricsStub([lambda b=b: b for b in bodies])
    try:
        per = fleet.replicas_per_deployment
        targets = Targets(tuple(
            Target(f"dep-{i // per:02d}", f"dep-{i // per:02d}-{i % per}",
                   f"http://127.0.0.1:{stub.ports[i % len(stub.ports)]}/metrics", "vllm",
                   f"model-{(i // per) % fleet.models}") for i in range(fleet.replicas)),
            {f"dep-{d:02d}": per for d in range(fleet.deployments)})
        exp = EngineExporter(targets, timeout_s=30)
        exp.scrape_once()
        down = sum(1 for st in exp.states if not st.up)
        if down:
            raise RuntimeError(f"{down} of {fleet.replicas} engine targets down after one round")
        return exp.render()
    finally:
        stub.stop()


def gpu_exposition(fleet: Fleet) -> str:
    """One GPU per replica in every family of the catalog's GPU section (one series per label set a GPU has)."""
    out = []
    per = fleet.replicas_per_deployment
    extra = {"gpu_model": "NVIDIA H100 80GB HBM3", "driver_version": "550.54.15", "hostname": "node",
             "kind": "volatile_corrected", "pid": "4242"}
    for spec in GPU:
        if spec.name == "llm_gpu_xid_errors_total":
            continue  # a series only once a GPU has had an XID
        out += [f"# HELP {spec.name} {spec.help}", f"# TYPE {spec.name} {spec.type}"]
        for i in range(fleet.replicas):
            dep = f"dep-{i // per:02d}"
            values = {"gpu": "0", "uuid": f"GPU-{i:08x}", "deployment": dep, "replica": f"{dep}-{i % per}",
                      "hostname": f"node-{i}", **{k: v for k, v in extra.items() if k != "hostname"}}
            lab = ",".join(f'{k}="{values[k]}"' for k in spec.labels)
            out.append(f"{spec.name}{{{lab}}} 1.0")
    return "\n".join(out) + "\n"


class Growing:
    """An exposition whose every sample grows by its first value at each scrape (counters stay monotonic, so
    every ``rate()`` of the rules has something to read)."""

    def __init__(self, text: str) -> None:
        self.lines: list[tuple[str, float]] = []
        for line in text.splitlines():
            if line and line[0] != "#":
                head, _, value = line.rpartition(" ")
                self.lines.append((head, float(value)))
        self.scrapes = 0

    def __call__(self) -> bytes:
        self.scrapes += 1
        k = self.scrapes
        return ("\n".join(f"{head} {value * k}" for head, value in self.lines) + "\n").encode()


def slo_spec(fleet: Fleet, out: Path) -> Path:
    """``rules/slos.yaml`` with an SLO for every tier and route of ``fleet`` (thresholds of the committed P0/P1/P2)."""
    spec = yaml.safe_load((REPO / "rules" / "slos.yaml").read_text())
    by_tier = {s["tier"]: s for s in spec["slos"]}
    spec["slos"] = [{**by_tier[tier], "route": f"route-{r:02d}"} for r in range(fleet.routes) for tier in TIERS]
    path = out / "slos.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def _query(client: httpx.Client, base: str, q: str) -> list[dict]:
    r = client.get(f"{base}/api/v1/query", params={"query": q})
    r.raise_for_status()
    return r.json()["data"]["result"]


def _value(client: httpx.Client, base: str, q: str) -> float:
    res = _query(client, base, q)
    return float(res[0]["value"][1]) if res else 0.0


def prometheus_run(fleet: Fleet, targets: dict[str, MetricsStub], rules: Path, tmp: Path, seconds: float) -> dict:
    """A real Prometheus scraping ``targets`` every 15 s and evaluating ``rules`` for ``seconds``; what it holds."""
    port = free_port()
    jobs = "\n".join(f"  - {{job_name: {job}, static_configs: [{{targets: ['127.0.0.1:{stub.ports[0]}']}}]}}"
                     for job, stub in targets.items())
    (tmp / "prometheus.yml").write_text(
        f"global: {{scrape_interval: 15s, evaluation_interval: 15s, scrape_timeout: 10s}}\n"
        f"rule_files: [{', '.join(repr(str(rules / f)) for f in RULE_FILES)}]\n"
        f"scrape_configs:\n  - {{job_name: prometheus, static_configs: [{{targets: ['127.0.0.1:{port}']}}]}}\n{jobs}\n")
    log = (tmp / "prometheus.log").open("w")
    prom = subprocess.Popen(["nice", "prometheus", f"--config.file={tmp / 'prometheus.yml'}",
                             f"--storage.tsdb.path={tmp / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}"],
                            stdout=subprocess.DEVNULL, stderr=log)
    base = f"http://127.0.0.1:{port}"
    try:
        with httpx.Client(timeout=60) as client:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                with contextlib.suppress(httpx.HTTPError):
                    if client.get(f"{base}/-/ready").status_code == 200:
                        break
                time.sleep(0.5)
            time.sleep(seconds)
            return _measure(client, base, fleet)
    finally:
        prom.terminate()
        prom.wait(60)
        log.close()


def _measure(client: httpx.Client, base: str, fleet: Fleet) -> dict:
    scraped = {r["metric"]["job"]: int(float(r["value"][1]))
               for r in _query(client, base, 'scrape_samples_scraped{job=~"llm-.*"}')}
    head = int(_value(client, base, "prometheus_tsdb_head_series"))
    recorded = int(_value(client, base, 'count({__name__=~".+:.+"})'))
    tenant_raw = int(_value(client, base, 'count({job="llm-requests", tenant=~"tenant-.*"})'))
    tenant_recorded = int(_value(client, base, 'count({__name__=~".+:.+", tenant=~"tenant-.*"})'))
    groups = {r["metric"]["rule_group"].rsplit(";", 1)[1]: r["value"][1]
              for r in _query(client, base, "prometheus_rule_group_last_duration_seconds")}
    rules = {r["metric"]["rule_group"].rsplit(";", 1)[1]: int(float(r["value"][1]))
             for r in _query(client, base, "prometheus_rule_group_rules")}
    evals = int(_value(client, base, "sum(prometheus_rule_evaluations_total)"))
    return {
        "series_scraped_by_job": scraped, "head_series": head, "recorded_series": recorded,
        "series_per_replica": {job: round(scraped.get(job, 0) / fleet.replicas, 1) for job in ("llm-engine", "llm-gpu")},
        "series_per_tenant_scraped": round(tenant_raw / fleet.tenants, 1),
        "series_per_tenant_recorded": round(tenant_recorded / fleet.tenants, 1),
        "rule_groups": {g: {"rules": rules.get(g), "last_duration_ms": round(float(v) * 1e3, 1)}
                        for g, v in sorted(groups.items())},
        "rule_groups_total_ms": round(sum(float(v) for v in groups.values()) * 1e3, 1),
        "rule_evaluations": evals,
        "rule_evaluation_failures": int(_value(client, base, "sum(prometheus_rule_evaluation_failures_total)")),
        "iterations_missed": int(_value(client, base, "sum(prometheus_rule_group_iterations_missed_total)")),
        "evaluation_interval_s": 15,
        "prometheus_cpu_s": round(_value(client, base, 'process_cpu_seconds_total{job="prometheus"}'), 1),
        "prometheus_rss_mb": round(_value(client, base, 'process_resident_memory_bytes{job="prometheus"}') / 2**20),
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }


def _samples(text: str) -> int:
    return sum(1 for ln in text.splitlines() if ln and ln[0] != "#")


def by_family(text: str) -> dict[str, int]:
    """Samples per family of an exposition (a histogram's ``_bucket``, ``_sum`` and ``_count`` under its name),
    most first."""
    families: dict[str, int] = {}
    family = ""
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            family = line.split(" ", 3)[2]
        elif line and line[0] != "#":
            families[family] = families.get(family, 0) + 1
    return dict(sorted(families.items(), key=lambda kv: -kv[1]))


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(prog="python -m benchmarks.rules_scale", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=float, default=150.0, help="how long Prometheus runs once ready (default 150)")
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv if argv is not None else [])
    if shutil.which("prometheus") is None:
        p.error("needs `prometheus` on PATH (Debian: apt-get install prometheus)")
    fleet = Fleet()
    t0 = time.perf_counter()
    dumps = fleet_dumps(200)
    dumps = [dumps[i % len(dumps)] for i in range(fleet.replicas)]
    texts = {"llm-engine": engine_exposition(fleet, dumps),
             "llm-requests": request_exposition(fleet, max_tenants=fleet.tenants),
             "llm-gpu": gpu_exposition(fleet)}
    default_tenants = _samples(request_exposition(fleet, max_tenants=50))
    built_s = time.perf_counter() - t0
    with tempfile.TemporaryDirectory(prefix="goodput-bench-rules-") as d:
        tmp = Path(d)
        subprocess.run([sys.executable, "-m", "goodput", "rules", "generate", "--spec", str(slo_spec(fleet, tmp)),
                        "--out", str(tmp)], cwd=REPO, check=True, stdout=subprocess.DEVNULL)
        stubs = {job: MetricsStub([Growing(text)]) for job, text in texts.items()}
        try:
            prom = prometheus_run(fleet, stubs, tmp, tmp, args.seconds)
        finally:
            for stub in stubs.values():
                stub.stop()
    out = {
        "fleet": {"replicas": fleet.replicas, "deployments": fleet.deployments, "tenants": fleet.tenants,
                  "tiers": len(TIERS), "routes": fleet.routes, "routes_per_tenant": fleet.routes_per_tenant,
                  "slos": fleet.routes * len(TIERS)},
        "exposition_samples": {job: _samples(t) for job, t in texts.items()},
        "requests_samples_max_tenants_50": default_tenants,
        "samples_by_family": {job: {f: n for f, n in by_family(t).items() if n} for job, t in texts.items()},
        "build_s": round(built_s, 1),
        "prometheus": prom,
    }
    return emit("generated rules in Prometheus at fleet size", out, args.json)


if __name__ == "__main__":
    main(sys.argv[1:])
