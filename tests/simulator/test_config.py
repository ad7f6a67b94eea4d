import copy
import subprocess
import sys

import pytest

from goodput.foundation.errors import ConfigError
from goodput.simulator.config import load_fleet
from tests.conftest import BASE_DEPLOYMENT, BASE_WORKLOAD, REPO, make_fleet


def test_example_fleet_loads():
    fleet = load_fleet(REPO / "examples" / "fleet.yaml")
    assert len(fleet.deployments) >= 3
    assert {w.tier for w in fleet.workloads} >= {"P0", "P2"}
    assert len({t for w in fleet.workloads for t, _ in w.tenants}) >= 4


@pytest.mark.parametrize(
    ("mutate", "where", "problem"),
    [
        (lambda d, w: d.update(model="GPT-9"), "deployments[0].model", "unknown model 'GPT-9'"),
        (lambda d, w: d.update(replicas="two"), "deployments[0].replicas", "expected an integer"),
        (lambda d, w: d.update(router="random"), "deployments[0].router", "must be one of"),
        (lambda d, w: d["engine"].update(gpu_memory_utilization=1.5), "deployments[0].engine.gpu_memory_utilization",
         "must be in (0, 1]"),
        (lambda d, w: d["engine"].update(max_model_len=10_000_000), "deployments[0].engine.max_model_len",
         "KV cache holds"),
        (lambda d, w: d["engine"].update(speed=3), "deployments[0].engine.speed", "unknown key"),
        (lambda d, w: w.update(deployment="nope"), "workloads[0].deployment", "no deployment named 'nope'"),
        (lambda d, w: w.update(tier="P9"), "workloads[0].tier", "must be one of P0, P1, P2"),
        (lambda d, w: w["input_tokens"].update(p95=10), "workloads[0].input_tokens", "p95=10 is below p50=500"),
        (lambda d, w: w["arrival"].update(process="step"), "workloads[0].arrival.steps", "process step needs steps"),
        (lambda d, w: w["arrival"].update(rate=-1), "workloads[0].arrival.rate", "must be >= 0"),
        (lambda d, w: w.update(tenants={}), "workloads[0].tenants", "at least one tenant"),
        (lambda d, w: w["arrival"].update(rate=float("nan")), "workloads[0].arrival.rate", "must be a finite number"),
        (lambda d, w: w["arrival"].update(rate=float("inf")), "workloads[0].arrival.rate", "must be a finite number"),
        (lambda d, w: w.update(tenants={"acme": float("nan")}), "workloads[0].tenants.acme", "must be a finite number"),
        (lambda d, w: w["input_tokens"].update(p99=float("inf")), "workloads[0].input_tokens.p99",
         "must be a finite number"),
        (lambda d, w: d.update(gateway_latency_ms=float("inf")), "deployments[0].gateway_latency_ms",
         "must be a finite number"),
        (lambda d, w: d["engine"].update(step_overhead_ms=float("nan")), "deployments[0].engine.step_overhead_ms",
         "must be a finite number"),
    ],
)
def test_bad_fleet_names_file_key_and_problem(mutate, where, problem):
    d, w = copy.deepcopy(BASE_DEPLOYMENT), copy.deepcopy(BASE_WORKLOAD)
    mutate(d, w)
    with pytest.raises(ConfigError) as e:
        make_fleet(deployments=[d], workloads=[w])
    assert e.value.key == where
    assert problem in e.value.problem
    assert str(e.value).startswith(f"test-fleet.yaml: {where}: ")


def test_a_negative_seed_is_refused():
    with pytest.raises(ConfigError, match="test-fleet.yaml: seed: must be >= 0, got -1"):
        make_fleet(seed=-1)


def test_bad_event_is_rejected():
    with pytest.raises(ConfigError, match=r"events\[0\].replica: replica_lost needs the replica index"):
        make_fleet(events=[{"at": 5, "kind": "replica_lost", "deployment": "chat"}])


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("deployments: [\n  - name: x\n    model: [unclosed\n", "not valid YAML"),
        ("- just\n- a list\n", "expected a mapping"),
        ("deployments: []\nworkloads: []\n", "deployments: at least one deployment is required"),
        ("", "the file is empty"),
    ],
)
def test_cli_exits_2_with_one_line(tmp_path, text, fragment):
    f = tmp_path / "fleet.yaml"
    f.write_text(text)
    r = subprocess.run([sys.executable, "-m", "goodput", "simulate", str(f), "--duration", "10", "--out",
                        str(tmp_path / "o")], capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith(f"goodput: error: {f}")
    assert fragment in lines[0]
    assert "Traceback" not in r.stderr
