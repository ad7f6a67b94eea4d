"""Iteration time of one engine step from a roofline.

time = max(FLOPs / (TP x peak x compute efficiency),
           weight bytes / (HBM bandwidth x memory efficiency) + KV bytes / (HBM bandwidth x attention efficiency))

A mixture of experts computes with its ACTIVE parameters (experts_per_token of the routed experts) while every
expert stays resident: a step of n tokens reads the shared weights and the experts its tokens were routed to,
E x (1 - (1 - k/E)^n) of E per layer under uniform routing (k per token at batch 1, all of them by a prefill chunk).
       + fixed step overhead + a per-layer TP communication term
       + tokens x the all-reduce bytes per token / the all-reduce path's bandwidth (where one is given).

The last term is TP's all-reduces where they go through NCCL without GPU peer access (vLLM logs "Custom
allreduce is disabled because your platform lacks GPU P2P capability"): two per layer, each of the step's
hidden states, so its cost grows with the tokens in the step and it does not overlap the GEMMs.

The KV cache is read by the attention kernels, which reach a smaller share of the bandwidth than the weight
GEMMs (``EngineConfig.attention_memory_efficiency``): that read grows with batch x context, so it is the
term that makes a decode step slower as the batch grows.

Both FLOPs and bytes are linear in the number of tokens and in the KV context read, which is
what lets the replica jump over runs of identical decode iterations in closed form.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from goodput.simulator.catalog import DTYPE_BYTES, MXFP4_BYTES, GpuSpec, ModelSpec, kv_bytes_per_token, stored_formats
from goodput.simulator.config import EngineConfig

__all__ = ["DecodeRun", "Roofline", "allreduce_s_per_token"]

ACTIVATION_BYTES = 2  # the hidden states TP all-reduces: bf16/fp16 activations, whatever the weights' dtype


@dataclass(frozen=True)
class Roofline:
    """Per-replica cost coefficients (seconds per FLOP, per byte), all per GPU of the TP group."""

    sec_per_flop: float
    sec_per_byte: float  # weights
    sec_per_kv_byte: float  # the KV cache, read (decode) or written (prefill) by the attention kernels
    flops_per_token: float  # dense GEMMs, per GPU
    attn_flops_per_ctx: float  # per (query token x context token), per GPU
    weight_bytes: float  # per GPU, read once per step: all of a dense model, a MoE's weights but its routed experts
    expert_bytes: float  # per GPU, every routed expert (0: dense); a step reads the share its tokens touch
    expert_miss: float  # the chance one token leaves a given expert untouched, 1 - k/E (0: dense)
    kv_bytes_per_token: float  # per GPU
    overhead_s: float
    comm_s_per_token: float  # TP all-reduce time per token of the step (0: within the per-layer term)

    @classmethod
    def build(cls, model: ModelSpec, gpu: GpuSpec, *, tp: int, engine: EngineConfig) -> Roofline:
        e = engine
        linear_dtype, expert_dtype = stored_formats(model, e.weight_dtype)
        routed = model.moe_layers * model.experts * model.expert_parameters()
        expert_bytes = MXFP4_BYTES if expert_dtype == "mxfp4" else DTYPE_BYTES[expert_dtype]
        overhead = e.step_overhead_ms / 1000.0 + (model.layers * e.tp_overhead_ms_per_layer / 1000.0 if tp > 1 else 0.0)
        return cls(
            sec_per_flop=1.0 / (gpu.peak_flops(e.weight_dtype) * e.compute_efficiency),
            sec_per_byte=1.0 / (gpu.hbm_bandwidth_bytes_per_s * e.memory_efficiency),
            sec_per_kv_byte=1.0 / (gpu.hbm_bandwidth_bytes_per_s * e.attention_memory_efficiency),
            flops_per_token=2.0 * model.active_parameters / tp,
            attn_flops_per_ctx=model.layers * model.attention_flops_per_pair / tp,
            weight_bytes=(model.parameters - routed) * DTYPE_BYTES[linear_dtype] / tp,
            expert_bytes=routed * expert_bytes / tp,
            expert_miss=1.0 - model.experts_per_token / model.experts if model.moe else 0.0,
            kv_bytes_per_token=kv_bytes_per_token(model, tp, e.kv_dtype),
            overhead_s=overhead,
            comm_s_per_token=allreduce_s_per_token(model, tp, e.tp_allreduce_gbps),
        )

    def step_time(self, tokens: float, attn_pairs: float, kv_tokens: float) -> float:
        """One step: ``tokens`` computed, ``attn_pairs`` query x context pairs, ``kv_tokens`` KV read or written."""
        compute = (self.flops_per_token * tokens + self.attn_flops_per_ctx * attn_pairs) * self.sec_per_flop
        memory = self.weights_read(tokens) * self.sec_per_byte + self.kv_bytes_per_token * kv_tokens * self.sec_per_kv_byte
        return max(compute, memory) + self.overhead_s + self.comm_s_per_token * tokens

    def weights_read(self, tokens: float) -> float:
        """Weight bytes a step of ``tokens`` reads on one GPU: the shared weights and the routed experts touched
        (a dense model's steps skip the power)."""
        if self.expert_bytes == 0.0:
            return self.weight_bytes
        return self.weight_bytes + self.expert_bytes * (1.0 - self.expert_miss ** tokens)

    def decode_run(self, n: int, s0: float, scale: float = 1.0) -> DecodeRun:
        """The run of decode-only steps of ``n`` sequences whose context sum is ``s0`` at its first step."""
        return DecodeRun(  # a1, b1: compute line; a2, b2: memory line (positional: the call is per run)
            (self.flops_per_token * n + self.attn_flops_per_ctx * s0) * self.sec_per_flop,
            self.attn_flops_per_ctx * n * self.sec_per_flop,
            self.weights_read(n) * self.sec_per_byte + self.kv_bytes_per_token * s0 * self.sec_per_kv_byte,
            self.kv_bytes_per_token * n * self.sec_per_kv_byte,
            self.overhead_s + self.comm_s_per_token * n,
            scale,
        )


def allreduce_s_per_token(model: ModelSpec, tp: int, gbps: float) -> float:
    """Seconds per token of a step's TP all-reduces at ``gbps`` GB/s of NCCL bus bandwidth: two per layer of the
    token's hidden state in 16-bit activations, a ring moving 2 (tp - 1) / tp of it; 0 when ``gbps`` is 0 or TP 1."""
    if tp <= 1 or gbps <= 0:
        return 0.0
    return 2 * model.layers * model.hidden_size * ACTIVATION_BYTES * 2 * (tp - 1) / tp / (gbps * 1e9)


@dataclass(frozen=True)
class DecodeRun:
    """Decode-only steps: the context sum grows by n per step, so step k costs
    (max(a1 + b1 k, a2 + b2 k) + overhead) x scale, and sums of steps have a closed form."""

    a1: float
    b1: float
    a2: float
    b2: float
    overhead_s: float
    scale: float

    def step_time(self, k: int) -> float:
        return (max(self.a1 + self.b1 * k, self.a2 + self.b2 * k) + self.overhead_s) * self.scale

    def time(self, k: int) -> float:
        """Total time of steps 0..k-1, exactly (sum of the piecewise-linear step times)."""
        if k <= 0:
            return 0.0
        return (_sum_max_linear(self.a1, self.b1, self.a2, self.b2, k) + self.overhead_s * k) * self.scale

    def steps_before(self, limit: int, budget: float) -> int:
        """How many steps (<= limit) *start* strictly before ``budget`` seconds have passed."""
        if budget <= 0:
            return 0
        lo, hi = 1, limit  # step 0 starts at 0 < budget
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.time(mid - 1) < budget:
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
