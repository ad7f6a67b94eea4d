"""report.html: self-contained, escaped, and it renders in a real headless browser with no network."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa

from goodput.loadtest.report import write_report
from tests.conftest import artifact, needs, offline_page

EVIL_LABEL = '<a href="javascript:window.pwned=1">click</a><img src=x onerror="window.pwned=1">'
EVIL_MODEL = "</script><script>window.pwned=2</script>"


# the server's queue p95 per step: in vLLM's first bucket, inside, and past its last finite bound
QUEUE_P95 = [{"bound": "below", "value": None, "lower": 0.0, "upper": 0.3},
             {"bound": "within", "value": 0.4213, "lower": 0.3, "upper": 0.5},
             {"bound": "within", "value": 2.0, "lower": 1.0, "upper": 2.5},
             {"bound": "above", "value": None, "lower": 60.0, "upper": None}]


def summary(complete: bool = True) -> dict:
    rates = [1.0, 2.0, 4.0, 8.0]
    steps = []
    for i, rate in enumerate(rates):
        ttft = 0.1 * (1 + i * i)
        steps.append({"index": i, "label": EVIL_LABEL if i == 1 else f"rate={rate:g}", "offered_rate": rate,
                      "concurrency": None, "requests": int(rate * 30), "completed": int(rate * 30),
                      "achieved_rate": min(rate, 5.0), "output_tokens_per_s": 100 * min(rate, 5.0),
                      "ttft_s": {"p50": ttft, "p90": ttft * 1.5, "p95": ttft * 2, "p99": ttft * 3, "mean": ttft},
                      "tpot_s": {"p50": 0.02, "p95": 0.03 + 0.01 * i, "p99": 0.05},
                      "e2e_s": {"p50": 1.0 + i, "p95": 2.0 + i, "p99": 3.0 + i},
                      "error_rate": 0.0, "slo_attainment": 1.0 - 0.2 * i, "slo_met": i <= 2,
                      "goodput_requests_per_s": rate * (1.0 - 0.2 * i), "goodput_tokens_per_s": 0.0,
                      "server": {"queue_wait_p95_s": QUEUE_P95[i], "running_mean": 2.0 * i, "kv_usage_max": 0.2 * i}})
    return {"schema": "goodput.loadtest/1", "tool": "goodput", "complete": complete, "valid": False,
            "invalid_reasons": ["schedule lag p99 12 ms > 5 ms <b>"],
            "comparability": {"model": EVIL_MODEL, "slo": "ttft_p95=0.8s", "arrival": {"pattern": "step"}},
            "client": {"schedule_lag_p50_s": 0.001, "schedule_lag_p99_s": 0.012},
            "steps": steps, "knee": {"step": 2, "offered_rate": 4.0},
            "faults": [{"kind": "replica_lost", "at_s": 120, "detect_s": 1.5, "recover_s": None}]}


def records() -> pd.DataFrame:
    rng = np.random.default_rng(1)
    n = 400
    step = rng.integers(0, 4, n)
    ttft = rng.lognormal(-2, 0.5, n) * (1 + step)
    return pd.DataFrame({"step": step, "ttft_s": ttft, "tpot_s": rng.lognormal(-4, 0.3, n), "e2e_s": ttft + 1.0})


def test_everything_from_the_run_is_escaped_and_nothing_is_fetched(tmp_path):
    path = write_report(tmp_path / "run", summary(complete=False), records())
    assert path == tmp_path / "run" / "report.html"
    text = path.read_text()
    assert EVIL_LABEL not in text and EVIL_MODEL not in text and "<b>" not in text
    assert "&lt;/script&gt;&lt;script&gt;window.pwned=2" in text
    assert "INCOMPLETE" in text and "INVALID" in text
    assert "<script src=" not in text.replace(" ", ""), "the page loads a script from elsewhere"
    assert text.count("plotly.js v") == 1, "plotly.js is not inlined exactly once"


def test_requests_as_read_back_from_parquet_draw_the_same_distributions(tmp_path):
    frame = records()
    from_arrow = write_report(tmp_path / "a", summary(), pa.Table.from_pandas(frame)).read_text()
    from_pandas = write_report(tmp_path / "b", summary(), frame).read_text()
    assert from_arrow.count('"type":"box"') == from_pandas.count('"type":"box"') == 12


def test_a_run_without_requests_or_steps_still_writes_a_page(tmp_path):
    path = write_report(tmp_path, {"steps": [], "knee": None}, pd.DataFrame())
    assert "SLO goodput vs offered load (no step measured)" in path.read_text()


@needs("chromium")
def test_the_report_renders_offline_in_headless_chromium(tmp_path):
    path = write_report(tmp_path, summary(), records())
    with offline_page() as (page, errors, fetched):
        page.goto(path.as_uri())
        page.wait_for_function("document.querySelectorAll('.plotly-graph-div .main-svg').length >= 3",
                               timeout=60_000)
        graphs = page.locator(".plotly-graph-div").count()
        knee = page.locator("text=knee: 4").count()
        pwned = page.evaluate("window.pwned === undefined")
        boxes = page.evaluate("document.querySelectorAll('.plotly-graph-div')[2].data.length")
        shown = page.evaluate("Array.from(document.querySelectorAll('.xtick text')).map(t => t.textContent)")
        shot = artifact("loadtest", "report.png")
        page.screenshot(path=str(shot), full_page=True)
    assert errors == [], errors
    assert fetched == [], f"the report fetched {fetched}"
    assert graphs == 3 and knee >= 1 and boxes == 12  # 4 steps x TTFT, TPOT, E2E
    assert pwned, "a label ran as script"
    assert EVIL_LABEL in shown, "a step label is not shown as the text it is"
    assert shot.stat().st_size > 10_000


def test_the_server_s_queue_quantile_is_a_bound_in_the_edge_buckets_and_a_value_inside(tmp_path):
    text = write_report(tmp_path / "run", summary(), records()).read_text()
    server = text[text.index("The server's view per step"):]
    assert "<td>&lt;0.3 s</td>" in server and "<td>0.4213 s</td>" in server and "<td>&gt;60 s</td>" in server
    assert "bound" not in server, "a quantile's mapping is printed raw"
