"""The weekly review against a real Prometheus serving a simulated week backfilled with promtool.

The week is a small fleet (two deployments, P0 chat with a release and a replica loss, P2 batch) at a
150 s step, so the backfill takes about a minute; the review must find what the model put in it.
"""

from __future__ import annotations

import subprocess
import sys
from datetime import datetime

import numpy as np
import pytest

from goodput.review.report import write_review
from goodput.review.review import prometheus_review
from tests.conftest import artifact, free_port_block, needs, offline_page
from tests.review.conftest import WEEK

pytestmark = [needs("prometheus", "promtool"), pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def review(week):
    url, _, paths = week
    return prometheus_review(url, WEEK, plan=paths["plan"], releases=paths["releases"], gpu_hour_cost=2.0)


def _t(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def test_demand_matches_the_simulated_week(review, week):
    truth = week[1]
    for dep, want in truth["deployments"].items():
        tiers = review["deployments"][dep]["tiers"]
        assert sorted(tiers) == want["tiers"]
        got = sum(t["requests"] for t in tiers.values())
        assert got == pytest.approx(want["requests"], rel=0.01), dep
        prev = sum(t["requests_previous_week"] for t in tiers.values())
        assert prev == pytest.approx(want["requests_previous_week"], rel=0.01), dep
        (tier,) = tiers.values()
        assert tier["requests_per_second"]["peak_hour"] == want["peak_hour"].replace("+00:00", "Z"), dep
        # known growth: 6 % a week, in requests and in tokens
        assert tier["requests_week_over_week_pct"] == pytest.approx(100 * truth["growth_per_week"], abs=0.7), dep
        assert tier["tokens_week_over_week_pct"] == pytest.approx(100 * truth["growth_per_week"], abs=1.5), dep
        assert [x["tenant"] for x in tier["tenants"]][:1] and len(tier["tenants"]) == 4


def test_the_replica_loss_pages_for_its_duration_and_nothing_pages_elsewhere(review, week):
    loss = week[1]["loss"]
    pages = review["deployments"][loss["deployment"]]["pages"]
    down = [p for p in pages if p["alert"] == "LLMEngineDown"]
    assert len(down) == 1, pages
    assert down[0]["labels"]["replica"] == f"{loss['deployment']}-{loss['replica']}"
    assert loss["start"] < _t(down[0]["start"]) <= loss["start"] + 600  # 'for: 2m' after the replica went
    assert abs(_t(down[0]["end"]) - loss["end"]) <= 600
    others = [p for p in pages if p["alert"] != "LLMEngineDown"]
    assert others, "an overloaded deployment one replica short pages about its queue, KV cache or SLO"
    assert all(loss["start"] <= _t(p["start"]) <= loss["end"] + 3600 for p in others), others
    for dep, e in review["deployments"].items():
        if dep != loss["deployment"]:
            assert e["pages"] == []
    assert review["page_source"] == "alert expressions evaluated over the week"


def test_attainment_dips_during_the_loss_and_the_release_slows_decode(review, week):
    truth = week[1]
    grid = np.array([_t(g) for g in review["grid"]])
    loss = truth["loss"]
    chat = review["deployments"][loss["deployment"]]["tiers"]["P0"]
    (slo,) = chat["slo"]
    att = np.array(slo["attainment_series"])
    during = (grid > loss["start"] + 900) & (grid <= loss["end"])
    assert att[during].mean() < 0.9 < np.median(att), "the loss shows in the SLO, the rest of the week meets it"
    assert slo["error_budget_burn"] > 0.1
    batch = review["deployments"]["batch-32b-a100"]["tiers"]["P2"]["slo"][0]
    assert batch["met"] and batch["ttft_attainment"] > 0.99
    release = _t(truth["releases"][0]["time"])
    tpot = np.array(chat["latency_p95_series"]["tpot"])
    day = 86400

    def ratio(at):  # p95 TPOT over the day after ``at`` / the day before, the loss left out
        calm = ~((grid > loss["start"]) & (grid <= loss["end"] + 3600))
        return tpot[(grid > at) & (grid <= at + day) & calm].mean() / tpot[(grid > at - day) & (grid <= at) & calm].mean()
    # decode_time_scale 1.3, plus the queueing the slower replicas add; a day earlier nothing changed
    assert 1.2 < ratio(release) < 1.8 and ratio(release - day) < 1.1
    assert [r["time"] for r in review["releases"]] == [truth["releases"][0]["time"]]


def test_capacity_forecast_and_recommendations_follow_the_plan(review, week):
    chat = review["deployments"]["chat-8b-h100"]
    cap = chat["capacity"]
    assert cap["plan"] and cap["desired_replicas"] == 3
    assert cap["hours_above_80pct"] > 0 and cap["peak_load"] > 1.0  # the loss at the peak overloads it
    fc = chat["forecast"]
    assert fc["growth_per_week_pct"] == pytest.approx(6.0, abs=1.5)
    assert fc["weeks"][0]["week_start"].startswith("2026-11-30")
    assert fc["weeks"][0]["low"] < fc["weeks"][0]["peak"] < fc["weeks"][0]["high"]
    actions = [r["action"] for r in review["recommendations"] if r["deployment"] == "chat-8b-h100"]
    assert any(a.startswith("keep a warm pool of 1") for a in actions), actions
    assert all(r["reason"] and r["numbers"] for r in review["recommendations"])
    # GPU-hours from llm_gpu_deployment_info (TP 1 and TP 2), cost at 2 USD per GPU-hour
    batch = review["deployments"]["batch-32b-a100"]
    assert chat["usage"]["gpus_per_replica"] == 1 and batch["usage"]["gpus_per_replica"] == 2
    assert batch["usage"]["gpu_hours"] == pytest.approx(2 * 2 * 168, rel=0.01)
    assert chat["usage"]["replica_hours"] == pytest.approx(3 * 168 - 3, rel=0.01)  # one replica lost for 3 h
    assert batch["capacity"]["cost"]["used"] == pytest.approx(2 * 2 * 168 * 2.0, rel=0.01)


def test_the_weeks_cold_starts_are_shown_against_the_plan(review, week, tmp_path):
    """The replica lost on Thursday comes back as a new engine process after its cold start: the fleet's chat pool
    loads its weights from the remote store (16 GB at 0.4 GB/s) and starts its engine in 200 s, over the plan's 180."""
    from goodput.review.openmetrics import PLANNED_COLD_START_S
    from goodput.simulator.config import load_fleet

    dep = next(d for d in load_fleet(week[2]["truth"].parent / "fleet.yaml").deployments if d.name == "chat-8b-h100")
    assert dep.cold_start is not None and dep.budget is not None
    configured = dep.cold_start.median(dep.budget.weights * dep.tp).in_process_s
    chat = review["deployments"]["chat-8b-h100"]["cold_start"]
    assert chat["replicas"] == 1 and chat["p90_s"] == chat["max_s"] == pytest.approx(configured, abs=0.1)
    assert chat["plan_s"] == PLANNED_COLD_START_S and chat["p90_over_plan"] is True
    assert chat["measured"] == "process_start_to_first_scrape"  # no kube-state-metrics in the simulated week
    batch = review["deployments"]["batch-32b-a100"]["cold_start"]  # no start in the week: the plan's figure alone
    assert batch == {"replicas": 0, "p50_s": None, "p90_s": None, "max_s": None, "measured": None,
                     "plan_s": PLANNED_COLD_START_S, "p90_over_plan": None}
    rec = [r for r in review["recommendations"] if r["numbers"].get("cold_start_p90_s") is not None]
    assert [r["deployment"] for r in rec] == ["chat-8b-h100"]
    md = write_review(review, tmp_path)["md"].read_text()
    assert "### Cold starts against the plan" in md and "yes: LLMColdStartAbovePlan" in md
    assert "process start to first scrape" in md


def test_without_a_plan_capacity_says_so_and_the_rest_is_written(week, tmp_path):
    url = week[0]
    review = prometheus_review(url, WEEK)
    assert all(e["capacity"] == {"plan": None, "note": "no plan"} for e in review["deployments"].values())
    assert review["deployments"]["chat-8b-h100"]["tiers"]["P0"]["slo"]
    paths = write_review(review, tmp_path)
    assert "no plan" in paths["md"].read_text() and "no plan" in paths["html"].read_text()


def test_a_week_without_data_says_so(week, tmp_path):
    review = prometheus_review(week[0], "2026-W40")
    assert review["has_data"] is False and review["deployments"] == {}
    paths = write_review(review, tmp_path)
    assert "No data for 2026-W40" in paths["html"].read_text()
    assert "No data for 2026-W40" in paths["md"].read_text()


def test_an_unreachable_prometheus_is_one_line_naming_it(tmp_path):
    url = f"http://127.0.0.1:{free_port_block(1)}"
    done = subprocess.run([sys.executable, "-m", "goodput", "review", "--prometheus", url, "--week", WEEK,
                           "--out", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and url in done.stderr and "Traceback" not in done.stderr


@needs("chromium")
def test_the_review_renders_every_chart_in_headless_chromium(review, tmp_path):
    paths = write_review(review, tmp_path / "review")
    charts = paths["html"].read_text().count('class="plotly-graph-div"')
    assert charts == len(list((tmp_path / "review" / "charts").glob("*.svg"))) >= 8
    with offline_page(1300) as (page, errors, fetched):
        page.goto(paths["html"].as_uri())
        page.wait_for_function(f"document.querySelectorAll('.plotly-graph-div .main-svg').length >= {charts}",
                               timeout=90_000)
        drawn = page.evaluate("Array.from(document.querySelectorAll('.plotly-graph-div')).filter("
                              "d => d.querySelectorAll('.scatterlayer .trace').length > 0).length")
        shot = artifact("review", "review.png")
        page.screenshot(path=str(shot), full_page=True)
    assert drawn == charts, f"{charts - drawn} chart(s) without a trace"
    assert errors == [] and fetched == []
    assert shot.stat().st_size > 50_000
    print(f"screenshot: {shot}")


def test_the_week_s_latency_p95s_carry_their_bound_and_the_report_shows_it(review, tmp_path):
    from goodput.foundation.histogram import BOUND_KINDS, Quantile

    md = write_review(review, tmp_path / "r")["md"].read_text()
    seen = []
    for e in review["deployments"].values():
        for t in e["tiers"].values():
            for q in t["latency_p95_s"].values():
                assert q["bound"] in BOUND_KINDS and (q["value"] is None) == (q["bound"] != "within"), q
                assert Quantile.from_dict(q).text(digits=4) in md
                seen.append(q["bound"])
    assert "within" in seen, seen  # the decode-bound TPOT of milliseconds lies between two gateway buckets
