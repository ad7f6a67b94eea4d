"""``goodput plan autoscale``: a scaling policy per deployment from its plan and cold-start time, written as
``policy.yaml`` (what ``plan evaluate`` replays) and as a KEDA ScaledObject and an HPA v2 manifest.

Derivation (docs/capacity.md, Autoscaling policy):

- min replicas: N+k at the smallest size (1 + k, or one per failure domain); max: the plan's replicas, or the
  need at ``burst_factor`` x peak plus N+k when that is more;
- scale up on the recorded desired-replica series (max of demand / KV / queue wait), on engine-waiting
  requests per replica (target: what one replica receives in ``autoscale_queue_target_seconds``) and on
  requests in the engines per replica (target: what one replica held at its SLO knee; the fast
  signal, since an engine with a large batch budget admits a burst into its batch rather than its queue); no up
  stabilisation, up to half the plan (at least 4) replicas a minute;
- scale down one replica per cold start period after a window of max(600 s, 3 cold starts), draining each
  replica for as long as its slowest tier's longest request takes;
- warm pool: the plan's cold-start buffer, the replicas the demand can outgrow during one cold start.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

from goodput.plan.planfile import PlannedDeployment
from goodput.plan.signals import DESIRED_REPLICAS, RULE_WINDOW_S, RUNNING, THRESHOLDS, WAITING
from goodput.simulator.autoscaler import ScalingPolicy

__all__ = ["DeploymentPolicy", "POLICY_VERSION", "derive", "derive_policies", "hpa_manifest", "keda_manifest",
           "policy_document", "write_outputs"]

POLICY_VERSION = 1
WARM_START_S = 20.0  # a warm replica (weights in host memory, pod running) starts serving in this long


@dataclass(frozen=True)
class DeploymentPolicy:
    deployment: str
    policy: ScalingPolicy

    def as_dict(self) -> dict[str, Any]:
        return {"deployment": self.deployment, **asdict(self.policy)}

    def summary_row(self) -> dict[str, Any]:
        p = self.policy
        return {"deployment": self.deployment, "min": p.min_replicas, "max": p.max_replicas,
                "waiting/replica": p.waiting_per_replica, "in-flight/replica": p.inflight_per_replica,
                "up/min": p.scale_up_replicas,
                "down window s": p.scale_down_stabilisation_s, "drain s": p.drain_s, "warm pool": p.warm_pool,
                "cold start s": p.cold_start_s}


def _mean_tokens(d: PlannedDeployment) -> float:
    rps = sum(s.peak_rps for s in d.demand.streams)
    return sum(s.peak_rps * (s.input_mean + s.output_mean) for s in d.demand.streams) / rps


def derive(d: PlannedDeployment, cold_start_s: float) -> ScalingPolicy:
    h = d.demand.headroom
    need = d.headroom.get("base", 1) + d.headroom.get("growth", 0)
    failure = d.headroom.get("failure_domains", 0)
    floor = max(1 + h.tolerate, h.failure_domains)
    burst_need = math.ceil(need * h.burst_factor - 1e-9) + failure
    rps_per_replica = d.goodput_tokens_per_s / _mean_tokens(d)
    queue_target = THRESHOLDS["autoscale_queue_target_seconds"]
    slowest = max(d.slos[s.tier].ttft_s + d.slos[s.tier].tpot_s * max(s.output_tokens.values()) for s in d.demand.streams)
    rise = (h.burst_factor - 1.0) * min(1.0, cold_start_s / h.burst_rise_s)
    return ScalingPolicy(
        kind="signals",
        min_replicas=min(floor, d.desired_replicas),
        max_replicas=max(d.desired_replicas, burst_need),
        goodput_tokens_per_s=d.goodput_tokens_per_s,
        redundancy=THRESHOLDS["capacity_redundancy"],
        queue_target_s=queue_target,
        kv_target_ratio=THRESHOLDS["autoscale_kv_target_ratio"],
        waiting_per_replica=max(1.0, round(rps_per_replica * queue_target, 1)),
        inflight_per_replica=round(d.concurrency, 1),
        window_s=RULE_WINDOW_S,
        scale_up_replicas=max(4, math.ceil(d.desired_replicas / 2)),
        scale_up_period_s=60.0,
        scale_down_stabilisation_s=max(600.0, 3 * cold_start_s),
        scale_down_replicas=1,
        scale_down_period_s=max(60.0, cold_start_s),
        drain_s=min(1800.0, max(60.0, math.ceil(slowest))),
        cold_start_s=cold_start_s,
        warm_pool=math.ceil(need * rise - 1e-9),
        warm_start_s=min(WARM_START_S, cold_start_s),
    )


def derive_policies(planned: list[PlannedDeployment], cold_start_s: float | None,
                    measured: dict[str, float] | None = None) -> list[DeploymentPolicy]:
    """Each deployment's policy on its ``measured`` cold start, else ``cold_start_s``, else the one its plan was
    sized on (its headroom's)."""
    measured = measured or {}

    def cold(d: PlannedDeployment) -> float:
        return measured.get(d.name, d.demand.headroom.cold_start_s if cold_start_s is None else cold_start_s)
    return [DeploymentPolicy(d.name, derive(d, cold(d))) for d in planned]


def _behavior(p: ScalingPolicy) -> dict[str, Any]:
    return {
        "scaleUp": {"stabilizationWindowSeconds": int(p.scale_up_stabilisation_s),
                    "policies": [{"type": "Pods", "value": p.scale_up_replicas, "periodSeconds": int(p.scale_up_period_s)}]},
        "scaleDown": {"stabilizationWindowSeconds": int(p.scale_down_stabilisation_s),
                      "policies": [{"type": "Pods", "value": p.scale_down_replicas,
                                    "periodSeconds": int(p.scale_down_period_s)}]},
    }


def keda_manifest(dp: DeploymentPolicy, namespace: str, prometheus: str) -> dict[str, Any]:
    """A ScaledObject with Prometheus triggers; KEDA scales to the largest. All are ``AverageValue`` so the HPA
    computes ceil(value / threshold): the recorded count itself, engine-waiting requests and requests in the
    engines over their targets per replica."""
    p, name = dp.policy, dp.deployment
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "scaleTargetRef": {"name": name},
            "minReplicaCount": p.min_replicas,
            "maxReplicaCount": p.max_replicas,
            "pollingInterval": int(p.scrape_interval_s),
            "cooldownPeriod": int(p.scale_down_stabilisation_s),
            "advanced": {"horizontalPodAutoscalerConfig": {"behavior": _behavior(p)}},
            "triggers": [
                {"type": "prometheus", "name": "desired-replicas", "metricType": "AverageValue",
                 "metadata": {"serverAddress": prometheus, "threshold": "1",
                              "query": f'max({DESIRED_REPLICAS}{{deployment="{name}"}})'}},
                {"type": "prometheus", "name": "waiting-per-replica", "metricType": "AverageValue",
                 "metadata": {"serverAddress": prometheus, "threshold": f"{p.waiting_per_replica:g}",
                              "query": f'sum({WAITING}{{deployment="{name}"}})'}},
            ] + ([
                {"type": "prometheus", "name": "inflight-per-replica", "metricType": "AverageValue",
                 "metadata": {"serverAddress": prometheus, "threshold": f"{p.inflight_per_replica:g}",
                              "query": f'sum({RUNNING}{{deployment="{name}"}}) + sum({WAITING}{{deployment="{name}"}})'}},
            ] if p.inflight_per_replica > 0 else []),
        },
    }


def hpa_manifest(dp: DeploymentPolicy, namespace: str) -> dict[str, Any]:
    """The same policy as a plain HPA v2 over external metrics (prometheus-adapter's ``externalRules``)."""
    p, name = dp.policy, dp.deployment
    sel = {"matchLabels": {"deployment": name}}
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
            "minReplicas": p.min_replicas,
            "maxReplicas": p.max_replicas,
            "behavior": _behavior(p),
            "metrics": [
                {"type": "External", "external": {"metric": {"name": DESIRED_REPLICAS, "selector": sel},
                                                  "target": {"type": "AverageValue", "averageValue": "1"}}},
                {"type": "External", "external": {"metric": {"name": WAITING, "selector": sel},
                                                  "target": {"type": "AverageValue",
                                                             "averageValue": f"{p.waiting_per_replica:g}"}}},
            ] + ([  # the running batch; the waiting requests have the metric above
                {"type": "External", "external": {"metric": {"name": RUNNING, "selector": sel},
                                                  "target": {"type": "AverageValue",
                                                             "averageValue": f"{p.inflight_per_replica:g}"}}},
            ] if p.inflight_per_replica > 0 else []),
        },
    }


def policy_document(policies: list[DeploymentPolicy]) -> dict[str, Any]:
    return {"policy_version": POLICY_VERSION,
            "deployments": {dp.deployment: asdict(dp.policy) for dp in policies}}


def write_outputs(policies: list[DeploymentPolicy], out: Path, *, namespace: str, prometheus: str) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "policy.yaml", out / "keda-scaledobject.yaml", out / "hpa.yaml"]
    paths[0].write_text(yaml.safe_dump(policy_document(policies), sort_keys=False), encoding="utf-8")
    paths[1].write_text(yaml.safe_dump_all([keda_manifest(p, namespace, prometheus) for p in policies], sort_keys=False),
                        encoding="utf-8")
    paths[2].write_text(yaml.safe_dump_all([hpa_manifest(p, namespace) for p in policies], sort_keys=False),
                        encoding="utf-8")
    return paths
