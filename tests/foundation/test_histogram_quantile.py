"""The quantile read back from cumulative buckets, with its bound kind: interpolated only between two finite
bounds, a bound in the first bucket and in +Inf (where Prometheus's histogram_quantile makes up a number)."""

from __future__ import annotations

import math

import pytest

from goodput.foundation.histogram import Histogram, Quantile, bounded, quantile

INF = math.inf
VLLM_QUEUE = (0.3, 0.5, 0.8, 1.0, 60.0)  # the first bounds of vLLM's queue-time histogram, and its 60 s top


def buckets_of(values, bounds=VLLM_QUEUE) -> list[tuple[float, float]]:
    h = Histogram(bounds)
    for v in values:
        h.observe(v)
    return [(INF if le == "+Inf" else float(le), c) for le, c in h.cumulative()]


def test_inside_a_finite_bucket_the_quantile_interpolates_like_prometheus():
    b = [(0.1, 10.0), (0.5, 50.0), (1.0, 100.0), (INF, 100.0)]
    assert quantile(0.5, b) == Quantile("within", 0.5, 0.1, 0.5)
    q = quantile(0.95, b)  # 95th of 100 is 45/50 of the way 0.5 -> 1.0
    assert q.kind == "within" and q.value == pytest.approx(0.95) and (q.lower, q.upper) == (0.5, 1.0)
    assert q.text(1e3, unit="ms") == "950ms"


def test_waits_of_milliseconds_in_the_first_bucket_are_below_its_bound_not_285_ms():
    q = quantile(0.95, buckets_of([0.0074, 0.0079] * 50))
    assert q == Quantile("below", None, 0.0, 0.3)
    assert q.text(1e3, unit="ms") == "<300ms" and q.text(unit=" s") == "<0.3 s"
    assert q.to_dict() == {"bound": "below", "value": None, "lower": 0.0, "upper": 0.3}
    assert Quantile.from_dict(q.to_dict()) == q


def test_past_the_last_finite_bound_the_quantile_is_above_it():
    q = quantile(0.95, buckets_of([0.4] * 10 + [90.0] * 90))
    assert q == Quantile("above", None, 60.0, None) and q.text(unit=" s") == ">60 s"


def test_the_first_bucket_empty_puts_a_low_quantile_inside_the_next():
    q = quantile(0.05, buckets_of([0.4] * 100))
    assert q.kind == "within" and 0.3 < q.value <= 0.5


@pytest.mark.parametrize("b", [[], [(0.1, 0.0), (INF, 0.0)], [(0.1, 3.0)], [(INF, 5.0)]])
def test_no_quantile_of_an_empty_or_truncated_histogram_or_one_without_a_finite_bound(b):
    assert quantile(0.95, b) is None


def test_a_quantile_without_the_figure_it_reports_is_refused_not_rendered_as_none():
    q = Quantile.from_dict({"bound": "above", "value": None, "lower": None, "upper": None})
    with pytest.raises(ValueError, match="'above' quantile without the figure"):
        q.text()


def test_a_value_prometheus_computed_is_classified_by_the_bucket_it_came_from():
    bounds = (0.3, 0.5, 60.0)
    assert bounded(0.285, bounds) == Quantile("below", None, 0.0, 0.3)
    assert bounded(0.3, bounds) == Quantile("below", None, 0.0, 0.3)
    assert bounded(0.42, bounds) == Quantile("within", 0.42, 0.3, 0.5)
    assert bounded(60.0, bounds) == Quantile("above", None, 60.0, None)  # Prometheus's answer for +Inf
    assert bounded(math.nan, bounds) is None and bounded(None, bounds) is None
