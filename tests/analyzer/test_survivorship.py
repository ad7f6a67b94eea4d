"""Survivorship during a queue build-up, on a store cut as a live store holds it: only the spans that had ended.

A pool of two replicas serving a P0 chat and a P2 report workload (longer outputs) loses one replica at 10 minutes;
arrivals stay at 4.5 req/s, the queue grows by minutes and the P2 requests wait behind the P0 ones. The
store at 20 minutes holds each finished request whole and, of those still in flight, the early spans the live
fleet exports (``llm.gateway`` at admission, ``llm.queue`` at scheduling), pushed through the request exporter's
trace store into Parquet and ingested as the demo's ingest loop does. Every figure must agree with the
simulator's own record of what arrived, and no verdict may read a bucket whose requests are still in flight.
"""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from goodput.analyzer.completeness import arrivals, completeness, drop_incomplete
from goodput.analyzer.ingest import ingest
from goodput.analyzer.regressions import scan_regressions
from goodput.analyzer.store import connect, sql
from goodput.analyzer.triage import triage
from goodput.exporters.otlp import decode_json
from goodput.exporters.trace_store import TraceStore
from goodput.simulator.fleet import Fleet
from goodput.simulator.records import RequestTable
from goodput.simulator.spans import span_documents
from goodput.simulator.workload import generate
from tests.conftest import BASE_DEPLOYMENT, BASE_WORKLOAD, make_fleet

RATE, LOSS_S, CUT_S, SEED = 4.5, 600.0, 1200.0, 1


def incident():
    """The fleet config and every request of 25 simulated minutes, run to completion (the simulator's truth)."""
    dep = copy.deepcopy(BASE_DEPLOYMENT)
    dep.update(name="rag", replicas=2)
    dep["engine"]["max_num_seqs"] = 16
    wls = []
    for name, tier, out in (("rag-chat", "P0", 200), ("rag-report", "P2", 600)):
        wl = copy.deepcopy(BASE_WORKLOAD)
        wl.update(name=name, tier=tier, deployment="rag", arrival={"process": "poisson", "rate": RATE / 2},
                  max_tokens=4096, output_tokens={"p50": out, "p95": 3 * out, "p99": 4 * out, "max": 5 * out})
        wls.append(wl)
    cfg = make_fleet(deployments=[dep], workloads=wls,
                     events=[{"at": LOSS_S, "kind": "replica_lost", "deployment": "rag", "replica": 0}])
    fleet = Fleet(cfg, generate(cfg, 1500.0, SEED))
    fleet.run(1500.0)
    fleet.drain(6000.0)
    return cfg, fleet.done


def cut_documents(cfg, done, cut_s: float, span_format: str = "goodput"):
    """The OTLP documents a live fleet had exported at ``cut_s``: finished requests whole, and (goodput's shape)
    the gateway and queue spans of the admitted ones still in flight."""
    early = span_format != "vllm"
    parts, kept = {}, []
    for r in done:
        if r.completed <= cut_s:
            parts[r.rid] = (0, None)
        elif early and r.queue_start <= cut_s:
            parts[r.rid] = (0, 2 if r.scheduled <= cut_s else 1)
        else:
            continue
        kept.append(r)
    return span_documents(RequestTable(cfg, kept, SEED), service="goodput-fleet", parts=parts, span_format=span_format)


def cut_store(cfg, done, cut_s: float, root: Path, span_format: str = "goodput") -> Path:
    """The trace store a live exporter holds at ``cut_s`` (``cut_documents``), as the demo's ingest loop reads it."""
    store = TraceStore(root)
    for doc in cut_documents(cfg, done, cut_s, span_format):
        store.accept(decode_json(doc), doc.encode(), "J")
    store.flush()
    store.close()
    return root


def true_arrivals(cfg, done) -> dict[int, int]:
    """Requests per minute of arrival, as the simulator made them."""
    minutes = np.floor(np.array([r.arrival for r in done]) / 60).astype(int)
    return dict(zip(*np.unique(minutes, return_counts=True), strict=True))


START = datetime(2026, 11, 23, 9, 0, tzinfo=UTC)  # the test fleet's start_time
CUT = START + timedelta(seconds=CUT_S)


@pytest.fixture(scope="module")
def cut(tmp_path_factory):
    """The incident's truth, and the analyzer database of the store cut at 20 minutes."""
    tmp = tmp_path_factory.mktemp("survivorship")
    cfg, done = incident()
    con = connect(tmp / "db.duckdb")
    ingest(con, [cut_store(cfg, done, CUT_S, tmp / "store")])
    con.close()
    con = connect(tmp / "db.duckdb", read_only=True)
    yield cfg, done, con
    con.close()


def test_arrival_rate_per_minute_is_the_simulators(cut):
    cfg, done, con = cut
    truth = true_arrivals(cfg, done)
    got = arrivals(con, "1 minute", since=START, until=CUT, deployment="rag")
    per_minute = {int((b - START).total_seconds() // 60): n for b, n in zip(got["bucket"], got["arrivals"], strict=True)}
    assert sorted(per_minute) == list(range(20))
    worst = max(abs(per_minute[m] / truth[m] - 1) for m in range(20))
    assert worst <= 0.1, f"arrivals per minute off by up to {worst:.0%}: {per_minute} vs {truth}"
    in_flight = sum(1 for r in done if r.completed > CUT_S and r.queue_start <= CUT_S)
    c = completeness(con, "rag")["rag"]
    assert c.in_flight == in_flight > 100
    oldest = min(r.arrival for r in done if r.completed > CUT_S and r.queue_start <= CUT_S)
    assert c.oldest_arrival == pytest.approx(START + timedelta(seconds=oldest), abs=timedelta(milliseconds=1))


def test_no_p95_recovery_from_buckets_still_in_flight(cut):
    """Every bucket the verdicts read holds all its requests: its p95 is the simulator's; the rest are left out."""
    cfg, done, con = cut
    series = con.execute(sql("bucket_series"), {"bucket": "1 minute", "since": START, "until": CUT,
                                                "deployment": "rag"}).fetchdf()
    final, left_out = drop_incomplete(con, series, timedelta(minutes=1), "rag")
    assert left_out["rag"] >= 2 and len(final) >= 2 * 15  # the queue's last minutes wait; the rest is there
    for tier, b, p95 in zip(final["tier"], final["bucket"], final["e2e_s"], strict=True):
        minute = int((b - START).total_seconds() // 60)
        e2e = [r.completed - r.arrival for r in done if minute * 60 <= r.arrival < minute * 60 + 60
               and r.tier == tier and r.finish_reason in ("stop", "length")]
        assert p95 == pytest.approx(float(np.percentile(e2e, 95)), rel=1e-6), f"{tier} minute {minute}"
    scan = scan_regressions(con, [], bucket="1 minute", deployment="rag")
    assert scan.left_out == left_out and "still in flight" in scan.describe()
    assert not any(r.change < 0 and r.metric in ("e2e_s", "queue_s") for r in scan.found)


def test_triage_reports_no_drop_that_did_not_happen(cut, capsys):
    cfg, done, con = cut
    t = triage(con, "rag", since=START, until=CUT)
    rate = next(f for s, f in t.steps if s == "2. workload")
    split = datetime.fromisoformat(t.facts["recent_from"])
    cut_at = datetime.fromisoformat(t.facts["arrival_rate"]["until"])
    start = datetime.fromisoformat(t.facts["arrival_rate"]["from"])  # as long before the split as the recent period
    assert split - start == cut_at - split
    arrived = [r.arrival for r in done]
    before = sum(1 for a in arrived if (start - START).total_seconds() <= a < (split - START).total_seconds()) / (
        split - start).total_seconds()
    recent = sum(1 for a in arrived if (split - START).total_seconds() <= a < (cut_at - START).total_seconds()) / (
        cut_at - split).total_seconds()
    change = float(rate.split("arrival rate ")[1].split("%")[0]) / 100
    assert abs(change - (recent / before - 1)) <= 0.1, rate
    outp = float(rate.split("output tokens ")[1].split("%")[0]) / 100
    assert abs(outp) < 0.2, rate
    assert "left out: the" in t.verdict and "still in flight" in t.verdict
    assert t.completeness["in_flight"] > 100 and t.completeness["oldest_age_s"] > 60
    assert t.steps[0][0] == "0. in flight" and "in flight, the oldest arrived" in t.steps[0][1]


def test_workload_page_draws_the_queue_s_minutes_as_incomplete(cut, monkeypatch):
    from tests.console.test_pages import app, no_exception, show

    cfg, done, con = cut
    db = Path(con.execute("SELECT path FROM duckdb_databases() WHERE database_name = current_database()").fetchall()[0][0])
    at = show(app(monkeypatch, db, range="all", deployment="rag"), "workload")
    no_exception(at)
    shift = next(d.value for d in at.dataframe if "measure" in d.value.columns).set_index("measure")
    assert not shift["shift"].any(), shift  # the survivors' shorter outputs are not a shift
    in_flight = sum(1 for r in done if r.completed > CUT_S and r.queue_start <= CUT_S)
    assert any(f"{in_flight} requests in flight, the oldest for" in c.value for c in at.caption), \
        [c.value for c in at.caption]
    assert any("are left out: their buckets are not final" in c.value for c in at.caption)
    bars = json.loads(next(c for c in at.get("plotly_chart") if "arrival rate" in c.proto.spec).proto.spec)["data"]
    final, incomplete = bars
    assert incomplete["name"] == "incomplete" and len(incomplete["x"]) >= 2 and len(final["x"]) >= 15
    assert all(t.startswith("incomplete: ") for t in incomplete["text"])


def test_without_early_spans_the_bound_is_conservative(cut, tmp_path):
    """vLLM's shape, cut the same: nothing in flight is visible, so what is final comes from the bound (or from
    Prometheus saying nothing is in flight)."""
    cfg, done, _ = cut
    con = connect(tmp_path / "db.duckdb")
    ingest(con, [cut_store(cfg, done, CUT_S, tmp_path / "store", span_format="vllm")])
    c = completeness(con, "rag")["rag"]
    assert (c.early_spans, c.in_flight, c.basis) == (False, None, "bound")
    held = [r for r in done if r.completed > CUT_S and r.queue_start <= CUT_S]
    oldest = START + timedelta(seconds=min(r.queue_start for r in held))  # vLLM's span starts at the engine
    assert c.final_before <= oldest and c.arrivals_through == c.final_before
    assert completeness(con, "rag", {"rag": len(held)})["rag"].in_flight == len(held)
    assert completeness(con, "rag", {"rag": 0})["rag"].final_before == c.newest_data  # Prometheus: none in flight
    t = triage(con, "rag", since=START, until=CUT)
    assert "no early spans" in t.left_out and t.completeness["basis"] == "bound"


def test_triage_command_shows_what_is_in_flight(cut):
    from tests.analyzer.test_analysis import _cli

    cfg, done, con = cut
    db = con.execute("SELECT path FROM duckdb_databases() WHERE database_name = current_database()").fetchall()[0][0]
    window = ("--since", START.isoformat(), "--until", CUT.isoformat())
    r = _cli("triage", "--db", db, "--deployment", "rag", *window, "--format", "json")
    assert r.returncode == 0, r.stderr
    rec = json.loads(r.stdout)
    held = sum(1 for x in done if x.completed > CUT_S and x.queue_start <= CUT_S)
    assert rec["completeness"]["in_flight"] == held and rec["left_out"].startswith("left out: the ")
    r = _cli("triage", "--db", db, "--deployment", "rag", *window)
    assert r.returncode == 0 and f"0. in flight: {held} in flight, the oldest arrived" in r.stdout
    r = _cli("triage", "--db", db, "--deployment", "rag", "--prometheus", "http://127.0.0.1:9")
    assert r.returncode == 2 and "--prometheus" in r.stderr and "Traceback" not in r.stderr
