"""A real browser on a running console: `streamlit run app.py` (as `goodput console` starts it) against a real
Prometheus and Alertmanager and the analyzer database; headless Chromium loads every page, finds no exception
box and no console error, and saves a screenshot of each to out/test-artifacts/console/."""

from __future__ import annotations

import re

import pytest

from console.routes import ROUTES, url
from goodput.stack import start_console
from tests.conftest import ARTIFACTS as TEST_ARTIFACTS
from tests.conftest import free_port_block, needs

ARTIFACTS = TEST_ARTIFACTS / "console"
# Streamlit's own frontend, opened on a page's path, first probes its server under that path and falls back to
# the root: those two 404s (and the browser's line for each) are Streamlit's, not the console's.
PROBE = re.compile(r"/[a-z]+/_stcore/(health|host-config)$")
PROBE_LINE = "Failed to load resource: the server responded with a status of 404 (Not Found)"
RENDERED = """() => {
  const main = document.querySelector('[data-testid="stMain"]');
  const running = document.querySelector('[data-testid="stStatusWidget"]');
  return main && main.querySelector('h1') && !running
    && document.querySelectorAll('[data-testid="stSkeleton"]').length === 0;
}"""


@pytest.fixture(scope="module")
def console(tmp_path_factory, store, live):
    work = tmp_path_factory.mktemp("console-app")
    env = {"GOODPUT_DB": str(store / "db.duckdb"), "GOODPUT_RELEASES": str(store / "releases.yaml"),
           "GOODPUT_PROMETHEUS_URL": live.prometheus, "GOODPUT_ALERTMANAGER_URL": live.alertmanager,
           "GOODPUT_RUNS": str(work / "runs")}
    proc = start_console(work, free_port_block(1), env)
    try:
        proc.ready("/_stcore/health", timeout=90)
        yield proc
    finally:
        proc.stop()


@needs("chromium")
@pytest.mark.timeout(900)  # seven pages, each a fresh script run of Streamlit: minutes on a loaded 2-core machine
def test_every_page_loads_in_chromium_without_errors(console):
    playwright = pytest.importorskip("playwright.sync_api")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    problems: dict[str, list[str]] = {}
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox", "--disable-gpu", "--headless"])
        try:
            page = browser.new_page(viewport={"width": 1500, "height": 1100})
            errors: list[str] = []
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            probes: list[str] = []
            page.on("response", lambda r: (probes if PROBE.search(r.url) and r.status == 404 else errors).append(
                f"HTTP {r.status} {r.url}") if r.status >= 400 else None)
            for title, path in ROUTES:
                errors.clear()
                probes.clear()
                page.goto(url(console.url, path) + "?range=all&deployment=rag")
                page.wait_for_function(RENDERED, timeout=90_000)
                page.wait_for_timeout(1500)  # the charts draw after the script run ends
                page.wait_for_function(RENDERED, timeout=90_000)
                h1 = page.locator('[data-testid="stMain"] h1').first.inner_text()
                boxes = page.locator('[data-testid="stException"]').count()
                shown_url = page.url
                page.screenshot(path=str(ARTIFACTS / f"{path}.png"), full_page=True)
                found = list(errors)
                for _ in probes:
                    if PROBE_LINE in found:
                        found.remove(PROBE_LINE)
                if not h1.startswith(title.split(" ")[0]):
                    found.append(f"heading {h1!r}")
                if boxes:
                    found.append(f"{boxes} exception box(es)")
                if "deployment=rag" not in shown_url or "range=all" not in shown_url:
                    found.append(f"filters lost from the URL: {shown_url}")
                if found:
                    problems[path] = found
        finally:
            browser.close()
    assert problems == {}, problems
    assert all((ARTIFACTS / f"{path}.png").stat().st_size > 20_000 for _, path in ROUTES)
