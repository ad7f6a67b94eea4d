"""Cumulative-bucket histograms: one that takes weighted observations and renders exposition lines, and the
quantile read back from buckets with how far it can be trusted.

The histogram is shared by the simulated engine's vLLM metrics and the request exporter: both observe in bulk (a
run of decode steps, a batch of spans), which prometheus_client's ``observe()`` (one at a time) cannot do cheaply.

A quantile from buckets is only known to lie in its bucket. Prometheus's ``histogram_quantile`` interpolates
linearly inside it, which is a fair estimate between two finite bounds but a made-up number in the first bucket
(vLLM's queue time: 0-0.3 s, where waits of 8 ms read as 285 ms) and a floor in +Inf (it answers the highest
finite bound). ``Quantile`` therefore carries its bound kind: ``within`` (interpolated between ``lower`` and
``upper``), ``below`` (at most the first bound) or ``above`` (past the last finite bound), and every reader shows
``< 0.3 s`` / ``> 60 s`` rather than a number it cannot know.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["BOUND_KINDS", "Histogram", "Quantile", "bounded", "le_label", "quantile"]

BOUND_KINDS = ("within", "below", "above")


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


@dataclass(frozen=True, slots=True)
class Quantile:
    """A quantile read from buckets: ``value`` is the interpolated estimate only when ``kind`` is ``within``;
    ``below`` means at most ``upper`` (the first bound), ``above`` more than ``lower`` (the last finite bound)."""

    kind: str
    value: float | None
    lower: float | None
    upper: float | None

    @property
    def estimate(self) -> float:
        """A number to sort, chart or compare with a threshold: the value, else the bound it is known against
        (an upper bound for ``below``, a lower bound for ``above``)."""
        return self._figure()

    def text(self, scale: float = 1.0, digits: int = 0, unit: str = "") -> str:
        """``7ms``, ``<300ms`` or ``>60000ms``: the value, or the bound with its side."""
        if self.kind == "within":
            return f"{self._figure() * scale:.{digits}f}{unit}"
        return f"{'<' if self.kind == 'below' else '>'}{_short(self._figure() * scale)}{unit}"

    def _figure(self) -> float:
        """The number the kind reports: the value within, the upper bound below, the lower bound above. ``quantile``
        and ``bounded`` always set it; a dict that lacks it (``from_dict``) is refused here."""
        figure = self.value if self.kind == "within" else self.upper if self.kind == "below" else self.lower
        if figure is None:
            raise ValueError(f"a {self.kind!r} quantile without the figure it reports: {self}")
        return figure

    def to_dict(self) -> dict:
        """JSON: ``{"bound": "below", "value": null, "lower": 0.0, "upper": 0.3}`` (no fake number)."""
        return {"bound": self.kind, "value": self.value, "lower": self.lower, "upper": self.upper}

    @classmethod
    def from_dict(cls, d: dict) -> Quantile:
        return cls(d["bound"], d.get("value"), d.get("lower"), d.get("upper"))


def _short(x: float) -> str:
    return f"{x:.3g}" if x < 1000 else f"{x:.0f}"


def quantile(q: float, buckets: Sequence[tuple[float, float]]) -> Quantile | None:
    """The ``q`` quantile of cumulative ``(le, count)`` buckets (ascending, +Inf last), as Prometheus's
    ``histogram_quantile`` interpolates it inside a bucket between two finite bounds, with its bound kind in the
    first bucket and in +Inf; None when the histogram is empty or has no finite bound (Prometheus: NaN)."""
    if len(buckets) < 2 or buckets[-1][1] <= 0 or not math.isinf(buckets[-1][0]):
        return None
    rank = q * buckets[-1][1]
    lower_le, lower_count = None, 0.0
    for le, count in buckets:
        if count >= rank and count > 0:
            if math.isinf(le):
                return Quantile("above", None, lower_le, None)
            if lower_le is None:
                return Quantile("below", None, 0.0 if le > 0 else None, le)
            return Quantile("within", lower_le + (le - lower_le) * (rank - lower_count) / (count - lower_count),
                            lower_le, le)
        lower_le, lower_count = le, count
    raise AssertionError("unreachable: the +Inf bucket holds every count")


def bounded(value: float | None, bounds: Sequence[float]) -> Quantile | None:
    """The bound kind of a value Prometheus's ``histogram_quantile`` already computed over a histogram with finite
    ``bounds``: at or under the first bound it was interpolated inside the first bucket (``below``); at or over
    the last it fell in +Inf (``above``; Prometheus answers the last bound); between them ``within``. None for no
    value (an empty window's NaN)."""
    if value is None or math.isnan(value):
        return None
    if value <= bounds[0]:
        return Quantile("below", None, 0.0 if bounds[0] > 0 else None, bounds[0])
    if value >= bounds[-1]:
        return Quantile("above", None, bounds[-1], None)
    i = bisect.bisect_left(bounds, value)
    return Quantile("within", value, bounds[i - 1], bounds[i])
