"""Token-length distributions given by their quantiles.

A profile states what capacity planners actually know about a scene: p50 / p95 / p99 (and max)
of input and output tokens. We sample by inverse CDF through those knots, interpolating in log
space, so the sampled quantiles reproduce the profile's by construction, not by fitting.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["QuantileDistribution"]

# Quantile levels a profile may give, in the order they must increase.
_LEVELS = {"min": 0.0, "p25": 0.25, "p50": 0.5, "p75": 0.75, "p90": 0.9, "p95": 0.95, "p99": 0.99, "max": 1.0}


@dataclass(frozen=True)
class QuantileDistribution:
    """Piecewise log-linear inverse CDF through (level, value) knots, values in tokens."""

    levels: tuple[float, ...]
    values: tuple[float, ...]

    @classmethod
    def from_quantiles(cls, spec: dict[str, float]) -> QuantileDistribution:
        """Build from keys like ``p50``, ``p95``, ``p99``, ``max`` (``min`` defaults to 1, unless every value given is
        the same: ``{p50: 172, max: 172}`` is a fixed length, not half the draws between 1 and 172).

        Without ``max`` the tail is extended past p99 as far again as p95 -> p99 goes, in log space.
        Raises ``ValueError`` naming the offending key when the values do not increase.
        """
        unknown = set(spec) - set(_LEVELS)
        if unknown:
            raise ValueError(f"unknown quantile key(s) {sorted(unknown)}; use {list(_LEVELS)}")
        if "p50" not in spec:
            raise ValueError("p50 is required")
        fixed = len({float(v) for v in spec.values()}) == 1
        knots = {"min": float(spec["p50"]) if fixed else 1.0, **{k: float(v) for k, v in spec.items()}}
        if "max" not in knots:
            top = max((k for k in knots if k != "min"), key=_LEVELS.__getitem__)
            below = [k for k in knots if _LEVELS[k] < _LEVELS[top]]
            prev = max(below, key=_LEVELS.__getitem__)
            ratio = knots[top] / max(knots[prev], 1.0)
            knots["max"] = knots[top] * max(ratio, 1.0) ** ((1.0 - _LEVELS[top]) / (_LEVELS[top] - _LEVELS[prev]))
        ordered = sorted(knots.items(), key=lambda kv: _LEVELS[kv[0]])
        for (k0, v0), (k1, v1) in zip(ordered, ordered[1:], strict=False):
            if v1 < v0:
                raise ValueError(f"{k1}={v1:g} is below {k0}={v0:g}; quantiles must not decrease")
        if ordered[0][1] < 1:
            raise ValueError("min must be at least 1 token")
        return cls(tuple(_LEVELS[k] for k, _ in ordered), tuple(v for _, v in ordered))

    def quantile(self, q: np.ndarray | float) -> np.ndarray:
        return np.exp(np.interp(q, self.levels, np.log(self.values)))

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` integer token counts, each at least 1 and at most the max knot."""
        x = self.quantile(rng.random(n))
        return np.clip(np.rint(x), 1, np.floor(self.values[-1])).astype(np.int64)

    def scaled(self, factor: float) -> QuantileDistribution:
        return QuantileDistribution(self.levels, tuple(max(1.0, v * factor) for v in self.values))
