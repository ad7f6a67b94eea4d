"""Prefill/decode disaggregation: a prefill pool, a decode pool, the prompt's KV moving between them over a link."""

import copy
import json

import numpy as np
import pytest
from prometheus_client.exposition import generate_latest

from goodput.analyzer.ingest import ingest
from goodput.analyzer.store import connect
from goodput.foundation.errors import ConfigError
from goodput.simulator.catalog import kv_bytes_per_token, models
from goodput.simulator.config import load_fleet, parse_fleet
from goodput.simulator.fleet import Fleet
from goodput.simulator.records import RequestTable
from goodput.simulator.run import simulate, write_outputs
from goodput.simulator.vllm_metrics import VllmMetrics
from goodput.simulator.workload import generate
from tests.conftest import BASE_DEPLOYMENT, BASE_WORKLOAD, REPO, fleet_data

LONG_PROMPTS = {"p50": 6000, "p95": 12000, "p99": 16000, "max": 20000}


def _pd(gbps: float = 400.0, latency_ms: float = 0.5, decode: dict | None = None, **dep) -> dict:
    d = copy.deepcopy(BASE_DEPLOYMENT)
    d.update(replicas=1, engine={"max_num_seqs": 128, "max_num_batched_tokens": 8192, "prefill_chunk_tokens": 8192,
                                 "max_model_len": 32768}, **dep)
    d["disaggregation"] = {"decode_pool": {"replicas": 2, **(decode or {})}, "kv_link_gbps": gbps,
                           "kv_link_latency_ms": latency_ms}
    return d


def _wl(rate: float = 2.0, **kw) -> dict:
    return dict(copy.deepcopy(BASE_WORKLOAD), input_tokens=LONG_PROMPTS, arrival={"process": "poisson", "rate": rate},
                **kw)


def _run(deployments, workloads, seconds: float = 120.0, factory=None) -> Fleet:
    cfg = parse_fleet(fleet_data(deployments, workloads), "pd.yaml")
    fleet = Fleet(cfg, generate(cfg, seconds, cfg.seed), observer_factory=factory)
    fleet.run(seconds)
    fleet.drain(seconds + 1200)
    return fleet


def _served(fleet: Fleet, name: str = "chat") -> list:
    i = fleet.by_name[name].index
    return [r for r in fleet.done if r.deployment == i and r.finish_reason in ("stop", "length")]


def test_transfer_time_follows_the_formula():
    fleet = _run([_pd(gbps=100.0, latency_ms=2.0)], [_wl()], 60.0)
    per_gpu = kv_bytes_per_token(models()["Llama-3.1-8B"], 1, "fp16")
    assert per_gpu == 2 * 32 * 8 * 128 * 2  # K and V x 32 layers x 8 KV heads x head dim 128 x fp16
    handed = [r for r in _served(fleet) if r.generated > 1]
    assert len(handed) > 50
    for r in handed:
        want = 2.0e-3 + r.prompt_tokens * per_gpu * 8 / 100e9
        assert r.kv_link_s == pytest.approx(want, rel=1e-12)
        assert r.kv_bytes == r.prompt_tokens * per_gpu
        assert r.kv_ready - r.first_token == pytest.approx(want, abs=1e-9)  # it reached the decode replica then
    # tp 2 shards the KV over two GPUs, each on its own link: half the time, the same bytes in all
    tp2 = _run([_pd(gbps=100.0, latency_ms=2.0, tp=2)], [_wl()], 30.0)
    r = next(r for r in _served(tp2) if r.generated > 1)
    assert r.kv_link_s == pytest.approx(2.0e-3 + r.prompt_tokens * per_gpu / 2 * 8 / 100e9)
    assert r.kv_bytes == r.prompt_tokens * per_gpu


def test_first_token_from_prefill_the_rest_from_the_decode_pool(tmp_path):
    res = simulate(parse_fleet(fleet_data([_pd()], [_wl()]), "pd.yaml"), 60.0)
    fleet = res.fleet
    dep = fleet.by_name["chat"]
    served = _served(fleet)
    handed = [r for r in served if r.generated > 1]
    assert handed and all(r.prefill_replica >= 0 and r.first_token <= r.kv_ready <= r.decode_start < r.last_token
                          for r in handed)
    # the decode pool did the decoding, the prefill replica none of it
    assert sum(rep.steps_total for rep in dep.decode.replicas) > 0
    assert all(not rep.running and rep.n_dec == 0 for rep in dep.replicas)
    table = res.table
    i = next(k for k in range(table.n) if table.prefill_replica[k] and table.outcome[k] == "ok")
    assert table.replica[i].startswith("chat-decode-") and table.prefill_replica[i] == "chat-prefill-0"
    paths = write_outputs(res, tmp_path)
    spans = _spans(paths["spans"])
    rid = table.request_id[i]
    mine = {s["name"]: s for s in spans if _attrs(s).get("llm.request_id") == rid or s["traceId"] == table.trace_id[i]}
    chain = ["llm.gateway", "llm.queue", "llm.prefill", "llm.kv_transfer", "llm.decode", "llm.send"]
    assert all(n in mine for n in chain)
    for a, b in zip(chain, chain[1:], strict=False):  # back to back
        assert mine[a]["endTimeUnixNano"] == mine[b]["startTimeUnixNano"]
    # TTFT is gateway + queue + prefill: the first token came from the prefill replica
    root = mine["llm.request"]
    ttft_ns = int(mine["llm.prefill"]["endTimeUnixNano"]) - int(root["startTimeUnixNano"])
    assert ttft_ns == table.ts["first_token"][i] - table.ts["arrival"][i]
    kv = _attrs(mine["llm.kv_transfer"])
    assert kv["llm.kv_transfer.bytes"] == int(table.kv_transfer_bytes[i]) > 0
    assert kv["llm.prefill_replica"] == "chat-prefill-0"
    assert _attrs(root)["llm.replica"] == table.replica[i]
    assert len({s["spanId"] for s in spans}) == len(spans)  # the new span's id collides with none
    # the analyzer still ingests them, and the simulator's requests.parquet beside them
    con = connect(tmp_path / "db.duckdb")
    got = ingest(con, [paths["spans"]])
    assert got.quarantined == 0 and got.requests == table.n
    con2 = connect(tmp_path / "db2.duckdb")
    assert ingest(con2, [paths["requests"]]).requests == table.n


def test_an_aggregated_fleet_keeps_its_spans_and_columns():
    res = simulate(parse_fleet(fleet_data(), "agg.yaml"), 20.0)
    assert "kv_transfer_s" not in res.table.arrow().column_names
    assert not any(r.prefill_replica >= 0 for r in res.fleet.done)


def _spans(path) -> list[dict]:
    out = []
    for line in path.read_text().splitlines():
        for rs in json.loads(line)["resourceSpans"]:
            for ss in rs["scopeSpans"]:
                out.extend(ss["spans"])
    return out


def _attrs(span: dict) -> dict:
    out = {}
    for a in span.get("attributes", []):
        v = a["value"]
        out[a["key"]] = int(v["intValue"]) if "intValue" in v else v.get("stringValue", v.get("doubleValue"))
    return out


def _decode_tpot(reqs) -> np.ndarray:
    """Seconds per output token after the first, measured where decoding ran (from the decode replica's first step
    for a disaggregated request): the inter-token latency prefill interference lengthens."""
    out = []
    for r in reqs:
        if r.generated > 2:
            start = r.decode_start if r.decode_start == r.decode_start else r.first_token
            out.append((r.last_token - start) / (r.generated - 1))
    return np.array(out)


def test_disaggregation_takes_prefill_interference_off_decode():
    """examples/fleet_disagg.yaml: one long-prompt stream sent alike to a 1 prefill + 3 decode deployment and to 4
    aggregated replicas of the same GPU: decode steps never share a batch with an 8k-token prefill chunk there."""
    cfg = load_fleet(REPO / "examples" / "fleet_disagg.yaml")
    fleet = Fleet(cfg, generate(cfg, 300.0, cfg.seed))
    fleet.run(300.0)
    fleet.drain(2000.0)
    pd, agg = _decode_tpot(_served(fleet, "rag-pd")), _decode_tpot(_served(fleet, "rag-agg"))
    assert len(pd) > 500 and len(agg) > 500
    assert np.percentile(pd, 99) < np.percentile(agg, 99)
    assert pd.mean() < agg.mean()
    # and prefill on its own pool is where the long prompts wait: TTFT is the price
    ttft = {n: np.median([r.first_token - r.arrival for r in _served(fleet, n)]) for n in ("rag-pd", "rag-agg")}
    assert ttft["rag-pd"] > ttft["rag-agg"]


def test_a_slow_link_shows_in_the_kv_transfer_segment(tmp_path):
    def segments(gbps):
        res = simulate(parse_fleet(fleet_data([_pd(gbps=gbps)], [_wl(1.0)]), "pd.yaml"), 60.0)
        t = res.table
        ok = [i for i in range(t.n) if t.prefill_replica[i] and t.outcome[i] == "ok"]
        kv = np.mean([(t.decode_start[i] - t.ts["first_token"][i]) / 1e9 for i in ok])
        prefill = np.mean([(t.ts["first_token"][i] - t.ts["scheduled"][i]) / 1e9 for i in ok])
        link = np.mean([t.kv_transfer_s[i] for i in ok])
        return kv, prefill, link
    fast, slow = segments(400.0), segments(4.0)
    assert slow[2] == pytest.approx(fast[2] * 100, rel=0.05)  # the link time, latency aside, scales with 1/bandwidth
    assert slow[0] - fast[0] > 0.9 * (slow[2] - fast[2])  # and the segment grows by it
    assert slow[1] == pytest.approx(fast[1], rel=0.05)  # prefill does not


def test_kv_pressure_lands_on_the_decode_pool_and_preempts_there():
    tight = {"replicas": 1, "engine": {"max_num_seqs": 128, "max_num_batched_tokens": 8192, "prefill_chunk_tokens": 8192,
                                       "max_model_len": 32768, "gpu_memory_utilization": 0.3}}  # 59k tokens of KV
    wl = _wl(3.0, output_tokens={"p50": 800, "p95": 1500, "p99": 2000, "max": 3000}, max_tokens=4096)
    fleet = _run([_pd(decode=tight)], [wl], 60.0)
    dep = fleet.by_name["chat"]
    assert sum(rep.preemptions_total for rep in dep.decode.replicas) > 0
    assert sum(rep.preemptions_total for rep in dep.replicas) == 0  # the prefill replica holds no KV past prefill
    preempted = [r for r in _served(fleet) if r.preemptions]
    assert preempted and all(r.decode_start == r.decode_start for r in preempted)  # recomputed on the decode pool
    assert len(_served(fleet)) == len(fleet.done)  # and still served


def test_decode_replicas_show_the_nixl_metrics_and_lost_transfers_fail():
    metrics = {}

    def factory(dep, idx):
        m = VllmMetrics(dep.cfg.model, dep.cfg.engine, dep.num_blocks, dep.cfg.engine.max_model_len, clock=lambda: 0.0,
                        kv_connector=bool(dep.role))
        metrics[(dep.role, idx)] = m
        return m

    cfg = parse_fleet(fleet_data([_pd(latency_ms=4000.0)], [_wl(1.0)]), "pd.yaml")
    fleet = Fleet(cfg, generate(cfg, 60.0, cfg.seed), observer_factory=factory)
    fleet.run(30.0)
    on_link = [e[2] for e in fleet.transfers if e[3].index == 0]
    assert on_link  # 4 s on the link: some are on their way to decode replica 0 when it dies
    fleet.lose_replica(fleet.by_name["chat"].decode, 0, 30.0)
    fleet.run(60.0)
    fleet.drain(1200.0)
    assert all(r.finish_reason == "error" for r in on_link)
    text = {k: generate_latest(m.registry()).decode() for k, m in metrics.items()}
    assert "vllm:nixl_xfer_time_seconds_count" in text[("prefill", 0)]  # the connector's families, empty there
    assert 'vllm:nixl_xfer_time_seconds_count{engine="0",model_name="Llama-3.1-8B"} 0.0' in text[("prefill", 0)]
    received = sum(1 for r in fleet.done if r.kv_ready == r.kv_ready)
    counts = sum(_sample(text[("decode", i)], "vllm:nixl_xfer_time_seconds_count") for i in (0, 1))
    assert counts == received
    assert _sample(text[("decode", 0)], "vllm:nixl_num_failed_transfers_total") == len(on_link)
    # no prefill compute on the decode pool: one token's KV per request received (its first token), none preempted
    assert all(rep.preemptions_total == 0 for rep in fleet.by_name["chat"].decode.replicas)
    assert sum(_sample(text[("decode", i)], "vllm:prompt_tokens_total") for i in (0, 1)) == received
    assert _sample(text[("prefill", 0)], "vllm:prompt_tokens_total") == sum(
        r.prompt_tokens for r in fleet.done if r.scheduled == r.scheduled)
    assert _sample(text[("decode", 1)], "vllm:nixl_bytes_transferred_sum") == sum(
        r.kv_bytes for r in fleet.done if r.kv_ready == r.kv_ready and r.replica == 1)
    # the prefill replica counts each handed-off request as finished after one token, as vLLM's prefill leg does
    assert _sample(text[("prefill", 0)], 'vllm:request_success_total{engine="0",finished_reason="length"') >= len(
        [r for r in fleet.done if r.prefill_replica >= 0])
    table = RequestTable(cfg, fleet.done, cfg.seed)
    assert "kv_transfer_s" in table.arrow().column_names


def _sample(text: str, prefix: str) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(prefix))


@pytest.mark.parametrize("change, key, says", [
    (lambda d: d["disaggregation"]["decode_pool"].update(gpus="H100"), "deployments[0].disaggregation.decode_pool.gpus",
     "unknown key"),
    (lambda d: d["disaggregation"]["decode_pool"].update(replicas=0), "deployments[0].disaggregation.decode_pool.replicas",
     ">= 1"),
    (lambda d: d["disaggregation"].update(kv_link_gbps=0), "deployments[0].disaggregation.kv_link_gbps", ">= 0.001"),
    (lambda d: d["disaggregation"].update(decode_pool=None), "deployments[0].disaggregation.decode_pool", "required"),
    (lambda d: d["disaggregation"]["decode_pool"].update(gpu="H100-80GB-SXM", tp=3),
     "deployments[0].disaggregation.decode_pool.tp", "power of two"),
    (lambda d: d["disaggregation"]["decode_pool"].update(engine={"max_num_seqz": 3}),
     "deployments[0].disaggregation.decode_pool.engine.max_num_seqz", "unknown key"),
])
def test_a_bad_disaggregation_section_names_where(change, key, says):
    d = _pd()
    change(d)
    with pytest.raises(ConfigError) as e:
        parse_fleet(fleet_data([d], [_wl()]), "pd.yaml")
    assert e.value.key == key and says in e.value.problem


def test_the_decode_pool_inherits_what_it_does_not_say():
    cfg = parse_fleet(fleet_data([_pd(decode={"gpu": "H200-141GB", "engine": {"max_num_seqs": 256}})], [_wl()]), "x")
    dep = cfg.deployments[0]
    dec = dep.disaggregation.decode
    assert (dec.name, dec.model, dec.tp, dec.replicas, dec.gpu) == ("chat", dep.model, 1, 2, "H200-141GB")
    assert dec.engine.max_num_seqs == 256 and dec.budget.num_blocks > dep.budget.num_blocks
