"""The Kubernetes objects of a goodput install beside kube-prometheus-stack, as plain dicts (``goodput deploy
kubernetes`` writes them; docs/kubernetes.md says what each is for).

Pure functions of their inputs: the generated rule files, rules/alertmanager.yaml, the dashboards and, for the
KEDA ScaledObject, the policies of ``goodput plan autoscale`` (its own ``keda_manifest``). Every object carries
``release: NAME`` so kube-prometheus-stack's default selectors (``ruleSelector``, ``podMonitorSelector``,
``serviceMonitorSelector``) pick it up. Engines are scraped directly by PodMonitors whose relabelings set the
target labels the normalization rules rely on: ``deployment`` from the pod label ``goodput.dev/deployment`` and
``replica`` from the pod name (the operator adds ``namespace`` and ``pod``).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

from goodput.contracts.catalog import by_name
from goodput.exporters.config import PlanEntry
from goodput.foundation.errors import ConfigError
from goodput.plan.autoscale import DeploymentPolicy, keda_manifest

__all__ = ["DEPLOYMENT_LABEL", "ENGINES", "ENGINE_LABEL", "Engine", "JOB_LABEL", "MAX_CONFIG_MAP_BYTES",
           "PLAN_GOODPUT", "PLAN_REPLICAS", "POD_RESOURCES_DIR", "Settings", "manifests", "parse_matcher", "plan_rule"]

DEPLOYMENT_LABEL = "goodput.dev/deployment"  # on every engine pod: the serving pool it belongs to
ENGINE_LABEL = "goodput.dev/engine"  # vllm, sglang, tgi or triton: which PodMonitor scrapes it
POD_RESOURCES_DIR = "/var/lib/kubelet/pod-resources"
TARGETS_MOUNT = "/etc/goodput/targets"
TRACE_STORE_MOUNT = "/var/lib/goodput/traces"
TRACE_STORE_SIZE = "50Gi"  # the request exporter's Parquet store and write-ahead log
PLAN_GOODPUT = by_name("llm_capacity_replica_goodput_tokens_per_second").name
PLAN_REPLICAS = by_name("llm_deployment_replicas").name
UID = 65532  # the image's unprivileged user
MAX_CONFIG_MAP_BYTES = 1_048_576  # Kubernetes refuses a larger ConfigMap (its data, as etcd stores it)


@dataclass(frozen=True)
class Engine:
    name: str
    port: int  # the engine's default metrics port; the container must declare it (PodMonitor portNumber)
    path: str = "/metrics"


# Default metrics ports: vLLM's OpenAI server (--port 8000), SGLang's server (--port 30000, --enable-metrics),
# TGI's --prometheus-port (9000), Triton's metrics endpoint (--metrics-port 8002).
ENGINES = (Engine("vllm", 8000), Engine("sglang", 30000), Engine("tgi", 9000), Engine("triton", 8002))


@dataclass(frozen=True)
class Settings:
    namespace: str  # where goodput's objects live
    image: str  # a goodput image whose entrypoint is `goodput` (docs/kubernetes.md builds one)
    release: str  # kube-prometheus-stack's Helm release: the `release` label its selectors match
    serving_namespace: str  # where the engines' Deployments are (the KEDA ScaledObjects must be beside them)
    prometheus: str  # the Prometheus URL KEDA queries


@dataclass(frozen=True)
class _Exporter:
    name: str
    job: str  # the `job` label the rules expect (LLMExporterDown's up{job=~"llm-(gpu|engine|requests)"})
    port: int
    cpu: tuple[str, str]  # request, limit
    memory: tuple[str, str]


GPU = _Exporter("gpu-exporter", "llm-gpu", 9400, ("50m", "500m"), ("64Mi", "256Mi"))
ENGINE = _Exporter("engine-exporter", "llm-engine", 9401, ("100m", "1"), ("128Mi", "1Gi"))  # 8 MiB per target read at most
REQUESTS = _Exporter("request-exporter", "llm-requests", 9402, ("250m", "2"), ("512Mi", "2Gi"))  # 200k buffered spans at most
OTLP_PORT = 4318
JOB_LABEL = "goodput.dev/job"  # on each exporter's Service; its ServiceMonitor takes the job name from it


def _labels(s: Settings, component: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": f"goodput-{component}", "app.kubernetes.io/part-of": "goodput",
            "release": s.release}


def _meta(s: Settings, name: str, component: str, namespace: str | None = None) -> dict[str, Any]:
    return {"name": name, "namespace": namespace or s.namespace, "labels": _labels(s, component)}


def _selector(component: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": f"goodput-{component}"}


# --- Prometheus: rules, engine PodMonitors, exporter ServiceMonitors -------------------------------------------

def _in_namespace(rule: dict, namespace: str) -> dict:
    """An alerting rule whose alerts carry ``namespace: <goodput's namespace>``: the operator's default matcher
    strategy (OnNamespace) adds ``namespace="<the AlertmanagerConfig's namespace>"`` to its routes and inhibit rules,
    so only alerts with that label reach goodput's receivers (and no other team's alert does). The engine pod's own
    namespace, where an alert had one, gives way; its ``pod`` label still names it."""
    if not isinstance(rule, dict) or "alert" not in rule:  # a recording rule (or a malformed one, for promtool)
        return rule
    return {**rule, "labels": {**(rule.get("labels") or {}), "namespace": namespace}}


def prometheus_rule(s: Settings, file_name: str, rules: dict) -> dict[str, Any]:
    """One PrometheusRule per rule file (``llm.rules.yaml`` -> ``goodput-llm``, the mixin's
    ``prometheus_alerts.yaml`` -> ``goodput-prometheus-alerts``), its groups verbatim but for the alerts' namespace."""
    stem = file_name.removesuffix(".yaml").removesuffix(".rules").replace("_", "-").lower()
    groups = [{**g, "rules": [_in_namespace(r, s.namespace) for r in g["rules"]]}
              if isinstance(g, dict) and isinstance(g.get("rules"), list) else g for g in rules["groups"]]
    return {"apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule",
            "metadata": _meta(s, f"goodput-{stem}", "rules"), "spec": {"groups": groups}}


def _target_relabelings() -> list[dict[str, Any]]:
    return [
        {"sourceLabels": [f"__meta_kubernetes_pod_label_{re.sub(r'[^a-zA-Z0-9_]', '_', DEPLOYMENT_LABEL)}"],
         "targetLabel": "deployment", "action": "replace"},
        {"sourceLabels": ["__meta_kubernetes_pod_name"], "targetLabel": "replica", "action": "replace"},
    ]


def pod_monitor(s: Settings, engine: Engine) -> dict[str, Any]:
    """Prometheus scrapes every pod labelled ``goodput.dev/engine: <engine>`` (in any namespace) on the engine's
    metrics port, with the target labels ``deployment`` and ``replica``."""
    return {
        "apiVersion": "monitoring.coreos.com/v1", "kind": "PodMonitor",
        "metadata": _meta(s, f"goodput-{engine.name}", "engines"),
        "spec": {
            "namespaceSelector": {"any": True},
            "selector": {"matchLabels": {ENGINE_LABEL: engine.name},
                         "matchExpressions": [{"key": DEPLOYMENT_LABEL, "operator": "Exists"}]},
            "podMetricsEndpoints": [{"portNumber": engine.port, "path": engine.path, "interval": "15s",
                                     "relabelings": _target_relabelings()}],
        },
    }


def service_monitor(s: Settings, exporter: _Exporter) -> dict[str, Any]:
    """Prometheus scrapes an exporter's Service, under the job name the rules expect (from the Service's
    ``goodput.dev/job`` label). ``honorLabels``: the exporters publish ``deployment`` and ``replica`` themselves,
    which must win over any target label of the same name."""
    endpoint: dict[str, Any] = {"port": "metrics", "path": "/metrics", "interval": "15s", "honorLabels": True}
    if exporter is GPU:  # which node a GPU is on, for the GPU panels' hostname-less views
        endpoint["relabelings"] = [{"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "node",
                                    "action": "replace"}]
    return {
        "apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor",
        "metadata": _meta(s, f"goodput-{exporter.name}", exporter.name),
        "spec": {"selector": {"matchLabels": _selector(exporter.name)}, "jobLabel": JOB_LABEL,
                 "namespaceSelector": {"matchNames": [s.namespace]}, "endpoints": [endpoint]},
    }


def plan_rule(s: Settings, plan: list[PlanEntry]) -> dict[str, Any]:
    """The capacity plan (``plan.yaml``) as recorded series, what the engine exporter publishes from ``--plan``:
    per deployment ``llm_capacity_replica_goodput_tokens_per_second`` (``deployment:llm_replicas_required:ceil``
    divides the demand by it) and, where the plan gives it, ``llm_deployment_replicas{state="desired"}``. Recorded
    by Prometheus, they need no process in the scrape path; re-apply after ``goodput plan replicas`` changes the plan."""
    rules: list[dict[str, Any]] = []
    for e in plan:
        rules.append({"record": PLAN_GOODPUT, "expr": f"vector({e.goodput_tokens_per_s!r})",
                      "labels": {"deployment": e.name}})
        if e.desired_replicas is not None:
            rules.append({"record": PLAN_REPLICAS, "expr": f"vector({e.desired_replicas})",
                          "labels": {"deployment": e.name, "state": "desired"}})
    return {"apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule",
            "metadata": _meta(s, "goodput-plan", "rules"), "spec": {"groups": [{"name": "llm.plan", "rules": rules}]}}


# --- Alertmanager --------------------------------------------------------------------------------------------

_MATCHER = re.compile(r'^\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*("(?:[^"\\]|\\.)*")\s*$')


def parse_matcher(text: str, source: str, key: str) -> dict[str, str]:
    """``severity="page"`` -> ``{name: severity, matchType: "=", value: page}`` (AlertmanagerConfig's form)."""
    m = _MATCHER.match(text) if isinstance(text, str) else None
    if m is None:
        raise ConfigError(source, key, f'expected a matcher like name="value", got {text!r}')
    return {"name": m[1], "matchType": m[2], "value": json.loads(m[3])}


def _matchers(items: Any, source: str, key: str) -> list[dict[str, str]]:
    if not isinstance(items, list):
        raise ConfigError(source, key, "expected a list of matchers")
    return [parse_matcher(t, source, f"{key}[{i}]") for i, t in enumerate(items)]


_ROUTE_KEYS = {"receiver": "receiver", "group_by": "groupBy", "group_wait": "groupWait",
               "group_interval": "groupInterval", "repeat_interval": "repeatInterval", "continue": "continue"}
_WEBHOOK_KEYS = {"url": "url", "send_resolved": "sendResolved", "max_alerts": "maxAlerts"}


def _camel(d: dict, keys: dict[str, str], source: str, key: str) -> dict[str, Any]:
    unknown = sorted(set(d) - set(keys) - {"routes", "matchers"})
    if unknown:
        raise ConfigError(source, f"{key}.{unknown[0]}", f"not converted to an AlertmanagerConfig; allowed: "
                                                         f"{', '.join(sorted(keys))}")
    return {keys[k]: v for k, v in d.items() if k in keys}


def _route(d: Any, source: str, key: str) -> dict[str, Any]:
    if not isinstance(d, dict):
        raise ConfigError(source, key, "expected a route mapping")
    out = _camel(d, _ROUTE_KEYS, source, key)
    if "matchers" in d:
        out["matchers"] = _matchers(d["matchers"], source, f"{key}.matchers")
    if "routes" in d:
        out["routes"] = [_route(r, source, f"{key}.routes[{i}]") for i, r in enumerate(d["routes"] or [])]
    return out


def _receiver(d: Any, source: str, key: str) -> dict[str, Any]:
    if not isinstance(d, dict) or not isinstance(d.get("name"), str):
        raise ConfigError(source, key, "expected a receiver with a name")
    unknown = sorted(set(d) - {"name", "webhook_configs"})
    if unknown:
        raise ConfigError(source, f"{key}.{unknown[0]}", "only webhook receivers are converted")
    hooks = d.get("webhook_configs") or []
    return {"name": d["name"], "webhookConfigs": [_camel(h, _WEBHOOK_KEYS, source, f"{key}.webhook_configs[{i}]")
                                                  for i, h in enumerate(hooks)]}


def alertmanager_config(s: Settings, am: dict, source: str) -> dict[str, Any]:
    """rules/alertmanager.yaml as an AlertmanagerConfig (v1alpha1: camelCase keys, matchers as objects). Its
    ``global`` section has no place there (the Alertmanager's own configuration holds it) and is left out."""
    if not isinstance(am.get("route"), dict) or not isinstance(am.get("receivers"), list):
        raise ConfigError(source, "", "expected an Alertmanager configuration with 'route' and 'receivers'")
    inhibit = []
    for i, r in enumerate(am.get("inhibit_rules") or []):
        k = f"inhibit_rules[{i}]"
        inhibit.append({"sourceMatch": _matchers(r.get("source_matchers"), source, f"{k}.source_matchers"),
                        "targetMatch": _matchers(r.get("target_matchers"), source, f"{k}.target_matchers"),
                        "equal": list(r.get("equal") or [])})
    spec = {"route": _route(am["route"], source, "route"),
            "receivers": [_receiver(r, source, f"receivers[{i}]") for i, r in enumerate(am["receivers"])]}
    if inhibit:
        spec["inhibitRules"] = inhibit
    return {"apiVersion": "monitoring.coreos.com/v1alpha1", "kind": "AlertmanagerConfig",
            "metadata": _meta(s, "goodput", "alertmanager"), "spec": spec}


# --- Grafana -------------------------------------------------------------------------------------------------

def dashboard_config_map(s: Settings, file_name: str, text: str) -> dict[str, Any]:
    """A dashboard for Grafana's sidecar, which loads every ConfigMap labelled ``grafana_dashboard: "1"``."""
    if len(text.encode()) > MAX_CONFIG_MAP_BYTES:
        raise ConfigError(file_name, "", f"{len(text.encode()):,} bytes; a ConfigMap holds at most "
                                         f"{MAX_CONFIG_MAP_BYTES:,}")
    stem = file_name.removesuffix(".json")
    meta = _meta(s, f"goodput-dashboard-{stem}", "dashboards")
    meta["labels"]["grafana_dashboard"] = "1"
    meta["annotations"] = {"grafana_folder": "goodput"}  # the sidecar's folderAnnotation, where it is set
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {file_name: text}}


# --- the exporters -------------------------------------------------------------------------------------------

def _container(s: Settings, exporter: _Exporter, args: list[str], ports: list[dict], probe_port: str) -> dict:
    probe = {"httpGet": {"path": "/healthz", "port": probe_port}, "periodSeconds": 15, "failureThreshold": 4}
    return {
        "name": exporter.name, "image": s.image,
        "args": args + ["--host", "0.0.0.0", "--port", str(exporter.port)],  # the pod's address, for its Service
        "ports": ports,
        "resources": {"requests": {"cpu": exporter.cpu[0], "memory": exporter.memory[0]},
                      "limits": {"cpu": exporter.cpu[1], "memory": exporter.memory[1]}},
        "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                            "privileged": False, "capabilities": {"drop": ["ALL"]}},
        "readinessProbe": probe, "livenessProbe": {**probe, "initialDelaySeconds": 30},
        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
    }


def _pod(containers: list[dict], volumes: list[dict], *, uid: int = UID) -> dict[str, Any]:
    security: dict[str, Any] = {"runAsUser": uid, "runAsGroup": uid, "runAsNonRoot": uid != 0,
                                "seccompProfile": {"type": "RuntimeDefault"}}
    if uid != 0:  # the volumes it writes (the trace store) are its group's
        security["fsGroup"] = uid
    return {"automountServiceAccountToken": False, "securityContext": security, "containers": containers,
            "volumes": [{"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}}, *volumes]}


def _metrics_port(exporter: _Exporter) -> dict[str, Any]:
    return {"name": "metrics", "containerPort": exporter.port, "protocol": "TCP"}


def _service(s: Settings, exporter: _Exporter, ports: list[dict], *, headless: bool = False) -> dict[str, Any]:
    spec: dict[str, Any] = {"selector": _selector(exporter.name),
                            "ports": [{"name": p["name"], "port": p["containerPort"], "targetPort": p["name"],
                                       "protocol": "TCP"} for p in ports]}
    if headless:
        spec["clusterIP"] = "None"
    meta = _meta(s, f"goodput-{exporter.name}", exporter.name)
    meta["labels"][JOB_LABEL] = exporter.job
    return {"apiVersion": "v1", "kind": "Service", "metadata": meta, "spec": spec}


def _deployment(s: Settings, exporter: _Exporter, container: dict, volumes: list[dict], **spec: Any) -> dict:
    labels = _labels(s, exporter.name)
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": _meta(s, f"goodput-{exporter.name}", exporter.name),
            "spec": {"replicas": 1, "selector": {"matchLabels": _selector(exporter.name)}, **spec,
                     "template": {"metadata": {"labels": labels}, "spec": _pod([container], volumes)}}}


def engine_exporter(s: Settings, targets: list) -> list[dict[str, Any]]:
    """The engine exporter, for fleets that want normalization in the scrape path rather than as recording rules;
    its targets in Prometheus file_sd format from a ConfigMap (which it reloads when the ConfigMap changes)."""
    config = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": _meta(s, "goodput-engine-targets", ENGINE.name),
              "data": {"targets.yaml": json.dumps(targets, indent=2) + "\n"}}
    ports = [_metrics_port(ENGINE)]
    container = _container(s, ENGINE, ["exporter", "engine", "--targets", f"{TARGETS_MOUNT}/targets.yaml"], ports,
                           "metrics")
    container["volumeMounts"].append({"name": "targets", "mountPath": TARGETS_MOUNT, "readOnly": True})
    volumes = [{"name": "targets", "configMap": {"name": "goodput-engine-targets"}}]
    return [config, _deployment(s, ENGINE, container, volumes), _service(s, ENGINE, ports)]


def request_exporter(s: Settings) -> list[dict[str, Any]]:
    """The request exporter and OTLP receiver, its trace store on a volume that outlives the pod (spans it has
    acknowledged are in its write-ahead log there); ``Recreate`` since one volume has one writer."""
    claim = {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
             "metadata": _meta(s, "goodput-trace-store", REQUESTS.name),
             "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": TRACE_STORE_SIZE}}}}
    ports = [_metrics_port(REQUESTS), {"name": "otlp-http", "containerPort": OTLP_PORT, "protocol": "TCP"}]
    container = _container(s, REQUESTS, ["exporter", "requests", "--store", TRACE_STORE_MOUNT,
                                         "--otlp-port", str(OTLP_PORT)], ports, "otlp-http")
    container["volumeMounts"].append({"name": "trace-store", "mountPath": TRACE_STORE_MOUNT})
    volumes = [{"name": "trace-store", "persistentVolumeClaim": {"claimName": "goodput-trace-store"}}]
    return [claim, _deployment(s, REQUESTS, container, volumes, strategy={"type": "Recreate"}),
            _service(s, REQUESTS, ports)]


def gpu_exporter(s: Settings) -> list[dict[str, Any]]:
    """The GPU exporter on every GPU node: NVML through the NVIDIA container runtime (no GPU requested, so the
    device plugin's GPUs stay for the engines; ``NVIDIA_VISIBLE_DEVICES=all`` as dcgm-exporter does) and the
    kubelet's pod-resources socket to attribute each GPU to its pod. Not privileged, every capability dropped;
    it runs as uid 0 only because the kubelet's socket is root's and connecting needs write permission on it."""
    ports = [_metrics_port(GPU)]
    container = _container(s, GPU, ["exporter", "gpu", "--kubelet-pod-resources",
                                    f"{POD_RESOURCES_DIR}/kubelet.sock"], ports, "metrics")
    container["env"] = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
                        {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "utility"}]
    container["volumeMounts"].append({"name": "pod-resources", "mountPath": POD_RESOURCES_DIR, "readOnly": True})
    pod = _pod([container], [{"name": "pod-resources", "hostPath": {"path": POD_RESOURCES_DIR,
                                                                    "type": "Directory"}}], uid=0)
    pod |= {"runtimeClassName": "nvidia", "nodeSelector": {"nvidia.com/gpu.present": "true"},
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]}
    daemonset = {"apiVersion": "apps/v1", "kind": "DaemonSet",
                 "metadata": _meta(s, f"goodput-{GPU.name}", GPU.name),
                 "spec": {"selector": {"matchLabels": _selector(GPU.name)},
                          "updateStrategy": {"type": "RollingUpdate"},
                          "template": {"metadata": {"labels": _labels(s, GPU.name)}, "spec": pod}}}
    return [daemonset, _service(s, GPU, ports, headless=True)]


# --- everything ----------------------------------------------------------------------------------------------

def manifests(s: Settings, rule_files: dict[str, dict], alertmanager: dict, alertmanager_source: str,
              dashboards: dict[str, str], targets: list, policies: list[DeploymentPolicy],
              plan: list[PlanEntry] | None = None) -> dict[str, list[dict]]:
    """File name -> the objects it holds, in the order ``kubectl apply -k`` should see them; the
    kustomization.yaml lists every file (its own namespace field stays unset: each object names its own)."""
    files: dict[str, list[dict]] = {
        "namespace.yaml": [{"apiVersion": "v1", "kind": "Namespace",
                            "metadata": {"name": s.namespace, "labels": {"app.kubernetes.io/part-of": "goodput"}}}],
        "prometheusrules.yaml": [prometheus_rule(s, name, doc) for name, doc in sorted(rule_files.items())]
        + ([plan_rule(s, plan)] if plan else []),
        "podmonitors.yaml": [pod_monitor(s, e) for e in ENGINES],
        "servicemonitors.yaml": [service_monitor(s, e) for e in (GPU, ENGINE, REQUESTS)],
        "alertmanagerconfig.yaml": [alertmanager_config(s, alertmanager, alertmanager_source)],
        "dashboards.yaml": [dashboard_config_map(s, name, text) for name, text in sorted(dashboards.items())],
        "engine-exporter.yaml": engine_exporter(s, targets),
        "request-exporter.yaml": request_exporter(s),
        "gpu-exporter.yaml": gpu_exporter(s),
    }
    names = Counter(o["metadata"]["name"] for o in files["prometheusrules.yaml"])
    if max(names.values()) > 1:  # a.b.yaml and a_b.yaml, or a plan.rules.yaml beside --plan: one would replace the other
        raise ConfigError("--rules", "", f"two PrometheusRules would be named {names.most_common(1)[0][0]}; rename a "
                                         f"rule file")
    if policies:
        files["keda-scaledobjects.yaml"] = [keda_manifest(p, s.serving_namespace, s.prometheus) for p in policies]
    files["kustomization.yaml"] = [{"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
                                    "resources": list(files)}]
    return files
