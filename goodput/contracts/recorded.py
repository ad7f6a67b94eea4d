"""Names of the recorded series (Prometheus recording rules) that something below the rule generator queries.

``goodput rules generate`` (``goodput/monitoring/rulegen.py``, the top layer) records these series under these names, and
the autoscaling policy ``goodput plan autoscale`` emits (``goodput/plan/autoscale.py``) queries them: one home
for both, below both. Names follow ``level:metric:operation``; the metrics are the catalog's.
"""

from __future__ import annotations

from goodput.contracts.catalog import by_name

__all__ = ["ARRIVALS_RATE", "AUTOSCALE_DESIRED", "AUTOSCALE_SIGNAL", "GPU_PRICE_PAID", "KV_USAGE_AVG", "QUEUE_WAIT_NOW",
           "QUEUE_WAIT_P95", "TOKENS_RATE", "WAITING", "tier_quantile"]


def tier_quantile(metric: str, quantile: str) -> str:
    """The per deployment and tier ``quantile`` (p50, p95, p99) of a latency histogram over 5 minutes."""
    return f"deployment_tier:{metric}:{quantile}_5m"


# requests per second arriving at the gateway, per deployment (counted at admission, never at completion)
ARRIVALS_RATE = f"deployment:{by_name('llm_gateway_requests_arrived_total').name.removesuffix('_total')}:rate5m"
# input and output tokens per second, per deployment (the demand the replicas serve): the arrivals times the tokens
# of a finished request, so a backlog that drains after a fix does not read as demand
TOKENS_RATE = "deployment:llm_gateway_tokens:rate5m"
KV_USAGE_AVG = f"deployment:{by_name('llm_kv_cache_usage_ratio').name}:avg"
QUEUE_WAIT_P95 = tier_quantile(by_name("llm_gateway_queue_wait_seconds").name, "p95")
# requests queued in the engines, per deployment; and how long requests wait now, per deployment and tier: the age
# of the oldest still queued or the p95 queue wait of those scheduled in the last 5 minutes, whichever is longer
WAITING = f"deployment:{by_name('llm_requests_waiting').name}:sum"
QUEUE_WAIT_NOW = "deployment_tier:llm_gateway_queue_wait_now_seconds:max"
# one replica count per signal (label ``signal``: demand, kv, queue), and their maximum: what to scale to
AUTOSCALE_SIGNAL = "deployment_signal:llm_autoscale_desired_replicas:ceil"
AUTOSCALE_DESIRED = "deployment:llm_autoscale_desired_replicas:max"
# the price a deployment pays per GPU of a type (labels deployment, gpu_type, pricing), at the pricing
# rules/slos.yaml's ``pricing:`` gives it (rules/cost.rules.yaml); none where that pricing has no price for the type
GPU_PRICE_PAID = f"deployment_gpu_type:{by_name('llm_gpu_hourly_cost_usd').name}:paid"
