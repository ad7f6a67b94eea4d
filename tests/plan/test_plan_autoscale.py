"""goodput plan autoscale: the policy derived from a plan, its KEDA ScaledObject and HPA v2 manifest validated
against their published schemas, and the series they query recorded by the generated rules."""

import json

import jsonschema
import pytest
import yaml

from goodput.cli import main
from goodput.contracts.catalog import by_name
from goodput.exporters.config import load_plan
from goodput.foundation.errors import ConfigError
from goodput.monitoring.rulegen import load_spec
from goodput.plan.signals import DESIRED_REPLICAS, RUNNING, THRESHOLDS, WAITING
from tests.conftest import REPO
from tests.plan.plan_fixtures import CHAT

SCHEMAS = REPO / "tests" / "fixtures" / "schemas"


@pytest.fixture(scope="module")
def plan(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("plan")
    demand = tmp / "demand.yaml"
    demand.write_text(CHAT)
    assert main(["plan", "replicas", "--demand", str(demand), "--simulate", "--out", str(tmp / "plan.yaml"),
                 "--jobs", "1"]) == 0
    return tmp / "plan.yaml"


@pytest.fixture(scope="module")
def outputs(plan):
    out = plan.parent / "autoscale"
    assert main(["plan", "autoscale", "--plan", str(plan), "--cold-start", "180s", "--out", str(out)]) == 0
    return out


def _validator(name):
    schema = json.loads((SCHEMAS / name).read_text())
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def test_keda_and_hpa_manifests_validate_against_their_published_schemas(outputs):
    keda = list(yaml.safe_load_all((outputs / "keda-scaledobject.yaml").read_text()))
    hpa = list(yaml.safe_load_all((outputs / "hpa.yaml").read_text()))
    assert len(keda) == len(hpa) == 1
    for doc in keda:
        _validator("keda-scaledobject-v1alpha1.json").validate(doc)
    for doc in hpa:
        _validator("hpa-autoscaling-v2-k8s-v1.33.json").validate(doc)


def test_the_schemas_refuse_a_broken_manifest(outputs):
    """The check has teeth: a misspelt field or a string where an integer belongs fails validation."""
    hpa = yaml.safe_load((outputs / "hpa.yaml").read_text())
    hpa["spec"]["maxReplicas"] = "seven"
    with pytest.raises(jsonschema.ValidationError):
        _validator("hpa-autoscaling-v2-k8s-v1.33.json").validate(hpa)
    keda = yaml.safe_load((outputs / "keda-scaledobject.yaml").read_text())
    keda["spec"]["minReplicas"] = 2  # KEDA spells it minReplicaCount
    with pytest.raises(jsonschema.ValidationError):
        _validator("keda-scaledobject-v1alpha1.json").validate(keda)


def test_policy_bounds_windows_and_warm_pool_follow_the_plan(plan, outputs):
    p = yaml.safe_load((outputs / "policy.yaml").read_text())["deployments"]["chat"]
    d = yaml.safe_load(plan.read_text())["deployments"]["chat"]
    need = d["headroom"]["base"] + d["headroom"]["growth"]
    assert p["min_replicas"] == 3  # one per failure domain
    assert p["max_replicas"] == max(d["desired_replicas"], -(-need * 3 // 2) + d["headroom"]["failure_domains"])
    assert p["warm_pool"] == d["headroom"]["cold_start_buffer"]  # what demand can outgrow in one cold start
    assert p["cold_start_s"] == 180 and p["scale_down_stabilisation_s"] >= 3 * 180
    assert p["inflight_per_replica"] == pytest.approx(d["replica_concurrency_at_slo"], abs=0.05)
    keda = yaml.safe_load((outputs / "keda-scaledobject.yaml").read_text())
    assert keda["spec"]["minReplicaCount"] == p["min_replicas"] and keda["spec"]["maxReplicaCount"] == p["max_replicas"]


def test_queried_series_are_recorded_or_in_the_catalog_and_the_thresholds_are_the_rules(outputs):
    spec = load_spec(REPO / "rules" / "slos.yaml")
    assert {k: spec.thresholds[k] for k in THRESHOLDS} == THRESHOLDS
    assert by_name(WAITING) and by_name(RUNNING)
    keda = (outputs / "keda-scaledobject.yaml").read_text()
    for q in [t["metadata"]["query"] for t in yaml.safe_load(keda)["spec"]["triggers"]]:
        names = {n for n in (DESIRED_REPLICAS, WAITING, RUNNING) if n in q}
        assert names, q


def test_a_plan_without_the_planner_keys_is_refused(tmp_path, capsys):
    bare = tmp_path / "plan.yaml"
    bare.write_text((REPO / "examples" / "plan.yaml").read_text())
    assert main(["plan", "autoscale", "--plan", str(bare), "--cold-start", "3m", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "deployments.chat-8b-h100.candidate: missing" in err and err.count("\n") == 1


DEEP = "deployments:\n  chat: {replica_goodput_tokens_per_second: 1, x: " + "[" * 70 + "]" * 70 + "}\n"


@pytest.mark.parametrize(("text", "where"), [
    ("", "the file is empty; expected a plan"),
    ("- chat\n", "expected a plan: a mapping with 'deployments'"),
    ("deployments: {chat: [\n", "not valid YAML"),
    (DEEP, "line 2: nested deeper than the limit"),
    ("plan_version: 1\n", "deployments: expected a mapping of deployment -> plan"),
    ("deployments: [chat]\n", "deployments: expected a mapping of deployment -> plan"),
    ("deployments: {chat: 5}\n", "deployments.chat: expected a mapping"),
    ("deployments: {chat: {desired_replicas: 4}}\n", "deployments.chat.replica_goodput_tokens_per_second: expected"),
    ("deployments: {chat: {replica_goodput_tokens_per_second: .inf}}\n", "replica_goodput_tokens_per_second: expected"),
    ("deployments: {chat: {replica_goodput_tokens_per_second: 900, desired_replicas: -1}}\n",
     "deployments.chat.desired_replicas: expected a non-negative integer, got -1"),
])
def test_a_malformed_plan_reads_as_the_same_line_in_plan_autoscale_and_the_engine_exporter(tmp_path, capsys, text,
                                                                                            where):
    path = tmp_path / "plan.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as exporter:
        load_plan(path)
    capsys.readouterr()
    assert main(["plan", "autoscale", "--plan", str(path), "--cold-start", "3m", "--out", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err == f"goodput: error: {exporter.value}\n"
    assert str(exporter.value).startswith(f"{path}: ") and where in str(exporter.value), exporter.value


def test_the_exporter_reads_a_plan_that_plan_autoscale_refuses_for_its_own_keys(tmp_path, capsys):
    """What only ``plan autoscale`` needs (the planner's keys, desired replicas >= 1) is its own refusal; the engine
    exporter reads the two keys it needs and passes over the rest."""
    path = tmp_path / "plan.yaml"
    path.write_text("deployments: {chat: {replica_goodput_tokens_per_second: 900, desired_replicas: 0, extra: [1]}}\n")
    assert load_plan(path).goodput == {"chat": 900.0}
    assert main(["plan", "autoscale", "--plan", str(path), "--cold-start", "3m", "--out", str(tmp_path / "out")]) == 2
    assert "deployments.chat.candidate: missing" in capsys.readouterr().err
