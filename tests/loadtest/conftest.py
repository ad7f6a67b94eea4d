"""Fixtures the load-test tests share: one live replica with no traffic of its own and a workload file."""

import copy

import pytest

from goodput.simulator.live import LiveFleet
from tests.conftest import BASE_DEPLOYMENT, free_port_block, make_fleet

WORKLOAD = """\
api: chat
input_tokens: {p50: 200, p95: 600, max: 1000}
output_tokens: {p50: 20, p95: 60, max: 80}
tiers: {P0: 0.5, P1: 0.5}
tenants: {acme: 1}
routes: {chat: 1}
shared_prefix: {tokens: 64, fraction: 0.5}
"""


@pytest.fixture(scope="module")
def fleet():
    dep = dict(copy.deepcopy(BASE_DEPLOYMENT), replicas=1)
    base = free_port_block(1)
    lf = LiveFleet(make_fleet(deployments=[dep]), base_port=base, traffic=0.0)
    lf.start()
    yield f"http://127.0.0.1:{base}"
    lf.close()


@pytest.fixture
def workload(tmp_path):
    path = tmp_path / "workload.yaml"
    path.write_text(WORKLOAD)
    return str(path)
