"""Live: a fleet scraped the way `goodput deploy kubernetes` has a cluster scrape it pages, and lets go.

No engine exporter anywhere. A real Prometheus scrapes each simulated vLLM replica's /metrics directly through the
PodMonitor's own relabelings (Kubernetes discovery cannot run here, so a file_sd target carries the meta labels it
would give the engine pod), the request exporter for the gateway's spans, and evaluates exactly the PrometheusRules
`deploy kubernetes --plan` wrote: the generated rules (durations scaled by 1/30 for 1 s scrapes), the normalization
rules and the capacity plan. LLMQueueWaitRisingReplicasShort fires from replicas counted by `up` and the plan's
recorded goodput; LLMEngineDown fires when an engine pod stops answering and resolves when Kubernetes replaces the pod;
the queue page resolves once the re-applied plan says the replicas suffice.
"""

import copy
import json
import re
import subprocess

import httpx
import pytest
import yaml

from goodput.cli import main
from goodput.demo.stack import Process
from goodput.deploy.kubernetes import DEPLOYMENT_LABEL
from goodput.exporters.requests import RequestMetrics, TraceReceiver
from goodput.exporters.trace_store import TraceStore
from goodput.foundation.http import Server, metrics_routes
from goodput.monitoring import normrules
from goodput.monitoring.rulegen import load_spec, write
from goodput.simulator.live import LiveFleet
from goodput.simulator.span_sink import SpanSink
from tests.conftest import BASE_DEPLOYMENT, BASE_WORKLOAD, REPO, free_port_block, make_fleet, needs
from tests.deploy.test_kubernetes import IMAGE, _snake
from tests.monitoring.test_live_alerting import Deadline

pytestmark = [needs("prometheus"), pytest.mark.slow]

SCALE = 1 / 30
BUDGET_S = 260
SHORT_PLAN = 500.0  # tokens/s per replica: far less than the arrivals need, so replicas are short
AMPLE_PLAN = 1e9  # one replica serves everything


def _deploy(rules, out, goodput: float) -> dict:
    """`goodput deploy kubernetes --plan` over the scaled rules: object name -> object, as kubectl would apply them."""
    (out.parent / "plan.yaml").write_text(yaml.safe_dump(
        {"plan_version": 1, "deployments": {"chat": {"replica_goodput_tokens_per_second": goodput}}}))
    assert main(["deploy", "kubernetes", "--out", str(out), "--rules", str(rules), "--image", IMAGE,
                 "--dashboards", str(REPO / "dashboards"), "--plan", str(out.parent / "plan.yaml"),
                 "--allow-loopback-receivers"]) == 0
    return {(o["kind"], o["metadata"]["name"]): o for p in sorted(out.glob("*.yaml"))
            for o in yaml.safe_load_all(p.read_text()) if o["kind"] != "Kustomization"}


def _rule_files(objects: dict, into) -> list[str]:
    """Each PrometheusRule's groups as the operator hands them to Prometheus: one rule file per object."""
    into.mkdir(exist_ok=True)
    paths = []
    for (kind, name), o in objects.items():
        if kind == "PrometheusRule":
            (into / f"{name}.yaml").write_text(yaml.safe_dump(o["spec"]))
            paths.append(str(into / f"{name}.yaml"))
    return paths


def _pod_targets(path, replicas: list[dict]) -> None:
    """The engine pods Kubernetes discovery would list: each with its name and its goodput.dev/deployment label."""
    label = "__meta_kubernetes_pod_label_" + re.sub(r"[^a-zA-Z0-9_]", "_", DEPLOYMENT_LABEL)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps([{"targets": [r["url"].removeprefix("http://")],
                                "labels": {"__meta_kubernetes_pod_name": r["name"], label: r["deployment"]}}
                               for r in replicas]))
    tmp.replace(path)


def _firing(base: str, alert: str) -> list[dict]:
    r = httpx.get(f"{base}/api/v1/alerts", timeout=5)
    r.raise_for_status()
    return [a["labels"] for a in r.json()["data"]["alerts"]
            if a["labels"]["alertname"] == alert and a["state"] == "firing"]


@pytest.mark.timeout(BUDGET_S + 60)
def test_engines_scraped_directly_fire_and_resolve_the_queue_page_and_engine_down(tmp_path):
    deadline = Deadline(BUDGET_S)
    rules = tmp_path / "rules"
    write(load_spec(REPO / "rules" / "slos.yaml"), rules, scale=SCALE)
    for name, text in normrules.build().items():
        (rules / name).write_text(text)
    objects = _deploy(rules, tmp_path / "k8s", SHORT_PLAN)
    # the engine exporter is written but reads nothing: what fires below comes from the direct scrape
    assert json.loads(objects[("ConfigMap", "goodput-engine-targets")]["data"]["targets.yaml"]) == []
    relabel = [_snake(r) for r in objects[("PodMonitor", "goodput-vllm")]["spec"]["podMetricsEndpoints"][0]["relabelings"]]

    dep = copy.deepcopy(BASE_DEPLOYMENT)
    dep.update(replicas=3)
    dep["engine"].update(max_num_seqs=6, max_waiting_requests=100_000, max_queue_time_s=3600)
    wl = copy.deepcopy(BASE_WORKLOAD)
    wl["arrival"]["rate"] = 25.0  # far more than three replicas of six sequences can serve
    cfg = make_fleet(deployments=[dep], workloads=[wl])

    metrics = RequestMetrics()
    store = TraceStore(tmp_path / "store", flush_interval_s=1.0).start()
    otlp = Server("127.0.0.1", 0, {("POST", "/v1/traces"): TraceReceiver(metrics, store).route}).start()
    req_srv = Server("127.0.0.1", 0, metrics_routes(lambda: metrics.render(store))).start()
    sink = SpanSink(cfg, 1, f"{otlp.url}/v1/traces", None, interval_s=0.5)
    # below the ephemeral range: the replacement replica binds its port a minute in
    live = LiveFleet(cfg, base_port=free_port_block(4, below_ephemeral=True), sink=sink)
    live.start()
    pods = tmp_path / "pods.json"
    _pod_targets(pods, live.replicas())

    port = free_port_block(1)
    config = {"global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
              "rule_files": _rule_files(objects, tmp_path / "prometheusrules"),
              "scrape_configs": [
                  {"job_name": "goodput/goodput-vllm", "file_sd_configs": [{"files": [str(pods)],
                                                                           "refresh_interval": "1s"}],
                   "relabel_configs": relabel},
                  {"job_name": "llm-requests", "static_configs": [{"targets": [req_srv.url.removeprefix("http://")]}]}]}
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    proc = subprocess.Popen(["prometheus", f"--config.file={tmp_path / 'prometheus.yml'}",
                             f"--storage.tsdb.path={tmp_path / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}",
                             "--web.enable-lifecycle"],
                            stdout=subprocess.DEVNULL, stderr=(tmp_path / "prometheus.log").open("w"))
    base = f"http://127.0.0.1:{port}"
    try:
        Process("prometheus", base, proc, tmp_path / "prometheus.log").ready("/-/ready")
        page = deadline.wait(lambda: _firing(base, "LLMQueueWaitRisingReplicasShort"), 150, "the queue page")[0]
        assert page["deployment"] == "chat" and page["severity"] == "page"
        assert not _firing(base, "LLMEngineDown")
        # no engine exporter: not one llm_engine_up or exporter-counted replica series exists
        for name in ("llm_engine_up", "llm_deployment_replicas"):
            got = httpx.get(f"{base}/api/v1/query", params={"query": name}).json()["data"]["result"]
            assert got == [], (name, got)

        live.kill_replica("chat", 2)  # its pod stays listed (the container crashed), its scrape fails
        dead = next(r["name"] for r in live.replicas() if not r["alive"])
        down = deadline.wait(lambda: _firing(base, "LLMEngineDown"), 60, "the engine-down page")[0]
        assert down["replica"] == dead and down["deployment"] == "chat"

        new = live.add_replica("chat")  # Kubernetes replaces the pod: the dead one leaves discovery
        _pod_targets(pods, [r for r in live.replicas() if r["alive"]])
        assert new["name"] != dead
        deadline.wait(lambda: not _firing(base, "LLMEngineDown"), 60, "the engine-down page to resolve")

        assert _firing(base, "LLMQueueWaitRisingReplicasShort")  # still short: the plan has not changed
        objects = _deploy(rules, tmp_path / "k8s", AMPLE_PLAN)  # the plan re-applied: one replica is enough
        assert _rule_files(objects, tmp_path / "prometheusrules") == config["rule_files"]
        httpx.post(f"{base}/-/reload", timeout=10).raise_for_status()
        deadline.wait(lambda: not _firing(base, "LLMQueueWaitRisingReplicasShort"), 60, "the queue page to resolve")
        # it let go because the replicas suffice, not because the queue stopped: the arrivals still outrun them
        waiting = httpx.get(f"{base}/api/v1/query", params={"query": "deployment:llm_requests_waiting:sum"}).json()
        assert float(waiting["data"]["result"][0]["value"][1]) > 0
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        live.close()
        for s in (req_srv, otlp):
            s.stop()
        store.close()
