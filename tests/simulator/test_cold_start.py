"""Cold starts of the simulated fleet's added replicas: drawn per deployment, phase by phase, and published as a real
vLLM replica does (``process_start_time_seconds``, no /metrics until it serves), so the engine exporter measures them."""

import time

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from goodput.demo.incident import ADDED_REPLICAS, COLD_START_S, incident_fleet
from goodput.exporters.engine import EngineExporter
from goodput.exporters.targets_file import TargetsFile
from goodput.foundation.errors import ConfigError
from goodput.foundation.yamlfile import load_mapping
from goodput.simulator.cold_start import ColdStartModel
from goodput.simulator.config import parse_fleet
from goodput.simulator.fleet import Fleet
from goodput.simulator.live import TICK_S, LiveFleet
from tests.conftest import BASE_DEPLOYMENT, BASE_WORKLOAD, REPO, free_port_block

SPEED = 20.0  # virtual seconds per wall second
INTERVAL_S = 1.0  # the exporter's scrape interval, wall seconds
ADD_AT_S = 10.0  # virtual: the demo's scale-out, brought forward from its RESCUE_AT_S


def _cold_starts(exp: EngineExporter) -> dict[str, float]:
    fams = {f.name: f for f in text_string_to_metric_families(exp.render())}
    fam = fams.get("llm_replica_cold_start_seconds")
    return {s.labels["replica"]: s.value for s in fam.samples} if fam else {}


def test_the_demo_scale_out_measured_by_the_engine_exporter_is_the_configured_cold_start(tmp_path):
    """The demo's scale-out (its fleet, its three added replicas, its cold start) at speed 20, earlier in the run and
    without traffic: the real engine exporter scrapes the replicas over real sockets, following the targets file."""
    fleet = incident_fleet(load_mapping(REPO / "examples/fleet.yaml", "a fleet"), "examples/fleet.yaml", only_rag=True)
    fleet["events"] = [dict(e, at=ADD_AT_S) for e in fleet["events"] if e["kind"] == "replica_added"]
    assert len(fleet["events"]) == ADDED_REPLICAS and {e["cold_start_s"] for e in fleet["events"]} == {COLD_START_S}
    cfg = parse_fleet(fleet, "incident")
    targets = tmp_path / "targets.yaml"
    ports = free_port_block(1 + ADDED_REPLICAS, below_ephemeral=True)  # the added replicas bind later
    live = LiveFleet(cfg, base_port=ports, speed=SPEED, traffic=0.0, targets=targets)
    live.start()
    tf = TargetsFile(targets)
    exp = EngineExporter(tf.targets, interval_s=INTERVAL_S, targets_file=tf, timeout_s=5.0)
    exp.start()
    try:
        deadline = time.monotonic() + (ADD_AT_S + COLD_START_S) / SPEED + 30
        while len(cold := _cold_starts(exp)) < ADDED_REPLICAS and time.monotonic() < deadline:
            time.sleep(0.2)
        added = {r: v for r, v in cold.items() if not r.endswith("-0")}
    finally:
        exp.stop()
        live.close()
    assert len(added) == ADDED_REPLICAS, cold
    for replica, measured in added.items():
        # from the process's start to the first scrape that answers: the configured cold start, late by at most the
        # scrape interval and the engine loop's tick (the server comes up at the tick after the cold start ends)
        assert COLD_START_S - 0.05 <= measured <= COLD_START_S + INTERVAL_S + TICK_S + 0.5, (replica, measured)
    # the replica the fleet started with was up before the exporter started: its cold start was not seen
    assert set(cold) == set(added)


def _fleet(cold_start: dict | None, events: list[dict]) -> Fleet:
    dep = {**BASE_DEPLOYMENT, "model": "Llama-3.1-70B", "gpu": "H100-80GB-SXM", "tp": 4, "replicas": 1}
    if cold_start is not None:
        dep["cold_start"] = cold_start
    cfg = parse_fleet({"seed": 7, "deployments": [dep], "workloads": [BASE_WORKLOAD], "events": events}, "f.yaml")
    fleet = Fleet(cfg)
    fleet.run(1000.0)
    return fleet


def test_an_added_replica_waits_through_its_deployments_phases_and_cached_weights_load_faster():
    phases = {"scheduling_s": 20, "image_pull_s": 45, "engine_start_s": 30}
    adds = [{"at": 10.0, "kind": "replica_added", "deployment": "chat"}]
    cached, remote = (_fleet({**phases, "weights_cached": c}, adds) for c in (True, False))
    (asked, c), = cached.cold_starts.values()
    (_, r), = remote.cold_starts.values()
    weights = 70.6e9 * 2  # Llama-3.1-70B in bf16, over its four GPUs
    assert asked == 10.0 and (c.scheduling_s, c.image_pull_s, c.engine_start_s) == (20, 45, 30)
    assert c.weights_load_s == pytest.approx(weights / 2.0e9, rel=0.02)  # the local cache's 2 GB/s
    assert r.weights_load_s == pytest.approx(weights / 0.4e9, rel=0.02)  # the remote store's 0.4 GB/s
    rep = cached.deployments[0].replicas[1]
    assert rep.available_from == pytest.approx(10.0 + c.total_s)
    assert c.in_process_s == pytest.approx(c.weights_load_s + 30)


def test_spread_draws_each_replicas_cold_start_around_the_medians_and_an_events_own_value_wins():
    model = ColdStartModel(scheduling_s=20, image_pull_s=40, engine_start_s=30, spread=0.3)
    draws = [model.sample(10e9, np.random.default_rng(i)).total_s for i in range(400)]
    median = model.median(10e9).total_s
    assert 0.4 < np.mean(np.array(draws) > median) < 0.6 and np.std(draws) > 0.1 * median
    adds = [{"at": 5.0, "kind": "replica_added", "deployment": "chat"} for _ in range(5)]
    fleet = _fleet({"scheduling_s": 20, "engine_start_s": 30, "spread": 0.3}, adds)
    assert len({c.total_s for _, c in fleet.cold_starts.values()}) == 5  # each replica its own draw
    fixed = _fleet({"scheduling_s": 20, "engine_start_s": 30},
                   [{"at": 5.0, "kind": "replica_added", "deployment": "chat", "cold_start_s": 7.0}])
    (_, c), = fixed.cold_starts.values()
    assert c.total_s == c.in_process_s == 7.0
    none = _fleet(None, adds[:1])
    assert [c.total_s for _, c in none.cold_starts.values()] == [0.0]


@pytest.mark.parametrize("cold_start, where", [
    ({"scheduling": 5}, "cold_start.scheduling"),
    ({"image_pull_s": -1}, "cold_start.image_pull_s"),
    ({"spread": 5}, "cold_start.spread"),
    ({"remote_gb_per_s": 0}, "cold_start.remote_gb_per_s"),
])
def test_a_bad_cold_start_names_its_key(cold_start, where):
    with pytest.raises(ConfigError) as e:
        _fleet(cold_start, [])
    assert where in str(e.value)
