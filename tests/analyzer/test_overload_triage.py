"""Triage step 4 reads the overload ladder's degradations and the fallback routes per tier (the contracts' span
attributes, and the simulator's record columns), on the DuckDB store and on the spans in ClickHouse alike."""

from __future__ import annotations

import copy
import json
from collections import Counter
from datetime import datetime

import duckdb
import pytest

from goodput.analyzer.ingest import ingest
from goodput.analyzer.store import connect
from goodput.analyzer.triage import FALLBACK_SHARE, _overload, triage
from goodput.cli import main
from goodput.simulator.run import simulate
from goodput.simulator.spans import span_documents
from tests.conftest import BASE_WORKLOAD, REPO, clickhouse_of, make_fleet


def _mark(i: int, tier: str) -> dict[str, str]:
    """What the gateway did to request ``i`` of ``tier``: half of P1 degraded, half of P0 fallen back to chat from
    chat-large's open circuit, a quarter served by chat-small for want of capacity on chat."""
    if tier == "P1":
        return {"degraded": ("output_cap", "context_trim", "", "")[i % 4]}
    circuit = {"fallback_from": "chat-large", "fallback_reason": "circuit_open"}
    return (circuit, circuit, {"fallback_from": "chat", "fallback_reason": "capacity", "deployment": "chat-small"},
            {})[i % 4]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """Two minutes of P0 and P1 on chat, marked as a gateway under overload would: its OTLP spans as a file and its
    requests.parquet with the new columns, and the same parquet as a record from before them."""
    out = tmp_path_factory.mktemp("overload")
    p1 = {**copy.deepcopy(BASE_WORKLOAD), "name": "assist", "tier": "P1"}
    table = simulate(make_fleet(workloads=[copy.deepcopy(BASE_WORKLOAD), p1]), 120.0).table
    marks = {rid: _mark(i, tier) for i, (rid, tier) in enumerate(zip(table.request_id, table.tier, strict=True))}
    with open(out / "spans.otlp.jsonl", "w") as f:
        for doc in span_documents(table):
            d = json.loads(doc)
            for s in d["resourceSpans"][0]["scopeSpans"][0]["spans"]:
                attrs = {a["key"]: a for a in s.get("attributes", [])}
                rid = attrs.get("llm.request_id", {}).get("value", {}).get("stringValue")
                if s["name"] not in ("llm.request", "llm.gateway") or rid not in marks:
                    continue
                for k, v in marks[rid].items():
                    attrs[f"llm.{k}"] = {"key": f"llm.{k}", "value": {"stringValue": v}}
                s["attributes"] = list(attrs.values())
            f.write(json.dumps(d) + "\n")
    table.write_parquet(out / "plain.parquet")
    with duckdb.connect() as con:
        con.execute("CREATE TABLE marks (request_id VARCHAR, deployment VARCHAR, degraded VARCHAR, "
                    "fallback_from VARCHAR, fallback_reason VARCHAR)")
        con.executemany("INSERT INTO marks VALUES (?, ?, ?, ?, ?)",
                        [(rid, m.get("deployment"), m.get("degraded"), m.get("fallback_from"), m.get("fallback_reason"))
                         for rid, m in marks.items()])
        # the simulator's own (empty) columns give way to the marks
        con.execute(f"COPY (SELECT p.* EXCLUDE (degraded, fallback_from, fallback_reason) "
                    f"REPLACE (coalesce(m.deployment, p.deployment) AS deployment), "
                    f"coalesce(m.degraded, '') AS degraded, m.fallback_from, m.fallback_reason "
                    f"FROM read_parquet('{out / 'plain.parquet'}') p LEFT JOIN marks m USING (request_id)) "
                    f"TO '{out / 'requests.parquet'}' (FORMAT parquet)")
    for name, src in (("spans.duckdb", "spans.otlp.jsonl"), ("record.duckdb", "requests.parquet"),
                      ("plain.duckdb", "plain.parquet")):
        con = connect(out / name)
        ingest(con, [out / src])
        con.close()
    return out, table, marks


def _expected(table, marks, split: datetime) -> Counter:
    """(tier, action, detail, reason) -> requests of the recent period, counted from the marks themselves."""
    out: Counter = Counter()
    since = int(split.timestamp() * 1e9)
    for rid, tier, arrival in zip(table.request_id, table.tier, table.ts["arrival"], strict=True):
        m = marks[rid]
        if arrival < since:
            continue
        if m.get("degraded"):
            out[(tier, "degraded", m["degraded"], None)] += 1
        elif m.get("deployment") == "chat-small":
            out[(tier, "fallback_out", "chat-small", m["fallback_reason"])] += 1
        elif m.get("fallback_from"):
            out[(tier, "fallback_in", m["fallback_from"], m["fallback_reason"])] += 1
    return out


@pytest.fixture(params=["spans", "record", "clickhouse"])
def store(request, run):
    out = run[0]
    if request.param == "clickhouse":
        return clickhouse_of(request.getfixturevalue("chdb"), out, "overload_triage")
    return duckdb.connect(str(out / f"{request.param}.duckdb"), read_only=True)


def test_step_4_reads_the_degraded_and_fallback_shares_per_tier(run, store):
    _, table, marks = run
    t = triage(store, "chat")
    split = datetime.fromisoformat(t.facts["recent_from"])
    rows = t.facts["gateway_overload"]
    got = Counter({(r["tier"], r["action"], r["detail"], r["reason"]): r["n"] for r in rows})
    assert got == _expected(table, marks, split)
    assert {a for _, a, _, _ in got} == {"degraded", "fallback_in", "fallback_out"}
    since = int(split.timestamp() * 1e9)
    p0 = sum(1 for tier, a in zip(table.tier, table.ts["arrival"], strict=True) if tier == "P0" and a >= since)
    assert {r["requests"] for r in rows if r["tier"] == "P0"} == {p0}  # served on chat, and moved away from it
    share_in = got[("P0", "fallback_in", "chat-large", "circuit_open")] / p0
    step = dict(t.steps)["4. routing and cache"]
    assert f"{share_in:.0%} of P0 fell back to it from chat-large (circuit_open)" in step, step
    assert "of P0 fell back away from it to chat-small (capacity)" in step, step
    assert "of P1 degraded by the overload ladder (" in step, step
    finding, cause = _overload(store, "chat", split, None, {})
    assert share_in >= FALLBACK_SHARE and cause == (
        f"P0 requests moved by a fallback route: {share_in:.0%} fell back to it from chat-large (circuit_open) "
        "(the primary's circuit breaker is open)")


def test_a_record_from_before_the_ladder_reads_nothing_degraded(run):
    with duckdb.connect(str(run[0] / "plain.duckdb"), read_only=True) as con:
        t = triage(con, "chat")
    assert t.facts["gateway_overload"] == []
    assert "nothing degraded or fallen back" in dict(t.steps)["4. routing and cache"]


@pytest.fixture(scope="module")
def primary_down(tmp_path_factory):
    """`goodput simulate examples/primary_down.yaml --duration 240` (large lost at 60 s, back at 180 s) in a DuckDB
    store, as `goodput analyze ingest` makes it from the spans."""
    out = tmp_path_factory.mktemp("primary-down")
    assert main(["simulate", str(REPO / "examples" / "primary_down.yaml"), "--duration", "240", "--out", str(out),
                 "--format", "json"]) == 0
    con = connect(out / "spans.duckdb")
    ingest(con, [out / "spans.otlp.jsonl"])
    con.close()
    return out


@pytest.fixture(params=["duckdb", "clickhouse"])
def down_store(request, primary_down):
    if request.param == "clickhouse":
        return clickhouse_of(request.getfixturevalue("chdb"), primary_down, "primary_down_triage")
    return duckdb.connect(str(primary_down / "spans.duckdb"), read_only=True)


MID_OUTAGE = datetime.fromisoformat("2026-11-23T09:02:00+00:00")  # the recent quarter: 90-120 s, large's circuit open


def test_mid_outage_the_lost_primary_is_named_by_its_open_circuit_and_the_backup_by_the_load_it_took(down_store):
    """The simulator's own outage, not marks: large served none of its recent requests (no p95 to compare) and is not
    'no regression'; its verdict is the fallback route away from it with its circuit open, its refusals are named for
    what they are (capability, circuit_open), not a queue; small's verdict is the load that fell back to it."""
    large = triage(down_store, "large", until=MID_OUTAGE)
    step = dict(large.steps)["4. routing and cache"]
    assert large.regressed and large.facts["served_none_recently"]
    assert large.verdict.startswith("P0 requests moved by a fallback route: ") and large.verdict.endswith(
        "fell back away from it to small (circuit_open) (its circuit breaker is open)"), large.verdict
    assert "queue full" not in step and "no deployment left able to serve these P0 requests' needs (capability" in step
    small = triage(down_store, "small", until=MID_OUTAGE)
    assert small.verdict.startswith("P0 requests moved by a fallback route: ") and small.verdict.endswith(
        "fell back to it from large (circuit_open) (the primary's circuit breaker is open)"), small.verdict
    # over the whole run the recent quarter is after large came back: nothing to name
    assert not triage(down_store, "large").regressed
