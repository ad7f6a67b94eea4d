"""Production traces end to end: a client instrumented with the OpenTelemetry SDK (a gateway SERVER span, a GenAI
client span, an HTTP call carrying `traceparent`) calls the live fleet, which continues the trace in goodput's
span shape, vLLM's, or both; each ingests to the same per-request decomposition."""

import copy
import json
import time

import httpx
import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from goodput.analyzer.ingest import ingest
from goodput.analyzer.store import connect
from goodput.simulator.live import LiveFleet
from goodput.simulator.span_sink import SpanSink
from tests.conftest import BASE_DEPLOYMENT, BASE_WORKLOAD, free_port_block, make_fleet

MODEL = "Llama-3.1-8B"
COLUMNS = ("gateway_s", "queue_s", "prefill_s", "decode_s", "send_s", "other_s", "e2e_s", "ttft_s")
PAUSE_S = 0.02  # the gateway's own work before and after the engine call


def _gateway_call(tracer, client: httpx.Client, url: str, attempts: int) -> None:
    """One user request through the gateway: a SERVER span, a GenAI client span, `attempts` HTTP calls to the
    engine (the first ones as if they had failed and were retried), each carrying the trace context."""
    with tracer.start_as_current_span("POST /v1/chat/completions", kind=SpanKind.SERVER, attributes={
            "http.request.method": "POST", "http.route": "/v1/chat/completions", "tenant.id": "acme",
            "llm.tier": "P0", "llm.route": "chat"}):
        time.sleep(PAUSE_S)
        with tracer.start_as_current_span(f"chat {MODEL}", kind=SpanKind.CLIENT, attributes={
                "gen_ai.operation.name": "chat", "gen_ai.provider.name": "vllm", "gen_ai.request.model": MODEL}) as chat:
            for _ in range(attempts):
                headers = {"x-tenant": "acme", "x-tier": "P0", "x-route": "chat"}
                TraceContextTextMapPropagator().inject(headers)
                r = client.post(url, headers=headers, json={"model": MODEL, "max_tokens": 16,
                                                            "messages": [{"role": "user", "content": "hi " * 200}]})
                assert r.status_code == 200, r.text
            usage = r.json()["usage"]
            chat.set_attributes({"gen_ai.usage.input_tokens": usage["prompt_tokens"],
                                 "gen_ai.usage.output_tokens": usage["completion_tokens"]})
        time.sleep(PAUSE_S)


def _split(path, keep) -> list[str]:
    """The spans file's documents with only the resource blocks `keep(service name)` accepts."""
    out = []
    for line in path.read_text().splitlines():
        doc = json.loads(line)
        doc["resourceSpans"] = [rs for rs in doc["resourceSpans"] if keep(
            next(a["value"]["stringValue"] for a in rs["resource"]["attributes"] if a["key"] == "service.name"))]
        out.append(json.dumps(doc))
    return out


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    """Five user requests (one retried once) against the live fleet emitting both span shapes; the client's spans
    exported by the SDK's own OTLP encoder."""
    tmp = tmp_path_factory.mktemp("traced")
    dep = copy.deepcopy(BASE_DEPLOYMENT)
    dep["replicas"] = 1
    cfg = make_fleet(deployments=[dep], workloads=[copy.deepcopy(BASE_WORKLOAD)])
    base = free_port_block(2)
    sink = SpanSink(cfg, 1, None, tmp / "fleet.jsonl", interval_s=0.2, span_format="both")
    fleet = LiveFleet(cfg, base_port=base, traffic=0.0, sink=sink)
    mem = InMemorySpanExporter()
    tp = TracerProvider(resource=Resource.create({"service.name": "gateway"}))
    tp.add_span_processor(SimpleSpanProcessor(mem))
    tracer = tp.get_tracer("tests.production_traces")
    fleet.start()
    try:
        with httpx.Client(timeout=30) as client:
            url = f"http://127.0.0.1:{base}/v1/chat/completions"
            for attempts in (1, 1, 2, 1):
                _gateway_call(tracer, client, url, attempts)
    finally:
        fleet.close()
    tp.force_flush()
    (tmp / "client.binpb").write_bytes(encode_spans(mem.get_finished_spans()).SerializeToString())
    (tmp / "goodput.jsonl").write_text("\n".join(_split(tmp / "fleet.jsonl", lambda s: s == "goodput-fleet")) + "\n")
    (tmp / "vllm.jsonl").write_text("\n".join(_split(tmp / "fleet.jsonl", lambda s: s != "goodput-fleet")) + "\n")
    return tmp, mem.get_finished_spans()


def _requests(con):
    df = con.execute("SELECT * FROM requests ORDER BY start_ns").fetchdf()
    return df.set_index(["trace_id", "retries"])


@pytest.mark.parametrize("fleet_file", ["goodput.jsonl", "vllm.jsonl", "fleet.jsonl"])
def test_a_gateway_genai_vllm_trace_is_one_request_per_engine_call(traced, tmp_path, fleet_file):
    tmp, client_spans = traced
    con = connect(tmp_path / "db.duckdb")
    s = ingest(con, [tmp / "client.binpb", tmp / fleet_file])
    assert s.requests == 5 and s.retried == 1 and s.quarantined == 0, s
    assert s.ignored_reasons["context: spans of other services in a request's trace"] == len(client_spans) == 8
    got = _requests(con)
    assert set(got["tenant"]) == {"acme"} and set(got["route"]) == {"chat"} and set(got["tier"]) == {"P0"}
    assert set(got["deployment"]) == {"chat"} and set(got["replica"]) == {"chat-0"} and set(got["model"]) == {MODEL}
    gateways = {f"{sp.context.trace_id:032x}": sp for sp in client_spans if sp.kind == SpanKind.SERVER}
    assert set(got.index.get_level_values(0)) == set(gateways)
    for trace, g in gateways.items():
        calls = got.loc[trace]
        # the gateway span is shared out among its engine calls: together they cover it exactly
        assert calls["start_ns"].iloc[0] == g.start_time and calls["end_ns"].iloc[-1] == g.end_time
        assert calls["e2e_s"].sum() == pytest.approx((g.end_time - g.start_time) / 1e9, abs=1e-9)
        # the gateway's work before and after the engine is gateway and send time
        assert calls["gateway_s"].iloc[0] >= PAUSE_S - 0.005 and calls["send_s"].iloc[-1] >= PAUSE_S - 0.005
    assert (got["other_s"].abs() < 1e-6).all()  # the segments tile each request
    assert got["output_tokens"].between(1, 16).all() and (got["input_tokens"] > 100).all()


def test_both_span_formats_give_the_same_decomposition(traced, tmp_path):
    tmp, _ = traced
    frames = []
    for name in ("goodput.jsonl", "vllm.jsonl", "fleet.jsonl"):
        con = connect(tmp_path / f"{name}.duckdb")
        ingest(con, [tmp / "client.binpb", tmp / name])
        frames.append(_requests(con))
    ours, vllm, both = frames
    assert list(ours.index) == list(vllm.index) == list(both.index)
    for col in COLUMNS:
        assert (ours[col] - vllm[col]).abs().max() < 1e-3, col
        assert (ours[col] - both[col]).abs().max() < 1e-9, col
    for col in ("request_id", "tenant", "tier", "route", "deployment", "replica", "model", "input_tokens",
                "output_tokens", "finish_reason", "outcome"):
        assert list(ours[col]) == list(vllm[col]), col


def test_the_fleet_continues_the_callers_trace(traced):
    tmp, client_spans = traced
    chats = {f"{sp.context.span_id:016x}": f"{sp.context.trace_id:032x}" for sp in client_spans
             if sp.kind == SpanKind.CLIENT}
    tops = [sp for line in (tmp / "fleet.jsonl").read_text().splitlines()
            for rs in json.loads(line)["resourceSpans"] for ss in rs["scopeSpans"] for sp in ss["spans"]
            if sp["name"] in ("llm.request", "llm_request")]
    assert len(tops) == 10  # five engine calls, each in both shapes
    assert all(chats[sp["parentSpanId"]] == sp["traceId"] for sp in tops)

