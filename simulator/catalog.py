"""Model and GPU catalog: the architecture and device numbers the memory budget and the roofline rest on.

The numbers live in ``simulator/data/*.yaml``, each with its source; this module only loads them and
derives what follows from them (parameter counts from the architecture, KV bytes per token). Bytes and
FLOP/s are base units throughout. The memory budget itself is ``simulator.memory``.
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
    "ModelSpec",
    "gpus",
    "kv_bytes_per_token",
    "lookup_gpu",
    "lookup_model",
    "models",
]

GIB = 2**30
DTYPE_BYTES = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5}
# what every catalog model may be deployed as (weights) and cached as (KV)
WEIGHT_DTYPES = ("bf16", "fp16", "fp8", "int4")
KV_DTYPES = ("bf16", "fp16", "fp8")


@dataclass(frozen=True)
class ModelSpec:
    """A dense decoder's config.json, as far as memory and speed depend on it."""

    name: str
    layers: int
    hidden_size: int
    attention_heads: int
    kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    tie_word_embeddings: bool
    max_position_embeddings: int
    torch_dtype: str
    attention_bias: bool = False
    source: str = ""
    weight_dtypes: tuple[str, ...] = WEIGHT_DTYPES
    kv_dtypes: tuple[str, ...] = KV_DTYPES

    @property
    def embedding_parameters(self) -> int:
        """Input embedding plus the LM head unless it is the same tensor (tie_word_embeddings)."""
        return self.vocab_size * self.hidden_size * (1 if self.tie_word_embeddings else 2)

    @property
    def layer_linear_parameters(self) -> int:
        """The GEMM weights of one decoder layer: q, k, v, o projections and the gated MLP (gate, up, down)."""
        q = self.attention_heads * self.head_dim
        kv = 2 * self.kv_heads * self.head_dim
        return self.hidden_size * (q + kv) + q * self.hidden_size + 3 * self.hidden_size * self.intermediate_size

    @property
    def small_parameters(self) -> int:
        """Norms and attention biases: replicated on every TP rank, never quantized."""
        bias = (self.attention_heads + 2 * self.kv_heads) * self.head_dim if self.attention_bias else 0
        return self.layers * (2 * self.hidden_size + bias) + self.hidden_size

    @property
    def parameters(self) -> int:
        return self.embedding_parameters + self.layers * self.layer_linear_parameters + self.small_parameters


@dataclass(frozen=True)
class GpuSpec:
    name: str
    memory_bytes: int  # as CUDA reports total memory: what gpu_memory_utilization multiplies
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
    """Every catalog model by name and by alias (an alias maps to the same spec)."""
    out = {}
    for name, d in _load("models.yaml").items():
        spec = ModelSpec(
            name=name,
            layers=int(d["layers"]),
            hidden_size=int(d["hidden_size"]),
            attention_heads=int(d["attention_heads"]),
            kv_heads=int(d["kv_heads"]),
            head_dim=int(d["head_dim"]),
            intermediate_size=int(d["intermediate_size"]),
            vocab_size=int(d["vocab_size"]),
            tie_word_embeddings=bool(d["tie_word_embeddings"]),
            max_position_embeddings=int(d["max_position_embeddings"]),
            torch_dtype=str(d["torch_dtype"]),
            attention_bias=bool(d.get("attention_bias", False)),
            source=str(d["source"]),
        )
        out[name] = spec
        for alias in d.get("aliases", ()):
            out[alias] = spec
    return out


@cache
def gpus() -> dict[str, GpuSpec]:
    return {
        name: GpuSpec(
            name=name,
            memory_bytes=round(float(d["memory_gib"]) * GIB),
            hbm_bandwidth_bytes_per_s=float(d["hbm_bandwidth_bytes_per_s"]),
            bf16_flops=float(d["bf16_flops"]),
            fp8_flops=float(d["fp8_flops"]),
        )
        for name, d in _load("gpus.yaml").items()
    }


def kv_heads_per_gpu(model: ModelSpec, tp: int) -> int:
    """KV heads one TP rank holds: split across ranks, replicated once there are more ranks than heads."""
    return math.ceil(model.kv_heads / tp)


def kv_bytes_per_token(model: ModelSpec, tp: int, kv_dtype: str) -> float:
    """KV bytes one token occupies on one GPU: 2 (K and V) x layers x ceil(kv_heads / TP) x head_dim x bytes."""
    return 2 * model.layers * kv_heads_per_gpu(model, tp) * model.head_dim * DTYPE_BYTES[kv_dtype]


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
