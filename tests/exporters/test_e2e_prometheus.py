"""End to end: the live simulated fleet -> engine and request exporters -> a real Prometheus on loopback.

Beyond plausible ranges, the fleet is frozen at the end and what Prometheus holds is compared with
what the fleet recorded for the same requests: counts exactly, sums to floating-point precision, so
a unit slip or a lost or doubled sample anywhere on the way fails.
"""

import copy
import math
import subprocess
import time
from collections import Counter, defaultdict

import httpx

from goodput.demo.stack import Process
from goodput.exporters.config import load_targets
from goodput.exporters.engine import EngineExporter
from goodput.exporters.requests import RequestMetrics, TraceReceiver
from goodput.exporters.trace_store import TraceStore
from goodput.foundation.http import Server, metrics_routes
from goodput.simulator.live import LiveFleet
from goodput.simulator.span_sink import SpanSink
from tests.conftest import BASE_DEPLOYMENT, BASE_WORKLOAD, free_port_block, make_fleet, needs

pytestmark = needs("prometheus")


def _query(base, q):
    r = httpx.get(f"{base}/api/v1/query", params={"query": q}, timeout=5)
    r.raise_for_status()
    return r.json()["data"]["result"]


def _wait(base, q, ok, timeout=40.0):
    deadline = time.monotonic() + timeout
    res = []
    while time.monotonic() < deadline:
        try:
            res = _query(base, q)
        except httpx.HTTPError:  # Prometheus still starting
            res = []
        if ok(res):
            return res
        time.sleep(0.5)
    raise AssertionError(f"{q} never satisfied the check; last result {res}")


class RecordingSink(SpanSink):
    """The fleet's span sink, keeping every finished request the fleet hands it (what the fleet recorded)."""

    def __init__(self, *a, **kw) -> None:
        super().__init__(*a, **kw)
        self.recorded = []

    def add(self, reqs) -> None:
        self.recorded.extend(reqs)
        super().add(reqs)


def _by(res, label):
    return {x["metric"][label]: float(x["value"][1]) for x in res}


def _freeze_and_compare(base, live, sink):
    """Stop the fleet's clock, send its last spans, and check Prometheus against the recorded requests."""
    live.stop_event.set()
    live.engine_thread.join(timeout=30)
    assert not live.engine_thread.is_alive(), "the fleet's engine loop did not stop"
    with live.lock:
        sink.add(list(live.fleet.done))
        live.fleet.done.clear()
    sink.close()  # every recorded request is posted as spans now
    names = {d.index: d.cfg.name for d in live.fleet.deployments}
    finished = [r for r in sink.recorded if r.finish_reason in ("stop", "length")]
    assert len(finished) > 20, f"only {len(finished)} finished requests; the comparison would say little"
    count: Counter = Counter()
    e2e, queue = defaultdict(float), defaultdict(float)
    reasons: Counter = Counter()
    for r in finished:
        replica = f"{names[r.deployment]}-{r.replica}"
        count[replica] += 1
        e2e[replica] += r.last_token - r.queue_start  # what the engine observes: up to its last token
        queue[replica] += r.scheduled - r.queue_start
        reasons[(replica, r.finish_reason)] += 1

    got = _by(_wait(base, "llm_e2e_request_latency_seconds_count", lambda r: _by(r, "replica") == dict(count)),
              "replica")
    assert got == dict(count)
    e2e_sum = _by(_query(base, "llm_e2e_request_latency_seconds_sum"), "replica")
    assert e2e_sum.keys() == e2e.keys()
    for replica, s in e2e.items():
        assert math.isclose(e2e_sum[replica], s, rel_tol=1e-9), (replica, e2e_sum[replica], s)
    queue_sum = _by(_query(base, "llm_queue_time_seconds_sum"), "replica")
    for replica, s in queue.items():
        assert math.isclose(queue_sum[replica], s, rel_tol=1e-9, abs_tol=1e-9), (replica, queue_sum[replica], s)
    finished_total = {(x["metric"]["replica"], x["metric"]["finished_reason"]): float(x["value"][1])
                      for x in _query(base, 'llm_requests_finished_total{finished_reason=~"stop|length"}')}
    assert {k: v for k, v in finished_total.items() if v} == dict(reasons)

    # the request path: one gateway request per request the fleet recorded, none lost, none doubled
    total = len(sink.recorded)
    res = _wait(base, "sum(llm_gateway_requests_total)", lambda r: bool(r) and float(r[0]["value"][1]) == total)
    assert float(res[0]["value"][1]) == total


def test_fleet_to_exporters_to_prometheus(tmp_path):
    dep = copy.deepcopy(BASE_DEPLOYMENT)
    rag = dict(copy.deepcopy(BASE_DEPLOYMENT), name="rag", replicas=1, router="kv-aware")
    chat = copy.deepcopy(BASE_WORKLOAD)
    chat["arrival"]["rate"] = 6.0
    wrag = dict(copy.deepcopy(BASE_WORKLOAD), name="rag", scene="rag", tier="P1", deployment="rag",
                tenants={"hooli": 1.0}, arrival={"process": "poisson", "rate": 2.0})
    cfg = make_fleet(deployments=[dep, rag], workloads=[chat, wrag])

    metrics = RequestMetrics()
    store = TraceStore(tmp_path / "store", flush_interval_s=1.0).start()
    recv = TraceReceiver(metrics, store)
    otlp = Server("127.0.0.1", 0, {("POST", "/v1/traces"): recv.route}).start()
    req_srv = Server("127.0.0.1", 0, metrics_routes(lambda: metrics.render(store))).start()
    sink = RecordingSink(cfg, 1, f"{otlp.url}/v1/traces", None, interval_s=0.5)
    live = LiveFleet(cfg, base_port=free_port_block(3), targets=tmp_path / "targets.yaml", sink=sink)
    live.start()
    engine = EngineExporter(load_targets(tmp_path / "targets.yaml"), interval_s=1.0)
    engine.start()
    eng_srv = Server("127.0.0.1", 0, metrics_routes(engine.render)).start()

    prom_port = free_port_block(1)
    (tmp_path / "prometheus.yml").write_text(f"""
global: {{scrape_interval: 1s, evaluation_interval: 1s}}
scrape_configs:
  - job_name: engine
    static_configs: [{{targets: ['{eng_srv.url.removeprefix("http://")}']}}]
  - job_name: requests
    static_configs: [{{targets: ['{req_srv.url.removeprefix("http://")}']}}]
""")
    prom = subprocess.Popen(["prometheus", f"--config.file={tmp_path / 'prometheus.yml'}",
                             f"--storage.tsdb.path={tmp_path / 'tsdb'}", f"--web.listen-address=127.0.0.1:{prom_port}"],
                            stdout=subprocess.DEVNULL, stderr=(tmp_path / "prometheus.log").open("w"))
    base = f"http://127.0.0.1:{prom_port}"
    try:
        # ready first: its query API answers 503 in plain text until the TSDB is open
        Process("prometheus", base, prom, tmp_path / "prometheus.log").ready("/-/ready")
        up = _wait(base, "sum by (deployment) (llm_engine_up)", lambda r: len(r) == 2 and all(x["value"][1] != "0" for x in r))
        assert {x["metric"]["deployment"]: float(x["value"][1]) for x in up} == {"chat": 2.0, "rag": 1.0}
        avail = _wait(base, 'llm_deployment_replicas{state="available"}', lambda r: len(r) == 2)
        assert {x["metric"]["deployment"]: float(x["value"][1]) for x in avail} == {"chat": 2.0, "rag": 1.0}
        per_replica = _wait(base, "llm_generation_tokens_total", lambda r: len(r) == 3)
        assert {x["metric"]["replica"] for x in per_replica} == {"chat-0", "chat-1", "rag-0"}
        assert all(x["metric"]["model"] == "Llama-3.1-8B" for x in per_replica)
        tenants = _wait(base, "sum by (tenant, deployment) (llm_gateway_requests_total)",
                        lambda r: {x["metric"]["tenant"] for x in r} >= {"acme", "globex", "hooli"})
        by = {(x["metric"]["tenant"], x["metric"]["deployment"]) for x in tenants}
        assert ("hooli", "rag") in by and ("acme", "chat") in by and ("hooli", "chat") not in by
        p90 = _wait(base, "histogram_quantile(0.9, sum by (le, deployment) "
                          "(rate(llm_gateway_time_to_first_token_seconds_bucket[20s])))",
                    lambda r: any(x["value"][1] not in ("NaN", "+Inf") for x in r))
        assert all(0 < float(x["value"][1]) < 5 for x in p90 if x["value"][1] != "NaN")
        kv = _wait(base, "max by (deployment) (llm_kv_cache_usage_ratio)", lambda r: len(r) == 2)
        assert all(0 <= float(x["value"][1]) <= 1 for x in kv)
        _wait(base, "sum(llm_e2e_request_latency_seconds_count)", lambda r: bool(r) and float(r[0]["value"][1]) > 20)
        _freeze_and_compare(base, live, sink)
    finally:
        prom.terminate()
        prom.wait(timeout=20)
        engine.stop()
        live.close()
        for s in (eng_srv, req_srv, otlp):
            s.stop()
        store.close()
