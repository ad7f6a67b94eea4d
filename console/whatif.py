"""The capacity what-if: replicas for a demand, and the memory budget of a model on a GPU.

``required_replicas`` is the rule ``deployment:llm_replicas_required:ceil`` in Python (demand over per-replica
goodput, with the spec's redundancy), so the page agrees with what the alerts compare against; the memory
budget is the simulator's own (``simulator.catalog.memory_budget``).
"""

from __future__ import annotations

import math

from simulator.catalog import GIB, MemoryBudget, gpus, memory_budget, models

__all__ = ["kv_budget", "required_replicas"]


def required_replicas(demand_tokens_per_s: float, replica_goodput_tokens_per_s: float, redundancy: float) -> int:
    if replica_goodput_tokens_per_s <= 0:
        raise ValueError("per-replica goodput must be > 0")
    return max(0, math.ceil(demand_tokens_per_s / replica_goodput_tokens_per_s * redundancy))


def kv_budget(model: str, gpu: str, tp: int, weight_dtype: str, kv_dtype: str, utilization: float,
              reserve_gib: float) -> tuple[MemoryBudget, dict[str, float]]:
    """The per-GPU budget and, across the TP group, how many tokens of KV cache it holds."""
    b = memory_budget(models()[model], gpus()[gpu], tp=tp, weight_dtype=weight_dtype, kv_dtype=kv_dtype,
                      gpu_memory_utilization=utilization, activation_reserve_bytes=reserve_gib * GIB)
    tokens = max(b.kv, 0) / b.kv_bytes_per_token if b.kv_bytes_per_token else 0.0
    return b, {"usable GiB": b.usable / GIB, "weights GiB": b.weights / GIB, "reserve GiB": b.reserve / GIB,
               "KV GiB": b.kv / GIB, "KV blocks": float(b.num_blocks), "KV tokens": tokens}
