"""The live fleet over real sockets: the official openai client, vLLM-style /metrics, promtool, failover."""

import copy
import json
import subprocess
import time

import httpx
import openai
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from goodput.simulator.live import LiveFleet
from goodput.simulator.span_sink import SpanSink
from tests.conftest import BASE_DEPLOYMENT, BASE_WORKLOAD, free_port_block, make_fleet, needs

MODEL = "Llama-3.1-8B"


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("live")
    dep = copy.deepcopy(BASE_DEPLOYMENT)
    dep["engine"].update({"max_model_len": 4096, "prefix_cache": True})
    wl = copy.deepcopy(BASE_WORKLOAD)
    wl["arrival"]["rate"] = 2.0
    wl["route"] = "support"  # a known route: x-route may name it
    cfg = make_fleet(deployments=[dep], workloads=[wl],
                     events=[{"at": 6.0, "kind": "replica_lost", "deployment": "chat", "replica": 1}])
    base = free_port_block(4)
    sink = SpanSink(cfg, 1, None, tmp / "spans.jsonl", interval_s=0.2)
    lf = LiveFleet(cfg, base_port=base, traffic=1.0, targets=tmp / "targets.yaml", sink=sink)
    lf.start()
    yield lf, base, tmp
    lf.close()


def _client(base):
    return openai.OpenAI(base_url=f"http://127.0.0.1:{base}/v1", api_key="none", max_retries=0, timeout=30)


def test_non_streaming_chat_with_the_openai_client(live):
    lf, base, _ = live
    r = _client(base).chat.completions.create(model=MODEL, max_tokens=12,
                                              messages=[{"role": "user", "content": "How full is the KV cache?"}])
    assert r.choices[0].finish_reason in ("stop", "length")
    assert r.usage.completion_tokens <= 12
    assert r.usage.prompt_tokens > 3
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    assert len(r.choices[0].message.content.split()) == r.usage.completion_tokens


def test_streaming_is_paced_by_the_model(live):
    lf, base, _ = live
    t0 = time.monotonic()
    stream = _client(base).chat.completions.create(
        model=MODEL, max_tokens=60, stream=True, stream_options={"include_usage": True},
        messages=[{"role": "user", "content": "x" * 2000}], extra_body={"ignore_eos": True},
        extra_headers={"x-tenant": "stream-tenant", "x-tier": "P0"})
    arrivals, text, usage, finish = [], "", None, None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for c in chunk.choices:
            if c.delta.content:
                arrivals.append(time.monotonic() - t0)
                text += c.delta.content
            finish = c.finish_reason or finish
    assert finish == "length"
    assert usage.completion_tokens == 60 == len(text.split())
    # 59 decode steps of ~8 ms each for an 8B model on an H100: the stream takes a visible time
    assert arrivals[-1] - arrivals[0] > 0.2
    assert len(arrivals) > 5


def test_completions_api_streaming_and_not(live):
    lf, base, _ = live
    c = _client(base)
    r = c.completions.create(model=MODEL, prompt="hello", max_tokens=5)
    assert r.choices[0].finish_reason == "length" and r.usage.completion_tokens == 5
    pieces = [ch.choices[0].text for ch in c.completions.create(model=MODEL, prompt=[1, 2, 3], max_tokens=4,
                                                                 stream=True) if ch.choices]
    assert len("".join(pieces).split()) == 4


def _post(base, path="/v1/chat/completions", **kw):
    return httpx.post(f"http://127.0.0.1:{base}{path}", timeout=10, **kw)


def _assert_openai_error(r, status, param=None, says=""):
    assert r.status_code == status, (r.status_code, r.text)
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["code"] == status
    assert err["param"] == param and says in err["message"], err


HI = [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize(("body", "param", "says"), [
    ({"messages": []}, "messages", "non-empty"),
    ({"messages": [{"role": "wizard", "content": "hi"}]}, "messages[0].role", "must be one of"),
    ({"messages": [{"role": "user", "content": 5}]}, "messages[0].content", "string"),
    ({"messages": HI, "max_tokens": -1}, "max_tokens", "at least 1"),
    ({"messages": HI, "max_tokens": "12"}, "max_tokens", "integer"),
    ({"messages": HI, "max_completion_tokens": 0}, "max_completion_tokens", "at least 1"),
    ({"messages": HI, "temperature": -0.5}, "temperature", "[0, inf]"),
    ({"messages": HI, "temperature": "hot"}, "temperature", "number"),
    ({"messages": HI, "top_p": 0}, "top_p", "(0, 1]"),
    ({"messages": HI, "top_p": 1.5}, "top_p", "(0, 1]"),
    ({"messages": HI, "presence_penalty": 2.5}, "presence_penalty", "[-2, 2]"),
    ({"messages": HI, "frequency_penalty": -3}, "frequency_penalty", "[-2, 2]"),
    ({"messages": HI, "repetition_penalty": 0}, "repetition_penalty", "(0, inf]"),
    ({"messages": HI, "top_k": -2}, "top_k", "at least 1"),
    ({"messages": HI, "n": 0}, "n", "at least 1"),
    ({"messages": HI, "n": 2}, "n", "only n=1"),
    ({"messages": HI, "stream": "yes"}, "stream", "boolean"),
    ({"messages": HI, "stream_options": {"include_usage": True}}, "stream_options", "stream is true"),
    ({"messages": HI, "stop": [1]}, "stop", "strings"),
    ({"messages": HI, "model": 7}, "model", "string"),
])
def test_invalid_chat_requests_are_400_in_openai_shape(live, body, param, says):
    _assert_openai_error(_post(live[1], json=body), 400, param, says)


def test_vllm_style_refusals(live):
    lf, base, _ = live
    r = _post(base, json={"model": "gpt-4o", "messages": HI})
    _assert_openai_error(r, 404, "model", "The model `gpt-4o` does not exist.")
    with pytest.raises(openai.NotFoundError):
        _client(base).chat.completions.create(model="gpt-4o", messages=HI)
    # max_model_len is 4096: a 1,000-token prompt fits, 1,000 + 3,500 output tokens do not (vLLM's message)
    r = _post(base, "/v1/completions", json={"model": MODEL, "prompt": " the" * 1000, "max_tokens": 3500})
    _assert_openai_error(r, 400, "max_tokens", "maximum context length is 4096 tokens. However, you requested 4500 tokens")
    with pytest.raises(openai.BadRequestError, match="maximum context length"):
        _client(base).completions.create(model=MODEL, prompt="y" * 40_000, max_tokens=5)
    _assert_openai_error(_post(base, "/v1/completions", json={"prompt": ["a", "b"]}), 400, "prompt", "batch")
    _assert_openai_error(_post(base, content=b"{not json"), 400, None, "not JSON")
    _assert_openai_error(_post(base, content=b"[1, 2]"), 400, None, "JSON object")
    _assert_openai_error(_post(base, json={"messages": HI}, headers={"x-tier": "gold"}), 400, "x-tier", "P0")
    _assert_openai_error(_post(base, content=b"x" * (4 * 1024 * 1024 + 1)), 413, None, "larger than")
    r = httpx.get(f"http://127.0.0.1:{base}/v1/chat/completions")
    _assert_openai_error(r, 405, None, "Method Not Allowed")
    assert "POST" in r.headers["Allow"]
    _assert_openai_error(httpx.get(f"http://127.0.0.1:{base}/nope"), 404, None, "Not Found")
    # and the server still serves
    assert _post(base, json={"model": MODEL, "messages": HI, "max_tokens": 2}).status_code == 200


def _lines(path) -> list[str]:
    """The whole lines of a spans file the sink may be appending to (a last line without its newline is still
    being written)."""
    text = path.read_text() if path.exists() else ""
    return text[:text.rfind("\n") + 1].splitlines()


def _spans(path):
    from goodput.exporters.otlp import decode_json

    return [s for line in _lines(path) for s in decode_json(line)]


def test_every_refusal_is_counted_with_its_reason(live):
    """Refused requests become rejected request spans, so the request exporter counts them by reason."""
    from goodput.exporters.requests import RequestMetrics

    lf, base, tmp = live
    tenant = {"x-tenant": "refusal-check", "x-route": "chat"}
    _post(base, content=b"{not json", headers=tenant)
    _post(base, json={"messages": HI, "max_tokens": -1}, headers=tenant)
    _post(base, json={"model": "gpt-4o", "messages": HI}, headers=tenant)
    _post(base, json={"messages": HI, "n": 3}, headers=tenant)
    _post(base, json={"messages": [{"role": "user", "content": "z" * 20_000}]}, headers=tenant)
    httpx.get(f"http://127.0.0.1:{base}/v1/chat/completions", headers=tenant)
    want = {"malformed_json": 1, "invalid_request": 1, "model_not_found": 1, "unsupported_parameter": 1,
            "context_too_long": 1, "method_not_allowed": 1}
    deadline = time.monotonic() + 15
    while True:
        metrics = RequestMetrics()
        metrics.ingest([s for s in _spans(tmp / "spans.jsonl") if s.attributes.get("llm.tenant") == "refusal-check"])
        got = {key[-1]: v for key, v in metrics.rejections.items()}
        if got == want or time.monotonic() > deadline:
            break
        time.sleep(0.3)
    assert got == want
    assert {key[-1] for key in metrics.requests} == {"rejected"}
    assert {key[4] for key in metrics.rejections} == {"chat"}  # the route label


def test_client_labels_are_bounded(live):
    lf, base, tmp = live
    headers = {"x-tenant": "t" * 500, "x-route": "route-" + "9" * 40, "x-scene": "not-a-scene"}
    _client(base).chat.completions.create(model=MODEL, max_tokens=2, messages=HI, extra_headers=headers)
    _client(base).chat.completions.create(model=MODEL, max_tokens=2, messages=HI,
                                          extra_headers={"x-tenant": "label-known", "x-route": "chat"})
    deadline = time.monotonic() + 15
    seen = {}
    while len(seen) < 2 and time.monotonic() < deadline:
        time.sleep(0.3)
        seen = {s.attributes["llm.tenant"]: s.attributes for s in _spans(tmp / "spans.jsonl")
                if s.name == "llm.request" and s.attributes.get("llm.tenant") in ("t" * 64, "label-known")}
    assert seen["t" * 64]["llm.route"] == "other" and seen["t" * 64]["llm.scene"] == "other"
    assert seen["label-known"]["llm.route"] == "chat"


def test_models_and_health(live):
    lf, base, _ = live
    assert httpx.get(f"http://127.0.0.1:{base}/health").status_code == 200
    models = httpx.get(f"http://127.0.0.1:{base}/v1/models").json()
    assert models["data"][0]["id"] == "Llama-3.1-8B"


def test_metrics_in_vllm_exposition(live):
    lf, base, _ = live
    _client(base).completions.create(model=MODEL, prompt="warm up", max_tokens=3)
    text = httpx.get(f"http://127.0.0.1:{base}/metrics").text
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    for name in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
                 "vllm:prompt_tokens", "vllm:generation_tokens", "vllm:request_success",
                 "vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds",
                 "vllm:e2e_request_latency_seconds", "vllm:request_queue_time_seconds", "vllm:cache_config_info",
                 "vllm:num_preemptions", "vllm:prefix_cache_queries", "vllm:prefix_cache_hits"):
        assert name in fams, name
    success = {s.labels["finished_reason"]: s.value for s in fams["vllm:request_success"].samples
               if s.name.endswith("_total")}
    assert set(success) == {"stop", "length", "abort", "error", "repetition"}
    assert success["length"] >= 1
    ttft = fams["vllm:time_to_first_token_seconds"].samples
    assert all(s.labels["model_name"] == "Llama-3.1-8B" and s.labels["engine"] == "0" for s in ttft)
    assert any(s.labels.get("le") == "0.001" for s in ttft)  # vLLM's buckets
    assert "vllm:time_to_first_token_seconds_created" in text
    gen = [s.value for s in fams["vllm:generation_tokens"].samples if s.name.endswith("_total")][0]
    assert gen >= 3


@needs("promtool")
def test_promtool_reports_only_what_real_vllm_triggers(live):
    lf, base, _ = live
    text = httpx.get(f"http://127.0.0.1:{base}/metrics").text
    r = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True)
    problems = [ln for ln in (r.stdout + r.stderr).splitlines() if ln.strip()]
    assert problems
    for ln in problems:
        # the colon lint, and vLLM's own histogram named vllm:iteration_tokens_total (as in vLLM's loggers.py)
        assert ln.endswith("metric names should not contain ':'") or ln == (
            'vllm:iteration_tokens_total non-counter metrics should not have "_total" suffix'), ln


def test_lost_replica_stops_serving_but_stays_a_target(live):
    lf, base, tmp = live
    deadline = time.monotonic() + 30  # lost at virtual second 6: its port closes once the engine gets there
    while True:
        try:
            httpx.get(f"http://127.0.0.1:{base + 1}/health", timeout=2)
        except httpx.ConnectError:
            break
        assert time.monotonic() < deadline, "the lost replica still answers 30 s on"
        time.sleep(0.2)
    assert lf.virtual_now() >= 6.0
    targets = yaml.safe_load((tmp / "targets.yaml").read_text())
    # the dead replica stays listed, so the engine exporter reports it down instead of forgetting it
    assert [t["replica"] for t in targets["targets"]] == ["chat-0", "chat-1"]
    assert targets["targets"][1]["url"] == f"http://127.0.0.1:{base + 1}/metrics"
    assert targets["deployments"]["chat"]["desired_replicas"] == 2
    assert httpx.get(f"http://127.0.0.1:{base}/health").status_code == 200


def test_spans_of_live_requests_are_written(live):
    lf, base, tmp = live
    _client(base).chat.completions.create(model=MODEL, max_tokens=3, messages=[{"role": "user", "content": "hi"}],
                                          extra_headers={"x-tenant": "span-check", "x-route": "support"})
    deadline = time.monotonic() + 10
    found = False
    while time.monotonic() < deadline and not found:
        time.sleep(0.3)
        for line in _lines(tmp / "spans.jsonl"):
            for rs in json.loads(line)["resourceSpans"]:
                for s in rs["scopeSpans"][0]["spans"]:
                    attrs = {a["key"]: a["value"].get("stringValue") for a in s.get("attributes", [])}
                    if attrs.get("llm.tenant") == "span-check":
                        assert attrs["llm.route"] == "support" and attrs["llm.deployment"] == "chat"
                        found = True
    assert found
