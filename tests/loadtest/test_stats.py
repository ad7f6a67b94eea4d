"""Per-step statistics against hand-computed cases."""

import math

import pytest

from goodput.loadtest.patterns import Step
from goodput.loadtest.report import verdict_text
from goodput.loadtest.slo import parse_slo
from goodput.loadtest.stats import distribution, knee, served_rate, summarize, verdict
from tests.loadtest.loadtest_records import rec


def step(index=0, start=0.0, end=10.0, settle=0.0, rate=None, conc=None):
    return Step(index, f"s{index}", start, end, settle, rate, conc, None)


def test_distribution_percentiles_are_numpy_linear():
    d = distribution([1.0, 2.0, 3.0, 4.0, 5.0])
    assert d == {"p50": 3.0, "p90": 4.6, "p95": pytest.approx(4.8), "p99": pytest.approx(4.96), "mean": 3.0, "count": 5}
    assert distribution([])["p50"] is None and distribution([])["count"] == 0


def test_rates_goodput_and_attainment_by_hand():
    slo = parse_slo("ttft_p50=0.5s")
    records = [
        rec(0, sched=1.0, ttft=0.2, e2e=1.0, out=10, inp=100),  # meets
        rec(1, sched=2.0, ttft=0.4, e2e=2.0, out=20, inp=100),  # meets
        rec(2, sched=3.0, ttft=0.9, e2e=2.0, out=30, inp=100),  # completes, misses TTFT
        rec(3, sched=4.0, error="http_429", ttft=None, e2e=None, out=0, inp=100),
        rec(4, sched=5.0, error="timeout", ttft=None, e2e=None, out=0, inp=100),
    ]
    [s] = summarize(records, slo, [step(end=10.0, rate=0.5)])
    assert s["measured_s"] == 10.0 and s["requests"] == 5 and s["completed"] == 3
    assert s["achieved_rate"] == pytest.approx(0.3)
    assert s["input_tokens_per_s"] == pytest.approx(30.0)       # completed requests only
    assert s["output_tokens_per_s"] == pytest.approx(6.0)
    assert s["errors"] == {"http_429": 1, "timeout": 1} and s["error_rate"] == pytest.approx(0.4)
    assert s["slo_attainment"] == pytest.approx(2 / 5)
    assert s["goodput_requests_per_s"] == pytest.approx(0.2)
    assert s["goodput_tokens_per_s"] == pytest.approx(3.0)       # (10 + 20) / 10 s
    assert s["ttft_s"]["p50"] == pytest.approx(0.4) and s["ttft_s"]["count"] == 3
    # the step's TTFT p50 over all five, failures as +inf: [0.2, 0.4, 0.9, inf, inf] -> 0.9 > 0.5
    assert s["slo_terms"] == [{"term": "ttft_p50=500ms", "value_s": pytest.approx(0.9), "met": False}]
    assert s["slo_met"] is False


def test_failures_count_as_infinitely_late_for_the_step():
    slo = parse_slo("ttft_p90=1s")
    ok = [rec(i, sched=float(i), ttft=0.1) for i in range(8)]
    bad = [rec(8 + i, sched=8.0, error="http_5xx", ttft=None, e2e=None) for i in range(2)]
    [s] = summarize(ok + bad, slo, [step(end=10.0, rate=1.0)])
    assert s["ttft_s"]["p99"] == pytest.approx(0.1)          # the latency figures are of completed requests
    assert s["slo_terms"][0]["value_s"] is None and not s["slo_met"]  # p90 of [0.1]*8 + [inf]*2 is inf
    [s] = summarize(ok + bad[:1], slo, [step(end=10.0, rate=1.0)])
    assert s["slo_terms"][0]["value_s"] is None  # 9 values: p90 interpolates toward inf
    [s] = summarize(ok, slo, [step(end=10.0, rate=1.0)])
    assert s["slo_met"] and s["slo_terms"][0]["value_s"] == pytest.approx(0.1)


def test_tpot_and_itl_by_hand():
    slo = parse_slo("tpot_p50=60ms,itl_p99=0.2s")
    r = rec(0, ttft=0.5, e2e=0.5 + 4 * 0.05, out=5, itl=[0.04, 0.05, 0.06, 0.05])
    [s] = summarize([r], slo, [step()])
    assert s["tpot_s"]["p50"] == pytest.approx(0.05)
    assert s["itl_s"]["mean"] == pytest.approx(0.05) and s["itl_s"]["count"] == 4
    assert s["e2e_s"]["p50"] == pytest.approx(0.7)
    assert s["slo_met"] and s["goodput_requests_per_s"] == pytest.approx(0.1)


def test_settle_period_and_other_steps_are_excluded():
    slo = parse_slo("e2e_p99=5s")
    steps = [step(0, 0.0, 10.0, settle=2.0, rate=1.0), step(1, 10.0, 20.0, settle=2.0, rate=2.0)]
    records = [
        rec(0, step=0, sched=1.0, e2e=9.0),   # in settle: left out (would break the SLO)
        rec(1, step=0, sched=3.0, e2e=1.0),
        rec(2, step=1, sched=11.0, e2e=1.0),  # settle of step 1
        rec(3, step=1, sched=12.0, e2e=1.0),
        rec(4, step=1, sched=15.0, e2e=9.0),
    ]
    a, b = summarize(records, slo, steps)
    assert (a["requests"], a["measured_s"], a["slo_met"]) == (1, 8.0, True)
    assert a["achieved_rate"] == pytest.approx(1 / 8)
    assert (b["requests"], b["slo_met"]) == (2, False)
    assert b["slo_attainment"] == pytest.approx(0.5)


def test_per_tier_only_when_tiers_differ():
    slo = parse_slo("ttft_p50=0.5s")
    same = [rec(i, sched=float(i), tier="P0") for i in range(3)]
    assert summarize(same, slo, [step()])[0]["per_tier"] == {}
    mixed = [rec(0, tier="P0", ttft=0.1), rec(1, tier="P2", ttft=0.9), rec(2, tier="P2", ttft=0.1)]
    tiers = summarize(mixed, slo, [step()])[0]["per_tier"]
    assert set(tiers) == {"P0", "P2"}
    assert tiers["P0"]["slo_attainment"] == 1.0 and tiers["P2"]["slo_attainment"] == 0.5
    assert tiers["P2"]["goodput_requests_per_s"] == pytest.approx(0.1)


def test_empty_step_does_not_meet_and_has_no_rates():
    [s] = summarize([], parse_slo("ttft_p50=1s"), [step()])
    assert s["requests"] == 0 and s["slo_met"] is False and s["slo_attainment"] is None
    assert s["achieved_rate"] == 0.0 and s["ttft_s"]["p50"] is None


def test_knee_is_the_highest_load_that_meets():
    steps = [
        {"index": 0, "offered_rate": 1.0, "slo_met": True, "goodput_requests_per_s": 1.0},
        {"index": 1, "offered_rate": 4.0, "slo_met": True, "goodput_requests_per_s": 3.9},
        {"index": 2, "offered_rate": 8.0, "slo_met": False, "goodput_requests_per_s": 2.0},
        {"index": 3, "offered_rate": 2.0, "slo_met": True, "goodput_requests_per_s": 2.0},
    ]
    k = knee(steps)
    assert (k["step"], k["offered_rate"], k["goodput_requests_per_s"]) == (1, 4.0, 3.9)
    conc = [{"index": 0, "offered_rate": None, "concurrency": 16, "slo_met": True},
            {"index": 1, "offered_rate": None, "concurrency": 4, "slo_met": True}]
    assert knee(conc)["concurrency"] == 16
    assert knee([{"index": 0, "offered_rate": 1.0, "slo_met": False}]) is None
    assert knee([]) is None


def test_a_single_step_without_an_offered_rate_is_judged_not_skipped():
    """An import that did not say what it offered (AIPerf without its configuration): the step that met at 100%
    attainment is the knee, and stdout's verdict says so, never "no step meets it" beside a met step."""
    slo = parse_slo("ttft_p95=1s")
    [s] = summarize([rec(i, sched=i * 0.25, ttft=0.1, e2e=0.5) for i in range(8)], slo,
                    [Step(0, "aiperf", 0.0, 2.0, 0.0, None, None, None)])
    assert s["offered_rate"] is None and s["concurrency"] is None and s["slo_met"] and s["slo_attainment"] == 1.0
    v = verdict([s])
    assert v["judged"] and v["met"] == [0] and v["knee"]["step"] == 0
    assert v["knee"]["goodput_requests_per_s"] == pytest.approx(4.0)
    assert verdict_text({"steps": [s]}) == "knee at step 0 (4.00 req/s goodput)"


def test_steps_without_per_request_data_are_not_judged():
    unjudged = [{"index": 0, "offered_rate": 2.0, "slo_met": None, "achieved_rate": 2.0}]
    assert verdict(unjudged) == {"judged": False, "met": [], "knee": None}
    assert verdict_text({"steps": unjudged}) == "not judged (no per-request data)"
    missed = [{**unjudged[0], "slo_met": False}]
    assert verdict_text({"steps": missed}) == "no step meets it"


def test_summary_values_are_json_safe():
    import json
    slo = parse_slo("ttft_p50=0.1s")
    [s] = summarize([rec(0, error="connect", ttft=None, e2e=None)], slo, [step()])
    json.dumps(s, allow_nan=False)
    assert not math.isnan(s["error_rate"])


def test_step_percentile_equals_numpys_on_finite_values():
    import numpy as np

    from goodput.loadtest.slo import SloTerm
    from goodput.loadtest.stats import slo_term_value

    rng = np.random.default_rng(3)
    for n in (1, 2, 7, 100):
        ttfts = rng.exponential(0.3, n)
        records = [rec(i, ttft=float(t), e2e=float(t) + 1.0) for i, t in enumerate(ttfts)]
        for pct in (50.0, 90.0, 95.0, 99.0, 99.9):
            assert slo_term_value(SloTerm("ttft", pct, 1.0), records) == pytest.approx(np.percentile(ttfts, pct))


def test_served_rate_counts_completions_inside_the_window():
    """Under overload the step's own requests finish late; the served rate counts what finished in the window."""
    recs = [rec(i, sched=0.0, e2e=t) for i, t in enumerate([1.0, 3.0, 5.0, 9.9, 10.0, 30.0])]
    recs.append(rec(9, sched=4.0, e2e=None, error="timeout"))
    assert served_rate(recs, step(end=10.0, settle=2.0, rate=5.0)) == pytest.approx(3 / 8)  # 3.0, 5.0, 9.9
    assert served_rate(recs, step(end=2.0, settle=2.0, rate=5.0)) is None
