"""The load-test client against the live simulated fleet and a small real server: what each record says."""

import asyncio
import copy
import time

import pytest

from capacity.loadtest.client import Client, ClientOptions, error_class, preflight
from capacity.loadtest.workload import RequestSpec
from goodput.foundation.errors import ConfigError
from simulator.live import LiveFleet
from simulator.span_sink import SpanSink
from tests.capacity.stub_target import StubTarget
from tests.conftest import BASE_DEPLOYMENT, BASE_WORKLOAD, free_port_block, make_fleet

MODEL = "Llama-3.1-8B"


def _spec(inp=200, out=20, tier="P0", tenant="lt-acme", route="support"):
    return RequestSpec(inp, out, tenant, tier, route, 0)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ltfleet")
    dep = dict(copy.deepcopy(BASE_DEPLOYMENT), replicas=1)
    dep["engine"].update({"max_model_len": 4096})
    wl = dict(copy.deepcopy(BASE_WORKLOAD), route="support")
    cfg = make_fleet(deployments=[dep], workloads=[wl])
    base = free_port_block(2)
    sink = SpanSink(cfg, 1, None, tmp / "spans.jsonl", interval_s=0.2)
    lf = LiveFleet(cfg, base_port=base, traffic=0.0, sink=sink)
    lf.start()
    yield f"http://127.0.0.1:{base}", tmp / "spans.jsonl"
    lf.close()


@pytest.fixture
def stub():
    s = StubTarget(free_port_block(1))
    yield s
    s.close()


def _send(targets, specs, **opts):
    async def go():
        client = Client(targets, ClientOptions(**{"model": MODEL, "timeout_s": 30.0, **opts}), max_in_flight=16)
        client.start_clock()
        try:
            recs = [client.record(i, 0, client.clock(), s) for i, s in enumerate(specs)]
            return await asyncio.gather(*(client.send(r, s) for r, s in zip(recs, specs, strict=True)))
        finally:
            await client.aclose()
    return asyncio.run(go())


def test_a_streamed_chat_request_is_measured_from_its_chunks(fleet):
    url, _ = fleet
    (rec,) = _send([url], [_spec(inp=300, out=40)])
    assert (rec.status, rec.error) == (200, "")
    assert rec.output_tokens == 40  # usage.completion_tokens: ignore_eos makes the fleet produce max_tokens
    assert abs(rec.input_tokens - 300) <= 2  # the fleet's own count of the synthetic prompt (4 chars per token)
    assert rec.sent_s <= rec.first_token_s <= rec.done_s
    assert len(rec.itl_s) >= 1 and all(g >= 0 for g in rec.itl_s)
    # the gaps add up to the span from first to last content chunk, which ends before the last byte
    assert sum(rec.itl_s) <= rec.done_s - rec.first_token_s + 1e-9
    assert rec.tpot_s == pytest.approx((rec.e2e_s - rec.ttft_s) / 39)
    assert len(rec.trace_id) == 32 and int(rec.trace_id, 16) != 0


def test_completions_api_and_round_robin_over_targets(fleet):
    url, _ = fleet
    recs = _send([url, url + "/v1"], [_spec(out=5), _spec(out=5)], chat=False)
    assert [(r.status, r.error, r.output_tokens) for r in recs] == [(200, "", 5), (200, "", 5)]
    assert all(r.first_token_s is not None for r in recs)


def test_headers_join_the_engine_trace(fleet):
    """The fleet's span for the request carries our trace id and tenant: x-tenant and traceparent arrived."""
    from exporters.otlp import decode_json

    url, spans = fleet
    (rec,) = _send([url], [_spec(out=3, tenant="lt-trace-check")])
    deadline = time.monotonic() + 15
    found = []
    while not found and time.monotonic() < deadline:
        time.sleep(0.3)
        lines = spans.read_text().splitlines() if spans.exists() else []
        found = [s for line in lines for s in decode_json(line) if s.trace_id == rec.trace_id]
    assert found, f"no span of trace {rec.trace_id} within 15 s"
    assert {s.attributes.get("llm.tenant") for s in found} >= {"lt-trace-check"}
    assert {s.attributes.get("llm.route") for s in found} >= {"support"}


def test_refusals_are_classed_not_raised(fleet):
    url, _ = fleet
    recs = _send([url], [_spec(inp=5000), _spec(tier="P9")])  # past max_model_len; a tier the fleet refuses
    assert [(r.status, r.error) for r in recs] == [(400, "http_4xx"), (400, "http_4xx")]
    assert all(r.first_token_s is None and r.output_tokens == 0 for r in recs)
    (wrong,) = _send([url], [_spec()], model="no-such-model")
    assert (wrong.status, wrong.error) == (404, "http_4xx")


def test_error_classes_from_a_real_server(stub):
    recs = _send([stub.url + "/status-429", stub.url + "/status-503"], [_spec(), _spec()])
    assert [(r.status, r.error) for r in recs] == [(429, "http_429"), (503, "http_5xx")]
    (cut,) = _send([stub.url + "/cut"], [_spec()])
    assert (cut.status, cut.error, cut.done_s) == (200, "disconnect", None)
    assert cut.first_token_s is not None  # what arrived before the drop is kept
    (hung,) = _send([stub.url + "/hang"], [_spec()], timeout_s=0.5)
    assert (hung.status, hung.error, hung.done_s) == (0, "timeout", None)
    assert [error_class(s) for s in (200, 404, 429, 500)] == ["", "http_4xx", "http_429", "http_5xx"]


def test_nothing_listening_is_a_connect_error():
    (rec,) = _send([f"http://127.0.0.1:{free_port_block(1)}"], [_spec()])
    assert (rec.status, rec.error) == (0, "connect")


def test_abort_rate_drops_streams_mid_way(fleet):
    url, _ = fleet
    recs = _send([url], [_spec(out=200) for _ in range(3)], abort_rate=1.0)
    assert {r.error for r in recs} == {"aborted"}
    assert all(r.first_token_s is not None and r.done_s is None and 0 < r.output_tokens < 200 for r in recs)


def test_usage_and_headers_reach_a_server(stub):
    stub.gate_open.set()
    (rec,) = _send([stub.url + "/gate"], [_spec(tier="P2", tenant="t1", route="r1")], model="stub-model")
    assert (rec.error, rec.input_tokens, rec.output_tokens, len(rec.itl_s)) == ("", 11, 2, 1)
    (headers,) = stub.headers
    assert (headers["x-tenant"], headers["x-tier"], headers["x-route"]) == ("t1", "P2", "r1")
    assert headers["traceparent"].startswith(f"00-{rec.trace_id}-") and headers["traceparent"].endswith("-01")


def test_preflight(fleet, stub):
    url, _ = fleet
    assert preflight(url + "/v1", None)[0] == MODEL
    with pytest.raises(ConfigError, match="unreachable"):
        preflight(f"http://127.0.0.1:{free_port_block(1)}", MODEL)
    with pytest.raises(ConfigError, match=r"not OpenAI-compatible: answered HTTP 200 text/html: '<html><body>It works"):
        preflight(stub.url + "/html", MODEL)
    with pytest.raises(ConfigError, match=f"'gpt-4o' is not served here; it serves {MODEL}"):
        preflight(url, "gpt-4o")
