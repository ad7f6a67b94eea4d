"""The Latency page of a P/D-disaggregated deployment shows its kv_transfer segment (table, stacked bars, waterfall,
slowest requests and their trace), and an aggregated deployment's page shows none: the store is ingested from the
hand-written disaggregated traces of tests/analyzer/pd_traces.py."""

from __future__ import annotations

import json

import duckdb
import pytest

from goodput.analyzer.decompose import decompose
from goodput.analyzer.ingest import ingest
from goodput.analyzer.store import connect
from tests.analyzer.pd_traces import AGGREGATED, DISAGGREGATED, write_traces
from tests.console.test_pages import app, frame, no_exception, show


@pytest.fixture(scope="module")
def pd_db(tmp_path_factory):
    out = tmp_path_factory.mktemp("console-pd")
    write_traces(out / "spans.otlp.jsonl", seconds=900.0, degrade_at_s=600.0)
    con = connect(out / "db.duckdb")
    ingest(con, [out / "spans.otlp.jsonl"])
    con.close()
    return out / "db.duckdb"


def _bars(at) -> list[dict]:
    return [json.loads(c.proto.spec) for c in at.get("plotly_chart")]


def test_latency_shows_the_kv_transfer_of_a_disaggregated_deployment(monkeypatch, pd_db):
    at = app(monkeypatch, pd_db, range="all", deployment=DISAGGREGATED)
    show(at, "latency")
    no_exception(at)
    shown = frame(at, "queue_s", "e2e_p95_s").to_dict("records")
    expected = decompose(duckdb.connect(str(pd_db), read_only=True), ["deployment"], deployment=DISAGGREGATED).records()
    assert len(shown) == 1 and expected[0]["kv_transfer_s"] > 0.05
    assert shown[0]["kv_transfer_s"] == pytest.approx(expected[0]["kv_transfer_s"])
    stacked, waterfall, trace = _bars(at)
    names = [t["name"] for t in stacked["data"]]
    assert names[names.index("prefill") + 1] == "kv_transfer"  # in a request's order
    kv = next(t for t in waterfall["data"] if t["name"] == "kv_transfer")
    assert kv["x"] == [pytest.approx(expected[0]["kv_transfer_s"])]
    assert kv["base"] == [pytest.approx(sum(expected[0][f"{s}_s"] for s in ("gateway", "queue", "prefill")))]
    slow = frame(at, "trace_id", "e2e_s")
    assert slow["kv_transfer_s"].notna().all() and slow["prefill_replica"].str.startswith("pd-chat-prefill-").all()
    assert any(t["name"] == "kv_transfer" for t in trace["data"])  # the slowest request's drill-down


def test_latency_of_an_aggregated_deployment_has_no_kv_transfer(monkeypatch, pd_db):
    at = app(monkeypatch, pd_db, range="all", deployment=AGGREGATED)
    show(at, "latency")
    no_exception(at)
    assert "kv_transfer_s" not in frame(at, "queue_s", "e2e_p95_s").columns
    assert "kv_transfer_s" not in frame(at, "trace_id", "e2e_s").columns
    assert all(t["name"] != "kv_transfer" for chart in _bars(at) for t in chart["data"])
