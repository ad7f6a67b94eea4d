"""rules/normalize.rules.yaml: the engine normalization as recording rules gives what the engine exporter publishes.

promtool's PromQL engine evaluates the rules over each real engine sample (as a direct scrape would store it, with
the deployment and replica target labels) and must record exactly the exporter's ``normalize()`` of the same dump;
a real Prometheus scraping the live simulated fleet's vLLM ``/metrics`` with the rules must record what the engine
exporter publishes for the same replicas.
"""

import re
import subprocess

import yaml

from exporters.catalog import ENGINE_LABELS
from exporters.exposition import labels
from exporters.normalize import normalize
from goodput import normrules
from tests.conftest import REPO, needs

SAMPLES = REPO / "tests" / "fixtures" / "engine_samples"
RULES = REPO / "rules" / normrules.FILE
DUMPS = {  # fixture -> dialect it is read as (by --engine auto too)
    "sglang_docs_production_metrics.txt": "sglang",
    "triton_core_summary_docs.txt": "triton",
    "triton_trtllm_backend_readme_metrics.txt": "triton",
    "vllm_v0_aibrix_runtime_doc.txt": "vllm",
    "vllm_v1_0_10_production_stack_issue_617.txt": "vllm",
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
