"""goodput's AlertmanagerConfig and alerts inside kube-prometheus-stack's own Alertmanager configuration.

The chart's default configuration (tests/fixtures/kube_prometheus_stack/, its source in tests/fixtures/SOURCES.md) is
merged with the AlertmanagerConfig `goodput deploy kubernetes` writes the way prometheus-operator merges it under its
default matcher strategy, OnNamespace (`pkg/alertmanager/amcfg.go` `AddAlertmanagerConfigs`: receivers renamed
`<namespace>/<name>/<receiver>`, the config's route first among the root's routes with `namespace="<its namespace>"`
added and `continue: true`, the same matcher added to both sides of its inhibit rules). A real Alertmanager runs
the result (amtool checks it first); alerts carrying the labels the deployed PrometheusRules give them are posted to
it beside the chart's own `Watchdog` and `InfoInhibitor` and another team's alerts, and what reaches goodput's
webhooks, and what is inhibited, is read back.
"""

import dataclasses
import subprocess
import time

import httpx
import pytest
import yaml

from goodput.cli import main
from goodput.demo.stack import start_alertmanager
from goodput.demo.webhook import WebhookReceiver
from goodput.monitoring.rulegen import WATCHDOG, load_spec, write
from tests.conftest import REPO, free_port_block, needs
from tests.deploy.test_kubernetes import IMAGE

pytestmark = needs("prometheus-alertmanager|alertmanager", "amtool")

CHART = yaml.safe_load((REPO / "tests" / "fixtures" / "kube_prometheus_stack" / "alertmanager_default.yaml").read_text())
NAMESPACE = "goodput"


def _matcher(m: dict) -> str:
    return f'{m["name"]}{m["matchType"]}"{m["value"]}"'


def _route(r: dict, prefix: str) -> dict:
    out = {"receiver": prefix + r["receiver"]} if "receiver" in r else {}
    for camel, snake in (("groupBy", "group_by"), ("groupWait", "group_wait"), ("groupInterval", "group_interval"),
                         ("repeatInterval", "repeat_interval"), ("continue", "continue")):
        if camel in r:
            out[snake] = r[camel]
    if "matchers" in r:
        out["matchers"] = [_matcher(m) for m in r["matchers"]]
    if "routes" in r:
        out["routes"] = [_route(c, prefix) for c in r["routes"]]
    return out


def merged(base: dict, amc: dict) -> dict:
    """The Alertmanager configuration the operator writes from ``base`` and the AlertmanagerConfig ``amc``
    (OnNamespace, Alertmanager 0.22 or later: matchers, not match)."""
    ns, name = amc["metadata"]["namespace"], amc["metadata"]["name"]
    prefix, scope = f"{ns}/{name}/", f'namespace="{ns}"'
    cfg = {k: v for k, v in base.items() if k != "templates"}  # the chart's template glob names a path of its pod
    top = _route(amc["spec"]["route"], prefix)
    top["matchers"] = [*top.get("matchers", []), scope]
    top["continue"] = True
    cfg["route"] = {**base["route"], "routes": [top, *base["route"].get("routes", [])]}
    cfg["receivers"] = [*base["receivers"], *(
        {"name": prefix + r["name"], "webhook_configs": [
            {"url": h["url"], "send_resolved": h["sendResolved"], "max_alerts": h["maxAlerts"]}
            for h in r.get("webhookConfigs", [])]} for r in amc["spec"]["receivers"])]
    cfg["inhibit_rules"] = [*base["inhibit_rules"], *(
        {"source_matchers": [*(_matcher(m) for m in i["sourceMatch"]), scope],
         "target_matchers": [*(_matcher(m) for m in i["targetMatch"]), scope], "equal": i["equal"]}
        for i in amc["spec"].get("inhibitRules", []))]
    return cfg


@pytest.fixture(scope="module")
def deployed(tmp_path_factory):
    """`goodput deploy kubernetes` over rules whose receivers are this test's webhooks and whose waits are 1 s."""
    tmp = tmp_path_factory.mktemp("chart")
    hook = WebhookReceiver(port=0).start()
    spec = load_spec(REPO / "rules" / "slos.yaml")
    write(dataclasses.replace(spec, alertmanager={
        "receivers": {r: f"{hook.url}/{r}" for r in ("pager", "ticket", "log")},
        "group_wait": "1s", "group_interval": "1s", "repeat_interval": "1m"}), tmp / "rules")
    assert main(["deploy", "kubernetes", "--out", str(tmp / "k8s"), "--rules", str(tmp / "rules"), "--image", IMAGE,
                 "--namespace", NAMESPACE, "--dashboards", str(REPO / "dashboards"),
                 "--allow-loopback-receivers"]) == 0
    objects = [o for p in sorted((tmp / "k8s").glob("*.yaml")) for o in yaml.safe_load_all(p.read_text())]
    [amc] = [o for o in objects if o["kind"] == "AlertmanagerConfig"]
    alerts = {r["alert"]: r["labels"] for o in objects if o["kind"] == "PrometheusRule"
              for g in o["spec"]["groups"] for r in g["rules"] if "alert" in r}
    (tmp / "alertmanager.yml").write_text(yaml.safe_dump(merged(CHART["config"], amc), sort_keys=False))
    yield tmp, hook, alerts
    hook.stop()


def test_the_merged_configuration_passes_amtool(deployed):
    tmp, _, _ = deployed
    r = subprocess.run(["amtool", "check-config", str(tmp / "alertmanager.yml")], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.parametrize("labels, receiver", [
    ({"alertname": "LLMEngineDown"}, f"{NAMESPACE}/goodput/pager"),
    ({"alertname": "LLMTenantAtQuota"}, f"{NAMESPACE}/goodput/ticket"),
    ({"alertname": WATCHDOG}, f"{NAMESPACE}/goodput/log"),
])
def test_goodputs_alerts_route_to_goodputs_receivers_with_the_labels_the_rules_give_them(deployed, labels, receiver):
    tmp, _, alerts = deployed
    rule_labels = alerts[labels["alertname"]]
    assert rule_labels["namespace"] == NAMESPACE
    r = subprocess.run(["amtool", "config", "routes", "test", f"--config.file={tmp / 'alertmanager.yml'}",
                        *(f"{k}={v}" for k, v in {**rule_labels, **labels}.items())],
                       capture_output=True, text=True)
    # goodput's route continues: the chart's root (`null`) is reached after it, never instead of it
    assert r.returncode == 0 and r.stdout.split()[0].split(",")[0] == receiver, r.stdout + r.stderr


def test_in_a_real_alertmanager_beside_the_charts_own_alerts(deployed):
    tmp, hook, alerts = deployed
    am = start_alertmanager(tmp / "am", free_port_block(1), tmp / "alertmanager.yml").ready("/-/ready")
    try:
        def post(*items):
            now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            httpx.post(f"{am.url}/api/v2/alerts", json=[{"labels": labels, "startsAt": now} for labels in items],
                       timeout=5).raise_for_status()

        def rule(name, **extra):
            return {**alerts[name], "alertname": name, **extra}

        post(
            rule("LLMEngineDown", deployment="chat", replica="chat-7d-a"),
            rule("LLMQueueWaitRisingReplicasShort", deployment="chat", tier="P0"),  # held by the engine down
            rule("LLMTenantAtQuota", deployment="chat", tenant="flood"),
            rule(WATCHDOG),
            # the chart's own, always there; its InfoInhibitor as it fires for a namespace holding an info alert
            {"alertname": "Watchdog", "severity": "none"},
            {"alertname": "InfoInhibitor", "severity": "none", "namespace": NAMESPACE},
            # another team: nothing of theirs reaches goodput's receivers
            {"alertname": "KubePodCrashLooping", "severity": "critical", "namespace": "payments"},
            {"alertname": "PaymentsDown", "severity": "page", "namespace": "payments"},
            # what a severity=info watchdog would be (goodput's before), and an alert without goodput's namespace
            {"alertname": "OldWatchdog", "severity": "info", "namespace": NAMESPACE},
            {"alertname": "LLMEngineDown", "severity": "page", "deployment": "rag", "replica": "rag-0"},
        )

        def arrived():
            return (hook.alerts("pager", "LLMEngineDown") and hook.alerts("ticket", "LLMTenantAtQuota")
                    and hook.alerts("log", WATCHDOG))

        deadline = time.monotonic() + 30
        while not arrived() and time.monotonic() < deadline:
            time.sleep(0.25)
        assert arrived(), {r: [a["labels"]["alertname"] for a in hook.alerts(r)] for r in ("pager", "ticket", "log")}
        time.sleep(2)  # a group interval more: whatever else would arrive has

        received = {r: sorted({a["labels"]["alertname"] for a in hook.alerts(r)}) for r in ("pager", "ticket", "log")}
        assert received == {"pager": ["LLMEngineDown"], "ticket": ["LLMTenantAtQuota"], "log": [WATCHDOG]}
        assert [a["labels"]["deployment"] for a in hook.alerts("pager")] == ["chat"]  # not rag: no namespace, no route

        state = {(a["labels"]["alertname"], a["labels"].get("deployment")): a["status"]
                 for a in httpx.get(f"{am.url}/api/v2/alerts", timeout=5).json()}
        assert state[(WATCHDOG, None)]["state"] == "active"  # not held by the chart's InfoInhibitor
        assert state[("OldWatchdog", None)]["inhibitedBy"]  # as an info watchdog would be
        # goodput's own inhibition, scoped to its namespace, holds the symptom while its engine is down
        assert state[("LLMQueueWaitRisingReplicasShort", "chat")]["inhibitedBy"]
        assert not state[("LLMEngineDown", "chat")]["inhibitedBy"] and not state[("LLMTenantAtQuota", "chat")]["inhibitedBy"]
    finally:
        am.stop()
