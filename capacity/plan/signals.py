"""The Prometheus series the autoscaling policy scales on, and the thresholds the recording rules use.

The recorded desired-replica series is built by ``goodput rules generate`` (``goodput/rulegen.py``, above this
layer); ``tests/capacity/test_plan_autoscale.py`` checks that every name here is one the generated rules record
and that the thresholds equal ``rules/slos.yaml``'s. Engine metric names come from the catalog.
"""

from __future__ import annotations

from exporters.catalog import by_name

__all__ = ["DESIRED_REPLICAS", "RECORDED", "RULE_WINDOW_S", "RUNNING", "THRESHOLDS", "WAITING"]

# max over the demand, kv and queue signals (docs/autoscaling.md)
DESIRED_REPLICAS = "deployment:llm_autoscale_desired_replicas:max"
RECORDED = (
    DESIRED_REPLICAS,
    "deployment_signal:llm_autoscale_desired_replicas:ceil",
    "deployment_tier:llm_gateway_queue_wait_seconds:p95_5m",
    "deployment:llm_kv_cache_usage_ratio:avg",
    "deployment:llm_gateway_tokens:rate5m",
)
WAITING = by_name("llm_requests_waiting").name  # requests queued in each engine, per replica
RUNNING = by_name("llm_requests_running").name  # sequences in each engine's running batch
# rules/slos.yaml thresholds the recorded signal is computed with
THRESHOLDS = {"capacity_redundancy": 1.2, "autoscale_kv_target_ratio": 0.8, "autoscale_queue_target_seconds": 0.5}
RULE_WINDOW_S = 300.0  # the recording rules' rate and quantile window (5m)
