"""The Routing page's overload ladder and fallback paths, from a real Prometheus scraping a gateway's series (the
ladder step gauge, fallback and degradation counters growing at known rates): under Streamlit's AppTest, and in
headless Chromium at 1,400 px (a screenshot of the section to out/test-artifacts/console/)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest

from console.routes import url
from goodput.foundation.http import Server, metrics_routes
from goodput.rulegen import load_spec, write
from goodput.stack import start_console, start_prometheus
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
        deadline = time.monotonic() + 60
        query = {"query": "min(count_over_time(llm_gateway_fallbacks_total[10s])) >= 4"}
        while not httpx.get(f"{prom.url}/api/v1/query", params=query, timeout=5).json()["data"]["result"]:
            assert time.monotonic() < deadline, "Prometheus scraped no fallback counters in 60 s"
            time.sleep(1)
        yield prom.url
    finally:
        prom.stop()
        exporter.stop()


def test_the_ladder_state_and_the_fallback_paths_from_prometheus(monkeypatch, flood, overload_prometheus):  # noqa: F811
    page = show(app(monkeypatch, flood, overload_prometheus, range="15m"), "routing")
    no_exception(page)
    steps = frame(page, "deployment", "step", "step_index")
    assert list(zip(steps["deployment"], steps["step"], steps["step_index"], strict=True)) == [
        (d, s, i) for d, (s, i) in sorted(STEPS.items(), key=lambda kv: (-kv[1][1], kv[0]))]  # furthest in first
    paths = frame(page, "path", "reason", "requests_per_s")
    assert list(zip(paths["path"], paths["reason"], strict=True)) == [
        ("chat -> chat-small", "circuit_open"), ("rag -> rag-large", "capacity")]  # busiest first
    # both rates over the same range, each extrapolated by rate(): their ratio is the counters' own
    assert paths["requests_per_s"].iloc[0] / paths["requests_per_s"].iloc[1] == pytest.approx(6.0, rel=0.05)
    degraded = frame(page, "deployment", "tier", "step", "requests")
    assert set(zip(degraded["tier"], degraded["step"], strict=True)) == {("P1", "output_cap"), ("P1", "context_trim")}
    assert degraded["step"].iloc[0] == "output_cap"


@pytest.mark.parametrize(("deployment", "paths"), [("chat", {"chat -> chat-small"}),  # away from the primary
                                                   ("chat-small", {"chat -> chat-small"}),  # into the backup
                                                   ("rag", {"rag -> rag-large"})])
def test_a_deployment_filter_keeps_the_paths_from_it_and_to_it(monkeypatch, flood, overload_prometheus,  # noqa: F811
                                                               deployment, paths):
    page = show(app(monkeypatch, flood, overload_prometheus, range="15m", deployment=deployment), "routing")
    no_exception(page)
    assert set(frame(page, "path", "reason", "requests_per_s")["path"]) == paths
    assert list(frame(page, "deployment", "step", "step_index")["deployment"]) == [deployment]


def test_without_prometheus_the_section_says_it_is_live_only(monkeypatch, flood):  # noqa: F811
    page = show(app(monkeypatch, flood, range="15m"), "routing")
    no_exception(page)
    assert any("ladder's state and the fallback paths are live only" in i.value for i in page.info)


@pytest.mark.slow
@needs("chromium")
@pytest.mark.timeout(300)
def test_the_overload_section_in_chromium_at_1400_px(tmp_path, flood, overload_prometheus):  # noqa: F811
    playwright = pytest.importorskip("playwright.sync_api")
    out = ARTIFACTS / "console"
    out.mkdir(parents=True, exist_ok=True)
    env = {"GOODPUT_DB": str(flood), "GOODPUT_RELEASES": str(tmp_path / "releases.yaml"),
           "GOODPUT_PROMETHEUS_URL": overload_prometheus, "GOODPUT_ALERTMANAGER_URL": "http://127.0.0.1:9",
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
                page.screenshot(path=str(out / "routing-overload.png"))
                assert page.locator('[data-testid="stException"]').count() == 0
                assert errors == []
            finally:
                browser.close()
    finally:
        proc.stop()
    assert (out / "routing-overload.png").stat().st_size > 20_000
