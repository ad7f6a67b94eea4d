"""The server's view per step: scraped from the live fleet's /metrics through the normalizer, reduced per step."""

from __future__ import annotations

import copy
import math
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from goodput.loadtest.server_view import (
    Round,
    ServerView,
    TargetScrape,
    metrics_url,
    parse_engine,
    parse_gpu_utilization,
    step_view,
)
from goodput.simulator.live import LiveFleet
from tests.conftest import BASE_DEPLOYMENT, FIXTURES, free_port_block, make_fleet

INF = math.inf


def scrape(running=0.0, waiting=0.0, kv=0.0, preempt=0.0, queried=0.0, hit=0.0, queue=(0.0, 0.0, 0.0)) -> TargetScrape:
    return TargetScrape({"llm_requests_running": running, "llm_requests_waiting": waiting, "llm_kv_cache_usage_ratio": kv},
                        {"llm_preemptions_total": preempt, "llm_prefix_cache_queried_tokens_total": queried,
                         "llm_prefix_cache_hit_tokens_total": hit},
                        ((1.0, queue[0]), (2.0, queue[1]), (INF, queue[2])))


def test_a_step_differences_counters_from_its_start_and_averages_gauges_inside_it():
    rounds = [
        Round(0.0, {"a": scrape(preempt=5, queried=100, hit=10, queue=(10, 10, 10)), "b": scrape()}),
        Round(1.0, {"a": scrape(running=4, waiting=2, kv=0.5, preempt=7, queried=300, hit=110, queue=(10, 20, 20)),
                    "b": None}, gpu_util=0.8),
        Round(2.0, {"a": scrape(running=2, kv=0.7, preempt=8, queried=500, hit=210, queue=(10, 30, 30)),
                    "b": scrape(running=2, kv=0.1)}, gpu_util=0.6),
    ]
    view = step_view(rounds, 0.5, 2.0)
    assert view["scrape_rounds"] == 2 and view["failed_scrapes"] == 1
    assert view["running_mean"] == 4.0 and view["waiting_mean"] == 1.0  # (4 + 2) / 2 and (2 + 0) / 2
    assert view["kv_usage_mean"] == pytest.approx((0.5 + 0.7 + 0.1) / 3) and view["kv_usage_max"] == 0.7
    assert view["preemptions"] == 3.0
    assert view["prefix_cache_hit_ratio"] == pytest.approx(200 / 400)
    wait = view["queue_wait_p95_s"]  # all 20 new waits fell in (1, 2]
    assert wait["bound"] == "within" and wait["value"] == pytest.approx(1.0 + 0.95) and wait["upper"] == 2.0
    assert view["gpu_util_mean"] == pytest.approx(0.7)
    idle = step_view(rounds, 2.5, 3.0)
    assert idle["scrape_rounds"] == 0 and idle["preemptions"] == 0 and idle["queue_wait_p95_s"] is None


@pytest.mark.parametrize(("urls", "interval"), [([], 1.0), (["http://127.0.0.1:1/metrics"], 0.0),
                                                (["http://127.0.0.1:1/metrics"], math.nan)])
def test_nothing_to_scrape_or_no_interval_is_refused_before_the_run(urls, interval):
    with pytest.raises(ValueError):
        ServerView(urls, interval)


def test_stopping_a_view_that_never_started_is_harmless():
    view = ServerView(["http://127.0.0.1:1/metrics"], 1.0)
    view.stop()
    assert view.rounds == [] and view.per_step([{"index": 0, "start_s": 0, "end_s": 1}])[0]["scrape_rounds"] == 0


def test_a_target_s_metrics_url():
    assert metrics_url("http://127.0.0.1:8100") == "http://127.0.0.1:8100/metrics"
    assert metrics_url("http://127.0.0.1:8100/v1/") == "http://127.0.0.1:8100/metrics"


def test_a_step_whose_waits_all_fell_in_the_first_or_the_last_bucket_says_so():
    short = [Round(0.0, {"a": scrape()}), Round(1.0, {"a": scrape(queue=(20, 20, 20))})]
    assert step_view(short, 0.0, 1.0)["queue_wait_p95_s"] == {"bound": "below", "value": None, "lower": 0.0,
                                                               "upper": 1.0}
    long = [Round(0.0, {"a": scrape()}), Round(1.0, {"a": scrape(queue=(0, 0, 20))})]
    assert step_view(long, 0.0, 1.0)["queue_wait_p95_s"] == {"bound": "above", "value": None, "lower": 2.0,
                                                              "upper": None}


def test_a_counter_reset_counts_from_zero():
    rounds = [Round(0.0, {"a": scrape(preempt=50)}), Round(1.0, {"a": scrape(preempt=3)})]
    assert step_view(rounds, 0.0, 1.0)["preemptions"] == 3.0


@pytest.mark.parametrize("sample", ["engine_samples/sglang_docs_production_metrics.txt", "tgi_synthetic.txt",
                                    "engine_samples/triton_trtllm_backend_readme_metrics.txt"])
def test_every_engine_dialect_reads(sample):  # vLLM's is read from the live fleet below
    s = parse_engine((FIXTURES / sample).read_text())
    assert s.gauges.get("llm_requests_running", -1) >= 0 and s.gauges.get("llm_requests_waiting", -1) >= 0, s


def test_gpu_utilization_is_the_mean_over_gpus():
    text = ('# HELP llm_gpu_utilization_ratio x\nllm_gpu_utilization_ratio{gpu="0",uuid="a"} 0.5\n'
            'llm_gpu_utilization_ratio{gpu="1",uuid="b"} 1\nllm_gpu_utilization_ratio_other 9\n')
    assert parse_gpu_utilization(text) == 0.75
    assert parse_gpu_utilization("llm_gpu_up 1\n") is None


def test_the_server_view_of_the_live_fleet_shows_queue_wait_rising_with_the_step(tmp_path):
    dep = copy.deepcopy(BASE_DEPLOYMENT)
    dep["engine"].update({"max_num_seqs": 4, "prefix_cache": True})
    base = free_port_block(3)  # two replicas and a port nobody serves
    fleet = LiveFleet(make_fleet(deployments=[dep]), base_port=base, traffic=0)
    fleet.start()
    t0 = time.monotonic()
    urls = [metrics_url(f"http://127.0.0.1:{port}/v1") for port in (base, base + 1, base + 2)]
    view = ServerView(urls, 0.05, clock=lambda: time.monotonic() - t0)
    body = {"model": "Llama-3.1-8B", "prompt": " ".join(["shared prefix words"] * 100), "max_tokens": 40,
            "ignore_eos": True}
    ends, answers = [], []
    try:
        view.start()
        time.sleep(0.5)
        ends.append(time.monotonic() - t0)
        with httpx.Client(timeout=60) as c, ThreadPoolExecutor(12) as pool:
            for n in (3, 12):  # 3 requests for 4 seats: no queue; then 12 for 4: a queue
                answers += pool.map(lambda _: c.post(f"http://127.0.0.1:{base}/v1/completions", json=body), range(n))
                time.sleep(0.3)  # a few scrapes after the last answer, so the step's counters include it
                ends.append(time.monotonic() - t0)
        view.stop()
        rounds = len(view.rounds)
        view.stop()  # a second stop (an interrupted run's cleanup) changes nothing
        assert len(view.rounds) == rounds
    finally:
        fleet.close()
    assert [a.status_code for a in answers] == [200] * 15
    steps = view.per_step([{"index": i, "start_s": start, "end_s": end}
                           for i, (start, end) in enumerate(zip([0.0, *ends], ends, strict=False))])
    idle, light, heavy = steps[0], steps[1], steps[2]
    assert view.failures[urls[2]] >= 1 and urls[0] not in view.failures, view.last_error
    assert heavy["failed_scrapes"] >= 1, "the dead target's failures are not counted per step"
    assert idle["running_mean"] == 0 and idle["waiting_mean"] == 0 and idle["queue_wait_p95_s"] is None
    assert light["running_mean"] > 0 and heavy["running_mean"] > 0, (light, heavy)
    assert heavy["waiting_mean"] > light["waiting_mean"], (light, heavy)  # light waits only for the next engine step
    # 3 requests for 4 seats wait a few milliseconds: inside vLLM's first bucket (0-0.3 s), said as a bound, not
    # interpolated to ~285 ms; 12 for 4 wait for whole answers, in a bucket at least as high
    assert light["queue_wait_p95_s"] == {"bound": "below", "value": None, "lower": 0.0, "upper": 0.3}, light
    assert heavy["queue_wait_p95_s"]["bound"] in ("below", "within"), heavy
    assert heavy["kv_usage_max"] > 0 and heavy["kv_usage_mean"] > 0
    assert heavy["prefix_cache_hit_ratio"] == 0.0, heavy  # looked up, never hit: the live fleet's external
    # requests carry no prefix ids (step_view's own test checks a ratio that is not zero)
    assert heavy["gpu_util_mean"] is None
