"""rules/dcgm.rules.yaml: fresh, lint-clean, unit-tested by promtool, and the GPU panels fed by dcgm-exporter alone.

The live tests run a real Prometheus that scrapes tiny HTTP servers: one serves a dcgm-exporter dump in Kubernetes
mode (the real T4 capture re-labelled as five GPUs with pods), one a kube-state-metrics dump of those pods, and in the
second test goodput's own GPU exporter for one of those GPUs. With these rules and gpu.rules.yaml loaded, every GPU
panel query of the generated GPU dashboard (read from dashboards/gpus.json, not retyped) returns one series per
attributed GPU, labelled with its deployment, and no GPU twice.
"""

import contextlib
import json
import subprocess
import time
import urllib.parse
import urllib.request

import yaml

from goodput.contracts import dashboard_ids as ids
from goodput.contracts.catalog import names
from goodput.demo.stack import Process
from goodput.exporters.fake_nvml import FakeNvml, load_fake
from goodput.exporters.gpu import GpuCollector
from goodput.exporters.podresources import PodAttribution, PodResourcesClient
from goodput.foundation.http import Server, metrics_routes
from goodput.monitoring.dcgmrules import FILE, build
from goodput.monitoring.rulegen import load_spec
from goodput.review.queries import build_queries
from tests.conftest import REPO, free_port_block, needs
from tests.exporters.test_gpu_pods import Kubelet
from tests.monitoring.test_rules import _metric_names

RULES = REPO / "rules"
SAMPLES = REPO / "tests" / "fixtures" / "gpu_samples"
needs_promtool = needs("promtool")
needs_prometheus = needs("prometheus")
DCGM_UUID = "GPU-20c56d28-0da5-6d26-a36a-e7af1ce2586"  # + the GPU index, in dcgm_exporter_k8s_five_gpus.prom


def test_generated_file_is_fresh():
    fresh = build(load_spec(RULES / "slos.yaml"))[FILE]
    assert (RULES / FILE).read_text() == fresh, f"{FILE} is stale: run `goodput rules generate`"


def test_it_records_catalog_families_and_reads_only_dcgm_ksm_and_its_own():
    rules = [r for g in yaml.safe_load((RULES / FILE).read_text())["groups"] for r in g["rules"]]
    recorded = {r["record"] for r in rules}
    assert {n for n in recorded if n.startswith("llm_")} <= names()
    assert "llm_gpu_up" not in recorded  # the double-count guard reads it: recording it would read its own output
    for r in rules:
        read = _metric_names(r["expr"])
        assert all(n.startswith(("DCGM_FI_", "kube_")) or n in recorded or n == "llm_gpu_up" for n in read), read
        if r["record"].startswith("llm_"):  # every DCGM-fed part is guarded
            assert "unless on (uuid) llm_gpu_up" in r["expr"], r["record"]


@needs_promtool
def test_promtool_check_rules():
    r = subprocess.run(["promtool", "check", "rules", "--lint=all", "--lint-fatal", str(RULES / FILE)],
                       capture_output=True, text=True)
    assert r.returncode == 0 and "SUCCESS" in r.stdout, r.stdout + r.stderr


@needs_promtool
def test_promtool_unit_tests():
    r = subprocess.run(["promtool", "test", "rules", "dcgm.test.yaml"], capture_output=True, text=True,
                       cwd=RULES / "tests")
    assert r.returncode == 0 and "SUCCESS" in r.stdout, r.stdout + r.stderr


def _query(base: str, q: str) -> list[dict]:
    url = f"{base}/api/v1/query?{urllib.parse.urlencode({'query': q})}"
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.loads(r.read())["data"]["result"]


def _wait(base: str, q: str, ok, timeout_s: float = 45.0) -> list[dict]:
    deadline, res = time.monotonic() + timeout_s, []
    while time.monotonic() < deadline:
        try:
            res = _query(base, q)
        except OSError:  # Prometheus still starting
            res = []
        if ok(res):
            return res
        time.sleep(0.5)
    raise AssertionError(f"{q} never satisfied the check; last result {res}")


def _gpu_panel_queries() -> dict[str, str]:
    board = json.loads((REPO / "dashboards" / "gpus.json").read_text())
    assert board["uid"] == ids.GPUS.uid
    return {f"{p['id']} {p['title']}/{i}": t["expr"].replace("$deployment", ".*").replace("$model", ".*")
            for p in board["panels"] for i, t in enumerate(p.get("targets", []))}


@contextlib.contextmanager
def _prometheus(tmp_path, routes: dict[str, dict]):
    """A real Prometheus with these rules and gpu.rules.yaml, scraping one loopback server per job in ``routes``."""
    servers = {job: Server("127.0.0.1", 0, r).start() for job, r in routes.items()}
    port = free_port_block(1)
    jobs = "".join(f"  - job_name: {job}\n    static_configs: [{{targets: ['{s.url.removeprefix('http://')}']}}]\n"
                   for job, s in servers.items())
    (tmp_path / "prometheus.yml").write_text("global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
                                             f"rule_files: ['{RULES / FILE}', '{RULES / 'gpu.rules.yaml'}']\n"
                                             f"scrape_configs:\n{jobs}")
    prom = subprocess.Popen(["prometheus", f"--config.file={tmp_path / 'prometheus.yml'}",
                             f"--storage.tsdb.path={tmp_path / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}"],
                            stdout=subprocess.DEVNULL, stderr=(tmp_path / "prometheus.log").open("w"))
    try:
        # ready first: its query API answers 503 in plain text until the TSDB is open
        Process("prometheus", f"http://127.0.0.1:{port}", prom, tmp_path / "prometheus.log").ready("/-/ready")
        yield f"http://127.0.0.1:{port}"
    finally:
        prom.terminate()
        prom.wait(timeout=20)
        for srv in servers.values():
            srv.stop()


def _dumps() -> dict[str, dict]:
    texts = {job: (SAMPLES / f"{name}.prom").read_text() for job, name in
             (("dcgm", "dcgm_exporter_k8s_five_gpus"), ("kube-state-metrics", "kube_state_metrics_pods"))}
    return {job: metrics_routes(lambda t=text: t) for job, text in texts.items()}


def _panels_per_deployment(base: str, want: dict[str, int]) -> dict[str, dict[str, float]]:
    """Each GPU panel query's answer, checked to hold one series per attributed GPU (``want``: GPUs per
    deployment); returns every panel's values by uuid (panel 7: by deployment)."""
    gpus = _wait(base, "count by (deployment) (llm_gpu_deployment_info)", lambda r: len(r) == len(want))
    assert {x["metric"]["deployment"]: int(x["value"][1]) for x in gpus} == want
    empty, values = [], {}
    for title, expr in _gpu_panel_queries().items():
        # every series, not the first: goodput's own exporter's GPU is scraped before the rules record DCGM's
        n = len(want) if title.startswith("7 ") else sum(want.values())
        res = _wait(base, expr, lambda r, n=n: len(r) >= n, timeout_s=15) if "XID" not in title else _query(base, expr)
        if not res:
            empty.append(title)
            continue
        key = "deployment" if title.startswith("7 ") else "uuid"  # 7: the mean of each deployment's GPUs
        values[title] = {x["metric"][key]: round(float(x["value"][1]), 3) for x in res}
        if key == "uuid":  # one series per attributed GPU, labelled with its deployment and replica
            assert {x["metric"].get("deployment") for x in res} == set(want), (title, res)
            assert len(res) == sum(want.values()) == len(values[title]), (title, res)
    assert empty == ["6 XID errors/0"]  # XID events only: none in the dumps
    return values


@needs_prometheus
def test_gpu_panels_and_review_read_dcgm_exporter_alone_per_deployment(tmp_path):
    want = {"chat-8b-h100": 2, "rag-70b": 1, "embed": 1}  # GPUs per deployment; GPU 4 has no pod
    with _prometheus(tmp_path, _dumps()) as base:
        values = _panels_per_deployment(base, want)
        assert values["7 Utilisation per deployment/0"] == {"chat-8b-h100": 0.2, "rag-70b": 0.5, "embed": 0.7}
        review = next(q for q in build_queries(0.0, 1, []) if q.key == "gpus")
        per_replica = _query(base, review.expr)
        assert {(x["metric"]["deployment"], x["metric"]["replica"]): int(x["value"][1]) for x in per_replica} == {
            ("chat-8b-h100", "chat-8b-7d4b9c6f5-q7x2k"): 2, ("rag-70b", "rag-70b-6c8d7f9b4-m4n8p"): 1,
            ("embed", "embed-0"): 1}


@needs_prometheus
def test_with_goodputs_exporter_on_one_gpu_it_wins_and_nothing_counts_twice(tmp_path):
    """goodput's GPU exporter (fake NVML, pod labels from a gRPC kubelet, no --mapping) reports GPU 2 beside
    dcgm-exporter: GPU 2 appears once, with goodput's values, still attributed to its deployment by its pod."""
    kubelet = Kubelet(tmp_path / "kubelet.sock")
    kubelet.pods = [("llm", "rag-70b-6c8d7f9b4-m4n8p", "vllm", "nvidia.com/gpu", [f"{DCGM_UUID}2"])]
    kubelet.start()
    fake = {"driver_version": "550.54.15", "hostname": "424773df46e0",
            "gpus": [{"name": "Tesla T4", "uuid": f"{DCGM_UUID}2", "utilization": 0.9}]}
    collector = GpuCollector(FakeNvml(load_fake(fake, "fake.yaml")), hostname="424773df46e0",
                             pods=PodAttribution(PodResourcesClient(kubelet.path)))
    collector.init()
    collector.sample()
    try:
        with _prometheus(tmp_path, {**_dumps(), "goodput-gpu": metrics_routes(collector.render)}) as base:
            # the DCGM rules record GPU 2 until goodput's exporter is scraped; once its llm_gpu_up is in, the guard
            # drops DCGM's copy at the next evaluations (1 s apart): read the panels only after three of them
            _wait(base, f'llm_gpu_up{{uuid="{DCGM_UUID}2"}}', lambda r: len(r) == 1)
            time.sleep(3)
            values = _panels_per_deployment(base, {"chat-8b-h100": 2, "rag-70b": 1, "embed": 1})
            assert values["2 GPU utilisation/0"][f"{DCGM_UUID}2"] == 0.9  # goodput's, not DCGM's 0.5
            assert values["7 Utilisation per deployment/0"]["rag-70b"] == 0.9
            assert _query(base, f'llm_gpu_utilization_ratio{{uuid="{DCGM_UUID}2",job=""}}') == []
    finally:
        kubelet.stop()
