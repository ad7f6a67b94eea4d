"""Model and GPU catalog, and the memory arithmetic that decides how many KV blocks a replica has.

The numbers live in ``simulator/data/*.yaml`` (with their sources); this module only loads them
and does the pure math. Bytes and FLOP/s are base units throughout.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache
from importlib import resources

import yaml

from goodput.foundation.errors import ConfigError

__all__ = [
    "DTYPE_BYTES",
    "GIB",
    "GpuSpec",
    "MemoryBudget",
    "ModelSpec",
    "gpus",
    "kv_bytes_per_token",
    "lookup_gpu",
    "lookup_model",
    "memory_budget",
    "models",
]

GIB = 2**30
DTYPE_BYTES = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5}


@dataclass(frozen=True)
class ModelSpec:
    name: str
    layers: int
    hidden_size: int
    attention_heads: int
    kv_heads: int
    head_dim: int
    intermediate_size: int
    parameters: float
    max_position_embeddings: int
    weight_dtypes: tuple[str, ...]
    kv_dtypes: tuple[str, ...]

    def weight_bytes(self, weight_dtype: str) -> float:
        return self.parameters * DTYPE_BYTES[weight_dtype]


@dataclass(frozen=True)
class GpuSpec:
    name: str
    memory_bytes: int
    hbm_bandwidth_bytes_per_s: float
    bf16_flops: float
    fp8_flops: float

    def peak_flops(self, weight_dtype: str) -> float:
        """Dense FLOP/s for the GEMMs of a model stored in ``weight_dtype``.

        fp8 weights run fp8 tensor cores where the GPU has them; int4 (weight-only) computes in bf16.
        """
        return self.fp8_flops if weight_dtype == "fp8" else self.bf16_flops


def _load(filename: str) -> dict:
    text = resources.files("simulator").joinpath("data", filename).read_text()
    return yaml.safe_load(text)


@cache
def models() -> dict[str, ModelSpec]:
    out = {}
    for name, d in _load("models.yaml").items():
        out[name] = ModelSpec(
            name=name,
            layers=int(d["layers"]),
            hidden_size=int(d["hidden_size"]),
            attention_heads=int(d["attention_heads"]),
            kv_heads=int(d["kv_heads"]),
            head_dim=int(d["head_dim"]),
            intermediate_size=int(d["intermediate_size"]),
            parameters=float(d["parameters"]),
            max_position_embeddings=int(d["max_position_embeddings"]),
            weight_dtypes=tuple(d["weight_dtypes"]),
            kv_dtypes=tuple(d["kv_dtypes"]),
        )
    return out


@cache
def gpus() -> dict[str, GpuSpec]:
    return {
        name: GpuSpec(
            name=name,
            memory_bytes=int(d["memory_bytes"]),
            hbm_bandwidth_bytes_per_s=float(d["hbm_bandwidth_bytes_per_s"]),
            bf16_flops=float(d["bf16_flops"]),
            fp8_flops=float(d["fp8_flops"]),
        )
        for name, d in _load("gpus.yaml").items()
    }


def kv_bytes_per_token(model: ModelSpec, tp: int, kv_dtype: str) -> float:
    """KV bytes one token occupies on one GPU: 2 (K and V) x layers x ceil(kv_heads / TP) x head_dim x bytes."""
    return 2 * model.layers * math.ceil(model.kv_heads / tp) * model.head_dim * DTYPE_BYTES[kv_dtype]


@dataclass(frozen=True)
class MemoryBudget:
    """Per-GPU memory terms, in bytes, and the KV blocks they leave."""

    usable: float
    weights: float
    reserve: float
    kv: float
    kv_bytes_per_token: float
    block_size: int

    @property
    def num_blocks(self) -> int:
        return max(0, int(self.kv // (self.kv_bytes_per_token * self.block_size)))

    def describe(self) -> str:
        return (
            f"usable {self.usable / GIB:.2f} GiB = weights {self.weights / GIB:.2f} GiB "
            f"+ reserve {self.reserve / GIB:.2f} GiB + KV {self.kv / GIB:.2f} GiB"
        )


def memory_budget(
    model: ModelSpec,
    gpu: GpuSpec,
    *,
    tp: int,
    weight_dtype: str,
    kv_dtype: str,
    gpu_memory_utilization: float,
    activation_reserve_bytes: float,
    block_size: int = 16,
) -> MemoryBudget:
    """KV capacity = GPU memory x utilization - weights / TP - activation reserve (per GPU)."""
    usable = gpu.memory_bytes * gpu_memory_utilization
    weights = model.weight_bytes(weight_dtype) / tp
    kv = usable - weights - activation_reserve_bytes
    return MemoryBudget(
        usable=usable,
        weights=weights,
        reserve=activation_reserve_bytes,
        kv=kv,
        kv_bytes_per_token=kv_bytes_per_token(model, tp, kv_dtype),
        block_size=block_size,
    )


def lookup_model(name: str, source: str, key: str) -> ModelSpec:
    try:
        return models()[name]
    except KeyError:
        raise ConfigError(source, key, f"unknown model {name!r}; known: {', '.join(sorted(models()))}") from None


def lookup_gpu(name: str, source: str, key: str) -> GpuSpec:
    try:
        return gpus()[name]
    except KeyError:
        raise ConfigError(source, key, f"unknown GPU {name!r}; known: {', '.join(sorted(gpus()))}") from None
