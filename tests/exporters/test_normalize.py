"""Engine dumps normalize to the canonical catalog: specific values from each real sample."""

import subprocess
import sys

import pytest
from prometheus_client.parser import text_string_to_metric_families

from goodput.contracts.catalog import ENGINE
from goodput.contracts.vocabulary import FINISH_REASONS, REJECT_REASONS
from goodput.exporters.dialects import DIALECTS
from goodput.exporters.exposition import labels, render
from goodput.exporters.normalize import UnknownDialect, normalize
from tests.conftest import FIXTURES, REPO, require

SAMPLES = FIXTURES / "engine_samples"


def values(text: str, engine: str = "auto") -> tuple[dict[tuple[str, str], float], object]:
    n = normalize(text, engine)
    flat = {k: v for fam in n.families.values() for k, v in fam.items()}
    return flat, n


def test_sglang_docs_sample():
    v, n = values((SAMPLES / "sglang_docs_production_metrics.txt").read_text())
    assert n.dialect == "sglang" and n.model == "meta-llama/Llama-3.1-8B-Instruct"
    assert v[("llm_requests_running", "")] == 162
    assert v[("llm_requests_waiting", "")] == 2826
    assert v[("llm_kv_cache_usage_ratio", "")] == 0.28
    assert v[("llm_prompt_tokens_total", "")] == 8_128_902
    assert v[("llm_generation_tokens_total", "")] == 7_557_572
    assert v[("llm_time_to_first_token_seconds_count", "")] == 11008
    assert v[("llm_time_to_first_token_seconds_bucket", 'le="2.5"')] == 140
    # the old name time_per_output_token_seconds becomes inter-token latency
    assert v[("llm_inter_token_latency_seconds_count", "")] == 7_400_757
    assert v[("llm_e2e_request_latency_seconds_sum", "")] == pytest.approx(3_116_093.850019932)
    assert not any(k[0].startswith("llm_func") for k in v)  # sglang:func_latency_seconds is not ours


def test_triton_trtllm_sample():
    v, n = values((SAMPLES / "triton_trtllm_backend_readme_metrics.txt").read_text())
    assert n.dialect == "triton" and n.model == "tensorrt_llm"
    assert v[("llm_requests_waiting", "")] == 1
    assert v[("llm_requests_running", "")] == 1  # request_type="scheduled"
    assert v[("llm_kv_cache_usage_ratio", "")] == 0.4875
    assert v[("llm_kv_cache_capacity_blocks", 'block_size="64"')] == 6239
    assert v[("llm_requests_finished_total", 'finished_reason="stop"')] == 0


def test_triton_core_sample():
    v, _ = values((SAMPLES / "triton_core_summary_docs.txt").read_text())
    assert v == {("llm_requests_finished_total", 'finished_reason="stop"'): 161}


def test_vllm_v0_sample_old_names_and_cache_config():
    v, n = values((SAMPLES / "vllm_v0_aibrix_runtime_doc.txt").read_text())
    assert n.dialect == "vllm" and n.model == "Qwen/Qwen2.5-Coder-1.5B-Instruct"
    assert v[("llm_kv_cache_capacity_blocks", 'block_size="16"')] == 81767
    assert v[("llm_kv_cache_usage_ratio", "")] == 0.0  # from gpu_cache_usage_perc
    assert v[("llm_prompt_tokens_total", "")] == 148
    assert v[("llm_generation_tokens_total", "")] == 955
    assert v[("llm_requests_finished_total", 'finished_reason="stop"')] == 4


def test_vllm_v1_docs_sample_by_hand():
    """vLLM's own design doc, a real V1 server's /metrics (abridged by the doc with "..." lines)."""
    v, n = values((SAMPLES / "vllm_v1_docs_design_metrics.txt").read_text())
    assert n.dialect == "vllm" and n.model == "meta-llama/Llama-3.1-8B-Instruct"
    assert v[("llm_requests_running", "")] == 8  # vllm:num_requests_running 8.0
    assert v[("llm_generation_tokens_total", "")] == 27453  # vllm:generation_tokens_total 27453.0
    # vllm:request_success_total by finished_reason: stop 1.0, length 131.0, abort 0.0 -> 132 finished, kept apart
    finished = {k[1]: x for k, x in v.items() if k[0] == "llm_requests_finished_total"}
    assert finished == {'finished_reason="stop"': 1, 'finished_reason="length"': 131, 'finished_reason="abort"': 0}
    # the doc shows TTFT buckets up to le="0.1" (140) and _count 140 but no +Inf bucket and no _sum: a histogram we
    # cannot complete is dropped and counted, never published half
    assert not any(k[0].startswith("llm_time_to_first_token_seconds") for k in v)
    assert n.errors["truncated_histogram"] == 1
    assert set(v) == {("llm_requests_running", ""), ("llm_generation_tokens_total", ""), *(
        ("llm_requests_finished_total", r) for r in finished)}  # nothing invented for what the "..." left out


def test_vllm_v1_0_10_issue_sample_by_hand():
    """vLLM 0.10.0 (V1, engine label) from a production-stack issue: deprecated and new prefix-cache names together."""
    v, n = values((SAMPLES / "vllm_v1_0_10_production_stack_issue_617.txt").read_text())
    assert n.dialect == "vllm" and n.model == "zai-org/GLM-4.5"
    assert v[("llm_kv_cache_usage_ratio", "")] == pytest.approx(9.75010481363281e-06)  # already a 0-1 fraction
    assert v[("llm_prefix_cache_queried_tokens_total", "")] == 32  # vllm:prefix_cache_queries_total 32.0 (new name)
    # the new vllm:prefix_cache_hits is outside the slice; the deprecated vllm:gpu_prefix_cache_hits_total 0.0 stands in
    assert v[("llm_prefix_cache_hit_tokens_total", "")] == 0
    # the *_created samples (unix timestamps, 1.75e9) are not counters and must not leak into any value
    assert all(x < 1e6 for x in v.values())
    assert len(v) == 3


def test_vllm_v1_simulated_dump_drops_created_and_keeps_buckets():
    text = (FIXTURES / "vllm_v1_simulated.txt").read_text()
    v, n = values(text)
    assert n.model == "Llama-3.1-8B"
    assert v[("llm_requests_running", "")] == 6
    assert v[("llm_prompt_tokens_total", "")] == 27746
    assert v[("llm_requests_finished_total", 'finished_reason="stop"')] == 26
    assert v[("llm_time_to_first_token_seconds_count", "")] == 32
    assert ("llm_time_to_first_token_seconds_bucket", 'le="0.001"') in v
    assert not any("created" in k[0] for k in v)


def test_tgi_synthetic():
    v, n = values((FIXTURES / "tgi_synthetic.txt").read_text())
    assert n.dialect == "tgi" and n.model is None
    assert v[("llm_requests_waiting", "")] == 7 and v[("llm_requests_running", "")] == 24
    assert v[("llm_prompt_tokens_total", "")] == 640000 and v[("llm_generation_tokens_total", "")] == 180000
    assert v[("llm_requests_finished_total", 'finished_reason="error"')] == 35  # overloaded + validation
    assert v[("llm_queue_time_seconds_bucket", 'le="0.00015"')] == 10


def test_new_names_win_over_deprecated_ones():
    text = """# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{model_name="m"} 0.5
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{model_name="m"} 0.7
"""
    v, _ = values(text)
    assert v == {("llm_kv_cache_usage_ratio", ""): 0.7}


def test_vllm_deferred_waits_of_a_decode_pool_are_not_queue():
    """A P/D decode pool's requests deferred for their KV transfer leave the queue; older vLLM keeps the total."""
    split = """# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 7.0
# TYPE vllm:num_requests_waiting_by_reason gauge
vllm:num_requests_waiting_by_reason{engine="0",model_name="m",reason="capacity"} 2.0
vllm:num_requests_waiting_by_reason{engine="0",model_name="m",reason="deferred"} 5.0
"""
    v, _ = values(split)
    assert v == {("llm_requests_waiting", ""): 2.0, ("llm_requests_deferred", ""): 5.0}
    older, _ = values(split.split("# TYPE vllm:num_requests_waiting_by_reason")[0])
    assert older == {("llm_requests_waiting", ""): 7.0}


def test_counters_with_and_without_total():
    v1, _ = values('vllm:num_preemptions_total{model_name="m"} 3\n')
    v2, _ = values('vllm:num_preemptions{model_name="m"} 3\n')
    assert v1 == v2 == {("llm_preemptions_total", ""): 3}


def test_sglang_tp_ranks_are_deduplicated_and_vllm_engines_summed():
    sg = "\n".join(f'sglang:num_running_reqs{{model_name="m",tp_rank="{r}",pp_rank="0"}} 10' for r in range(4))
    assert values(sg)[0] == {("llm_requests_running", ""): 10}
    vl = 'vllm:num_requests_running{engine="0",model_name="m"} 3\nvllm:num_requests_running{engine="1",model_name="m"} 4\n'
    vl += 'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.2\nvllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.6\n'
    v, _ = values(vl)
    assert v[("llm_requests_running", "")] == 7 and v[("llm_kv_cache_usage_ratio", "")] == 0.6


def test_triton_milliseconds_become_seconds():
    text = """nv_inference_first_response_histogram_ms_bucket{model="m",version="1",le="100"} 3
nv_inference_first_response_histogram_ms_bucket{model="m",version="1",le="500"} 8
nv_inference_first_response_histogram_ms_bucket{model="m",version="1",le="+Inf"} 9
nv_inference_first_response_histogram_ms_sum{model="m",version="1"} 2500
nv_inference_first_response_histogram_ms_count{model="m",version="1"} 9
"""
    v, _ = values(text)
    assert v[("llm_time_to_first_token_seconds_bucket", 'le="0.1"')] == 3
    assert v[("llm_time_to_first_token_seconds_bucket", 'le="0.5"')] == 8
    assert v[("llm_time_to_first_token_seconds_sum", "")] == 2.5


def test_kserve_prefixed_dump_reads_as_the_engine_beneath():
    """KServe's PodMonitor renames every series kserve_* and adds llm_isvc_* labels: the same canonical series."""
    kserve = normalize((SAMPLES / "kserve_vllm_llmisvc_federated.txt").read_text())
    plain = normalize((SAMPLES / "vllm_v0_aibrix_runtime_doc.txt").read_text())
    assert kserve.dialect == "kserve_vllm" and kserve.model == plain.model
    assert kserve.families == plain.families and len(kserve.families) >= 6
    ranks = "\n".join(f'kserve_sglang:num_running_reqs{{model_name="m",tp_rank="{r}",llm_isvc_name="x"}} 10'
                      for r in range(4))
    v, n = values(ranks)
    assert n.dialect == "kserve_sglang" and v == {("llm_requests_running", ""): 10}  # rank 0 only, as SGLang's


def test_dynamo_frontend_dump():
    v, n = values((SAMPLES / "dynamo_frontend_metrics_example.txt").read_text())
    assert n.dialect == "dynamo" and n.model == "qwen/qwen3-0.6b"
    assert v[("llm_generation_tokens_total", "")] == 300
    assert v[("llm_prompt_tokens_total", "")] == 33  # the input-length histogram's sum
    assert v[("llm_requests_finished_total", 'finished_reason="stop"')] == 1  # status="success"
    assert v[("llm_time_to_first_token_seconds_bucket", 'le="2.2"')] == 1
    assert v[("llm_time_to_first_token_seconds_bucket", 'le="1.0"')] == 0  # Rust's le="1"
    assert v[("llm_inter_token_latency_seconds_bucket", 'le="0.0035"')] == 298
    assert v[("llm_e2e_request_latency_seconds_sum", "")] == 2.177646729
    assert v[("llm_requests_running", "")] == 0 and v[("llm_requests_waiting", "")] == 0


@pytest.mark.parametrize(("dump", "line"), [
    ("kserve_vllm_llmisvc_federated.txt",
     'llm_kv_cache_capacity_blocks{model="Qwen/Qwen2.5-Coder-1.5B-Instruct",deployment="d",replica="d-0",'
     'block_size="16"} 81767.0'),
    ("dynamo_frontend_metrics_example.txt",
     'llm_generation_tokens_total{model="qwen/qwen3-0.6b",deployment="d",replica="d-0"} 300.0'),
])
def test_cli_engine_auto_recognises_kserve_and_dynamo(dump, line):
    r = subprocess.run([sys.executable, "-m", "goodput", "exporter", "engine", "normalize", str(SAMPLES / dump),
                        "--engine", "auto", "--deployment", "d", "--replica", "d-0"], capture_output=True, text=True,
                       cwd=REPO)
    assert r.returncode == 0, r.stderr
    assert line in r.stdout.splitlines()


def test_unknown_dialect_and_truncated_histograms():
    with pytest.raises(UnknownDialect):
        normalize("node_load1 0.5\n# garbage\n\x00\x01")
    with pytest.raises(UnknownDialect):
        normalize("vllm:num_requests_running 1\n", "tgi")
    text = 'vllm:num_requests_running{model_name="m"} 1\nvllm:e2e_request_latency_seconds_bucket{le="1.0",model_name="m"} 2\n'
    v, n = values(text)
    assert ("llm_e2e_request_latency_seconds_bucket", 'le="1.0"') not in v
    assert n.errors["truncated_histogram"] == 1


def test_vllm_nixl_connector_sample_gives_the_kv_transfer_families():
    """A P/D decode instance: NIXL's transfer time histogram, its bytes histogram's sum as a counter, its failures."""
    v, n = values((SAMPLES / "vllm_nixl_pd_decode_synthetic.txt").read_text())
    assert n.dialect == "vllm"
    assert v[("llm_kv_transfer_seconds_count", "")] == 3
    assert v[("llm_kv_transfer_seconds_sum", "")] == pytest.approx(0.061)
    assert v[("llm_kv_transfer_seconds_bucket", 'le="0.025"')] == 2
    assert v[("llm_kv_transfer_bytes_total", "")] == 1.5 * 2**20 + 12 * 2**20 + 24 * 2**20
    assert v[("llm_kv_transfer_failures_total", "")] == 1


def test_vllm_0_32_sample_reads_the_current_names():
    """vLLM 0.32: the queue split by reason, admission refusals, per-request token histograms and TPOT; none of
    the four names gone since 0.10 is needed."""
    v, n = values((SAMPLES / "vllm_v0_32_synthetic.txt").read_text())
    assert n.dialect == "vllm" and n.model == "Qwen/Qwen3-8B" and not n.errors
    assert v[("llm_requests_waiting", "")] == 3  # reason="capacity"; the plain total (8) counts the deferred too
    assert v[("llm_requests_deferred", "")] == 5
    assert v[("llm_engine_rejections_total", 'reason="queue_full"')] == 4 + 2  # both caps, no engine label
    assert v[("llm_kv_cache_usage_ratio", "")] == 0.62  # kv_cache_usage_perc, no gpu_cache_usage_perc beside it
    assert v[("llm_prefix_cache_hit_tokens_total", "")] == 4096
    assert v[("llm_request_prompt_tokens_count", "")] == 10
    assert v[("llm_request_prompt_tokens_sum", "")] == 14830
    assert v[("llm_request_prompt_tokens_bucket", 'le="1000.0"')] == 6  # 120, 250, 250, 510, 900, 1000
    assert v[("llm_request_generation_tokens_sum", "")] == 1401
    assert v[("llm_request_generation_tokens_bucket", 'le="100.0"')] == 5
    assert v[("llm_time_per_output_token_seconds_bucket", 'le="0.025"')] == 7
    assert v[("llm_time_per_output_token_seconds_sum", "")] == pytest.approx(0.271)
    assert ("llm_inter_token_latency_seconds_count", "") not in v  # TPOT per request is not the gaps


@pytest.mark.parametrize("old, new", [
    ("vllm:gpu_cache_usage_perc", "vllm:kv_cache_usage_perc"),
    ("vllm:gpu_prefix_cache_hits_total", "vllm:prefix_cache_hits_total"),
])
def test_a_name_gone_in_vllm_0_32_still_reads_an_older_server(old, new):
    """The four names vLLM dropped stay as fallbacks: read alone (an older server), ignored beside their successor."""
    target = "llm_kv_cache_usage_ratio" if "usage" in old else "llm_prefix_cache_hit_tokens_total"
    older, _ = values(f'{old}{{engine="0",model_name="m"}} 0.25\n')
    assert older == {(target, ""): 0.25}
    both, _ = values(f'{old}{{engine="0",model_name="m"}} 0.25\n{new}{{engine="0",model_name="m"}} 0.5\n')
    assert both == {(target, ""): 0.5}


def test_sglang_pd_decode_sample_gives_the_disaggregation_families():
    """An SGLang decode server: requests awaiting their KV are deferred, not queued; its failed transfers and its
    transfer latency histogram (ms, to seconds); the token histograms; rank 0 only."""
    v, n = values((SAMPLES / "sglang_pd_decode_synthetic.txt").read_text())
    assert n.dialect == "sglang" and not n.errors
    assert v[("llm_requests_waiting", "")] == 2 and v[("llm_requests_running", "")] == 24  # rank 1 not added
    assert v[("llm_requests_deferred", "")] == 7  # the transfer queue; the prealloc queue (3) waits for memory
    assert v[("llm_kv_transfer_failures_total", "")] == 1  # transfers; the bootstrap failure is not one
    assert v[("llm_kv_transfer_seconds_count", "")] == 4
    assert v[("llm_kv_transfer_seconds_sum", "")] == pytest.approx(0.347)
    assert v[("llm_kv_transfer_seconds_bucket", 'le="0.05"')] == 3
    assert v[("llm_request_prompt_tokens_bucket", 'le="1000.0"')] == 3
    assert v[("llm_request_generation_tokens_sum", "")] == 1190


def test_every_fixed_reason_a_dialect_writes_is_a_word_of_the_vocabulary():
    """A refusal's reason is llm.reject_reason's word, a finish one llm.finish_reason's: rules and dashboards that
    select them by value find every engine's."""
    words = {"reason": set(REJECT_REASONS), "finished_reason": set(FINISH_REASONS)}
    fixed = [(r.source, r.reason_label, r.reason) for rules in DIALECTS.values() for r in rules if r.reason]
    assert ("vllm:admission_rejections", "reason", "queue_full") in fixed
    assert all(reason in words[label] for _, label, reason in fixed), fixed


def _golden(path):
    n = normalize(path.read_text())
    lines = n.lines(labels(("model", "deployment", "replica"), (n.model or "tgi-model", "d", "d-0")))
    return render((s, lines.get(s.name, ())) for s in ENGINE)


ALL = [*sorted(SAMPLES.glob("*.txt")), FIXTURES / "vllm_v1_simulated.txt", FIXTURES / "tgi_synthetic.txt"]


@pytest.mark.parametrize("path", ALL, ids=lambda p: p.name)
def test_output_parses_and_matches_golden(path):
    out = _golden(path)
    fams = list(text_string_to_metric_families(out))
    assert fams and all(f.name.startswith("llm_") for f in fams)
    golden = FIXTURES / "golden" / (path.stem + ".prom")
    assert out == golden.read_text(), f"regenerate with: python -m tests.exporters.test_normalize > {golden}"
    require("promtool")
    r = subprocess.run(["promtool", "check", "metrics"], input=out, capture_output=True, text=True)
    assert r.returncode == 0 and not r.stdout.strip() and not r.stderr.strip(), r.stdout + r.stderr


def test_cli_normalize(tmp_path):
    r = subprocess.run([sys.executable, "-m", "goodput", "exporter", "engine", "normalize",
                        str(SAMPLES / "sglang_docs_production_metrics.txt"), "--deployment", "chat", "--replica", "chat-0"],
                       capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 0
    want = 'llm_requests_waiting{model="meta-llama/Llama-3.1-8B-Instruct",deployment="chat",replica="chat-0"} 2826.0'
    assert want in r.stdout
    bad = tmp_path / "bad.txt"
    bad.write_text("<html>not metrics</html>")
    r = subprocess.run([sys.executable, "-m", "goodput", "exporter", "engine", "normalize", str(bad)],
                       capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "bad.txt" in r.stderr


if __name__ == "__main__":  # regenerate the golden files
    (FIXTURES / "golden").mkdir(exist_ok=True)
    for p in ALL:
        (FIXTURES / "golden" / (p.stem + ".prom")).write_text(_golden(p))
