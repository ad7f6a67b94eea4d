"""The rule files: fresh, valid for promtool, unit-tested, documented, named from the catalog, routed by amtool."""

import re
import shutil
import subprocess
import sys

import pytest
import yaml

from goodput.contracts.catalog import GATEWAY_BUCKETS, names
from goodput.contracts.vocabulary import GATEWAY_REJECT_REASONS, QUOTA_REASONS
from goodput.foundation.errors import ConfigError
from goodput.foundation.histogram import le_label
from goodput.monitoring.rulegen import ALERTS, RULE_FILES, build, load_spec
from tests.conftest import REPO, needs

RULES = REPO / "rules"
needs_promtool = needs("promtool")
needs_amtool = needs("amtool")


def _rules():
    for f in RULE_FILES:
        for group in yaml.safe_load((RULES / f).read_text())["groups"]:
            yield from group["rules"]


def test_generated_files_are_fresh():
    for name, text in build(load_spec(RULES / "slos.yaml")).items():
        assert (RULES / name).read_text() == text, f"{name} is stale: run `goodput rules generate`"
    r = subprocess.run([sys.executable, "-m", "goodput", "rules", "generate", "--check"], cwd=REPO,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_check_reports_a_stale_file(tmp_path):
    shutil.copytree(RULES, tmp_path / "rules")
    (tmp_path / "rules" / "alerts.rules.yaml").write_text("groups: []\n")
    r = subprocess.run([sys.executable, "-m", "goodput", "rules", "generate", "--check", "--spec",
                        str(tmp_path / "rules" / "slos.yaml")], cwd=REPO, capture_output=True, text=True)
    assert r.returncode == 1 and "alerts.rules.yaml" in r.stderr


@needs_promtool
@pytest.mark.parametrize("name", RULE_FILES)
def test_promtool_check_rules(name):
    r = subprocess.run(["promtool", "check", "rules", "--lint=all", "--lint-fatal", str(RULES / name)],
                       capture_output=True, text=True)
    assert r.returncode == 0 and "SUCCESS" in r.stdout, r.stdout + r.stderr


@needs_promtool
@pytest.mark.parametrize("test_file", sorted((RULES / "tests").glob("*.yaml")), ids=lambda p: p.name)
def test_promtool_unit_tests(test_file):
    r = subprocess.run(["promtool", "test", "rules", str(test_file)], capture_output=True, text=True, cwd=RULES / "tests")
    assert r.returncode == 0 and "SUCCESS" in r.stdout, r.stdout + r.stderr


def test_every_alert_has_a_firing_test_and_a_silent_one():
    fired, silent = set(), set()
    for f in (RULES / "tests").glob("*.yaml"):
        for test in yaml.safe_load(f.read_text())["tests"]:
            for case in test.get("alert_rule_test", []):
                (fired if case.get("exp_alerts") else silent).add(case["alertname"])
    assert fired >= set(ALERTS), set(ALERTS) - fired
    assert silent >= set(ALERTS) - {"GoodputWatchdog"}, set(ALERTS) - silent


def test_every_alert_has_the_one_shape_and_a_runbook():
    alerts = [r for r in _rules() if "alert" in r]
    assert {a["alert"] for a in alerts} == set(ALERTS)
    for a in alerts:
        assert a["labels"]["severity"] in ("page", "ticket", "info", "none")  # none: the watchdog, as kube-prometheus
        assert set(a["annotations"]) == {"summary", "description", "runbook_url", "dashboard", "console"}
        assert a["annotations"]["runbook_url"].endswith(f"/docs/runbooks/{a['alert']}.md")
        assert "for" in a
        runbook = REPO / "docs" / "runbooks" / f"{a['alert']}.md"
        text = runbook.read_text()
        for step in ("Split the latency", "Did the workload change", "KV cache, fragmentation, preemptions",
                     "Routing, fallbacks, retries, cache hits", "Releases last"):
            assert step in text, (runbook, step)


def test_gpu_utilisation_never_pages_by_itself():
    for a in _rules():
        if "alert" in a and "utilization" in a["expr"]:
            pytest.fail(f"{a['alert']} reads GPU utilisation")


PROMQL_WORDS = {"and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right", "bool", "offset",
                "le", "inf", "nan"}


def _metric_names(expr: str) -> set[str]:
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # strings
    expr = re.sub(r"\{[^}]*\}", "", expr)  # label matchers
    expr = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", expr)
    expr = re.sub(r"\[[^\]]*\]", "", expr)  # ranges
    found = set()
    for m in re.finditer(r"(?<![\w:.])([a-zA-Z_:][a-zA-Z0-9_:]*)(\s*\()?", expr):
        word, call = m.group(1), m.group(2)
        if call or word in PROMQL_WORDS or re.fullmatch(r"\d+[smhdwy]", word):
            continue
        found.add(word)
    return found


def test_every_metric_in_an_expression_is_in_the_catalog_or_recorded():
    recorded = {r["record"] for r in _rules() if "record" in r}
    external = {"up"} | {n for r in _rules() for n in _metric_names(r["expr"]) if n.startswith("DCGM_FI_")}
    known = names() | recorded | external
    for r in _rules():
        unknown = _metric_names(r["expr"]) - known
        assert not unknown, (r.get("record") or r.get("alert"), unknown)
    assert "llm_gateway_time_to_first_token_seconds_bucket" in {n for r in _rules() for n in _metric_names(r["expr"])}


def test_the_quota_reasons_are_the_ones_the_gateway_refuses_with():
    """LLMTenantAtQuota counts the refusals of a tenant's own limits, spelled as the gateway sends them (the one
    vocabulary), and none of the engine's (queue_full, queue_timeout: the fleet's load, not the tenant's quota)."""
    exprs = [r["expr"] for r in _rules() if "llm_gateway_rejections_total{reason=~" in r["expr"]]
    assert exprs and all(f'reason=~"{"|".join(QUOTA_REASONS)}"' in e for e in exprs), exprs
    assert set(QUOTA_REASONS) < set(GATEWAY_REJECT_REASONS)
    assert {"queue_full", "queue_timeout"} <= set(GATEWAY_REJECT_REASONS) - set(QUOTA_REASONS)


def test_slo_thresholds_are_request_exporter_buckets():
    spec = load_spec(RULES / "slos.yaml")
    les = {le_label(b) for b in GATEWAY_BUCKETS}
    for slo in spec.slos:
        assert le_label(slo.ttft_seconds) in les and le_label(slo.tpot_seconds) in les
        assert f'le="{le_label(slo.ttft_seconds)}"' in (RULES / "slo.rules.yaml").read_text()


def test_bad_spec_names_the_key(tmp_path):
    good = "ttft_seconds: 0.5, tpot_seconds: 0.05"
    text = (RULES / "slos.yaml").read_text().replace(good, good.replace("0.5,", "0.45,"), 1)
    (tmp_path / "slos.yaml").write_text(text)
    with pytest.raises(ConfigError, match=r"slos\[0\].ttft_seconds: 0.45 s is not a bucket boundary"):
        load_spec(tmp_path / "slos.yaml")
    r = subprocess.run([sys.executable, "-m", "goodput", "rules", "generate", "--spec", str(tmp_path / "slos.yaml"),
                        "--out", str(tmp_path)], cwd=REPO, capture_output=True, text=True)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1


@needs_amtool
def test_amtool_check_config():
    r = subprocess.run(["amtool", "check-config", str(RULES / "alertmanager.yaml")], capture_output=True, text=True)
    assert r.returncode == 0 and "SUCCESS" in r.stdout, r.stdout + r.stderr


@needs_amtool
@pytest.mark.parametrize(("labels", "receiver"), [
    (["severity=page", "tier=P0", "alertname=LLMQueueWaitRisingReplicasShort", "deployment=chat"], "pager"),
    (["severity=page", "tier=P1", "alertname=LLMTTFTSLOBreachWithRejects", "deployment=rag"], "pager"),
    (["severity=page", "tier=P2", "alertname=LLMSLOBurnRateFast", "deployment=batch"], "ticket"),
    (["severity=page", "alertname=LLMEngineDown", "deployment=chat"], "pager"),
    (["severity=ticket", "tier=P0", "alertname=LLMSLOBurnRateSlow"], "ticket"),
    (["severity=ticket", "tier=P2", "alertname=LLMSLOBurnRateSlow"], "ticket"),
    (["severity=ticket", "alertname=LLMTenantAtQuota", "deployment=chat", "tenant=flood"], "ticket"),
    (["severity=page", "tier=P0", "alertname=LLMOverloadProtectionNotHoldingP0", "deployment=chat"], "pager"),
    (["severity=ticket", "alertname=LLMOverloadProtectionEngaged", "deployment=chat", "action=degraded"], "ticket"),
    (["severity=page", "alertname=LLMCircuitOpen", "deployment=chat", "backup=chat-small"], "pager"),
    (["severity=none", "alertname=GoodputWatchdog"], "log"),
    (["severity=info", "alertname=SomeInfo"], "log"),
    (["alertname=SomethingElse"], "log"),
])
def test_amtool_routes(labels, receiver):
    r = subprocess.run(["amtool", "config", "routes", "test", f"--config.file={RULES / 'alertmanager.yaml'}",
                        f"--verify.receivers={receiver}", *labels], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.strip() == receiver


def test_every_runbook_url_resolves_to_a_runbook_in_this_repository():
    """The URL base points at this repository's docs/runbooks/ on main; each alert's page exists, and no runbook is
    left without its alert."""
    base = load_spec(RULES / "slos.yaml").links["runbook_base"]
    m = re.fullmatch(r"https://github\.com/[\w.-]+/[\w.-]+/blob/main/(?P<path>(?:[\w.-]+/)+)", base)
    assert m, f"runbook_base {base!r} is not a GitHub blob URL of a folder on main"
    folder = REPO / m["path"]
    assert folder == REPO / "docs" / "runbooks" and folder.is_dir(), folder
    linked = set()
    for a in (r for r in _rules() if "alert" in r):
        url = a["annotations"]["runbook_url"]
        assert url == f"{base}{a['alert']}.md", url
        page = REPO / m["path"] / url.removeprefix(base)
        assert page.is_file(), f"{a['alert']}: {url} names {page.relative_to(REPO)}, which does not exist"
        linked.add(page.name)
    assert {p.name for p in folder.glob("*.md")} == linked, "a runbook without an alert, or an alert without one"


def _keda_scaled_object() -> dict:
    text = (REPO / "docs" / "autoscaling.md").read_text()
    blocks = [yaml.safe_load(b) for b in re.findall(r"```yaml\n(.*?)```", text, re.S)]
    objs = [b for b in blocks if isinstance(b, dict) and b.get("kind") == "ScaledObject"]
    assert len(objs) == 1, "docs/autoscaling.md should hold exactly one KEDA ScaledObject"
    return objs[0]


def test_keda_scaled_object_reads_a_recorded_rule():
    obj = _keda_scaled_object()
    assert obj["apiVersion"] == "keda.sh/v1alpha1"
    spec = obj["spec"]
    assert 1 <= spec["minReplicaCount"] <= spec["maxReplicaCount"]
    assert spec["scaleTargetRef"]["name"] == obj["metadata"]["name"]
    (trigger,) = spec["triggers"]
    assert trigger["type"] == "prometheus" and trigger["metricType"] == "AverageValue"
    assert trigger["metadata"]["threshold"] == "1"
    query = trigger["metadata"]["query"]
    recorded = {r["record"] for r in _rules() if "record" in r}
    used = _metric_names(query)
    assert used and used <= recorded | names(), used - recorded - names()
    assert "deployment:llm_autoscale_desired_replicas:max" in used
    # the one label it selects on is one the recorded series has (the rule aggregates by deployment)
    for label in re.findall(r"(\w+)\s*=~?\s*\"", query):
        assert label == "deployment", label


@needs_promtool
def test_keda_query_evaluates_to_the_recorded_replica_count(tmp_path):
    """Run the ScaledObject's query in promtool's real PromQL engine over the recording-rule test's input: it must
    return the desired replica count the recording test expects for that deployment."""
    query = _keda_scaled_object()["spec"]["triggers"][0]["metadata"]["query"]
    source = yaml.safe_load((RULES / "tests" / "recording.test.yaml").read_text())
    group = next(t for t in source["tests"] for e in t.get("promql_expr_test", [])
                 if e["expr"] == "deployment:llm_autoscale_desired_replicas:max")
    want = next(e for e in group["promql_expr_test"] if e["expr"] == "deployment:llm_autoscale_desired_replicas:max")
    deployment = re.search(r'deployment="([^"]+)"', want["exp_samples"][0]["labels"])[1]
    expr = re.sub(r'deployment="[^"]+"', f'deployment="{deployment}"', query)
    test = {"rule_files": [str((RULES / "tests" / f).resolve()) for f in source["rule_files"]],
            "evaluation_interval": source.get("evaluation_interval", "1m"),
            "tests": [{"interval": group["interval"], "input_series": group["input_series"], "promql_expr_test": [
                {"expr": expr, "eval_time": want["eval_time"], "exp_samples": [
                    {"labels": "{}", "value": want["exp_samples"][0]["value"]}]}]}]}
    path = tmp_path / "keda.test.yaml"
    path.write_text(yaml.safe_dump(test))
    r = subprocess.run(["promtool", "test", "rules", str(path)], capture_output=True, text=True)
    assert r.returncode == 0 and "SUCCESS" in r.stdout, r.stdout + r.stderr


def test_the_drain_cases_are_written_from_their_series():
    from tests.monitoring import drain_series

    assert drain_series.PATH.read_text() == drain_series.render(), "run `python -m tests.monitoring.drain_series`"
