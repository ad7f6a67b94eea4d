"""The forecast of weekly peaks: a synthetic hourly series with a known growth and weekly profile."""

import numpy as np
import pytest

from goodput.review.forecast import WEEK_H, forecast_peaks

ORIGIN = 1_795_392_000.0  # Monday 2026-11-23 00:00 UTC
PEAK_HOUR = 14  # Monday 14:00, the profile's highest hour


def _series(weeks: int, growth: float, noise: float, seed: int = 1):
    """Demand = 1000 x (1 + growth)^weeks x a weekday/weekend profile, with multiplicative noise."""
    t = ORIGIN + 3600.0 * np.arange(weeks * WEEK_H)
    h = np.arange(weeks * WEEK_H) % WEEK_H
    profile = (0.4 + 0.6 * np.sin(2 * np.pi * (h % 24 - 8) / 24).clip(0)) * np.where(h < 120, 1.0, 0.6)
    level = lambda x: 1000 * (1 + growth) ** ((x - ORIGIN) / (WEEK_H * 3600))  # noqa: E731
    y = level(t) * profile * np.exp(np.random.default_rng(seed).normal(0, noise, len(t)))
    return t, y, level, profile.max()


def test_a_known_growth_is_recovered_and_each_future_peak_is_inside_its_interval():
    t, y, level, top = _series(4, 0.05, 0.03)
    fc = forecast_peaks(t, y, ORIGIN)
    assert fc is not None and len(fc.weeks) == 4
    assert fc.growth_per_week == pytest.approx(0.05, abs=0.01)
    for k, w in enumerate(fc.weeks, start=4):
        assert w.week_start == ORIGIN + k * WEEK_H * 3600  # the first week after the history, then on
        true_peak = level(w.week_start + PEAK_HOUR * 3600) * top
        assert w.low <= true_peak <= w.high, (k, w, true_peak)
        assert (w.high - w.low) / w.peak < 0.2  # an interval that says something
    peaks = [p for _, p in fc.history_peaks]
    assert len(peaks) == 4 and peaks == sorted(peaks)
    assert fc.weeks[0].peak > peaks[-1]  # growth carries on past the last observed peak


def test_a_flat_series_forecasts_no_growth_and_a_declining_one_forecasts_decline():
    t, y, _, _ = _series(3, 0.0, 0.02)
    assert abs(forecast_peaks(t, y, ORIGIN).growth_per_week) < 0.01
    t, y, _, _ = _series(3, -0.08, 0.02)
    fc = forecast_peaks(t, y, ORIGIN)
    assert fc.growth_per_week < -0.05 and fc.weeks[-1].peak < fc.weeks[0].peak


def test_less_than_a_week_gives_no_forecast():
    t, y, _, _ = _series(1, 0.1, 0.01)
    assert forecast_peaks(t[:100], y[:100], ORIGIN) is None
