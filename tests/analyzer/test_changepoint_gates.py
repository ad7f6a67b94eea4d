"""The two gates a step in p95 latency passes before it is a change point (goodput/analyzer/changepoint.py), at the
values the regression search gives them: Welch's t statistic between the windows either side (log scale) of at least
4, and a relative change of the medians of at least 10 %. Each series is eight buckets, four either side of a step,
written as logs so the arithmetic is done by hand below: e^y is the p95 of a bucket.

Why the split is at bucket 4 in every case: the first differences' median absolute deviation is 0 (most
differences equal the alternation), so the segmentation's penalty is its floor and the best split of the eight is at
the step; four buckets cannot be split again (3 at least a side). Both windows (24 buckets) hold all four each side.
"""

from __future__ import annotations

import inspect
import math

import numpy as np
import pytest

from goodput.analyzer.changepoint import detect
from goodput.analyzer.regressions import scan_regressions

T_MIN, MIN_CHANGE = 4.0, 0.1  # scan_regressions' defaults: what a regression search gates a step with


def _detect(logs: list[float]):
    return detect(np.exp(np.array(logs)), t_min=T_MIN, min_change=MIN_CHANGE)


def test_the_gates_are_the_regression_searchs():
    params = inspect.signature(scan_regressions).parameters
    assert (params["t_min"].default, params["min_change"].default) == (T_MIN, MIN_CHANGE)


def test_a_large_step_with_a_low_t_statistic_is_rejected():
    # before [0, .5, 0, .5]: mean .25, sample variance 4 x .25^2 / 3 = .08333; after [.6, 1.1, .6, 1.1]: mean .85,
    # the same variance. Welch: se = sqrt(.08333 / 4 + .08333 / 4) = sqrt(.041667) = .20412; t = .6 / .20412 = 2.939
    # < 4, though the medians (.25 -> .85 in logs) moved by e^.6 - 1 = +82 %: too noisy to call a step
    logs = [0, .5, 0, .5, .6, 1.1, .6, 1.1]
    assert _detect(logs) == []
    (kept,) = detect(np.exp(np.array(logs)), t_min=2.9, min_change=MIN_CHANGE)  # under a lower t gate it is one
    assert kept.index == 4 and kept.t == pytest.approx(2.939, abs=1e-3)
    assert kept.change == pytest.approx(math.exp(0.6) - 1, rel=1e-9)


def test_a_tiny_step_with_a_high_t_statistic_is_rejected():
    # before [0, .02, 0, .02]: mean .01, variance 4 x .01^2 / 3 = 1.3333e-4; after [.04, .06, .04, .06]: mean .05.
    # se = sqrt(2 x 1.3333e-4 / 4) = .0081650; t = .04 / .0081650 = 4.899 >= 4, but the medians moved by
    # e^.04 - 1 = +4.08 % < 10 %: steady, not a change worth a verdict
    logs = [0, .02, 0, .02, .04, .06, .04, .06]
    assert _detect(logs) == []
    (kept,) = detect(np.exp(np.array(logs)), t_min=T_MIN, min_change=0.04)  # under a lower change gate it is one
    assert kept.index == 4 and kept.t == pytest.approx(4.899, abs=1e-3)
    assert kept.change == pytest.approx(math.exp(0.04) - 1, rel=1e-9)


def test_a_step_over_both_gates_is_kept():
    # before [0, .1, 0, .1]: mean .05, variance 4 x .05^2 / 3 = .003333; after [1, 1.1, 1, 1.1]: mean 1.05.
    # se = sqrt(2 x .003333 / 4) = .040825; t = 1 / .040825 = 24.49 >= 4; medians .05 -> 1.05: e^1 - 1 = +171.8 %
    (cp,) = _detect([0, .1, 0, .1, 1, 1.1, 1, 1.1])
    assert cp.index == 4
    assert cp.t == pytest.approx(24.495, abs=1e-3)
    assert cp.before == pytest.approx(math.exp(0.05), rel=1e-12) and cp.after == pytest.approx(math.exp(1.05), rel=1e-12)
    assert cp.change == pytest.approx(math.e - 1, rel=1e-9)


def test_a_step_down_passes_the_same_gates_by_magnitude():
    # the kept step mirrored: t = -24.49, change e^-1 - 1 = -63.2 %: an improvement, as significant
    (cp,) = _detect([1, 1.1, 1, 1.1, 0, .1, 0, .1])
    assert cp.index == 4 and cp.t == pytest.approx(-24.495, abs=1e-3)
    assert cp.change == pytest.approx(math.exp(-1) - 1, rel=1e-9)
