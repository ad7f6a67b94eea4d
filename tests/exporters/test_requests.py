"""The request exporter: real OTLP encodings over real sockets, into metrics and a Parquet store."""

import copy
import dataclasses
import json
import math
import signal
import struct
import subprocess
import sys
import threading
import time
import zlib
from concurrent.futures import ThreadPoolExecutor

import duckdb
import httpx
import numpy as np
import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import SpanKind
from prometheus_client.parser import text_string_to_metric_families

from goodput.contracts.catalog import TOKEN_BUCKETS
from goodput.exporters.otlp import Span, decode_json
from goodput.exporters.requests import LABEL_LIMITS, MAX_LABEL_CHARS, RequestMetrics, TraceReceiver
from goodput.exporters.trace_store import TraceStore
from goodput.foundation.histogram import le_label
from goodput.foundation.http import Server
from goodput.simulator.records import RequestTable
from goodput.simulator.run import simulate
from goodput.simulator.spans import span_documents
from tests.conftest import BASE_DEPLOYMENT, BASE_WORKLOAD, REPO, free_port_block, make_fleet, wait_answering


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
    # the busiest tenants come last in the alphabet, so a guard that ranks by name cannot pass
    wl["tenants"] = {"acme": 0.05, "globex": 0.15, "initech": 0.3, "umbrella": 0.5}
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


def _token_buckets(families, name: str) -> dict[tuple[str, str, str], dict[str, float]]:
    """One token histogram as rendered: {(deployment, tier, route): {le: cumulative count}}."""
    out: dict[tuple[str, str, str], dict[str, float]] = {}
    for s in families[name].samples:
        if s.name.endswith("_bucket"):
            out.setdefault((s.labels["deployment"], s.labels["tier"], s.labels["route"]), {})[s.labels["le"]] = s.value
    return out


def _cumulative(values) -> dict[str, float]:
    """What a histogram with the catalog's token buckets holds after observing ``values`` (le: value <= bound)."""
    v = np.asarray(values, dtype=float)
    return {**{le_label(b): float((v <= b).sum()) for b in TOKEN_BUCKETS}, "+Inf": float(len(v))}


def test_each_requests_tokens_land_in_the_token_histograms(tmp_path, sim):
    """JSON spans of a simulated run: per deployment / tier / route, the buckets hold the admitted requests' input
    tokens and the completed ones' output tokens (the trace store's token mix; outcomes other than ok: below)."""
    ex = Exporter(tmp_path / "store")
    try:
        for doc in _docs(sim):
            assert httpx.post(ex.url, content=doc, headers={"Content-Type": "application/json"}).status_code == 200
        f = ex.families()
    finally:
        ex.close()
    streams = {(sim.deployment[i], sim.tier[i], sim.route[i]) for i in range(sim.n)}
    want_in = {k: _cumulative([sim.input_tokens[i] for i in range(sim.n) if (sim.deployment[i], sim.tier[i],
               sim.route[i]) == k and sim.outcome[i] != "rejected"]) for k in streams}
    want_out = {k: _cumulative([sim.output_tokens[i] for i in range(sim.n) if (sim.deployment[i], sim.tier[i],
                sim.route[i]) == k and sim.outcome[i] == "ok"]) for k in streams}
    assert _token_buckets(f, "llm_gateway_request_input_tokens") == want_in
    assert _token_buckets(f, "llm_gateway_request_output_tokens") == want_out
    assert f["llm_gateway_request_input_tokens"].type == "histogram" and len(streams) > 0


def test_token_histograms_over_protobuf_from_the_otel_sdk(tmp_path):
    """Root spans of the official SDK (OTLP protobuf): a bound is inclusive, past 128k is +Inf only, a rejected
    request's tokens are in no histogram and a timed-out one's only in the input histogram."""
    ex = Exporter(tmp_path / "store")
    try:
        tp = TracerProvider(resource=Resource.create({"service.name": "gateway"}))
        tp.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=ex.url)))
        tr = tp.get_tracer("test")
        requests = [(10, 1, "ok"), (16, 16, "ok"), (17, 33, "ok"), (100, 200, "ok"), (131072, 7, "ok"),
                    (200000, 5000, "ok"), (50, 0, "rejected"), (3000, 40, "timeout")]
        t0 = time.time_ns()
        for tin, tout, outcome in requests:
            tr.start_span("llm.request", kind=SpanKind.SERVER, start_time=t0, attributes={
                "llm.tenant": "a", "llm.tier": "P1", "llm.route": "rag", "llm.deployment": "rag-70b", "llm.outcome":
                outcome, "gen_ai.usage.input_tokens": tin, "gen_ai.usage.output_tokens": tout}).end(end_time=t0 + 10**9)
        tp.shutdown()
        f = ex.families()
    finally:
        ex.close()
    key = ("rag-70b", "P1", "rag")
    assert _token_buckets(f, "llm_gateway_request_input_tokens") == {
        key: _cumulative([10, 16, 17, 100, 131072, 200000, 3000])}
    assert _token_buckets(f, "llm_gateway_request_output_tokens") == {key: _cumulative([1, 16, 33, 200, 7, 5000])}
    got = {s.name: s.value for s in f["llm_gateway_request_input_tokens"].samples if "le" not in s.labels}
    assert got == {"llm_gateway_request_input_tokens_count": 7.0,
                   "llm_gateway_request_input_tokens_sum": float(10 + 16 + 17 + 100 + 131072 + 200000 + 3000)}
    assert _token_buckets(f, "llm_gateway_request_input_tokens")[key]["16.0"] == 2  # 10 and 16: le is inclusive


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
    # nothing flushes on a timer: the test flushes when a client is refused, so no outcome depends on timing
    ex = Exporter(tmp_path / "store", max_buffered_spans=2 * per_doc, flush_interval_s=3600)
    acked, statuses = set(), []
    lock = threading.Lock()
    refused, done = threading.Event(), threading.Event()

    def post(doc):
        r = httpx.post(ex.url, content=doc, headers={"Content-Type": "application/json"}, timeout=30)
        with lock:
            statuses.append(r.status_code)
        if r.status_code == 200:
            with lock:
                acked.update((s["traceId"], s["spanId"]) for s in json.loads(doc)["resourceSpans"][0]["scopeSpans"][0]["spans"])
            return True
        assert r.status_code == 503 and int(r.headers["Retry-After"]) >= 1
        refused.set()
        return False

    def send_until_accepted(doc):
        deadline = time.monotonic() + 120
        while not post(doc):
            assert time.monotonic() < deadline, "a refused payload was never accepted on retry"
            time.sleep(0.01)

    def flusher():
        while not done.is_set():
            if refused.wait(0.05):
                refused.clear()
                ex.store.flush()

    try:
        # the buffer holds two documents: the third is refused, not dropped
        assert [post(d) for d in docs[:3]] == [True, True, False]
        t = threading.Thread(target=flusher)
        t.start()
        try:
            with ThreadPoolExecutor(6) as pool:  # then a burst of everyone retrying
                list(pool.map(send_until_accepted, docs[2:] * 2))
        finally:
            done.set()
            t.join()
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
        assert tenants == {"umbrella", "initech", "other"}
        assert [s.value for s in f["llm_exporter_tenants_folded"].samples] == [2.0]
        total = sum(s.value for s in f["llm_gateway_requests"].samples if s.name.endswith("_total"))
        assert total == sim.n
    finally:
        ex.close()


def test_write_ahead_log_is_replayed_after_a_crash(tmp_path, sim):
    root = tmp_path / "store"
    store = TraceStore(root, flush_interval_s=3600)
    doc = _docs(sim)[0].encode()
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
        wait_answering(f"http://127.0.0.1:{otlp}/healthz", 20)
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


def _roots(tenant: str, n: int, seed: int = 0) -> list[Span]:
    """``n`` finished ``llm.request`` root spans of ``tenant`` with ids unique per (tenant, seed, i)."""
    t0 = 1795424400_000_000_000
    return [Span(f"{zlib.crc32(tenant.encode()):08x}{seed:08x}{i:016x}", f"{i + 1:016x}", "", "llm.request", 2, t0,
                 t0 + 10**9, 1, "", "gw", {"llm.tenant": tenant, "llm.outcome": "ok"}, {"service.name": "gw"})
            for i in range(n)]


def _tenant_totals(metrics: RequestMetrics) -> dict[str, float]:
    fams = {f.name: f for f in text_string_to_metric_families(metrics.render())}
    out: dict[str, float] = {}
    for s in fams["llm_gateway_requests"].samples:
        out[s.labels["tenant"]] = out.get(s.labels["tenant"], 0) + s.value
    return out


def test_cardinality_guard_follows_a_ranking_change():
    m = RequestMetrics(max_tenants=2)
    for tenant, n in (("zeta", 30), ("alpha", 5), ("mid", 20), ("beta", 3)):
        m.ingest(_roots(tenant, n))
    assert _tenant_totals(m) == {"zeta": 30, "mid": 20, "other": 8}
    m.ingest(_roots("beta", 40, seed=1))  # beta overtakes everyone: mid is folded now
    assert _tenant_totals(m) == {"beta": 43, "zeta": 30, "other": 25}


def test_labels_a_sender_invents_are_bounded_in_memory_not_only_at_render():
    m = RequestMetrics(max_tenants=5)
    limit = LABEL_LIMITS["tenant"]
    for i in range(limit + 40):  # a sender that makes up a tenant per request
        m.ingest(_roots(f"t{i:05d}", 1))
    m.ingest([dataclasses.replace(s, attributes={**s.attributes, "llm.tier": "P9", "llm.route": "r" * 5000})
              for s in _roots("t00000", 2, seed=1)])
    assert len(m.traffic) == limit + 1  # the kept tenants and "other"
    assert sum(_tenant_totals(m).values()) == limit + 42  # every request still counted
    fams = {f.name: f for f in text_string_to_metric_families(m.render())}
    overflow = {s.labels["label"]: s.value for s in fams["llm_exporter_label_overflow"].samples}
    assert overflow == {"model": 0, "deployment": 0, "tenant": 40, "route": 0, "reason": 0, "decision": 0, "step": 0}
    routes = {s.labels["route"] for s in fams["llm_gateway_requests"].samples}
    tiers = {s.labels["tier"] for s in fams["llm_gateway_requests"].samples}
    assert "r" * MAX_LABEL_CHARS in routes and not any(len(r) > MAX_LABEL_CHARS for r in routes)
    assert "P9" not in tiers and "unknown" in tiers
    token_routes = {s.labels["route"] for s in fams["llm_gateway_request_input_tokens"].samples}
    assert token_routes == routes  # the token histograms are keyed by the same bounded labels


def _wal_record(payload: bytes, kind: str = "J") -> bytes:
    return struct.pack(">IB", len(payload), ord(kind)) + payload


def _poison_doc() -> bytes:
    """A payload the old receiver acknowledged and whose span the Parquet writer cannot take (kind 1000)."""
    span = {"traceId": "ee" * 16, "spanId": "ff" * 8, "name": "llm.request", "kind": 1000,
            "startTimeUnixNano": "1795424400000000000", "endTimeUnixNano": "1795424401000000000"}
    return json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}).encode()


def test_a_record_that_fails_at_flush_is_quarantined_and_the_writer_lives_on(tmp_path):
    root = tmp_path / "store"
    store = TraceStore(root, flush_interval_s=3600).start()
    try:
        good = _roots("acme", 3)
        bad = Span("aa" * 16, "bb" * 8, "", "llm.request", 1000, 1795424400_000_000_000, 2**63 + 5, 1, "\ud800",
                   "gw", {5: "non-string key"}, {})
        store.accept(good[:2] + [bad] + good[2:], b"{}", "J")  # as if validation had let it through
        assert store.flush() == 3
        assert store.quarantined_total == 1 and store.health() is None
        fams = {f.name: f for f in text_string_to_metric_families(RequestMetrics().render(store))}
        assert [s.value for s in fams["llm_exporter_store_quarantined"].samples] == [1.0]
        store.accept(_roots("acme", 2, seed=1), b"{}", "J")
        assert store.flush() == 2
    finally:
        store.close()
    assert len(_store_ids(root)) == 5
    (q,) = (root / "_quarantine").glob("*.jsonl")
    rec = json.loads(q.read_text().splitlines()[0])
    assert rec["span"]["trace_id"] == "aa" * 16 and rec["span"]["kind"] == 1000 and rec["error"]


def test_a_poisoned_write_ahead_log_is_quarantined_at_restart(tmp_path, sim):
    root = tmp_path / "store"
    (root / "_wal").mkdir(parents=True)
    good = _docs(sim)[0].encode()
    (root / "_wal" / "segment-00000003.wal").write_bytes(
        _wal_record(good) + _wal_record(_poison_doc()) + _wal_record(b"\x0a\xff\xff", "P"))
    store = TraceStore(root, flush_interval_s=3600)  # the old code crashed here, on every restart
    store.close()
    assert store.recovered == len(decode_json(good)) and store.quarantined_total == 2
    assert len(_store_ids(root)) == len(decode_json(good))
    assert len(list((root / "_quarantine").iterdir())) == 2
    assert not list((root / "_wal").iterdir())


def test_healthz_reports_a_failing_writer_and_recovers(tmp_path, monkeypatch):
    from goodput.exporters import parquet_sink as trace_store

    metrics = RequestMetrics()
    store = TraceStore(tmp_path / "store", flush_interval_s=3600)
    recv = TraceReceiver(metrics, store)
    srv = Server("127.0.0.1", 0, recv.routes()).start()
    try:
        assert httpx.get(f"{srv.url}/healthz").status_code == 200
        real = trace_store.pq.write_table

        def disk_full(*a, **kw):
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(trace_store.pq, "write_table", disk_full)
        doc = _root_doc(_roots("acme", 4))
        assert httpx.post(f"{srv.url}/v1/traces", content=doc).status_code == 200
        assert store.flush() == 0
        r = httpx.get(f"{srv.url}/healthz")
        assert r.status_code == 503 and "No space left" in r.text
        monkeypatch.setattr(trace_store.pq, "write_table", real)
        assert store.flush() == 4
        assert httpx.get(f"{srv.url}/healthz").status_code == 200
        store.start()
        store._stop.set()  # the flush thread ends without close(): a dead worker is unhealthy
        store._thread.join(30)
        r = httpx.get(f"{srv.url}/healthz")
        assert r.status_code == 503 and "flush thread" in r.text
    finally:
        srv.stop()
        store.close()
    assert len(_store_ids(tmp_path / "store")) == 4


def _root_doc(spans: list[Span]) -> bytes:
    return json.dumps({"resourceSpans": [{"resource": {"attributes": [
        {"key": "service.name", "value": {"stringValue": "gw"}}]}, "scopeSpans": [{"spans": [
            {"traceId": s.trace_id, "spanId": s.span_id, "name": s.name, "kind": s.kind,
             "startTimeUnixNano": str(s.start_ns), "endTimeUnixNano": str(s.end_ns),
             "attributes": [{"key": k, "value": {"stringValue": v}} for k, v in s.attributes.items()]}
            for s in spans]}]}]}).encode()


def _start_cli(tmp_path, *extra: str) -> tuple[subprocess.Popen, int, int]:
    port, otlp = free_port_block(1), free_port_block(1)
    p = subprocess.Popen([sys.executable, "-m", "goodput", "exporter", "requests", "--store", str(tmp_path / "s"),
                          "--port", str(port), "--otlp-port", str(otlp), *extra],
                         cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(f"http://127.0.0.1:{otlp}/healthz").status_code == 200:
                return p, port, otlp
        except httpx.HTTPError:
            pass
        if p.poll() is not None or time.monotonic() > deadline:
            p.kill()
            pytest.fail(f"the request exporter did not come up: {p.communicate()}")
        time.sleep(0.1)


def test_sigterm_under_load_keeps_every_acknowledged_span(tmp_path):
    """8 keep-alive clients post until the exporter is gone; SIGTERM lands mid-load. Every span answered 2xx must be
    in the store; late posts get 503 with Retry-After (or a closed connection), never a 500."""
    p, port, otlp = _start_cli(tmp_path, "--flush-interval", "0.5", "--max-tenants", "1")
    url = f"http://127.0.0.1:{otlp}/v1/traces"
    acked: set[tuple[str, str]] = set()
    statuses: dict[int, int] = {}
    lock = threading.Lock()
    enough = threading.Event()

    def client(c: int) -> None:
        seq = 0
        with httpx.Client(timeout=60) as http:
            while True:
                spans = _roots("zeta" if c < 6 else "alpha", 10, seed=c * 1_000_000 + seq)
                seq += 1
                try:
                    r = http.post(url, content=_root_doc(spans), headers={"Content-Type": "application/json"})
                except httpx.HTTPError:
                    if p.poll() is not None:
                        return
                    continue
                with lock:
                    statuses[r.status_code] = statuses.get(r.status_code, 0) + 1
                    if 200 <= r.status_code < 300:
                        acked.update((s.trace_id, s.span_id) for s in spans)
                    if len(acked) >= 4000:
                        enough.set()
                if r.status_code == 503:
                    assert int(r.headers["Retry-After"]) >= 1

    m = ""
    with ThreadPoolExecutor(8) as pool:
        futures = [pool.submit(client, c) for c in range(8)]
        try:
            assert enough.wait(120), f"the load never got going: {statuses}"
            m = httpx.get(f"http://127.0.0.1:{port}/metrics").text
        finally:
            p.send_signal(signal.SIGTERM)
            out, err = p.communicate(timeout=120)
        for f in futures:
            f.result(timeout=120)
    assert p.returncode == 0, err
    assert "Traceback" not in err, err
    assert not {s for s in statuses if s >= 500 and s != 503}, statuses
    stored = set(_store_ids(tmp_path / "s"))
    lost = acked - stored
    assert not lost, f"{len(lost)} of {len(acked)} acknowledged spans are missing from the store ({statuses})"
    assert not list((tmp_path / "s" / "_wal").iterdir())
    # --max-tenants 1: zeta (six clients) keeps its label, alpha (two, but first in the alphabet) is folded
    tenants = {s.labels["tenant"] for f in text_string_to_metric_families(m) if f.name == "llm_gateway_requests"
               for s in f.samples}
    assert tenants == {"zeta", "other"}


def test_after_close_the_receiver_answers_503_and_nothing_reaches_a_deleted_log(tmp_path):
    root = tmp_path / "store"
    store = TraceStore(root, flush_interval_s=3600)
    recv = TraceReceiver(RequestMetrics(), store)
    assert recv.handle("application/json", "", _root_doc(_roots("acme", 2)))[0] == 200
    store.close()
    status, _, body, headers = recv.handle("application/json", "", _root_doc(_roots("acme", 2, seed=1)))
    assert (status, headers) == (503, {"Retry-After": "3600"}), body
    assert recv.metrics.rejected_payloads == {"shutting_down": 1}
    assert len(_store_ids(root)) == 2 and not list((root / "_wal").iterdir())


def test_non_finite_or_negative_latencies_never_poison_a_histogram(tmp_path):
    store = TraceStore(tmp_path / "store", flush_interval_s=3600)
    recv = TraceReceiver(RequestMetrics(), store)
    try:
        def span(i, queue, ttft, e2e, out_tokens="5"):
            return {"traceId": f"{i:032x}", "spanId": f"{i:016x}", "name": "llm_request", "kind": 2,
                    "startTimeUnixNano": "1795424400000000000", "endTimeUnixNano": "1795424401000000000",
                    "attributes": [{"key": "gen_ai.response.model", "value": {"stringValue": "m"}},
                                   {"key": "gen_ai.usage.completion_tokens", "value": {"intValue": out_tokens}},
                                   {"key": "gen_ai.latency.time_in_queue", "value": {"doubleValue": queue}},
                                   {"key": "gen_ai.latency.time_to_first_token", "value": {"doubleValue": ttft}},
                                   {"key": "gen_ai.latency.e2e", "value": {"doubleValue": e2e}}]}

        spans = [span(1, "NaN", "Infinity", "NaN"), span(2, -1.0, -0.5, "-Infinity", "-7"), span(3, 0.25, 0.4, 1.0)]
        body = json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}).encode()
        assert recv.handle("application/json", "", body)[0] == 200
        fams = {f.name: f for f in text_string_to_metric_families(recv.metrics.render(store))}
        for name in ("llm_gateway_queue_wait_seconds", "llm_gateway_time_to_first_token_seconds",
                     "llm_gateway_e2e_latency_seconds", "llm_gateway_time_per_output_token_seconds"):
            got = {s.name.removeprefix(name): s.value for s in fams[name].samples if "le" not in s.labels}
            want = {"queue": (1, 0.25), "time_to": (1, 0.4), "e2e": (1, 1.0), "time_per": (1, 0.6 / 4)}
            count, total = next(v for k, v in want.items() if k in name)
            assert got["_count"] == count and got["_sum"] == pytest.approx(total), (name, got)
        out = [s.value for s in fams["llm_gateway_output_tokens"].samples if s.name.endswith("_total")]
        assert out == [10.0]  # 5 + 5; the -7 tokens are not subtracted
    finally:
        store.close()


def test_the_cli_comes_up_over_a_poisoned_write_ahead_log(tmp_path, sim):
    wal = tmp_path / "s" / "_wal"
    wal.mkdir(parents=True)
    good = _docs(sim)[0].encode()
    (wal / "segment-00000000.wal").write_bytes(_wal_record(_poison_doc()) + _wal_record(good))
    p, port, _ = _start_cli(tmp_path)  # fails the test if the exporter does not come up healthy
    try:
        m = httpx.get(f"http://127.0.0.1:{port}/metrics").text
        assert "llm_exporter_store_quarantined_total{exporter=\"requests\"} 1.0" in m
    finally:
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    assert "quarantined 1" in out and "Traceback" not in err
    assert len(_store_ids(tmp_path / "s")) == len(decode_json(good))


# ---------------------------------------------------------------- arrivals, in flight, queued: spans as they end

LABEL_KEYS = ("gen_ai.request.model", "llm.deployment", "llm.tenant", "llm.tier", "llm.route", "llm.scene")


@pytest.fixture(scope="module")
def overload():
    """One replica of six sequences at 25 requests/s for 20 s: a queue that builds while requests arrive."""
    dep = copy.deepcopy(BASE_DEPLOYMENT)
    dep.update(replicas=1)
    dep["engine"].update(max_num_seqs=6, max_queue_time_s=3600)
    wl = copy.deepcopy(BASE_WORKLOAD)
    wl["arrival"]["rate"] = 25.0
    return simulate(make_fleet(deployments=[dep], workloads=[wl]), 20.0).table


def _as_they_end(table) -> tuple[list[Span], dict[str, Span]]:
    """Every span of ``table`` in the order a gateway exports them (each when it ends), the early ``llm.gateway``
    and ``llm.queue`` spans carrying their root's labels as the live fleet's do; and the roots by trace id."""
    spans = [s for doc in span_documents(table) for s in decode_json(doc)]
    roots = {s.trace_id: s for s in spans if not s.parent_span_id}
    out = []
    for s in spans:
        if s.name in ("llm.gateway", "llm.queue"):
            root = roots[s.trace_id]
            s = dataclasses.replace(s, attributes={k: root.attributes[k] for k in LABEL_KEYS if k in root.attributes})
        out.append(s)
    out.sort(key=lambda s: (s.end_ns, s.parent_span_id == ""))  # a root ends with its last segment: children first
    return out, roots


def _sample(fams, family: str, name: str | None = None, **labels) -> float:
    return sum(s.value for s in fams[family].samples if s.name == (name or family)
               and all(s.labels.get(k) == v for k, v in labels.items()))


def test_arrivals_in_flight_and_the_oldest_queued_are_known_before_the_requests_finish(overload):
    spans, roots = _as_they_end(overload)
    by_trace: dict[str, dict[str, Span]] = {}
    for s in spans:
        by_trace.setdefault(s.trace_id, {})[s.name] = s
    bound = 5.0  # a bucket bound the overload's queue passes

    def ttft(t):  # None: no first token (the exporter's reading of the segments)
        k = by_trace[t]
        return (k["llm.prefill"].end_ns - roots[t].start_ns) / 1e9 if "llm.prefill" in k and "llm.decode" in k else None

    def misses(t) -> bool:
        f, ok = ttft(t), roots[t].attributes.get("llm.outcome") == "ok"
        return (f is not None and f > bound) or (f is None and not ok)

    m = RequestMetrics()
    t0, checked, led = spans[0].end_ns, 0, 0
    cut = t0
    i = 0
    clocks: list[int] = []
    while i < len(spans):  # one-second batches of whatever ended, as the sink sends them
        cut += 10**9
        batch = []
        while i < len(spans) and spans[i].end_ns <= cut:
            batch.append(spans[i])
            i += 1
        m.ingest(batch)
        now = max(s.end_ns for s in spans[:i])
        admitted = [t for t, k in by_trace.items() if "llm.gateway" in k and k["llm.gateway"].end_ns <= now]
        done = {t for t in admitted if roots[t].end_ns <= now}
        waiting = [by_trace[t]["llm.gateway"].end_ns for t in admitted if t not in done and (
            "llm.queue" not in by_trace[t] or by_trace[t]["llm.queue"].end_ns > now)]
        scheduled = sum(1 for t in admitted if t not in done and "llm.prefill" in by_trace[t]
                        and by_trace[t]["llm.queue"].end_ns <= now) + sum(
            1 for t in done if "llm.prefill" in by_trace[t])
        clocks.append(now)

        def known(t, now=now) -> bool:  # its miss is known: it finished, or was scheduled or queued past the bound
            start, k = roots[t].start_ns, by_trace[t]
            if roots[t].end_ns <= now:
                return True
            if "llm.gateway" not in k or k["llm.gateway"].end_ns > now:
                return False
            qe = k["llm.queue"].end_ns if "llm.queue" in k else math.inf
            return (qe <= now and (qe - start) / 1e9 > bound) or any(
                k["llm.gateway"].end_ns <= c < qe and (c - start) / 1e9 > bound for c in clocks)

        expected_missed = sum(1 for t in by_trace if misses(t) and known(t))
        finished_missed = sum(1 for t in done | {t for t in roots if roots[t].end_ns <= now} if misses(t))
        fams = {f.name: f for f in text_string_to_metric_families(m.render())}
        missed = _sample(fams, "llm_gateway_ttft_missed", "llm_gateway_ttft_missed_total", le=le_label(bound))
        assert missed == expected_missed
        led += missed > finished_missed
        assert _sample(fams, "llm_gateway_requests_arrived", "llm_gateway_requests_arrived_total") == len(admitted)
        assert _sample(fams, "llm_gateway_requests_in_flight") == len(admitted) - len(done)
        age = _sample(fams, "llm_gateway_oldest_queued_age_seconds")
        assert age == pytest.approx((now - min(waiting)) / 1e9 if waiting else 0.0, abs=1e-6)
        queue_count = _sample(fams, "llm_gateway_queue_wait_seconds", "llm_gateway_queue_wait_seconds_count")
        assert queue_count == scheduled  # observed at scheduling, not at completion
        checked += bool(waiting) and age > 1.0 and len(admitted) > len(done) + 10
    assert checked >= 5  # the overload did build a queue the gauges saw
    assert led >= 5  # and TTFT misses were counted while the requests still waited, before any finished

    # every request counted once, early or with its root; the totals match the all-at-once path
    once = RequestMetrics()
    once.ingest(list(reversed(spans)))
    a = {f.name: f for f in text_string_to_metric_families(m.render())}
    b = {f.name: f for f in text_string_to_metric_families(once.render())}
    for fam, name in (("llm_gateway_requests_arrived", "llm_gateway_requests_arrived_total"),
                      ("llm_gateway_queue_wait_seconds", "llm_gateway_queue_wait_seconds_count"),
                      ("llm_gateway_queue_wait_seconds", "llm_gateway_queue_wait_seconds_sum"),
                      ("llm_gateway_requests", "llm_gateway_requests_total"),
                      ("llm_gateway_ttft_missed", "llm_gateway_ttft_missed_total")):
        assert _sample(a, fam, name) == pytest.approx(_sample(b, fam, name)), name
    assert _sample(a, "llm_gateway_ttft_missed", "llm_gateway_ttft_missed_total", le=le_label(bound)) == sum(
        1 for t in roots if misses(t))
    assert _sample(a, "llm_gateway_requests_arrived", "llm_gateway_requests_arrived_total") == overload.n
    assert _sample(a, "llm_gateway_requests_in_flight") == 0 and not m.flights and not m.children


def test_a_gateway_span_without_labels_is_counted_with_its_root_and_flights_are_capped():
    t0 = 1795424400_000_000_000
    root = Span("ab" * 16, "0000000000000001", "", "llm.request", 2, t0, t0 + 5 * 10**9, 1, "", "gw",
                {"llm.deployment": "chat", "llm.tier": "P0", "llm.route": "chat", "llm.outcome": "ok"}, {})
    bare = Span(root.trace_id, "0000000000000002", root.span_id, "llm.gateway", 1, t0, t0 + 10**7, 0, "", "gw", {}, {})
    m = RequestMetrics()
    m.ingest([bare])
    fams = {f.name: f for f in text_string_to_metric_families(m.render())}
    assert "llm_gateway_requests_arrived" not in fams or not fams["llm_gateway_requests_arrived"].samples
    m.ingest([root])
    fams = {f.name: f for f in text_string_to_metric_families(m.render())}
    assert _sample(fams, "llm_gateway_requests_arrived", "llm_gateway_requests_arrived_total") == 1

    capped = RequestMetrics()
    capped.max_pending_traces = 10
    labelled = dataclasses.replace(bare, attributes=dict(root.attributes))
    capped.ingest([dataclasses.replace(labelled, trace_id=f"{i:032x}") for i in range(25)])
    assert len(capped.flights) == 10 and sum(capped.in_flight.values()) == 10
    assert sum(len(q) for q in capped.queued.values()) == 10


FLOOD = REPO / "examples" / "tenant_flood.yaml"


def test_the_gateways_decisions_and_reasons_from_a_simulated_tenant_flood(tmp_path):
    """``goodput simulate`` of the tenant flood, its OTLP file posted line by line to the receiver: every request's
    admission decision is counted per tenant, the refused ones under the gateway's own reason (tpm_limit) and only
    for the flooding tenant, and the gateway's wait is observed once per request it held."""
    out = tmp_path / "sim"
    r = subprocess.run([sys.executable, "-m", "goodput", "simulate", str(FLOOD), "--duration", "30", "--out", str(out),
                        "--format", "json"], capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)["gateway"]
    rows = duckdb.sql(f"SELECT tenant, outcome, reject_reason FROM read_parquet('{out}/requests.parquet')").fetchall()
    ex = Exporter(tmp_path / "store")
    try:
        for line in (out / "spans.otlp.jsonl").read_text().splitlines():
            assert httpx.post(ex.url, content=line, headers={"Content-Type": "application/json"}).status_code == 200
        f = ex.families()
    finally:
        ex.close()
    decisions: dict[tuple[str, str], float] = {}
    for s in f["llm_gateway_admissions"].samples:
        assert s.labels["tier"] == "P0" and s.labels["route"] == "chat" and s.labels["deployment"] == "chat"
        key = (s.labels["tenant"], s.labels["decision"])
        decisions[key] = decisions.get(key, 0) + s.value
    expected: dict[tuple[str, str], float] = {}
    for tenant, outcome, _ in rows:
        key = (tenant, "rejected" if outcome == "rejected" else "admitted")
        expected[key] = expected.get(key, 0) + 1
    assert decisions == expected
    assert sum(v for (_, d), v in decisions.items() if d == "admitted") == summary["admission"]["admitted"]
    rejections = {(s.labels["tenant"], s.labels["reason"]): s.value for s in f["llm_gateway_rejections"].samples}
    assert rejections == {("flood", "tpm_limit"): summary["reject_reasons"]["tpm_limit"]}
    assert {t for t, _ in decisions} == {"a", "b", "c", "flood"}
    wait = {s.name: s.value for s in f["llm_gateway_admission_wait_seconds"].samples if not s.name.endswith("_bucket")}
    assert wait["llm_gateway_admission_wait_seconds_count"] == summary["admission"]["admitted"]  # refused: never held


def test_admission_decisions_a_sender_invents_are_bounded():
    m = RequestMetrics()
    spans = _roots("acme", LABEL_LIMITS["decision"] + 5)
    gateways = [dataclasses.replace(s, span_id=f"{int(s.span_id, 16) + 1000:016x}", parent_span_id=s.span_id,
                                    name="llm.gateway", attributes={"llm.admission": f"d{i}", "llm.gateway_wait_s": 0.3})
                for i, s in enumerate(spans)]
    m.ingest(gateways + spans)
    fams = {f.name: f for f in text_string_to_metric_families(m.render())}
    decisions = {s.labels["decision"]: s.value for s in fams["llm_gateway_admissions"].samples}
    assert len(decisions) == LABEL_LIMITS["decision"] + 1 and decisions["other"] == 5
    overflow = {s.labels["label"]: s.value for s in fams["llm_exporter_label_overflow"].samples}
    assert overflow["decision"] == 5
    buckets = {s.labels["le"]: s.value for s in fams["llm_gateway_admission_wait_seconds"].samples
               if s.name.endswith("_bucket")}
    assert buckets["0.25"] == 0 and buckets["0.3"] == len(spans)


def test_queued_and_deferred_decisions_are_counted_from_gateway_spans_that_end_before_their_roots():
    """A gateway that holds P0 in its queue and defers P2 behind it; spans ingested as they end (the live shape,
    each ``llm.gateway`` span long before its root): each request's decision is counted once, at its gateway span,
    and the wait there lands in the histogram as the table has it."""
    dep = copy.deepcopy(BASE_DEPLOYMENT)
    dep["replicas"] = 1
    p2 = {**copy.deepcopy(BASE_WORKLOAD), "name": "batch", "tier": "P2",
          "arrival": {"process": "batch", "batches": [{"at": 5, "count": 200}]}}
    wl = copy.deepcopy(BASE_WORKLOAD)
    wl["arrival"] = {"process": "poisson", "rate": 12.0}
    gateway = {"max_in_flight_per_replica": 8, "tiers": {"P2": {"max_share": 0.25}}}
    table = simulate(make_fleet(deployments=[dep], workloads=[wl, p2], gateway=gateway), 30.0).table
    expected: dict[tuple[str, str], int] = {}
    for tier, decision in zip(table.tier, table.admission, strict=True):
        expected[(tier, decision)] = expected.get((tier, decision), 0) + 1
    assert {"queued", "deferred"} <= {d for _, d in expected}
    spans = sorted((s for doc in span_documents(table) for s in decode_json(doc)),
                   key=lambda s: (s.end_ns, s.parent_span_id == ""))
    m = RequestMetrics()
    for i in range(0, len(spans), 64):
        m.ingest(spans[i:i + 64])
    fams = {f.name: f for f in text_string_to_metric_families(m.render())}
    counted: dict[tuple[str, str], float] = {}
    for s in fams["llm_gateway_admissions"].samples:
        key = (s.labels["tier"], s.labels["decision"])
        counted[key] = counted.get(key, 0) + s.value
    assert counted == expected
    waits = [w for w in table.gateway_wait_s if w is not None]
    assert _sample(fams, "llm_gateway_admission_wait_seconds", "llm_gateway_admission_wait_seconds_count") == len(waits)
    assert math.isclose(_sample(fams, "llm_gateway_admission_wait_seconds", "llm_gateway_admission_wait_seconds_sum"),
                        sum(waits), rel_tol=1e-6)
