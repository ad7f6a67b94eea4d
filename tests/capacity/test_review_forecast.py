"""The forecast of weekly peaks: a synthetic hourly series with a known trend and weekly profile."""

import numpy as np
import pytest

from capacity.review.forecast import WEEK_H, forecast_peaks

ORIGIN = 1_795_392_000.0  # Monday 2026-11-23 00:00 UTC


def _series(weeks: int, trend_per_week: float, noise: float, seed: int = 1):
    t = ORIGIN + 3600.0 * np.arange(weeks * WEEK_H)
    h = np.arange(weeks * WEEK_H) % WEEK_H
    profile = 300 * np.sin(2 * np.pi * (h % 24 - 8) / 24).clip(0) * np.where(h < 120, 1.0, 0.5)
    truth = lambda x: 1000 + trend_per_week * (x - ORIGIN) / (WEEK_H * 3600)  # noqa: E731
    y = truth(t) + profile + np.random.default_rng(seed).normal(0, noise, len(t))
    return t, y, truth, profile.max()


def test_a_known_trend_is_recovered_and_each_future_peak_is_inside_its_interval():
    t, y, truth, peak_profile = _series(4, 50.0, 20.0)
    fc = forecast_peaks(t, y, ORIGIN)
    assert fc is not None and len(fc.weeks) == 4
    assert fc.trend_per_week == pytest.approx(50.0, abs=5.0)
    for k, w in enumerate(fc.weeks, start=4):
        assert w.week_start == ORIGIN + k * WEEK_H * 3600
        # the true peak of week k: the profile's peak hour (Monday 14:00) on the trend line
        true_peak = truth(w.week_start + 14 * 3600) + peak_profile
        assert w.low <= true_peak <= w.high, (k, w, true_peak)
        assert w.high - w.low < 200  # an interval that says something
    assert [p for _, p in fc.history_peaks] == sorted(p for _, p in fc.history_peaks)  # growth shows in the history


def test_a_flat_series_forecasts_no_growth_and_a_declining_one_forecasts_decline():
    t, y, _, _ = _series(3, 0.0, 10.0)
    assert abs(forecast_peaks(t, y, ORIGIN).trend_per_week) < 5
    t, y, _, _ = _series(3, -80.0, 10.0)
    fc = forecast_peaks(t, y, ORIGIN)
    assert fc.weeks[-1].peak < fc.weeks[0].peak


def test_less_than_a_week_gives_no_forecast():
    t, y, _, _ = _series(1, 10.0, 1.0)
    assert forecast_peaks(t[:100], y[:100], ORIGIN) is None
