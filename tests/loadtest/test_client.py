"""The load-test client against the live simulated fleet and a small real server: what each record says."""

import asyncio
import copy
import time

import pytest

from goodput.foundation.errors import ConfigError
from goodput.loadtest.client import Client, ClientOptions, error_class, preflight, served_model
from goodput.loadtest.workload import RequestSpec
from goodput.simulator.live import LiveFleet
from goodput.simulator.span_sink import SpanSink
from tests.conftest import BASE_DEPLOYMENT, BASE_WORKLOAD, free_port_block, make_fleet
from tests.loadtest.stub_target import StubTarget

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
    # the fleet's tokenizer on the synthetic prompt: its filler is 4 characters per token, its head
    # "request 0: " 5 tokens in 11 characters
    assert abs(rec.input_tokens - 300) <= 4
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
    from goodput.exporters.otlp import decode_json

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
    (slow,) = _send([stub.url + "/trickle"], [_spec()], timeout_s=1.0)  # the whole request is bounded, not each read
    assert (slow.status, slow.error, slow.done_s) == (200, "timeout", None) and slow.first_token_s is not None
    assert [error_class(s) for s in (200, 404, 429, 500)] == ["", "http_4xx", "http_429", "http_5xx"]


def test_nothing_listening_is_a_connect_error():
    (rec,) = _send([f"http://127.0.0.1:{free_port_block(1)}"], [_spec()])
    assert (rec.status, rec.error) == (0, "connect")


def test_abort_rate_drops_streams_mid_way(stub):
    """One event per token, as vLLM streams: the fleet packs the tokens of a slow tick into one event, so on a busy
    machine a stream could end before the abort point the client drew in events."""
    recs = _send([stub.url + "/tokens"], [_spec(out=200) for _ in range(3)], abort_rate=1.0)
    assert {r.error for r in recs} == {"aborted"}
    assert all(r.first_token_s is not None and r.done_s is None and 0 < r.output_tokens < 200 for r in recs)
    deadline = time.monotonic() + 10
    while stub.dropped < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert stub.dropped == 3  # the server saw each client go away


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
    # as a user or Hugging Face spells it: organisation, case and tune suffix aside, the one served id
    assert preflight(url, "meta-llama/llama-3.1-8B-Instruct")[0] == MODEL


def test_a_model_name_that_fits_several_served_ids_is_refused():
    ids = ["Qwen/Qwen2.5-7B-Instruct", "Qwen2.5-7B", "Llama-3.1-8B"]
    assert served_model("t", "Qwen2.5-7B", ids) == "Qwen2.5-7B"  # an exact id is never second-guessed
    with pytest.raises(ConfigError, match=r"matches several served models \(Qwen/Qwen2.5-7B-Instruct, Qwen2.5-7B\)"):
        served_model("t", "qwen2.5-7b-chat", ids)
    assert served_model("t", "llama-3.1-8b", ids) == "Llama-3.1-8B"


# ---------------------------------------------------------------------------------------------- what is sent

def test_a_fleet_workload_by_name_and_a_workload_of_its_own(tmp_path):
    from goodput.loadtest.workload import SpecStream, load_workload

    fleet = load_workload("examples/fleet.yaml:support-chat")
    assert (fleet.name, fleet.chat, fleet.tiers, fleet.routes) == ("support-chat", True, (("P0", 1.0),), (("chat", 1.0),))
    own = tmp_path / "wl.yaml"
    own.write_text("api: completions\ninput_tokens: {p50: 100, max: 200}\noutput_tokens: {p50: 10, max: 20}\n"
                   "tiers: {P0: 1, P2: 3}\nshared_prefix: {tokens: 50, fraction: 0.5}\n")
    wl = load_workload(str(own))
    specs = wl.specs(2000, seed=1)
    assert not wl.chat and specs == wl.specs(2000, seed=1)  # seeded
    assert all(1 <= s.input_tokens <= 200 and 1 <= s.output_tokens <= 20 for s in specs)
    assert 0.2 < sum(s.tier == "P0" for s in specs) / 2000 < 0.3
    assert 0.45 < sum(s.prefix_tokens > 0 for s in specs) / 2000 < 0.55
    stream = SpecStream(wl, seed=4, inputs=[7, 8], outputs=[3, 2])
    assert [(stream(i).input_tokens, stream(i).output_tokens) for i in (0, 1)] == [(7, 3), (8, 2)]
    assert stream(SpecStream.BLOCK + 5) == SpecStream(wl, seed=4)(SpecStream.BLOCK + 5)  # blocks are seeded too


@pytest.mark.parametrize("text, says", [
    ("input_tokens: {p50: 10}\n", "output_tokens: is required"),
    ("input_tokens: {p50: 10}\noutput_tokens: {p50: 5}\ntiers: {P7: 1}\n", "tiers.P7: unknown key"),
    ("input_tokens: {p50: 10}\noutput_tokens: {p50: 5}\ntenants: {a: 0}\n", "tenants: needs at least one positive"),
    ("input_tokens: {p50: 10}\noutput_tokens: {p50: 5}\nprefix: 3\n", "prefix: unknown key"),
    ("input_tokens: {p50: 10, p95: 5}\noutput_tokens: {p50: 5}\n", "input_tokens: p95=5 is below p50=10"),
])
def test_a_bad_workload_names_the_key(tmp_path, text, says):
    from goodput.loadtest.workload import load_workload

    path = tmp_path / "wl.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=says):
        load_workload(str(path))
    with pytest.raises(ConfigError, match="name one workload as examples/fleet.yaml:NAME; it has support-chat"):
        load_workload("examples/fleet.yaml:nope")


def test_prompts_are_sized_and_share_only_their_prefix():
    from goodput.loadtest.workload import prompt_text
    from goodput.simulator.tokenizer import count_tokens  # the simulated fleet's tokenizer

    a = prompt_text(RequestSpec(300, 5, "t", "P1", "r", 100), 1, chat=False)
    b = prompt_text(RequestSpec(300, 5, "t", "P1", "r", 100), 2, chat=False)
    assert 297 <= count_tokens(a) <= 300 and 297 <= count_tokens(b) <= 300  # never over: context limits hold
    common = next(i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y)
    assert 99 <= count_tokens(a[:common]) <= 103
    c = prompt_text(RequestSpec(300, 5, "t", "P1", "r", 0), 3, chat=True)
    assert count_tokens(c) == 300 - 7  # the chat framing's tokens come off the text


def test_replayed_hash_ids_share_text_block_by_block(tmp_path):
    """Mooncake hash ids: requests whose ids agree share their prompt up to the first id that differs."""
    from goodput.loadtest.workload import SpecStream, load_workload, prompt_text
    from goodput.simulator.tokenizer import count_tokens

    own = tmp_path / "wl.yaml"
    own.write_text("input_tokens: {p50: 100}\noutput_tokens: {p50: 10}\n")
    stream = SpecStream(load_workload(str(own)), 0, inputs=[40, 40, 40], outputs=[5, 5, 5],
                        hash_ids=[(1, 2, 3), (1, 2, 9), (7,)], block_tokens=10)
    a, b, c = (prompt_text(stream(i), i, chat=False) for i in range(3))
    assert stream(0).prefix_tokens == 30 and stream(2).prefix_tokens == 10
    first_diff = next(i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y)
    assert 18 <= count_tokens(a[:first_diff]) <= 21  # blocks 1 and 2 shared, 3 vs 9 not
    assert a[:8] != c[:8] and all(34 <= count_tokens(x) <= 40 for x in (a, b, c))
