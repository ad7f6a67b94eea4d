"""goodput plan evaluate and the autoscaler in the simulator's loop: our policy against static peak provisioning
and a GPU-utilisation policy on a burst; replicas lost are replaced after a cold start; bad policy files."""

import json

import pytest
import yaml

from capacity.plan.fleetspec import fleet_config, stream_workload
from capacity.plan.planfile import load_plan_file
from goodput.cli import main
from simulator.autoscaler import Autoscaler, ScalingPolicy
from simulator.fleet import Fleet
from simulator.workload import generate
from tests.capacity.plan_fixtures import RAG


@pytest.fixture(scope="module")
def planned(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("rag")
    (tmp / "demand.yaml").write_text(RAG)
    assert main(["plan", "replicas", "--demand", str(tmp / "demand.yaml"), "--simulate", "--out",
                 str(tmp / "plan.yaml"), "--jobs", "1"]) == 0
    assert main(["plan", "autoscale", "--plan", str(tmp / "plan.yaml"), "--cold-start", "180s",
                 "--out", str(tmp)]) == 0
    return tmp


def test_policy_beats_utilisation_on_p0_with_fewer_gpu_hours_than_static(planned, capsys):
    capsys.readouterr()
    report = planned / "burst.html"
    assert main(["plan", "evaluate", "--plan", str(planned / "plan.yaml"), "--policy", str(planned / "policy.yaml"),
                 "--scenario", "burst", "--format", "json", "--report", str(report)]) == 0
    r = json.loads(capsys.readouterr().out)["policies"]
    static, ours, util = r["static peak"], r["policy"], r["utilisation 80%"]
    assert ours["attainment"]["P0"] > util["attainment"]["P0"], r
    assert ours["gpu_hours"] < static["gpu_hours"], r
    assert ours["max_replicas"] > min(s["max_replicas"] for s in (ours, util)) or ours["max_replicas"] > 2
    html = report.read_text()
    assert "utilisation 80%" in html and "<script src=" not in html and "P0 SLO attainment per minute" in html


def test_a_lost_replica_is_replaced_after_its_cold_start(planned):
    d = load_plan_file(planned / "plan.yaml")[0]
    wls = [stream_workload(d.name, s, {"process": "poisson", "rate": s.peak_rps * 0.5}) for s in d.demand.streams]
    events = [{"at": 600, "kind": "replica_lost", "deployment": d.name, "replica": 0}]
    cfg = fleet_config("t", d.name, d.candidate, 3, wls, events)
    fleet = Fleet(cfg, generate(cfg, 1200, 0))
    scaler = Autoscaler(fleet, d.name, ScalingPolicy("static", 3, 3, cold_start_s=120), tp=1)
    scaler.run(1200)
    ready = {s.t: s.ready for s in scaler.samples}
    assert ready[585] == 3 and ready[615] == 2  # lost at 600 s, replaced at once, serving after 120 s
    assert ready[735] == 3 and max(s.provisioned for s in scaler.samples) == 3
    assert scaler.gpu_seconds == pytest.approx(3 * 1200, rel=0.02)


def test_scaling_down_drains_instead_of_failing_requests(planned):
    d = load_plan_file(planned / "plan.yaml")[0]
    wls = [stream_workload(d.name, s, {"process": "poisson", "rate": s.peak_rps * 0.2}) for s in d.demand.streams]
    cfg = fleet_config("t", d.name, d.candidate, 5, wls)
    fleet = Fleet(cfg, generate(cfg, 1800, 0))
    policy = ScalingPolicy("signals", 1, 5, goodput_tokens_per_s=d.goodput_tokens_per_s,
                           scale_down_stabilisation_s=60, scale_down_period_s=60, drain_s=120)
    scaler = Autoscaler(fleet, d.name, policy, tp=1)
    scaler.run(1800)
    fleet.drain(2400)
    assert scaler.samples[-1].provisioned < 5  # it scaled down ...
    assert not [r for r in fleet.done if r.finish_reason in ("abort", "error")]  # ... and lost no request


def test_bad_policy_keys_are_named(planned, tmp_path, capsys):
    data = yaml.safe_load((planned / "policy.yaml").read_text())
    data["deployments"]["rag"]["scale_up_replicaz"] = 3
    bad = tmp_path / "policy.yaml"
    bad.write_text(yaml.safe_dump(data))
    assert main(["plan", "evaluate", "--plan", str(planned / "plan.yaml"), "--policy", str(bad),
                 "--scenario", "burst"]) == 2
    err = capsys.readouterr().err
    assert f"{bad}: deployments.rag.scale_up_replicaz: unknown key" in err and err.count("\n") == 1


@pytest.mark.parametrize("scenario", ["diurnal", "release", "replica_loss"])
def test_every_scenario_reports_every_policy(planned, capsys, scenario):
    capsys.readouterr()
    assert main(["plan", "evaluate", "--plan", str(planned / "plan.yaml"), "--policy", str(planned / "policy.yaml"),
                 "--scenario", scenario, "--duration", "1200"]) == 0
    out = capsys.readouterr().out
    assert f"scenario {scenario} (1200 s" in out
    for label in ("static peak", "policy", "utilisation 80%"):
        assert label in out
