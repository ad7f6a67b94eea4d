"""Console benchmark: time to each page's last chart in headless Chromium, against the analyzer benchmark's store.

Two stores built in the same run, the same way (the analyzer benchmark's synthetic trace store, ingested): the
big one (default 1.67M requests = 10M spans, the issue's target) and, as the baseline, a small one (16.7k
requests) that shows the fixed cost of Streamlit and the browser. Prometheus and Alertmanager are the real
ones, with no series (every live panel answers "no data"): the trace pages are what grows with the store.
Per page: the first load (its queries' caches empty) and the second (Streamlit's caches warm), from navigation
to the page's script run ending with every Plotly chart drawn, after one untimed warm-up load of the Capacity
page (which reads no traces) so the server's first-run imports are not charged to the Overview.
Needs Debian's chromium and the playwright package.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import duckdb

from benchmarks.analyzer import generate_store, ingest_in_child
from benchmarks.report import emit
from goodput.console.routes import ROUTES, url
from goodput.demo.stack import alertmanager_available, prometheus_available, start_alertmanager, start_console, start_prometheus

REPO = Path(__file__).resolve().parents[1]
DRAWN = """() => {
  const main = document.querySelector('[data-testid="stMain"]');
  if (!main || !main.querySelector('h1') || document.querySelector('[data-testid="stStatusWidget"]')) return false;
  const charts = main.querySelectorAll('[data-testid="stPlotlyChart"]');
  return Array.from(charts).every(c => c.querySelector('.main-svg'));
}"""


def _store(work: Path, requests: int) -> Path:
    store, db = work / f"store-{requests}", work / f"db-{requests}.duckdb"
    generate_store(store, requests)
    ingest_in_child(store, db)
    return db


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _time_pages(base: str) -> dict[str, dict[str, float]]:
    from playwright.sync_api import sync_playwright

    out: dict[str, dict[str, float]] = {}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox", "--disable-gpu", "--headless"])
        try:
            page = browser.new_page(viewport={"width": 1500, "height": 1100})
            page.goto(url(base, "capacity"))  # warm-up, not timed: the server's first run imports pandas, plotly...
            page.wait_for_timeout(200)
            page.wait_for_function(DRAWN, timeout=300_000, polling=50)
            for _, path in ROUTES:
                times = {}
                for run in ("first", "second"):
                    t = time.perf_counter()
                    page.goto(url(base, path) + "?range=all")
                    page.wait_for_timeout(200)  # let the new run start before polling for its end
                    page.wait_for_function(DRAWN, timeout=300_000, polling=50)
                    times[run] = round(time.perf_counter() - t, 2)
                out[path] = times
        finally:
            browser.close()
    return out


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(prog="python -m benchmarks.console", description=__doc__)
    p.add_argument("--requests", type=int, default=1_666_667, help="requests in the big store (6 spans each)")
    p.add_argument("--baseline-requests", type=int, default=16_667, help="requests in the baseline store")
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv if argv is not None else [])
    work = Path(tempfile.mkdtemp(prefix="goodput-bench-console-"))
    t = time.perf_counter()
    dbs = {"baseline": _store(work, args.baseline_requests), "big": _store(work, args.requests)}
    build_s = time.perf_counter() - t
    procs = []
    env = {"GOODPUT_RUNS": str(work / "runs"), "GOODPUT_RELEASES": str(work / "releases.yaml")}
    if prometheus_available() and alertmanager_available():
        am = start_alertmanager(work / "am", _free_port(), REPO / "rules" / "alertmanager.yaml")
        prom = start_prometheus(work / "prom", _free_port(), {}, REPO / "rules", None)
        procs += [am, prom]
        am.ready("/-/ready")
        prom.ready("/-/ready")
        env.update(GOODPUT_PROMETHEUS_URL=prom.url, GOODPUT_ALERTMANAGER_URL=am.url)
    figures: dict = {"requests": {k: int(duckdb.connect(str(v), read_only=True).execute(
        "SELECT count(*) FROM requests").fetchone()[0]) for k, v in dbs.items()}, "build_stores_s": round(build_s, 1)}
    try:
        for name, db in dbs.items():
            console = start_console(work / f"console-{name}", _free_port(), {**env, "GOODPUT_DB": str(db)})
            try:
                console.ready("/_stcore/health", timeout=120)
                figures[f"seconds_to_last_chart_{name}"] = _time_pages(console.url)
            finally:
                console.stop()
    finally:
        for proc in procs:
            proc.stop()
    big = figures["seconds_to_last_chart_big"]
    figures["slowest_page_big"] = max(big, key=lambda k: big[k]["first"])
    figures["pages_over_2_s_big_first_load"] = sorted(k for k, v in big.items() if v["first"] > 2)
    return emit("console benchmark (headless Chromium, 2 cores)", figures, args.json)


if __name__ == "__main__":
    main(sys.argv[1:])
