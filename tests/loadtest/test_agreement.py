"""The load test's figures agree with the live fleet's own: counts with its success counter, TTFT with its spans.

The fleet writes vLLM's own ``llm_request`` span per request to a file (``--span-format vllm``, OTLP JSON lines);
our ``traceparent`` makes its trace id ours, so each span is matched to the record of the same request.
"""

import asyncio
import copy
import json

import httpx
import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from goodput.loadtest.client import Client, ClientOptions
from goodput.loadtest.patterns import Step
from goodput.loadtest.runner import run_plan
from goodput.loadtest.workload import RequestSpec
from goodput.simulator.live import LiveFleet
from goodput.simulator.span_sink import SpanSink
from tests.conftest import BASE_DEPLOYMENT, BASE_WORKLOAD, free_port_block, make_fleet

MODEL = "Llama-3.1-8B"
# requests, per second: eight sequences at a time serve about 8 of these per second, so requests queue and TTFTs
# reach hundreds of ms; the few ms the wire and the HTTP server add to the engine's TTFT are then well inside 10%
N, RATE, OUTPUT = 60, 12.0, 96


def _successes(url: str) -> float:
    text = httpx.get(url + "/metrics").text
    return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples
               if s.name == "vllm:request_success_total")


def _span_ttfts(path) -> dict[str, float]:
    """trace id → the fleet's time to first token (``gen_ai.latency.time_to_first_token``) of each llm_request span."""
    out = {}
    for line in path.read_text().splitlines():
        for rs in json.loads(line)["resourceSpans"]:
            for ss in rs["scopeSpans"]:
                for span in ss["spans"]:
                    attrs = {a["key"]: a["value"] for a in span.get("attributes", [])}
                    ttft = attrs.get("gen_ai.latency.time_to_first_token")
                    if span["name"] == "llm_request" and ttft is not None:
                        out[span["traceId"]] = float(ttft.get("doubleValue", ttft.get("intValue", 0)))
    return out


def test_counts_and_ttft_agree_with_the_fleet(tmp_path):
    dep = dict(copy.deepcopy(BASE_DEPLOYMENT), replicas=1)
    dep["engine"].update({"max_model_len": 4096, "max_num_seqs": 8})
    cfg = make_fleet(deployments=[dep], workloads=[copy.deepcopy(BASE_WORKLOAD)])
    spans = tmp_path / "spans.jsonl"
    base = free_port_block(1)
    lf = LiveFleet(cfg, base_port=base, traffic=0.0,
                   sink=SpanSink(cfg, 1, None, spans, interval_s=0.2, span_format="vllm"))
    lf.start()
    url = f"http://127.0.0.1:{base}"
    # every sixth request's prompt is longer than max_model_len: the fleet refuses it (400), the client counts it
    specs = [RequestSpec(5000 if i % 6 == 5 else 1500, OUTPUT, "lt-acme", "P0", "chat", 0) for i in range(N)]

    async def go():
        client = Client([url], ClientOptions(model=MODEL, timeout_s=60.0), 64)
        try:
            step = Step(0, "agree", 0.0, N / RATE, 0.0, RATE, None, np.arange(N) / RATE)
            return await run_plan(client, [step], lambda i: specs[i], max_in_flight=64)
        finally:
            await client.aclose()
    try:
        before = _successes(url)
        res = asyncio.run(go())
        after = _successes(url)
    finally:
        lf.close()
    refused = [r for r in res.records if r.error in ("http_4xx", "http_429", "http_5xx")]
    done = [r for r in res.records if not r.error]
    assert len(refused) == N // 6 and all(r.status == 400 for r in refused)
    assert len(res.records) == (after - before) + len(refused), "a request the fleet neither served nor refused"
    assert len(done) == after - before

    fleet = _span_ttfts(spans)
    ours = {r.trace_id: r.ttft_s for r in done}
    assert set(ours) <= set(fleet), "a served request has no span of the fleet's"
    client_p50 = float(np.median(list(ours.values())))
    fleet_p50 = float(np.median([fleet[t] for t in ours]))
    assert client_p50 == pytest.approx(fleet_p50, rel=0.10), (client_p50, fleet_p50)
    assert client_p50 >= fleet_p50 > 0.1  # the client's TTFT adds the wire and the HTTP server to the engine's
