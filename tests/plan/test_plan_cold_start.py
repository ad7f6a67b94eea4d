"""`plan replicas --cold-start-from` and `plan autoscale --cold-start-from`: the p90 measured cold start, read from a
real Prometheus serving backfilled llm_replica_cold_start_seconds (the engine exporter's) and
llm_replica_pod_cold_start_seconds (kube.rules.yaml's, from kube-state-metrics; preferred where both are), replaces
the typed guess of the deployments it measured; the plan it writes carries it to the engine exporter
(llm_capacity_cold_start_seconds)."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import pytest
import yaml

from goodput.cli import main
from goodput.exporters.config import load_plan
from goodput.review.backfill import backfill, serve_tsdb
from tests.conftest import free_port_block, needs
from tests.plan.plan_fixtures import knee_run

UNTIL = "2026-11-30T00:00:00Z"
END = datetime(2026, 11, 30, tzinfo=UTC)
# chat's replica starts over the week (one replica restarted: its longer start counts), and one of batch's a month ago
CHAT = {"chat-4": [150.0], "chat-5": [160.0, 175.0], "chat-6": [170.0], "chat-7": [400.0]}
OLD_BATCH = {"batch-3": [900.0]}
# rag's pods from creation to Ready (kube-state-metrics); its engine exporter's shorter measure of the same starts
RAG_POD = {"rag-0": [300.0], "rag-1": [420.0], "rag-2": [360.0]}
RAG_ENGINE = {"rag-0": [90.0], "rag-1": [95.0], "rag-2": [99.0]}
TYPED_S = 120.0
DEMAND = """\
slos:
  P0: {ttft_s: 0.5, tpot_s: 0.05, objective: 0.95}
deployments:
  chat:
    streams:
      - {scene: chat, tier: P0, peak_rps: 24, input_tokens: 700, output_tokens: 130}
    headroom: {tolerate: 1, cold_start_s: 120, burst_factor: 2.0, burst_rise_s: 600}
    candidates:
      - {name: h100, model: Llama-3.1-8B, gpu: H100-80GB-SXM, tp: 1}
  batch:
    streams:
      - {scene: batch, tier: P0, peak_rps: 4, input_tokens: 3000, output_tokens: 250}
    headroom: {tolerate: 1, cold_start_s: 120, burst_factor: 2.0, burst_rise_s: 600}
    candidates:
      - {name: h100, model: Llama-3.1-8B, gpu: H100-80GB-SXM, tp: 1}
  rag:
    streams:
      - {scene: rag, tier: P0, peak_rps: 4, input_tokens: 3000, output_tokens: 250}
    headroom: {tolerate: 1, cold_start_s: 120, burst_factor: 2.0, burst_rise_s: 600}
    candidates:
      - {name: h100, model: Llama-3.1-8B, gpu: H100-80GB-SXM, tp: 1}
"""


def _series(replicas: dict[str, list[float]], dep: str, first: float,
            metric: str = "llm_replica_cold_start_seconds{{deployment=\"{dep}\",model=\"m\",replica=\"{replica}\"}}",
            ) -> list[str]:
    """Each replica's value, one a minute for an hour per process, as the engine exporter (or kube.rules.yaml)
    publishes it."""
    lines = []
    for i, (replica, values) in enumerate(replicas.items()):
        for j, v in enumerate(values):
            t0 = first + i * 7200 + j * 3600
            name = metric.format(dep=dep, replica=replica)
            lines += [f"{name} {v} {t0 + k * 60:.0f}\n" for k in range(60)]
    return lines


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cold")
    om = tmp / "cold.om"
    end = END.timestamp()
    pod = 'llm_replica_pod_cold_start_seconds{{deployment="{dep}",replica="{replica}"}}'
    om.write_text("# TYPE llm_replica_cold_start_seconds gauge\n" + "".join(
        _series(CHAT, "chat", end - 3 * 86400) + _series(OLD_BATCH, "batch", end - 30 * 86400)
        + _series(RAG_ENGINE, "rag", end - 2 * 86400))
        + "# TYPE llm_replica_pod_cold_start_seconds gauge\n" + "".join(_series(RAG_POD, "rag", end - 2 * 86400, pod))
        + "# EOF\n")
    backfill(om, tmp / "data", [], END, END, free_port_block(1), progress=lambda m: None)
    served = serve_tsdb(tmp / "data", free_port_block(1))
    try:
        yield served.url
    finally:
        served.stop()


def _p90(replicas: dict[str, list[float]] = CHAT) -> float:
    return float(np.quantile([max(v) for v in replicas.values()], 0.9))  # Prometheus' quantile: the same interpolation


def _replicas(tmp_path, capsys, *extra):
    (tmp_path / "demand.yaml").write_text(DEMAND)
    out = tmp_path / "plan.yaml"
    rc = main(["plan", "replicas", "--demand", str(tmp_path / "demand.yaml"), "--runs",
               f"h100={knee_run(tmp_path, 'h100')}", "--out", str(out), "--format", "json", *extra])
    err = capsys.readouterr().err
    return rc, (yaml.safe_load(out.read_text()) if rc == 0 else None), err


@needs("prometheus", "promtool")
def test_plan_replicas_sizes_the_cold_start_buffer_on_the_measured_p90(prometheus, tmp_path, capsys):
    (tmp_path / "typed").mkdir()
    rc, typed, _ = _replicas(tmp_path / "typed", capsys)
    assert rc == 0
    rc, plan, err = _replicas(tmp_path, capsys, "--cold-start-from", f"prometheus:{prometheus}", "--until", UNTIL)
    assert rc == 0, err
    chat, batch = plan["deployments"]["chat"], plan["deployments"]["batch"]
    assert chat["headroom_inputs"]["cold_start_s"] == pytest.approx(_p90())  # 332.5 s, not the typed 120
    assert batch["headroom_inputs"]["cold_start_s"] == TYPED_S  # its only start is outside the week: not measured
    assert chat["headroom"]["cold_start_buffer"] > typed["deployments"]["chat"]["headroom"]["cold_start_buffer"]
    # rag has both measures: the pod's creation to Ready (408 s), which holds the engine's (99 s), sizes it
    assert plan["deployments"]["rag"]["headroom_inputs"]["cold_start_s"] == pytest.approx(_p90(RAG_POD))
    assert plan["measured_cold_start"]["deployments"] == {
        "chat": {"p90_s": round(_p90(), 1), "replicas": 4, "measured": "process_start_to_first_scrape"},
        "rag": {"p90_s": round(_p90(RAG_POD), 1), "replicas": 3, "measured": "pod_created_to_ready"}}
    assert err.startswith("chat: cold start p90 33") and "s measured over 4 replica starts" in err, err
    assert "rag: cold start p90 408 s measured over 3 replica starts" in err and "(pod created to ready)" in err, err
    # the engine exporter publishes what the plan was sized on, which the cold-start ticket compares with
    assert load_plan(tmp_path / "plan.yaml").cold_start == {"chat": pytest.approx(_p90()), "batch": TYPED_S,
                                                            "rag": pytest.approx(_p90(RAG_POD))}


@needs("prometheus", "promtool")
def test_plan_autoscale_takes_the_measured_p90_where_there_is_one(prometheus, tmp_path, capsys):
    rc, _, _ = _replicas(tmp_path, capsys)
    assert rc == 0
    args = ["plan", "autoscale", "--plan", str(tmp_path / "plan.yaml"), "--out", str(tmp_path / "as")]
    assert main([*args, "--cold-start-from", f"prometheus:{prometheus}", "--until", UNTIL, "--cold-start", "45s"]) == 0
    policy = yaml.safe_load((tmp_path / "as" / "policy.yaml").read_text())["deployments"]
    assert policy["chat"]["cold_start_s"] == pytest.approx(_p90())
    assert policy["chat"]["scale_down_stabilisation_s"] == pytest.approx(max(600.0, 3 * _p90()))
    assert policy["batch"]["cold_start_s"] == 45.0  # not measured: the typed one
    assert main([*args, "--cold-start-from", f"prometheus:{prometheus}", "--until", UNTIL]) == 0
    policy = yaml.safe_load((tmp_path / "as" / "policy.yaml").read_text())["deployments"]
    assert policy["batch"]["cold_start_s"] == TYPED_S  # nothing typed: the plan's own


@needs("prometheus", "promtool")
def test_a_window_without_starts_an_unreachable_server_and_a_bad_source_are_one_line(prometheus, tmp_path, capsys):
    rc, _, _ = _replicas(tmp_path, capsys)
    assert rc == 0
    base = ["plan", "autoscale", "--plan", str(tmp_path / "plan.yaml"), "--out", str(tmp_path / "as")]
    cases = [
        (["--cold-start-from", f"prometheus:{prometheus}", "--until", "2026-10-01T00:00:00Z"],
         "no llm_replica_pod_cold_start_seconds or llm_replica_cold_start_seconds in the 604800s before the window's "
         "end"),
        (["--cold-start-from", f"prometheus:http://127.0.0.1:{free_port_block(1)}"], "cannot reach Prometheus"),
        (["--cold-start-from", "influx:http://x"], "expected prometheus:http(s)://HOST:PORT"),
        (["--cold-start-from", f"prometheus:{prometheus}", "--cold-start-window", "0s"], "must be at least 1 s"),
    ]
    for extra, said in cases:
        assert main([*base, *extra]) == 2, extra
        err = capsys.readouterr().err
        assert said in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err


@needs("prometheus", "promtool")
def test_the_review_reads_each_deployments_cold_starts_by_the_same_measure_as_the_plan(prometheus):
    """The week's review (its own queries, on the same Prometheus) takes rag's pods' creation to Ready where it has
    them, as the plan and LLMColdStartAbovePlan do, and chat's engine measure: the same p90s as the plan's."""
    from goodput.review.cold_start import cold_starts
    from goodput.review.prom import run_queries
    from goodput.review.queries import build_queries

    start = END.timestamp() - 7 * 86400
    raw = run_queries(prometheus, [q for q in build_queries(start, 0, []) if "cold_start" in q.key])
    got = cold_starts(raw["pod_cold_starts"], raw["cold_starts"], raw["cold_start_plan"], None)
    assert {dep: (c["measured"], c["replicas"], c["p90_s"]) for dep, c in got.items()} == {
        "chat": ("process_start_to_first_scrape", 4, round(_p90(), 1)),
        "rag": ("pod_created_to_ready", 3, round(_p90(RAG_POD), 1))}  # batch's one start was a month before
