"""The metric catalog: every metric goodput's exporters publish, declared once.

Names are docs/design.md's metric contract verbatim. Collectors render from these specs, the rules and
dashboards are checked against ``names()``, and tests compare exporter output with it.
"""

from __future__ import annotations

from dataclasses import dataclass

from goodput.contracts.vocabulary import CIRCUIT_STATES

__all__ = [
    "CATALOG",
    "COST",
    "ENGINE",
    "GATEWAY",
    "GATEWAY_BUCKETS",
    "GPU",
    "KUBE",
    "OVERLOAD_STEPS",
    "SELF",
    "TOKEN_BUCKETS",
    "MetricSpec",
    "by_name",
    "names",
]

ENGINE_LABELS = ("model", "deployment", "replica")
GATEWAY_COUNTER_LABELS = ("model", "deployment", "tenant", "tier", "route")
GATEWAY_HIST_LABELS = ("deployment", "tier", "route")
GPU_LABELS = ("gpu", "uuid")

# Request-latency buckets (seconds) for the request exporter. They include the usual SLO thresholds
# (TTFT 0.2 / 0.3 / 0.5 / 1 / 2 s, TPOT 25 / 50 / 100 ms) so burn-rate rules can select le exactly.
GATEWAY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.75, 1.0, 1.5, 2.0, 2.5,
                   3.0, 5.0, 7.5, 10.0, 15.0, 20.0, 30.0, 60.0, 120.0, 300.0)
# Per-request token buckets: powers of 2 from 16 to 128k (2^4..2^17). Token counts span four orders of magnitude
# (a 10-token reply, a 100k-token prompt), so the buckets keep one relative width (x2) everywhere in 15 series per
# stream; histogram_quantile interpolates linearly inside a bucket, so a quantile is known to within its bucket (a
# factor 2). 128k is the longest context window of the models planned (Llama 3.1, Qwen2.5); more lands in +Inf.
TOKEN_BUCKETS = tuple(float(2 ** k) for k in range(4, 18))
# The overload ladder's step kinds in the seed's section 8 order, mildest first: llm_gateway_overload_step is a step's
# position here (1-based; 0 when no step is active, len + 1 for a step name the exporter does not know), so "> 2"
# reads "past degrading P1" whatever a fleet file names its steps' triggers. The one list: the simulator's fleet file
# takes these kinds (goodput/simulator/config.py). Fallback is no step of it: the gateway's fallback routes behind
# circuit breakers (llm_gateway_fallbacks_total), not a rung the ladder engages.
OVERLOAD_STEPS = ("defer_p2", "degrade_p1", "tpm_limit", "fail_fast")


@dataclass(frozen=True)
class MetricSpec:
    """One metric family. ``name`` is the family name (counters include ``_total``, as exposed)."""

    name: str
    type: str  # gauge | counter | histogram
    unit: str
    help: str
    labels: tuple[str, ...]
    buckets: tuple[float, ...] | None = None


def _m(name: str, type_: str, unit: str, help_: str, labels: tuple[str, ...], buckets=None) -> MetricSpec:
    return MetricSpec(name, type_, unit, help_, labels, buckets)


E = ENGINE_LABELS
ENGINE = (
    _m("llm_engine_up", "gauge", "", "1 when the last scrape of this replica's engine succeeded.", E),
    _m("llm_engine_scrape_duration_seconds", "gauge", "seconds", "Duration of the last scrape of this engine.", E),
    _m("llm_replica_cold_start_seconds", "gauge", "seconds",
       "From the engine process's start (process_start_time_seconds) to the exporter's first successful scrape of "
       "it: the replica's cold start (weights load, engine start, warm-up), within one scrape interval.", E),
    _m("llm_replica_first_request_seconds", "gauge", "seconds",
       "From the engine process's start to the exporter's first scrape that counts a request it finished (not "
       "aborted): the cold start as the first user saw it, routing included; measured when "
       "llm_replica_cold_start_seconds is.", E),
    _m("llm_requests_running", "gauge", "", "Sequences in the running batch.", E),
    _m("llm_requests_waiting", "gauge", "", "Requests queued in the engine.", E),
    _m("llm_kv_cache_usage_ratio", "gauge", "ratio", "Fraction of KV-cache blocks in use (0-1).", E),
    _m("llm_kv_cache_capacity_blocks", "gauge", "", "KV-cache blocks the engine has.", E + ("block_size",)),
    _m("llm_preemptions_total", "counter", "", "Sequences preempted because a KV block could not be allocated.", E),
    _m("llm_prompt_tokens_total", "counter", "", "Prompt tokens prefilled.", E),
    _m("llm_generation_tokens_total", "counter", "", "Tokens generated.", E),
    _m("llm_prefix_cache_queried_tokens_total", "counter", "", "Prompt tokens looked up in the prefix cache.", E),
    _m("llm_prefix_cache_hit_tokens_total", "counter", "", "Prompt tokens found in the prefix cache.", E),
    _m("llm_requests_finished_total", "counter", "", "Finished requests by finish reason.", E + ("finished_reason",)),
    _m("llm_time_to_first_token_seconds", "histogram", "seconds", "Engine-side time to first token.", E),
    _m("llm_inter_token_latency_seconds", "histogram", "seconds", "Gap between consecutive output tokens.", E),
    _m("llm_e2e_request_latency_seconds", "histogram", "seconds", "Engine-side request latency.", E),
    _m("llm_queue_time_seconds", "histogram", "seconds", "Time requests waited in the engine queue.", E),
    _m("llm_prefill_time_seconds", "histogram", "seconds", "Time from scheduling to first token.", E),
    _m("llm_decode_time_seconds", "histogram", "seconds", "Time from first to last token.", E),
    _m("llm_kv_transfer_seconds", "histogram", "seconds",
       "Time to move a request's KV cache from its prefill replica to its decode replica (P/D disaggregation).", E),
    _m("llm_kv_transfer_bytes_total", "counter", "", "KV-cache bytes moved from prefill to decode replicas.", E),
    _m("llm_kv_transfer_failures_total", "counter", "", "KV-cache transfers that failed.", E),
    # engine-side request shapes and refusals newer engines publish (vLLM 0.32, SGLang with P/D): kept together
    _m("llm_requests_deferred", "gauge", "",
       "Requests the engine holds outside its scheduling queue for something other than capacity: a P/D decode "
       "replica's requests waiting for their KV cache to arrive, or for a LoRA slot (vLLM's reason=\"deferred\" waits, "
       "SGLang's decode transfer queue). Not queue pressure: llm_requests_waiting leaves them out.", E),
    _m("llm_engine_rejections_total", "counter", "",
       "Requests the engine refused at admission, before queueing them (vLLM's --max-num-queued-reqs and "
       "--max-num-queued-tokens answer 503), by reason in llm.reject_reason's words (queue_full).", E + ("reason",)),
    _m("llm_request_prompt_tokens", "histogram", "tokens", "Prompt tokens of each finished request, engine-side.", E),
    _m("llm_request_generation_tokens", "histogram", "tokens", "Tokens generated for each finished request, engine-side.",
       E),
    _m("llm_time_per_output_token_seconds", "histogram", "seconds",
       "Each finished request's mean time per output token, engine-side (TPOT; the gaps themselves are "
       "llm_inter_token_latency_seconds).", E),
    _m("llm_deployment_replicas", "gauge", "", "Replicas per deployment, desired and available.", ("deployment", "state")),
    _m("llm_capacity_replica_goodput_tokens_per_second", "gauge", "", "Per-replica SLO goodput from the capacity plan.",
       ("deployment",)),
    _m("llm_capacity_cold_start_seconds", "gauge", "seconds",
       "The cold start the capacity plan's cold-start buffer and autoscaling policy were sized on (the plan's "
       "cold_start_s).", ("deployment",)),
)

# Recorded, not scraped: rules/kube.rules.yaml (goodput/monitoring/kuberules.py) records these on Kubernetes from
# kube-state-metrics' pod timestamps (and the engine exporter's llm_replica_cold_start_seconds where it runs), for each
# replica whose pod was created within the cold-start window (docs/capacity.md, "Cold start phases").
KUBE = (
    _m("llm_replica_cold_start_phase_seconds", "gauge", "seconds",
       "A replica's cold start by phase, from its pod's first timestamps: scheduling (created to scheduled), "
       "pull_and_create (scheduled to its last container's start: image pulls, volumes, init containers, as "
       "kube-state-metrics has no pull time), then engine_start (the engine exporter's process start to first "
       "answered scrape) and warm_up (on to the pod's Ready), or start_to_ready where no engine exporter tells "
       "those two apart.", ("deployment", "replica", "phase")),
    _m("llm_replica_pod_cold_start_seconds", "gauge", "seconds",
       "From the replica's pod creation to its first Ready (kube-state-metrics): the cold start a scale-out waits, "
       "scheduling and image pulls included; the sum of its phases.", ("deployment", "replica")),
)

C, H = GATEWAY_COUNTER_LABELS, GATEWAY_HIST_LABELS
GATEWAY = (
    _m("llm_gateway_requests_total", "counter", "", "Requests by outcome.", C + ("outcome",)),
    _m("llm_gateway_rejections_total", "counter", "",
       "Rejected requests by reason: the engine's (queue_full, queue_timeout, kv_capacity, context_too_long, ...) and "
       "the gateway's, as its llm.reject_reason says (rate_limit, tpm_limit, concurrency_limit, budget_exhausted; "
       "busy: the overload ladder's fail-fast answer; circuit_open: no route left; capability: no deployment can "
       "serve the request's needs).", C + ("reason",)),
    _m("llm_gateway_admissions_total", "counter", "",
       "The gateway's admission decisions (llm.admission of the llm.gateway span: admitted, queued, deferred, "
       "rejected), counted once per request when its llm.gateway span arrives.", C + ("decision",)),
    _m("llm_gateway_degradations_total", "counter", "",
       "Requests the overload ladder degraded, by the step that did (llm.degraded of the llm.gateway span: "
       "output_cap, context_trim, ...), counted once per request at admission.", C + ("step",)),
    _m("llm_gateway_fallbacks_total", "counter", "",
       "Requests served by a backup deployment (deployment) instead of their primary (fallback_from), by reason "
       "(llm.fallback_reason: circuit_open, capacity, unavailable), counted once per request at admission.",
       C + ("fallback_from", "reason")),
    _m("llm_gateway_overload_step", "gauge", "",
       "The overload ladder's highest active step at the newest admission per deployment (llm.overload_step of the "
       "newest llm.gateway span), as its position in the section 8 order: 0 none, "
       + ", ".join(f"{i} {step}" for i, step in enumerate(OVERLOAD_STEPS, start=1))
       + f", {len(OVERLOAD_STEPS) + 1} a step the exporter does not know; step is its name.",
       ("deployment", "step")),
    _m("llm_gateway_circuit_state", "gauge", "",
       "A primary deployment's circuit breaker at the newest admission routed at it (llm.circuit_state of the newest "
       "llm.gateway span whose primary it is: its llm.deployment, or llm.fallback_from when it fell back), one series "
       "per state (" + ", ".join(CIRCUIT_STATES) + ") with value 1 for the current state and 0 for the others, as "
       "resilience4j_circuitbreaker_state; only primaries with a breaker.", ("deployment", "state")),
    _m("llm_gateway_input_tokens_total", "counter", "", "Input tokens per tenant.", C),
    _m("llm_gateway_output_tokens_total", "counter", "", "Output tokens per tenant.", C),
    _m("llm_gateway_requests_arrived_total", "counter", "",
       "Requests that reached the gateway, counted at admission (the llm.gateway span), or at completion for trace "
       "shapes without one.", C),
    _m("llm_gateway_requests_in_flight", "gauge", "", "Requests admitted whose root span has not arrived yet.", H),
    _m("llm_gateway_oldest_queued_age_seconds", "gauge", "seconds",
       "Age of the oldest request admitted and not yet scheduled (its llm.queue span not arrived); 0 when none.", H),
    _m("llm_gateway_ttft_missed_total", "counter", "",
       "Requests whose time to first token exceeded le, counted once per bound as soon as known: while still "
       "queued, at scheduling, or at completion; one refused, timed out or failed before its first token misses "
       "every bound. Over llm_gateway_requests_arrived_total it is the TTFT SLI.", H + ("le",)),
    _m("llm_gateway_admission_wait_seconds", "histogram", "seconds",
       "Time a request waited at the gateway (its tier queue) before it was sent on or refused (llm.gateway_wait_s).",
       H, GATEWAY_BUCKETS),
    _m("llm_gateway_queue_wait_seconds", "histogram", "seconds",
       "Time from admission to engine scheduling, observed at scheduling (when the llm.queue span arrives).", H,
       GATEWAY_BUCKETS),
    _m("llm_gateway_time_to_first_token_seconds", "histogram", "seconds", "Client-edge time to first token.", H,
       GATEWAY_BUCKETS),
    _m("llm_gateway_time_per_output_token_seconds", "histogram", "seconds",
       "(E2E - TTFT) / (output tokens - 1), per request.", H, GATEWAY_BUCKETS),
    _m("llm_gateway_e2e_latency_seconds", "histogram", "seconds", "Client-edge request latency.", H, GATEWAY_BUCKETS),
    # not llm_gateway_input_tokens: that is the counter's family name in OpenMetrics (its samples end in _total)
    _m("llm_gateway_request_input_tokens", "histogram", "tokens", "Input tokens of each admitted request.", H,
       TOKEN_BUCKETS),
    _m("llm_gateway_request_output_tokens", "histogram", "tokens", "Output tokens of each completed request.", H,
       TOKEN_BUCKETS),
)

G = GPU_LABELS
GPU = (
    _m("llm_gpu_up", "gauge", "", "0 when the GPU is lost or cannot be read.", G),
    _m("llm_gpu_info", "gauge", "", "GPU identity; always 1.", G + ("gpu_model", "driver_version", "hostname")),
    _m("llm_gpu_deployment_info", "gauge", "", "Joins GPUs to deployments; always 1.", G + ("deployment", "replica")),
    _m("llm_gpu_utilization_ratio", "gauge", "ratio", "GPU busy fraction (0-1).", G),
    _m("llm_gpu_memory_used_bytes", "gauge", "bytes", "Framebuffer memory used.", G),
    _m("llm_gpu_memory_total_bytes", "gauge", "bytes", "Framebuffer memory total.", G),
    _m("llm_gpu_memory_reserved_bytes", "gauge", "bytes", "Framebuffer memory reserved by the driver.", G),
    _m("llm_gpu_power_watts", "gauge", "watts", "Power draw.", G),
    _m("llm_gpu_temperature_celsius", "gauge", "celsius", "GPU temperature.", G),
    _m("llm_gpu_sm_clock_hertz", "gauge", "hertz", "SM clock.", G),
    _m("llm_gpu_ecc_errors_total", "counter", "", "ECC errors since the driver loaded (volatile).", G + ("kind",)),
    _m("llm_gpu_xid_errors_total", "counter", "", "XID critical error events seen by the exporter.", G + ("xid",)),
    _m("llm_gpu_process_memory_bytes", "gauge", "bytes", "GPU memory of a process, attributed to a deployment.",
       G + ("pid", "deployment")),
)

SELF = (
    _m("llm_exporter_collection_duration_seconds", "gauge", "seconds", "Duration of the last collection.", ("exporter",)),
    _m("llm_exporter_errors_total", "counter", "", "Collection errors by kind.", ("exporter", "kind")),
    _m("llm_exporter_last_success_timestamp_seconds", "gauge", "seconds", "Unix time of the last successful collection.",
       ("exporter",)),
    _m("llm_exporter_tenants_folded", "gauge", "", "Distinct tenants folded into tenant=\"other\" by the cardinality guard.",
       ("exporter",)),
    _m("llm_exporter_label_overflow_total", "counter", "",
       "Requests whose label value was new after the label's distinct-value limit was reached (counted as \"other\").",
       ("exporter", "label")),
    _m("llm_exporter_spans_received_total", "counter", "", "Spans accepted by the OTLP receiver.", ("exporter",)),
    _m("llm_exporter_spans_duplicate_total", "counter", "", "Spans dropped as duplicates (trace id, span id).",
       ("exporter",)),
    _m("llm_exporter_otlp_rejected_total", "counter", "", "OTLP payloads refused, by reason.", ("exporter", "reason")),
    _m("llm_exporter_store_buffered_spans", "gauge", "", "Spans accepted but not yet stored (in the write-ahead log only).",
       ("exporter",)),
    _m("llm_exporter_store_flushed_spans_total", "counter", "", "Spans written to the trace store (Parquet or ClickHouse).",
       ("exporter",)),
    _m("llm_exporter_store_write_errors_total", "counter", "",
       "Flushes the trace store's sink refused or left unanswered (spans kept in the log and retried), by sink.",
       ("exporter", "sink")),
    _m("llm_exporter_store_quarantined_total", "counter", "",
       "Spans (or replayed log payloads) the trace store could not write, set aside in DIR/_quarantine.", ("exporter",)),
)

# Recorded, not scraped: rules/cost.rules.yaml (goodput/monitoring/costrules.py) records these from the GPU join, the
# prices file and the token counters; the first two are OpenCost's inference names (docs/cost.md).
COST = (
    _m("llm_gpu_hourly_cost_usd", "gauge", "usd/hour",
       "Price of one GPU-hour of gpu_type (the prices file's catalog name) at pricing (on_demand, reserved, spot).",
       ("gpu_type", "pricing")),
    _m("llm_deployment_gpus", "gauge", "",
       "GPUs a deployment holds, by gpu_type (replicas x GPUs per replica, counted from llm_gpu_deployment_info); "
       "gpu_type is empty for a GPU model the prices file does not name.", ("deployment", "gpu_type")),
    _m("llm_total_hourly_cost", "gauge", "usd/hour",
       "What a deployment's GPUs cost per hour: its llm_deployment_gpus x llm_gpu_hourly_cost_usd at the pricing the "
       "spec gives the deployment (OpenCost's name).",
       ("deployment",)),
    _m("llm_cost_per_million_tokens", "gauge", "usd",
       "Dollars per 1M tokens by phase (prompt, generation) over 5 minutes, a generation token weighing as many "
       "prompt tokens as the cost rules' decode weight (OpenCost's name).", ("deployment", "phase")),
    _m("llm_goodput_tokens_per_second", "gauge", "",
       "Input and output tokens per second of requests that met their SLO: each tier and route's tokens x the "
       "smaller of its TTFT and TPOT attainment over 5 minutes.", ("deployment",)),
    _m("llm_cost_per_million_goodput_tokens", "gauge", "usd",
       "Dollars per 1M goodput tokens: llm_total_hourly_cost over llm_goodput_tokens_per_second.", ("deployment",)),
    _m("llm_tenant_hourly_cost", "gauge", "usd/hour",
       "A tenant's share of its deployment's llm_total_hourly_cost, by its cost-weighted tokens (prompt + decode "
       "weight x output) over 5 minutes; the shares of a deployment sum to its cost.", ("deployment", "tier", "tenant")),
    _m("llm_idle_hourly_cost", "gauge", "usd/hour",
       "The part of llm_total_hourly_cost that served no goodput: 1 - goodput tokens over the plan's goodput "
       "capacity of the available replicas, else over the tokens served; all of it when none were.", ("deployment",)),
)

CATALOG: tuple[MetricSpec, ...] = ENGINE + KUBE + GATEWAY + GPU + SELF + COST
_BY_NAME = {m.name: m for m in CATALOG}


def by_name(name: str) -> MetricSpec:
    return _BY_NAME[name]


def names() -> set[str]:
    """Every family name, plus the sample names Prometheus stores (``_bucket``, ``_sum``, ``_count``)."""
    out = set()
    for m in CATALOG:
        out.add(m.name)
        if m.type == "histogram":
            out.update({m.name + "_bucket", m.name + "_sum", m.name + "_count"})
    return out
