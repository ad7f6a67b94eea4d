"""Ingest: every input format, exact decomposition against the simulator's timestamps, quarantine, idempotence."""

import json
import struct

import pyarrow.parquet as pq
import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, set_span_in_context

from analyzer.ingest import ingest
from analyzer.store import connect
from exporters.otlp import decode_json
from exporters.trace_store import TraceStore
from simulator.run import simulate, write_outputs
from tests.conftest import FIXTURES, make_fleet

SEGMENTS = ("gateway", "queue", "prefill", "decode", "send")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("sim")
    cfg = make_fleet(events=[{"at": 60, "kind": "replica_lost", "deployment": "chat", "replica": 1}])
    write_outputs(simulate(cfg, 180.0), out)
    return out


def test_span_decomposition_equals_the_simulator_timestamps(run, tmp_path):
    con = connect(tmp_path / "db.duckdb")
    s = ingest(con, [run / "spans.otlp.jsonl"])
    truth = pq.read_table(run / "requests.parquet").to_pandas().set_index("trace_id")
    assert s.requests == len(truth) and s.quarantined == 0
    got = con.execute("SELECT trace_id, gateway_s, queue_s, prefill_s, decode_s, send_s, other_s, e2e_s, ttft_s, outcome "
                      "FROM requests").fetchdf().set_index("trace_id")
    ns = {c: truth[c].astype("int64", errors="ignore") for c in ("arrival", "queue_start", "scheduled", "first_token",
                                                                 "last_token", "completed")}
    ok = truth["finish_reason"] == "stop"
    idx = truth.index[ok]

    def secs(a, b):
        return (ns[b][idx] - ns[a][idx]) / 1e9

    assert (got.loc[idx, "gateway_s"] - secs("arrival", "queue_start")).abs().max() < 1e-12
    assert (got.loc[idx, "queue_s"] - secs("queue_start", "scheduled")).abs().max() < 1e-12
    assert (got.loc[idx, "prefill_s"] - secs("scheduled", "first_token")).abs().max() < 1e-12
    assert (got.loc[idx, "decode_s"] - secs("first_token", "last_token")).abs().max() < 1e-12
    assert (got.loc[idx, "send_s"] - secs("last_token", "completed")).abs().max() < 1e-12
    assert (got.loc[idx, "e2e_s"] - secs("arrival", "completed")).abs().max() < 1e-12
    assert (got.loc[idx, "ttft_s"] - secs("arrival", "first_token")).abs().max() < 1e-12
    assert got["other_s"].abs().max() < 1e-9  # back-to-back segments tile the request exactly
    assert set(got["outcome"]) >= {"ok", "error"}  # the lost replica's requests are there too
    n_seg = con.execute("SELECT count(*) FROM segments WHERE segment <> 'other'").fetchall()[0][0]
    assert n_seg == sum(got[f"{s}_s"].notna().sum() for s in SEGMENTS)


def test_parquet_and_spans_agree_and_a_second_ingest_adds_nothing(run, tmp_path):
    a = connect(tmp_path / "a.duckdb")
    first = ingest(a, [run / "requests.parquet"])
    again = ingest(a, [run / "requests.parquet", run / "spans.otlp.jsonl"])
    assert first.requests > 0 and again.requests == 0 and again.duplicates == 2 * first.requests
    assert a.execute("SELECT count(*) FROM requests").fetchall()[0][0] == first.requests
    b = connect(tmp_path / "b.duckdb")
    ingest(b, [run / "spans.otlp.jsonl"])
    q = "SELECT trace_id, round(e2e_s, 9), round(ttft_s, 9), round(queue_s, 9), tenant, outcome FROM requests ORDER BY 1"
    assert a.execute(q).fetchall() == b.execute(q).fetchall()


def test_request_exporter_store_ingests(run, tmp_path):
    store = TraceStore(tmp_path / "store")
    for line in (run / "spans.otlp.jsonl").read_text().splitlines()[:3]:
        store.accept(decode_json(line), line.encode(), "J")
    store.close()
    con = connect(tmp_path / "db.duckdb")
    s = ingest(con, [tmp_path / "store"])
    assert s.requests == 3 * 256 and s.quarantined == 0


def test_a_trace_without_llm_spans_is_ignored_not_quarantined(tmp_path):
    con = connect(tmp_path / "db.duckdb")
    s = ingest(con, [FIXTURES / "otlp" / "otlp_proto_examples_trace.json"])
    assert s.spans == 1 and s.requests == 0 and s.quarantined == 0 and not s.usable
    assert s.ignored_reasons == {"no LLM request in the trace (no llm.request or llm_request span)": 1}


def _span(trace, span, name, start, end, parent="", attrs=None):
    return {"traceId": trace, "spanId": span, "parentSpanId": parent, "name": name, "kind": 2 if not parent else 1,
            "startTimeUnixNano": str(start), "endTimeUnixNano": str(end),
            "attributes": [{"key": k, "value": {"stringValue": v}} for k, v in (attrs or {}).items()]}


def _doc(*spans):
    return json.dumps({"resourceSpans": [{"resource": {"attributes": []}, "scopeSpans": [{"spans": list(spans)}]}]})


def test_malformed_and_partial_traces_are_quarantined_with_reasons(tmp_path):
    t0 = 1_795_424_400_000_000_000
    good = _doc(_span("a" * 32, "1" * 16, "llm.request", t0, t0 + 10**9, attrs={"llm.deployment": "chat"}),
                _span("a" * 32, "2" * 16, "llm.gateway", t0, t0 + 10**9, parent="1" * 16))
    lines = [
        good,
        "{this is not json",
        _doc(_span("zz", "3" * 16, "llm.request", t0, t0 + 1)),  # bad trace id
        _doc(_span("b" * 32, "4" * 16, "llm.queue", t0, t0 + 1, parent="5" * 16)),  # partial: no root
        _doc(_span("c" * 32, "6" * 16, "llm.request", t0 + 5, t0, attrs={"llm.deployment": "chat"})),  # ends first
        _doc(_span("d" * 32, "7" * 16, "llm.request", t0, t0 + 5)),  # no deployment, no service name
    ]
    f = tmp_path / "traces.jsonl"
    f.write_text("\n".join(lines) + "\n")
    con = connect(tmp_path / "db.duckdb")
    s = ingest(con, [f])
    assert s.requests == 1
    assert s.reasons == {
        "malformed OTLP payload": 2,
        "partial trace: segment spans without their llm.request span": 1,
        "engine span ends before it starts": 1,
        "engine span has no deployment (llm.deployment or the service name)": 1,
    }
    details = [d for (d,) in con.execute("SELECT detail FROM quarantine WHERE reason = 'malformed OTLP payload'").fetchall()]
    assert any("traces.jsonl:2" in d and "not JSON" in d for d in details)
    assert any("traces.jsonl:3" in d and "traceId" in d for d in details)


def _sdk_spans():
    mem = InMemorySpanExporter()
    tp = TracerProvider(resource=Resource.create({"service.name": "gw"}))
    tp.add_span_processor(SimpleSpanProcessor(mem))
    tr = tp.get_tracer("t")
    t0 = 1_795_424_400_000_000_000
    root = tr.start_span("llm.request", kind=SpanKind.SERVER, start_time=t0, attributes={
        "llm.deployment": "chat", "llm.tenant": "pb", "gen_ai.usage.output_tokens": 5})
    ctx = set_span_in_context(root)
    bounds = [t0, t0 + 10**6, t0 + 10**7, t0 + 10**8, t0 + 5 * 10**8, t0 + 501 * 10**6]
    for name, a, b in zip(("llm.gateway", "llm.queue", "llm.prefill", "llm.decode", "llm.send"), bounds, bounds[1:],
                          strict=False):
        tr.start_span(name, context=ctx, start_time=a).end(end_time=b)
    root.end(end_time=bounds[-1])
    return mem.get_finished_spans()


@pytest.mark.parametrize("framing", ["bare", "length-prefixed"])
def test_otlp_protobuf_files(tmp_path, framing):
    msg = encode_spans(_sdk_spans()).SerializeToString()
    f = tmp_path / "traces.binpb"
    f.write_bytes(msg if framing == "bare" else struct.pack(">I", len(msg)) + msg)
    con = connect(tmp_path / "db.duckdb")
    s = ingest(con, [f])
    assert s.requests == 1 and s.quarantined == 0
    row = con.execute("SELECT tenant, round(ttft_s, 6), round(queue_s, 6), round(tpot_s, 6) FROM requests").fetchall()
    assert row == [("pb", 0.1, 0.009, 0.10025)]  # TPOT = (E2E - TTFT) / (5 - 1), E2E includes the send


def test_vllm_llm_request_span(tmp_path):
    t0 = 1_795_424_400_000_000_000
    attrs = [{"key": "gen_ai.response.model", "value": {"stringValue": "m"}},
             {"key": "gen_ai.usage.prompt_tokens", "value": {"intValue": "100"}},
             {"key": "gen_ai.usage.completion_tokens", "value": {"intValue": "11"}},
             {"key": "gen_ai.latency.time_in_queue", "value": {"doubleValue": 0.25}},
             {"key": "gen_ai.latency.time_to_first_token", "value": {"doubleValue": 0.5}},
             {"key": "gen_ai.latency.time_in_model_prefill", "value": {"doubleValue": 0.2}},
             {"key": "gen_ai.latency.time_in_model_decode", "value": {"doubleValue": 1.0}},
             {"key": "gen_ai.latency.e2e", "value": {"doubleValue": 1.5}}]
    doc = {"resourceSpans": [{"resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "vllm-chat"}}]},
                              "scopeSpans": [{"spans": [{"traceId": "e" * 32, "spanId": "8" * 16, "name": "llm_request",
                                                         "kind": 2, "startTimeUnixNano": str(t0),
                                                         "endTimeUnixNano": str(t0 + 15 * 10**8), "attributes": attrs}]}]}]}
    f = tmp_path / "vllm.json"
    f.write_text(json.dumps(doc, indent=2))  # one pretty-printed document
    con = connect(tmp_path / "db.duckdb")
    assert ingest(con, [f]).requests == 1
    row = con.execute("SELECT deployment, queue_s, prefill_s, decode_s, e2e_s, ttft_s, round(other_s, 9), "
                      "round(tpot_s, 9), input_tokens FROM requests").fetchall()
    assert row == [("vllm-chat", 0.25, 0.2, 1.0, 1.5, 0.5, 0.05, 0.1, 100)]


def test_the_same_spans_twice_in_one_ingest_count_once(run, tmp_path):
    con = connect(tmp_path / "db.duckdb")
    once = connect(tmp_path / "once.duckdb")
    s = ingest(con, [run / "spans.otlp.jsonl", run / "spans.otlp.jsonl"])
    n = ingest(once, [run / "spans.otlp.jsonl"]).requests
    assert s.requests == n and s.quarantined == 0 and s.duplicates == n
    q = "SELECT trace_id, e2e_s, ttft_s, queue_s FROM requests ORDER BY 1"
    assert con.execute(q).fetchall() == once.execute(q).fetchall()
    assert con.execute("SELECT count(*) FROM segments").fetchall() == once.execute("SELECT count(*) FROM segments").fetchall()
