"""What the console tests read: a real analyzer database from a simulated hour with a prompt-template release,
and a real Prometheus (rules generated with durations scaled down, so recorded series appear in seconds) and
Alertmanager scraping a small exporter of catalog metrics whose values the tests know — during an incident:
rag is replicas short and one of its engines is down, so LLMEngineDown pages. Where VictoriaMetrics is installed,
that Prometheus remote-writes everything (scrapes, recorded rules, ALERTS) into the session's, which the console
then reads as a long-term store."""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from goodput.analyzer.ingest import ingest
from goodput.analyzer.store import connect
from goodput.demo.stack import start_alertmanager, start_prometheus
from goodput.foundation.http import Server, metrics_routes
from goodput.monitoring.rulegen import build, load_spec, write
from goodput.simulator.config import parse_fleet
from goodput.simulator.run import simulate, write_outputs
from tests.conftest import REPO, free_port_block, require

RELEASE_AT_S = 1800.0
FLEET = {
    "name": "console-test", "start_time": "2026-11-23T08:00:00Z", "seed": 5,
    "deployments": [
        {"name": "rag", "model": "Llama-3.1-8B", "gpu": "H100-80GB-SXM", "tp": 1, "replicas": 2,
         "router": "least-outstanding", "engine": {"max_num_seqs": 64, "max_queue_time_s": 3600}},
        {"name": "chat", "model": "Llama-3.1-8B", "gpu": "H100-80GB-SXM", "tp": 1, "replicas": 1,
         "router": "least-outstanding", "engine": {"max_num_seqs": 64, "max_queue_time_s": 3600}},
    ],
    "workloads": [
        {"name": "rag", "scene": "rag", "route": "rag", "tier": "P1", "deployment": "rag",
         "tenants": {"hooli": 0.7, "initech": 0.3},
         "input_tokens": {"p50": 3000, "p95": 8000, "p99": 12000, "max": 14000},
         "output_tokens": {"p50": 200, "p95": 500, "p99": 700, "max": 900}, "max_tokens": 1024,
         "arrival": {"process": "poisson", "rate": 2}},
        {"name": "rag-chat", "scene": "chat", "route": "chat", "tier": "P0", "deployment": "rag",
         "tenants": {"acme": 1.0}, "input_tokens": {"p50": 600, "p95": 2000, "p99": 3000, "max": 4000},
         "output_tokens": {"p50": 150, "p95": 400, "p99": 600, "max": 800}, "max_tokens": 1024,
         "arrival": {"process": "poisson", "rate": 0.5}},  # a second tier on rag, so each filter selects alone
        {"name": "chat", "scene": "chat", "route": "chat", "tier": "P0", "deployment": "chat",
         "tenants": {"acme": 1.0}, "input_tokens": {"p50": 600, "p95": 2000, "p99": 3000, "max": 4000},
         "output_tokens": {"p50": 150, "p95": 400, "p99": 600, "max": 800}, "max_tokens": 1024,
         "arrival": {"process": "poisson", "rate": 2}},
    ],
    "events": [{"at": RELEASE_AT_S, "kind": "release", "deployment": "rag", "release_kind": "prompt_template",
                "from": "rag-v1", "to": "rag-v2", "note": "two more passages", "effects": {"input_scale": 2.0}}],
}


@pytest.fixture(scope="session")
def store(tmp_path_factory) -> Path:
    """The simulated hour's directory: db.duckdb (ingested), releases.yaml, requests.parquet."""
    out = tmp_path_factory.mktemp("console-store")
    write_outputs(simulate(parse_fleet(FLEET, "console-test.yaml"), 3600.0), out)
    con = connect(out / "db.duckdb")
    ingest(con, [out / "requests.parquet"])
    con.close()
    return out


# the small exporter: every value known, the counters growing at a known rate
RULE_SCALE = 1 / 30  # rule durations and windows, scaled so the live tests run in seconds
KV = {"rag-0": 0.5, "rag-1": 0.9, "chat-0": 0.25}
DOWN = "rag-1"  # its engine does not answer: LLMEngineDown pages for rag
TOKENS_PER_S = {("rag", "P1", "rag"): 25_000.0, ("chat", "P0", "chat"): 2_000.0}


def exposition(t0: float) -> str:
    dt = time.monotonic() - t0
    lines = ["# TYPE llm_kv_cache_usage_ratio gauge"]
    lines += [f'llm_kv_cache_usage_ratio{{model="m",deployment="{r.rsplit("-", 1)[0]}",replica="{r}"}} {v}'
              for r, v in KV.items()]
    lines += ["# TYPE llm_engine_up gauge"]
    lines += [f'llm_engine_up{{model="m",deployment="{r.rsplit("-", 1)[0]}",replica="{r}"}} {int(r != DOWN)}'
              for r in KV]
    lines += ["# TYPE llm_deployment_replicas gauge",
              'llm_deployment_replicas{deployment="rag",state="available"} 2',
              'llm_deployment_replicas{deployment="chat",state="available"} 1',
              "# TYPE llm_capacity_replica_goodput_tokens_per_second gauge",
              'llm_capacity_replica_goodput_tokens_per_second{deployment="rag"} 9000',
              'llm_capacity_replica_goodput_tokens_per_second{deployment="chat"} 12000',
              "# TYPE llm_gateway_input_tokens_total counter"]
    lines += [f'llm_gateway_input_tokens_total{{model="m",deployment="{d}",tenant="t",tier="{t}",route="{r}"}} '
              f"{rate * dt:.3f}" for (d, t, r), rate in TOKENS_PER_S.items()]
    lines += ["# TYPE llm_gateway_output_tokens_total counter"]  # none: the demand is the input tokens alone
    lines += [f'llm_gateway_output_tokens_total{{model="m",deployment="{d}",tenant="t",tier="{t}",route="{r}"}} 0'
              for d, t, r in TOKENS_PER_S]
    return "\n".join(lines) + "\n"


@dataclass
class Live:
    prometheus: str
    alertmanager: str
    vm: object | None = None  # tests.victoria.VictoriaMetrics, holding what the Prometheus remote-wrote

    def query(self, expr: str) -> list[dict]:
        return httpx.get(f"{self.prometheus}/api/v1/query", params={"query": expr}, timeout=5).json()["data"]["result"]

    def alerts(self) -> list[dict]:
        return httpx.get(f"{self.alertmanager}/api/v2/alerts", timeout=5).json()


@pytest.fixture(scope="session")
def live(tmp_path_factory, request) -> Iterator[Live]:
    """Prometheus (rules at 1/30 of their durations, 1 s scrapes) and Alertmanager on free ports, with the recorded
    series the Overview reads already present."""
    require("prometheus", "prometheus-alertmanager")
    from tests import victoria

    vm = request.getfixturevalue("victoria_metrics") if shutil.which(victoria.BINARY) else None
    work = tmp_path_factory.mktemp("console-live")
    base = free_port_block(3)
    spec = load_spec(REPO / "rules" / "slos.yaml")
    spec.alertmanager["receivers"] = {r: f"http://127.0.0.1:{base + 2}/{r}" for r in ("pager", "ticket", "log")}
    write(spec, work / "rules", RULE_SCALE)
    (work / "alertmanager.yaml").write_text(build(spec)["alertmanager.yaml"])
    t0 = time.monotonic()
    exporter = Server("127.0.0.1", base + 2, metrics_routes(lambda: exposition(t0)))
    exporter.start()
    am = start_alertmanager(work / "am", base + 1, work / "alertmanager.yaml")
    prom = start_prometheus(work / "prom", base, {"llm-engine": [f"127.0.0.1:{base + 2}"]}, work / "rules",
                            f"127.0.0.1:{base + 1}", interval="1s", resend_delay="1s",
                            remote_write=[victoria.remote_write_config(vm)] if vm else None)
    try:
        am.ready("/-/ready")
        prom.ready("/-/ready")
        live = Live(prom.url, am.url, vm)
        deadline = time.monotonic() + 90
        while not live.query("deployment:llm_replicas_required:ceil"):
            assert time.monotonic() < deadline, "Prometheus recorded no deployment:llm_replicas_required:ceil in 90 s"
            time.sleep(1)
        # a rate over a window longer than the series is extrapolated from its first sample only half a scrape back,
        # so it reads low until the recording rules' 5m window (10 s here) is full of scrapes
        time.sleep(300 * RULE_SCALE + 2)
        while not any(a["labels"].get("alertname") == "LLMEngineDown" for a in live.alerts()):
            assert time.monotonic() < deadline + 30, "LLMEngineDown reached no Alertmanager in 120 s"
            time.sleep(1)
        yield live
    finally:
        prom.stop()
        am.stop()
        exporter.stop()
