"""The scale benchmark's stores at a small N: the replicated spans in ClickHouse (the Collector's otel_traces, real
chDB) and the replicated DuckDB store hold the same requests and give the same decomposition, equal to the
simulated run's own (every copy is the same traffic again); cut as a live store holds it during a queue build-up,
both see the same requests in flight and leave the same buckets out of their verdicts; a window too large for one
statement's memory is derived in passes over its traces, to the same answers."""

from benchmarks.analyzer_scale import build_clickhouse, build_duckdb, disagreements, seed_run, summarize
from goodput.analyzer import backend
from goodput.analyzer.backend import ClickHouseBackend
from goodput.analyzer.completeness import completeness
from goodput.analyzer.decompose import decompose
from goodput.analyzer.ingest import ingest
from goodput.analyzer.regressions import scan_regressions
from goodput.analyzer.store import connect
from goodput.analyzer.triage import triage
from goodput.foundation.clickhouse import connect as ch_connect
from tests.analyzer.test_survivorship import CUT_S, cut_documents, incident

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


def test_both_engines_leave_out_the_same_requests_in_flight(tmp_path, chdb):
    """The seed cut at 20 minutes of a queue build-up (tests/analyzer/test_survivorship.py): of the requests in
    flight only their early spans. The replicated DuckDB store carries what is in flight as ClickHouse's spans say
    it, so triage leaves out the same requests and the scan finds the same change points in the same buckets."""
    cfg, done = incident()
    spans = tmp_path / "cut.otlp.jsonl"
    spans.write_text("".join(doc + "\n" for doc in cut_documents(cfg, done, CUT_S)))
    with connect(tmp_path / "seed.duckdb") as con:
        seed = {"spans": str(spans), "duckdb": str(tmp_path / "seed.duckdb"), "span_count": ingest(con, [spans]).spans}
    build_duckdb(seed, COPIES, tmp_path / "scale.duckdb", "1GB")
    ch = ch_connect(f"chdb:{chdb.target.path}?database=cut")
    build_clickhouse(ch, seed, COPIES)
    duck, click = connect(tmp_path / "scale.duckdb", read_only=True), ClickHouseBackend(ch)

    held = sum(1 for r in done if r.completed > CUT_S and r.queue_start <= CUT_S)
    on_duckdb, on_clickhouse = completeness(duck, "rag")["rag"], completeness(click, "rag")["rag"]
    assert on_duckdb.record() == on_clickhouse.record()
    assert (on_duckdb.basis, on_duckdb.in_flight) == ("store", COPIES * held) and held > 100
    left_out = triage(duck, "rag").left_out
    assert left_out.startswith("left out: the ") and "still in flight" in left_out
    assert triage(click, "rag").left_out == left_out
    a, b = scan_regressions(duck, [], deployment="rag"), scan_regressions(click, [], deployment="rag")
    assert a.left_out == b.left_out and a.left_out["rag"] >= 2
    assert summarize({"regressions": [r.record() for r in a.found]}) == summarize(
        {"regressions": [r.record() for r in b.found]})


def test_a_window_derived_in_passes_over_its_traces_gives_the_same_answers(tmp_path, chdb, monkeypatch):
    """The request model of a window with more than ``SPANS_PER_PASS`` spans is derived in passes over disjoint sets
    of its traces: with requests in flight (the cut seed), the same in-flight count, decomposition and change points
    (and the same buckets left out) as the model derived in one statement."""
    cfg, done = incident()
    spans = tmp_path / "cut.otlp.jsonl"
    spans.write_text("".join(doc + "\n" for doc in cut_documents(cfg, done, CUT_S)))
    with connect(tmp_path / "seed.duckdb") as con:
        seed = {"spans": str(spans), "duckdb": str(tmp_path / "seed.duckdb"), "span_count": ingest(con, [spans]).spans}
    ch = ch_connect(f"chdb:{chdb.target.path}?database=passes")
    build_clickhouse(ch, seed, 1)

    def answers(store: ClickHouseBackend) -> tuple[dict, dict, dict]:
        found = scan_regressions(store, [], deployment="rag")
        return completeness(store, "rag")["rag"].record(), found.left_out, summarize({
            "regressions": [r.record() for r in found.found],
            "decompose": decompose(store, ["deployment", "tenant"]).records()})

    whole = ClickHouseBackend(ch)
    one = answers(whole)
    monkeypatch.setattr(backend, "SPANS_PER_PASS", seed["span_count"] // 4)
    passes = ClickHouseBackend(ch)
    split = answers(passes)
    assert set(whole._passes.values()) == {1} and min(passes._passes.values()) >= 4
    assert split[:2] == one[:2] and one[0]["in_flight"] > 100 and one[1]["rag"] >= 2
    assert disagreements(one[2], split[2]) == [] and len(one[2]["decompose"]) > 1 and one[2]["regressions"]


def test_disagreements_name_what_differs():
    a = {"decompose": {"chat/acme": [0.1, 0.2]}, "triage": {"regressed": True}}
    assert disagreements(a, {"decompose": {"chat/acme": [0.1, 0.2 + 5e-7]}, "triage": {"regressed": True}}) == []
    assert disagreements(a, {"decompose": {"chat/acme": [0.1, 0.2 + 2e-6]}, "triage": {"regressed": False}}) == [
        "decompose chat/acme", "triage"]
    assert disagreements(a, {"decompose": {}}) == ["decompose chat/acme"]
