"""The review's cost against the simulated week backfilled with every rule file (rules/cost.rules.yaml included):
each deployment's dollars are its GPU-hours x their price, its tenants' dollars add up to them, the fleet's to the
deployments', and the waste (idle cost) is part of the spend, its trend and days in the report."""

from __future__ import annotations

from datetime import datetime

import pytest

from goodput.monitoring.rulegen import load_spec
from goodput.plan.prices import load_prices
from goodput.review.report import write_review
from goodput.review.review import prometheus_review
from tests.conftest import REPO, needs
from tests.review.conftest import WEEK

pytestmark = [needs("prometheus", "promtool"), pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def review(week):
    url, _, paths = week
    return prometheus_review(url, WEEK, plan=paths["plan"])


def test_cost_per_deployment_is_its_gpu_hours_times_prices_and_its_tenants_sum_to_it(review):
    pricing = load_spec(REPO / "rules" / "slos.yaml").pricing  # batch-32b-a100 on spot, the others on demand
    assert pricing.deployments.get("batch-32b-a100") == "spot" and pricing.default == "on_demand"
    for dep, e in review["deployments"].items():
        c = e["cost"]
        (gpu_type,) = c["gpu_hours"]  # each deployment runs one GPU type, priced at its own pricing
        prices = load_prices(None, pricing.deployments.get(dep, pricing.default))
        assert c["usd_per_gpu_hour"] == {gpu_type: prices.usd_per_gpu_hour(gpu_type)}, dep
        assert c["gpu_hours"][gpu_type] == pytest.approx(e["usage"]["gpu_hours"], rel=0.02), dep
        assert c["usd"] > 0 and c["usd"] == pytest.approx(c["gpu_hours_x_price_usd"], rel=1e-3), dep
        assert sum(t["usd"] for t in c["tenants"]) == pytest.approx(c["usd"], rel=0.01), dep
        assert {t["tenant"] for t in c["tenants"]} == {x["tenant"] for t in e["tiers"].values() for x in t["tenants"]}
        assert 0 <= c["idle_usd"] < c["usd"] and c["usd_per_million_goodput_tokens"] > 0
        assert len(c["daily"]) == 7 and sum(d["usd"] for d in c["daily"]) == pytest.approx(c["usd"], abs=0.05)
    fleet = review["cost"]
    assert fleet["usd"] == pytest.approx(sum(e["cost"]["usd"] for e in review["deployments"].values()), abs=0.05)
    assert fleet["idle_usd"] == pytest.approx(sum(e["cost"]["idle_usd"] for e in review["deployments"].values()),
                                              abs=0.05)


def test_the_replica_loss_costs_less_that_day(review, week):
    truth = week[1]
    loss = truth["loss"]
    usd = [d["usd"] for d in review["deployments"][loss["deployment"]]["cost"]["daily"]]
    day = int((loss["start"] - datetime.fromisoformat(truth["week_start"]).timestamp()) // 86400)
    assert usd[day] < max(usd), "a replica fewer for hours is fewer GPU-hours paid that day"


def test_the_report_shows_cost_tenants_and_waste(review, tmp_path):
    md = write_review(review, tmp_path)["md"].read_text()
    assert "## Fleet cost" in md and "### Cost\n" in md and "### Cost by tenant" in md
    assert "$ per 1M goodput tokens" in md and "idle share trend pp/day" in md
