"""Change-point detection on a short time series of bucketed percentiles. Pure numpy, no I/O.

Binary segmentation with an L2 cost on log values (a step in p95 latency is multiplicative), each split
kept only if it passes a significance check: Welch's t statistic between the windows on either side of
at least ``t_min``, and a relative change of at least ``min_change``. Why this and not PELT: the
series here are minutes to days of buckets chosen for the window (16 to a few thousand points), binary
segmentation is O(n log n) in pure numpy, and the explicit t / magnitude gates say in plain numbers why a
step was kept (docs/analyzer.md).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["ChangePoint", "detect"]


@dataclass(frozen=True)
class ChangePoint:
    index: int  # first point of the new regime
    before: float  # median of the window before, linear scale
    after: float  # median of the window after
    t: float  # Welch's t statistic between the windows (log scale)

    @property
    def change(self) -> float:
        """Relative change, after / before - 1."""
        return self.after / self.before - 1.0 if self.before > 0 else float("inf")


def _best_split(y: np.ndarray, lo: int, hi: int, min_size: int) -> tuple[int, float]:
    """The split in y[lo:hi] that most reduces the sum of squared deviations, and that reduction."""
    seg = y[lo:hi]
    n = len(seg)
    if n < 2 * min_size:
        return -1, 0.0
    c1, c2 = np.cumsum(seg), np.cumsum(seg * seg)
    total = c2[-1] - c1[-1] ** 2 / n
    k = np.arange(min_size, n - min_size + 1)
    left = c2[k - 1] - c1[k - 1] ** 2 / k
    right = (c2[-1] - c2[k - 1]) - (c1[-1] - c1[k - 1]) ** 2 / (n - k)
    gain = total - left - right
    i = int(np.argmax(gain))
    return lo + int(k[i]), float(gain[i])


def _welch(a: np.ndarray, b: np.ndarray) -> float:
    va, vb = a.var(ddof=1) if len(a) > 1 else 0.0, b.var(ddof=1) if len(b) > 1 else 0.0
    se = np.sqrt(va / len(a) + vb / len(b))
    diff = b.mean() - a.mean()
    if se == 0:
        return float("inf") if diff != 0 else 0.0
    return float(diff / se)


def detect(values: np.ndarray, *, min_size: int = 3, window: int = 24, t_min: float = 4.0, min_change: float = 0.05,
           max_points: int = 8) -> list[ChangePoint]:
    """Change points of a positive series (e.g. p95 seconds per bucket), sorted by index.

    Candidates come from binary segmentation while a split reduces the cost by more than a BIC-like
    penalty (2 sigma^2 log n, sigma from the median absolute first difference); each candidate is then
    judged on the windows between its neighbours, so a short burst yields its two edges.
    """
    x = np.asarray(values, dtype=float)
    if len(x) < 2 * min_size or np.any(x <= 0):
        return []
    y = np.log(x)
    d = np.diff(y)
    sigma = float(np.median(np.abs(d - np.median(d)))) / 0.6745 / np.sqrt(2) if len(d) else 0.0
    penalty = 2.0 * max(sigma, 1e-6) ** 2 * np.log(len(y))
    cands: list[int] = []
    stack = [(0, len(y))]
    while stack and len(cands) < 4 * max_points:
        lo, hi = stack.pop()
        k, gain = _best_split(y, lo, hi, min_size)
        if k < 0 or gain <= penalty:
            continue
        cands.append(k)
        stack += [(lo, k), (k, hi)]
    cands.sort()
    found: list[ChangePoint] = []
    for i, k in enumerate(cands):
        lo = cands[i - 1] if i > 0 else 0
        hi = cands[i + 1] if i + 1 < len(cands) else len(y)
        a, b = y[max(lo, k - window):k], y[k:min(hi, k + window)]
        t = _welch(a, b)
        before, after = float(np.exp(np.median(a))), float(np.exp(np.median(b)))
        if abs(t) >= t_min and abs(after / before - 1.0) >= min_change:
            found.append(ChangePoint(k, before, after, t))
    found.sort(key=lambda c: -abs(np.log(c.after / c.before)))
    return sorted(found[:max_points], key=lambda c: c.index)
