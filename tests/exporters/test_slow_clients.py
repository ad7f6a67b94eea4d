"""The request exporter's two ports under a slow-client attack: 300 connections per port that each send a header
line every 2 s (and reconnect when dropped) are held open while real scrapes, health checks and real OTLP
protobuf posts are all served. The servers are built as ``run_request_exporter`` builds them, with a short
whole-request deadline so the attack cycles within the test."""

import threading
import time

import httpx
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from prometheus_client.parser import text_string_to_metric_families

from goodput.exporters.requests import OTLP_MAX_BODY_BYTES, RequestMetrics, TraceReceiver
from goodput.exporters.trace_store import TraceStore
from goodput.foundation.http import Server, metrics_routes
from tests.slow_clients import SlowLoris

ATTACKERS = 300  # per port; the server holds at most 256 connections
DEADLINE_S = 4.0


def _body(i: int) -> bytes:
    req = ExportTraceServiceRequest()
    rs = req.resource_spans.add()
    kv = rs.resource.attributes.add()
    kv.key, kv.value.string_value = "service.name", "gateway"
    s = rs.scope_spans.add().spans.add()
    s.trace_id, s.span_id, s.name, s.kind = bytes([i + 1]) * 16, bytes([i + 1]) * 8, "llm.request", 2
    s.start_time_unix_nano, s.end_time_unix_nano = 1_795_424_400 * 10**9, 1_795_424_401 * 10**9
    for k, v in (("llm.tenant", "acme"), ("llm.tier", "P1"), ("llm.outcome", "ok")):
        a = s.attributes.add()
        a.key, a.value.string_value = k, v
    return req.SerializeToString()


def _threads(srv: Server) -> int:
    return sum(1 for t in threading.enumerate() if t.name.startswith(f"http-{srv.server_address[1]}-conn"))


def test_scrapes_health_and_posts_are_served_while_300_slow_clients_per_port_stall(tmp_path):
    metrics = RequestMetrics()
    store = TraceStore(tmp_path / "store", flush_interval_s=3600).start()
    recv = TraceReceiver(metrics, store)
    otlp = Server("127.0.0.1", 0, recv.routes(), max_body_bytes=OTLP_MAX_BODY_BYTES, timeout_s=DEADLINE_S).start()
    srv = Server("127.0.0.1", 0, metrics_routes(lambda: metrics.render(store), store.health),
                 timeout_s=DEADLINE_S).start()
    try:
        with (SlowLoris(otlp.server_address[:2], b"POST /v1/traces HTTP/1.1\r\nHost: x\r\n", ATTACKERS) as on_otlp,
              SlowLoris(srv.server_address[:2], b"GET /metrics HTTP/1.1\r\nHost: x\r\n", ATTACKERS) as on_metrics):
            deadline = time.monotonic() + 30
            while _threads(otlp) < otlp.max_connections or _threads(srv) < srv.max_connections:
                assert time.monotonic() < deadline, (_threads(otlp), _threads(srv))  # the attack fills both caps
                time.sleep(0.1)
            statuses: list[tuple[str, int]] = []
            with httpx.Client(timeout=20) as client:  # a fresh connection per request, as each attacker has
                for i in range(8):
                    headers = {"Connection": "close"}
                    statuses.append(("scrape", client.get(f"{srv.url}/metrics", headers=headers).status_code))
                    statuses.append(("health", client.get(f"{srv.url}/healthz", headers=headers).status_code))
                    statuses.append(("otlp health", client.get(f"{otlp.url}/healthz", headers=headers).status_code))
                    if i < 4:
                        statuses.append(("post", client.post(f"{otlp.url}/v1/traces", content=_body(i), headers={
                            **headers, "Content-Type": "application/x-protobuf"}).status_code))
                    time.sleep(0.5)  # the attack keeps cycling: drops at the deadline, reconnects
            assert statuses == [(what, 200) for what, _ in statuses]
            assert on_otlp.reconnects and on_metrics.reconnects, "the attackers were never dropped"
            assert _threads(otlp) <= otlp.max_connections and _threads(srv) <= srv.max_connections
        received = {s.name: s.value for f in text_string_to_metric_families(metrics.render(store)) for s in f.samples}
        assert received["llm_exporter_spans_received_total"] == 4.0
    finally:
        otlp.stop(drain_s=5)
        store.close()
        srv.stop(drain_s=5)
