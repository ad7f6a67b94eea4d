"""goodput deploy kubernetes: every object written validated against the Kubernetes OpenAPI schemas
(kubernetes-validate) and the prometheus-operator and KEDA CRD schemas vendored in tests/fixtures/schemas; the
PrometheusRules' groups through promtool; the AlertmanagerConfig equal to rules/alertmanager.yaml; the flags
landing on every object; bad input refused in one line."""

import copy
import functools
import json
import math
import re
import shutil
import subprocess
import time
from pathlib import Path

import httpx
import jsonschema
import kubernetes_validate
import pytest
import yaml

from goodput.cli import build_parser, main
from goodput.demo.stack import Process
from goodput.deploy.kubernetes import (
    DEPLOYMENT_LABEL,
    ENGINE_LABEL,
    ENGINES,
    JOB_LABEL,
    MAX_CONFIG_MAP_BYTES,
    POD_RESOURCES_DIR,
)
from goodput.plan.autoscale import DeploymentPolicy, keda_manifest
from goodput.plan.policyfile import load_policy_file
from tests.conftest import REPO, free_port_block, needs

SCHEMAS = REPO / "tests" / "fixtures" / "schemas"
K8S_VERSION = "1.33.0"
CRDS = {"PodMonitor": "prometheus-operator-podmonitor-v1.json",
        "ServiceMonitor": "prometheus-operator-servicemonitor-v1.json",
        "PrometheusRule": "prometheus-operator-prometheusrule-v1.json",
        "AlertmanagerConfig": "prometheus-operator-alertmanagerconfig-v1alpha1.json",
        "ScaledObject": "keda-scaledobject-v1alpha1.json"}
FLAGS = {"namespace": "obs", "serving": "llm-serving", "image": "registry.example.com/goodput:1.2.3",
         "release": "kps-prod"}
POLICY = """policy_version: 1
deployments:
  chat-8b:
    kind: signals
    min_replicas: 2
    max_replicas: 9
    waiting_per_replica: 6.5
    inflight_per_replica: 40.0
"""
PLAN = """plan_version: 1
deployments:
  chat-8b: {replica_goodput_tokens_per_second: 5200, desired_replicas: 4}
  rag-70b: {replica_goodput_tokens_per_second: 1250.5}
"""
TARGETS = [{"targets": ["vllm-0.llm-serving.svc:8000", "vllm-1.llm-serving.svc:8000"],
            "labels": {"deployment": "chat-8b", "engine": "vllm"}}]


IMAGE = "registry.example.com/goodput:0.1.0"


def _run(tmp, *extra):
    """The repository's rules/alertmanager.yaml has the demo's loopback webhooks: allowed here, refused by default."""
    image = [] if "--image" in extra else ["--image", IMAGE]
    return main(["deploy", "kubernetes", "--out", str(tmp), "--rules", str(REPO / "rules"),
                 "--dashboards", str(REPO / "dashboards"), "--allow-loopback-receivers", *image, *extra])


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("k8s")
    (tmp / "policy.yaml").write_text(POLICY)
    (tmp / "targets.yaml").write_text(yaml.safe_dump(TARGETS))
    (tmp / "plan.yaml").write_text(PLAN)
    assert _run(tmp / "out", "--namespace", FLAGS["namespace"], "--serving-namespace", FLAGS["serving"],
                "--image", FLAGS["image"], "--release", FLAGS["release"], "--policy", str(tmp / "policy.yaml"),
                "--targets", str(tmp / "targets.yaml"), "--plan", str(tmp / "plan.yaml")) == 0
    return tmp / "out"


def _objects(out):
    return _parsed(str(out))


@functools.cache
def _parsed(out):  # read once per directory: the tests below only look (a broken copy is a deep copy)
    return [(p.name, o) for p in sorted(Path(out).glob("*.yaml")) for o in yaml.safe_load_all(p.read_text())]


def _kind(out, kind):
    return [o for _, o in _objects(out) if o["kind"] == kind]


@functools.cache
def _schema(kind):
    schema = json.loads((SCHEMAS / CRDS[kind]).read_text())
    cls = jsonschema.validators.validator_for(schema)
    # a well-formed schema; formats unchecked, since its patterns are Go's RE2 (a `(?i)` mid-pattern) not Python's
    assert not list(cls(cls.META_SCHEMA).iter_errors(schema))
    return cls(schema)


def validate(obj):
    """Raises a jsonschema ValidationError when the object does not fit its kind's schema."""
    if obj["kind"] in CRDS:
        _schema(obj["kind"]).validate(obj)
        if obj["kind"] == "AlertmanagerConfig":  # the CRD leaves nested routes open; hold them to the route schema
            route = _schema("AlertmanagerConfig").schema["properties"]["spec"]["properties"]["route"]
            stack = list(obj["spec"]["route"].get("routes", []))
            while stack:
                r = stack.pop()
                jsonschema.validate(r, route)
                stack.extend(r.get("routes", []))
    else:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


def test_every_object_validates_against_its_schema(out):
    objects = [o for _, o in _objects(out) if o["kind"] != "Kustomization"]
    kinds = {o["kind"] for o in objects}
    assert kinds == {"Namespace", "PrometheusRule", "PodMonitor", "ServiceMonitor", "AlertmanagerConfig", "ConfigMap",
                     "Deployment", "Service", "PersistentVolumeClaim", "DaemonSet", "ScaledObject"}
    for obj in objects:
        validate(obj)


BREAKS = [
    ("PodMonitor", "a port number as a string", lambda o: o["spec"]["podMetricsEndpoints"][0].update(portNumber="8000")),
    ("PodMonitor", "no selector", lambda o: o["spec"].pop("selector")),
    ("ServiceMonitor", "a misspelt field", lambda o: o["spec"]["endpoints"][0].update(honourLabels=True)),
    ("PrometheusRule", "a rule group without a name", lambda o: o["spec"]["groups"][0].pop("name")),
    ("AlertmanagerConfig", "a matcher with an unknown match type",
     lambda o: o["spec"]["route"]["routes"][0]["matchers"][0].update(matchType="==")),
    ("Deployment", "a container port as a string",
     lambda o: o["spec"]["template"]["spec"]["containers"][0]["ports"][0].update(containerPort="metrics")),
    ("DaemonSet", "no selector", lambda o: o["spec"].pop("selector")),
    ("Service", "a port as a name", lambda o: o["spec"]["ports"][0].update(port="metrics")),
    ("ScaledObject", "KEDA's minReplicaCount misspelt", lambda o: o["spec"].update(minReplicas=1)),
]


@pytest.mark.parametrize("kind, what, brk", BREAKS, ids=[f"{k}: {w}" for k, w, _ in BREAKS])
def test_a_broken_object_fails_validation(out, kind, what, brk):
    obj = copy.deepcopy(_kind(out, kind)[0])
    validate(obj)
    brk(obj)
    with pytest.raises(jsonschema.ValidationError):
        validate(obj)


def _as_generated(spec, namespace):
    """A PrometheusRule's groups less the namespace label deploy adds to every alert (and only to alerts)."""
    spec = copy.deepcopy(spec)
    for g in spec["groups"]:
        for r in g["rules"]:
            if "alert" in r:
                assert r["labels"].pop("namespace") == namespace, r["alert"]
            else:
                assert "namespace" not in r.get("labels", {}), r["record"]
    return spec


@needs("promtool")
def test_each_prometheus_rule_passes_promtool_and_every_generated_rule_file_has_one(out, tmp_path):
    rules = {o["metadata"]["name"]: o["spec"] for o in _kind(out, "PrometheusRule")}
    files = sorted(p.name for p in (REPO / "rules").glob("*.rules.yaml"))
    assert sorted(rules) == sorted([f"goodput-{f.removesuffix('.rules.yaml')}" for f in files] + ["goodput-plan"])
    (tmp_path / "plan.yaml").write_text(yaml.safe_dump(rules["goodput-plan"]))
    r = subprocess.run(["promtool", "check", "rules", str(tmp_path / "plan.yaml")], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    for f in files:
        spec = rules[f"goodput-{f.removesuffix('.rules.yaml')}"]
        assert _as_generated(spec, FLAGS["namespace"]) == yaml.safe_load((REPO / "rules" / f).read_text())
        path = tmp_path / f
        path.write_text(yaml.safe_dump(spec))
        r = subprocess.run(["promtool", "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stdout + r.stderr


def test_a_new_generated_rule_file_joins_with_no_change(tmp_path):
    """The normalize / dcgm generators' files (or any later one) become PrometheusRules by being in rules/."""
    rules = tmp_path / "rules"
    shutil.copytree(REPO / "rules", rules, ignore=shutil.ignore_patterns("tests"))
    (rules / "normalize.rules.yaml").write_text(yaml.safe_dump(
        {"groups": [{"name": "llm.normalize", "rules": [{"record": "llm_requests_waiting",
                                                         "expr": "vllm:num_requests_waiting"}]}]}))
    assert main(["deploy", "kubernetes", "--out", str(tmp_path / "out"), "--rules", str(rules), "--image", IMAGE,
                 "--dashboards", str(REPO / "dashboards"), "--allow-loopback-receivers"]) == 0
    names = {o["metadata"]["name"] for o in _kind(tmp_path / "out", "PrometheusRule")}
    assert "goodput-normalize" in names and "goodput-llm" in names


def test_the_mixins_rendering_deploys_as_it_is(tmp_path):
    """`goodput rules mixin --out DIR` writes prometheus_rules.yaml, prometheus_alerts.yaml and dashboards/*.json:
    --rules DIR, --dashboards DIR/dashboards and --alertmanager take it with no conversion."""
    mixin = tmp_path / "mixin"
    (mixin / "dashboards").mkdir(parents=True)
    generated = {p.name: yaml.safe_load(p.read_text()) for p in (REPO / "rules").glob("*.rules.yaml")}
    alerts = generated.pop("alerts.rules.yaml")
    (mixin / "prometheus_alerts.yaml").write_text(yaml.safe_dump(alerts))
    (mixin / "prometheus_rules.yaml").write_text(yaml.safe_dump({"groups": [g for d in generated.values()
                                                                              for g in d["groups"]]}))
    for p in (REPO / "dashboards").glob("*.json"):
        shutil.copy(p, mixin / "dashboards")
    assert main(["deploy", "kubernetes", "--out", str(tmp_path / "out"), "--rules", str(mixin), "--image", IMAGE,
                 "--dashboards", str(mixin / "dashboards"), "--allow-loopback-receivers",
                 "--alertmanager", str(REPO / "rules" / "alertmanager.yaml")]) == 0
    rules = {o["metadata"]["name"]: o for o in _kind(tmp_path / "out", "PrometheusRule")}
    assert sorted(rules) == ["goodput-prometheus-alerts", "goodput-prometheus-rules"]
    assert _as_generated(rules["goodput-prometheus-alerts"]["spec"], "goodput") == alerts
    for o in rules.values():
        validate(o)


@needs("promtool")
def test_the_plan_reaches_the_cluster_as_the_series_the_required_replicas_rule_reads(out, tmp_path):
    """--plan: a PrometheusRule recording the plan's per-replica goodput and desired replicas; with the generated
    llm rules, promtool computes the required replicas from it (no engine exporter anywhere)."""
    [plan] = [o for o in _kind(out, "PrometheusRule") if o["metadata"]["name"] == "goodput-plan"]
    (tmp_path / "plan.rules.yaml").write_text(yaml.safe_dump(plan["spec"]))
    redundancy = yaml.safe_load((REPO / "rules" / "slos.yaml").read_text())["thresholds"]["capacity_redundancy"]
    demand = {"chat-8b": 10_000.0, "rag-70b": 6_000.0}
    required = {d: math.ceil(t / g * redundancy) for d, t, g in
                (("chat-8b", demand["chat-8b"], 5200), ("rag-70b", demand["rag-70b"], 1250.5))}
    assert len(set(required.values())) == 2  # the two deployments' plans are told apart
    (tmp_path / "t.yaml").write_text(yaml.safe_dump({
        "rule_files": [str(tmp_path / "plan.rules.yaml"), str(REPO / "rules" / "llm.rules.yaml")],
        "evaluation_interval": "1m",
        "tests": [{"interval": "1m",
                   "input_series": [{"series": f'deployment:llm_gateway_tokens:rate5m{{deployment="{d}"}}',
                                     "values": f"{t}x5"} for d, t in demand.items()],
                   "promql_expr_test": [
                       {"expr": "deployment:llm_replicas_required:ceil", "eval_time": "2m",
                        "exp_samples": [{"labels": f'deployment:llm_replicas_required:ceil{{deployment="{d}"}}',
                                         "value": n} for d, n in required.items()]},
                       {"expr": "llm_deployment_replicas", "eval_time": "2m",
                        "exp_samples": [{"labels": 'llm_deployment_replicas{deployment="chat-8b",state="desired"}',
                                         "value": 4}]}]}]}))
    r = subprocess.run(["promtool", "test", "rules", str(tmp_path / "t.yaml")], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0 and "SUCCESS" in r.stdout, r.stdout + r.stderr


def test_without_a_plan_it_says_the_replicas_short_page_cannot_fire(tmp_path, capsys):
    assert _run(tmp_path / "out") == 0
    err = capsys.readouterr().err
    assert "no --plan" in err and "LLMQueueWaitRisingReplicasShort cannot fire" in err
    assert "goodput-plan" not in (tmp_path / "out" / "prometheusrules.yaml").read_text()


def test_loopback_receivers_are_refused_unless_allowed(tmp_path, capsys):
    """The demo's webhooks on 127.0.0.1 are the Alertmanager pod itself in the cluster: no page would leave it."""
    args = ["deploy", "kubernetes", "--out", str(tmp_path / "out"), "--rules", str(REPO / "rules"),
            "--dashboards", str(REPO / "dashboards"), "--image", IMAGE]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "alertmanager.yaml: receivers: pager (http://127.0.0.1" in err
    assert "--allow-loopback-receivers" in err and not (tmp_path / "out").exists()
    am = yaml.safe_load((REPO / "rules" / "alertmanager.yaml").read_text())
    for r in am["receivers"]:
        r["webhook_configs"][0]["url"] = f"https://hooks.example.com/{r['name']}"
    (tmp_path / "am.yaml").write_text(yaml.safe_dump(am))
    assert main([*args, "--alertmanager", str(tmp_path / "am.yaml")]) == 0


def test_two_rule_files_that_would_make_one_prometheus_rule_are_refused(tmp_path, capsys):
    rules = tmp_path / "rules"
    shutil.copytree(REPO / "rules", rules, ignore=shutil.ignore_patterns("tests"))
    shutil.copy(rules / "llm.rules.yaml", rules / "plan.rules.yaml")  # goodput-plan, as --plan's own
    (tmp_path / "plan.yaml").write_text(PLAN)
    assert main(["deploy", "kubernetes", "--out", str(tmp_path / "out"), "--rules", str(rules), "--image", IMAGE,
                 "--dashboards", str(REPO / "dashboards"), "--allow-loopback-receivers",
                 "--plan", str(tmp_path / "plan.yaml")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "two PrometheusRules would be named goodput-plan" in err
    assert not (tmp_path / "out").exists()


def test_the_image_is_required(tmp_path, capsys):
    """No goodput image is published: a default would be an image the cluster cannot pull."""
    with pytest.raises(SystemExit) as e:
        main(["deploy", "kubernetes", "--out", str(tmp_path / "out"), "--rules", str(REPO / "rules"),
              "--dashboards", str(REPO / "dashboards"), "--allow-loopback-receivers"])
    assert e.value.code == 2
    assert "--image" in capsys.readouterr().err and not (tmp_path / "out").exists()


def test_the_kustomization_lists_every_file_written(out):
    kustomization = yaml.safe_load((out / "kustomization.yaml").read_text())
    written = {p.name for p in out.iterdir()} - {"kustomization.yaml"}
    for name in written:  # plain YAML: no anchors or aliases for a reader to chase
        assert not re.search(r"[&*]id\d+", (out / name).read_text()), name
    assert sorted(kustomization["resources"]) == sorted(written)
    assert "namespace" not in kustomization  # it would override the ScaledObjects' serving namespace


def test_namespace_image_and_release_land_everywhere(out):
    objects = [o for _, o in _objects(out) if o["kind"] not in ("Kustomization", "Namespace")]
    for o in objects:
        want = FLAGS["serving"] if o["kind"] == "ScaledObject" else FLAGS["namespace"]
        assert o["metadata"]["namespace"] == want, o["metadata"]
        if o["kind"] != "ScaledObject":
            assert o["metadata"]["labels"]["release"] == FLAGS["release"], o["metadata"]
    assert _kind(out, "Namespace")[0]["metadata"]["name"] == FLAGS["namespace"]
    pods = [o["spec"]["template"]["spec"] for o in objects if o["kind"] in ("Deployment", "DaemonSet")]
    assert len(pods) == 3
    assert {c["image"] for p in pods for c in p["containers"]} == {FLAGS["image"]}
    for sm in _kind(out, "ServiceMonitor"):  # each finds its Service in goodput's namespace
        assert sm["spec"]["namespaceSelector"] == {"matchNames": [FLAGS["namespace"]]}


def test_each_exporter_is_scraped_under_the_job_the_exporter_down_alert_watches(out):
    alerts = yaml.safe_load((REPO / "rules" / "alerts.rules.yaml").read_text())["groups"][0]["rules"]
    expr = next(r["expr"] for r in alerts if r["alert"] == "LLMExporterDown")
    watched = re.fullmatch(r'up\{job=~"(.+)"\} == 0', expr.strip())[1]
    services = {(s["metadata"]["namespace"], s["metadata"]["labels"]["app.kubernetes.io/name"]): s
                for s in _kind(out, "Service")}
    jobs = set()
    for sm in _kind(out, "ServiceMonitor"):
        [(ns, name)] = [(n, sm["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"])
                        for n in sm["spec"]["namespaceSelector"]["matchNames"]]
        service = services[(ns, name)]
        port_names = {p["name"] for p in service["spec"]["ports"]}
        assert {e["port"] for e in sm["spec"]["endpoints"]} <= port_names
        jobs.add(service["metadata"]["labels"][sm["spec"]["jobLabel"]])
    assert sm["spec"]["jobLabel"] == JOB_LABEL
    assert len(jobs) == 3 and all(re.fullmatch(watched, j) for j in jobs), (jobs, watched)


def test_engine_pod_monitors_scrape_each_engine_port_with_the_contract_target_labels(out):
    monitors = {m["spec"]["selector"]["matchLabels"][ENGINE_LABEL]: m for m in _kind(out, "PodMonitor")}
    assert {e: (m["spec"]["podMetricsEndpoints"][0]["portNumber"], m["spec"]["podMetricsEndpoints"][0]["path"])
            for e, m in monitors.items()} == {"vllm": (8000, "/metrics"), "sglang": (30000, "/metrics"),
                                              "tgi": (9000, "/metrics"), "triton": (8002, "/metrics")}
    for m in monitors.values():
        assert m["spec"]["selector"]["matchExpressions"] == [{"key": DEPLOYMENT_LABEL, "operator": "Exists"}]
        relabel = {r["targetLabel"]: r["sourceLabels"] for r in m["spec"]["podMetricsEndpoints"][0]["relabelings"]}
        # Prometheus' Kubernetes discovery turns every character of a pod label's name that is not [a-zA-Z0-9_]
        # into "_": goodput.dev/deployment is __meta_kubernetes_pod_label_goodput_dev_deployment
        assert relabel == {"deployment": ["__meta_kubernetes_pod_label_goodput_dev_deployment"],
                           "replica": ["__meta_kubernetes_pod_name"]}
    assert len(ENGINES) == len(monitors)


def _matcher_text(m):
    return f'{m["name"]}{m["matchType"]}{json.dumps(m["value"])}'


def test_the_alertmanager_config_is_alertmanager_yaml_in_camel_case(out):
    am = yaml.safe_load((REPO / "rules" / "alertmanager.yaml").read_text())
    spec = _kind(out, "AlertmanagerConfig")[0]["spec"]
    route = spec["route"]
    assert (route["receiver"], route["groupBy"], route["groupWait"], route["groupInterval"], route["repeatInterval"]) \
        == (am["route"]["receiver"], am["route"]["group_by"], am["route"]["group_wait"], am["route"]["group_interval"],
            am["route"]["repeat_interval"])
    assert [([_matcher_text(m) for m in r["matchers"]], r["receiver"]) for r in route["routes"]] == \
        [(r["matchers"], r["receiver"]) for r in am["route"]["routes"]]
    assert [(r["name"], [(h["url"], h["sendResolved"], h["maxAlerts"]) for h in r["webhookConfigs"]])
            for r in spec["receivers"]] == \
        [(r["name"], [(h["url"], h["send_resolved"], h["max_alerts"]) for h in r["webhook_configs"]])
         for r in am["receivers"]]
    assert [([_matcher_text(m) for m in i["sourceMatch"]], [_matcher_text(m) for m in i["targetMatch"]], i["equal"])
            for i in spec["inhibitRules"]] == \
        [(i["source_matchers"], i["target_matchers"], i["equal"]) for i in am["inhibit_rules"]]


def test_dashboards_are_config_maps_for_grafanas_sidecar(out):
    maps = [c for c in _kind(out, "ConfigMap") if c["metadata"]["labels"].get("grafana_dashboard") == "1"]
    files = {p.name: p.read_text() for p in (REPO / "dashboards").glob("*.json")}
    assert {k: v for c in maps for k, v in c["data"].items()} == files
    for name, obj in _objects(out):  # kubectl apply (client side) keeps each object in a 256 KiB annotation
        assert len(json.dumps(obj)) < 262144, name


def test_the_scaled_objects_are_plan_autoscales_own(out):
    policies = [DeploymentPolicy(n, p) for n, p in load_policy_file_from_text(out).items()]
    assert _kind(out, "ScaledObject") == [keda_manifest(p, FLAGS["serving"], "http://prometheus-operated.monitoring.svc:9090")
                                          for p in policies]


def load_policy_file_from_text(out):
    return load_policy_file(out.parent / "policy.yaml")


def test_no_policy_no_scaled_object(tmp_path):
    assert _run(tmp_path) == 0
    assert not (tmp_path / "keda-scaledobjects.yaml").exists()
    assert "keda-scaledobjects.yaml" not in yaml.safe_load((tmp_path / "kustomization.yaml").read_text())["resources"]


def test_the_engine_exporter_mounts_its_file_sd_targets(out):
    cm = next(c for c in _kind(out, "ConfigMap") if c["metadata"]["name"] == "goodput-engine-targets")
    assert yaml.safe_load(cm["data"]["targets.yaml"]) == TARGETS
    dep = next(d for d in _kind(out, "Deployment") if d["metadata"]["name"] == "goodput-engine-exporter")
    pod = dep["spec"]["template"]["spec"]
    args = pod["containers"][0]["args"]
    mount = next(m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "targets")
    assert args[args.index("--targets") + 1] == f'{mount["mountPath"]}/targets.yaml'
    assert next(v for v in pod["volumes"] if v["name"] == "targets")["configMap"]["name"] == cm["metadata"]["name"]


def test_the_containers_args_are_goodputs_own_commands(out):
    """What each container runs parses with goodput's parser (the image's entrypoint is `goodput`)."""
    pods = {o["metadata"]["name"]: o["spec"]["template"]["spec"] for o in _kind(out, "Deployment") + _kind(out, "DaemonSet")}
    for name, pod in pods.items():
        args = pod["containers"][0]["args"]
        parsed, unknown = build_parser(args[0]).parse_known_args(args)
        if name == "goodput-gpu-exporter":  # --kubelet-pod-resources: the dcgm branch of issue 23 adds it
            assert unknown in ([], ["--kubelet-pod-resources", f"{POD_RESOURCES_DIR}/kubelet.sock"])
        else:
            assert unknown == []
        assert parsed.host == "0.0.0.0"  # reachable through its Service
        port = next(p for p in pod["containers"][0]["ports"] if p["name"] == "metrics")["containerPort"]
        assert parsed.port == port


def test_gpu_exporter_reads_the_kubelet_socket_on_gpu_nodes_unprivileged(out):
    ds = _kind(out, "DaemonSet")[0]["spec"]["template"]["spec"]
    c = ds["containers"][0]
    assert c["args"][c["args"].index("--kubelet-pod-resources") + 1] == f"{POD_RESOURCES_DIR}/kubelet.sock"
    mount = next(m for m in c["volumeMounts"] if m["name"] == "pod-resources")
    host = next(v for v in ds["volumes"] if v["name"] == "pod-resources")["hostPath"]["path"]
    assert mount["mountPath"] == host == POD_RESOURCES_DIR
    assert ds["nodeSelector"] and any(t["key"] == "nvidia.com/gpu" for t in ds["tolerations"])
    assert "resources" in c and "nvidia.com/gpu" not in c["resources"]["limits"]  # the engines keep every GPU


def test_secure_defaults_on_every_pod(out):
    for o in _kind(out, "Deployment") + _kind(out, "DaemonSet"):
        pod = o["spec"]["template"]["spec"]
        assert not any(pod.get(k) for k in ("hostNetwork", "hostPID", "hostIPC"))
        assert pod["automountServiceAccountToken"] is False
        for c in pod["containers"]:
            sc = c["securityContext"]
            assert sc["readOnlyRootFilesystem"] and sc["allowPrivilegeEscalation"] is False
            assert not sc.get("privileged") and sc["capabilities"]["drop"] == ["ALL"]
            assert set(c["resources"]) == {"requests", "limits"}
            assert set(c["resources"]["limits"]) == {"cpu", "memory"}
        if o["kind"] == "Deployment":
            assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] != 0


@pytest.mark.parametrize("extra, says", [
    (["--namespace", "Bad_NS"], "argument --namespace"),
    (["--release", "-kps"], "argument --release"),
    (["--image", "has space"], "argument --image"),
    # each accepted by a regex ending in `$` (which matches before a final newline), and refused by Kubernetes
    (["--namespace", "obs\n"], "argument --namespace"),
    (["--serving-namespace", "llm\n"], "argument --serving-namespace"),
    (["--release", "kps\n"], "argument --release"),
    (["--image", "registry.example.com/goodput:1.2.3\n"], "argument --image"),
    (["--release", "k" * 54], "argument --release"),  # Helm's limit is 53
    (["--release", "Kps"], "argument --release"),  # a label value, not a Helm release name
    (["--image", "Registry.example.com/Goodput:1"], "argument --image"),  # a repository is lower-case
    (["--image", "goodput:"], "argument --image"),
    (["--image", "goodput@sha256:abc"], "argument --image"),  # a digest is at least 32 hex digits
    (["--prometheus", "prometheus:9090"], "argument --prometheus"),
    (["--rules", "no/such/dir"], "no/such/dir"),
    (["--targets", "TARGETS_LIST"], "targets.yaml: expected a file_sd list"),
    (["--targets", "TARGETS_NO_DEPLOYMENT"], "no_deployment.yaml: [0].labels.deployment: is required"),
    (["--rules", "RULES_BROKEN"], "x.rules.yaml: groups: expected a non-empty list"),
    (["--plan", "PLAN_BAD"], "bad_plan.yaml: deployments.chat.replica_goodput_tokens_per_second: expected a finite"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, extra, says):
    (tmp_path / "targets.yaml").write_text("targets: [a:1]\n")  # goodput's own mapping, not file_sd's list
    (tmp_path / "no_deployment.yaml").write_text("- targets: [a:1]\n  labels: {engine: vllm}\n")
    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / "x.rules.yaml").write_text("groups: []\n")
    (tmp_path / "bad_plan.yaml").write_text("deployments:\n  chat: {replica_goodput_tokens_per_second: .nan}\n")
    given = {"TARGETS_LIST": "targets.yaml", "TARGETS_NO_DEPLOYMENT": "no_deployment.yaml", "RULES_BROKEN": "rules",
             "PLAN_BAD": "bad_plan.yaml"}
    extra = [str(tmp_path / given[a]) if a in given else a for a in extra]
    with pytest.raises(SystemExit) as e:
        raise SystemExit(_run(tmp_path / "out", *extra))
    assert e.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and says in err and "Traceback" not in err
    assert not (tmp_path / "out" / "kustomization.yaml").exists()


@pytest.mark.parametrize("flag, value", [
    ("--release", "k" * 53), ("--release", "kps.prod-1"), ("--namespace", "n" * 63),
    ("--image", "goodput:0.1.0"), ("--image", "localhost:5000/team/goodput:v1.2.3-rc.1"),
    ("--image", "registry.example.com/a__b/goodput@sha256:" + "0" * 64),
    ("--image", "ghcr.io/org/goodput:1.2@sha256:" + "ab" * 32),
])
def test_values_kubernetes_and_helm_take_are_accepted(tmp_path, flag, value):
    assert _run(tmp_path, flag, value) == 0


def test_a_dashboard_too_large_for_a_config_map_is_refused_before_anything_is_written(tmp_path, capsys):
    (tmp_path / "dashboards").mkdir()
    (tmp_path / "dashboards" / "huge.json").write_text(json.dumps({"title": "x" * MAX_CONFIG_MAP_BYTES}))
    assert main(["deploy", "kubernetes", "--out", str(tmp_path / "out"), "--rules", str(REPO / "rules"),
                 "--image", IMAGE, "--dashboards", str(tmp_path / "dashboards"), "--allow-loopback-receivers"]) == 2
    assert "huge.json" in capsys.readouterr().err and not (tmp_path / "out").exists()


def test_help_names_every_flag(capsys):
    with pytest.raises(SystemExit) as e:
        main(["deploy", "kubernetes", "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    for flag in ("--out", "--namespace", "--serving-namespace", "--image", "--release", "--rules", "--alertmanager",
                 "--dashboards", "--targets", "--plan", "--allow-loopback-receivers", "--policy", "--prometheus",
                 "--format"):
        assert flag in out


def test_json_format_counts_the_objects(tmp_path, capsys):
    assert _run(tmp_path / "out", "--format", "json") == 0
    report = json.loads(capsys.readouterr().out)
    assert report["files"][-1] == "kustomization.yaml"
    assert report["objects"]["PodMonitor"] == len(ENGINES)
    assert report["objects"]["PrometheusRule"] == len(list((REPO / "rules").glob("*.rules.yaml")))  # no plan


def _snake(relabel):
    """A PodMonitor relabeling as Prometheus' relabel_config, as the operator writes it (camelCase keys to
    snake_case, the action lower-case)."""
    return {re.sub(r"(?<!^)([A-Z])", r"_\1", k).lower(): (v.lower() if k == "action" else v) for k, v in relabel.items()}


@needs("prometheus")
def test_a_real_prometheus_gives_engine_targets_the_contract_labels(out, tmp_path):
    """Kubernetes discovery can not run here, so a file_sd target carries the meta labels it would give an engine
    pod (its name, and its label goodput.dev/deployment as Prometheus spells it); a real Prometheus applies the
    PodMonitor's relabelings, and the target's series carry `deployment` and `replica`."""
    port = free_port_block(1)
    endpoint = next(m for m in _kind(out, "PodMonitor") if m["metadata"]["name"] == "goodput-vllm")
    relabel = [_snake(r) for r in endpoint["spec"]["podMetricsEndpoints"][0]["relabelings"]]
    meta = {"__meta_kubernetes_pod_name": "chat-8b-vllm-7d9f-abcde",
            "__meta_kubernetes_pod_label_" + re.sub(r"[^a-zA-Z0-9_]", "_", DEPLOYMENT_LABEL): "chat-8b-h100"}
    (tmp_path / "targets.json").write_text(json.dumps([{"targets": [f"127.0.0.1:{port}"], "labels": meta}]))
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump({
        "global": {"scrape_interval": "1s"},
        "scrape_configs": [{"job_name": "engines", "file_sd_configs": [{"files": [str(tmp_path / "targets.json")]}],
                            "relabel_configs": relabel}]}))
    log = (tmp_path / "prometheus.log").open("w")
    proc = subprocess.Popen(["prometheus", f"--config.file={tmp_path / 'prometheus.yml'}",
                             f"--storage.tsdb.path={tmp_path / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}"],
                            stdout=subprocess.DEVNULL, stderr=log)
    try:
        # ready first: its query API answers 503 in plain text until the TSDB is open
        Process("prometheus", f"http://127.0.0.1:{port}", proc, tmp_path / "prometheus.log").ready("/-/ready")
        labels = None
        deadline = time.monotonic() + 45
        while labels is None and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.5)
            try:
                result = httpx.get(f"http://127.0.0.1:{port}/api/v1/query", params={"query": 'up{job="engines"}'},
                                   timeout=2).json()["data"]["result"]
            except httpx.HTTPError:
                continue
            labels = result[0]["metric"] if result else None
        assert labels is not None, (tmp_path / "prometheus.log").read_text()[-2000:]
        assert labels["deployment"] == "chat-8b-h100" and labels["replica"] == "chat-8b-vllm-7d9f-abcde"
        assert not any(k.startswith("__meta") for k in labels)  # discovery labels end with relabeling
    finally:
        proc.terminate()
        proc.wait(timeout=20)
