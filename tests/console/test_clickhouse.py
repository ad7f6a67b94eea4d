"""The console on ClickHouse: the same simulated hour's OTLP spans, read in place from an otel_traces table in chDB,
show the same figures on every page that reads the store as its DuckDB file does (Streamlit's AppTest)."""

from __future__ import annotations

import pandas as pd
import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from tests.conftest import REPO, clickhouse_of
from tests.console.test_pages import DEAD, no_exception, show

# every page whose figures come from the trace store (kv's and routing's Prometheus halves are unreachable here)
STORE_PAGES = ("overview", "latency", "releases", "workload", "kv", "routing")


@pytest.fixture(scope="session")
def store_clickhouse(store, chdb) -> str:
    clickhouse_of(chdb, store, "console")
    return f"chdb:{chdb.target.path}?database=console"


def _app(monkeypatch, db: str, store) -> AppTest:
    for var, value in {"GOODPUT_DB": db, "GOODPUT_PROMETHEUS_URL": DEAD, "GOODPUT_ALERTMANAGER_URL": DEAD,
                       "GOODPUT_RELEASES": str(store / "releases.yaml"), "GOODPUT_RUNS": str(store / "no-runs"),
                       "GOODPUT_REVIEWS": str(store / "no-reviews"),
                       "GOODPUT_FLEET": str(REPO / "examples" / "fleet.yaml")}.items():
        monkeypatch.setenv(var, value)
    st.cache_data.clear()
    at = AppTest.from_file(str(REPO / "goodput" / "console" / "app.py"), default_timeout=120)
    at.query_params.update({"range": "all"})
    return at


def _shown(at: AppTest) -> tuple[list[pd.DataFrame], dict]:
    """What a page shows from the store: its tables (times as microseconds) and its metrics and texts."""
    frames = []
    for d in at.dataframe:
        f = d.value.reset_index(drop=True)
        for c in f.columns:
            if pd.api.types.is_datetime64_any_dtype(f[c]):
                f[c] = pd.to_datetime(f[c], utc=True).dt.as_unit("us").astype("int64")
                f.attrs.setdefault("times", set()).add(c)
        frames.append(f)
    texts = [(m.label, m.value) for m in at.metric] + [e.value for e in at.error] + [i.value for i in at.info]
    return frames, {"texts": texts}


def _same(ch: pd.DataFrame, duck: pd.DataFrame, page: str) -> None:
    """Equal tables: times to 1 µs (the DuckDB store has them from the simulator's record in
    microseconds, ClickHouse from the spans' nanoseconds, cut to microseconds), floats to 1e-7 (a rate over a window
    whose ends are to 1 µs), the rest exactly."""
    assert list(ch.columns) == list(duck.columns) and len(ch) == len(duck), page
    for c in duck.columns:
        a, b = ch[c], duck[c]
        if pd.api.types.is_numeric_dtype(b) and not pd.api.types.is_bool_dtype(b):
            assert a.isna().tolist() == b.isna().tolist(), (page, c)
            time = c in duck.attrs.get("times", ())
            assert a.dropna().astype(float).tolist() == pytest.approx(b.dropna().astype(float).tolist(),
                                                                      rel=0 if time else 1e-7, abs=1 if time else 0), \
                (page, c)
        else:
            assert a.astype(object).where(a.notna(), None).tolist() == b.astype(object).where(b.notna(), None).tolist(), \
                (page, c)


@pytest.mark.parametrize("page", STORE_PAGES)
def test_each_store_page_shows_the_same_figures_on_clickhouse(monkeypatch, store, store_clickhouse, page):
    on_duckdb = show(_app(monkeypatch, str(store / "db.duckdb"), store), page)
    no_exception(on_duckdb)
    on_clickhouse = show(_app(monkeypatch, store_clickhouse, store), page)
    no_exception(on_clickhouse)
    (duck, duck_texts), (ch, ch_texts) = _shown(on_duckdb), _shown(on_clickhouse)
    assert duck, f"{page}: no table to compare"
    assert ch_texts == duck_texts and len(ch) == len(duck)
    for a, b in zip(ch, duck, strict=True):
        _same(a, b, page)


def test_a_bad_clickhouse_db_is_one_line_and_exit_2():
    import subprocess
    import sys

    for bad in ("clickhouse://127.0.0.1:notaport/x", "chdb:"):
        done = subprocess.run([sys.executable, "-m", "goodput", "console", "--db", bad, "--port", "1"],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 2, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1 and bad in done.stderr
