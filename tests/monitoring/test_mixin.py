"""The monitoring mixin: fresh data, default output equal to the generated rule files and dashboards, every rule file
in it through the one registry, an overridden _config changing what it names and nothing else, valid for promtool."""

import importlib.util
import json
import re
import shutil
import subprocess
import sys

import _jsonnet
import pytest
import yaml

from goodput.contracts.catalog import ENGINE
from goodput.monitoring.mixingen import data, render
from goodput.monitoring.rulegen import load_spec
from goodput.monitoring.rules_cli import GENERATORS, build
from tests.conftest import REPO, needs

MIXIN, RULES, DASHBOARDS = REPO / "mixin", REPO / "rules", REPO / "dashboards"
SPEC = load_spec(RULES / "slos.yaml")
OVERRIDES = {  # one of each kind: a threshold, a selector, a URL base, a label name, the data source
    "preemptionsPerSecond": 0.2,
    "engineSelector": 'namespace="llm"',
    "runbookURLPattern": "https://wiki.example.com/rb/%s",
    "dashboardNamePrefix": "Team / ",
    "dashboardTags": ["team", "serving"],
    "refresh": "1m",
    "dcgmUuidLabel": "gpu_uuid",
    "datasourceUid": "prom-main",
}


def _overrides_file(tmp_path, config: dict | str) -> str:
    path = tmp_path / "overrides.libsonnet"
    path.write_text(config if isinstance(config, str) else "{ _config+:: " + json.dumps(config) + " }\n")
    return path


@pytest.fixture(scope="module")
def default():
    return render(MIXIN, SPEC, GENERATORS)


@pytest.fixture(scope="module")
def overridden(tmp_path_factory):
    return render(MIXIN, SPEC, GENERATORS, _overrides_file(tmp_path_factory.mktemp("mixin"), OVERRIDES))


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "goodput", "rules", *args], cwd=REPO, capture_output=True, text=True)


def test_mixin_data_is_fresh():
    for name, text in data(SPEC, GENERATORS).items():
        assert (MIXIN / name).read_text() == text, f"mixin/{name} is stale: run `goodput rules mixin-data`"
    r = _cli("mixin-data", "--check")
    assert r.returncode == 0, r.stderr


def test_every_generated_rule_file_is_in_the_mixin_through_the_registry(default):
    registered = {name for name in build(SPEC) if name.endswith(".rules.yaml")}
    committed = {p.name for p in RULES.glob("*.rules.yaml")}
    assert committed == registered, "a rule file in rules/ that no generator in goodput.monitoring.rules_cli.GENERATORS writes"
    assert set(default["ruleFiles"]) == registered


def _newline_exprs(doc: dict) -> dict:
    """A rule file as the mixin has it: every expr ending in a newline (YAML blocks, fast in C++ jsonnet)."""
    for g in doc["groups"]:
        for r in g["rules"]:
            r["expr"] += "" if r["expr"].endswith("\n") else "\n"
    return doc


def test_the_default_mixin_equals_the_generated_files(default):
    for name, doc in default["ruleFiles"].items():
        assert doc == _newline_exprs(yaml.safe_load((RULES / name).read_text())), name
    assert default["grafanaDashboards"] == {f"goodput-{p.name}": json.loads(p.read_text()) for p in DASHBOARDS.glob("*.json")}
    groups = [g for name in sorted(default["ruleFiles"]) for g in default["ruleFiles"][name]["groups"]]
    alerts, recording = default["prometheusAlerts"]["groups"], default["prometheusRules"]["groups"]
    assert sorted(alerts + recording, key=json.dumps) == sorted(groups, key=json.dumps)
    assert all(any("alert" in r for r in g["rules"]) for g in alerts)
    assert not any("alert" in r for g in recording for r in g["rules"])


def _leaves(doc, path=()):
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _leaves(v, (*path, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _leaves(v, (*path, i))
    else:
        yield path, doc


# an engine series, a histogram's by its parts too (llm_kv_transfer_seconds_bucket)
# the engine exporter's series, and the engines Prometheus scrapes itself (up with a replica: ENGINE_TARGETS)
ENGINE_SERIES = re.compile(r"(?<![\w:])(" + "|".join(m.name + ("(?:_bucket|_sum|_count)?" if m.type == "histogram" else "")
                                                      for m in ENGINE) + r"|up(?=\{[^}]*replica))(?![\w:])")


def _undo(text: str) -> str:
    """An overridden string with each override taken back out, as the default has it."""
    text = {"team": "goodput", "serving": "llm", "1m": "30s"}.get(text, text)
    text = re.sub(r"^https://wiki\.example\.com/rb/(\w+)$", lambda m: SPEC.links["runbook_base"] + m.group(1) + ".md", text)
    return (text.replace("Team / ", "").replace(',namespace="llm"', "").replace('{namespace="llm"}', "")
            .replace('"gpu_uuid"', '"UUID"').replace("> 0.2\n", "> 0.05\n")
            .replace("prom-main", "${datasource}"))


def test_an_overridden_config_changes_what_it_names_and_nothing_else(default, overridden):
    outputs = ("ruleFiles", "grafanaDashboards")
    before = dict(_leaves({k: default[k] for k in outputs}))
    after = dict(_leaves({k: overridden[k] for k in outputs}))
    assert before.keys() == after.keys(), "an override changed the structure, not only values"
    changed = {p for p in before if before[p] != after[p]}
    for p in changed:
        assert _undo(after[p]) == before[p], p

    def expected(p, old) -> bool:
        if not isinstance(old, str):
            return False
        if p[-1] == "runbook_url" or p[0] == "grafanaDashboards" and len(p) == 3 and p[-1] in ("title", "refresh"):
            return True
        if p[0] == "grafanaDashboards" and "tags" in p:  # the dashboard's, and its menu's (the first)
            return True
        if p[-1] == "uid":
            return old == "${datasource}"
        if p[-1] in ("expr", "query"):
            return bool(ENGINE_SERIES.search(old)) or '"UUID"' in old or "llm_preemptions:rate5m > 0.05\n" in old
        return False

    assert changed == {p for p, old in before.items() if expected(p, old)}
    for p in changed:  # every engine series selected, and no other
        if p[-1] in ("expr", "query"):
            assert after[p].count('namespace="llm"') == len(ENGINE_SERIES.findall(before[p])), p
    kinds = {p[-1] for p in changed}
    assert kinds == {"runbook_url", "uid", "expr", "query", "title", "refresh", 0, 1}
    assert sum(p[-1] == "runbook_url" for p in changed) == sum(p[-1] == "runbook_url" for p in before)


needs_promtool = needs("promtool")


@needs_promtool
def test_the_rendered_mixin_with_overrides_passes_promtool(tmp_path):
    r = _cli("mixin", "--out", str(tmp_path / "out"), "--config", str(_overrides_file(tmp_path, OVERRIDES)))
    assert r.returncode == 0, r.stderr
    for name in ("prometheus_alerts.yaml", "prometheus_rules.yaml"):
        p = subprocess.run(["promtool", "check", "rules", "--lint=all", "--lint-fatal", str(tmp_path / "out" / name)],
                           capture_output=True, text=True)
        assert p.returncode == 0 and "SUCCESS" in p.stdout, p.stdout + p.stderr
    assert 'namespace="llm"' in (tmp_path / "out" / "prometheus_rules.yaml").read_text()
    boards = {p.name for p in (tmp_path / "out" / "dashboards").glob("*.json")}
    assert boards == {f"goodput-{p.name}" for p in DASHBOARDS.glob("*.json")}


@pytest.mark.parametrize(("config", "says"), [
    ({"runbookURLPattern": "javascript:alert(%s)"}, "_config.runbookURLPattern: only http(s) links"),
    ({"engineSelector": 'job="a"} or vector(1) or up{'}, "_config.engineSelector: expected label matchers"),
    ({"preemptionsPerSecond": "fast"}, "_config.preemptionsPerSecond: expected a finite number"),
    ({"dcgmUuidLabel": "GPU UUID"}, "_config.dcgmUuidLabel: expected a Prometheus label name"),
    ("{ _config+:: { preemptionsPerSecond: } }", "overrides.libsonnet"),
    ({"engineSelector": "namespace=llm"}, "_config.engineSelector: expected label matchers"),
    ({"requestSelector": 'job="a" or vector(1)'}, "_config.requestSelector: expected label matchers"),
    ({"exporterSelector": 'job=~"(("'}, "_config.exporterSelector: the regex of job=~: not a regular expression"),
    ({"gpuSelector": 'gpu="\\q"'}, "_config.gpuSelector: \"\\q\" is not a PromQL string"),
    pytest.param({"engineSelector": 'pod=~"a*+"'}, "_config.engineSelector: promtool rejects the rendered rules: "
                 "prometheus_alerts.yaml:", marks=needs_promtool),  # Python's re takes a*+, RE2 does not
    ({"runbookURLPattern": "https://wiki/rb/"}, "_config.runbookURLPattern: expected a string with one %s"),
    ({"runbookUrlBase": "https://wiki/rb/"}, "_config.runbookUrlBase is gone: set runbookURLPattern"),
    ({"refresh": "soon"}, "_config.refresh: expected a Grafana refresh interval"),
    ({"dashboardTags": "goodput"}, "_config.dashboardTags: expected a list of one or more strings"),
], ids=["link", "selector", "number", "label", "syntax", "unquoted", "promql", "regex", "escape", "re2", "pattern",
        "old-runbook", "refresh", "tags"])
def test_a_bad_override_is_one_line_and_exit_2(tmp_path, config, says):
    r = _cli("mixin", "--out", str(tmp_path / "out"), "--config", str(_overrides_file(tmp_path, config)))
    assert r.returncode == 2 and says in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    assert not (tmp_path / "out").exists()


def test_the_example_renders_its_overrides():
    files = json.loads(_jsonnet.evaluate_file(str(MIXIN / "example.jsonnet"), jpathdir=[str(MIXIN)]))
    alerts = files["prometheus_alerts.yaml"]
    kv = next(r for g in alerts["groups"] for r in g["rules"] if r.get("alert") == "LLMKVCacheAllocationFailures")
    assert "> 0.02\n" in kv["expr"] and kv["annotations"]["runbook_url"].startswith("https://wiki.example.com/")
    assert {f"dashboards/goodput-{p.name}" for p in DASHBOARDS.glob("*.json")} <= set(files)


# kubernetes-mixin's way: YAML from jsonnet itself, the costly path under C++ jsonnet (docs/mixin.md, Speed)
AS_USERS_RENDER = ("local m = import 'mixin.libsonnet';\n"
                   "{ rules: std.manifestYamlDoc(m.prometheusRules), alerts: std.manifestYamlDoc(m.prometheusAlerts),"
                   " dashboards: m.grafanaDashboards }")


def _python_module(name: str):
    def run(tmp_path) -> str:
        mod = pytest.importorskip(name) if name == "_gojsonnet" else _jsonnet
        return mod.evaluate_snippet("render", AS_USERS_RENDER, jpathdir=[str(MIXIN)])
    return run


def _command(tmp_path) -> str:
    program = tmp_path / "render.jsonnet"
    program.write_text(AS_USERS_RENDER)
    return subprocess.run([shutil.which("jsonnet") or "jsonnet", "-J", str(MIXIN), str(program)], capture_output=True,
                          text=True, check=True).stdout


@pytest.mark.parametrize("evaluate", [
    _python_module("_jsonnet"),  # C++ jsonnet, the package goodput renders with
    pytest.param(_python_module("_gojsonnet"), marks=pytest.mark.skipif(
        importlib.util.find_spec("_gojsonnet") is None, reason="go-jsonnet's Python module (gojsonnet) absent")),
    pytest.param(_command, marks=needs("jsonnet")),  # Debian's C++ jsonnet
], ids=["cpp-module", "go-jsonnet", "jsonnet-command"])
def test_every_interpreter_renders_the_mixin_as_users_render_it(default, tmp_path, evaluate):
    out = json.loads(evaluate(tmp_path))
    assert yaml.safe_load(out["rules"]) == default["prometheusRules"]
    assert yaml.safe_load(out["alerts"]) == default["prometheusAlerts"]
    assert out["dashboards"] == default["grafanaDashboards"]
    exprs = [r["expr"] for g in default["prometheusRules"]["groups"] for r in g["rules"]]
    assert all(e.endswith("\n") for e in exprs)  # YAML blocks: what keeps C++ jsonnet's manifestYamlDoc fast
    assert re.search(r'^ *- "?expr"?: \|$', out["rules"], re.M)


@needs_promtool
def test_multi_cluster_rules_aggregate_each_cluster_apart(tmp_path):
    """showMultiCluster: the same deployment in two clusters stays two series (a real promtool evaluates them), every
    aggregation and join is by the cluster label first, except a join to a cluster-less :config constant."""
    config = _overrides_file(tmp_path, {"showMultiCluster": True, "clusterLabel": "k8s_cluster"})
    r = _cli("mixin", "--out", str(tmp_path / "out"), "--config", str(config))
    assert r.returncode == 0, r.stderr
    text = "\n".join((tmp_path / "out" / n).read_text() for n in ("prometheus_rules.yaml", "prometheus_alerts.yaml"))
    exprs = [r["expr"] for n in ("prometheus_rules.yaml", "prometheus_alerts.yaml")
             for g in yaml.safe_load((tmp_path / "out" / n).read_text())["groups"] for r in g["rules"]]
    for e in exprs:
        assert all(m.group(1).startswith("k8s_cluster, ") for m in re.finditer(r"\bby \(([^)]*)\)", e)), e
        # a join without the cluster reads a constant first: the next recorded name after it is a :config one
        for m in re.finditer(r"\bon \(([^)]*)\)\s*(group_left\s*(\([^)]*\))?)?[^:]*?\b(\w+:[\w:]+)", e):
            assert m.group(1).startswith("k8s_cluster, ") or m.group(4).endswith(":config"), (m.group(0), e)
    joins = [m.group(1) for e in exprs for m in re.finditer(r"\bon \(([^)]*)\)", e)]
    assert any(j.startswith("k8s_cluster") for j in joins) and not all(j.startswith("k8s_cluster") for j in joins)
    assert "k8s_cluster" in text
    (tmp_path / "t.yaml").write_text(yaml.safe_dump({
        "rule_files": ["out/prometheus_rules.yaml"], "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": [
            {"series": 'llm_requests_waiting{k8s_cluster="a",deployment="d",replica="r1"}', "values": "3x5"},
            {"series": 'llm_requests_waiting{k8s_cluster="b",deployment="d",replica="r1"}', "values": "5x5"}],
            "promql_expr_test": [{"expr": "deployment:llm_requests_waiting:sum", "eval_time": "2m", "exp_samples": [
                {"labels": 'deployment:llm_requests_waiting:sum{k8s_cluster="a",deployment="d"}', "value": 3},
                {"labels": 'deployment:llm_requests_waiting:sum{k8s_cluster="b",deployment="d"}', "value": 5}]}]}]}))
    p = subprocess.run(["promtool", "test", "rules", "t.yaml"], cwd=tmp_path, capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr


def test_one_cluster_by_default(default):
    """Without showMultiCluster no rule names the cluster label: the committed rule files, unchanged."""
    assert "cluster" not in json.dumps(default["ruleFiles"])


def _queries_of(doc) -> list[str]:
    return [v for p, v in _leaves(doc) if p[-1] in ("expr", "query") and isinstance(v, str)]


@needs_promtool
def test_multi_cluster_dashboards_select_the_cluster_variable(tmp_path, default):
    """showMultiCluster: each dashboard gains a cluster variable after its data source, and every series a query reads
    (the catalog's, recorded ones, ALERTS, up) selects it, but :config constants; each query still parses."""
    config = _overrides_file(tmp_path, {"showMultiCluster": True, "clusterLabel": "k8s_cluster"})
    multi = render(MIXIN, SPEC, GENERATORS, config)
    catalog_names = {m.name for m in ENGINE} | {n for p, v in _leaves(default["grafanaDashboards"])
                                                 if isinstance(v, str) for n in re.findall(r"\bllm_\w+|\bDCGM_FI_\w+", v)}
    series = re.compile(r"(?<![\w:\"$])([A-Za-z_][\w:]*)(\{[^{}]*\})?(?![\w:(])")
    checked, exprs = 0, []
    for name, board in multi["grafanaDashboards"].items():
        variables = board["templating"]["list"]
        assert [v["name"] for v in variables[:2]] == ["datasource", "cluster"], name
        assert "k8s_cluster" in variables[1]["query"]["query"]
        assert [v["name"] for v in variables[2:]] == [
            v["name"] for v in default["grafanaDashboards"][name]["templating"]["list"][1:]]
        for q in _queries_of(board["panels"]) + _queries_of(variables[2:]):
            for m in series.finditer(q):
                n = m.group(1)
                if (":" in n and not n.endswith(":config")) or n in catalog_names or n in ("ALERTS", "up"):
                    assert 'k8s_cluster="$cluster"' in (m.group(2) or ""), (n, q)
                    checked += 1
            if not q.startswith("label_values("):
                exprs.append(q.replace("$__rate_interval", "5m"))
    assert checked > 100
    (tmp_path / "q.yaml").write_text(yaml.safe_dump({"groups": [{"name": "q", "rules": [
        {"record": f"q:{i}", "expr": e} for i, e in enumerate(exprs)]}]}))
    p = subprocess.run(["promtool", "check", "rules", str(tmp_path / "q.yaml")], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
