"""The capacity what-if: replicas for a demand, and the memory budget of a model on a GPU.

``required_replicas`` is the rule ``deployment:llm_replicas_required:ceil`` in Python (demand over per-replica
goodput, with the spec's redundancy), so the page agrees with what the alerts compare against; ``plan_terms`` is
``goodput plan replicas``' own arithmetic (each headroom term apart), and the memory budget is the one model the
planner and the simulator share (``goodput.simulator.memory``).
"""

from __future__ import annotations

import math

from goodput.plan.demand import Headroom
from goodput.plan.replicas import HeadroomTerms, headroom_terms
from goodput.simulator.catalog import GIB, gpus, models
from goodput.simulator.memory import MemoryBudget, MemorySetup, memory_budget

__all__ = ["kv_budget", "plan_terms", "required_replicas"]


def required_replicas(demand_tokens_per_s: float, replica_goodput_tokens_per_s: float, redundancy: float) -> int:
    if replica_goodput_tokens_per_s <= 0:
        raise ValueError("per-replica goodput must be > 0")
    return max(0, math.ceil(demand_tokens_per_s / replica_goodput_tokens_per_s * redundancy))


def plan_terms(demand_tokens_per_s: float, replica_goodput_tokens_per_s: float, growth: float,
               cold_start_s: float, burst_factor: float) -> HeadroomTerms:
    """The replicas ``goodput plan replicas`` would plan for this peak: base, growth, N+1, cold-start buffer."""
    return headroom_terms(demand_tokens_per_s, replica_goodput_tokens_per_s, growth,
                          Headroom(cold_start_s=cold_start_s, burst_factor=burst_factor))


def kv_budget(model: str, gpu: str, tp: int, weight_dtype: str, kv_dtype: str,
              utilization: float) -> tuple[MemoryBudget, dict[str, float]]:
    """The per-GPU budget (``goodput plan memory``'s) and its terms in GiB, blocks and tokens."""
    b = memory_budget(models()[model], gpus()[gpu], MemorySetup(tp=tp, weight_dtype=weight_dtype, kv_dtype=kv_dtype,
                                                                gpu_memory_utilization=utilization))
    return b, {"requested GiB": b.requested / GIB, "weights GiB": b.weights / GIB,
               "activation GiB": b.activation / GIB, "non-torch GiB": b.non_torch / GIB,
               "CUDA graphs GiB": b.cudagraph / GIB, "KV GiB": b.kv / GIB, "KV blocks": float(b.num_blocks),
               "KV tokens": float(b.kv_tokens)}
