"""The review's SLO figures from hand-made answers: an objective of 1.0 (no error budget) and ratios out of range.

Before: an objective of 1.0 was a ZeroDivisionError (the budget 1 - objective is 0) and an error ratio above 1 gave
a negative attainment."""

from __future__ import annotations

import numpy as np

from goodput.review.prom import Series
from goodput.review.queries import STEP_S
from goodput.review.summarize import _slo, latency_p95

GRID = 1_000_000.0 + STEP_S * np.arange(1, 13)
LABELS = {"deployment": "chat", "tier": "P0", "route": "chat"}


def _raw(objective: float, errors: float) -> dict:
    def s(labels: dict, value: float) -> Series:
        return Series(labels, GRID.copy(), np.full(len(GRID), value))
    return {"by_route": [s(LABELS, 10.0)], "ttft_errors": [s(LABELS, errors)], "tpot_errors": [s(LABELS, 0.0)],
            "objective": [Series({"tier": "P0", "route": "chat"}, GRID[:1], np.array([objective]))]}


def test_an_objective_of_one_has_no_budget_to_burn():
    (met,) = _slo(_raw(1.0, 0.0), GRID, "chat", "P0")
    (missed,) = _slo(_raw(1.0, 0.01), GRID, "chat", "P0")
    assert met["met"] and met["error_budget_burn"] is None
    assert not missed["met"] and missed["error_budget_burn"] is None and missed["ttft_attainment"] == 0.99


def test_an_error_ratio_above_one_is_one_and_an_objective_out_of_range_judges_nothing():
    (s,) = _slo(_raw(0.99, 7.0), GRID, "chat", "P0")
    assert s["ttft_attainment"] == 0.0 and s["error_budget_burn"] == 100.0
    assert _slo(_raw(1.5, 0.0), GRID, "chat", "P0") == [] and _slo(_raw(0.0, 0.0), GRID, "chat", "P0") == []


def test_the_week_s_latency_p95_is_a_bound_in_the_first_and_the_last_gateway_bucket():
    """The recorded p95s are histogram_quantile over the gateway buckets (5 ms ... 300 s): waits of a millisecond
    read as an interpolated ~4.8 ms inside the first bucket and a queue past 300 s reads 300 exactly."""
    from goodput.foundation.histogram import Quantile
    from goodput.review.recommend import _engine

    short, inside, long = (latency_p95("queue", np.full(12, v)) for v in (0.0048, 0.042, 300.0))
    assert short == {"bound": "below", "value": None, "lower": 0.0, "upper": 0.005}
    assert inside == {"bound": "within", "value": 0.042, "lower": 0.025, "upper": 0.05}
    assert long == {"bound": "above", "value": None, "lower": 300.0, "upper": None}
    assert [Quantile.from_dict(q).text(digits=4) for q in (short, inside, long)] == ["<0.005", "0.0420", ">300"]
    kv = {"usage_p95": 0.5, "preemptions": 0, "allocation_failures": 0}  # KV at half: queueing is the batch size
    (rec,) = _engine("chat", {"tiers": {"P0": {"latency_p95_s": {"queue": long}}}, "kv": kv})
    assert rec["action"] == "raise max_num_batched_tokens" and rec["numbers"]["queue_p95_s"] == 300.0
    assert _engine("chat", {"tiers": {"P0": {"latency_p95_s": {"queue": short}}}, "kv": kv}) == []
