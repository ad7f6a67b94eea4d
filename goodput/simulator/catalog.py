"""Model and GPU catalog: the architecture and device numbers the memory budget and the roofline rest on.

The numbers live in ``goodput/simulator/data/*.yaml``, each with its source; this module only loads them and
derives what follows from them (parameter counts from the architecture, KV bytes per token). Bytes and
FLOP/s are base units throughout. The memory budget itself is ``goodput.simulator.memory``.

Names come in as users type them: ``resolve_model`` and ``resolve_gpu`` are the one resolver every reader of a
model or GPU name uses (Hugging Face ids, the chat-tune suffixes, any case; GPU aliases), and ``load_model_config``
reads a Hugging Face ``config.json`` for a model the catalog does not have.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from goodput.foundation.errors import ConfigError

__all__ = [
    "DTYPE_BYTES",
    "GIB",
    "GpuSpec",
    "Match",
    "ModelSpec",
    "gpus",
    "kv_bytes_per_token",
    "load_model_config",
    "lookup_gpu",
    "lookup_model",
    "model_from_config",
    "model_key",
    "models",
    "resolve_gpu",
    "resolve_model",
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
    sliding_window: int | None = None  # what config.json says; the budget counts every layer as full attention
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
    text = resources.files("goodput.simulator").joinpath("data", filename).read_text()
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


@cache
def _gpu_aliases() -> dict[str, str]:
    """Each GPU's declared aliases (gpus.yaml ``aliases``), by normalized name, to its catalog name."""
    return {_gpu_key(a): name for name, d in _load("gpus.yaml").items() for a in d.get("aliases", ())}


def kv_heads_per_gpu(model: ModelSpec, tp: int) -> int:
    """KV heads one TP rank holds: split across ranks, replicated once there are more ranks than heads."""
    return math.ceil(model.kv_heads / tp)


def kv_bytes_per_token(model: ModelSpec, tp: int, kv_dtype: str) -> float:
    """KV bytes one token occupies on one GPU: 2 (K and V) x layers x ceil(kv_heads / TP) x head_dim x bytes."""
    return 2 * model.layers * kv_heads_per_gpu(model, tp) * model.head_dim * DTYPE_BYTES[kv_dtype]


@dataclass(frozen=True)
class Match:
    """What a typed name resolved to; ``note`` says how when it was not the catalog's own spelling."""

    name: str  # the catalog's name
    note: str | None = None


# parts of a Hugging Face model name that do not change the architecture: chat and instruction tunes, the
# "-hf" of converted checkpoints
TUNE_PARTS = ("instruct", "hf", "it", "chat")


def model_key(name: str) -> str:
    """``Qwen/Qwen2.5-7B-Instruct`` -> ``qwen2.5-7b``: no organisation, no tune parts, any case (one architecture)."""
    n = name.strip().rsplit("/", 1)[-1].casefold()
    n = n.removeprefix("meta-")  # meta-llama/Meta-Llama-3-8B
    return "-".join(p for p in n.split("-") if p not in TUNE_PARTS)


@cache
def _model_keys() -> dict[str, str]:
    out: dict[str, str] = {}
    for name in models():  # names and aliases
        out.setdefault(model_key(name), models()[name].name)
    return out


def resolve_model(name: str, source: str, key: str) -> Match:
    """The catalog model ``name`` means, as a user or a Hugging Face id spells it."""
    if name in models():
        spec = models()[name]
        return Match(spec.name, None if spec.name == name else f"{name} is {spec.name} (same architecture)")
    found = _model_keys().get(model_key(name))
    if found is None:
        raise ConfigError(source, key, f"unknown model {name!r}; known: {', '.join(sorted(models()))} (any other "
                                       "model: its Hugging Face config.json, --model-config or model_config)")
    return Match(found, f"{name} is catalog model {found} (matched ignoring the organisation, case and the "
                        f"{'/'.join('-' + p for p in TUNE_PARTS)} tune suffixes, which keep the architecture)")


def lookup_model(name: str, source: str, key: str) -> ModelSpec:
    return models()[resolve_model(name, source, key).name]


def _gpu_key(name: str) -> str:
    n = name.strip().casefold().removeprefix("nvidia")
    return "-".join(p for p in re.split(r"[-_ ]+", n) if p)


def resolve_gpu(name: str, source: str, key: str) -> Match:
    """The catalog GPU ``name`` means: its catalog name, a declared alias (``H100``), or the parts of one
    name (``H100 PCIe``); a name that fits several lists them."""
    if name in gpus():
        return Match(name)
    k = _gpu_key(name)
    exact = {_gpu_key(g): g for g in gpus()}.get(k) or _gpu_aliases().get(k)
    if exact is None:
        parts = set(k.split("-"))
        fits = sorted(g for g in gpus() if parts <= set(_gpu_key(g).split("-")))
        if len(fits) > 1:
            raise ConfigError(source, key, f"GPU {name!r} is ambiguous: one of {', '.join(fits)}")
        if not fits:
            raise ConfigError(source, key, f"unknown GPU {name!r}; known: {', '.join(sorted(gpus()))}")
        exact = fits[0]
    return Match(exact, None if _gpu_key(exact) == k else f"GPU {name!r} is {exact}")


def lookup_gpu(name: str, source: str, key: str) -> GpuSpec:
    return gpus()[resolve_gpu(name, source, key).name]


# config.json's torch_dtype (or dtype) to the catalog's
_HF_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}
# model_type values whose q/k/v projections carry a bias without saying so in config.json
_QKV_BIAS_TYPES = ("qwen2",)
# config.json keys of mixture-of-experts models: the budget's parameter count is a dense decoder's
_MOE_KEYS = ("num_experts", "num_local_experts", "n_routed_experts", "moe_intermediate_size")


def model_from_config(data: object, name: str, source: str) -> ModelSpec:
    """A dense decoder's ``ModelSpec`` from a Hugging Face ``config.json`` (a multimodal one's ``text_config``)."""
    if not isinstance(data, dict):
        raise ConfigError(source, "", "expected a Hugging Face config.json object")
    cfg: dict[str, Any] = data
    if "num_hidden_layers" not in cfg and isinstance(cfg.get("text_config"), dict):
        cfg = cfg["text_config"]
    moe = next((k for k in _MOE_KEYS if cfg.get(k)), None)
    if moe:
        raise ConfigError(source, moe, "mixture-of-experts models are not modelled (dense decoders only)")

    def num(k: str, default: int | None = None) -> int:
        v = cfg.get(k)
        v = default if v is None else v
        if v is None:
            raise ConfigError(source, k, "is required (a decoder's config.json has it)")
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ConfigError(source, k, f"must be a positive integer, got {json.dumps(v)[:40]}")
        return v

    hidden, heads = num("hidden_size"), num("num_attention_heads")
    head_dim = cfg.get("head_dim") or (hidden // heads if hidden % heads == 0 else None)
    if head_dim is None:
        raise ConfigError(source, "head_dim", f"is required: hidden_size {hidden} is not a multiple of {heads} heads")
    dtype = str(cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16")
    if dtype not in _HF_DTYPES:
        raise ConfigError(source, "torch_dtype", f"must be one of {', '.join(_HF_DTYPES)}, got {dtype!r}")
    window = cfg.get("sliding_window") if cfg.get("use_sliding_window", True) else None
    return ModelSpec(
        name=name, layers=num("num_hidden_layers"), hidden_size=hidden, attention_heads=heads,
        kv_heads=num("num_key_value_heads", heads), head_dim=num("head_dim", head_dim),
        intermediate_size=num("intermediate_size"), vocab_size=num("vocab_size"),
        tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        max_position_embeddings=num("max_position_embeddings"), torch_dtype=_HF_DTYPES[dtype],
        attention_bias=bool(cfg.get("attention_bias", cfg.get("model_type") in _QKV_BIAS_TYPES)),
        sliding_window=window if isinstance(window, int) and not isinstance(window, bool) else None,
        source=source)


def load_model_config(path: str | Path, name: str | None, source: str, key: str) -> ModelSpec:
    """``model_from_config`` of the file at ``path``, named ``name`` or as the file names itself."""
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except OSError as e:
        raise ConfigError(source, key, f"cannot read {p}: {e.strerror or e}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ConfigError(str(p), "", f"not JSON: {e}") from None
    label = name or (data.get("_name_or_path") if isinstance(data, dict) else None) or p.resolve().parent.name
    return model_from_config(data, str(label), str(p))
