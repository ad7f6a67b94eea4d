"""rules/dcgm.rules.yaml: fresh, lint-clean, unit-tested by promtool, and the GPU panels fed by dcgm-exporter alone.

The live test runs a real Prometheus that scrapes two tiny HTTP servers: one serves a dcgm-exporter dump in Kubernetes
mode (the real T4 capture re-labelled as five GPUs with pods), the other a kube-state-metrics dump of those pods. With
these rules and gpu.rules.yaml loaded, every per-GPU panel query of the generated GPU dashboard (read from
dashboards/*.json, not retyped) returns a series per deployment.
"""

import json
import subprocess
import time
import urllib.parse
import urllib.request

import yaml

from capacity.review.queries import build_queries
from exporters.catalog import names
from goodput import dashboard_ids as ids
from goodput.dcgmrules import FILE, build
from goodput.foundation.http import Server, metrics_routes
from tests.conftest import REPO, free_port_block, needs
from tests.rules.test_rules import _metric_names

RULES = REPO / "rules"
SAMPLES = REPO / "tests" / "fixtures" / "gpu_samples"
needs_promtool = needs("promtool")
needs_prometheus = needs("prometheus")


def test_generated_file_is_fresh():
    assert (RULES / FILE).read_text() == build()[FILE], f"{FILE} is stale: run `goodput rules generate`"


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


@needs_prometheus
def test_gpu_panels_and_review_read_dcgm_exporter_alone_per_deployment(tmp_path):
    dumps = {name: (SAMPLES / f"{name}.prom").read_text()
             for name in ("dcgm_exporter_k8s_five_gpus", "kube_state_metrics_pods")}
    servers = {name: Server("127.0.0.1", 0, metrics_routes(lambda t=text: t)).start() for name, text in dumps.items()}
    port = free_port_block(1)
    targets = {name: s.url.removeprefix("http://") for name, s in servers.items()}
    (tmp_path / "prometheus.yml").write_text(f"""
global: {{scrape_interval: 1s, evaluation_interval: 1s}}
rule_files: ['{RULES / FILE}', '{RULES / "gpu.rules.yaml"}']
scrape_configs:
  - job_name: dcgm
    static_configs: [{{targets: ['{targets["dcgm_exporter_k8s_five_gpus"]}']}}]
  - job_name: kube-state-metrics
    static_configs: [{{targets: ['{targets["kube_state_metrics_pods"]}']}}]
""")
    prom = subprocess.Popen(["prometheus", f"--config.file={tmp_path / 'prometheus.yml'}",
                             f"--storage.tsdb.path={tmp_path / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    base = f"http://127.0.0.1:{port}"
    want = {"chat-8b-h100": 2, "rag-70b": 1, "embed": 1}  # GPUs per deployment; GPU 4 has no pod
    try:
        gpus = _wait(base, "count by (deployment) (llm_gpu_deployment_info)", lambda r: len(r) == len(want))
        assert {x["metric"]["deployment"]: int(x["value"][1]) for x in gpus} == want
        empty = []
        for title, expr in _gpu_panel_queries().items():
            res = _wait(base, expr, lambda r: len(r) > 0, timeout_s=15) if "XID" not in title else _query(base, expr)
            per = {x["metric"].get("deployment") for x in res}
            if not res:
                empty.append(title)
            elif title.startswith("7 "):  # one series per deployment, the mean of its GPUs
                assert {x["metric"]["deployment"]: round(float(x["value"][1]), 3) for x in res} == \
                    {"chat-8b-h100": 0.2, "rag-70b": 0.5, "embed": 0.7}, title
            else:  # one series per attributed GPU, labelled with its deployment and replica
                assert per == set(want) and len(res) == sum(want.values()), (title, res)
        assert empty == ["6 XID errors/0"]  # XID events only: none in the dump
        review = next(q for q in build_queries(0.0, 1, []) if q.key == "gpus")
        per_replica = _query(base, review.expr)
        assert {(x["metric"]["deployment"], x["metric"]["replica"]): int(x["value"][1]) for x in per_replica} == {
            ("chat-8b-h100", "chat-8b-7d4b9c6f5-q7x2k"): 2, ("rag-70b", "rag-70b-6c8d7f9b4-m4n8p"): 1,
            ("embed", "embed-0"): 1}
    finally:
        prom.terminate()
        prom.wait(timeout=20)
        for s in servers.values():
            s.stop()
