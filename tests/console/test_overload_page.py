"""The Routing page's overload ladder and fallback paths, from a real Prometheus scraping a gateway's series (the
ladder step gauge, fallback and degradation counters growing at known rates), and scraping the real request exporter
fed the simulator's own spans mid-burst (examples/overload_burst.yaml) and mid-outage (examples/primary_down.yaml):
under Streamlit's AppTest, and in headless Chromium at 1,400 px (screenshots of the section to
out/test-artifacts/console/)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

import httpx
import pandas as pd
import pytest
import yaml

from goodput.cli import main
from goodput.console.routes import url
from goodput.contracts.vocabulary import CIRCUIT_STATE_ATTR
from goodput.demo.stack import start_console, start_prometheus
from goodput.exporters.requests import RequestMetrics, TraceReceiver
from goodput.exporters.trace_store import TraceStore
from goodput.foundation.http import Server, metrics_routes
from goodput.monitoring.rulegen import load_spec, write
from tests.conftest import ARTIFACTS, REPO, free_port_block, needs, require
from tests.console.conftest import RULE_SCALE
from tests.console.test_gateway import flood  # noqa: F401 (the simulated tenant flood's store: the page needs one)
from tests.console.test_pages import app, frame, no_exception, show

# each deployment's ladder step now; fallback paths (primary, backup, reason) and degradations at rates per second
STEPS = {"chat": ("degrade_p1", 2), "chat-small": ("fail_fast", 5), "rag": ("none", 0)}
FALLBACKS = {("chat", "chat-small", "circuit_open"): 3.0, ("rag", "rag-large", "capacity"): 0.5}
DEGRADATIONS = {("chat", "P1", "output_cap"): 2.0, ("chat", "P1", "context_trim"): 1.0}


def _exposition(t0: float) -> str:
    dt = time.monotonic() - t0
    labels = 'model="m",tenant="a",route="chat"'
    lines = ["# TYPE llm_gateway_overload_step gauge"]
    lines += [f'llm_gateway_overload_step{{deployment="{d}",step="{s}"}} {i}' for d, (s, i) in STEPS.items()]
    lines.append("# TYPE llm_gateway_fallbacks_total counter")
    lines += [f'llm_gateway_fallbacks_total{{{labels},deployment="{b}",tier="P0",fallback_from="{p}",reason="{r}"}} '
              f"{rate * dt:.3f}" for (p, b, r), rate in FALLBACKS.items()]
    lines.append("# TYPE llm_gateway_degradations_total counter")
    lines += [f'llm_gateway_degradations_total{{{labels},deployment="{d}",tier="{t}",step="{s}"}} {rate * dt:.3f}'
              for (d, t, s), rate in DEGRADATIONS.items()]
    return "\n".join(lines) + "\n"


def _wait_scraped(prom_url: str, query: str, what: str) -> None:
    deadline = time.monotonic() + 60
    while not httpx.get(f"{prom_url}/api/v1/query", params={"query": query}, timeout=5).json()["data"]["result"]:
        assert time.monotonic() < deadline, f"Prometheus scraped no {what} in 60 s"
        time.sleep(1)


@pytest.fixture(scope="module")
def overload_prometheus(tmp_path_factory) -> Iterator[str]:
    require("prometheus")
    work = tmp_path_factory.mktemp("overload-prom")
    base = free_port_block(2)
    write(load_spec(REPO / "rules" / "slos.yaml"), work / "rules", RULE_SCALE)
    t0 = time.monotonic()
    exporter = Server("127.0.0.1", base + 1, metrics_routes(lambda: _exposition(t0))).start()
    prom = start_prometheus(work / "prom", base, {"llm-gateway": [f"127.0.0.1:{base + 1}"]}, work / "rules", None,
                            interval="1s")
    try:
        prom.ready("/-/ready")
        _wait_scraped(prom.url, "min(count_over_time(llm_gateway_fallbacks_total[10s])) >= 4", "fallback counters")
        yield prom.url
    finally:
        prom.stop()
        exporter.stop()


CUT_S, CHUNKS = 100.0, 12  # mid-burst (degrade_p1 from 69 s) and mid-outage (large lost at 60 s)


def _ended_spans(out, start_ns: int) -> list[dict]:
    """The spans of a simulate run that ended by CUT_S, each as a one-span resourceSpans entry, oldest end first."""
    ended = []
    for line in (out / "spans.otlp.jsonl").read_text().splitlines():
        for rs in json.loads(line)["resourceSpans"]:
            for ss in rs["scopeSpans"]:
                ended += [{**rs, "scopeSpans": [{**ss, "spans": [sp]}]} for sp in ss["spans"]
                          if int(sp["endTimeUnixNano"]) <= start_ns + CUT_S * 1e9]
    return sorted(ended, key=lambda e: int(e["scopeSpans"][0]["spans"][0]["endTimeUnixNano"]))


@pytest.fixture(scope="module")
def burst_prometheus(tmp_path_factory) -> Iterator[str]:
    """Prometheus scraping the request exporter, sent (in CHUNKS, one a second, as an SDK exports spans when they end)
    the spans of both examples' first CUT_S seconds: a ladder at degrade_p1 and large's traffic on small."""
    require("prometheus")
    work = tmp_path_factory.mktemp("burst-prom")
    ended = []
    for fleet, duration in (("overload_burst.yaml", "300"), ("primary_down.yaml", "240")):
        path, out = REPO / "examples" / fleet, work / fleet
        assert main(["simulate", str(path), "--duration", duration, "--out", str(out), "--format", "json"]) == 0
        start = datetime.fromisoformat(yaml.safe_load(path.read_text())["start_time"])
        ended += _ended_spans(out, int(start.timestamp()) * 10**9)
    ended.sort(key=lambda e: int(e["scopeSpans"][0]["spans"][0]["endTimeUnixNano"]))
    with _request_exporter_scraped(work) as (exporter, prom):
        for k in range(CHUNKS):
            chunk = ended[k * len(ended) // CHUNKS:(k + 1) * len(ended) // CHUNKS]
            r = httpx.post(f"{exporter}/v1/traces", content=json.dumps({"resourceSpans": chunk}).encode(),
                           headers={"Content-Type": "application/json"}, timeout=30)
            assert r.status_code == 200, r.text
            time.sleep(1)
        _wait_scraped(prom, 'llm_gateway_overload_step{deployment="chat",step="degrade_p1"}', "ladder at degrade_p1")
        yield prom


@contextmanager
def _request_exporter_scraped(work: Path) -> Iterator[tuple[str, str]]:
    """A real request exporter (OTLP in, /metrics out) and a real Prometheus scraping it every second: their URLs."""
    base = free_port_block(2)
    metrics, store = RequestMetrics(), TraceStore(work / "store").start()
    exporter = Server("127.0.0.1", base + 1, {("POST", "/v1/traces"): TraceReceiver(metrics, store).route,
                                              **metrics_routes(lambda: metrics.render(store))}).start()
    prom = start_prometheus(work / "prom", base, {"llm-gateway": [f"127.0.0.1:{base + 1}"]}, work / "rules", None,
                            interval="1s")
    try:
        prom.ready("/-/ready")
        yield exporter.url, prom.url
    finally:
        prom.stop()
        exporter.stop()
        store.close()


class Breakers:
    """A real request exporter scraped by a real Prometheus, sent one llm.gateway span per primary on ``say``: the
    spans a gateway exports at admission, ``llm.circuit_state`` its primary's breaker then."""

    def __init__(self, exporter: str, prom: str) -> None:
        self.exporter, self.prom, self.sent = exporter, prom, 0

    def say(self, **states: str) -> float:
        """Each primary's breaker now (a request that fell back from it, while it is not closed); when, wall clock."""
        now, spans = time.time_ns(), []
        for dep, state in states.items():
            self.sent += 1
            moved = {"llm.fallback_from": dep, "llm.fallback_reason": "circuit_open"} if state != "closed" else {}
            attrs = {"llm.deployment": f"{dep}-backup" if moved else dep, "llm.tenant": "a", "llm.tier": "P0",
                     "llm.route": "chat", "gen_ai.request.model": "m", "llm.admission": "admitted",
                     CIRCUIT_STATE_ATTR: state, **moved}
            spans.append({"traceId": f"{self.sent:032x}", "spanId": f"{2 * self.sent:016x}",
                          "parentSpanId": f"{2 * self.sent + 1:016x}", "name": "llm.gateway", "kind": 1,
                          "startTimeUnixNano": str(now - 1_000_000), "endTimeUnixNano": str(now),
                          "attributes": [{"key": k, "value": {"stringValue": v}} for k, v in attrs.items()]})
        doc = {"resourceSpans": [{"resource": {}, "scopeSpans": [{"spans": spans}]}]}
        r = httpx.post(f"{self.exporter}/v1/traces", content=json.dumps(doc).encode(),
                       headers={"Content-Type": "application/json"}, timeout=10)
        assert r.status_code == 200, r.text
        return now / 1e9


HOLD_S = 6.5  # each state held longer than the page's step (5 s at 15m) plus a scrape: every one is a point there


@pytest.fixture(scope="module")
def breaker_prometheus(tmp_path_factory) -> Iterator[Breakers]:
    """Two primaries' breakers, closed (held a step, so a trip is a change the range sees)."""
    require("prometheus")
    work = tmp_path_factory.mktemp("breaker-prom")
    with _request_exporter_scraped(work) as (exporter, prom):
        breakers = Breakers(exporter, prom)
        breakers.say(chat="closed", rag="closed")
        _wait_scraped(prom, 'llm_gateway_circuit_state{deployment="rag",state="closed"} == 1', "breakers")
        time.sleep(HOLD_S)
        yield breakers


def _breakers(page) -> dict[str, tuple[str, float | None, int]]:
    """The page's breakers table: deployment -> (breaker, since as Unix seconds or None, times opened)."""
    df = frame(page, "deployment", "breaker", "since", "opened")
    return {d: (b, None if pd.isna(s) else s.timestamp(), int(n))
            for d, b, s, n in zip(df["deployment"], df["breaker"], df["since"], df["opened"], strict=True)}


def test_the_breakers_during_an_incident_and_after_from_the_exporter_and_prometheus(monkeypatch, flood,  # noqa: F811
                                                                                     breaker_prometheus):
    """chat's breaker trips, probes, trips again: the page says OPEN, since the second trip, opened twice; rag, which
    sent nothing since it was closed, reads closed, never changed. Then chat probes and closes: closed since then."""
    b = breaker_prometheus
    for state in ("open", "half_open"):
        b.say(chat=state)
        time.sleep(HOLD_S)
    tripped = b.say(chat="open")
    time.sleep(HOLD_S)
    page = show(app(monkeypatch, flood, b.prom, range="15m"), "routing")
    no_exception(page)
    now = _breakers(page)
    assert list(now) == ["chat", "rag"]  # the open one first
    assert (now["chat"][0], now["chat"][2], now["rag"]) == ("OPEN", 2, ("closed", None, 0))
    assert tripped <= now["chat"][1] <= tripped + 5 + 2  # the first point of the range's step that saw it
    assert any("circuit breaker over the range" in str(c.proto.spec) for c in page.get("plotly_chart"))
    b.say(chat="half_open")
    time.sleep(HOLD_S)
    closed = b.say(chat="closed")
    time.sleep(HOLD_S)
    after = _breakers(show(app(monkeypatch, flood, b.prom, range="15m"), "routing"))
    assert (after["chat"][0], after["chat"][2], after["rag"]) == ("closed", 2, ("closed", None, 0))
    assert closed <= after["chat"][1] <= closed + 5 + 2


def test_the_ladder_state_and_the_fallback_paths_from_prometheus(monkeypatch, flood, overload_prometheus):  # noqa: F811
    page = show(app(monkeypatch, flood, overload_prometheus, range="15m"), "routing")
    no_exception(page)
    assert any("no circuit breaker series (llm_gateway_circuit_state)" in i.value for i in page.info)
    steps = frame(page, "deployment", "step", "step_index")
    assert list(zip(steps["deployment"], steps["step"], steps["step_index"], strict=True)) == [
        (d, s, i) for d, (s, i) in sorted(STEPS.items(), key=lambda kv: (-kv[1][1], kv[0]))]  # furthest in first
    paths = frame(page, "path", "reason", "requests_per_s")
    assert list(zip(paths["path"], paths["reason"], strict=True)) == [
        ("chat -> chat-small", "circuit_open"), ("rag -> rag-large", "capacity")]  # busiest first
    # both rates over the same range, each extrapolated by rate(): their ratio is the counters' own
    assert paths["requests_per_s"].iloc[0] / paths["requests_per_s"].iloc[1] == pytest.approx(6.0, rel=0.05)
    degraded = frame(page, "deployment", "tier", "degraded", "requests")
    assert set(zip(degraded["tier"], degraded["degraded"], strict=True)) == {("P1", "output_cap"), ("P1", "context_trim")}
    assert degraded["degraded"].iloc[0] == "output_cap"


@pytest.mark.parametrize(("deployment", "paths"), [("chat", {"chat -> chat-small"}),  # away from the primary
                                                   ("chat-small", {"chat -> chat-small"}),  # into the backup
                                                   ("rag", {"rag -> rag-large"})])
def test_a_deployment_filter_keeps_the_paths_from_it_and_to_it(monkeypatch, flood, overload_prometheus,  # noqa: F811
                                                               deployment, paths):
    page = show(app(monkeypatch, flood, overload_prometheus, range="15m", deployment=deployment), "routing")
    no_exception(page)
    assert set(frame(page, "path", "reason", "requests_per_s")["path"]) == paths
    assert list(frame(page, "deployment", "step", "step_index")["deployment"]) == [deployment]


def test_mid_burst_and_mid_outage_the_section_shows_the_simulators_ladder_and_fallback(monkeypatch, flood,  # noqa: F811
                                                                                         burst_prometheus):
    page = show(app(monkeypatch, flood, burst_prometheus, range="15m"), "routing")
    no_exception(page)
    steps = frame(page, "deployment", "step", "step_index")
    assert list(zip(steps["deployment"], steps["step"], steps["step_index"], strict=True)) == [
        ("chat", "degrade_p1", 2), ("large", "none", 0), ("small", "none", 0)]  # primary_down has no ladder
    paths = frame(page, "path", "reason", "requests_per_s")
    assert list(zip(paths["path"], paths["reason"], strict=True)) == [("large -> small", "circuit_open")]
    assert _breakers(page)["large"][0] == "OPEN"  # 100 s in, the probe at 90 s failed: the simulator's own spans
    degraded = frame(page, "deployment", "tier", "degraded", "requests")
    assert set(zip(degraded["deployment"], degraded["tier"], strict=True)) == {("chat", "P1")}
    assert "output_cap" in set(degraded["degraded"]) <= {"output_cap", "output_cap+context_trim"}  # the sim's two kinds


def test_without_prometheus_the_section_says_it_is_live_only(monkeypatch, flood):  # noqa: F811
    page = show(app(monkeypatch, flood, range="15m"), "routing")
    no_exception(page)
    assert any("ladder's state and the fallback paths are live only" in i.value for i in page.info)


@pytest.mark.slow
@needs("chromium")
@pytest.mark.timeout(300)
@pytest.mark.parametrize(("prometheus", "shot"), [("overload_prometheus", "routing-overload.png"),
                                                  ("burst_prometheus", "routing-overload-burst.png")])
def test_the_overload_section_in_chromium_at_1400_px(request, tmp_path, flood, prometheus, shot):  # noqa: F811
    playwright = pytest.importorskip("playwright.sync_api")
    out = ARTIFACTS / "console"
    out.mkdir(parents=True, exist_ok=True)
    env = {"GOODPUT_DB": str(flood), "GOODPUT_RELEASES": str(tmp_path / "releases.yaml"),
           "GOODPUT_PROMETHEUS_URL": request.getfixturevalue(prometheus), "GOODPUT_ALERTMANAGER_URL": "http://127.0.0.1:9",
           "GOODPUT_RUNS": str(tmp_path / "runs")}
    proc = start_console(tmp_path / "console", free_port_block(1), env)
    try:
        proc.ready("/_stcore/health", timeout=90)
        with playwright.sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium",
                                        args=["--no-sandbox", "--disable-gpu", "--headless"])
            try:
                page = browser.new_page(viewport={"width": 1400, "height": 900})
                errors: list[str] = []
                page.on("pageerror", lambda e: errors.append(str(e)))
                page.goto(url(proc.url, "routing") + "?range=15m")
                heading = page.get_by_text("Gateway: overload ladder and fallback paths")
                heading.wait_for(timeout=90_000)
                page.get_by_text("ladder step now, per deployment").wait_for(timeout=60_000)
                page.wait_for_timeout(1500)  # the chart draws after the script run ends
                heading.evaluate("e => e.scrollIntoView({block: 'start'})")  # the section at the top of the view
                page.wait_for_timeout(500)
                page.screenshot(path=str(out / shot))
                assert page.locator('[data-testid="stException"]').count() == 0
                assert errors == []
            finally:
                browser.close()
    finally:
        proc.stop()
    assert (out / shot).stat().st_size > 20_000
