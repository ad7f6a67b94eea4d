"""The request exporter: real OTLP encodings over real sockets, into metrics and a Parquet store."""

import copy
import json
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import duckdb
import httpx
import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import SpanKind
from prometheus_client.parser import text_string_to_metric_families

from exporters.requests import RequestMetrics, TraceReceiver
from exporters.trace_store import TraceStore
from goodput.foundation.http import Server
from simulator.records import RequestTable
from simulator.run import simulate
from simulator.spans import span_documents
from tests.conftest import BASE_WORKLOAD, REPO, free_port_block, make_fleet


class Exporter:
    def __init__(self, root, **store_kw):
        self.metrics = RequestMetrics(max_tenants=store_kw.pop("max_tenants", 50))
        self.store = TraceStore(root, **store_kw).start()
        recv = TraceReceiver(self.metrics, self.store)
        self.otlp = Server("127.0.0.1", 0, {("POST", "/v1/traces"): recv.route}).start()
        self.url = f"{self.otlp.url}/v1/traces"

    def families(self):
        return {f.name: f for f in text_string_to_metric_families(self.metrics.render(self.store))}

    def close(self):
        self.otlp.stop()
        self.store.close()


@pytest.fixture(scope="module")
def sim():
    wl = copy.deepcopy(BASE_WORKLOAD)
    wl["tenants"] = {"acme": 0.5, "globex": 0.3, "initech": 0.15, "umbrella": 0.05}
    cfg = make_fleet(workloads=[wl])
    res = simulate(cfg, 120.0)
    return res.table


def _docs(table):
    return list(span_documents(table))


def _store_ids(root):
    return duckdb.sql(f"SELECT DISTINCT trace_id, span_id FROM read_parquet('{root}/**/*.parquet', "
                      "hive_partitioning=true)").fetchall()


def test_json_spans_become_per_tenant_metrics_and_stored_spans(tmp_path, sim):
    ex = Exporter(tmp_path / "store")
    try:
        for doc in _docs(sim):
            r = httpx.post(ex.url, content=doc, headers={"Content-Type": "application/json"})
            assert r.status_code == 200 and r.json() == {}
        f = ex.families()
        reqs = {s.labels["tenant"]: s.value for s in f["llm_gateway_requests"].samples
                if s.name.endswith("_total") and s.labels["outcome"] == "ok"}
        expected = {t: sum(1 for i in range(sim.n) if sim.tenant[i] == t and sim.outcome[i] == "ok") for t in reqs}
        assert reqs == expected and set(reqs) == {"acme", "globex", "initech", "umbrella"}
        tokens = sum(s.value for s in f["llm_gateway_output_tokens"].samples if s.name.endswith("_total"))
        assert tokens == int(sim.output_tokens.sum())
        ttft = f["llm_gateway_time_to_first_token_seconds"].samples
        les = {s.labels["le"] for s in ttft if s.name.endswith("_bucket")}
        assert {"0.2", "0.5", "1.0", "2.0"} <= les  # SLO thresholds are bucket boundaries
        count = [s.value for s in ttft if s.name.endswith("_count")][0]
        assert count == sum(1 for o in sim.outcome if o == "ok")
        labels = ttft[0].labels
        assert set(labels) - {"le"} == {"deployment", "tier", "route"}
    finally:
        ex.close()
    n_spans = sum(len(json.loads(d)["resourceSpans"][0]["scopeSpans"][0]["spans"]) for d in _docs(sim))
    assert len(_store_ids(tmp_path / "store")) == n_spans
    assert list((tmp_path / "store").glob("date=2026-11-23/hour=09/*.parquet"))
    assert not list((tmp_path / "store" / "_wal").iterdir())


def test_official_otel_sdk_exporter_protobuf(tmp_path):
    ex = Exporter(tmp_path / "store")
    try:
        tp = TracerProvider(resource=Resource.create({"service.name": "gateway"}))
        tp.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=ex.url)))
        tr = tp.get_tracer("test")
        t0 = time.time_ns()
        root = tr.start_span("llm.request", kind=SpanKind.SERVER, start_time=t0, attributes={
            "gen_ai.request.model": "Llama-3.1-8B", "llm.tenant": "sdk-tenant", "llm.tier": "P0", "llm.route": "chat",
            "llm.deployment": "chat", "llm.outcome": "ok", "gen_ai.usage.input_tokens": 100,
            "gen_ai.usage.output_tokens": 11})
        ctx = __import__("opentelemetry.trace", fromlist=["set_span_in_context"]).set_span_in_context(root)
        bounds = [t0, t0 + 2_000_000, t0 + 50_000_000, t0 + 300_000_000, t0 + 800_000_000, t0 + 801_000_000]
        names = ["llm.gateway", "llm.queue", "llm.prefill", "llm.decode", "llm.send"]
        for name, a, b in zip(names, bounds, bounds[1:], strict=False):
            tr.start_span(name, context=ctx, start_time=a).end(end_time=b)
        root.end(end_time=bounds[-1])
        tp.shutdown()
        f = ex.families()
        ok = [s for s in f["llm_gateway_requests"].samples if s.name.endswith("_total")]
        assert [(s.labels["tenant"], s.value) for s in ok] == [("sdk-tenant", 1.0)]
        ttft = {s.name: s.value for s in f["llm_gateway_time_to_first_token_seconds"].samples if "le" not in s.labels}
        assert ttft["llm_gateway_time_to_first_token_seconds_sum"] == pytest.approx(0.3)
        tpot = {s.name: s.value for s in f["llm_gateway_time_per_output_token_seconds"].samples if "le" not in s.labels}
        assert tpot["llm_gateway_time_per_output_token_seconds_sum"] == pytest.approx((0.801 - 0.3) / 10)
    finally:
        ex.close()
    assert len(_store_ids(tmp_path / "store")) == 6


def test_malformed_payloads_get_400_and_are_counted(tmp_path):
    ex = Exporter(tmp_path / "store")
    try:
        bad = [(b"{not json", "application/json"), (b'{"resourceSpans": 5}', "application/json"),
               (json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "xyz", "spanId": "00"}]}]}]}).encode(),
                "application/json"),
               (b"\x0a\xff\xff\xff\xff\x0f", "application/x-protobuf")]
        for body, ctype in bad:
            r = httpx.post(ex.url, content=body, headers={"Content-Type": ctype})
            assert r.status_code == 400, body
            assert "bad OTLP payload" in r.json()["error"]
        f = ex.families()
        assert [s.value for s in f["llm_exporter_otlp_rejected"].samples if s.name.endswith("_total")] == [4.0]
    finally:
        ex.close()


def test_duplicate_spans_are_not_counted_twice(tmp_path, sim):
    ex = Exporter(tmp_path / "store")
    try:
        doc = _docs(sim)[0]
        for _ in range(3):
            assert httpx.post(ex.url, content=doc, headers={"Content-Type": "application/json"}).status_code == 200
        f = ex.families()
        total = sum(s.value for s in f["llm_gateway_requests"].samples if s.name.endswith("_total"))
        assert total == 256
        dup = [s.value for s in f["llm_exporter_spans_duplicate"].samples if s.name.endswith("_total")][0]
        assert dup == 2 * len(json.loads(doc)["resourceSpans"][0]["scopeSpans"][0]["spans"])
    finally:
        ex.close()
    assert len(_store_ids(tmp_path / "store")) == len(json.loads(doc)["resourceSpans"][0]["scopeSpans"][0]["spans"])


def test_burst_beyond_the_buffer_gets_503_and_loses_nothing_acknowledged(tmp_path, sim):
    docs = _docs(sim)
    per_doc = max(len(json.loads(d)["resourceSpans"][0]["scopeSpans"][0]["spans"]) for d in docs)
    ex = Exporter(tmp_path / "store", max_buffered_spans=2 * per_doc, flush_interval_s=3.0)
    acked, statuses = set(), []
    lock = threading.Lock()

    def post(doc):
        r = httpx.post(ex.url, content=doc, headers={"Content-Type": "application/json"}, timeout=30)
        with lock:
            statuses.append(r.status_code)
        if r.status_code == 200:
            with lock:
                acked.update((s["traceId"], s["spanId"]) for s in json.loads(doc)["resourceSpans"][0]["scopeSpans"][0]["spans"])
            return True
        assert r.status_code == 503 and int(r.headers["Retry-After"]) >= 1
        return False

    def send_until_accepted(doc):
        while not post(doc):
            time.sleep(0.2)

    try:
        # the buffer holds two documents and nothing flushes for 3 s: the third is refused, not dropped
        assert [post(d) for d in docs[:3]] == [True, True, False]
        with ThreadPoolExecutor(6) as pool:  # then a burst of everyone retrying
            list(pool.map(send_until_accepted, docs[2:] * 2))
    finally:
        ex.close()
    assert statuses.count(503) >= 1
    stored = set(_store_ids(tmp_path / "store"))
    assert acked <= stored and len(stored) == sum(len(json.loads(d)["resourceSpans"][0]["scopeSpans"][0]["spans"])
                                                  for d in docs)


def test_cardinality_guard_keeps_the_top_tenants(tmp_path, sim):
    ex = Exporter(tmp_path / "store", max_tenants=2)
    try:
        for doc in _docs(sim):
            httpx.post(ex.url, content=doc, headers={"Content-Type": "application/json"})
        f = ex.families()
        tenants = {s.labels["tenant"] for s in f["llm_gateway_requests"].samples}
        assert tenants == {"acme", "globex", "other"}
        assert [s.value for s in f["llm_exporter_tenants_folded"].samples] == [2.0]
        total = sum(s.value for s in f["llm_gateway_requests"].samples if s.name.endswith("_total"))
        assert total == sim.n
    finally:
        ex.close()


def test_write_ahead_log_is_replayed_after_a_crash(tmp_path, sim):
    root = tmp_path / "store"
    store = TraceStore(root, flush_interval_s=3600)
    doc = _docs(sim)[0].encode()
    from exporters.otlp import decode_json
    store.accept(decode_json(doc), doc, "J")  # acknowledged, then the process dies before any flush
    del store
    again = TraceStore(root, flush_interval_s=3600)
    assert again.recovered == len(decode_json(doc))
    again.close()
    assert len(_store_ids(root)) == len(decode_json(doc))


def test_vllm_llm_request_span(tmp_path):
    ex = Exporter(tmp_path / "store")
    try:
        span = {"traceId": "ab" * 16, "spanId": "cd" * 8, "name": "llm_request", "kind": 2,
                "startTimeUnixNano": "1795424400000000000", "endTimeUnixNano": "1795424401000000000",
                "attributes": [{"key": "gen_ai.response.model", "value": {"stringValue": "m"}},
                               {"key": "gen_ai.usage.prompt_tokens", "value": {"intValue": "10"}},
                               {"key": "gen_ai.usage.completion_tokens", "value": {"intValue": "5"}},
                               {"key": "gen_ai.latency.time_in_queue", "value": {"doubleValue": 0.25}},
                               {"key": "gen_ai.latency.time_to_first_token", "value": {"doubleValue": 0.4}},
                               {"key": "gen_ai.latency.e2e", "value": {"doubleValue": 1.0}}]}
        doc = {"resourceSpans": [{"resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "vllm"}}]},
                                  "scopeSpans": [{"spans": [span]}]}]}
        assert httpx.post(ex.url, json=doc).status_code == 200
        f = ex.families()
        q = {s.name: s.value for s in f["llm_gateway_queue_wait_seconds"].samples if "le" not in s.labels}
        assert q["llm_gateway_queue_wait_seconds_sum"] == 0.25
        inp = [s for s in f["llm_gateway_input_tokens"].samples if s.name.endswith("_total")][0]
        assert inp.value == 10 and inp.labels["deployment"] == "vllm" and inp.labels["model"] == "m"
    finally:
        ex.close()


def test_cli_flushes_on_sigterm(tmp_path, sim):
    port, otlp = free_port_block(1), free_port_block(1)
    p = subprocess.Popen([sys.executable, "-m", "goodput", "exporter", "requests", "--store", str(tmp_path / "s"),
                          "--port", str(port), "--otlp-port", str(otlp), "--flush-interval", "3600"],
                         cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                httpx.get(f"http://127.0.0.1:{otlp}/healthz")
                break
            except httpx.HTTPError:
                time.sleep(0.1)
        doc = _docs(sim)[0]
        assert httpx.post(f"http://127.0.0.1:{otlp}/v1/traces", content=doc,
                          headers={"Content-Type": "application/json"}).status_code == 200
        m = httpx.get(f"http://127.0.0.1:{port}/metrics").text
        assert "llm_gateway_requests_total" in m
    finally:
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=30)
    assert p.returncode == 0, err
    assert "stopped" in out
    n = len(json.loads(doc)["resourceSpans"][0]["scopeSpans"][0]["spans"])
    assert len(_store_ids(tmp_path / "s")) == n
    assert not list((tmp_path / "s" / "_wal").iterdir())


def test_request_table_spans_carry_the_span_model(sim):
    first = json.loads(_docs(sim)[0])["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    keys = {a["key"] for a in first["attributes"]}
    assert {"gen_ai.operation.name", "gen_ai.request.model", "gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens",
            "llm.tenant", "llm.tier", "llm.route", "llm.scene", "llm.deployment", "llm.replica", "llm.outcome",
            "llm.cached_tokens", "llm.preemptions"} <= keys
    assert isinstance(sim, RequestTable)
