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

from simulator.live import LiveFleet
from simulator.span_sink import SpanSink
from tests.conftest import BASE_DEPLOYMENT, BASE_WORKLOAD, free_port_block, make_fleet, needs


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("live")
    dep = copy.deepcopy(BASE_DEPLOYMENT)
    dep["engine"].update({"max_model_len": 4096, "prefix_cache": True})
    wl = copy.deepcopy(BASE_WORKLOAD)
    wl["arrival"]["rate"] = 2.0
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
    r = _client(base).chat.completions.create(model="Llama-3.1-8B", max_tokens=12,
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
        model="Llama-3.1-8B", max_tokens=60, stream=True, stream_options={"include_usage": True},
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
    r = c.completions.create(model="Llama-3.1-8B", prompt="hello", max_tokens=5)
    assert r.choices[0].finish_reason == "length" and r.usage.completion_tokens == 5
    pieces = [ch.choices[0].text for ch in c.completions.create(model="m", prompt=[1, 2, 3], max_tokens=4,
                                                                 stream=True) if ch.choices]
    assert len("".join(pieces).split()) == 4


def test_bad_requests_get_openai_errors(live):
    lf, base, _ = live
    with pytest.raises(openai.BadRequestError, match="context_too_long"):
        _client(base).completions.create(model="m", prompt="y" * 40_000, max_tokens=5)
    r = httpx.post(f"http://127.0.0.1:{base}/v1/chat/completions", content=b"{not json")
    assert r.status_code == 400 and "not JSON" in r.json()["error"]["message"]
    r = httpx.post(f"http://127.0.0.1:{base}/v1/chat/completions", json={"messages": []})
    assert r.status_code == 400
    assert httpx.get(f"http://127.0.0.1:{base}/nope").status_code == 404


def test_models_and_health(live):
    lf, base, _ = live
    assert httpx.get(f"http://127.0.0.1:{base}/health").status_code == 200
    models = httpx.get(f"http://127.0.0.1:{base}/v1/models").json()
    assert models["data"][0]["id"] == "Llama-3.1-8B"


def test_metrics_in_vllm_exposition(live):
    lf, base, _ = live
    _client(base).completions.create(model="m", prompt="warm up", max_tokens=3)
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
    deadline = time.monotonic() + 20
    while lf.virtual_now() < 7.0 and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(0.5)
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.1:{base + 1}/health", timeout=2)
    targets = yaml.safe_load((tmp / "targets.yaml").read_text())
    # the dead replica stays listed, so the engine exporter reports it down instead of forgetting it
    assert [t["replica"] for t in targets["targets"]] == ["chat-0", "chat-1"]
    assert targets["targets"][1]["url"] == f"http://127.0.0.1:{base + 1}/metrics"
    assert targets["deployments"]["chat"]["desired_replicas"] == 2
    assert httpx.get(f"http://127.0.0.1:{base}/health").status_code == 200


def test_spans_of_live_requests_are_written(live):
    lf, base, tmp = live
    _client(base).chat.completions.create(model="m", max_tokens=3, messages=[{"role": "user", "content": "hi"}],
                                          extra_headers={"x-tenant": "span-check", "x-route": "support"})
    deadline = time.monotonic() + 10
    found = False
    while time.monotonic() < deadline and not found:
        time.sleep(0.3)
        path = tmp / "spans.jsonl"
        for line in path.read_text().splitlines() if path.exists() else []:
            for rs in json.loads(line)["resourceSpans"]:
                for s in rs["scopeSpans"][0]["spans"]:
                    attrs = {a["key"]: a["value"].get("stringValue") for a in s.get("attributes", [])}
                    if attrs.get("llm.tenant") == "span-check":
                        assert attrs["llm.route"] == "support" and attrs["llm.deployment"] == "chat"
                        found = True
    assert found
