"""Alerts link to the console: with ``links.console_base`` set (``rules/slos.yaml`` sets the console's default
address; the demo sets its own), every alert carries a ``console`` annotation that opens the Overview with the
alert's deployment and tier as its filters. promtool renders the template exactly as Prometheus does."""

from __future__ import annotations

import subprocess
from urllib.parse import parse_qs, urlsplit

import yaml

from goodput.console.filters import Filters
from goodput.monitoring.rulegen import load_spec, write
from tests.conftest import REPO, require

BASE = "http://127.0.0.1:8501"


def test_the_console_annotation_renders_the_alerts_deployment_and_tier(tmp_path):
    require("promtool")
    spec = load_spec(REPO / "rules" / "slos.yaml")
    spec.links["console_base"] = BASE
    write(spec, tmp_path, 1.0)
    suite = yaml.safe_load((REPO / "rules" / "tests" / "alerts.test.yaml").read_text())
    case = next(t for t in suite["tests"] for c in t.get("alert_rule_test", [])
                if c["alertname"] == "LLMQueueWaitRisingReplicasShort" and c.get("exp_alerts"))
    expected = f"{BASE}/?range=1h&deployment=chat&tier=P0"
    for c in case["alert_rule_test"]:
        for alert in c.get("exp_alerts", []):
            alert["exp_annotations"]["console"] = expected
    suite.update(rule_files=[str(tmp_path / f.rsplit("/", 1)[-1]) for f in suite["rule_files"]], tests=[case])
    (tmp_path / "link.test.yaml").write_text(yaml.safe_dump(suite, sort_keys=False))
    r = subprocess.run(["promtool", "test", "rules", str(tmp_path / "link.test.yaml")], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    filters, bad = Filters.from_query(parse_qs(urlsplit(expected).query))
    assert not bad and (filters.deployment, filters.tier, filters.range) == ("chat", "P0", "1h")


def test_without_a_console_base_the_rules_have_no_console_link(tmp_path):
    spec = load_spec(REPO / "rules" / "slos.yaml")
    assert spec.links["console_base"] == BASE, "the committed rules link to the console's default address"
    spec.links["console_base"] = ""
    write(spec, tmp_path, 1.0)
    rules = yaml.safe_load((tmp_path / "alerts.rules.yaml").read_text())["groups"][0]["rules"]
    assert rules and all("console" not in r["annotations"] for r in rules)
