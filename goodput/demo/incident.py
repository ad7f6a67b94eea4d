"""The demo's scripted incident: the one thing that goes wrong in the fleet ``goodput demo`` runs.

Before it, every tier meets its SLO (rules/slos.yaml) and no pool is short of replicas by the plan
(tests/demo/test_demo.py measures both in virtual time): the fleet file's own events are dropped, and so are its
unscripted overloads (``bursts``; a ``batch`` arrival's batches become a steady trickle at its rate), which would
otherwise page on their own. The RAG deployment runs on ``REPLICAS`` replica with at most ``MAX_NUM_SEQS``
requests in a batch, shorter prompts than the fleet file's (``INPUT_TOKENS``) and a queue timeout of an hour, at
``RATE`` requests per second: within its SLO with room. At ``INCIDENT_AT_S`` a prompt-template release doubles
its input; each request now holds its slot longer, the replica falls behind, the queue wait rises (not timeouts
at a plateau) and ``LLMQueueWaitRisingReplicasShort`` pages. At ``RESCUE_AT_S`` ``ADDED_REPLICAS`` replicas are
added (``COLD_START_S`` cold start; a scheduled add standing in for the autoscaler), they drain the backlog and
the alert resolves; the longer prompts are then served within the SLO. Times are virtual seconds from the
fleet's start.

The demo's RAG pool is not the fleet file's, so its plan row is its own (``RAG_REPLICA_GOODPUT``: tokens per
second one such replica serves within the SLO, between the 9,000 it serves before the release and the 15,000
of doubled prompts it still serves in time).
"""

from __future__ import annotations

import copy

from goodput.foundation.errors import ConfigError

__all__ = ["ADDED_REPLICAS", "ALERT", "COLD_START_S", "INCIDENT_AT_S", "RAG_REPLICA_GOODPUT", "REPLICAS",
           "RESCUE_AT_S", "incident_fleet", "incident_plan", "rag_deployment"]

ALERT = "LLMQueueWaitRisingReplicasShort"
INCIDENT_AT_S = 480.0  # eight one-minute buckets before the release, enough for a change point; five of them met
RESCUE_AT_S = INCIDENT_AT_S + 900.0
INPUT_SCALE = 2.0
REPLICAS = 1
RATE = 2.4  # requests/s: one replica of MAX_NUM_SEQS serves it in time, and not twice the input
MAX_NUM_SEQS = 20
INPUT_TOKENS = {"p50": 3000, "p95": 10000, "p99": 16000, "max": 24000}  # doubled, still prefilled within the TTFT SLO
QUEUE_TIMEOUT_S = 3600.0  # the backlog shows as queue wait that keeps rising, not as timeouts at a plateau
ADDED_REPLICAS = 3
COLD_START_S = 120.0
# tokens/s per replica of the demo's RAG pool within the SLO: one replica meets it at the pre-release demand
# (~9-10k tokens/s, 1.2x that with the rules' headroom) and misses it at the doubled input (~19-21k)
RAG_REPLICA_GOODPUT = 15000.0



def rag_deployment(fleet: dict, source: str) -> str:
    """The deployment that serves the fleet's RAG workload."""
    for w in fleet.get("workloads") or []:
        if isinstance(w, dict) and "rag" in (w.get("scene"), w.get("route")):
            return str(w["deployment"])
    raise ConfigError(source, "workloads", "the scripted incident needs a workload with scene or route 'rag'; "
                      "run with --no-incident")


def _steady(arrival: dict) -> dict:
    """An arrival without its scripted overloads: bursts dropped, a batch process a steady one at its rate."""
    out = {k: v for k, v in arrival.items() if k not in ("bursts", "batches")}
    if out.get("process") in ("batch", "burst"):
        out["process"] = "poisson"
    return out


def incident_fleet(fleet: dict, source: str, only_rag: bool = False) -> dict:
    """``fleet`` with the incident as its only events and without its own overloads; ``only_rag`` keeps the RAG
    deployment and its workloads alone (the compressed run)."""
    dep = rag_deployment(fleet, source)
    out = copy.deepcopy(fleet)
    for d in out["deployments"]:
        if d.get("name") == dep:
            d["replicas"] = REPLICAS
            d.setdefault("engine", {}).update(max_queue_time_s=QUEUE_TIMEOUT_S, max_num_seqs=MAX_NUM_SEQS)
    for w in out["workloads"]:
        if isinstance(w.get("arrival"), dict):
            w["arrival"] = _steady(w["arrival"])
            if w.get("deployment") == dep:
                w["arrival"]["rate"] = RATE
                w["input_tokens"] = dict(INPUT_TOKENS)
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


def incident_plan(plan: dict, deployment: str) -> dict:
    """The plan file's mapping with the demo's RAG pool's own row (its replicas are not the fleet file's)."""
    out = copy.deepcopy(plan)
    deps = out.setdefault("deployments", {})
    deps[deployment] = {**(deps.get(deployment) or {}), "replica_goodput_tokens_per_second": RAG_REPLICA_GOODPUT,
                        "desired_replicas": REPLICAS}
    return out
