"""Live: the demo's scale-out with a cold start above the plan's opens LLMColdStartAbovePlan in a real Prometheus.

The simulated fleet adds the demo's three replicas (120 s cold start, speed 20); the real engine exporter follows the
targets file and publishes their measured cold starts and the plan's (60 s); Prometheus scrapes it every second with
the rules generated at 1/30 of their durations (the ticket's 15 minutes become 30 s)."""

from __future__ import annotations

import time

import httpx
import pytest

from goodput.demo.incident import ADDED_REPLICAS, COLD_START_S, incident_fleet, rag_deployment
from goodput.demo.stack import start_prometheus
from goodput.exporters.config import Plan
from goodput.exporters.engine import EngineExporter
from goodput.exporters.targets_file import TargetsFile
from goodput.foundation.http import Server, metrics_routes
from goodput.foundation.yamlfile import load_mapping
from goodput.monitoring.rulegen import load_spec, write
from goodput.simulator.config import parse_fleet
from goodput.simulator.live import LiveFleet
from tests.conftest import REPO, free_port_block, needs

pytestmark = [needs("prometheus"), pytest.mark.slow]

SCALE = 1 / 30
SPEED = 20.0
PLANNED_S = 60.0  # what the plan assumed: half the demo's cold start


@pytest.mark.timeout(240)
def test_a_scale_out_slower_than_the_plan_opens_the_cold_start_ticket(tmp_path):
    rules = tmp_path / "rules"
    write(load_spec(REPO / "rules" / "slos.yaml"), rules, scale=SCALE)
    source = load_mapping(REPO / "examples/fleet.yaml", "a fleet")
    dep = rag_deployment(source, "examples/fleet.yaml")
    fleet = incident_fleet(source, "examples/fleet.yaml", only_rag=True)
    fleet["events"] = [dict(e, at=10.0) for e in fleet["events"] if e["kind"] == "replica_added"]
    ports = free_port_block(1 + ADDED_REPLICAS, below_ephemeral=True)  # the added replicas bind later
    live = LiveFleet(parse_fleet(fleet, "incident"), base_port=ports, speed=SPEED,
                     traffic=0.0, targets=tmp_path / "targets.yaml")
    live.start()
    tf = TargetsFile(tmp_path / "targets.yaml")
    engine = EngineExporter(tf.targets, Plan({dep: 1000.0}, {}, {dep: PLANNED_S}), interval_s=1.0, targets_file=tf)
    engine.start()
    srv = Server("127.0.0.1", 0, metrics_routes(engine.render)).start()
    prom = start_prometheus(tmp_path / "prom", free_port_block(1), {"llm-engine": [srv.url.removeprefix("http://")]},
                            rules, None, interval="1s").ready("/-/ready")

    def firing() -> list[dict]:
        alerts = httpx.get(f"{prom.url}/api/v1/alerts", timeout=5).json()["data"]["alerts"]
        return [a for a in alerts if a["labels"]["alertname"] == "LLMColdStartAbovePlan" and a["state"] == "firing"]

    try:
        deadline = time.monotonic() + 150
        while not (got := firing()) and time.monotonic() < deadline:
            time.sleep(1.0)
        measured = sorted(float(line.rsplit(" ", 1)[1]) for line in engine.render().splitlines()
                          if line.startswith("llm_replica_cold_start_seconds{"))
    finally:
        prom.stop()
        srv.stop()
        engine.stop()
        live.close()
    assert len(measured) == ADDED_REPLICAS and all(COLD_START_S <= v < COLD_START_S + 3 for v in measured), measured
    assert got, "LLMColdStartAbovePlan did not fire"
    (alert,) = got
    assert alert["labels"]["deployment"] == dep and alert["labels"]["severity"] == "ticket"
    assert float(alert["value"]) == pytest.approx(measured[1] + 0.8 * (measured[2] - measured[1]))  # their p90
    assert "above the plan's 1m 0s" in alert["annotations"]["description"]
