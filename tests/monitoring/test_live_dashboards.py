"""Live: every dashboard query returns data from a real Prometheus scraping the live simulated fleet and the exporters.

`goodput demo`'s stack (the live fleet, GPU exporter on fake GPUs that follow the load, engine and request exporters)
on free ports, a fleet small enough for a loaded machine but busy enough to queue and hit the prefix cache, with a
context limit some code prompts exceed (rejections);
one injected XID on the fake GPUs (the fake NVML's own fault mechanism) so the XID panel and the firing-alert
annotation have something to show; a release in the fleet file, turned into the release rule by
`goodput dashboards releases`. Prometheus scrapes every second and evaluates the committed rules.
"""

from __future__ import annotations

import math
import subprocess
import sys
import time
from datetime import UTC, datetime

import httpx
import pytest
import yaml

from goodput.cli import build_parser
from goodput.demo.cli import Demo
from goodput.demo.stack import PROMETHEUS, Process
from goodput.monitoring.costrules import FILE as COST_FILE
from goodput.monitoring.rulegen import RULE_FILES
from tests.conftest import REPO, free_port_block, needs
from tests.monitoring.dashboards_fixtures import expressions

pytestmark = needs("prometheus")

RELEASE_AT_S = 3
FLEET = {
    "name": "dash-test", "start_time": "2026-11-23T09:00:00Z", "seed": 5,
    "deployments": [{"name": "chat", "model": "Llama-3.1-8B", "gpu": "H100-80GB-SXM", "replicas": 2,
                     "router": "least-outstanding",
                     "engine": {"max_num_seqs": 6, "max_model_len": 1536, "prefix_cache": True,
                                "max_queue_time_s": 30}}],
    "workloads": [
        {"name": "chat", "scene": "chat", "route": "chat", "tier": "P0", "deployment": "chat",
         "tenants": {"acme": 0.7, "globex": 0.3}, "shared_prefix_tokens": 256,
         "input_tokens": {"p50": 400, "p95": 1500, "p99": 2000, "max": 3000},
         "output_tokens": {"p50": 60, "p95": 200, "p99": 300, "max": 400}, "arrival": {"process": "poisson", "rate": 4}},
        {"name": "code", "scene": "code", "route": "code", "tier": "P1", "deployment": "chat", "tenants": {"initech": 1},
         "input_tokens": {"p50": 800, "p95": 2000, "p99": 3000, "max": 4000},
         "output_tokens": {"p50": 20, "p95": 100, "p99": 150, "max": 200}, "arrival": {"process": "poisson", "rate": 2}},
    ],
    "events": [{"at": RELEASE_AT_S, "kind": "release", "deployment": "chat", "release_kind": "framework",
                "from": "vllm-0.10.1", "to": "vllm-0.10.2", "note": "test release"}],
}
PLAN = {"plan_version": 1, "deployments": {"chat": {"replica_goodput_tokens_per_second": 3000, "desired_replicas": 2,
                                                   "cold_start_s": 180}}}

# Queries that may rightly return nothing on a healthy minute of this fleet; each is checked another way.
EXEMPT = {
    # the live stack reads its engines through the engine exporter: no engine is scraped directly (that path, with
    # the same `up` series, is tests/deploy/test_cluster_scrape.py's, and rules/tests/alerts.test.yaml's)
    "deployment.json panel 11 B": "engines scraped directly",
    # a prompt larger than the whole KV cache: the fleet would have to be misconfigured; the recorded rule and the
    # alert on it are unit-tested in rules/tests/alerts.test.yaml
    "deployment.json panel 7 B": "KV-capacity rejections",
    # the demo fleet has no gateway quotas, so no tenant is ever refused for its own limits; the recorded rule is
    # unit-tested in rules/tests/recording.test.yaml, the alert on it in alerts.test.yaml
    "tenants.json panel 9 A": "quota rejections per tenant",
    # the demo fleet prefills and decodes on the same replicas: no KV transfer between pools (the catalog's names are
    # checked in test_dashboards.py; the simulator's disaggregated deployments export them)
    **{f"deployment.json panel {p} {ref}": "KV transfer (P/D disaggregation)"
       for p, refs in ((12, "ABC"), (13, "AB"), (14, "AB")) for ref in refs},
    # the demo fleet has no overload ladder and no fallback routes: nothing is degraded or falls back; the recorded
    # rules and the alerts on them are unit-tested in rules/tests/overload.test.yaml, the counters from the
    # simulator's own spans in tests/exporters/test_overload_metrics.py
    "tenants.json panel 10 A": "degraded and fallen-back share per deployment",
    "tenants.json panel 11 A": "fallback paths",
    "tenants.json panel 11 B": "fallbacks from an open circuit",
    # ... and no circuit breaker: llm_gateway_circuit_state from the simulator's own spans is tested in
    # tests/exporters/test_overload_metrics.py, the console's reading of it against Prometheus in
    # tests/console/test_overload_page.py
    "tenants.json panel 12 A": "circuit breakers not closed",
    # a cold start is measured for a replica that starts while the engine exporter watches (one already running when
    # the exporter starts has no measurable start): this fleet adds none; tests/monitoring/test_live_cold_start.py
    # measures the demo's scale-out in a real Prometheus through the same recorded p90, and the ticket on it
    **{f"capacity.json panel 20 {ref}": "replica cold starts" for ref in "AB"},
    # the phases come from kube-state-metrics' pod timestamps: the live stack runs no Kubernetes; the rules are
    # unit-tested on kube-state-metrics' series in rules/tests/kube.test.yaml
    "capacity.json panel 21 A": "cold start phases (Kubernetes)",
}
BUDGET_S = 150


def _query(base: str, q: str) -> list[dict]:
    r = httpx.get(f"{base}/api/v1/query", params={"query": q}, timeout=10)
    r.raise_for_status()
    return r.json()["data"]["result"]


def _finite(result: list[dict]) -> list[dict]:
    """The series with a number to plot (a ratio of nothing or a quantile of no requests is NaN)."""
    return [x for x in result if math.isfinite(float(x["value"][1]))]


def _wait(what: str, check, timeout: float):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.5)
    raise AssertionError(f"waited {timeout:.0f} s for {what}")


@pytest.mark.timeout(BUDGET_S + 60)
def test_every_panel_query_returns_series_from_the_live_stack(tmp_path):
    end = time.monotonic() + BUDGET_S
    (tmp_path / "fleet.yaml").write_text(yaml.safe_dump(FLEET))
    (tmp_path / "plan.yaml").write_text(yaml.safe_dump(PLAN))
    base = free_port_block(9)
    # the demo's own parser, so every option it gains has its default here too
    args = build_parser("demo").parse_args([
        "demo", "--fleet", str(tmp_path / "fleet.yaml"), "--out", str(tmp_path / "out"), "--base-port", str(base),
        "--gpu-port", str(base + 2), "--engine-port", str(base + 3), "--requests-port", str(base + 4),
        "--otlp-port", str(base + 5), "--prometheus-port", str(base + 6), "--alertmanager-port", str(base + 8),
        "--webhook-port", str(base + 7), "--plan", str(tmp_path / "plan.yaml"), "--no-prometheus", "--no-console",
        "--no-incident"])
    demo = Demo(args)
    demo.gpu.nvml.faults = [{"at": 0, "kind": "xid", "gpu": 0, "xid": 13}]
    prom = None
    try:
        demo.start()
        releases = args.out / "releases.yaml"
        _wait("the fleet's release in releases.yaml", lambda: releases.exists() and yaml.safe_load(releases.read_text()),
              RELEASE_AT_S + 30)
        rules = tmp_path / "releases.rules.yaml"
        r = subprocess.run([sys.executable, "-m", "goodput", "dashboards", "releases", str(releases), "--out",
                            str(rules)], cwd=REPO, capture_output=True, text=True)
        assert r.returncode == 0, r.stderr

        workdir = tmp_path / "prometheus"
        workdir.mkdir()
        hp = lambda s: s.url.removeprefix("http://")  # noqa: E731
        (workdir / "prometheus.yml").write_text(yaml.safe_dump({
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(REPO / "rules" / f) for f in (*RULE_FILES, COST_FILE)] + [str(rules)],
            "scrape_configs": [{"job_name": job, "static_configs": [{"targets": [hp(srv)]}]} for job, srv in (
                ("llm-gpu", demo.gpu_srv), ("llm-engine", demo.eng_srv), ("llm-requests", demo.req_srv))]}))
        log = workdir / "prometheus.log"
        url = f"http://127.0.0.1:{args.prometheus_port}"
        prom = Process("prometheus", url, subprocess.Popen(
            [PROMETHEUS, f"--config.file={workdir / 'prometheus.yml'}", f"--storage.tsdb.path={workdir / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{args.prometheus_port}"], stdout=subprocess.DEVNULL,
            stderr=log.open("w")), log).ready("/-/ready")

        exprs = [e for e in expressions() if e.where not in EXEMPT]
        assert len(exprs) == len(expressions()) - len(EXEMPT), "an exemption names no query"
        empty = exprs
        while empty and time.monotonic() < end:
            time.sleep(2)
            empty = [e for e in empty if not _finite(_query(url, e.promql))]
        print(f"every query had data {BUDGET_S - (end - time.monotonic()):.0f} s into the test")
        assert not empty, "no series with a finite value after the whole budget for:\n" + "\n".join(
            f"{e.where}: {e.promql}" for e in empty)

        # the release annotation's query gives the release's time, in the milliseconds Grafana's "series value as
        # timestamp" takes
        when = datetime.fromisoformat(yaml.safe_load(releases.read_text())[0]["time"].replace("Z", "+00:00"))
        assert abs(when.timestamp() - time.time()) < BUDGET_S + 60
        annotation = next(e for e in expressions() if e.where == "deployment.json annotation Releases")
        (release,) = _query(url, annotation.promql)
        assert float(release["value"][1]) == 1000 * round(when.replace(tzinfo=UTC).timestamp())
        assert release["metric"]["kind"] == "framework" and release["metric"]["to"] == "vllm-0.10.2"
    finally:
        if prom:
            prom.stop()
        demo.stop()
