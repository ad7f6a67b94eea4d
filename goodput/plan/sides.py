"""Prefill and decode checked apart, from the candidate's roofline and KV pool.

Prefill: the demand's input tokens/s against what one replica prefills per second when it does nothing else
(full ``max_num_batched_tokens`` steps at the mean prompt). Decode: the sequences in flight at peak
(Little's law: req/s x mean output x the strictest TPOT, since every sequence of a batch moves at the same step
time) against what one replica can hold: the least of ``max_num_seqs``, the KV pool over the mean context
(prompt + half the output, the average over a sequence's life) and the largest batch whose decode step still
meets that TPOT. The side that needs more replicas binds.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from goodput.plan.demand import Stream, TierSlo
from goodput.plan.fleetspec import kv_pool_tokens
from goodput.simulator.catalog import gpus
from goodput.simulator.config import DeploymentConfig
from goodput.simulator.roofline import Roofline

__all__ = ["Sides", "check_sides", "roofline_of"]

MAX_BATCH = 1 << 14


@dataclass(frozen=True)
class Sides:
    kv_tokens: int
    prefill_tokens_per_s: float  # one replica, prefill only
    tpot_batch: int  # the largest decode batch whose step meets the TPOT (0: not even one sequence does)
    max_concurrency: int  # min(max_num_seqs, KV / mean context, tpot_batch)
    decode_limit: str  # which of max_num_seqs / kv / tpot sets max_concurrency
    input_tokens_per_s: float  # demand
    concurrent_sequences: float  # demand
    prefill_replicas: int
    decode_replicas: int

    @property
    def binding(self) -> str:
        return "decode" if self.decode_replicas >= self.prefill_replicas else "prefill"


def roofline_of(dep: DeploymentConfig) -> Roofline:
    return Roofline.build(dep.spec, gpus()[dep.gpu], tp=dep.tp, engine=dep.engine)


def _largest_batch(rf: Roofline, context: float, tpot_s: float) -> int:
    def fits(n: int) -> bool:
        return rf.step_time(n, n * context, n * context) <= tpot_s
    if not fits(1):
        return 0
    lo, hi = 1, MAX_BATCH
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid - 1)
    return lo


def _ceil(x: float) -> int:
    return math.ceil(x - 1e-9) if math.isfinite(x) else 1 << 31


def check_sides(dep: DeploymentConfig, streams: Sequence[Stream], slos: dict[str, TierSlo], growth: float) -> Sides:
    """Replicas each side needs for ``streams`` at peak x ``growth`` on ``dep`` (a parsed candidate)."""
    rf = roofline_of(dep)
    e = dep.engine
    rps = sum(s.peak_rps for s in streams) * growth
    mean_in = sum(s.peak_rps * s.input_mean for s in streams) * growth / rps
    mean_out = sum(s.peak_rps * s.output_mean for s in streams) * growth / rps
    tpot = min(slos[s.tier].tpot_s for s in streams)
    chunk = e.max_num_batched_tokens
    prefill_tps = chunk / rf.step_time(chunk, chunk * mean_in / 2.0, chunk)
    kv_tokens = kv_pool_tokens(dep)
    context = mean_in + mean_out / 2.0
    tpot_batch = _largest_batch(rf, context, tpot)
    limits = {"max_num_seqs": e.max_num_seqs, "kv": int(kv_tokens // context), "tpot": tpot_batch}
    limit = min(limits, key=lambda k: limits[k])
    concurrency = rps * mean_out * tpot
    input_tps = rps * mean_in
    return Sides(
        kv_tokens=kv_tokens, prefill_tokens_per_s=prefill_tps, tpot_batch=tpot_batch, max_concurrency=limits[limit],
        decode_limit=limit, input_tokens_per_s=input_tps, concurrent_sequences=concurrency,
        prefill_replicas=max(1, _ceil(input_tps / prefill_tps)),
        decode_replicas=max(1, _ceil(concurrency / limits[limit])) if limits[limit] > 0 else 1 << 31,
    )
