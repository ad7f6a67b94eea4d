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

from goodput.analyzer.ingest import ingest
from goodput.analyzer.store import connect
from goodput.exporters.otlp import decode_json
from goodput.exporters.trace_store import TraceStore
from goodput.simulator.run import simulate, write_outputs
from tests.conftest import FIXTURES, make_fleet

SEGMENTS = ("gateway", "queue", "prefill", "decode", "send")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("sim")
    cfg = make_fleet(events=[{"at": 60, "kind": "replica_lost", "deployment": "chat", "replica": 1}])
    write_outputs(simulate(cfg, 180.0), out)
    return out


@pytest.mark.parametrize("source", ["spans.otlp.jsonl", "requests.parquet"])
def test_decomposition_equals_the_simulator_timestamps(run, tmp_path, source):
    con = connect(tmp_path / "db.duckdb")
    s = ingest(con, [run / source])
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
    assert got.loc[idx, [f"{x}_s" for x in SEGMENTS]].notna().all().all()
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


T0 = 1_795_424_400_000_000_000
MS = 1_000_000


def _latency(**kw):
    return {f"gen_ai.latency.{k}": v for k, v in kw.items()}


def _nested_spans():
    """Three traces made with the SDK: gateway -> GenAI client -> vLLM llm_request; an llm_request whose caller's
    spans are missing; and a trace where the tenant sits on a sibling span, not an ancestor."""
    mem = InMemorySpanExporter()
    tracer = {}
    for service in ("gateway", "app", "vllm-chat"):
        tp = TracerProvider(resource=Resource.create({"service.name": service}))
        tp.add_span_processor(SimpleSpanProcessor(mem))
        tracer[service] = tp.get_tracer("t")
    engine = {"gen_ai.response.model": "m", "gen_ai.usage.prompt_tokens": 90, "gen_ai.usage.completion_tokens": 11,
              "gen_ai.response.finish_reasons": '["length"]',
              **_latency(time_in_queue=0.1, time_in_model_prefill=0.2, time_in_model_decode=0.5,
                         time_to_first_token=0.3, e2e=0.85)}
    # 1. gateway [0, 1000 ms] -> client [10, 990] -> engine [40, 900]
    gw = tracer["gateway"].start_span("POST /v1/chat/completions", kind=SpanKind.SERVER, start_time=T0, attributes={
        "http.route": "/v1/chat/completions", "tenant.id": "acme", "llm.tier": "P0"})
    client = tracer["app"].start_span("chat m", kind=SpanKind.CLIENT, start_time=T0 + 10 * MS, context=set_span_in_context(gw),
                                      attributes={"gen_ai.operation.name": "chat", "enduser.id": "bob",
                                                  "gen_ai.usage.input_tokens": 95})
    tracer["vllm-chat"].start_span("llm_request", kind=SpanKind.SERVER, start_time=T0 + 40 * MS,
                                   context=set_span_in_context(client), attributes=engine).end(end_time=T0 + 900 * MS)
    client.end(end_time=T0 + 990 * MS)
    gw.end(end_time=T0 + 1000 * MS)
    # 2. the engine span alone: its caller's spans went elsewhere
    orphan = tracer["gateway"].start_span("lost", start_time=T0)
    tracer["vllm-chat"].start_span("llm_request", kind=SpanKind.SERVER, start_time=T0 + 5 * MS,
                                   context=set_span_in_context(orphan), attributes=engine).end(end_time=T0 + 860 * MS)
    # 3. root without tenant; the tenant on a sibling span (an auth check)
    root = tracer["gateway"].start_span("POST /v1/chat/completions", kind=SpanKind.SERVER, start_time=T0)
    ctx = set_span_in_context(root)
    tracer["gateway"].start_span("auth", start_time=T0, context=ctx, attributes={"tenant.id": "carol"}).end(
        end_time=T0 + MS)
    tracer["vllm-chat"].start_span("llm_request", kind=SpanKind.SERVER, start_time=T0 + 2 * MS, context=ctx,
                                   attributes=engine).end(end_time=T0 + 870 * MS)
    root.end(end_time=T0 + 880 * MS)
    return [s for s in mem.get_finished_spans() if s.name != "lost"]


def test_llm_request_at_any_depth_takes_its_context_from_the_nearest_span(tmp_path):
    spans = _nested_spans()
    f = tmp_path / "traces.binpb"
    f.write_bytes(encode_spans(spans).SerializeToString())
    con = connect(tmp_path / "db.duckdb")
    s = ingest(con, [f])
    assert s.requests == 3 and s.quarantined == 0 and s.retried == 0
    assert s.ignored_reasons == {"context: spans of other services in a request's trace": 4}
    rows = con.execute("SELECT tenant, tier, route, deployment, model, input_tokens, output_tokens, finish_reason, "
                       "outcome, round(gateway_s, 9), queue_s, prefill_s, decode_s, round(send_s, 9), round(e2e_s, 9), "
                       "round(ttft_s, 9), round(other_s, 9) FROM requests ORDER BY e2e_s DESC").fetchall()
    assert rows == [
        # nearest wins: the client span's enduser.id over the gateway's tenant.id; the engine's own token counts
        # (old names) over the client's; gateway and send time from the enclosing SERVER span; E2E is the gateway's
        ("bob", "P0", "/v1/chat/completions", "vllm-chat", "m", 90, 11, "length", "ok", 0.04, 0.1, 0.2, 0.5, 0.1, 1.0,
         0.34, 0.06),
        # the tenant of a span that is not an ancestor, when no ancestor has one
        ("carol", "unknown", "unknown", "vllm-chat", "m", 90, 11, "length", "ok", 0.002, 0.1, 0.2, 0.5, 0.01, 0.88,
         0.302, 0.068),
        # no caller spans: the engine span's own view (no gateway or send time), E2E from gen_ai.latency.e2e
        ("unknown", "unknown", "unknown", "vllm-chat", "m", 90, 11, "length", "ok", None, 0.1, 0.2, 0.5, None, 0.85,
         0.3, 0.05),
    ]


def test_retries_are_one_request_per_engine_call_sharing_out_the_gateway_span(tmp_path):
    t = "f" * 32
    engine = {"llm.deployment": "chat"}
    f = tmp_path / "retry.jsonl"
    f.write_text(_doc(
        _span(t, "1" * 16, "POST /v1/chat/completions", T0, T0 + 1000 * MS, attrs={
            "enduser.id": "bob", "tenant.id": "acme", "http.route": "/v1/chat/completions", "llm.route": "chat"}),
        _span(t, "2" * 16, "llm_request", T0 + 100 * MS, T0 + 300 * MS, parent="1" * 16, attrs=engine),
        _span(t, "3" * 16, "llm_request", T0 + 400 * MS, T0 + 900 * MS, parent="1" * 16, attrs=engine),
    ) + "\n")
    con = connect(tmp_path / "db.duckdb")
    s = ingest(con, [f])
    assert s.requests == 2 and s.retried == 1
    rows = con.execute("SELECT trace_id, retries, tenant, route, round(gateway_s, 9), round(send_s, 9), "
                       "round(e2e_s, 9), start_ns - ? FROM requests ORDER BY retries", [T0]).fetchall()
    # within a span: tenant.id before enduser.id, llm.route before http.route
    assert rows == [(t, 0, "acme", "chat", 0.1, 0.0, 0.3, 0), (t, 1, "acme", "chat", 0.1, 0.1, 0.7, 300 * MS)]
    assert ingest(con, [f]).duplicates == 2


def _bad_line(**change):
    span = _span("9" * 32, "5" * 16, "llm_request", T0, T0 + MS, attrs={"llm.deployment": "chat"})
    span.update(change)
    return _doc(span)


def test_one_bad_span_never_loses_its_file(tmp_path):
    good = _span("a" * 32, "1" * 16, "llm_request", T0, T0 + 10**9, attrs={"llm.deployment": "chat"})
    lines = [
        _doc(good, dict(good, spanId="2" * 16, kind=1000), dict(good, traceId="zz")),  # 1 good, 2 bad
        _bad_line(startTimeUnixNano=str(2**63 + 5)),
        _bad_line(status={"code": 300}),
        _bad_line(attributes=[{"key": 5, "value": {"stringValue": "x"}}]),
        _bad_line(name="llm_request\ud800"),  # a lone surrogate
        _doc(_span("b" * 32, "3" * 16, "llm_request", T0, T0 + 10**9, attrs={"llm.deployment": "chat"})),
    ]
    f = tmp_path / "traces.jsonl"
    f.write_text("\n".join(lines) + "\n")
    con = connect(tmp_path / "db.duckdb")
    s = ingest(con, [f])
    assert s.requests == 2 and s.quarantined == 6 and list(s.reasons) == ["malformed OTLP payload"]
    details = sorted(d for (d,) in con.execute("SELECT detail FROM quarantine").fetchall())
    expect = [(":1:", "spans[1]: kind 1000"), (":1:", "spans[2].traceId"), (":2:", "startTimeUnixNano"),
              (":3:", "status.code 300"), (":4:", "attribute key 5"), (":5:", "surrogate")]
    for where, what in expect:
        assert any(f"traces.jsonl{where}" in d and what in d for d in details), (where, what, details)
    # one pretty-printed document: the same
    (tmp_path / "one.json").write_text(json.dumps(json.loads(lines[0]), indent=2))
    s = ingest(connect(tmp_path / "one.duckdb"), [tmp_path / "one.json"])
    assert s.requests == 1 and s.quarantined == 2


@pytest.mark.parametrize("framing", ["bare", "length-prefixed"])
def test_one_bad_protobuf_span_is_quarantined_alone(tmp_path, framing):
    msg = encode_spans(_sdk_spans())
    spans = msg.resource_spans[0].scope_spans[0].spans
    bad = spans.add()
    bad.CopyFrom(spans[0])
    bad.trace_id = b"\x01\x02\x03"
    odd = spans.add()
    odd.CopyFrom(spans[1])
    odd.kind = 1000
    body = msg.SerializeToString()
    f = tmp_path / "traces.binpb"
    f.write_bytes(body if framing == "bare" else struct.pack(">I", len(body)) + body)
    con = connect(tmp_path / "db.duckdb")
    s = ingest(con, [f])
    assert s.requests == 1 and s.quarantined == 2
    details = " | ".join(d for (d,) in con.execute("SELECT detail FROM quarantine").fetchall())
    assert "trace_id must be 16 bytes" in details and "kind 1000" in details


def test_a_directory_is_read_file_by_file(run, tmp_path):
    con = connect(tmp_path / "db.duckdb")
    s = ingest(con, [run])  # requests.parquet, spans.otlp.jsonl and releases.yaml (not a trace format)
    n = pq.read_metadata(run / "requests.parquet").num_rows
    assert (s.files, s.skipped_files, s.requests, s.duplicates) == (2, 1, n, n)
