"""What a GPU's counters read for a replica, from the replica's state: NVML's utilisation and DCGM's SM activity.

Both are pure functions of the step the replica runs (its roofline, the tokens of the step, the KV it reads). The
autoscaler's utilisation baselines and the fake NVML of the live fleet read them, so the policy we compare against
scales on what a GPU exporter would really show. Sources and what each measured: docs/capacity.md, "Utilisation
baselines"; tests/fixtures/published/gpu_utilisation.yaml.

- ``gpu_util`` (``nvmlDeviceGetUtilizationRates().gpu``, ``DCGM_FI_DEV_GPU_UTIL``): the share of the sample period
  in which any kernel ran. A replica with work runs one step after another; between steps the host schedules,
  samples and detokenises (the roofline's fixed step overhead) and no kernel runs. So a busy replica reads
  kernels / (kernels + overhead) whatever its batch, ~0.75 for one decoding sequence of an 8B model on an H100 and
  ~0.97 for a 2k-token prefill chunk, and an idle one 0: busy or not, never how much more it could take.
- ``sm_active`` (``DCGM_FI_PROF_SM_ACTIVE``): cycles with at least one warp resident, averaged over the SMs:
  ``gpu_util`` x the share of SMs the step's kernels keep. A memory-bound step's weight GEMVs spread over every
  SM and stall on HBM (a stalled warp is resident), while its small kernels and the attention of few sequences
  leave SMs empty: ``MEMORY_BOUND_SM_FILL``; the share rises to 1 as the step becomes compute-bound (prefill).
"""

from __future__ import annotations

from dataclasses import dataclass

from goodput.simulator.roofline import Roofline

__all__ = ["IDLE", "MEMORY_BOUND_SM_FILL", "GpuReading", "replica_reading", "step_reading"]

# SM activity of a memory-bound decode step over GPU_UTIL: dcgm-exporter#301 reads ~0.6 SM activity on a lightly
# loaded vLLM pod, where one decoding sequence's GPU_UTIL is ~0.75 (0.6 / 0.75)
MEMORY_BOUND_SM_FILL = 0.8


@dataclass(frozen=True)
class GpuReading:
    gpu_util: float  # ratio 0-1, DCGM_FI_DEV_GPU_UTIL / 100
    sm_active: float  # ratio 0-1, DCGM_FI_PROF_SM_ACTIVE


IDLE = GpuReading(0.0, 0.0)


def step_reading(rf: Roofline, tokens: int, kv_tokens: float) -> GpuReading:
    """The readings over a run of steps of ``tokens`` tokens each, reading (or writing) ``kv_tokens`` of KV;
    the attention's query x context pairs are taken as ``kv_tokens`` (a decode step's, and close for prefill)."""
    if tokens <= 0:
        return IDLE
    compute = (rf.flops_per_token * tokens + rf.attn_flops_per_ctx * kv_tokens) * rf.sec_per_flop
    memory = rf.weight_bytes * rf.sec_per_byte + rf.kv_bytes_per_token * kv_tokens * rf.sec_per_kv_byte
    kernels = max(compute, memory)
    util = kernels / (kernels + rf.overhead_s)
    fill = MEMORY_BOUND_SM_FILL + (1.0 - MEMORY_BOUND_SM_FILL) * min(1.0, compute / memory)
    return GpuReading(util, util * fill)


def replica_reading(rep) -> GpuReading:
    """A replica's readings now: its decoding sequences plus this step's prefill chunks (each prompt's remaining
    tokens, at most ``prefill_chunk_tokens``, within the step's token budget), over the KV it holds."""
    if not rep.alive or not rep.running:
        return IDLE
    n_dec = rep.n_dec
    budget = rep.max_num_batched_tokens - n_dec
    prefill = 0
    for req in rep.prefilling:
        if prefill >= budget:
            break
        prefill += min(max(0, req.prefill_target - req.computed), rep.prefill_chunk_tokens, budget - prefill)
    return step_reading(rep.rf, n_dec + prefill, float(rep.used_blocks * rep.bs))
