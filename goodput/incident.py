"""The demo's scripted incident, as events in the fleet file it runs.

The RAG deployment runs on ``REPLICAS`` replica at ``RATE`` requests per second, enough with a little room (p95
queue wait under a second). A few minutes in, a prompt-template release doubles its input length; it falls behind
(its queue timeout is raised to an hour, so the backlog shows as a queue wait that keeps rising rather than as
timeouts; KV usage climbs), the composite alert ``LLMQueueWaitRisingReplicasShort`` pages, and later a
scheduled replica add (standing in for the autoscaler until the plan issue lands) brings it back. Times are
virtual seconds from the fleet's start.
"""

from __future__ import annotations

import copy

from goodput.foundation.errors import ConfigError

__all__ = ["ALERT", "INCIDENT_AT_S", "RESCUE_AT_S", "incident_fleet", "rag_deployment"]

ALERT = "LLMQueueWaitRisingReplicasShort"
INCIDENT_AT_S = 480.0  # eight one-minute buckets before the release, enough for a change point
RESCUE_AT_S = INCIDENT_AT_S + 900.0
INPUT_SCALE = 2.0
REPLICAS = 1
RATE = 1.8  # requests/s: one replica serves it with a p95 queue wait under a second, and not twice the input
QUEUE_TIMEOUT_S = 3600.0  # the backlog shows as queue wait that keeps rising, not as timeouts at a plateau
ADDED_REPLICAS = 3
COLD_START_S = 120.0


def rag_deployment(fleet: dict, source: str) -> str:
    """The deployment that serves the fleet's RAG workload."""
    for w in fleet.get("workloads") or []:
        if isinstance(w, dict) and "rag" in (w.get("scene"), w.get("route")):
            return str(w["deployment"])
    raise ConfigError(source, "workloads", "the scripted incident needs a workload with scene or route 'rag'; "
                      "run with --no-incident")


def incident_fleet(fleet: dict, source: str, only_rag: bool = False) -> dict:
    """``fleet`` with the incident as its events (its own events dropped); ``only_rag`` keeps the RAG deployment
    and its workloads alone (the compressed run)."""
    dep = rag_deployment(fleet, source)
    out = copy.deepcopy(fleet)
    for d in out["deployments"]:
        if d.get("name") == dep:
            d["replicas"] = REPLICAS
            d.setdefault("engine", {})["max_queue_time_s"] = QUEUE_TIMEOUT_S
    for w in out["workloads"]:
        if w.get("deployment") == dep and isinstance(w.get("arrival"), dict):
            w["arrival"]["rate"] = RATE
    if only_rag:
        out["deployments"] = [d for d in out["deployments"] if d.get("name") == dep]
        out["workloads"] = [w for w in out["workloads"] if w.get("deployment") == dep]
    out["events"] = [
        {"at": INCIDENT_AT_S, "kind": "release", "deployment": dep, "release_kind": "prompt_template",
         "from": "rag-v3", "to": "rag-v4", "note": "retrieval returns twice the passages",
         "effects": {"input_scale": INPUT_SCALE}},
        *({"at": RESCUE_AT_S, "kind": "replica_added", "deployment": dep, "cold_start_s": COLD_START_S}
          for _ in range(ADDED_REPLICAS)),
    ]
    return out
