"""The review of the week in progress, against a real Prometheus serving this week up to now (backfilled with the real
promtool): the SLO section is there, the report says the week is partial, a one-sample dip of available replicas
gives no warm-pool advice while a 30-minute shortfall does, and queueing with the sequence limit pinned asks for
``max_num_seqs``, not ``max_num_batched_tokens``.

Before: the objective was an instant query at the week's end, in the future, so every SLO section read "none";
steps not yet come (and the one-sample dip) counted as 0 available replicas, so every pool got a warm pool.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from datetime import UTC, datetime

import numpy as np
import pytest

from goodput.review.backfill import backfill, serve_tsdb
from goodput.review.recommend import recommend
from goodput.simulator.week import parse_week
from tests.conftest import REPO, free_port_block, needs

pytestmark = [needs("prometheus", "promtool"), pytest.mark.timeout(300)]

STEP = 60
OBJECTIVE = 0.99
BLIP_AT = 900  # seconds into the week: rag's available replicas read 0 in this one sample
SHORT = (3600, 5400)  # chat misses one of its 2 replicas through these 30 minutes


def _series(name: str, labels: dict[str, str], times: np.ndarray, values: np.ndarray) -> str:
    lab = "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}"
    return "".join(f"{name}{lab} {v:g} {t:.0f}\n" for t, v in zip(times.tolist(), values.tolist(), strict=True))


def _week_so_far(start: float, now: float) -> str:
    t = np.arange(start - 7200, now - 30, STEP, dtype=float)
    one = np.ones(len(t))
    out = ["# TYPE llm_gateway_requests counter\n"]
    for dep, route, tier in (("rag", "rag", "P1"), ("chat", "chat", "P0")):
        out.append(_series("llm_gateway_requests_total", {"model": "m", "deployment": dep, "tenant": "acme",
                                                          "tier": tier, "route": route, "outcome": "ok"},
                           t, 2 * (t - t[0])))
    gauges: dict[str, list[tuple[dict, np.ndarray]]] = {
        "deployment_tier:llm_gateway_requests:rate5m": [({"deployment": "rag", "tier": "P1"}, 2 * one),
                                                        ({"deployment": "chat", "tier": "P0"}, 2 * one)],
        "deployment:llm_gateway_tokens:rate5m": [({"deployment": "rag"}, 9000 * one),
                                                 ({"deployment": "chat"}, 2000 * one)],
        "deployment_tier_route:llm_slo_ttft_errors:ratio_rate5m": [
            ({"deployment": "rag", "tier": "P1", "route": "rag"}, 0.002 * one),
            ({"deployment": "chat", "tier": "P0", "route": "chat"}, 0.0 * one)],
        "deployment_tier_route:llm_slo_tpot_errors:ratio_rate5m": [
            ({"deployment": "rag", "tier": "P1", "route": "rag"}, 0.0 * one),
            ({"deployment": "chat", "tier": "P0", "route": "chat"}, 0.0 * one)],
        "tier_route:llm_slo_objective:config": [({"tier": "P1", "route": "rag"}, OBJECTIVE * one),
                                                ({"tier": "P0", "route": "chat"}, OBJECTIVE * one)],
        "deployment_tier:llm_gateway_queue_wait_seconds:p95_5m": [({"deployment": "rag", "tier": "P1"}, 4.0 * one),
                                                                  ({"deployment": "chat", "tier": "P0"}, 4.0 * one)],
        "deployment:llm_kv_cache_usage_ratio:max": [({"deployment": "rag"}, 0.4 * one),
                                                    ({"deployment": "chat"}, 0.4 * one)],
        # rag runs its 20 sequences all along; chat's batch comes and goes
        "llm_requests_running": [({"deployment": "rag", "replica": "rag-0"}, 20 * one),
                                 ({"deployment": "chat", "replica": "chat-0"}, 5 + (np.arange(len(t)) % 11))],
        "llm_deployment_replicas": [({"deployment": d, "state": "desired"}, 2 * one) for d in ("rag", "chat")],
        "deployment:llm_replicas_available:max": [
            ({"deployment": "rag"}, np.where(t == start + BLIP_AT, 0.0, 2.0)),
            ({"deployment": "chat"}, np.where((t > start + SHORT[0]) & (t <= start + SHORT[1]), 1.0, 2.0))],
    }
    for name, series in gauges.items():
        out.append(f"# TYPE {name} gauge\n")
        out.extend(_series(name, labels, t, v) for labels, v in series)
    out.append("# EOF\n")
    return "".join(out)


@pytest.fixture(scope="module")
def this_week(tmp_path_factory):
    """(Prometheus URL, ISO week, now): this week from Monday 00:00 UTC up to now, served by a real Prometheus."""
    now = time.time()
    year, week, _ = datetime.fromtimestamp(now, UTC).isocalendar()
    name = f"{year}-W{week:02d}"
    start = parse_week(name).timestamp()
    if now - start < SHORT[1] + 600:
        pytest.skip(f"{name} began {now - start:.0f} s ago: too little of it to review yet")
    work = tmp_path_factory.mktemp("this-week")
    (work / "week.om").write_text(_week_so_far(start, now))
    port = free_port_block(1)
    backfill(work / "week.om", work / "tsdb", [], parse_week(name), parse_week(name), port, progress=lambda m: None)
    served = serve_tsdb(work / "tsdb", port)
    try:
        yield served.url, name, now
    finally:
        served.stop()


@pytest.fixture(scope="module")
def reviewed(this_week, tmp_path_factory):
    """What ``goodput review`` prints and writes for the week in progress."""
    url, name, _ = this_week
    out = tmp_path_factory.mktemp("review")
    done = subprocess.run([sys.executable, "-m", "goodput", "review", "--prometheus", url, "--week", name, "--out",
                           str(out), "--history-weeks", "1"], capture_output=True, text=True, timeout=180, cwd=REPO)
    assert done.returncode == 0, done.stderr
    return done.stdout, json.loads((out / "review.json").read_text()), (out / "review.md").read_text()


def test_the_week_in_progress_has_its_slo_section_and_says_it_is_partial(reviewed, this_week):
    stdout, review, md = reviewed
    for dep, tier, route in (("rag", "P1", "rag"), ("chat", "P0", "chat")):
        (slo,) = review["deployments"][dep]["tiers"][tier]["slo"]
        assert slo["route"] == route and slo["objective"] == OBJECTIVE
    rag = review["deployments"]["rag"]["tiers"]["P1"]["slo"][0]
    assert rag["ttft_attainment"] == pytest.approx(0.998) and rag["met"]
    assert "SLO attainment and error budget\n\nnone" not in md
    as_of = datetime.fromisoformat(review["partial"]["as_of"].replace("Z", "+00:00")).timestamp()
    assert abs(as_of - this_week[2]) < 120
    assert "Partial week" in md and "partial week" in stdout
    # means over the steps that have passed: 2 req/s, not 2 x the share of the week gone by
    assert review["deployments"]["rag"]["tiers"]["P1"]["requests_per_second"]["mean"] == pytest.approx(2.0, rel=0.02)


def test_a_one_sample_dip_gives_no_warm_pool_and_a_half_hour_shortfall_does(reviewed):
    _, review, _ = reviewed
    rag, chat = review["deployments"]["rag"], review["deployments"]["chat"]
    assert rag["replicas"]["min_available"] == 0 and rag["replicas"]["shortfall"] is None  # the dip, seen, not held
    assert chat["replicas"]["shortfall"]["replicas"] == 1 and chat["replicas"]["shortfall"]["minutes"] == 30
    pools = {r["deployment"]: r for r in review["recommendations"] if r["action"].startswith("keep a warm pool")}
    assert set(pools) == {"chat"} and pools["chat"]["action"] == "keep a warm pool of 1 replica(s)"


def test_queueing_at_the_sequence_limit_asks_for_max_num_seqs(reviewed):
    _, review, _ = reviewed
    actions = {(r["deployment"], r["action"]) for r in review["recommendations"]}
    assert ("rag", "raise max_num_seqs (or add replicas)") in actions  # running pinned at 20 while it queued
    assert ("rag", "raise max_num_batched_tokens") not in actions
    assert ("chat", "raise max_num_batched_tokens") in actions  # its batch never filled
    assert review["deployments"]["rag"]["running"] == {"max": 20.0, "at_max_while_queueing": 1.0}


def test_the_peak_figures_say_which_peak_they_are(reviewed):
    stdout, review, md = reviewed
    line = next(x for x in stdout.splitlines() if x.startswith("rag:"))
    assert "5-minute peak 9,000 tokens/s" in line and "busiest hour 9,000 tokens/s" in line
    assert "peak hour req/s" in md and "| peak |" not in md


def _entry(pages: list[dict]) -> dict:
    return {"replicas": {"desired": 2.0, "shortfall": {"replicas": 1, "start": "2026-12-02T13:00:00Z",
                                                       "end": "2026-12-02T16:00:00Z", "minutes": 180}},
            "pages": pages, "capacity": {"plan": None}, "kv": {"usage_p95": None}, "tiers": {}}


def test_pages_followed_counts_only_pages_that_came_after_the_shortfall_began():
    page = lambda at: {"alert": "LLMQueueWaitRisingReplicasShort", "start": at}  # noqa: E731
    before, during, after, late = (page(t) for t in ("2026-12-02T12:50:00Z", "2026-12-02T13:10:00Z",
                                                      "2026-12-02T16:30:00Z", "2026-12-02T18:00:00Z"))
    down = {"alert": "LLMEngineDown", "start": "2026-12-02T13:02:00Z"}
    (rec,) = recommend({"deployments": {"rag": _entry([before, during, after, late, down])}})
    assert rec["numbers"]["pages"] == 2 and "2 page(s) followed" in rec["reason"]
    (rec,) = recommend({"deployments": {"rag": _entry([before])}})
    assert rec["numbers"]["pages"] == 0 and "followed" not in rec["reason"]
