"""The scale benchmark's stores at a small N: the replicated spans in ClickHouse (the Collector's otel_traces, real
chDB) and the replicated DuckDB store hold the same requests and give the same decomposition, equal to the
simulated run's own (every copy is the same traffic again)."""

from analyzer.backend import ClickHouseBackend
from analyzer.decompose import decompose
from analyzer.store import connect
from benchmarks.analyzer_scale import build_clickhouse, build_duckdb, disagreements, seed_run, summarize
from goodput.foundation.clickhouse import connect as ch_connect

COPIES = 3


def test_both_engines_hold_the_same_replicated_requests(tmp_path, chdb):
    seed = seed_run(tmp_path, seconds=150.0)  # ~1.2k requests, ~7k spans
    assert seed["requests"] > 800
    db = tmp_path / "scale.duckdb"
    build_duckdb(seed, COPIES, db, "1GB")
    ch = ch_connect(f"chdb:{chdb.target.path}?database=scale")
    built = build_clickhouse(ch, seed, COPIES)
    assert built["rows"] == COPIES * seed["span_count"]

    duck = connect(db, read_only=True)
    on_duckdb = decompose(duck, ["deployment", "tenant"]).records()
    on_clickhouse = decompose(ClickHouseBackend(ch), ["deployment", "tenant"]).records()
    on_seed = decompose(connect(seed["duckdb"], read_only=True), ["deployment", "tenant"]).records()

    # every copy is a distinct request on both engines (ids re-prefixed): none merged into another
    assert sum(r["requests"] for r in on_duckdb) == sum(r["requests"] for r in on_clickhouse) == COPIES * seed["requests"]
    a, b = summarize({"decompose": on_duckdb}), summarize({"decompose": on_clickhouse})
    assert len(a["decompose"]) == 4
    assert disagreements(a, b) == []
    assert disagreements(a, summarize({"decompose": on_seed})) == []


def test_disagreements_name_what_differs():
    a = {"decompose": {"chat/acme": [0.1, 0.2]}, "triage": {"regressed": True}}
    assert disagreements(a, {"decompose": {"chat/acme": [0.1, 0.2 + 5e-7]}, "triage": {"regressed": True}}) == []
    assert disagreements(a, {"decompose": {"chat/acme": [0.1, 0.2 + 2e-6]}, "triage": {"regressed": False}}) == [
        "decompose chat/acme", "triage"]
    assert disagreements(a, {"decompose": {}}) == ["decompose chat/acme"]
