"""The Prometheus series the autoscaling policy scales on, and the thresholds the recording rules use.

Series names are not copied here: the recorded desired-replica series is named in ``goodput/contracts/recorded.py``
(which ``goodput rules generate`` records under that name) and the engine metrics come from the catalog.
``tests/plan/test_plan_autoscale.py`` checks that the thresholds equal ``rules/slos.yaml``'s.
"""

from __future__ import annotations

from goodput.contracts.catalog import by_name
from goodput.contracts.recorded import AUTOSCALE_DESIRED

__all__ = ["DESIRED_REPLICAS", "RULE_WINDOW_S", "RUNNING", "THRESHOLDS", "WAITING"]

DESIRED_REPLICAS = AUTOSCALE_DESIRED  # max over the demand, kv and queue signals (docs/autoscaling.md)
WAITING = by_name("llm_requests_waiting").name  # requests queued in each engine, per replica
RUNNING = by_name("llm_requests_running").name  # sequences in each engine's running batch
# rules/slos.yaml thresholds the recorded signal is computed with
THRESHOLDS = {"capacity_redundancy": 1.2, "autoscale_kv_target_ratio": 0.8, "autoscale_queue_target_seconds": 0.5}
RULE_WINDOW_S = 300.0  # the recording rules' rate and quantile window (5m)
