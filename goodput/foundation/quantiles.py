"""The one percentile of raw values: numpy's default (linear interpolation between the two nearest ranks).

The load test's step summaries, its SLO terms and the client's schedule lag all read it, so a p99 means the same
figure wherever it is printed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

__all__ = ["percentile"]

NUMPY_FROM = 256  # longer lists are sorted by numpy; for short ones (per request) its call overhead dominated


def percentile(values: Sequence[float], pct: float) -> float:
    """The ``pct``-th percentile of ``values`` as ``np.percentile`` gives it, 0 for none, and extended to +inf
    values: numpy gives nan where it interpolates toward inf with weight 0; here that is the lower value, and inf
    where the upper one is inf with any weight."""
    if len(values) == 0:
        return 0.0
    v = np.sort(np.asarray(values, dtype=float)) if len(values) > NUMPY_FROM else sorted(values)
    h = (len(v) - 1) * pct / 100.0
    lo, hi = math.floor(h), math.ceil(h)
    if lo == hi or v[lo] == v[hi]:
        return float(v[lo])
    if math.isinf(v[hi]):
        return math.inf
    return float(v[lo] + (v[hi] - v[lo]) * (h - lo))
