"""A cumulative-bucket histogram that takes weighted observations and renders exposition lines.

Shared by the simulated engine's vLLM metrics and the request exporter: both observe in bulk (a run of
decode steps, a batch of spans), which prometheus_client's ``observe()`` (one at a time) cannot do cheaply.
"""

from __future__ import annotations

import bisect

__all__ = ["Histogram", "le_label"]


def le_label(bound: float) -> str:
    """``le`` as prometheus_client renders it (``1.0``, ``0.25``, ``+Inf``), which rules must match exactly."""
    return repr(float(bound))


class Histogram:
    __slots__ = ("bounds", "counts", "sum", "created")

    def __init__(self, bounds: tuple[float, ...], created: float = 0.0) -> None:
        self.bounds = bounds
        self.counts = [0.0] * (len(bounds) + 1)
        self.sum = 0.0
        self.created = created

    def observe(self, value: float, weight: float = 1.0) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += weight
        self.sum += value * weight

    def merge(self, other: Histogram) -> None:
        for i, c in enumerate(other.counts):
            self.counts[i] += c
        self.sum += other.sum

    @property
    def count(self) -> float:
        return sum(self.counts)

    def cumulative(self) -> list[tuple[str, float]]:
        out, cum = [], 0.0
        for b, c in zip(self.bounds, self.counts, strict=False):
            cum += c
            out.append((le_label(b), cum))
        out.append(("+Inf", cum + self.counts[-1]))
        return out

    def lines(self, name: str, labels: str) -> list[str]:
        """``name_bucket`` / ``_count`` / ``_sum`` lines; ``labels`` is the rendered label set (may be empty)."""
        sep = "," if labels else ""
        out = [f'{name}_bucket{{{labels}{sep}le="{le}"}} {c}' for le, c in self.cumulative()]
        out.append(f"{name}_count{{{labels}}} {self.count}")
        out.append(f"{name}_sum{{{labels}}} {self.sum!r}")
        return out
