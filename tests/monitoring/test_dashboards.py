"""The committed dashboards: fresh, valid for the SDK's dashboard model, every query parsed by promtool and naming only
catalog metrics or recorded rules, and every alert's `dashboard` link landing on a panel that exists."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from urllib.parse import parse_qsl, urlsplit

import pytest
import yaml
from grafana_foundation_sdk.cog import plugins
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import dashboard as dm

from goodput.contracts import dashboard_ids as ids
from goodput.contracts.catalog import names
from goodput.monitoring.dashgen import ANNOTATION_EXTRAS, PROMETHEUS_BUILTINS, RELEASE_RULE, Names, build, release_rules
from goodput.monitoring.rulegen import RULE_FILES, load_spec
from tests.conftest import REPO, needs
from tests.monitoring.dashboards_fixtures import DASHBOARDS, boards, expressions
from tests.monitoring.test_rules import _metric_names

RULES = REPO / "rules"


def _goodput(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "goodput", "dashboards", *args], cwd=REPO, capture_output=True,
                          text=True)


def test_generated_files_are_fresh():
    built = build(load_spec(RULES / "slos.yaml"))
    assert sorted(built) == sorted(p.name for p in DASHBOARDS.glob("*.json"))
    for name, text in built.items():
        assert (DASHBOARDS / name).read_text() == text, f"{name} is stale: run `goodput dashboards generate`"
    r = _goodput("generate", "--check")
    assert r.returncode == 0, r.stderr


def test_check_names_each_stale_or_missing_file(tmp_path):
    out = tmp_path / "dashboards"
    shutil.copytree(DASHBOARDS, out)
    doc = json.loads((out / "gpus.json").read_text())
    doc["panels"][0]["title"] = "edited in Grafana"
    (out / "gpus.json").write_text(json.dumps(doc))
    (out / "capacity.json").unlink()
    r = _goodput("generate", "--check", "--out", str(out))
    assert r.returncode == 1
    stale = [line for line in r.stderr.splitlines() if line.startswith("stale: ")]
    assert sorted(stale) == [f"stale: {out / 'capacity.json'}", f"stale: {out / 'gpus.json'}"], r.stderr
    r = _goodput("generate", "--out", str(out))
    assert r.returncode == 0 and _goodput("generate", "--check", "--out", str(out)).returncode == 0


def test_dashboards_round_trip_through_the_sdk_model():
    """The schema check: decoding with the SDK's typed dashboard model (panel plugins registered) and encoding again
    gives the same JSON, so no key is unknown to the model and no value of the wrong shape is dropped. Prometheus
    annotation fields beside ``expr`` are the one open part of Grafana's schema (per data source), checked apart."""
    plugins.register_default_plugins()
    for name, doc in boards().items():
        expected = json.loads(json.dumps(doc))
        for a in expected["annotations"]["list"]:
            extras = ANNOTATION_EXTRAS[a["name"]]
            assert {k: a.pop(k) for k in extras} == extras, (name, a["name"])
        again = json.loads(json.dumps(dm.Dashboard.from_json(doc), cls=JSONEncoder))
        assert again == expected, name


def test_every_board_has_its_address_variables_units_and_descriptions():
    docs = boards()
    assert set(docs) == {b.file for b in ids.BOARDS}
    schema = dm.Dashboard().schema_version  # the SDK's, i.e. the current Grafana's
    for board in ids.BOARDS:
        doc = docs[board.file]
        assert (doc["uid"], doc["title"], doc["schemaVersion"]) == (board.uid, board.title, schema)
        assert [v["name"] for v in doc["templating"]["list"]] == ["datasource", *board.variables]
        panel_ids = [p["id"] for p in doc["panels"]]
        assert len(panel_ids) == len(set(panel_ids)), (board.uid, panel_ids)
        for p in doc["panels"]:
            assert len(p["description"]) > 20, (board.uid, p["title"])
            assert p["fieldConfig"]["defaults"]["unit"], (board.uid, p["title"])
            assert p["datasource"]["uid"] == "${datasource}" and p["targets"], (board.uid, p["title"])
        assert {a["name"] for a in doc["annotations"]["list"]} == {"Releases", "Firing alerts"}
    all_vars = {v for b in ids.BOARDS for v in b.variables}
    assert all_vars == {"model", "deployment", "tier", "tenant", "route"}
    units = {p["fieldConfig"]["defaults"]["unit"] for d in docs.values() for p in d["panels"]}
    assert {"s", "percentunit", "suffix: tokens/s"} <= units


@needs("promtool")
def test_every_expression_parses_with_promtool(tmp_path):
    """Each query, variables substituted, as a recording rule's expression; and the releases rule file."""
    exprs = expressions()
    assert len(exprs) > 60, len(exprs)
    rules = [{"record": f"goodput_dashboard_check_{i}", "expr": e.promql} for i, e in enumerate(exprs)]
    path = tmp_path / "dashboards.rules.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboards", "rules": rules}]}))
    r = subprocess.run(["promtool", "check", "rules", str(path)], capture_output=True, text=True)
    assert r.returncode == 0 and "SUCCESS" in r.stdout, r.stdout + r.stderr

    releases = tmp_path / "releases.yaml"
    releases.write_text("- {time: '2026-11-23T09:20:00Z', deployment: chat, kind: framework, from: a, to: b, note: x}\n"
                        "- {time: '2026-11-23T10:00:00Z', deployment: '*', kind: config, from: c, to: d, note: y}\n")
    (tmp_path / "releases.rules.yaml").write_text(release_rules(releases))
    r = subprocess.run(["promtool", "check", "rules", str(tmp_path / "releases.rules.yaml")], capture_output=True,
                       text=True)
    assert r.returncode == 0 and "SUCCESS" in r.stdout, r.stdout + r.stderr
    rule = yaml.safe_load((tmp_path / "releases.rules.yaml").read_text())["groups"][0]["rules"][0]
    assert rule == {"record": RELEASE_RULE, "expr": "vector(1795425600)",
                    "labels": {"deployment": "chat", "kind": "framework", "from": "a", "to": "b"}}


def test_every_name_is_a_catalog_metric_or_a_recorded_rule():
    recorded = {r["record"] for f in RULE_FILES for g in yaml.safe_load((RULES / f).read_text())["groups"]
                for r in g["rules"] if "record" in r}
    known = names() | recorded | {RELEASE_RULE} | set(PROMETHEUS_BUILTINS)
    used = set()
    for e in expressions():
        found = _metric_names(e.promql)
        assert found, e
        assert found <= known, (e.where, found - known)
        used |= found
    # the signals are all on a dashboard
    assert {"deployment:llm_autoscale_desired_replicas:max", "gpu:llm_gpu_utilization:ratio",
            "llm_gateway_time_to_first_token_seconds_bucket", "llm_gateway_rejections_total"} <= used


def test_a_bad_releases_file_is_one_line(tmp_path):
    bad = tmp_path / "releases.yaml"
    bad.write_text("- {time: yesterday, deployment: chat, kind: model, from: a, to: b}\n")
    r = _goodput("releases", str(bad))
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and str(bad) in r.stderr, r.stderr


def _alert_test_labels() -> dict[str, list[dict]]:
    """Alert name -> the label sets promtool's unit tests expect it to fire with."""
    out: dict[str, list[dict]] = {}
    for f in (RULES / "tests").glob("*.yaml"):
        for test in yaml.safe_load(f.read_text())["tests"]:
            for case in test.get("alert_rule_test", []):
                out.setdefault(case["alertname"], []).extend(e.get("exp_labels", {}) for e in case.get("exp_alerts", []))
    return out


def _render(template: str, labels: dict[str, str]) -> str:
    """Prometheus's rendering of the link's two template forms (promtool's unit tests render the real thing)."""
    text = re.sub(r"\{\{ with \$labels\.(\w+) \}\}(.*?)\{\{ end \}\}",
                  lambda m: m[2].replace("{{ . }}", labels[m[1]]) if labels.get(m[1]) else "", template)
    assert "{{" not in text, text
    return text


def test_every_alert_links_to_a_panel_with_its_labels_as_variables():
    docs = {d["uid"]: d for d in boards().values()}
    fired = _alert_test_labels()
    alerts = [r for f in RULE_FILES for g in yaml.safe_load((RULES / f).read_text())["groups"] for r in g["rules"]
              if "alert" in r]
    assert {a["alert"] for a in alerts} == set(ids.ALERT_PANELS)
    for a in alerts:
        for labels in fired[a["alert"]] or [{}]:
            url = urlsplit(_render(a["annotations"]["dashboard"], labels))
            m = re.fullmatch(r"/d/([a-z0-9-]+)/([a-z0-9-]+)", url.path)
            assert m and m[1] in docs, (a["alert"], url)
            doc = docs[m[1]]
            assert m[2] == re.sub(r"[^a-z0-9]+", "-", doc["title"].lower()).strip("-"), (a["alert"], url)
            query = dict(parse_qsl(url.query))
            view = query.pop("viewPanel")
            panel = next((p for p in doc["panels"] if str(p["id"]) == view), None)
            assert panel, f"{a['alert']}: {url.geturl()} names no panel of {m[1]}"
            # the panel shows what the alert watches (GoodputWatchdog watches nothing: it links to the firing alerts)
            shown = {n for t in panel["targets"] for n in _metric_names(t["expr"])}
            watched = _metric_names(a["expr"])
            assert shown & watched or (not watched and "ALERTS" in shown), (a["alert"], panel["title"], watched)
            variables = {v["name"] for v in doc["templating"]["list"]}
            for key, value in query.items():
                var = key.removeprefix("var-")
                assert var in variables and labels[var] == value, (a["alert"], key, value)
            # every label the dashboard has a variable for is passed on
            assert {k.removeprefix("var-") for k in query} == {k for k in labels if k in variables} & set(
                ids.ALERT_PANELS[a["alert"]][2]), (a["alert"], labels, query)


def test_provisioning_files_fit_the_dashboards():
    """Grafana's provisioning format (apiVersion 1): one Prometheus datasource, the type every dashboard's
    `datasource` variable selects, and a file provider that refuses edits made in the UI (the JSON is generated)."""
    prov = DASHBOARDS / "provisioning"
    (ds,) = yaml.safe_load((prov / "datasources" / "goodput.yaml").read_text())["datasources"]
    assert ds["type"] == "prometheus" and ds["access"] == "proxy" and ds["url"].startswith("http")
    for doc in boards().values():
        (var,) = [v for v in doc["templating"]["list"] if v["name"] == "datasource"]
        assert var["type"] == "datasource" and var["query"] == ds["type"]
    (provider,) = yaml.safe_load((prov / "dashboards" / "goodput.yaml").read_text())["providers"]
    assert provider["type"] == "file" and provider["allowUiUpdates"] is False and provider["options"]["path"]
    for f in (prov / "datasources" / "goodput.yaml", prov / "dashboards" / "goodput.yaml"):
        assert yaml.safe_load(f.read_text())["apiVersion"] == 1, f


def test_the_generator_refuses_a_name_the_catalog_or_the_rules_do_not_define():
    n = Names(load_spec(RULES / "slos.yaml"))
    assert n.m("llm_gpu_power_watts") and n.r("deployment:llm_autoscale_desired_replicas:max")
    with pytest.raises(ValueError, match="llm_gpu_power_watt is not in goodput/contracts/catalog.py"):
        n.m("llm_gpu_power_watt")
    with pytest.raises(ValueError, match="deployment:llm_autoscale_desired_replicas:min is not recorded"):
        n.r("deployment:llm_autoscale_desired_replicas:min")
    with pytest.raises(ValueError):
        n.r("llm_gpu_power_watts")  # a raw metric is no recorded rule


def test_every_panel_of_histogram_quantiles_says_they_are_bounds_in_the_edge_buckets():
    """histogram_quantile interpolates inside the first bucket (a 1 ms wait reads ~4.8 ms) and answers the last
    finite bound for +Inf: each panel drawing one, directly or through a recorded p-quantile, says so (of the gateway's
    buckets, or of an engine histogram's own)."""
    from goodput.monitoring.dashgen import ENGINE_QUANTILE_NOTE, QUANTILE_NOTE

    drawn = []
    for name, board in boards().items():
        for panel in board["panels"]:
            exprs = [t.get("expr", "") for t in panel.get("targets", [])]
            if any("histogram_quantile" in e or re.search(r"_seconds:p\d+_5m", e) for e in exprs):
                drawn.append(f"{name} {panel['title']}")
                note = ENGINE_QUANTILE_NOTE if any("llm_kv_transfer_seconds" in e for e in exprs) else QUANTILE_NOTE
                assert note.strip() in panel.get("description", ""), f"{name} panel {panel['title']!r}"
    assert "5 ms" in QUANTILE_NOTE and "300 s" in QUANTILE_NOTE
    assert len(drawn) >= 8, drawn  # queue wait, TTFT, TPOT, E2E on deployment; three on tenants; capacity's queue


def test_the_deployment_board_shows_the_kv_transfer_of_p_d_disaggregation():
    """Latency (p50, p95, p95 per replica), bytes per second and failures of the KV transfer from prefill to decode
    replicas, from the catalog's three metrics."""
    panels = {p["title"]: p for p in boards()[ids.DEPLOYMENT.file]["panels"]}
    kv = {t: [x["expr"] for x in p["targets"]] for t, p in panels.items() if t.startswith("KV transfer")}
    assert set(kv) == {"KV transfer p50 / p95 (P/D disaggregation)", "KV transfer bytes per second", "KV transfer failures"}
    used = {m for exprs in kv.values() for e in exprs for m in _metric_names(e)}
    assert used == {"llm_kv_transfer_seconds_bucket", "llm_kv_transfer_seconds_sum", "llm_kv_transfer_seconds_count",
                    "llm_kv_transfer_bytes_total", "llm_kv_transfer_failures_total"}
    assert {"llm_kv_transfer_seconds", "llm_kv_transfer_bytes_total", "llm_kv_transfer_failures_total"} <= names()
    latency = kv["KV transfer p50 / p95 (P/D disaggregation)"]
    assert [e.split(",")[0] for e in latency] == [f"histogram_quantile({q}" for q in ("0.5", "0.95", "0.95")]
    assert "by (le, deployment, replica)" in latency[2]
    assert panels["KV transfer bytes per second"]["fieldConfig"]["defaults"]["unit"] == "Bps"
