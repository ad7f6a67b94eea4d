"""OTLP JSON read by DuckDB (goodput/analyzer/sql/otlp_json.sql) against the Python decoder it replaces: the same
tables, row for row, on a simulated run with fallbacks and retries, P/D kv_transfer, vLLM ``llm_request`` spans,
duplicates and requests in flight; and anything odd or bad left to the Python decoder, which quarantines it."""

import importlib
import json

import pytest

from goodput.analyzer.store import connect
from goodput.simulator.config import load_fleet
from goodput.simulator.run import simulate, write_outputs
from tests.analyzer.pd_traces import write_traces
from tests.conftest import REPO

ingest_module = importlib.import_module("goodput.analyzer.ingest")
T0 = 1_795_424_400_000_000_000
MS = 1_000_000
TABLES = {"requests": "*", "segments": "*", "in_flight": "*", "admission_spans": "*",
          "quarantine": "* EXCLUDE (noted_at)"}


def _span(trace, span, name, start, end, parent="", kind=1, attrs=None):
    return {"traceId": trace, "spanId": span, "parentSpanId": parent, "name": name, "kind": kind,
            "startTimeUnixNano": str(start), "endTimeUnixNano": end,  # a number here, a string above: both allowed
            "attributes": [{"key": k, "value": v} for k, v in (attrs or {}).items()]}


def _doc(*spans, resource=None):
    return json.dumps({"resourceSpans": [{"resource": {"attributes": [
        {"key": k, "value": v} for k, v in (resource or {"service.name": {"stringValue": "vllm"}}).items()]},
        "scopeSpans": [{"scope": {"name": "t"}, "spans": list(spans)}]}]})


def _hand_written() -> list[str]:
    """vLLM llm_request spans (doubles, ints as numbers and strings, a bool) under a gateway SERVER span with a
    retry, and a request in flight (its gateway span only)."""
    s = lambda v: {"stringValue": v}  # noqa: E731
    vllm = {"llm.deployment": s("chat"), "gen_ai.response.model": s("m"), "gen_ai.usage.prompt_tokens": {"intValue": 90},
            "gen_ai.usage.completion_tokens": {"intValue": "11"}, "llm.stream": {"boolValue": True},
            "gen_ai.response.finish_reasons": s('["length"]'), "gen_ai.latency.time_in_queue": {"doubleValue": 0.1},
            "gen_ai.latency.time_in_model_prefill": {"doubleValue": 2e-05}, "gen_ai.latency.e2e": {"doubleValue": 1}}
    t = "f" * 32
    retry = _doc(
        _span(t, "1" * 16, "POST /v1/chat/completions", T0, T0 + 1000 * MS, kind=2,
              attrs={"tenant.id": s("acme"), "http.route": s("/v1/chat/completions")}),
        _span(t, "2" * 16, "llm_request", T0 + 100 * MS, T0 + 300 * MS, parent="1" * 16, kind=2, attrs=vllm),
        _span(t, "3" * 16, "llm_request", T0 + 400 * MS, T0 + 900 * MS, parent="1" * 16, kind=2, attrs=vllm))
    flying = _doc(_span("e" * 32, "5" * 16, "llm.gateway", T0, T0 + 5 * MS, parent="4" * 16, attrs={
        "llm.deployment": s("chat"), "llm.tenant": s("bob"), "llm.request_id": s("r-1")}))
    return [retry, flying, retry]  # the retry twice: duplicates


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    """One OTLP JSON lines file: a minute of examples/primary_down.yaml (fallbacks), P/D traces, the hand-written
    documents, and a line of the run repeated."""
    out = tmp_path_factory.mktemp("mixed")
    write_outputs(simulate(load_fleet(REPO / "examples" / "primary_down.yaml"), 60.0), out)
    write_traces(out / "pd.jsonl", seconds=120.0)
    sim = (out / "spans.otlp.jsonl").read_text().splitlines()
    f = out / "mixed.jsonl"
    f.write_text("\n".join(sim + (out / "pd.jsonl").read_text().splitlines() + _hand_written() + sim[:1]) + "\n")
    return f


def _ingest(tmp_path, name, paths, monkeypatch, duckdb_reads: bool):
    """Ingest ``paths`` into a new database; the summary and, per JSON file, whether DuckDB read it."""
    calls = []
    real = ingest_module._json_by_duckdb

    def spy(*a):
        calls.append(real(*a) if duckdb_reads else False)
        return calls[-1]

    monkeypatch.setattr(ingest_module, "_json_by_duckdb", spy)
    con = connect(tmp_path / f"{name}.duckdb")
    summary = ingest_module.ingest(con, paths)
    con.close()
    monkeypatch.undo()
    return summary, calls


def _same_tables(tmp_path):
    con = connect(tmp_path / "duck.duckdb", read_only=True)
    con.execute(f"ATTACH '{tmp_path / 'python.duckdb'}' AS py (READ_ONLY)")
    for table, cols in TABLES.items():
        for a, b in (("main", "py"), ("py", "main")):
            extra = con.execute(f"SELECT {cols} FROM {a}.{table} EXCEPT ALL SELECT {cols} FROM {b}.{table}").fetchall()
            assert extra == [], f"{table}: rows in {a} only"
    counts = {t: con.execute(f"SELECT count(*) FROM {t}").fetchall()[0][0] for t in TABLES}
    con.close()
    return counts


def test_duckdb_reads_otlp_json_to_the_same_tables_as_the_python_decoder(mixed, tmp_path, monkeypatch):
    duck, read = _ingest(tmp_path, "duck", [mixed], monkeypatch, True)
    assert read == [True], "DuckDB declined the file: the comparison would be Python against itself"
    py, _ = _ingest(tmp_path, "python", [mixed], monkeypatch, False)
    assert duck.as_dict() | {"seconds": 0} == py.as_dict() | {"seconds": 0}
    counts = _same_tables(tmp_path)
    con = connect(tmp_path / "duck.duckdb", read_only=True)
    kinds = con.execute("SELECT count(fallback_from), count(kv_transfer_s), count(*) FILTER (WHERE retries > 0), "
                        "count(*) FILTER (WHERE deployment = 'chat' AND queue_s = 0.1) FROM requests").fetchall()[0]
    assert all(kinds), f"the run lacks a kind of request it is meant to compare: {kinds}"
    assert counts["in_flight"] == 1 and duck.duplicates >= 2


S = {"stringValue": "x"}
ODD = {  # each decoded by Python, not DuckDB: the Python decoder's reading differs, or it quarantines
    "array value": {"attributes": [{"key": "a", "value": {"arrayValue": {"values": [S]}}}]},
    "null parent": {"parentSpanId": None},
    "fractional intValue": {"attributes": [{"key": "gen_ai.usage.input_tokens", "value": {"intValue": "3.5"}}]},
    "duplicate key": {"attributes": [{"key": "llm.tenant", "value": S}, {"key": "llm.tenant", "value": {"stringValue": "y"}}]},
    "empty value": {"attributes": [{"key": "a", "value": {}}]},
    "kind as text": {"kind": "SPAN_KIND_SERVER"},
    "bad trace id": {"traceId": "zz"},
    "time past int64": {"startTimeUnixNano": str(2**63 + 5)},
    "status code 300": {"status": {"code": 300}},
    "key not a string": {"attributes": [{"key": 5, "value": S}]},
    "lone surrogate": {"name": "llm_request\ud800"},
    "intValue past int64": {"attributes": [{"key": "gen_ai.usage.input_tokens", "value": {"intValue": str(2**64)}}]},
}


@pytest.mark.parametrize("odd", sorted(ODD))
def test_an_odd_or_bad_span_is_left_to_the_python_decoder(odd, tmp_path, monkeypatch):
    good = _span("a" * 32, "1" * 16, "llm_request", T0, T0 + 10**9, kind=2,
                 attrs={"llm.deployment": {"stringValue": "chat"}})
    f = tmp_path / "traces.jsonl"
    f.write_text("\n".join([_doc(good), _doc({**good, "traceId": "b" * 32, **ODD[odd]})]) + "\n")
    duck, read = _ingest(tmp_path, "duck", [f], monkeypatch, True)
    assert read == [False]
    py, _ = _ingest(tmp_path, "python", [f], monkeypatch, False)
    assert duck.as_dict() | {"seconds": 0} == py.as_dict() | {"seconds": 0}
    _same_tables(tmp_path)
    assert duck.requests >= 1  # the good span kept


def test_a_clean_file_beside_a_bad_one_is_still_read_by_duckdb(mixed, tmp_path, monkeypatch):
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{not json\n")
    s, read = _ingest(tmp_path, "duck", [mixed, bad], monkeypatch, True)
    assert read == [True, False] and s.quarantined == 1 and s.requests > 1000
    con = connect(tmp_path / "duck.duckdb", read_only=True)
    detail = con.execute("SELECT detail FROM quarantine WHERE reason = 'malformed OTLP payload'").fetchall()
    assert len(detail) == 1 and "bad.jsonl: not JSON" in detail[0][0]
