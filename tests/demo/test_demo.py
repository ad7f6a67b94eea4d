"""`make demo` runs `goodput demo`: the fleet, the three exporters, the stack and the console behave, not just print.

One demo process on a small fleet of its own (two busy replicas, one of them lost at 30 virtual seconds, and a
quiet replica that only this test loads) on free ports, without the scripted incident: the fake GPUs follow the
engine's load, a lost replica's GPU reads lost, the analyzer commands the demo prints work on the traces it
stored, the console it prints answers, and SIGTERM stops it cleanly. Then the scripted incident, compressed
(`goodput demo --headless --speed 20`): it pages, the release is blamed, it resolves after the replica add.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pandas as pd
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from goodput.demo.incident import INCIDENT_AT_S, RESCUE_AT_S, incident_fleet, incident_plan, rag_deployment
from goodput.simulator.config import parse_fleet
from goodput.simulator.run import simulate
from tests.conftest import REPO, free_port_block, needs, require

pytestmark = pytest.mark.slow  # long: dealt out first (tests/conftest.py)

LOST_AT_S = 30  # virtual = wall seconds after the fleet starts; leaves room for a slow start under load
FLEET = {
    "name": "demo-test", "start_time": "2026-11-23T09:00:00Z", "seed": 3,
    "deployments": [
        {"name": "chat-test", "model": "Llama-3.1-8B", "gpu": "H100-80GB-SXM", "replicas": 2,
         "router": "least-outstanding"},
        {"name": "quiet", "model": "Llama-3.1-8B", "gpu": "H100-80GB-SXM", "replicas": 1},
    ],
    "workloads": [{"name": "chat", "scene": "chat", "tier": "P0", "deployment": "chat-test", "tenants": {"acme": 1},
                   "input_tokens": {"p50": 300, "p95": 1000, "p99": 1500, "max": 2000},
                   "output_tokens": {"p50": 60, "p95": 200, "p99": 300, "max": 400},
                   "arrival": {"process": "poisson", "rate": 3}}],
    "events": [{"at": LOST_AT_S, "kind": "replica_lost", "deployment": "chat-test", "replica": 1}],
}
LOAD_REQUESTS = 6


def _wait(what: str, check: Callable[[], object], timeout: float, every: float = 0.5):
    """Poll ``check`` until it returns something truthy; fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except (httpx.HTTPError, KeyError) as e:  # not serving yet, or not sampled yet
            last = e
        if last and not isinstance(last, Exception):
            return last
        time.sleep(every)
    pytest.fail(f"waited {timeout:.0f} s for {what}; last seen: {last!r}")


def _gpus(url: str) -> dict[str, dict[str, float]]:
    """Each replica's GPU as the GPU exporter publishes it: {replica: {"up": .., "util": ..}} (util absent when lost)."""
    fams = {f.name: f for f in text_string_to_metric_families(httpx.get(url, timeout=5).text)}
    replica = {s.labels["gpu"]: s.labels["replica"] for s in fams["llm_gpu_deployment_info"].samples}
    out: dict[str, dict[str, float]] = {r: {} for r in replica.values()}
    for family, key in (("llm_gpu_up", "up"), ("llm_gpu_utilization_ratio", "util")):
        for s in fams[family].samples if family in fams else ():
            out[replica[s.labels["gpu"]]][key] = s.value
    return out


def _stop(p: subprocess.Popen) -> None:
    """SIGTERM, as Ctrl-C stops the demo cleanly; killed only if it has not stopped in a minute."""
    p.send_signal(signal.SIGTERM)
    try:
        p.wait(timeout=60)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


def _run(argv: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=120)


def test_demo_stack_follows_the_fleet_and_stops_cleanly(tmp_path):
    fleet, out = tmp_path / "fleet.yaml", tmp_path / "out"
    fleet.write_text(yaml.safe_dump(FLEET))
    base = free_port_block(11)
    ports = {"gpu": base + 3, "engine": base + 4, "requests": base + 5, "otlp": base + 6, "prometheus": base + 7,
             "alertmanager": base + 8, "webhook": base + 9, "console": base + 10}
    stdout, stderr = tmp_path / "stdout.txt", tmp_path / "stderr.txt"
    with stdout.open("w") as so, stderr.open("w") as se:
        p = subprocess.Popen([sys.executable, "-m", "goodput", "demo", "--fleet", str(fleet), "--out", str(out),
                              "--base-port", str(base), *(a for k, v in ports.items() for a in (f"--{k}-port", str(v))),
                              "--duration", "300", "--no-incident"], cwd=REPO, stdout=so, stderr=se, text=True)
    try:
        printed = _wait("the demo to print its endpoints", lambda: "Ctrl-C to stop." in stdout.read_text()
                        and stdout.read_text(), 60)
        replicas = dict(re.findall(r"^  (\S+-\d+) +\S+ +(http://\S+/v1)", printed, re.M))
        assert set(replicas) == {"chat-test-0", "chat-test-1", "quiet-0"}, printed
        advertised = [shlex.split(line)[1:] for line in printed.splitlines() if line.startswith("  .venv/bin/goodput ")]
        assert [a[:2] for a in advertised] == [["analyze", c] for c in ("ingest", "decompose", "regressions", "triage")]
        gpu_url = f"http://127.0.0.1:{ports['gpu']}/metrics"

        # every GPU reads up before the loss; nobody sends the quiet replica anything, so its GPU idles
        before = _wait("all three GPUs sampled, the quiet one idle",
                       lambda: (g := _gpus(gpu_url)) and len(g) == 3 and all(v.get("up") == 1 for v in g.values())
                       and g["quiet-0"].get("util") == 0 and g, 30)
        assert before["chat-test-1"]["up"] == 1

        # load the quiet replica: its GPU is busy while the requests run, and idle again once they finish
        url = replicas["quiet-0"]
        model = httpx.get(f"{url}/models", timeout=5).json()["data"][0]["id"]
        answers: list[httpx.Response] = []

        def request() -> None:
            answers.append(httpx.post(f"{url}/completions", timeout=120, json={
                "model": model, "prompt": "hello " * 200, "max_tokens": 800, "ignore_eos": True}))

        load = [threading.Thread(target=request) for _ in range(LOAD_REQUESTS)]
        for t in load:
            t.start()
        busy = _wait("the quiet replica's GPU to read busy under load",
                     lambda: (u := _gpus(gpu_url)["quiet-0"].get("util", 0)) >= 0.5 and u, 30)
        assert busy <= 1
        for t in load:
            t.join(timeout=120)
        assert [r.status_code for r in answers] == [200] * LOAD_REQUESTS
        assert all(r.json()["usage"]["completion_tokens"] == 800 for r in answers)
        _wait("the quiet replica's GPU to idle again", lambda: _gpus(gpu_url)["quiet-0"].get("util") == 0, 30)

        # the lost replica's GPU reads lost; the others stay up
        after = _wait("the lost replica's GPU to read llm_gpu_up 0",
                      lambda: (g := _gpus(gpu_url)) and g["chat-test-1"].get("up") == 0 and g, LOST_AT_S + 30)
        assert after["chat-test-0"]["up"] == 1 and after["quiet-0"]["up"] == 1
        assert "util" not in after["chat-test-1"]

        if shutil.which("prometheus") and shutil.which("prometheus-alertmanager"):
            prom = f"http://127.0.0.1:{ports['prometheus']}"
            _wait("Prometheus to scrape the three exporters", lambda: {u["metric"]["job"] for u in httpx.get(
                f"{prom}/api/v1/query", params={"query": 'up{job=~"llm-.*"} == 1'}).json()["data"]["result"]}
                == {"llm-gpu", "llm-engine", "llm-requests"}, 30, every=1)
            rules = httpx.get(f"{prom}/api/v1/rules").json()["data"]["groups"]
            assert any(r.get("name") == "LLMQueueWaitRisingReplicasShort" for g in rules for r in g["rules"])
            assert httpx.get(f"http://127.0.0.1:{ports['alertmanager']}/-/ready").status_code == 200
            # what it prints for a person to open exists in Debian's builds (Prometheus 2.42's /alerts is a 404; its
            # Alertmanager has no web UI, only a page saying so)
            for name in ("prometheus", "alertmanager"):
                url = re.search(rf"^  {name} +(http://\S+)", printed, re.M).group(1)
                r = httpx.get(url, timeout=10)
                assert r.status_code == 200 and "does not include a web" not in r.text, (url, r.status_code)
        else:
            assert not os.environ.get("CI"), "CI runs the demo with Prometheus and Alertmanager (Debian packages)"

        # the console it printed answers (its pages are tested in tests/console/)
        console = re.search(r"^  console +(http://\S+)", printed, re.M)
        assert console and console.group(1) == f"http://127.0.0.1:{ports['console']}", printed
        assert httpx.get(f"{console.group(1)}/_stcore/health", timeout=10).text == "ok"

        # the analyzer commands the demo printed, run as printed, on the traces the running demo stored
        goodput = [sys.executable, "-m", "goodput"]
        ingest, decompose, regressions, triage = advertised

        def quiet_requests() -> int:
            r = _run([*goodput, *ingest])
            assert r.returncode == 0, r.stderr
            r = _run([*goodput, *decompose, "--format", "json"])
            rows = json.loads(r.stdout) if r.returncode == 0 else []
            return sum(row["requests"] for row in rows if row["deployment"] == "quiet")

        assert _wait(f"the {LOAD_REQUESTS} requests sent to the quiet replica to reach the analyzer",
                     lambda: quiet_requests() >= LOAD_REQUESTS, 30, every=2)
        assert quiet_requests() == LOAD_REQUESTS  # the background workload never reaches the quiet pool
        r = _run([*goodput, *regressions])
        assert r.returncode == 0, r.stderr
        assert "--deployment" not in triage  # it picks the deployment paging (else the worst SLO attainment)
        r = _run([*goodput, *triage])
        assert r.returncode == 0, r.stderr
        picked = re.match(r"triage of (\S+) \(picked: ", r.stdout)
        assert picked and picked.group(1) in ("chat-test", "quiet"), r.stdout
        # every step ran and a verdict closes it; whether light load on one replica left reads as a regression depends
        # on the machine's pace, so either verdict is right here (tests/analyzer/test_verdicts.py pins them on incidents)
        steps = [line.split(":")[0].strip() for line in r.stdout.splitlines()[1:-1]]
        assert steps[-5:] == ["1. latency split", "2. workload", "3. KV cache", "4. routing and cache", "5. releases"], \
            r.stdout
        assert r.stdout.rstrip().splitlines()[-1].startswith(("most likely: ", "no regression: ")), r.stdout
        facts = json.loads(_run([*goodput, *triage, "--format", "json"]).stdout)["facts"]
        assert facts["decomposition"]["deployment"] == picked.group(1) and facts["recent"]["requests"] > 0
    finally:
        _stop(p)
    assert p.returncode == 0, stderr.read_text()[-3000:]
    assert stdout.read_text().rstrip().endswith("goodput demo stopped.")
    assert list(Path(out / "traces").glob("date=*/hour=*/*.parquet"))


def test_headless_incident_tells_and_checks_the_whole_story(tmp_path):
    """CI's run of the scripted incident at speed 20 (rules at 1/20 of their durations: goodput/demo/cli.py): met
    before the release, paged, found, resolved after the scale-out, quiet after it; and the terminal told it.

    Two of its checks need the other engineers' work of issue 21 (merged with this branch): the printed
    `regressions` finding the release within 10 minutes of the page ("verdicts": the bucket chosen from the window)
    and no new page once the added replicas serve ("signals": rules on what waits now)."""
    require("prometheus", "prometheus-alertmanager")
    base = free_port_block(12, below_ephemeral=True)  # its added replicas bind a minute in
    ports = [a for k, p in {"gpu": 6, "engine": 7, "requests": 8, "otlp": 9, "prometheus": 10, "alertmanager": 11,
                            "webhook": 5}.items() for a in (f"--{k}-port", str(base + p))]
    r = subprocess.run([sys.executable, "-m", "goodput", "demo", "--headless", "--speed", "20", "--out",
                        str(tmp_path / "out"), "--base-port", str(base), *ports],
                       cwd=REPO, capture_output=True, text=True, timeout=420)
    out = r.stdout
    ok = [line.split("] ", 1)[1] for line in out.splitlines() if line.startswith("  ok   [")]
    for check in (r"before the release rag-70b-h200 met its SLO \(tpot P1/rag .* ttft P1/rag .*\) with 1 replicas "
                  r"available, 1 required",
                  r"paged: \S+ - pager +firing +LLMQueueWaitRisingReplicasShort deployment=rag-70b-h200",
                  r"the Overview lists LLMQueueWaitRisingReplicasShort for rag-70b-h200",
                  r"Releases blames the release: .* after prompt_template rag-v3 -> rag-v4",
                  r"resolved at \[\S+ UTC  T\+(\d\d):\d\d\] \(after the scale-out",
                  r"the printed regressions command, run at .* allowed\), finds the release: .* after prompt_template rag-v3 ",
                  r"no new page for rag-70b-h200 from the replicas' readiness",
                  r"arrival rate of rag-70b-h200: \d+ minutes and [1-9]\d* triage windows against the fleet's true "
                  r"arrivals, 0 off by more than 10%",
                  r"no improvement in queue wait, TTFT or E2E reported before the replicas serve"):
        assert any(re.match(check, line) for line in ok), f"missed: {check}\n{out[-5000:]}"
    resolved = next(re.match(r"resolved at \[\S+ UTC  T\+(\d\d):(\d\d)", line) for line in ok
                    if line.startswith("resolved at"))
    assert int(resolved.group(1)) * 60 + int(resolved.group(2)) >= RESCUE_AT_S, out
    told = {m.group(4): int(m.group(2)) * 60 + int(m.group(3)) for m in reversed(list(NARRATED.finditer(out)))
            if m.group(4) not in ("PAGE", "RESOLVED") or m.group(5).startswith("LLMQueueWaitRisingReplicasShort ")}
    assert told.get("RELEASE") == INCIDENT_AT_S and told.get("SCALE-OUT") == RESCUE_AT_S, out
    assert INCIDENT_AT_S < told.get("PAGE", 0) < RESCUE_AT_S < told.get("READY", 0) <= told.get("RESOLVED", 0), out
    log = (tmp_path / "out" / "alerts.log").read_text()
    assert re.search(r"^\S+Z \S+Z pager +resolved +LLMQueueWaitRisingReplicasShort .*deployment=rag-70b-h200", log,
                     re.M), log
    assert r.returncode == 0, out[-4000:] + r.stderr[-2000:]

def _attainment(requests, start, slos: list[dict], lo_s: float, hi_s: float) -> dict[tuple[str, str, str], float]:
    """Per deployment, tier and route: the share of requests arriving in [lo, hi) virtual seconds after ``start``
    that met both the TTFT and TPOT thresholds, as the Overview counts them (goodput/console/sql/overview.sql: a rejection
    misses, TPOT over output tokens - 1)."""
    d = requests[((requests["arrival"] - start).dt.total_seconds() >= lo_s)
                 & ((requests["arrival"] - start).dt.total_seconds() < hi_s)]
    ttft = (d["first_token"] - d["arrival"]).dt.total_seconds()
    tpot = ((d["completed"] - d["first_token"]).dt.total_seconds() / (d["output_tokens"] - 1)).where(
        d["output_tokens"] > 1, 0.0)
    out = {}
    for s in slos:
        sel = (d["tier"] == s["tier"]) & (d["route"] == s["route"])
        ok = sel & (d["outcome"] == "ok") & (ttft <= s["ttft_seconds"]) & (tpot.fillna(0) <= s["tpot_seconds"])
        for dep in d.loc[sel, "deployment"].unique():
            mine = d["deployment"] == dep
            out[(dep, s["tier"], s["route"])] = float(ok[mine & sel].sum() / (mine & sel).sum())
    return out


def _demo_fleet() -> tuple[dict, dict]:
    """The fleet and plan ``goodput demo`` runs (its DIR/fleet.yaml and DIR/plan.yaml), from the committed files."""
    source = yaml.safe_load((REPO / "examples" / "fleet.yaml").read_text())
    fleet = incident_fleet(source, "examples/fleet.yaml")
    plan = incident_plan(yaml.safe_load((REPO / "examples" / "plan.yaml").read_text()), rag_deployment(fleet, "x"))
    return fleet, plan


def test_the_demo_fleet_meets_every_slo_before_the_release_and_only_the_release_overloads_it():
    """Measured in virtual time (`goodput simulate` of the demo's fleet) against rules/slos.yaml: in the five minutes
    before the release every deployment, tier and route meets its objective, and no deployment is short of
    replicas by the plan (demand x redundancy / per-replica goodput, as deployment:llm_replicas_required:ceil); the
    other deployments keep meeting theirs through the incident (no burst or batch of their own)."""
    fleet, plan = _demo_fleet()
    spec = yaml.safe_load((REPO / "rules" / "slos.yaml").read_text())
    cfg = parse_fleet(fleet, "the demo's fleet")
    res = simulate(cfg, RESCUE_AT_S, drain_s=300.0)
    requests = res.table.arrow().to_pandas()
    start = pd.Timestamp(cfg.start_time)
    objective = {(s["tier"], s["route"]): s["objective"] for s in spec["slos"]}
    before = _attainment(requests, start, spec["slos"], INCIDENT_AT_S - 300, INCIDENT_AT_S)
    assert len(before) == 4, before  # chat P0, code P1, rag P1, batch P2
    missed = {k: round(v, 3) for k, v in before.items() if v < objective[k[1:]]}
    assert not missed, f"missed before the release: {missed} (objectives {objective})"

    window = ((requests["arrival"] - start).dt.total_seconds() >= INCIDENT_AT_S - 300) & (
        (requests["arrival"] - start).dt.total_seconds() < INCIDENT_AT_S)
    tokens = requests[window].groupby("deployment")[["input_tokens", "output_tokens"]].sum().sum(axis=1) / 300
    redundancy = spec["thresholds"]["capacity_redundancy"]
    replicas = {d["name"]: d["replicas"] for d in fleet["deployments"]}
    goodput = {d: p["replica_goodput_tokens_per_second"] for d, p in plan["deployments"].items()}
    short = {d: (tok, math.ceil(tok * redundancy / goodput[d]), replicas[d]) for d, tok in tokens.items()
             if math.ceil(tok * redundancy / goodput[d]) > replicas[d]}
    assert not short, f"replicas short before the release (tokens/s, required, replicas): {short}"

    rag = rag_deployment(fleet, "x")
    for lo in range(0, int(RESCUE_AT_S) - 300 + 1, 300):
        during = _attainment(requests, start, spec["slos"], lo, lo + 300)
        hurt = {k: round(v, 3) for k, v in during.items() if k[0] != rag and v < objective[k[1:]]}
        assert not hurt, f"an overload besides the scripted one, virtual {lo}-{lo + 300} s: {hurt}"


STORY_SPEED = 10
STORY_FLEET = {
    "name": "story-test", "start_time": "2026-11-23T09:00:00Z", "seed": 5,
    "deployments": [{"name": "story", "model": "Llama-3.1-8B", "gpu": "H100-80GB-SXM", "replicas": 1}],
    "workloads": [{"name": "chat", "scene": "chat", "tier": "P0", "deployment": "story", "tenants": {"acme": 1},
                   "input_tokens": {"p50": 300, "p95": 1000, "p99": 1500, "max": 2000},
                   "output_tokens": {"p50": 60, "p95": 200, "p99": 300, "max": 400},
                   "arrival": {"process": "poisson", "rate": 2}}],
    "events": [{"at": 20, "kind": "release", "deployment": "story", "release_kind": "config", "from": "c1",
                "to": "c2", "note": "a knob"},
               {"at": 40, "kind": "replica_added", "deployment": "story", "cold_start_s": 20}],
}
NARRATED = re.compile(r"^\[(\d\d:\d\d:\d\d) UTC  T\+(\d\d):(\d\d)\] (\S+) +(.*)$", re.M)


def _rfc3339(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _children(pid: int) -> list[int]:
    """The process' children (those its threads started; a thread may end while we read)."""
    out = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):
            out += [int(c) for c in (task / "children").read_text().split()]
    return out


@needs("prometheus", "prometheus-alertmanager")
def test_the_terminal_tells_the_timeline_logs_start_and_end_and_says_when_a_child_dies(tmp_path):
    """`goodput demo` on a fleet with a release and a scale-out: the terminal tells each with its wall-clock and
    virtual time, in order; a page and its resolution as Alertmanager posts them to the webhook (told once, however
    often resent), and alerts.log keeps each alert's start and, once resolved, its end; SIGKILL to the demo's
    Alertmanager is told at once, naming it, how it ended and its log."""
    fleet, out = tmp_path / "fleet.yaml", tmp_path / "out"
    fleet.write_text(yaml.safe_dump(STORY_FLEET))
    base = free_port_block(10)
    ports = {"gpu": base + 3, "engine": base + 4, "requests": base + 5, "otlp": base + 6, "prometheus": base + 7,
             "alertmanager": base + 8, "webhook": base + 9}
    stdout = tmp_path / "stdout.txt"
    with stdout.open("w") as so:
        p = subprocess.Popen([sys.executable, "-m", "goodput", "demo", "--fleet", str(fleet), "--out", str(out),
                              "--base-port", str(base), *(a for k, v in ports.items() for a in (f"--{k}-port", str(v))),
                              "--speed", str(STORY_SPEED), "--duration", "200", "--no-incident", "--no-console"],
                             cwd=REPO, stdout=so, stderr=subprocess.STDOUT, text=True)
    hook = f"http://127.0.0.1:{ports['webhook']}/pager"
    told = lambda what: [m for m in NARRATED.finditer(stdout.read_text()) if m.group(4) == what]  # noqa: E731
    try:
        _wait("the demo to start", lambda: "Ctrl-C to stop." in stdout.read_text(), 90)
        _wait("the scale-out to be told", lambda: told("SCALE-OUT"), 60)
        alert = {"status": "firing", "labels": {"alertname": "StoryPage", "deployment": "story", "tier": "P0"},
                 "fingerprint": "0123456789abcdef", "startsAt": _rfc3339(time.time()),
                 "endsAt": _rfc3339(time.time() + 300)}
        for _ in range(2):  # Alertmanager resends a firing alert at every repeat interval
            assert httpx.post(hook, json={"status": "firing", "alerts": [alert]}, timeout=10).status_code == 200
        _wait("the page to be told", lambda: told("PAGE"), 30)
        _wait("the added replica to be told ready", lambda: told("READY"), 60)
        resolved = {**alert, "status": "resolved", "endsAt": _rfc3339(time.time())}
        assert httpx.post(hook, json={"status": "resolved", "alerts": [resolved]}, timeout=10).status_code == 200
        _wait("the resolution to be told", lambda: told("RESOLVED"), 30)

        am = [c for c in _children(p.pid) if "alertmanager" in Path(f"/proc/{c}/cmdline").read_text()]
        assert len(am) == 1, _children(p.pid)
        os.kill(am[0], signal.SIGKILL)
        died = _wait("the demo to say Alertmanager died", lambda: told("DIED"), 30)
    finally:
        _stop(p)
    assert p.returncode == 0, stdout.read_text()[-3000:]
    printed = stdout.read_text()
    assert died[0].group(5).startswith("alertmanager was killed by SIGKILL; its log: "), printed
    assert str(out / "alertmanager" / "alertmanager.log") in died[0].group(5), printed

    lines = [m for m in NARRATED.finditer(printed)]
    kinds = [m.group(4) for m in lines]
    assert kinds == ["RELEASE", "SCALE-OUT", "PAGE", "READY", "RESOLVED", "DIED"], printed
    virtual = {m.group(4): int(m.group(2)) * 60 + int(m.group(3)) for m in lines}
    assert [virtual[k] for k in kinds] == sorted(virtual[k] for k in kinds), printed
    assert (virtual["RELEASE"], virtual["SCALE-OUT"], virtual["READY"]) == (20, 40, 60), printed  # the fleet's own times
    assert "story config c1 -> c2: a knob" in lines[0].group(5)
    assert "story 1 -> 2 replicas (1 added, cold start 20 s)" in lines[1].group(5)
    assert "story 2 of 2 replicas serving" in lines[3].group(5)
    wall = {m.group(4): m.group(1) for m in lines}
    assert wall["PAGE"] == alert["startsAt"][11:19] and wall["RESOLVED"] == resolved["endsAt"][11:19], printed
    assert lines[2].group(5) == "StoryPage deployment=story tier=P0", printed
    # wall clock and virtual time agree: STORY_SPEED virtual seconds a wall second
    t = {k: datetime.strptime(v, "%H:%M:%S") for k, v in wall.items()}
    assert abs((t["READY"] - t["RELEASE"]).total_seconds() - 40 / STORY_SPEED) <= 1, printed

    log = [line.split() for line in (out / "alerts.log").read_text().splitlines() if "StoryPage" in line]
    assert [(x[0], x[1], x[2], x[3]) for x in log] == [(alert["startsAt"], "-", "pager", "firing")] * 2 + [
        (alert["startsAt"], resolved["endsAt"], "pager", "resolved")], log
