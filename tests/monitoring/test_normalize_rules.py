"""rules/normalize.rules.yaml: the engine normalization as recording rules gives what the engine exporter publishes.

promtool's PromQL engine evaluates the rules over each real engine sample (as a direct scrape would store it, with
the deployment and replica target labels) and must record exactly the exporter's ``normalize()`` of the same dump;
a real Prometheus scraping the live simulated fleet's vLLM ``/metrics`` with the rules must record what the engine
exporter publishes for the same replicas.
"""

import contextlib
import copy
import re
import subprocess
import time
from urllib.parse import urlsplit

import httpx
import yaml

from goodput.contracts.catalog import ENGINE, ENGINE_LABELS
from goodput.demo.stack import Process
from goodput.exporters.config import load_targets
from goodput.exporters.engine import EngineExporter
from goodput.exporters.exposition import labels
from goodput.exporters.normalize import normalize
from goodput.foundation.http import Server, metrics_routes
from goodput.monitoring import normrules
from goodput.simulator.live import LiveFleet
from tests.conftest import BASE_DEPLOYMENT, BASE_WORKLOAD, REPO, free_port_block, make_fleet, needs

SAMPLES = REPO / "tests" / "fixtures" / "engine_samples"
RULES = REPO / "rules" / normrules.FILE
DUMPS = {  # fixture -> dialect it is read as (by --engine auto too)
    "sglang_docs_production_metrics.txt": "sglang",
    "triton_core_summary_docs.txt": "triton",
    "triton_trtllm_backend_readme_metrics.txt": "triton",
    "triton_first_response_ms_synthetic.txt": "triton",
    "vllm_v0_aibrix_runtime_doc.txt": "vllm",
    "vllm_v1_0_10_production_stack_issue_617.txt": "vllm",
    "vllm_v0_32_synthetic.txt": "vllm",
    "sglang_pd_decode_synthetic.txt": "sglang",
    "kserve_vllm_llmisvc_federated.txt": "kserve_vllm",
    "dynamo_frontend_metrics_example.txt": "dynamo",
    "../tgi_synthetic.txt": "tgi",
}
_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)")
_PAIR = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse(text: str) -> list[tuple[str, dict[str, str], float]]:
    """Samples of an exposition text (lines that are not samples, like a document's '...', are skipped)."""
    out = []
    for line in text.splitlines():
        m = _LINE.match(line)
        if m and not line.startswith("#"):
            pairs = {k: v.replace('\\"', '"').replace("\\n", "\n").replace("\\\\", "\\")
                     for k, v in _PAIR.findall(m[2] or "")}
            out.append((m[1], {k: v for k, v in pairs.items() if v}, float(m[3])))
    return out


def series(name: str, lbls: dict[str, str]) -> str:
    inner = ",".join(f'{k}="{v}"' for k, v in sorted(lbls.items()) if v)
    return f"{name}{{{inner}}}" if inner else name


def exporter_view(text: str, dialect: str, deployment: str, replica: str) -> dict[str, list]:
    """Canonical sample name -> [(labels, value)] as the engine exporter publishes them for one target."""
    n = normalize(text, dialect)
    lines = n.lines_by_model(lambda m: labels(ENGINE_LABELS, (m, deployment, replica)))
    got: dict[str, list] = {}
    for line in (x for fam in lines.values() for x in fam):
        name, lbls, v = parse(line)[0]
        got.setdefault(name, []).append((lbls, v))
    return got


def _fmt(v: float) -> str:
    return repr(v) if v == v else "NaN"


def _case(dump: str, recorded: list[str]) -> dict:
    """One promtool test group: the dump as a direct scrape stores it, and per recorded name the exporter's samples."""
    text = (SAMPLES / dump).read_text()
    dialect = DUMPS[dump]
    assert normalize(text).dialect == dialect, dump  # --engine auto recognises it
    want = exporter_view(text, dialect, "pool-a", "pool-a-0")
    assert want, f"{dump}: the exporter reads nothing from it; the comparison would say little"
    assert set(want) <= set(recorded), set(want) - set(recorded)
    target = {"deployment": "pool-a", "replica": "pool-a-0", "job": "engine", "instance": "10.0.0.7:8000"}
    return {"name": dump, "interval": "1m",
            "input_series": [{"series": series(name, {**lbls, **target}), "values": f"{_fmt(v)}x2"}
                             for name, lbls, v in parse(text)],
            "promql_expr_test": [{"expr": name, "eval_time": "1m",
                                  "exp_samples": [{"labels": series(name, lbls), "value": v}
                                                  for lbls, v in want.get(name, [])]}
                                 for name in recorded]}


@needs("promtool")
def test_rules_record_what_the_exporter_publishes(tmp_path):
    """Every engine sample, each its own promtool group: every recorded family equals the exporter's, or is absent
    where the exporter publishes nothing."""
    recorded = list(dict.fromkeys(r["record"] for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]))
    (tmp_path / "t.yaml").write_text(yaml.safe_dump({
        "rule_files": [str(RULES)], "evaluation_interval": "1m",
        "tests": [_case(dump, recorded) for dump in sorted(DUMPS)]}, width=10_000))
    r = subprocess.run(["promtool", "test", "rules", str(tmp_path / "t.yaml")], capture_output=True, text=True)
    assert r.returncode == 0 and "SUCCESS" in r.stdout, (r.stdout + r.stderr)[-8000:]


@needs("promtool")
def test_rule_file_is_valid_and_fresh():
    assert RULES.read_text() == normrules.build()[normrules.FILE], "run `goodput rules generate`"
    r = subprocess.run(["promtool", "check", "rules", "--lint=all", "--lint-fatal", str(RULES)],
                       capture_output=True, text=True)
    assert r.returncode == 0 and "SUCCESS" in r.stdout, r.stdout + r.stderr


GAUGES = {m.name for m in ENGINE if m.type == "gauge"}
LAG_S = 6  # the two paths sample one engine up to a few 1 s scrapes apart (its own and the exporter's)


def _views(base: str, names: list[str], at: float) -> tuple[dict, dict]:
    """(recorded, exported): (name, labels) -> the values over the ``LAG_S`` seconds up to ``at``, the last at ``at``."""
    rec, exp = {}, {}
    for job, out in (("", rec), ("exporter", exp)):
        r = httpx.get(f"{base}/api/v1/query_range", timeout=10, params={
            "query": f'{{__name__=~"llm_.+", job="{job}"}}', "start": at - LAG_S, "end": at, "step": 1})
        r.raise_for_status()
        for x in r.json()["data"]["result"]:
            m = x["metric"]
            if m["__name__"] in names and x["values"] and float(x["values"][-1][0]) == at:
                lbls = {k: v for k, v in m.items() if k not in ("__name__", "job", "instance")}
                out[(m["__name__"], frozenset(lbls.items()))] = [float(v) for _, v in x["values"]]
    return rec, exp


def _now(base: str, names: list[str]) -> tuple[dict, dict]:
    at = round(time.time()) - 1
    rec, exp = _views(base, names, at)
    return {k: v[-1] for k, v in rec.items()}, {k: v[-1] for k, v in exp.items()}


@needs("prometheus")
def test_live_fleet_scraped_directly_records_what_the_exporter_publishes(tmp_path):
    """The live simulated fleet: Prometheus scrapes each replica's vLLM /metrics (deployment and replica as target
    labels) with the rules, and the engine exporter for the same replicas. While requests are in flight the series
    are the same and their values differ by at most what the exporter's own series moved over the last seconds
    (one scrape apart); once the fleet is frozen they are equal."""
    dep = dict(copy.deepcopy(BASE_DEPLOYMENT), replicas=2)
    cfg = make_fleet(deployments=[dep], workloads=[copy.deepcopy(BASE_WORKLOAD)])
    live = LiveFleet(cfg, base_port=free_port_block(2), speed=4.0, targets=tmp_path / "targets.yaml")
    live.start()
    targets = load_targets(tmp_path / "targets.yaml")
    engine = EngineExporter(targets, interval_s=1.0)
    engine.start()
    eng_srv = Server("127.0.0.1", 0, metrics_routes(engine.render)).start()
    direct = "\n".join(
        f"      - {{targets: ['{urlsplit(t.url).netloc}'], labels: {{deployment: {t.deployment}, replica: {t.replica}}}}}"
        for t in targets.targets)
    prom_port = free_port_block(1)
    (tmp_path / "prometheus.yml").write_text(f"""
global: {{scrape_interval: 1s, evaluation_interval: 1s}}
rule_files: ['{RULES}']
scrape_configs:
  - job_name: exporter
    static_configs: [{{targets: ['{urlsplit(eng_srv.url).netloc}']}}]
  - job_name: vllm
    static_configs:
{direct}
""")
    prom = subprocess.Popen(["prometheus", f"--config.file={tmp_path / 'prometheus.yml'}",
                             f"--storage.tsdb.path={tmp_path / 'tsdb'}", f"--web.listen-address=127.0.0.1:{prom_port}"],
                            stdout=subprocess.DEVNULL, stderr=(tmp_path / "prometheus.log").open("w"))
    base = f"http://127.0.0.1:{prom_port}"
    names = list(dict.fromkeys(r["record"] for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]))
    try:
        # ready first: its query API answers 503 in plain text until the TSDB is open
        Process("prometheus", base, prom, tmp_path / "prometheus.log").ready("/-/ready")
        deadline = time.monotonic() + 40
        rec = exp = {}
        while time.monotonic() < deadline:  # traffic under way: requests finished on both replicas
            with contextlib.suppress(httpx.HTTPError):  # Prometheus still starting
                rec, exp = _now(base, ["llm_e2e_request_latency_seconds_count"])
            if len(exp) == 2 and all(v >= 3 for v in exp.values()) and rec.keys() == exp.keys():
                break
            time.sleep(0.5)
        assert len(exp) == 2 and all(v >= 3 for v in exp.values()), exp
        time.sleep(LAG_S + 1)  # a lag's worth of history on both paths, still in flight
        rec, exp = _views(base, names, round(time.time()) - 1)
        assert rec.keys() == exp.keys(), (rec.keys() ^ exp.keys())
        assert {n for n, _ in exp} >= {"llm_requests_finished_total", "llm_kv_cache_capacity_blocks",
                                       "llm_time_to_first_token_seconds_bucket", "llm_prefill_time_seconds_sum"}
        # a counter (and a histogram's parts) only grows: at one instant each recorded value is one the exporter
        # published over the last seconds, or the other way round (one path's lag behind the other). A gauge goes up
        # and down between the two paths' samples, so the recorded one may be a peak the exporter never sampled:
        # there the two paths' values over the same seconds overlap
        def apart(k) -> bool:
            r, e = rec[k], exp[k]
            if k[0] in GAUGES:
                return not (min(r) <= max(e) and min(e) <= max(r))
            return not (min(e) <= r[-1] <= max(e) or min(r) <= e[-1] <= max(r))

        moved = [k for k in exp if apart(k)]
        assert not moved, [(k, rec[k], exp[k]) for k in moved[:5]]
        assert any(max(v) > min(v) for v in exp.values()), "nothing moved while the fleet ran; the check said little"

        live.stop_event.set()  # freeze: the engines' /metrics stop changing
        live.engine_thread.join(timeout=30)
        deadline, diff = time.monotonic() + 30, None
        while time.monotonic() < deadline:
            rec, exp = _now(base, names)
            diff = {k: (rec.get(k), exp.get(k)) for k in rec.keys() | exp.keys() if rec.get(k) != exp.get(k)}
            if not diff:
                break
            time.sleep(1)
        assert not diff, sorted(diff.items(), key=str)[:5]
    finally:
        prom.terminate()
        prom.wait(timeout=20)
        engine.stop()
        live.close()
        eng_srv.stop()
