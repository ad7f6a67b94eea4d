"""Fake GPUs for the live simulated fleet: one per replica and TP rank, their load following the engine's.

Utilisation is what NVML reads for the replica's current step (goodput/simulator/gpu_readings.py, the model the
utilisation baselines of ``goodput plan evaluate`` scale on), memory the weights plus the KV blocks in use, and a lost
replica's GPUs report ``NVMLError_GpuIsLost`` — so the GPU exporter and the GPU alerts have something
true to say in the demo.
"""

from __future__ import annotations

from typing import Any

from goodput.exporters.fake_nvml import FakeNvml
from goodput.exporters.gpu import DeploymentMapping
from goodput.simulator.catalog import gpus
from goodput.simulator.config import DeploymentConfig
from goodput.simulator.gpu_readings import replica_reading
from goodput.simulator.live import LiveFleet
from goodput.simulator.memory import MemoryBudget
from goodput.simulator.records import replica_id

__all__ = ["NVML_NAMES", "fleet_gpus"]

NVML_NAMES = {"H100-80GB-SXM": "NVIDIA H100 80GB HBM3", "A100-80GB": "NVIDIA A100-SXM4-80GB",
              "H200-141GB": "NVIDIA H200", "L40S-48GB": "NVIDIA L40S"}


def _budget(cfg: DeploymentConfig) -> MemoryBudget:
    """The pool's memory budget, which a fleet file's deployment always has (the fleet sizes its KV cache by it)."""
    if cfg.budget is None:
        raise ValueError(f"deployment {cfg.name} has no memory budget to fake its GPUs' memory from")
    return cfg.budget


def fleet_gpus(live: LiveFleet) -> tuple[FakeNvml, DeploymentMapping]:
    slots = []  # (deployment, replica index, tp rank, its memory budget)
    spec_gpus = []
    for dep in live.fleet.pools():  # a disaggregated deployment's decode pool has GPUs too
        gpu, budget = gpus()[dep.cfg.gpu], _budget(dep.cfg)
        for r in range(dep.cfg.replicas):
            for rank in range(dep.cfg.tp):
                slots.append((dep, r, rank, budget))
                spec_gpus.append({"name": NVML_NAMES.get(gpu.name, gpu.name), "memory_total_bytes": gpu.memory_bytes,
                                  "uuid": f"GPU-5e1a{len(slots):04x}-0000-4000-8000-{len(slots):012x}"})

    def driver(i: int) -> dict[str, Any]:
        dep, r, _rank, b = slots[i]
        if r >= len(dep.replicas):
            return {}
        rep = dep.replicas[r]
        if not rep.alive:
            return {"lost": True}
        util = replica_reading(rep).gpu_util
        used = b.weights + b.reserve + b.kv * rep.kv_usage
        return {"utilization": util, "memory_used_bytes": int(used), "power_watts": 90 + 600 * util,
                "temperature_celsius": int(35 + 40 * util),
                "processes": [{"pid": 20000 + i, "used_memory_bytes": int(used)}]}

    static = {i: (dep.cfg.name, replica_id(dep.cfg.name, dep.role, r)) for i, (dep, r, _, _) in enumerate(slots)}
    spec = {"driver_version": "550.54.15", "hostname": "goodput-demo", "gpus": spec_gpus}
    return FakeNvml(spec, driver=lambda i: driver(i)), DeploymentMapping(static=static)
