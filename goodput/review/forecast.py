"""Weekly peak demand, forecast: a growth trend times an hour-of-week profile, fitted by least squares.

log y(t) = b t + s[hour of week] + e (a level per hour of the week): demand that grows by a
share per week and whose daily peaks grow with it (an additive trend under-forecasts peaks). The
forecast of week k is the highest fitted hour of that week; its interval combines the residual spread
with the uncertainty of the fit at that hour (normal on the log scale, 90 % by default). Pure numpy;
the fit needs at least a week of hours with demand.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Forecast", "WeekPeak", "forecast_peaks"]

WEEK_H = 168
Z = {0.8: 1.2816, 0.9: 1.6449, 0.95: 1.96}


@dataclass(frozen=True)
class WeekPeak:
    week_start: float  # unix seconds
    peak: float
    low: float
    high: float


@dataclass(frozen=True)
class Forecast:
    growth_per_week: float  # fitted growth, as a share per week (0.05 = 5 %)
    residual_sd: float  # of log y
    weeks: tuple[WeekPeak, ...]
    history_peaks: tuple[tuple[float, float], ...]  # (week start, observed peak) per full week of history


def forecast_peaks(times: np.ndarray, values: np.ndarray, origin: float, horizon_weeks: int = 4,
                   coverage: float = 0.9) -> Forecast | None:
    """``times`` hourly (unix seconds), ``values`` the demand; weeks are counted from ``origin`` (a Monday 00:00)
    and the forecast starts at the first week after the history. None with less than a week of hours."""
    ok = np.isfinite(values) & (np.asarray(values, float) > 0)
    t, y = np.asarray(times, float)[ok], np.log(np.asarray(values, float)[ok])
    if len(t) < WEEK_H or t[-1] - t[0] < (WEEK_H - 1) * 3600:
        return None
    how = np.floor((t - origin) / 3600).astype(int) % WEEK_H
    x = (t - t[-1]) / (WEEK_H * 3600.0)  # weeks before the end of the history
    # least squares with one level per hour of week, solved within hours (no matrix to factor): the trend is
    # the slope of y on x once each hour's mean is taken out, each hour's level its mean less the trend
    n_h = np.bincount(how, minlength=WEEK_H).astype(float)
    seen = n_h > 0
    xbar = np.bincount(how, x, WEEK_H) / np.maximum(n_h, 1)
    ybar = np.bincount(how, y, WEEK_H) / np.maximum(n_h, 1)
    xd, yd = x - xbar[how], y - ybar[how]
    sxx = float(xd @ xd)
    slope = float(xd @ yd) / sxx if sxx > 0 else 0.0
    resid = yd - slope * xd
    dof = max(len(t) - int(seen.sum()) - 1, 1)
    sd = float(np.sqrt(resid @ resid / dof))
    z = Z.get(coverage, 1.6449)
    last_week = int(np.floor((t[-1] - 1 - origin) / (WEEK_H * 3600)))  # a point at a week's end is that week's
    weeks = []
    for k in range(1, horizon_weeks + 1):
        start = origin + (last_week + k) * WEEK_H * 3600
        xs = (start + np.arange(WEEK_H) * 3600 - t[-1]) / (WEEK_H * 3600.0)
        fitted = np.where(seen, ybar + slope * (xs - xbar), -np.inf)
        i = int(np.argmax(fitted))
        se = sd * float(np.sqrt(1 + 1 / n_h[i] + ((xs[i] - xbar[i]) ** 2 / sxx if sxx > 0 else 0.0)))
        weeks.append(WeekPeak(start, float(np.exp(fitted[i])), float(np.exp(fitted[i] - z * se)),
                              float(np.exp(fitted[i] + z * se))))
    week_idx = np.floor((t - 1 - origin) / (WEEK_H * 3600)).astype(int)
    hist = tuple((origin + w * WEEK_H * 3600, float(np.exp(y[week_idx == w].max()))) for w in np.unique(week_idx)
                 if (week_idx == w).sum() >= WEEK_H * 0.9)
    return Forecast(float(np.expm1(slope)), sd, tuple(weeks), hist)
