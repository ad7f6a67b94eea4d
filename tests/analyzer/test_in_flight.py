"""A request seen in flight (its early spans only), then finished: kept, never quarantined, completed in place."""

from goodput.analyzer.completeness import ABANDONED_S, completeness
from goodput.analyzer.ingest import ingest
from goodput.analyzer.store import connect
from goodput.demo.ingest_loop import IngestLoop
from goodput.exporters.otlp import decode_json
from goodput.exporters.trace_store import TraceStore
from goodput.simulator.fleet import Fleet
from goodput.simulator.records import RequestTable
from goodput.simulator.spans import span_documents
from goodput.simulator.workload import generate
from tests.conftest import make_fleet

SEGMENTS = "SELECT segment, round(sum(duration_s), 6) FROM segments GROUP BY ALL ORDER BY 1"


def _run():
    cfg = make_fleet()
    fleet = Fleet(cfg, generate(cfg, 30.0, 1))
    fleet.run(30.0)
    fleet.drain(400.0)
    return cfg, fleet.done


def _table():
    cfg, done = _run()
    return RequestTable(cfg, done, 1)


def _write(path, docs):
    path.write_text("".join(d + "\n" for d in docs))
    return path


def test_an_in_flight_trace_is_kept_then_completed_by_its_root(tmp_path):
    table = _table()
    rids = [int(r) for r in table.rid]
    early = _write(tmp_path / "early.jsonl", span_documents(table, parts={r: (0, 2) for r in rids}))
    late = _write(tmp_path / "late.jsonl", span_documents(table, parts={r: (2, None) for r in rids}))
    whole = _write(tmp_path / "whole.jsonl", span_documents(table))

    con = connect(tmp_path / "db.duckdb")
    first = ingest(con, [early])
    assert (first.requests, first.quarantined, first.in_flight, first.new_in_flight) == (0, 0, table.n, table.n)
    assert first.usable  # a run of early spans only found requests: in flight
    assert con.execute("SELECT count(DISTINCT deployment), count(*) FILTER (WHERE tier IS NULL) "
                       "FROM in_flight").fetchall() == [(1, 0)]
    assert con.execute("SELECT deployment FROM admission_spans").fetchall() == [("chat",)]
    again = ingest(con, [early])  # the same early spans twice add nothing
    assert (again.requests, again.quarantined, again.in_flight, again.new_in_flight) == (0, 0, table.n, 0)

    second = ingest(con, [late])
    assert (second.requests, second.quarantined, second.in_flight) == (table.n, 0, 0)
    ingest(con, [early])  # early spans of requests already finished stay out of in_flight
    assert con.execute("SELECT count(*) FROM in_flight").fetchall() == [(0,)]

    ref = connect(tmp_path / "ref.duckdb")
    ingest(ref, [whole])
    assert con.execute(SEGMENTS).fetchall() == ref.execute(SEGMENTS).fetchall()
    cols = "trace_id, ts, gateway_s, queue_s, e2e_s, ttft_s, tier, tenant"
    assert con.execute(f"SELECT {cols} FROM requests ORDER BY 1").fetchall() == \
        ref.execute(f"SELECT {cols} FROM requests ORDER BY 1").fetchall()


def test_late_segments_without_a_root_are_still_quarantined(tmp_path):
    table = _table()
    rids = [int(r) for r in table.rid]
    docs = [d.replace('"name":"llm.request"', '"name":"other.request"')
            for d in span_documents(table, parts={r: (2, None) for r in rids})]
    con = connect(tmp_path / "db.duckdb")
    out = ingest(con, [_write(tmp_path / "late.jsonl", docs)])
    assert out.in_flight == 0
    assert out.reasons.get("partial trace: segment spans without their llm.request span") == table.n


def test_the_demo_ingest_loop_completes_in_flight_requests_on_a_later_refresh(tmp_path):
    table = _table()
    rids = [int(r) for r in table.rid]
    store = TraceStore(tmp_path / "traces")
    loop = IngestLoop(tmp_path / "traces", tmp_path / "db.duckdb")

    def send(parts):
        for doc in span_documents(table, parts=parts):
            store.accept(decode_json(doc), doc.encode(), "J")
        store.flush()
        return loop.once()

    assert send({r: (0, 2) for r in rids}) == 0
    con = connect(tmp_path / "db.duckdb", read_only=True)
    assert con.execute("SELECT count(*) FROM in_flight").fetchall() == [(table.n,)]
    con.close()
    assert send({r: (2, None) for r in rids}) == table.n
    store.close()
    con = connect(tmp_path / "db.duckdb", read_only=True)
    assert con.execute("SELECT count(*), count(*) FILTER (WHERE queue_s IS NULL) FROM requests").fetchall() == [
        (table.n, 0)]
    assert con.execute("SELECT count(*) FROM in_flight").fetchall() == [(0,)]


def test_a_request_whose_root_never_comes_is_abandoned_after_an_hour(tmp_path):
    """A fleet that stopped leaves early spans without roots: after ABANDONED_S they hold no bucket open."""
    cfg, done = _run()
    table = RequestTable(cfg, done, 1)
    first = int(table.rid[0])
    con = connect(tmp_path / "db.duckdb")
    ingest(con, [_write(tmp_path / "a.jsonl", span_documents(table, parts={int(r): (0, 2) if r == first else (0, None)
                                                                           for r in table.rid}))])
    c = completeness(con, "chat")["chat"]
    assert (c.in_flight, c.abandoned) == (1, 0) and c.final_before == c.oldest_arrival
    later = RequestTable(cfg, done, 1, base_ns=table.base_ns + int((ABANDONED_S + 600) * 1e9), run_id="later")
    ingest(con, [_write(tmp_path / "b.jsonl", span_documents(later))])
    c = completeness(con, "chat")["chat"]
    assert (c.in_flight, c.abandoned) == (0, 1) and c.final_before == c.newest_data
    assert "1 more abandoned" in c.describe()
