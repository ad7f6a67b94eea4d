"""The review's SLO figures from hand-made answers: an objective of 1.0 (no error budget) and ratios out of range.

Before: an objective of 1.0 was a ZeroDivisionError (the budget 1 - objective is 0) and an error ratio above 1 gave
a negative attainment."""

from __future__ import annotations

import numpy as np

from capacity.review.prom import Series
from capacity.review.queries import STEP_S
from capacity.review.summarize import _slo

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
