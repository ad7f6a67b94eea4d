"""Replicas for a deployment: the peak over per-replica SLO goodput, then each headroom term on its own.

Pure arithmetic over figures measured elsewhere (load-test runs or the simulator's knee search). Order:

1. base        ceil(peak tokens/s / per-replica goodput), raised to what the prefill or decode check needs;
2. growth      the same at peak x growth, minus base;
3. N+k         k replicas, or with D failure domains enough that losing k domains leaves the need:
               ceil(need x D / (D - k)) - need;
4. release     a rolling / canary release takes ``release_surge`` of the replicas out at once: ceil(need x surge);
5. cold start  demand can rise to ``burst_factor`` x peak within ``burst_rise_s``; what it rises during one
               cold start cannot wait for new replicas: ceil(need x (factor - 1) x min(1, cold_start / rise)).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from goodput.plan.demand import Candidate, DeploymentDemand, Headroom
from goodput.plan.prices import Price
from goodput.plan.sides import Sides

__all__ = ["CandidatePlan", "HeadroomTerms", "headroom_terms", "plan_candidate", "peak_tokens_per_s"]


def _ceil(x: float) -> int:
    return math.ceil(x - 1e-9)


@dataclass(frozen=True)
class HeadroomTerms:
    base: int
    growth: int
    failure: int
    release: int
    cold_start: int

    @property
    def total(self) -> int:
        return self.base + self.growth + self.failure + self.release + self.cold_start

    def as_dict(self) -> dict[str, int]:
        return {"base": self.base, "growth": self.growth, "failure_domains": self.failure,
                "release_surge": self.release, "cold_start_buffer": self.cold_start}


def peak_tokens_per_s(dep: DeploymentDemand) -> float:
    """Input + output tokens/s at the peak (without growth)."""
    return sum(s.peak_rps * (s.input_mean + s.output_mean) for s in dep.streams)


def headroom_terms(peak_tps: float, goodput_tps: float, growth: float, h: Headroom, floor: int = 1) -> HeadroomTerms:
    """The terms for ``peak_tps`` at ``goodput_tps`` per replica; ``floor``: what the prefill/decode checks need
    at peak x growth (the base and growth terms together are at least this)."""
    base = max(1, _ceil(peak_tps / goodput_tps))
    need = max(base, _ceil(peak_tps * growth / goodput_tps), floor)
    failure = _ceil(need * h.failure_domains / (h.failure_domains - h.tolerate)) - need if h.failure_domains else h.tolerate
    release = _ceil(need * h.release_surge)
    rise = (h.burst_factor - 1.0) * min(1.0, h.cold_start_s / h.burst_rise_s)
    cold = _ceil(need * rise)
    return HeadroomTerms(base, need - base, failure, release, cold)


@dataclass(frozen=True)
class CandidatePlan:
    name: str
    model: str
    gpu: str
    tp: int
    goodput_tokens_per_s: float  # per replica, at SLO
    concurrency: float  # requests one replica holds at its SLO knee
    goodput_source: str
    sides: Sides
    terms: HeadroomTerms
    price: Price | None
    raised_by: str = ""  # "prefill" / "decode" when that check needs more replicas than the goodput division

    @property
    def replicas(self) -> int:
        return self.terms.total

    @property
    def gpus(self) -> int:
        return self.replicas * self.tp

    @property
    def usd_per_hour(self) -> float | None:
        return None if self.price is None else self.gpus * self.price.usd_per_gpu_hour

    @property
    def usd_per_million_tokens(self) -> float | None:
        """What a million tokens cost on one replica serving at its SLO goodput."""
        if self.price is None or self.goodput_tokens_per_s <= 0:
            return None
        return self.tp * self.price.usd_per_gpu_hour / (self.goodput_tokens_per_s * 3600.0) * 1e6


def plan_candidate(dep: DeploymentDemand, cand: Candidate, goodput_tps: float, concurrency: float, source: str,
                   sides: Sides, growth: float, price: Price | None) -> CandidatePlan:
    peak = peak_tokens_per_s(dep)
    floor = max(sides.prefill_replicas, sides.decode_replicas)
    terms = headroom_terms(peak, goodput_tps, growth, dep.headroom, floor)
    by_goodput = max(1, _ceil(peak * growth / goodput_tps))
    raised = sides.binding if floor > by_goodput else ""
    return CandidatePlan(cand.name, cand.model, cand.gpu, cand.tp, goodput_tps, concurrency, source, sides, terms,
                         price, raised)
