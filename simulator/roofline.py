"""Iteration time of one engine step from a roofline.

time = max(FLOPs / (TP x peak x compute efficiency), bytes / (HBM bandwidth x memory efficiency))
       + fixed step overhead + a per-layer TP communication term.

Both FLOPs and bytes are linear in the number of tokens and in the KV context read, which is
what lets the replica jump over runs of identical decode iterations in closed form.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from simulator.catalog import DTYPE_BYTES, GpuSpec, ModelSpec, kv_bytes_per_token

__all__ = ["Roofline"]


@dataclass(frozen=True)
class Roofline:
    """Per-replica cost coefficients (seconds per FLOP, per byte), all per GPU of the TP group."""

    sec_per_flop: float
    sec_per_byte: float
    flops_per_token: float  # dense GEMMs, per GPU
    attn_flops_per_ctx: float  # per (query token x context token), per GPU
    weight_bytes: float  # per GPU, read once per step
    kv_bytes_per_token: float  # per GPU
    overhead_s: float

    @classmethod
    def build(cls, model: ModelSpec, gpu: GpuSpec, *, tp: int, weight_dtype: str, kv_dtype: str,
              compute_efficiency: float, memory_efficiency: float, step_overhead_ms: float,
              tp_overhead_ms_per_layer: float) -> Roofline:
        d_attn = model.attention_heads * model.head_dim
        overhead = step_overhead_ms / 1000.0 + (model.layers * tp_overhead_ms_per_layer / 1000.0 if tp > 1 else 0.0)
        return cls(
            sec_per_flop=1.0 / (gpu.peak_flops(weight_dtype) * compute_efficiency),
            sec_per_byte=1.0 / (gpu.hbm_bandwidth_bytes_per_s * memory_efficiency),
            flops_per_token=2.0 * model.parameters / tp,
            attn_flops_per_ctx=4.0 * model.layers * d_attn / tp,
            weight_bytes=model.parameters * DTYPE_BYTES[weight_dtype] / tp,
            kv_bytes_per_token=kv_bytes_per_token(model, tp, kv_dtype),
            overhead_s=overhead,
        )

    def step_time(self, tokens: int, attn_pairs: float, kv_tokens: float) -> float:
        """One step: ``tokens`` computed, ``attn_pairs`` query x context pairs, ``kv_tokens`` KV read or written."""
        compute = (self.flops_per_token * tokens + self.attn_flops_per_ctx * attn_pairs) * self.sec_per_flop
        memory = (self.weight_bytes + self.kv_bytes_per_token * kv_tokens) * self.sec_per_byte
        return max(compute, memory) + self.overhead_s

    # --- decode runs: n sequences, context sum S(c) = s0 + n * k at the k-th step of the run ---

    def decode_coeffs(self, n: int, s0: float) -> tuple[float, float, float, float]:
        """Step k of a decode-only run costs max(a1 + b1 k, a2 + b2 k) + overhead."""
        a1 = (self.flops_per_token * n + self.attn_flops_per_ctx * s0) * self.sec_per_flop
        b1 = self.attn_flops_per_ctx * n * self.sec_per_flop
        a2 = (self.weight_bytes + self.kv_bytes_per_token * s0) * self.sec_per_byte
        b2 = self.kv_bytes_per_token * n * self.sec_per_byte
        return a1, b1, a2, b2

    def decode_run_time(self, coeffs: tuple[float, float, float, float], k: int, scale: float = 1.0) -> float:
        """Total time of steps 0..k-1 of a decode run, exactly (sum of the piecewise-linear step times)."""
        if k <= 0:
            return 0.0
        a1, b1, a2, b2 = coeffs
        total = _sum_max_linear(a1, b1, a2, b2, k)
        return (total + self.overhead_s * k) * scale

    def decode_steps_before(self, coeffs: tuple[float, float, float, float], limit: int, budget: float,
                            scale: float = 1.0) -> int:
        """How many steps (<= limit) of the run *start* strictly before ``budget`` seconds have passed."""
        if budget <= 0:
            return 0
        lo, hi = 1, limit  # step 0 starts at 0 < budget
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.decode_run_time(coeffs, mid - 1, scale) < budget:
                lo = mid
            else:
                hi = mid - 1
        return lo


def _sum_linear(a: float, b: float, k0: int, k1: int) -> float:
    """Sum of a + b k for k in [k0, k1)."""
    n = k1 - k0
    if n <= 0:
        return 0.0
    return a * n + b * (k0 + k1 - 1) * n / 2.0


def _sum_max_linear(a1: float, b1: float, a2: float, b2: float, k: int) -> float:
    """Sum over j in [0, k) of max(a1 + b1 j, a2 + b2 j); the two lines cross at most once."""
    if b1 == b2:
        return _sum_linear(max(a1, a2), b1, 0, k)
    cross = (a2 - a1) / (b1 - b2)  # line 1 above line 2 for j > cross when b1 > b2
    c = min(max(math.ceil(cross), 0), k) if cross == cross else 0
    if b1 > b2:  # line 2 dominates before the crossing, line 1 after
        return _sum_linear(a2, b2, 0, c) + _sum_linear(a1, b1, c, k)
    return _sum_linear(a1, b1, 0, c) + _sum_linear(a2, b2, c, k)
