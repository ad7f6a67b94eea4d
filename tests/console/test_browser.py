"""A real browser on a running console: `streamlit run goodput/console/app.py` (as `goodput console` starts it) against a real
Prometheus and Alertmanager (the live fixture: a deployment replicas short, alerts firing) and the analyzer
database; headless Chromium at 1,400 x 900 loads every page, finds no exception box, no console error and no
Deploy button, finds the columns on call needs first inside the viewport, and saves a screenshot of each (its
first screen) to out/test-artifacts/console/."""

from __future__ import annotations

import re

import pytest

from goodput.console.routes import ROUTES, url
from goodput.demo.stack import start_console
from tests.conftest import ARTIFACTS as TEST_ARTIFACTS
from tests.conftest import free_port_block, needs

pytestmark = pytest.mark.slow  # long: dealt out first (tests/conftest.py)

ARTIFACTS = TEST_ARTIFACTS / "console"
# Streamlit's own frontend, opened on a page's path, first probes its server under that path and falls back to
# the root: those two 404s (and the browser's line for each) are Streamlit's, not the console's.
PROBE = re.compile(r"/[a-z]+/_stcore/(health|host-config)$")
PROBE_LINE = "Failed to load resource: the server responded with a status of 404 (Not Found)"
VIEWPORT = {"width": 1400, "height": 900}
# per page, the column labels that must be in view without scrolling sideways (each in a table on the page)
KEY_COLUMNS = {
    "overview": ("status", "TTFT met 5m", "TTFT burn 1h", "TPOT met 5m", "TPOT burn 1h", "replicas short",
                 "replicas up", "replicas needed", "p95 queue wait (s)", "KV cache used", "demand (tok/s)",
                 "capacity (tok/s)", "runbook"),
    "latency": ("p95 E2E (s)", "E2E (s)", "TTFT (s)"),
    "workload": ("before", "now", "change"),
    "kv": ("requests", "preemptions", "KV rejections"),
    "routing": ("replica", "requests", "p95 queue wait (s)"),
    "releases": ("release", "direction", "change"),
    "capacity": ("deployment", "demand (tok/s)", "needed now"),
}
GRIDS = '[data-testid="stDataFrame"]'


def headers_in_view(page, wanted: tuple[str, ...]) -> tuple[set[str], list[str]]:
    """The column headers each table shows without scrolling sideways: glide-data-grid's accessibility tree lists
    the columns it draws in view (of a grid scrolled into view vertically), and the grid must end in the viewport.
    Also why a grid showed none. Stops once it has seen ``wanted``."""
    out: set[str] = set()
    why: list[str] = []
    grids = page.locator(GRIDS)
    shown = page.evaluate(f"""Array.from(document.querySelectorAll('{GRIDS}')).map(
        (g, i) => g.closest('details:not([open])') ? -1 : i).filter(i => i >= 0)""")  # a closed expander's: none
    for i in shown:
        if set(wanted) <= out:
            break
        grid = grids.nth(i)
        grid.scroll_into_view_if_needed(timeout=10_000)
        box = grid.bounding_box()
        if box is None or box["x"] + box["width"] > VIEWPORT["width"] + 1:
            why.append(f"grid {i} at {box}")
            continue
        heads = grid.locator('th[role="columnheader"]')
        try:
            heads.first.wait_for(state="attached", timeout=10_000)
        except Exception:  # noqa: BLE001 - a grid that draws no headers shows none of the key columns
            why.append(f"grid {i} drew no headers")
            continue
        out.update(t.strip() for t in heads.all_text_contents())
    return out, why


STUCK = """() => JSON.stringify({
  running: !!document.querySelector('[data-testid="stStatusWidget"]'),
  skeletons: document.querySelectorAll('[data-testid="stSkeleton"]').length,
  grids: Array.from(document.querySelectorAll('[data-testid="stDataFrame"]')).map(
    g => [g.getClientRects().length, !!g.querySelector('canvas'), g.closest('details') ? 'in details' : ''])})"""
# a page has rendered when its script run is over, its grids drew and there are at least ``least`` of them (a page's
# tables come after its Prometheus charts: on a loaded machine the run can look over before its table exists)
RENDERED = """(least) => {
  const main = document.querySelector('[data-testid="stMain"]');
  const running = document.querySelector('[data-testid="stStatusWidget"]');
  const grids = Array.from(document.querySelectorAll('[data-testid="stDataFrame"]'));
  return main && main.querySelector('h1') && !running && grids.length >= least
    && document.querySelectorAll('[data-testid="stSkeleton"]').length === 0
    && grids.every(g => g.closest('details:not([open])') || g.querySelector('canvas'));  // a closed expander's: none
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
            page = browser.new_page(viewport=VIEWPORT)
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
                page.wait_for_function(RENDERED, arg=0, timeout=90_000)
                page.wait_for_timeout(1500)  # the charts draw after the script run ends
                try:  # every page here has a table with the columns on call needs first
                    page.wait_for_function(RENDERED, arg=1, timeout=90_000)
                except Exception:  # noqa: BLE001 - say what never rendered, and go on to the next page
                    page.screenshot(path=str(ARTIFACTS / f"{path}-stuck.png"))
                    problems[path] = [page.evaluate(STUCK)]
                    continue
                h1 = page.locator('[data-testid="stMain"] h1').first.inner_text()
                boxes = page.locator('[data-testid="stException"]').count()
                deploy = page.get_by_text("Deploy", exact=True).count()
                shown_url = page.url
                page.screenshot(path=str(ARTIFACTS / f"{path}.png"))  # what on call sees first
                in_view, why = headers_in_view(page, KEY_COLUMNS[path])
                found = list(errors)
                missing = [c for c in KEY_COLUMNS[path] if c not in in_view]
                if missing:
                    found.append(f"columns not in the 1,400 px view: {missing} (in view: {sorted(in_view)}; {why})")
                if deploy:
                    found.append("a Deploy button")
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
