"""Latency SLOs of a load test: ``ttft_p95=0.8s,tpot_p95=50ms,e2e_p99=2s``.

One string both ways: ``parse_slo`` reads it (a ``ConfigError`` names the term that does not parse) and
``str(slo)`` writes it back, so summary.json and ``compare`` carry the SLO exactly as the user gave it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from goodput.foundation.errors import ConfigError
from goodput.foundation.quantiles import percentile

__all__ = ["METRICS", "Slo", "SloTerm", "parse_slo"]

METRICS = ("ttft", "tpot", "itl", "e2e")
_TERM = re.compile(r"^(?P<metric>[a-z0-9]+)_p(?P<pct>\d+(?:\.\d+)?)=(?P<value>\d+(?:\.\d*)?|\.\d+)(?P<unit>ms|s)$")
_PER_S = {"s": 1.0, "ms": 1000.0}


def _fmt_number(x: float) -> str:
    return f"{x:.12g}"


@dataclass(frozen=True, slots=True)
class SloTerm:
    """Over a step, the ``percentile``-th percentile of ``metric`` must be at most ``threshold_s`` seconds."""

    metric: str
    percentile: float
    threshold_s: float

    def __str__(self) -> str:
        ms = self.threshold_s < 1.0
        value = f"{_fmt_number(self.threshold_s * 1e3)}ms" if ms else f"{_fmt_number(self.threshold_s)}s"
        return f"{self.metric}_p{_fmt_number(self.percentile)}={value}"

    def value_of(self, record) -> float | None:
        """This request's own value of the metric; for ITL, the term's percentile of the request's own gaps."""
        if self.metric == "itl":
            return percentile(record.itl_s, self.percentile) if record.itl_s else None
        return getattr(record, f"{self.metric}_s")


@dataclass(frozen=True, slots=True)
class Slo:
    terms: tuple[SloTerm, ...]

    def __str__(self) -> str:
        return ",".join(str(t) for t in self.terms)

    def meets(self, record) -> bool:
        """A request meets the SLO when it succeeded and its own value of every term's metric is within the threshold.

        A metric the request has no value for (TPOT of a one-token answer, ITL without gaps) does not fail it.
        """
        if record.error or record.done_s is None:
            return False
        for term in self.terms:
            value = term.value_of(record)
            if value is not None and value > term.threshold_s:
                return False
        return True

    def to_dict(self) -> dict:
        return {"terms": [{"metric": t.metric, "percentile": t.percentile, "threshold_s": t.threshold_s} for t in self.terms]}


def parse_slo(text: str, source: str = "--slo") -> Slo:
    """``metric_pXX=VALUE(s|ms)`` terms joined by commas; metrics ttft, tpot, itl, e2e; percentiles 50..99.9."""
    terms: list[SloTerm] = []
    seen: set[tuple[str, float]] = set()
    for raw in text.split(","):
        term = raw.strip()
        if not term:
            raise ConfigError(source, repr(text), "empty SLO term; write e.g. ttft_p95=0.8s,tpot_p95=50ms")
        m = _TERM.match(term)
        if m is None:
            raise ConfigError(source, term, "expected METRIC_pXX=VALUE with a unit s or ms, e.g. ttft_p95=0.8s")
        metric = m["metric"]
        if metric not in METRICS:
            raise ConfigError(source, term, f"unknown metric {metric!r}; use one of {', '.join(METRICS)}")
        pct = float(m["pct"])
        if not 50.0 <= pct <= 99.9:
            raise ConfigError(source, term, f"percentile p{m['pct']} is outside p50..p99.9")
        threshold = float(m["value"]) / _PER_S[m["unit"]]
        if threshold <= 0:
            raise ConfigError(source, term, "the threshold must be above zero")
        if (metric, pct) in seen:
            raise ConfigError(source, term, f"{metric}_p{m['pct']} is given twice")
        seen.add((metric, pct))
        terms.append(SloTerm(metric, pct, threshold))
    return Slo(tuple(terms))
