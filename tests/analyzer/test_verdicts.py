"""Verdicts that hold during the incident: the demo's release found by the commands the demo prints 10 minutes after
the page, a framework release named by triage while a queue builds, a scale-out called an improvement and blamed on
the scale event, and triage's deployment taken from a real Alertmanager."""

import copy
import json
import os
import shlex
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
import yaml

from goodput.analyzer.regressions import bucket_label, choose_bucket
from goodput.analyzer.releases import load_releases
from goodput.demo.cli import analysis_commands
from goodput.demo.incident import ALERT, INCIDENT_AT_S, RESCUE_AT_S, incident_fleet
from goodput.demo.stack import start_alertmanager
from goodput.foundation.yamlfile import load_mapping
from goodput.simulator.autoscaler import Autoscaler, ScalingPolicy
from goodput.simulator.config import parse_fleet
from goodput.simulator.fleet import Fleet
from goodput.simulator.releases import write_releases
from goodput.simulator.run import simulate, write_outputs
from goodput.simulator.workload import generate
from tests.conftest import BASE_DEPLOYMENT, BASE_WORKLOAD, REPO, fleet_data, free_port_block, needs

pytestmark = pytest.mark.slow  # long: dealt out first (tests/conftest.py)

DEMO_RELEASE = "prompt_template rag-v3 -> rag-v4"
FRAMEWORK = "framework vllm-0.10.1 -> vllm-0.10.2"


def _alert_for_s(name: str) -> float:
    """The ``for:`` of alert ``name`` in the generated rules: the earliest a page can come after its condition."""
    rules = yaml.safe_load((REPO / "rules" / "alerts.rules.yaml").read_text())
    rule = next(r for g in rules["groups"] for r in g["rules"] if r.get("alert") == name)
    return float(rule["for"].removesuffix("m")) * 60


def _live_store(fleet: dict, cuts_s: list[float], out: Path) -> list[tuple[Path, Path]]:
    """``fleet`` run in virtual time to the last of ``cuts_s``, its spans cut at each as a live store holds them (a
    span is there once it has ended), with the releases file as the live fleet writes it then (what has happened).
    Returns (traces dir, releases file) per cut."""
    cfg = parse_fleet(fleet, "fleet.yaml")
    write_outputs(simulate(cfg, max(cuts_s)), out)
    released = yaml.safe_load((out / "releases.yaml").read_text())
    cuts = [out / f"cut-{cut_s:g}" for cut_s in cuts_s]
    for cut, cut_s in zip(cuts, cuts_s, strict=True):
        (cut / "traces").mkdir(parents=True)
        at = cfg.start_time + timedelta(seconds=cut_s)
        (cut / "releases.yaml").write_text(yaml.safe_dump(
            [r for r in released if datetime.fromisoformat(r["time"]) <= at], sort_keys=False))
    ends_ns = [int((cfg.start_time.timestamp() + cut_s) * 1e9) for cut_s in cuts_s]
    dsts = [(cut / "traces" / "spans.jsonl").open("w") for cut in cuts]
    with (out / "spans.otlp.jsonl").open() as src:
        for line in src:
            batch = json.loads(line)
            scopes = [ss for rs in batch["resourceSpans"] for ss in rs["scopeSpans"]]
            whole = [ss["spans"] for ss in scopes]
            for dst, end_ns in zip(dsts, ends_ns, strict=True):
                for ss, spans in zip(scopes, whole, strict=True):
                    ss["spans"] = [s for s in spans if int(s["endTimeUnixNano"]) <= end_ns]
                dst.write(json.dumps(batch) + "\n")
    for dst in dsts:
        dst.close()
    return [(cut / "traces", cut / "releases.yaml") for cut in cuts]


@pytest.fixture(scope="module")
def framework_stores(tmp_path_factory) -> dict[int, tuple[Path, Path]]:
    """The framework scenario's store 10 and 15 minutes after its release, ingested: minutes -> (db, releases)."""
    out = tmp_path_factory.mktemp("framework")
    stores = {}
    for minutes, (traces, releases) in zip((10, 15), _live_store(_framework_fleet(), [1200, 1500], out), strict=True):
        db = traces.parent / "db.duckdb"
        assert _goodput(f"analyze ingest {traces} --db {db}").returncode == 0
        stores[minutes] = (db, releases)
    return stores


def _goodput(command: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "goodput", *shlex.split(command)], capture_output=True, text=True,
                          cwd=REPO, timeout=300)


def _alertmanager(tmp_path: Path, port: int):
    cfg = tmp_path / "am.yaml"
    cfg.write_text(yaml.safe_dump({"route": {"receiver": "none"}, "receivers": [{"name": "none"}]}))
    return start_alertmanager(tmp_path / "am", port, cfg).ready("/-/ready")


def _page(am_url: str, deployment: str, alert: str, severity: str = "page") -> None:
    """Post a firing alert as Prometheus does, and wait (bounded) until Alertmanager lists it."""
    starts = (datetime.now(UTC) - timedelta(minutes=3)).isoformat()
    body = [{"labels": {"alertname": alert, "deployment": deployment, "tier": "P1", "severity": severity},
             "annotations": {"summary": "test"}, "startsAt": starts}]
    assert httpx.post(f"{am_url}/api/v2/alerts", json=body, timeout=5).status_code == 200
    for _ in range(50):
        if any(a["labels"].get("alertname") == alert for a in httpx.get(f"{am_url}/api/v2/alerts", timeout=5).json()):
            return
        time.sleep(0.1)
    raise AssertionError(f"Alertmanager never listed {alert}")


@needs("prometheus-alertmanager|alertmanager")
def test_the_demos_printed_commands_find_its_release_10_minutes_after_the_page(tmp_path):
    fleet = incident_fleet(load_mapping(REPO / "examples" / "fleet.yaml", "a fleet"), "examples/fleet.yaml",
                           only_rag=True)  # the headless demo's fleet: the other pools cost time and change nothing here
    rag = next(e["deployment"] for e in fleet["events"] if e["kind"] == "release")
    page_s = INCIDENT_AT_S + _alert_for_s(ALERT)  # the earliest the page can fire: the hardest cut
    ((traces, releases),) = _live_store(fleet, [page_s + 600], tmp_path)
    am = _alertmanager(tmp_path, free_port_block(1))
    try:
        _page(am.url, rag, ALERT)
        ingest, decompose, regressions, triage = analysis_commands(tmp_path / "my.duckdb", traces, releases, am.url)
        assert _goodput(ingest).returncode == 0
        assert _goodput(decompose).returncode == 0
        r = _goodput(regressions)
        assert r.returncode == 0, r.stderr
        title, _head, *rows = r.stdout.splitlines()
        assert "buckets of 1m, chosen for the window" in title, r.stdout
        mine = [row for row in rows if rag in row and "regression" in row]
        assert any(DEMO_RELEASE[:20] in row and "after a prompt_template release" in row for row in mine), r.stdout
        r = _goodput(triage)
        assert r.returncode == 0, r.stderr
        first, *_, verdict = r.stdout.splitlines()
        assert first.startswith(f"triage of {rag} (picked: paging: {ALERT} since "), first
        assert verdict.startswith(f"most likely: release {DEMO_RELEASE}"), r.stdout
    finally:
        am.stop()


def _framework_fleet(events: list[dict] | None = None) -> dict:
    """Not the demo: a code pool (P1) of one replica, healthy (p95 TTFT ~0.1 s) until a framework release makes decode
    1.8x slower at 600 s; then its queue builds. A quiet chat pool beside it."""
    code = dict(copy.deepcopy(BASE_DEPLOYMENT), name="code-8b", replicas=1)
    code["engine"] = dict(code["engine"], max_num_seqs=24, max_queue_time_s=3600)
    work = dict(copy.deepcopy(BASE_WORKLOAD), name="code", scene="code", route="code", tier="P1", deployment="code-8b",
                output_tokens={"p50": 300, "p95": 800, "p99": 1000, "max": 1200},
                arrival={"process": "poisson", "rate": 4.5})
    chat = dict(copy.deepcopy(BASE_WORKLOAD), arrival={"process": "poisson", "rate": 1.0})
    release = {"at": 600, "kind": "release", "deployment": "code-8b", "release_kind": "framework",
               "from": "vllm-0.10.1", "to": "vllm-0.10.2", "effects": {"decode_time_scale": 1.8}}
    return fleet_data([copy.deepcopy(BASE_DEPLOYMENT), code], [chat, work], [release, *(events or [])])


@pytest.mark.parametrize("minutes_after", [10, 15])
def test_triage_names_a_framework_release_while_the_queue_builds(framework_stores, minutes_after):
    db, releases = framework_stores[minutes_after]
    r = _goodput(f"analyze triage --db {db} --releases {releases} --format json")
    assert r.returncode == 0, r.stderr
    t = json.loads(r.stdout)
    assert t["deployment"] == "code-8b" and "worst SLO attainment" in t["picked"]  # no Alertmanager: the store's worst
    assert t["regressed"] and t["verdict"].startswith(f"release {FRAMEWORK}"), t["verdict"]
    moved = next(x["moved"] for x in t["facts"]["releases"] if x["release"] == FRAMEWORK)
    assert moved["per-token decode cost"] > 0.5  # 1.8x slower, and more from the fuller batch
    assert "prompt length" not in moved  # the release did not change the requests
    assert "queue" in t["verdict"]  # and the queue is what the requests feel
    r = _goodput(f"analyze regressions --db {db} --releases {releases} --deployment code-8b --format json")
    rows = json.loads(r.stdout)
    assert any(x["release"] == FRAMEWORK and x["direction"] == "regression" and x["metric"] in ("tpot_s", "decode_s")
               for x in rows), rows


def test_a_scale_out_after_a_release_is_an_improvement_of_the_scale_event(tmp_path):
    fleet = incident_fleet(load_mapping(REPO / "examples" / "fleet.yaml", "a fleet"), "examples/fleet.yaml",
                           only_rag=True)
    ((traces, releases),) = _live_store(fleet, [RESCUE_AT_S + 900], tmp_path)
    scale = [r for r in yaml.safe_load(releases.read_text()) if r["kind"] == "scale"]
    assert [(s["from"], s["to"]) for s in scale] == [("1", "4")]  # the three replica_added events: one record
    db = tmp_path / "db.duckdb"
    assert _goodput(f"analyze ingest {traces} --db {db}").returncode == 0
    rows = json.loads(_goodput(f"analyze regressions --db {db} --releases {releases} --format json").stdout)
    after = [x for x in rows if x["time"] >= datetime.fromisoformat(scale[0]["time"]).isoformat()]
    decode = [x for x in after if x["metric"] in ("decode_s", "tpot_s") and x["change"] < -0.3]
    assert decode, rows
    assert all(x["direction"] == "improvement" and x["release"] == "scale 1 -> 4" and "scale event" in x["cause"]
               for x in decode), decode
    assert not any(x["direction"] == "improvement" and x["release"] == DEMO_RELEASE for x in after), after


@needs("prometheus-alertmanager|alertmanager")
def test_triage_takes_the_deployment_paging_in_alertmanager(tmp_path, framework_stores):
    db, _releases = framework_stores[10]
    port = free_port_block(2)
    am = _alertmanager(tmp_path, port)
    try:
        r = _goodput(f"analyze triage --db {db} --alertmanager {am.url}")
        assert r.stdout.startswith(f"triage of code-8b (picked: Alertmanager {am.url}: nothing paging; worst SLO")
        _page(am.url, "chat", "LLMTTFTSLOBurnRateFast", severity="ticket")  # a ticket is not a page
        _page(am.url, "chat", "LLMQueueWaitRisingReplicasShort")
        r = _goodput(f"analyze triage --db {db} --alertmanager {am.url} --format json")
        t = json.loads(r.stdout)
        assert t["deployment"] == "chat" and t["picked"].startswith("paging: LLMQueueWaitRisingReplicasShort since")
        env = {"GOODPUT_ALERTMANAGER_URL": am.url}
        r = subprocess.run([sys.executable, "-m", "goodput", "analyze", "triage", "--db", str(db)], capture_output=True,
                           text=True, cwd=REPO, timeout=120, env={**os.environ, **env})
        assert r.stdout.startswith("triage of chat (picked: paging: "), r.stdout
    finally:
        am.stop()
    r = _goodput(f"analyze triage --db {db} --alertmanager http://127.0.0.1:{port + 1}")  # nothing listens there
    assert r.returncode == 0 and r.stdout.startswith("triage of code-8b (picked: Alertmanager unreachable ("), r.stdout


def test_the_autoscaler_and_the_fleet_record_their_scale_events(tmp_path):
    cfg = parse_fleet(_framework_fleet([{"at": 300, "kind": "replica_lost", "deployment": "code-8b", "replica": 0}]),
                      "fleet.yaml")
    fleet = Fleet(cfg, generate(cfg, 1500, 0))
    scaler = Autoscaler(fleet, "code-8b", ScalingPolicy("signals", 1, 4, goodput_tokens_per_s=1e9, cold_start_s=60,
                                                        scale_down_stabilisation_s=60, scale_down_period_s=60))
    scaler.run(1500)
    rows = [(r.time, r.kind, r.from_version, r.to_version, r.note) for r in fleet.releases]
    assert rows[0] == (300, "scale", "1", "0", "replica lost")
    assert rows[1][1:4] == ("scale", "0", "1") and rows[1][4].startswith("scaled by the signals policy")
    assert 300 <= rows[1][0] <= 315  # the scrape after the loss restores it
    assert ("framework", "vllm-0.10.1", "vllm-0.10.2") in [r[1:4] for r in rows]
    ups = [r for r in rows if r[0] > 600 and r[1] == "scale" and int(r[3]) > int(r[2])]
    assert ups and all(r[4] == "scaled by the signals policy, serving after 60 s" for r in ups)  # the queue's doing
    releases = tmp_path / "releases.yaml"
    write_releases(fleet.releases, cfg.start_time, releases)
    assert [r.kind for r in load_releases(releases)] == [r[1] for r in rows]  # the analyzer reads them back


def test_the_bucket_follows_the_window():
    assert choose_bucket([(2400, 1380.0)]) == 60  # 23 minutes of 1.8 req/s: 1m (16 buckets need <= 86 s)
    assert choose_bucket([(200, 600.0)]) == 30  # 10 minutes: narrower than 1m, for 16 buckets
    assert choose_bucket([(100_000, 86400.0)]) == 300  # a day: 288 buckets of 5m
    assert choose_bucket([(2000, 86400.0)]) == 3600  # a sparse day: 1h (50 requests a bucket would be 12 buckets)
    # the median series' rate (10 in 10 minutes: 50 requests need 50 min), over the longest span (4 days: 20 min)
    assert choose_bucket([(2000, 4 * 86400.0), (50, 600.0), (10, 600.0)]) == 3600
    assert choose_bucket([]) == 300
    assert [bucket_label(s) for s in (30, 60, 300, 7200, 86400)] == ["30s", "1m", "5m", "2h", "1d"]
