"""Each upper bound checked before the work is the figure its docs page's Limits table gives (docs say what the code
does: change one, the other must follow)."""

from __future__ import annotations

import pytest

from goodput.deploy import cli as deploy_cli
from goodput.deploy import kubernetes
from goodput.foundation import jsonfile, promapi, promendpoint, yamlfile
from goodput.loadtest import cli as loadtest_cli
from goodput.loadtest.imports import MAX_IMPORT_BYTES
from goodput.plan import cli as plan_cli
from goodput.plan import demand, disaggfile
from goodput.simulator import config, week
from goodput.simulator.cli import MAX_DURATION_S
from tests.conftest import REPO

LIMITS = {
    "simulator.md": [yamlfile.MAX_YAML_BYTES, yamlfile.MAX_DEPTH, yamlfile.MAX_ALIAS_NODES, config.MAX_REPLICAS,
                     config.MAX_ENGINE_INT, config.MAX_RATE, config.MAX_BURST_FACTOR, config.MAX_BATCH,
                     config.MIN_DIURNAL_PERIOD_S, MAX_DURATION_S, config.MAX_REQUESTS, config.MAX_LINK_GBPS],
    "capacity.md": [demand.MAX_PEAK_RPS, demand.MAX_GROWTH, demand.MAX_SECONDS, demand.MAX_TP, plan_cli.MAX_JOBS,
                    plan_cli.MAX_SIM_DURATION_S, plan_cli.MAX_OVERLOAD_S, disaggfile.MAX_LINK_GBPS,
                    disaggfile.MAX_LINK_LATENCY_MS],
    "loadtest.md": [loadtest_cli.MAX_IN_FLIGHT, loadtest_cli.MAX_DURATION_S, MAX_IMPORT_BYTES, jsonfile.MAX_JSON_BYTES,
                    jsonfile.MAX_DEPTH],
    "kubernetes.md": [deploy_cli.MAX_LABEL, deploy_cli.MAX_RELEASE, deploy_cli.MAX_IMAGE, kubernetes.MAX_CONFIG_MAP_BYTES],
    "metrics-stores.md": [promendpoint.MAX_SECRET_BYTES, promendpoint.MAX_HEADERS],
    "review.md": [week.MAX_WEEKS_BEFORE, week.MAX_TENANTS, week.MAX_TENANT_POINTS, promapi.MAX_ANSWER_BYTES,
                  promapi.CONNECT_TIMEOUT_S],
}


@pytest.mark.parametrize("page", sorted(LIMITS))
def test_every_limit_is_in_its_page(page):
    text = (REPO / "docs" / page).read_text().partition("## Limits")[2]
    assert text, f"docs/{page} has no Limits section"
    for limit in LIMITS[page]:
        assert f"{limit:,.15g}" in text or f"{limit:.15g}" in text, f"docs/{page}: {limit:,.15g} not in its Limits table"
