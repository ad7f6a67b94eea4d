"""Each page of app.py under Streamlit's AppTest: no exception, and the figures shown are the ones the analyzer
and Prometheus give for the same filters (read here independently: the analyzer's functions, SQL over the same
database, PromQL over Prometheus' HTTP API)."""

from __future__ import annotations

import base64
import json
import math
import os
import re

import duckdb
import numpy as np
import pandas as pd
import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest
from streamlit.util import calc_hash

from goodput.analyzer.decompose import decompose
from goodput.analyzer.regressions import LENGTH_SHIFT, scan_regressions
from goodput.analyzer.releases import load_releases
from goodput.console import promql
from goodput.console.filters import Filters
from goodput.console.views import PAGES
from goodput.simulator.catalog import gpus, models
from goodput.simulator.memory import MemorySetup, memory_budget
from tests.conftest import REPO, needs
from tests.console.conftest import KV, RELEASE_AT_S, TOKENS_PER_S

DEAD = "http://127.0.0.1:9"  # discard port: nothing listens


def app(monkeypatch, db, prometheus=DEAD, alertmanager=DEAD, releases=None, **query) -> AppTest:
    monkeypatch.setenv("GOODPUT_DB", str(db))
    monkeypatch.setenv("GOODPUT_PROMETHEUS_URL", prometheus)
    monkeypatch.setenv("GOODPUT_ALERTMANAGER_URL", alertmanager)
    monkeypatch.setenv("GOODPUT_RELEASES", str(releases or db.parent / "releases.yaml"))
    monkeypatch.setenv("GOODPUT_RUNS", str(db.parent / "no-runs"))
    monkeypatch.setenv("GOODPUT_REVIEWS", str(db.parent / "no-reviews"))
    monkeypatch.setenv("GOODPUT_FLEET", str(REPO / "examples" / "fleet.yaml"))
    st.cache_data.clear()
    at = AppTest.from_file(str(REPO / "goodput" / "console" / "app.py"), default_timeout=120)
    at.query_params.update(query)
    return at


def show(at: AppTest, page: str) -> AppTest:
    """Run ``page`` (its url path). AppTest switches pages by file; these pages are functions registered under a
    url path, and Streamlit names a page by the hash of that path."""
    at._page_hash = calc_hash(page)
    return at.run()


def frame(at: AppTest, *columns: str) -> pd.DataFrame:
    """The one dataframe on the page with these columns."""
    found = [d.value for d in at.dataframe if set(columns) <= set(d.value.columns)]
    assert len(found) == 1, f"{len(found)} dataframes with {columns}: {[list(d.value.columns) for d in at.dataframe]}"
    return found[0]


def unescape(markdown: str) -> str:
    """What ``goodput.console.ui.esc``'d markdown reads as."""
    return re.sub(r"\\(.)", r"\1", markdown)


def no_exception(at: AppTest) -> None:
    assert not at.exception, [e.value for e in at.exception]


@pytest.fixture
def con(store):
    c = duckdb.connect(str(store / "db.duckdb"), read_only=True)
    yield c
    c.close()


def test_every_page_renders_with_its_title_and_no_exception(monkeypatch, store, live):
    at = app(monkeypatch, store / "db.duckdb", live.prometheus, live.alertmanager, range="all")
    at.run()
    for title, path, _ in PAGES:
        show(at, path)
        no_exception(at)
        assert at.title[0].value.startswith(title.split(" ")[0]), (path, [t.value for t in at.title])
        assert not at.warning or all("unreachable" not in w.value for w in at.warning), [w.value for w in at.warning]


def test_overview_live_figures_equal_promql(monkeypatch, store, live):
    at = app(monkeypatch, store / "db.duckdb", live.prometheus, live.alertmanager, range="all")
    show(at, "overview")
    no_exception(at)
    table = frame(at, "replicas_available", "replicas_required").set_index("deployment")
    queries = promql.overview(Filters())
    for key in ("replicas_available", "replicas_required", "kv_usage", "capacity_tokens_per_s"):
        expected = {r["metric"]["deployment"]: float(r["value"][1]) for r in live.query(queries[key])}
        assert expected, key
        shown = table[key].groupby(level=0).first().to_dict()
        assert shown == pytest.approx(expected), key
    # and the values are the exporter's: KV usage averaged over the replicas, the plan's goodput x replicas
    assert table.loc["rag", "kv_usage"] == pytest.approx((KV["rag-0"] + KV["rag-1"]) / 2)
    assert table.loc["rag", "capacity_tokens_per_s"] == pytest.approx(2 * 9000)
    assert table.loc["rag", "short"] == "2 short"  # 25k tok/s x 1.2 / 9000 -> 4 > 2
    # two tables, each within 1,400 px: is the SLO met (status, TTFT and TPOT met and burn), then why
    slo = frame(at, "status", "ttft_attainment").set_index("deployment")
    assert {"tpot_attainment", "tpot_burn_1h"} <= set(slo.columns) and "replicas_available" not in slo.columns
    assert slo.loc["rag", "status"] == "paging"  # LLMEngineDown for rag-1
    assert slo.loc["chat", "status"] == "no data"  # the exporter serves no SLO histograms
    demand = table.loc["rag", "demand_tokens_per_s"]
    assert math.isclose(demand, TOKENS_PER_S[("rag", "P1", "rag")], rel_tol=0.2), demand
    alerts = frame(at, "alert", "runbook")
    assert "GoodputWatchdog" in set(alerts["alert"])  # Alertmanager's API, read live
    down = alerts[alerts["alert"] == "LLMEngineDown"]
    assert list(down["runbook"]) == ["LLMEngineDown"]
    # the paging alert's runbook, from the repository, is open on the page
    assert at.selectbox(key="runbook").value == "LLMEngineDown"
    assert any(m.value.startswith("### LLMEngineDown") for m in at.markdown), [m.value[:40] for m in at.markdown]


def test_every_time_chart_marks_the_pages_and_releases(monkeypatch, store, live, con):
    """Prometheus' charts (now) carry the page that fires (from ALERTS), the traces' charts (the simulated hour) the
    store's release: each time chart one of them, each page the ones its charts span."""
    page, release = "page: LLMEngineDown rag", "rag: prompt_template rag-v1 -&gt; rag-v2"
    at = app(monkeypatch, store / "db.duckdb", live.prometheus, live.alertmanager, range="all", deployment="rag")
    for path, markers in (("kv", {page, release}), ("routing", {page}), ("workload", {release}),
                          ("releases", {release})):
        show(at, path)
        no_exception(at)
        charts = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
        # a chart over time: x values are times, or a Prometheus chart with no series ("no data")
        time_charts = [c for c in charts if not c["data"] or any(
            isinstance(t.get("x"), list) and t["x"] and str(t["x"][0])[:2] == "20" for t in c["data"])]
        assert time_charts, path
        drawn = [{a.get("text") for a in c["layout"].get("annotations", [])} & markers for c in time_charts]
        assert all(drawn), (path, [c["layout"].get("title", {}).get("text") for c, d in zip(time_charts, drawn, strict=True)
                           if not d])
        assert set().union(*drawn) == markers, path


def test_overview_trace_figures_equal_sql_over_the_store(monkeypatch, store, con):
    at = app(monkeypatch, store / "db.duckdb", range="all", deployment="rag", tier="P1")
    show(at, "overview")
    no_exception(at)
    assert [w.value for w in at.warning if "unreachable" in w.value], "no banner for the dead Prometheus"
    t = frame(at, "TTFT attainment", "goodput tok/s")
    assert list(zip(t["deployment"], t["tier"], strict=True)) == [("rag", "P1")]
    n, met = con.execute("SELECT count(*), count(*) FILTER (WHERE outcome = 'ok' AND ttft_s <= 2.0) FROM requests "
                         "WHERE deployment = 'rag' AND tier = 'P1' AND route = 'rag'").fetchone()
    assert t["requests"].iloc[0] == n
    assert t["TTFT attainment"].iloc[0] == pytest.approx(met / n)  # rules/slos.yaml: P1 rag TTFT 2.0 s


def test_latency_shows_the_analyzers_decomposition_for_the_filters(monkeypatch, store, con):
    at = app(monkeypatch, store / "db.duckdb", range="all", deployment="rag", tier="P1")
    show(at, "latency")
    no_exception(at)
    shown = frame(at, "queue_s", "e2e_p95_s").to_dict("records")
    expected = [r for r in decompose(con, ["deployment", "tier"], deployment="rag").records() if r["tier"] == "P1"]
    assert len(shown) == len(expected) == 1
    for key in ("requests", "queue_s", "prefill_s", "decode_s", "e2e_p95_s", "e2e_p95_top_segment"):
        assert shown[0][key] == pytest.approx(expected[0][key]), key
    slow = frame(at, "trace_id", "e2e_s")
    top = con.execute("SELECT max(e2e_s) FROM requests WHERE deployment = 'rag' AND tier = 'P1'").fetchone()[0]
    assert slow["e2e_s"].iloc[0] == pytest.approx(top) and (slow["deployment"] == "rag").all()
    assert len(at.get("plotly_chart")) == 3  # stacked segments, the waterfall, the slowest request's trace


def test_releases_page_shows_the_analyzers_verdict_blaming_the_release(monkeypatch, store, con):
    at = app(monkeypatch, store / "db.duckdb", range="all", deployment="rag")
    show(at, "releases")
    no_exception(at)
    verdicts = frame(at, "cause", "blamed")
    found = scan_regressions(con, load_releases(store / "releases.yaml"), bucket="1 minute", deployment="rag").found
    assert list(verdicts["metric"]) == [r.metric for r in found]
    assert list(verdicts["change"]) == pytest.approx([r.change for r in found])
    blamed = verdicts[verdicts["blamed"]]
    assert len(blamed) and blamed["release"].str.startswith("prompt_template").all()
    assert any("after release prompt_template rag-v1 -> rag-v2" in unescape(e.value) for e in at.error)
    at_release = pd.Timestamp(found[0].release_time).timestamp()
    start = con.execute("SELECT epoch(min(ts)) FROM requests").fetchone()[0]
    assert at_release - start == pytest.approx(RELEASE_AT_S, abs=1)


def test_workload_page_compares_like_windows(monkeypatch, store, con):
    """Now against before: the range's last quarter against the quarter just before it (the store is final). The
    release doubled rag's input at minute 30, before both of them: no input shift between two windows after it —
    where the rest of the hour (half of it before the release) would have read one."""
    at = app(monkeypatch, store / "db.duckdb", range="all", deployment="rag")
    show(at, "workload")
    no_exception(at)
    shift = frame(at, "measure", "shift").set_index("measure")
    first, last = con.execute("SELECT min(ts), max(ts) FROM requests").fetchone()
    quarter = (last + pd.Timedelta(microseconds=1) - first) / 4
    split = first + 3 * quarter
    mean = "SELECT avg(input_tokens) FROM requests WHERE deployment = 'rag' AND ts >= ? AND ts < ?"
    now = con.execute(mean, [split, split + quarter]).fetchone()[0]
    before = con.execute(mean, [split - quarter, split]).fetchone()[0]
    rest = con.execute(mean, [first, split]).fetchone()[0]
    assert shift.loc["input mean (tokens)", "now"] == pytest.approx(now)
    assert shift.loc["input mean (tokens)", "before"] == pytest.approx(before)
    assert not shift["shift"].any() and now / rest - 1 >= LENGTH_SHIFT  # the unlike windows' false shift


def test_kv_routing_and_capacity_pages_render_from_both_sources(monkeypatch, store, live):
    at = app(monkeypatch, store / "db.duckdb", live.prometheus, live.alertmanager, range="all")
    for path in ("kv", "routing", "capacity"):
        show(at, path)
        no_exception(at)
    routing = show(at, "routing")
    per_replica = frame(routing, "replica", "queue_p95_s")
    assert set(per_replica["replica"]) == {"rag-0", "rag-1", "chat-0"}
    counts = dict(duckdb.connect(str(store / "db.duckdb"), read_only=True).execute(
        "SELECT replica, count(*) FROM requests GROUP BY replica").fetchall())
    assert dict(zip(per_replica["replica"], per_replica["requests"], strict=True)) == counts
    # a share of 1 on a live chart reads in percent from 0, as the tables show it (KV usage read 0-0.08)
    kv = {json.loads(c.proto.spec)["layout"]["title"]["text"]: json.loads(c.proto.spec)["layout"]
          for c in show(at, "kv").get("plotly_chart")}
    assert kv["KV usage per replica"]["yaxis"]["tickformat"] == ".0%", kv["KV usage per replica"]["yaxis"]
    assert "tickformat" not in kv["preemptions /s"].get("yaxis", {})  # a rate stays a number
    # the exporter has no preemptions: an empty chart shows no made-up -1 to 4 scale, a chart with data its scale
    assert kv["preemptions /s"]["yaxis"]["showticklabels"] is False
    assert kv["KV usage per replica"]["yaxis"].get("showticklabels", True) is True
    plan = frame(show(at, "capacity"), "per-replica goodput tok/s", "required now").set_index("deployment")
    assert set(plan.index) == {"chat-8b-h100", "rag-70b-h200", "batch-32b-a100"}  # examples/plan.yaml


def test_capacity_what_if_is_goodput_plans_and_the_latest_review_shows(monkeypatch, store, tmp_path):
    reviews = tmp_path / "reviews"
    for age, (week, action) in enumerate((("2026-W48", "add 2 replica(s) (4 -> 6)"), ("2026-W47", "old"))):
        (reviews / week).mkdir(parents=True)
        path = reviews / week / "review.json"
        path.write_text(json.dumps({
            "week": week, "has_data": True, "source": "Prometheus http://p:9090",
            "recommendations": [{"deployment": "rag", "action": action, "reason": "peak over capacity",
                                 "numbers": {"desired": 4, "needed_now": 6}}]}))
        os.utime(path, (1e9 - age * 3600, 1e9 - age * 3600))  # the later week's file is the newer one
    at = app(monkeypatch, store / "db.duckdb")
    monkeypatch.setenv("GOODPUT_REVIEWS", str(reviews))
    page = show(at, "capacity")
    no_exception(page)
    recs = frame(page, "deployment", "action", "reason")
    assert list(recs["action"]) == ["add 2 replica(s) (4 -> 6)"] and "needed_now 6" in recs["numbers"][0]
    terms = frame(page, "term", "replicas")
    assert terms["replicas"].iloc[-1] == terms["replicas"].iloc[:-1].sum()
    assert "failure domains" in set(terms["term"]) and not any("_" in t for t in terms["term"]), terms["term"]
    # the what-if starts from the selected deployment's model, GPU, TP and dtypes (examples/fleet.yaml), each
    for dep, (model, gpu, setup) in {
            "rag-70b-h200": ("Llama-3.1-70B", "H200-141GB", MemorySetup(tp=4, weight_dtype="fp8", kv_dtype="fp8")),
            "chat-8b-h100": ("Llama-3.1-8B", "H100-80GB-SXM", MemorySetup(weight_dtype="bf16", kv_dtype="fp16"))}.items():
        page = page.selectbox(key="cap_dep").set_value(dep).run()
        no_exception(page)
        b = memory_budget(models()[model], gpus()[gpu], setup)
        assert any(f"GPU KV cache size: {b.kv_tokens:,} tokens" in c.value for c in page.caption), \
            (dep, [c.value for c in page.caption])


def test_filters_travel_in_the_url_and_bad_values_are_ignored(monkeypatch, store):
    at = app(monkeypatch, store / "db.duckdb", range="bogus", deployment="rag", tier="P1")
    at.run()
    assert at.selectbox(key="f_deployment").value == "rag" and at.selectbox(key="f_range").value == "1h"
    assert any("ignored from the link: range" in w.value for w in at.sidebar.warning)
    show(at, "routing")
    assert at.query_params.get("deployment") == "rag" and at.query_params.get("tier") == "P1"
    at.selectbox(key="f_tier").set_value("(all)").run()
    assert "tier" not in at.query_params and at.query_params.get("deployment") == "rag"


def test_a_hostile_value_in_the_link_is_data(monkeypatch, store):
    evil = '<img src=x onerror="alert(1)">"}) or vector(1) #'
    at = app(monkeypatch, store / "db.duckdb", range="all", tenant=evil)
    for path in ("overview", "latency", "workload", "kv", "routing", "releases"):
        show(at, path)
        no_exception(at)
    assert at.selectbox(key="f_tenant").value == evil
    assert "tenant" not in promql.overview(Filters(tenant=evil))["kv_usage"]  # no Prometheus series has a tenant


def test_no_store_or_an_empty_one_says_what_to_run(monkeypatch, tmp_path):
    at = app(monkeypatch, tmp_path / "none.duckdb")
    for path in ("overview", "latency", "releases"):
        show(at, path)
        no_exception(at)
        assert any("goodput analyze ingest" in i.value for i in at.info), [i.value for i in at.info]
    from goodput.analyzer.store import connect

    connect(tmp_path / "empty.duckdb").close()
    at = app(monkeypatch, tmp_path / "empty.duckdb")
    show(at, "workload")
    no_exception(at)
    assert any("holds no requests yet" in i.value for i in at.info)


@needs("victoria-metrics")
def test_the_console_reads_what_prometheus_remote_wrote_to_victoriametrics(monkeypatch, store, live):
    """GOODPUT_PROMETHEUS_URL at VictoriaMetrics' /prometheus prefix, its user and password file in the environment:
    the Overview shows the live figures Prometheus shows, and the charts the page that fires, from the ALERTS
    series Prometheus remote-wrote."""
    vm = live.vm.endpoint
    monkeypatch.setenv("GOODPUT_PROMETHEUS_USER", vm.user)
    monkeypatch.setenv("GOODPUT_PROMETHEUS_PASSWORD_FILE", str(vm.secret.file))
    keys = ("replicas_available", "replicas_required", "kv_usage", "capacity_tokens_per_s")
    shown = {}
    for url in (live.prometheus, vm.url):
        at = app(monkeypatch, store / "db.duckdb", url, live.alertmanager, range="all", deployment="rag")
        show(at, "overview")
        no_exception(at)
        assert not [w.value for w in at.warning if "unreachable" in w.value], url
        table = frame(at, *keys).set_index("deployment")
        shown[url] = {k: table[k].groupby(level=0).first().to_dict() for k in keys}
        show(at, "kv")
        no_exception(at)
        notes = {a.get("text") for c in at.get("plotly_chart")
                 for a in json.loads(c.proto.spec)["layout"].get("annotations", [])}
        assert "page: LLMEngineDown rag" in notes, (url, notes)
    assert shown[vm.url] == shown[live.prometheus] and shown[vm.url]["kv_usage"]["rag"] == pytest.approx(0.7)


def _values(y) -> list[float]:
    """A Plotly trace's values as the spec holds them: a list, or a typed array (base64 bytes and their dtype)."""
    if isinstance(y, dict):
        return np.frombuffer(base64.b64decode(y["bdata"]), dtype=y["dtype"]).tolist()
    return list(y)


def test_the_kv_and_routing_charts_axes_read_round_from_zero_and_the_legend_clear_of_them(monkeypatch, store):
    """Preemptions per request and KV rejections are never negative: a flat zero line reads 0 to 1, not -1 to 1."""
    at = app(monkeypatch, store / "db.duckdb", range="all")
    show(at, "kv")
    no_exception(at)
    spec = next(json.loads(c.proto.spec) for c in at.get("plotly_chart")
                if "preemptions per request" in json.loads(c.proto.spec)["layout"]["title"]["text"])
    layout = spec["layout"]
    assert layout["yaxis"]["rangemode"] == layout["yaxis2"]["rangemode"] == "nonnegative", layout
    # KV rejections are whole requests: under five, one tick per request, never 0.2 / 0.4
    rejected = max((max(_values(t["y"]), default=0) for t in spec["data"] if t.get("yaxis") == "y2"), default=0)
    assert rejected < 5 and (layout["yaxis2"]["tickmode"], layout["yaxis2"]["dtick"]) == ("linear", 1), layout
    assert layout["legend"]["x"] > 1.02, layout["legend"]  # past the right axis' tick labels
    # a right axis has round ticks of its own, not the left axis' grid divided (11.36, 22.72, ...)
    show(at, "routing")
    no_exception(at)
    for c in at.get("plotly_chart"):
        axis = json.loads(c.proto.spec)["layout"].get("yaxis2")
        if axis:
            assert axis["tickmode"] == "auto" and "tickformat" not in axis and axis["showgrid"] is False, axis
    # the input-length histogram's bars are shares of each window's requests: percent, as the tables
    show(at, "workload")
    no_exception(at)
    (hist,) = [json.loads(c.proto.spec)["layout"] for c in at.get("plotly_chart")
               if "before and now" in json.loads(c.proto.spec)["layout"]["title"]["text"]]
    assert hist["yaxis"]["tickformat"] == ".0%", hist["yaxis"]
