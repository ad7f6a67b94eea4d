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
from goodput.foundation.jsonfile import load_json

__all__ = [
    "DTYPE_BYTES",
    "GIB",
    "GpuSpec",
    "MXFP4_BYTES",
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
    "stored_formats",
]

GIB = 2**30
DTYPE_BYTES = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5}
# OCP microscaling fp4 (gpt-oss's experts): 4-bit values plus one 8-bit scale per 32
MXFP4_BYTES = 0.5 + 1 / 32
# what every catalog model may be deployed as (weights) and cached as (KV)
WEIGHT_DTYPES = ("bf16", "fp16", "fp8", "int4")
KV_DTYPES = ("bf16", "fp16", "fp8")


@dataclass(frozen=True)
class ModelSpec:
    """A decoder's config.json, as far as memory and speed depend on it: dense or a mixture of experts, with
    grouped-query or multi-head latent attention (MLA)."""

    name: str
    layers: int
    hidden_size: int
    attention_heads: int
    kv_heads: int
    head_dim: int
    intermediate_size: int  # the dense MLP's width (a MoE model's dense layers)
    vocab_size: int
    tie_word_embeddings: bool
    max_position_embeddings: int
    torch_dtype: str
    attention_bias: bool = False
    sliding_window: int | None = None  # what config.json says; the budget counts every layer as full attention
    source: str = ""
    weight_dtypes: tuple[str, ...] = WEIGHT_DTYPES
    kv_dtypes: tuple[str, ...] = KV_DTYPES
    # mixture of experts (experts 0: dense): routed experts per MoE layer, how many each token runs, each expert's
    # MLP width, the always-on shared experts' total width, and the layers whose MLP is dense instead
    experts: int = 0
    experts_per_token: int = 0
    moe_intermediate_size: int = 0
    shared_expert_intermediate_size: int = 0
    dense_layers: int = 0
    # multi-head latent attention (kv_lora_rank 0: GQA): one compressed latent of kv_lora_rank plus a shared rotary
    # key of qk_rope_head_dim per token and layer is cached, not per-head K and V
    kv_lora_rank: int = 0
    q_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    quantization: str | None = None  # the checkpoint's own format: fp8 (every GEMM) or mxfp4 (the experts only)

    @property
    def moe(self) -> bool:
        return self.experts > 0

    @property
    def mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def moe_layers(self) -> int:
        return self.layers - self.dense_layers if self.moe else 0

    @property
    def embedding_parameters(self) -> int:
        """Input embedding plus the LM head unless it is the same tensor (tie_word_embeddings)."""
        return self.vocab_size * self.hidden_size * (1 if self.tie_word_embeddings else 2)

    def attention_parameters(self, tp: int = 1) -> int:
        """One layer's attention GEMM weights on one of ``tp`` ranks: GQA's q, k, v, o (K/V heads replicated once
        TP exceeds them); MLA's down-projections (q_a, kv_a) on every rank, its up-projections and o split."""
        h, heads = self.hidden_size, self.attention_heads // tp
        if self.mla:
            qk = self.qk_nope_head_dim + self.qk_rope_head_dim
            q = (h * self.q_lora_rank + self.q_lora_rank * heads * qk) if self.q_lora_rank else h * heads * qk
            kv = h * (self.kv_lora_rank + self.qk_rope_head_dim) + \
                self.kv_lora_rank * heads * (self.qk_nope_head_dim + self.v_head_dim)
            return q + kv + heads * self.v_head_dim * h
        q = heads * self.head_dim
        return h * (q + 2 * math.ceil(self.kv_heads / tp) * self.head_dim) + q * h

    def expert_parameters(self, tp: int = 1) -> int:
        """One routed expert's gated MLP (gate, up, down), its width split over ``tp``."""
        return 3 * self.hidden_size * (self.moe_intermediate_size // tp)

    def mlp_parameters(self, tp: int = 1, experts: int | None = None) -> int:
        """Every layer's MLP weights on one of ``tp`` ranks, counting ``experts`` routed experts per MoE layer
        (default all): dense layers' gated MLP; MoE layers' experts, shared experts and router (replicated)."""
        h = self.hidden_size
        dense = (self.layers - self.moe_layers) * 3 * h * (self.intermediate_size // tp)
        if not self.moe:
            return dense
        routed = self.experts if experts is None else experts
        moe = (routed * self.expert_parameters(tp) + 3 * h * (self.shared_expert_intermediate_size // tp)
               + h * self.experts)
        return dense + self.moe_layers * moe

    @property
    def small_parameters(self) -> int:
        """Norms and attention biases: replicated on every TP rank, never quantized."""
        bias = (self.attention_heads + 2 * self.kv_heads) * self.head_dim if self.attention_bias else 0
        latent_norms = self.kv_lora_rank + self.q_lora_rank
        return self.layers * (2 * self.hidden_size + bias + latent_norms) + self.hidden_size

    @property
    def parameters(self) -> int:
        """Every weight, all experts included: what must be resident."""
        return (self.embedding_parameters + self.layers * self.attention_parameters() + self.mlp_parameters()
                + self.small_parameters)

    @property
    def active_parameters(self) -> int:
        """The weights one token runs through: ``experts_per_token`` of the routed experts (all of a dense model)."""
        return (self.embedding_parameters + self.layers * self.attention_parameters()
                + self.mlp_parameters(experts=self.experts_per_token if self.moe else None) + self.small_parameters)

    @property
    def attention_flops_per_pair(self) -> float:
        """FLOPs per (query token x context token) pair and layer: QK^T and AV over every head; MLA's decode
        kernels attend in the latent (kv_lora_rank + rope dims for QK^T, kv_lora_rank for AV)."""
        if self.mla:
            return 2.0 * self.attention_heads * (2 * self.kv_lora_rank + self.qk_rope_head_dim)
        return 4.0 * self.attention_heads * self.head_dim


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


# models.yaml's optional integer fields of mixture-of-experts and MLA models (ModelSpec's names)
_OPTIONAL_INTS = ("experts", "experts_per_token", "moe_intermediate_size", "shared_expert_intermediate_size",
                  "dense_layers", "kv_lora_rank", "q_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")


@cache
def models() -> dict[str, ModelSpec]:
    """Every catalog model by name and by alias (an alias maps to the same spec)."""
    out = {}
    for name, d in _load("models.yaml").items():
        extra: dict[str, Any] = {k: int(d[k]) for k in _OPTIONAL_INTS if k in d}
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
            quantization=d.get("quantization"),
            **extra,
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
    """KV bytes one token occupies on one GPU. GQA: 2 (K and V) x layers x ceil(kv_heads / TP) x head_dim x bytes.
    MLA: layers x (kv_lora_rank + qk_rope_head_dim) x bytes, the one latent every TP rank holds whole."""
    if model.mla:
        return model.layers * (model.kv_lora_rank + model.qk_rope_head_dim) * DTYPE_BYTES[kv_dtype]
    return 2 * model.layers * kv_heads_per_gpu(model, tp) * model.head_dim * DTYPE_BYTES[kv_dtype]


def stored_formats(model: ModelSpec, weight_dtype: str) -> tuple[str, str]:
    """The formats (attention and dense GEMMs, routed experts) ``model`` runs in when served as ``weight_dtype``: a
    checkpoint stored in fp8 or mxfp4 loads as stored whatever 16-bit dtype is asked; fp8 checkpoints quantize every
    GEMM, mxfp4 ones (gpt-oss) the experts only."""
    if model.quantization and DTYPE_BYTES[weight_dtype] == 2:
        return (model.quantization if model.quantization == "fp8" else weight_dtype), model.quantization
    return weight_dtype, weight_dtype


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
_QKV_BIAS_TYPES = ("qwen2", "qwen2_moe")
# config.json's names for the routed experts per layer, and for how many of them each token runs
_EXPERT_KEYS = ("num_local_experts", "num_experts", "n_routed_experts")
_TOP_K_KEYS = ("num_experts_per_tok", "experts_per_token")
# quantization_config.quant_method values a checkpoint is stored in that the budget counts as such
_CHECKPOINT_FORMATS = ("fp8", "mxfp4")
# layer_types a budget of full-attention layers covers (sliding and chunked windows are an upper bound)
_ATTENTION_LAYER_TYPES = ("full_attention", "sliding_attention", "chunked_attention")


def _int(cfg: dict[str, Any], source: str, k: str, default: int | None = None, minimum: int = 1) -> int:
    v = cfg.get(k)
    v = default if v is None else v
    if v is None:
        raise ConfigError(source, k, "is required (a decoder's config.json has it)")
    if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
        raise ConfigError(source, k, f"must be {'a positive' if minimum else 'a non-negative'} integer, "
                                     f"got {json.dumps(v)[:40]}")
    return v


def _refuse_unmodelled(cfg: dict[str, Any], source: str) -> None:
    """One line for the attention kinds the budget cannot size: linear-attention or state-space layers, DeepSeek's
    sparse-attention indexer cache."""
    kinds = cfg.get("layer_types")
    odd = sorted({str(t) for t in kinds if t not in _ATTENTION_LAYER_TYPES}) if isinstance(kinds, list) else []
    if odd:
        raise ConfigError(source, "layer_types", f"{', '.join(odd)} layers are not modelled (attention layers only: "
                                                 f"{', '.join(_ATTENTION_LAYER_TYPES)})")
    if cfg.get("index_topk"):
        raise ConfigError(source, "index_topk", "DeepSeek sparse attention (its indexer's KV cache) is not modelled")


def _moe_fields(cfg: dict[str, Any], source: str, layers: int) -> dict[str, Any]:
    """ModelSpec's mixture-of-experts fields from the names each family gives them (Mixtral, gpt-oss, Qwen-MoE,
    DeepSeek, Llama 4); a dense config gives none."""
    key = next((k for k in _EXPERT_KEYS if cfg.get(k)), None)
    if key is None:
        return {}
    experts = _int(cfg, source, key)
    top_k = _int(cfg, source, next((k for k in _TOP_K_KEYS if k in cfg), _TOP_K_KEYS[0]))
    llama4 = "intermediate_size_mlp" in cfg  # its experts are intermediate_size wide, its dense MLPs _mlp wide
    width = _int(cfg, source, "moe_intermediate_size" if "moe_intermediate_size" in cfg else "intermediate_size")
    shared = (_int(cfg, source, "shared_expert_intermediate_size", 0, minimum=0)
              + _int(cfg, source, "n_shared_experts", 0, minimum=0) * width + (width if llama4 else 0))
    step = _int(cfg, source, "interleave_moe_layer_step" if llama4 else "decoder_sparse_step", 1)
    sparse = {i for i in range(layers) if (i + 1) % step == 0} - set(cfg.get("mlp_only_layers") or ())
    sparse -= set(range(_int(cfg, source, "first_k_dense_replace", 0, minimum=0)))
    if top_k > experts or not sparse:
        raise ConfigError(source, key, f"{experts} experts, {top_k} per token, {len(sparse)} of {layers} layers "
                                       "sparse: not a mixture of experts the budget can count")
    return {"experts": experts, "experts_per_token": top_k, "moe_intermediate_size": width,
            "shared_expert_intermediate_size": shared, "dense_layers": layers - len(sparse)}


def _mla_fields(cfg: dict[str, Any], source: str) -> dict[str, Any]:
    """MLA's latent dimensions (DeepSeek V2/V3, Kimi); none for grouped-query attention."""
    if not cfg.get("kv_lora_rank"):
        return {}
    dims = {k: _int(cfg, source, k) for k in ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")}
    return dims | {"q_lora_rank": _int(cfg, source, "q_lora_rank", 0, minimum=0),
                   "head_dim": dims["qk_nope_head_dim"] + dims["qk_rope_head_dim"]}


def model_from_config(data: object, name: str, source: str) -> ModelSpec:
    """A ``ModelSpec`` from a Hugging Face ``config.json`` (a multimodal one's ``text_config``): dense, mixture of
    experts, grouped-query or latent attention; what the budget cannot size is one line naming the key."""
    if not isinstance(data, dict):
        raise ConfigError(source, "", "expected a Hugging Face config.json object")
    cfg: dict[str, Any] = data
    if "num_hidden_layers" not in cfg and isinstance(cfg.get("text_config"), dict):
        cfg = data["text_config"] | {k: v for k, v in data.items() if k in ("torch_dtype", "dtype")
                                     and k not in data["text_config"]}
    _refuse_unmodelled(cfg, source)

    def num(k: str, default: int | None = None) -> int:
        return _int(cfg, source, k, default)

    hidden, heads, layers = num("hidden_size"), num("num_attention_heads"), num("num_hidden_layers")
    head_dim = cfg.get("head_dim") or (hidden // heads if hidden % heads == 0 else None)
    mla = _mla_fields(cfg, source)
    if head_dim is None and not mla:
        raise ConfigError(source, "head_dim", f"is required: hidden_size {hidden} is not a multiple of {heads} heads")
    dtype = str(cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16")
    if dtype not in _HF_DTYPES:
        raise ConfigError(source, "torch_dtype", f"must be one of {', '.join(_HF_DTYPES)}, got {dtype!r}")
    window = cfg.get("sliding_window") if cfg.get("use_sliding_window", True) else None
    quant = cfg.get("quantization_config")
    method = quant.get("quant_method") if isinstance(quant, dict) else None
    fields: dict[str, Any] = {"head_dim": num("head_dim", head_dim)} if not mla else {}
    return ModelSpec(
        name=name, layers=layers, hidden_size=hidden, attention_heads=heads,
        kv_heads=num("num_key_value_heads", heads),
        intermediate_size=num("intermediate_size_mlp" if "intermediate_size_mlp" in cfg else "intermediate_size"),
        vocab_size=num("vocab_size"), tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        max_position_embeddings=num("max_position_embeddings"), torch_dtype=_HF_DTYPES[dtype],
        attention_bias=bool(cfg.get("attention_bias", cfg.get("model_type") in _QKV_BIAS_TYPES)),
        sliding_window=window if isinstance(window, int) and not isinstance(window, bool) else None,
        source=source, quantization=method if method in _CHECKPOINT_FORMATS else None,
        **fields, **mla, **_moe_fields(cfg, source, layers))


def load_model_config(path: str | Path, name: str | None, source: str, key: str) -> ModelSpec:
    """``model_from_config`` of the file at ``path``, named ``name`` or as the file names itself."""
    p = Path(path)
    try:
        data = load_json(p)  # size, depth and encoding checked
    except ConfigError as e:  # named for the flag or key that gave the file, too
        raise ConfigError(source, key, str(e)) from None
    label = name or (data.get("_name_or_path") if isinstance(data, dict) else None) or p.resolve().parent.name
    return model_from_config(data, str(label), str(p))
