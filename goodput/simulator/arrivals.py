"""Arrival processes: when requests reach the gateway.

Every rate-driven process is one mechanism: a renewal process of unit rate whose inter-arrival
gaps have the requested coefficient of variation (Poisson: cv = 1; Gamma: any cv) runs in
"operational time" and is mapped to wall time through the inverse of the cumulative intensity
Lambda(t) = integral of rate(u) du. Steps, bursts and the diurnal cycle only shape rate(t), so
they compose, and burstiness is kept under modulation. Scheduled batches are added on top.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

__all__ = ["ArrivalSpec", "Batch", "Burst", "Diurnal", "Step", "arrival_times"]

PROCESSES = ("poisson", "gamma", "step", "burst", "diurnal", "batch")


@dataclass(frozen=True)
class Step:
    at: float
    rate: float


@dataclass(frozen=True)
class Burst:
    at: float
    factor: float
    duration: float


@dataclass(frozen=True)
class Diurnal:
    amplitude: float  # 0..1: peak = mean x (1 + amplitude)
    period_s: float = 86400.0
    peak_at_s: float = 14 * 3600.0


@dataclass(frozen=True)
class Batch:
    at: float
    count: int
    spread_s: float = 0.0


@dataclass(frozen=True)
class ArrivalSpec:
    """Requests per second over time. ``rate`` is the base (mean) rate; ``steps`` replace it from their time on."""

    process: str = "poisson"
    rate: float = 0.0
    cv: float = 1.0
    steps: tuple[Step, ...] = ()
    bursts: tuple[Burst, ...] = ()
    diurnal: Diurnal | None = None
    batches: tuple[Batch, ...] = field(default=())

    def rate_at(self, t: np.ndarray) -> np.ndarray:
        t = np.asarray(t, dtype=float)
        r = np.full_like(t, self.rate)
        for s in sorted(self.steps, key=lambda s: s.at):
            r = np.where(t >= s.at, s.rate, r)
        for b in self.bursts:
            r = np.where((t >= b.at) & (t < b.at + b.duration), r * b.factor, r)
        if self.diurnal is not None:
            d = self.diurnal
            r = r * (1.0 + d.amplitude * np.cos(2 * math.pi * (t - d.peak_at_s) / d.period_s))
        return r

    def mean_rate(self, duration: float) -> float:
        grid = _grid(self, duration)
        return float(_cumulative(self, grid)[-1] / duration) if duration > 0 else 0.0


def _grid(spec: ArrivalSpec, duration: float) -> np.ndarray:
    """Times at which rate(t) may change slope; between them Lambda is linear (or finely sampled)."""
    points = [0.0, duration]
    points += [s.at for s in spec.steps]
    for b in spec.bursts:
        points += [b.at, b.at + b.duration]
    if spec.diurnal is not None:
        step = spec.diurnal.period_s / 2880.0
        points += list(np.arange(0.0, duration, step))
    g = np.unique(np.clip(np.asarray(points, dtype=float), 0.0, duration))
    return g


def _cumulative(spec: ArrivalSpec, grid: np.ndarray) -> np.ndarray:
    """Lambda at each grid point, integrating rate(t) by the midpoint rule on each segment.

    For piecewise-constant shapes (steps, bursts) the grid contains every breakpoint, so this is exact.
    """
    if len(grid) < 2:
        return np.zeros_like(grid)
    mids = (grid[:-1] + grid[1:]) / 2
    seg = spec.rate_at(mids) * np.diff(grid)
    return np.concatenate([[0.0], np.cumsum(np.maximum(seg, 0.0))])


def _unit_renewal(rng: np.random.Generator, total: float, cv: float) -> np.ndarray:
    """Event times of a rate-1 renewal process on [0, total) with Gamma gaps of the given cv."""
    if total <= 0:
        return np.empty(0)
    shape = 1.0 / (cv * cv)
    chunks, t = [], 0.0
    n = int(total * 1.1) + 16
    while t < total:
        gaps = rng.gamma(shape, 1.0 / shape, size=n)
        times = t + np.cumsum(gaps)
        chunks.append(times)
        t = float(times[-1])
    times = np.concatenate(chunks)
    return times[times < total]


def arrival_times(spec: ArrivalSpec, duration: float, rng: np.random.Generator) -> np.ndarray:
    """Sorted arrival times in [0, duration) seconds."""
    grid = _grid(spec, duration)
    lam = _cumulative(spec, grid)
    u = _unit_renewal(rng, float(lam[-1]), spec.cv)
    times = np.interp(u, lam, grid) if len(u) else np.empty(0)
    extra = [
        b.at + (rng.random(b.count) * b.spread_s if b.spread_s > 0 else np.zeros(b.count))
        for b in spec.batches
        if b.at < duration
    ]
    if extra:
        times = np.concatenate([times, *extra])
    times = np.sort(times)
    return times[(times >= 0) & (times < duration)]
