"""How each engine names what goodput calls by one name: the mapping tables of the engine exporter.

Facts from shared/reference/engine-metrics.md (sections 1-5). Each ``Rule`` maps one source family
to one canonical family; ``priority`` decides between an engine's old and new names when both are
exposed (vLLM 0.10 still emits ``gpu_cache_usage_perc`` beside ``kv_cache_usage_perc``); ``scale``
converts units (Triton microseconds and milliseconds to seconds); ``where`` selects series by a
label; ``reason`` fills the canonical ``finished_reason`` (or, ``reason_label``, the label the target has for it).

vLLM's names are checked against its ``vllm/v1/metrics/loggers.py`` and the v0.32 metrics page; docs/exporters.md
lists the names each engine publishes that are left unmapped, and why. A name an engine dropped stays as the
lower-priority fallback of its successor, commented with the versions that still publish it.

Two front ends rename what they pass through: KServe's LLMInferenceService PodMonitor prefixes every engine
name with ``kserve_`` (and adds ``llm_isvc_*`` target labels, dropped like any other label), so each engine's
table has a ``kserve_`` twin; NVIDIA Dynamo's HTTP frontend publishes its own ``dynamo_frontend_*`` names (its
workers pass the engines' own names through, read by the engine tables). goodput/monitoring/normrules.py turns these
same tables into Prometheus recording rules.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

__all__ = ["DIALECTS", "KSERVE_PREFIX", "PREFIXES", "RANKED", "Rule"]


@dataclass(frozen=True)
class Rule:
    source: str  # source family name, without _total / _bucket / _sum / _count
    target: str  # canonical family (counters with _total)
    kind: str  # gauge | counter | histogram | sum_as_counter | info_capacity | tokens_capacity
    priority: int = 0
    scale: float = 1.0
    where: str | None = None  # 'label="value"' that the series must carry
    reason: str | None = None  # fixed finished_reason (engines without that label)
    reason_label: str = "finished_reason"  # the target's label ``reason`` is written to
    pass_reason: bool = False  # copy the engine's finished_reason label
    agg: str = "sum"  # how series that differ only in dropped labels combine: sum | max
    blocks_label: str = ""  # info_capacity: label holding the block count
    size_label: str = ""  # info_capacity: label holding the block size


R = Rule
VLLM = (
    R("vllm:num_requests_running", "llm_requests_running", "gauge"),
    # newer vLLM splits the waiting queue by reason: only `capacity` waits are queue pressure; `deferred` ones (a P/D
    # decode pool holding requests for their KV transfer) are not. The plain total stays the fallback for older versions.
    R("vllm:num_requests_waiting_by_reason", "llm_requests_waiting", "gauge", priority=1, where='reason="capacity"'),
    R("vllm:num_requests_waiting", "llm_requests_waiting", "gauge", priority=0),
    # `deferred` waits: requests held for their KV transfer (a P/D decode pool) or a LoRA slot, not for capacity
    R("vllm:num_requests_waiting_by_reason", "llm_requests_deferred", "gauge", where='reason="deferred"'),
    # --max-num-queued-reqs / --max-num-queued-tokens refuse at admission with a 503; no `engine` label. Its own
    # reason (which cap fired) is summed: both are a full queue in goodput's words
    R("vllm:admission_rejections", "llm_engine_rejections_total", "counter", reason="queue_full", reason_label="reason"),
    R("vllm:kv_cache_usage_perc", "llm_kv_cache_usage_ratio", "gauge", priority=1, agg="max"),
    # gone: vLLM <= 0.10 (0.11 hid it behind --show-hidden-metrics-for-version; not in 0.32)
    R("vllm:gpu_cache_usage_perc", "llm_kv_cache_usage_ratio", "gauge", priority=0, agg="max"),
    R("vllm:cache_config_info", "llm_kv_cache_capacity_blocks", "info_capacity", blocks_label="num_gpu_blocks",
      size_label="block_size"),
    R("vllm:num_preemptions", "llm_preemptions_total", "counter"),
    R("vllm:prompt_tokens", "llm_prompt_tokens_total", "counter"),
    R("vllm:generation_tokens", "llm_generation_tokens_total", "counter"),
    R("vllm:prefix_cache_queries", "llm_prefix_cache_queried_tokens_total", "counter", priority=1),
    R("vllm:gpu_prefix_cache_queries", "llm_prefix_cache_queried_tokens_total", "counter", priority=0),  # gone: <= 0.10
    R("vllm:prefix_cache_hits", "llm_prefix_cache_hit_tokens_total", "counter", priority=1),
    R("vllm:gpu_prefix_cache_hits", "llm_prefix_cache_hit_tokens_total", "counter", priority=0),  # gone: <= 0.10
    R("vllm:request_success", "llm_requests_finished_total", "counter", pass_reason=True),
    R("vllm:time_to_first_token_seconds", "llm_time_to_first_token_seconds", "histogram"),
    R("vllm:inter_token_latency_seconds", "llm_inter_token_latency_seconds", "histogram", priority=1),
    # gone: vLLM <= 0.10 (its per-gap histogram, renamed inter_token_latency_seconds)
    R("vllm:time_per_output_token_seconds", "llm_inter_token_latency_seconds", "histogram", priority=0),
    # per finished request: its mean time per output token, its prompt and generated lengths
    R("vllm:request_time_per_output_token_seconds", "llm_time_per_output_token_seconds", "histogram"),
    R("vllm:request_prompt_tokens", "llm_request_prompt_tokens", "histogram"),
    R("vllm:request_generation_tokens", "llm_request_generation_tokens", "histogram"),
    R("vllm:e2e_request_latency_seconds", "llm_e2e_request_latency_seconds", "histogram"),
    R("vllm:request_queue_time_seconds", "llm_queue_time_seconds", "histogram"),
    R("vllm:request_prefill_time_seconds", "llm_prefill_time_seconds", "histogram"),
    R("vllm:request_decode_time_seconds", "llm_decode_time_seconds", "histogram"),
    # the NIXL KV connector of a P/D deployment (nixl_connector.py NixlPromMetrics), observed on the decode side
    R("vllm:nixl_xfer_time_seconds", "llm_kv_transfer_seconds", "histogram"),
    R("vllm:nixl_bytes_transferred", "llm_kv_transfer_bytes_total", "sum_as_counter"),
    R("vllm:nixl_num_failed_transfers", "llm_kv_transfer_failures_total", "counter"),
)

SGLANG = (
    R("sglang:num_running_reqs", "llm_requests_running", "gauge"),
    R("sglang:num_queue_reqs", "llm_requests_waiting", "gauge"),
    R("sglang:token_usage", "llm_kv_cache_usage_ratio", "gauge", agg="max"),
    R("sglang:cache_config_info", "llm_kv_cache_capacity_blocks", "info_capacity", priority=1,
      blocks_label="num_pages", size_label="page_size"),
    R("sglang:max_total_num_tokens", "llm_kv_cache_capacity_blocks", "tokens_capacity", priority=0),
    R("sglang:num_retracted_requests", "llm_preemptions_total", "counter"),  # retraction = SGLang's preemption
    R("sglang:prompt_tokens", "llm_prompt_tokens_total", "counter"),
    R("sglang:generation_tokens", "llm_generation_tokens_total", "counter"),
    R("sglang:prompt_tokens", "llm_prefix_cache_queried_tokens_total", "counter"),
    R("sglang:cached_tokens", "llm_prefix_cache_hit_tokens_total", "counter"),
    R("sglang:num_aborted_requests", "llm_requests_finished_total", "counter", reason="abort"),
    R("sglang:time_to_first_token_seconds", "llm_time_to_first_token_seconds", "histogram"),
    R("sglang:inter_token_latency_seconds", "llm_inter_token_latency_seconds", "histogram", priority=1),
    R("sglang:time_per_output_token_seconds", "llm_inter_token_latency_seconds", "histogram", priority=0),
    R("sglang:e2e_request_latency_seconds", "llm_e2e_request_latency_seconds", "histogram"),
    R("sglang:queue_time_seconds", "llm_queue_time_seconds", "histogram"),
    # with --collect-tokens-histogram
    R("sglang:prompt_tokens_histogram", "llm_request_prompt_tokens", "histogram"),
    R("sglang:generation_tokens_histogram", "llm_request_generation_tokens", "histogram"),
    # P/D disaggregation (collector.py "PD disaggregation"): a decode server's requests whose KV is on its way
    # (transfer queue; its prealloc queue waits for KV memory, capacity, and is left out) and its failed transfers
    R("sglang:num_decode_transfer_queue_reqs", "llm_requests_deferred", "gauge"),
    R("sglang:num_transfer_failed_reqs", "llm_kv_transfer_failures_total", "counter"),
    # a histogram in newer SGLang; older ones publish the last transfer as a gauge, which has no distribution to read
    R("sglang:kv_transfer_latency_ms", "llm_kv_transfer_seconds", "histogram", scale=1e-3),
)

TGI = (
    R("tgi_batch_current_size", "llm_requests_running", "gauge"),
    R("tgi_queue_size", "llm_requests_waiting", "gauge"),
    R("tgi_request_input_length", "llm_prompt_tokens_total", "sum_as_counter"),
    R("tgi_request_generated_tokens", "llm_generation_tokens_total", "sum_as_counter"),
    R("tgi_request_success", "llm_requests_finished_total", "counter", reason="stop"),
    R("tgi_request_failure", "llm_requests_finished_total", "counter", reason="error"),
    R("tgi_request_mean_time_per_token_duration", "llm_inter_token_latency_seconds", "histogram"),
    R("tgi_request_duration", "llm_e2e_request_latency_seconds", "histogram"),
    R("tgi_request_queue_duration", "llm_queue_time_seconds", "histogram"),
)

TRITON = (
    R("nv_trt_llm_request_metrics", "llm_requests_running", "gauge", where='request_type="scheduled"'),
    R("nv_trt_llm_request_metrics", "llm_requests_waiting", "gauge", priority=1, where='request_type="waiting"'),
    R("nv_inference_pending_request_count", "llm_requests_waiting", "gauge", priority=0),
    R("nv_trt_llm_kv_cache_block_metrics", "llm_kv_cache_usage_ratio", "gauge", agg="max",
      where='kv_cache_block_type="fraction"'),
    R("nv_trt_llm_kv_cache_block_metrics", "llm_kv_cache_capacity_blocks", "trt_capacity"),
    R("nv_inference_request_success", "llm_requests_finished_total", "counter", reason="stop"),
    R("nv_inference_request_failure", "llm_requests_finished_total", "counter", reason="error"),
    R("nv_llm_input_token_len", "llm_prompt_tokens_total", "sum_as_counter"),
    R("nv_llm_output_token_len", "llm_generation_tokens_total", "sum_as_counter"),
    R("nv_inference_first_response_histogram_ms", "llm_time_to_first_token_seconds", "histogram", scale=1e-3),
    # trtllm-serve (OpenAI server) names
    R("trtllm_num_requests_running", "llm_requests_running", "gauge", priority=2),
    R("trtllm_num_requests_waiting", "llm_requests_waiting", "gauge", priority=2),
    R("trtllm_kv_cache_utilization", "llm_kv_cache_usage_ratio", "gauge", priority=2, agg="max"),
    R("trtllm_request_success", "llm_requests_finished_total", "counter", pass_reason=True, priority=2),
    R("trtllm_time_to_first_token_seconds", "llm_time_to_first_token_seconds", "histogram", priority=2),
    R("trtllm_time_per_output_token_seconds", "llm_inter_token_latency_seconds", "histogram"),
    R("trtllm_e2e_request_latency_seconds", "llm_e2e_request_latency_seconds", "histogram"),
    R("trtllm_request_queue_time_seconds", "llm_queue_time_seconds", "histogram"),
    # Dynamo's TRT-LLM worker, disaggregated: observed on the decode worker (ai-dynamo/dynamo#6668, #8483)
    R("trtllm_kv_transfer_latency_seconds", "llm_kv_transfer_seconds", "histogram"),
)

# Dynamo's HTTP frontend (ai-dynamo/dynamo docs/observability/metrics.md, metrics_examples/fe.log): per model
# (label `model`), seen from the front door. In-flight counts requests between arrival and last token, queued
# ones included: the nearest it has to the engine's running batch.
DYNAMO = (
    R("dynamo_frontend_inflight_requests", "llm_requests_running", "gauge"),
    R("dynamo_frontend_queued_requests", "llm_requests_waiting", "gauge"),
    R("dynamo_frontend_input_sequence_tokens", "llm_prompt_tokens_total", "sum_as_counter"),
    R("dynamo_frontend_output_tokens", "llm_generation_tokens_total", "counter"),
    R("dynamo_frontend_input_sequence_tokens", "llm_prefix_cache_queried_tokens_total", "sum_as_counter"),
    R("dynamo_frontend_cached_tokens", "llm_prefix_cache_hit_tokens_total", "sum_as_counter"),
    R("dynamo_frontend_requests", "llm_requests_finished_total", "counter", where='status="success"', reason="stop"),
    R("dynamo_frontend_requests", "llm_requests_finished_total", "counter", where='status="error"', reason="error"),
    R("dynamo_frontend_time_to_first_token_seconds", "llm_time_to_first_token_seconds", "histogram"),
    R("dynamo_frontend_inter_token_latency_seconds", "llm_inter_token_latency_seconds", "histogram"),
    R("dynamo_frontend_request_duration_seconds", "llm_e2e_request_latency_seconds", "histogram"),
)

ENGINES: dict[str, tuple[Rule, ...]] = {"vllm": VLLM, "sglang": SGLANG, "tgi": TGI, "triton": TRITON}
KSERVE_PREFIX = "kserve_"  # KServe's LLMInferenceService PodMonitor: metricRelabelings __name__ -> kserve_$1
DIALECTS: dict[str, tuple[Rule, ...]] = {
    **ENGINES, "dynamo": DYNAMO,
    **{KSERVE_PREFIX + name: tuple(replace(r, source=KSERVE_PREFIX + r.source) for r in rules)
       for name, rules in ENGINES.items()},
}

# Dialects that export one series per TP / PP rank (SGLang): only rank 0 is read.
RANKED = frozenset({"sglang", KSERVE_PREFIX + "sglang"})

# Name prefixes that identify a dialect, most specific first.
_ENGINE_PREFIXES = (("vllm:", "vllm"), ("sglang:", "sglang"), ("tgi_", "tgi"), ("nv_trt_llm_", "triton"),
                    ("nv_llm_", "triton"), ("nv_inference_", "triton"), ("trtllm_", "triton"))
PREFIXES = (*((KSERVE_PREFIX + p, KSERVE_PREFIX + d) for p, d in _ENGINE_PREFIXES), *_ENGINE_PREFIXES,
            ("dynamo_frontend_", "dynamo"))
