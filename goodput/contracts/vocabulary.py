"""The words every part uses for requests, releases and refusals: one definition each.

The simulator writes them into spans and ``requests.parquet``, the exporters into label values, the analyzer and the
console read them back, the rule generator checks ``rules/slos.yaml`` against them. Defining them here, below all
of those, means a part that only reads them (the analyzer, the console) never imports the simulator.
"""

from __future__ import annotations

__all__ = [
    "CIRCUIT_STATES",
    "CIRCUIT_STATE_ATTR",
    "COLD_START_MEASURES",
    "EVENT_KINDS",
    "FINISH_REASONS",
    "GATEWAY_REJECT_REASONS",
    "KV_TRANSFER_SPAN",
    "QUOTA_REASONS",
    "REJECT_REASONS",
    "RELEASE_KINDS",
    "ROOT_SPANS",
    "SCALE_KIND",
    "SCENES",
    "SEGMENT_SPANS",
    "TIERS",
    "TIER_RANK",
]

# how a replica's cold start was measured, the fuller first: its pod's creation to Ready (kube-state-metrics,
# llm_replica_pod_cold_start_seconds), else its engine process' start to its first answered scrape (the engine
# exporter, llm_replica_cold_start_seconds). LLMColdStartAbovePlan's `measured` label, `plan --cold-start-from` and
# the review each take the first a deployment has.
COLD_START_MEASURES = ("pod_created_to_ready", "process_start_to_first_scrape")

# priority tiers, most urgent first: P0 interactive, P1 normal, P2 offline
TIERS = ("P0", "P1", "P2")
TIER_RANK = {tier: rank for rank, tier in enumerate(TIERS)}
# what a workload is for; a route defaults to its scene
SCENES = ("chat", "rag", "code", "batch", "agent")

# what a release changed (a fleet file's ``release_kind``, the releases file's ``kind``)
RELEASE_KINDS = ("model", "quantization", "framework", "prompt_template", "config", "hardware", "routing")
SCALE_KIND = "scale"  # a replica-count change recorded beside the releases (never a release a fleet file declares)
EVENT_KINDS = ("replica_lost", "replica_added", "release")  # a fleet file's timed events

# how a request ended (``llm.finish_reason``)
FINISH_REASONS = ("stop", "length", "abort", "rejected", "timeout", "error")
# what the gateway refuses with, in the order it checks (``busy``: the overload ladder's fail_fast step;
# ``circuit_open``, ``capability``: fallback routing)
GATEWAY_REJECT_REASONS = ("budget_exhausted", "concurrency_limit", "rate_limit", "tpm_limit", "busy", "queue_full",
                          "queue_timeout", "circuit_open", "capability")
# a primary deployment's circuit breaker (goodput/simulator/circuit.py): ``llm.circuit_state`` of a request's
# llm.gateway span, the ``state`` label of llm_gateway_circuit_state
CIRCUIT_STATES = ("closed", "open", "half_open")
CIRCUIT_STATE_ATTR = "llm.circuit_state"
QUOTA_REASONS = GATEWAY_REJECT_REASONS[:4]  # the tenant's own limits: an HTTP client is told 429, retry later
# every reason a request can be refused with (``llm.reject_reason``): the gateway's and the engine's
REJECT_REASONS = (
    "rate_limit", "tpm_limit", "concurrency_limit", "budget_exhausted", "queue_full", "queue_timeout", "kv_capacity",
    "context_too_long", "overloaded", "busy", "circuit_open", "capability",
)

# the span model (docs/design.md "Span model"): a request's root span in goodput's shape and in vLLM's, and the
# segments of its latency in order; the KV transfer sits between prefill and decode on a disaggregated deployment
ROOT_SPANS = ("llm.request", "llm_request")
SEGMENT_SPANS = ("llm.gateway", "llm.queue", "llm.prefill", "llm.decode", "llm.send")
KV_TRANSFER_SPAN = "llm.kv_transfer"
