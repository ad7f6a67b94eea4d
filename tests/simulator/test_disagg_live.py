"""A disaggregated deployment served live over real sockets: the OpenAI client, each pool's vLLM /metrics, spans."""

import copy
import json
import time

import httpx
import openai
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from goodput.simulator.live import LiveFleet
from goodput.simulator.span_sink import SpanSink
from tests.conftest import BASE_DEPLOYMENT, BASE_WORKLOAD, free_port_block, make_fleet

MODEL = "Llama-3.1-8B"


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("pd-live")
    dep = copy.deepcopy(BASE_DEPLOYMENT)
    dep.update(replicas=1, disaggregation={"decode_pool": {"replicas": 2}, "kv_link_gbps": 50,
                                           "kv_link_latency_ms": 20})
    cfg = make_fleet(deployments=[dep], workloads=[copy.deepcopy(BASE_WORKLOAD)])
    base = free_port_block(3)
    sink = SpanSink(cfg, 1, None, tmp / "spans.jsonl", interval_s=0.2)
    lf = LiveFleet(cfg, base_port=base, traffic=0.0, targets=tmp / "targets.yaml", sink=sink)
    lf.start()
    yield lf, base, tmp
    lf.close()


def _chat(port: int, tenant: str, max_tokens: int = 8):
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", max_retries=0, timeout=30)
    return client.chat.completions.create(model=MODEL, max_tokens=max_tokens, extra_body={"ignore_eos": True},
                                          messages=[{"role": "user", "content": "x " * 1500}],
                                          extra_headers={"x-tenant": tenant})


def _metrics(port: int) -> dict[str, float]:
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    return {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}


def test_targets_name_both_pools(live):
    _, base, tmp = live
    targets = yaml.safe_load((tmp / "targets.yaml").read_text())["targets"]
    assert [(t["deployment"], t["replica"]) for t in targets] == [
        ("chat", "chat-prefill-0"), ("chat", "chat-decode-0"), ("chat", "chat-decode-1")]
    assert [t["url"] for t in targets] == [f"http://127.0.0.1:{base + i}/metrics" for i in range(3)]


def test_a_request_prefills_on_one_pool_decodes_on_the_other(live):
    lf, base, tmp = live
    before = {i: _metrics(base + i) for i in range(3)}
    r = _chat(base, "pd-live")
    assert r.usage.completion_tokens == 8 and r.choices[0].finish_reason == "length"
    r2 = _chat(base + 1, "pd-live-decode-door")  # a decode replica's API hands it to the prefill pool
    assert r2.usage.completion_tokens == 8
    after = {i: _metrics(base + i) for i in range(3)}
    moved = sum(after[i]["vllm:nixl_xfer_time_seconds_count"] - before[i]["vllm:nixl_xfer_time_seconds_count"]
                for i in (1, 2))
    assert moved == 2
    assert after[0]["vllm:nixl_xfer_time_seconds_count"] == 0  # the prefill replica reads none
    assert sum(after[i]["vllm:nixl_bytes_transferred_sum"] for i in (1, 2)) > 1500 * 131072  # the prompt's KV
    prompt = after[0]["vllm:prompt_tokens_total"] - before[0]["vllm:prompt_tokens_total"]
    assert prompt >= 2 * 1500  # both prompts were prefilled on the prefill replica
    # the spans: llm.kv_transfer between prefill and decode, the decode replica in llm.replica
    deadline = time.monotonic() + 10
    seen = {}
    while time.monotonic() < deadline and len(seen) < 2:
        time.sleep(0.3)
        for line in (tmp / "spans.jsonl").read_text().splitlines():
            for rs in json.loads(line)["resourceSpans"]:
                for s in rs["scopeSpans"][0]["spans"]:
                    a = {x["key"]: x["value"] for x in s.get("attributes", [])}
                    if s["name"] == "llm.request" and a.get("llm.tenant", {}).get("stringValue", "").startswith("pd-"):
                        seen[s["traceId"]] = a
    assert len(seen) == 2
    names = {}
    for line in (tmp / "spans.jsonl").read_text().splitlines():
        for rs in json.loads(line)["resourceSpans"]:
            for s in rs["scopeSpans"][0]["spans"]:
                if s["traceId"] in seen:
                    names.setdefault(s["traceId"], {})[s["name"]] = s
    for trace, a in seen.items():
        spans = names[trace]
        assert a["llm.replica"]["stringValue"].startswith("chat-decode-")
        assert a["llm.prefill_replica"]["stringValue"] == "chat-prefill-0"
        kv = spans["llm.kv_transfer"]
        assert spans["llm.prefill"]["endTimeUnixNano"] == kv["startTimeUnixNano"]
        assert kv["endTimeUnixNano"] == spans["llm.decode"]["startTimeUnixNano"]
        link_s = 0.020 + 1500 * 131072 * 8 / 50e9  # about 1500 prompt tokens over 50 Gbit/s, 20 ms latency
        assert (int(kv["endTimeUnixNano"]) - int(kv["startTimeUnixNano"])) / 1e9 >= 0.9 * link_s
