"""The memory budget of one vLLM replica, per GPU, in vLLM's own terms: the one model the planner
(``goodput plan memory``) and the simulator (how many KV blocks a replica has) share.

vLLM (V1 engine, 0.8 and later) sizes its KV cache at start-up:

    requested  = CUDA total memory x gpu_memory_utilization
    available  = requested - weights - activation peak - non-torch memory [- CUDA graph estimate]
    num_blocks = available // (block_size x KV bytes per token)       "Available KV cache memory: X GiB"
    tokens     = num_blocks x block_size                              "GPU KV cache size: N tokens"
    concurrency = num_blocks / ceil(max_model_len / block_size)       "Maximum concurrency for L tokens ...: Cx"

Each term below is modelled from the model's config.json and the engine knobs, with constants fitted to
published start-up logs (tests/fixtures/published/, docs/capacity.md "Memory budget"). Two engine
generations differ, and ``--engine-version`` picks one (ENGINE_PROFILES):

* weights: the GEMM weights split over TP (K/V heads replicated once TP exceeds them), the vocabulary-parallel
  embedding and LM head (vocab padded to 64), replicated norms, and the rotary cos/sin cache, in the model's
  dtype or a quantized format (fp8: 1 byte; int4: 0.5 byte plus a 16-bit scale and 4-bit zero per 128 weights);
  embeddings, LM head and norms stay in the model's dtype. Within 0.3% of every logged "Model loading took".
* activation peak: vLLM's profile run is one dummy forward of ``max_num_batched_tokens`` tokens and one
  sampler pass over ``min(max_num_seqs, max_num_batched_tokens)`` requests. The sampler (fp32 logits, top-k/top-p,
  softmax, penalties) dominates at vLLM's defaults: a number of bytes per request x vocabulary entry that depends on
  the top-k/top-p implementation (SAMPLER_BYTES_PER_LOGIT: PyTorch's full sort of the logits costs three times
  FlashInfer's sort-free kernel), plus 1.28 bf16 copies of the batch's hidden states. The forward pass (residual,
  q/k/v, gate/up, activation) is counted instead when it is larger (long batches, small vocabularies). TP does not
  shrink it: every rank samples the whole vocabulary (Qwen3-32B logs 5.64 GiB at TP 1 and at TP 2).
* non-torch memory: cuBLAS workspaces at TP 1, plus NCCL / custom all-reduce buffers from TP 2 (a little more
  from TP 4). The CUDA context exists before vLLM's baseline snapshot and is not counted.
* CUDA graph reserve: from vLLM 0.21 the engine estimates its CUDA graph pool and takes it from the KV budget
  (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1 by default); published estimates for dense models are 0.13-0.36
  GiB, modelled as 0.3 GiB. Before 0.21 graphs are captured after the KV cache, from the memory above
  ``gpu_memory_utilization``, so the reserve is 0.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from goodput.foundation.errors import ConfigError
from goodput.simulator.catalog import (
    DTYPE_BYTES,
    GIB,
    MXFP4_BYTES,
    GpuSpec,
    ModelSpec,
    kv_bytes_per_token,
    kv_heads_per_gpu,
    stored_formats,
)

__all__ = [
    "DEFAULT_ENGINE_VERSION",
    "ENGINE_PROFILES",
    "EngineProfile",
    "MemoryBudget",
    "MemorySetup",
    "SAMPLER_BYTES_PER_LOGIT",
    "default_scheduler_limits",
    "engine_profile",
    "memory_budget",
    "parse_engine_version",
]

DEFAULT_ENGINE_VERSION = "0.21"
OLDEST_MODELLED = (0, 8)  # the V1 engine became the default in 0.8; V0 profiled differently
HIDDEN_STATE_COPIES = 1.28
ACTIVATION_BYTES = 2  # activations run in bf16/fp16 whatever the weights are stored in


# The sampler's profiled peak per (request x vocabulary entry), by top-k/top-p implementation. vLLM says at start-up
# which one it runs: "Using FlashInfer for top-p & top-k sampling" or "Falling back to the PyTorch-native
# implementation of top-p & top-k sampling".
SAMPLER_BYTES_PER_LOGIT = {
    # sorts the fp32 logits (values and int64 indices) before the softmax and cumulative sum. llm-d's H100 logs
    # (vLLM 0.10-0.11, 1024 requests): Llama-3.1-8B activation 4.76 GiB, Qwen3-32B 5.64. Held out: an A100-40GB
    # vLLM 0.10.1.1 log that fell back to it at 256 requests (dennislee22, within 5%).
    "pytorch": 38.25,
    # sort-free rejection sampling over fp32 logits and probabilities. Fitted on two A100-80GB vLLM 0.10.1.1 TP 1
    # logs that used it (dennislee22, utilisation 0.25 and 0.5: 256 requests x Qwen2's 152,064 entries leave
    # 0.46 GiB); held out: the same set-up at TP 2.
    "flashinfer": 12.6,
    # the default of vLLM 0.12-0.19 when FlashInfer's is off (opt-in from vLLM PR #26859, 0.11.1; PR #40376 calls
    # it Triton's): llm-d-planner's vLLM 0.19.0 H100 runs, Llama-3.1-8B activation 1.89 GiB at 1024 requests.
    "triton": 14.75,
}


@dataclass(frozen=True)
class EngineProfile:
    """What one generation of vLLM spends outside weights and KV cache."""

    since: tuple[int, int]
    sampler: str  # the top-k/top-p implementation this generation runs by default (SAMPLER_BYTES_PER_LOGIT)
    non_torch_gib: float  # at TP 1
    nccl_gib: tuple[float, float]  # added at TP 2, and from TP 4
    cudagraph_gib: float  # taken from the KV budget (0: graphs live above gpu_memory_utilization)
    evidence: str


ENGINE_PROFILES = (
    # llm-d's H100 logs (vLLM 0.10-0.11, "Desired GPU utilization" era) ran PyTorch's sampler; non-torch 0.13 GiB at
    # TP 1, 0.55 at TP 2 (Llama-3.3-70B); AIConfigurator's NCCL table adds 50 MB from TP 4. FlashInfer's sampler was
    # the default in 0.9-0.11.0 wherever flashinfer was installed (vLLM's image), so --sampler says which ran.
    EngineProfile((0, 8), "pytorch", 0.13, (0.42, 0.47), 0.0,
                  "llm-d-benchmark config_explorer/empirical-vllm-memory-results.md (H100); "
                  "dennislee22/vLLM-benchmarking logs (A100, FlashInfer sampler)"),
    # llm-d-planner's vLLM 0.19.0 H100 runs: non-torch 0.25 GiB at TP 1, 2.07 at TP 2, 2.13 at TP 4. Where between
    # 0.11 and 0.19 the default sampler's profile shrank is not pinned down by a published log; 0.12 is assumed.
    EngineProfile((0, 12), "triton", 0.25, (1.82, 1.88), 0.0,
                  "llm-d-planner docs/accuracy/vllm-v0.19.0-accuracy-report.md (H100)"),
    # FlashInfer's sampler is the default again from 0.20 (vLLM PR #40376).
    EngineProfile((0, 20), "flashinfer", 0.25, (1.82, 1.88), 0.0,
                  "llm-d-planner docs/accuracy/vllm-v0.19.0-accuracy-report.md (H100); FlashInfer sampler from "
                  "dennislee22/vLLM-benchmarking logs (A100)"),
    EngineProfile((0, 21), "flashinfer", 0.25, (1.82, 1.88), 0.3,
                  "llm-d-planner docs/accuracy/vllm-v0.19.0-accuracy-report.md (H100), FlashInfer sampler from "
                  "dennislee22/vLLM-benchmarking logs (A100), plus the CUDA graph estimate vLLM logs from 0.21 "
                  "('Estimated CUDA graph memory', 0.13-0.36 GiB for dense models)"),
)
VOCAB_PADDING = 64
INT4_GROUP = 128
# bytes per GEMM weight: int4 carries a 16-bit scale and a 4-bit zero point per group of 128
LINEAR_BYTES = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int4": 0.5 + (2 + 0.5) / INT4_GROUP}
# vLLM lays mxfp4 experts out with their width per rank padded to a multiple of this: gpt-oss's 2,880 loads as
# 3,072 (fitted on the llm-d H100 logs of gpt-oss-20b and -120b, "Model loading took" within 0.4%)
MXFP4_WIDTH_PADDING = 256


def engine_profile(version: tuple[int, int]) -> EngineProfile:
    return [p for p in ENGINE_PROFILES if p.since <= version][-1]


def parse_engine_version(text: str, source: str = "--engine-version", key: str = "") -> tuple[int, int]:
    """``0.11``, ``0.11.2`` or ``v0.9.0`` as (major, minor); versions before the V1 engine are refused."""
    m = re.fullmatch(r"v?(\d+)\.(\d+)(?:\.\d+)?(?:\S*)", text.strip())
    if not m:
        raise ConfigError(source, key, f"not a vLLM version: {text!r} (e.g. 0.11 or 0.11.2)")
    version = (int(m.group(1)), int(m.group(2)))
    if version < OLDEST_MODELLED:
        raise ConfigError(source, key, f"vLLM {text} runs the V0 engine, whose memory profiling is not modelled; "
                                       "0.8 or later")
    return version


def default_scheduler_limits(gpu: GpuSpec) -> tuple[int, int]:
    """vLLM's default (max_num_batched_tokens, max_num_seqs) for ``vllm serve`` on ``gpu``: 8192 / 1024 on parts
    with at least 70 GiB that are not A100s, else 2048 / 256 (vllm/engine/arg_utils.py)."""
    if gpu.memory_bytes >= 70 * GIB and not gpu.name.upper().startswith("A100"):
        return 8192, 1024
    return 2048, 256


@dataclass(frozen=True)
class MemorySetup:
    """The engine knobs the budget depends on; None takes vLLM's default for the model and GPU."""

    tp: int = 1
    weight_dtype: str | None = None  # None: the model's torch_dtype
    kv_dtype: str | None = None  # None ("auto"): the model's torch_dtype
    gpu_memory_utilization: float = 0.9
    max_model_len: int | None = None  # None: max_position_embeddings
    max_num_batched_tokens: int | None = None
    max_num_seqs: int | None = None
    block_size: int = 16
    engine_version: str = DEFAULT_ENGINE_VERSION
    sampler: str | None = None  # None: the engine version's default top-k/top-p implementation
    # vLLM's --enable-expert-parallel: whole experts spread over the TP x DP ranks instead of every expert's width
    # split over TP; data_parallel: engine replicas (attention, dense layers and KV cache each their own)
    expert_parallel: bool = False
    data_parallel: int = 1


@dataclass(frozen=True)
class MemoryBudget:
    """Per-GPU memory terms in bytes, and the KV blocks, tokens and concurrency they leave."""

    model: str
    gpu: str
    tp: int
    weight_dtype: str
    kv_dtype: str
    total: float
    gpu_memory_utilization: float
    weights: float
    activation: float
    non_torch: float
    cudagraph: float
    kv_bytes_per_token: float
    block_size: int
    max_model_len: int
    max_position_embeddings: int
    vocab_size: int
    max_num_batched_tokens: int
    max_num_seqs: int
    engine_version: str
    sampler: str
    evidence: str  # the published logs the engine version's constants were fitted on
    expert_dtype: str | None = None  # a mixture of experts' routed experts' format, None for a dense model
    moe_workspace: float = 0.0  # the fused-MoE kernels' buffers, part of ``activation``
    experts_per_gpu: int = 0
    data_parallel: int = 1
    expert_parallel: bool = False

    @property
    def requested(self) -> float:
        return self.total * self.gpu_memory_utilization

    @property
    def reserve(self) -> float:
        """Everything but weights and KV: activation peak, non-torch memory, CUDA graph reserve."""
        return self.activation + self.non_torch + self.cudagraph

    @property
    def kv(self) -> float:
        """"Available KV cache memory" (negative when the rest does not fit)."""
        return self.requested - self.weights - self.reserve

    @property
    def block_bytes(self) -> float:
        return self.kv_bytes_per_token * self.block_size

    @property
    def num_blocks(self) -> int:
        return max(0, int(self.kv // self.block_bytes))

    @property
    def kv_tokens(self) -> int:
        """"GPU KV cache size: N tokens"."""
        return self.num_blocks * self.block_size

    @property
    def max_concurrency(self) -> float:
        """"Maximum concurrency for max_model_len tokens per request"."""
        return self.num_blocks / math.ceil(self.max_model_len / self.block_size)

    def describe(self) -> str:
        return (f"requested {self.requested / GIB:.2f} GiB = weights {self.weights / GIB:.2f} GiB + activation "
                f"{self.activation / GIB:.2f} GiB + non-torch {self.non_torch / GIB:.2f} GiB + CUDA graph reserve "
                f"{self.cudagraph / GIB:.2f} GiB + KV {self.kv / GIB:.2f} GiB")

    def problem(self) -> tuple[str, str] | None:
        """(the knob that breaks, why) when vLLM would refuse to start this set-up, else None."""
        if self.weights >= self.requested:
            return "weights", (f"model weights {self.weights / GIB:.2f} GiB per GPU exceed the requested memory "
                               f"{self.requested / GIB:.2f} GiB ({self.total / GIB:.2f} GiB x "
                               f"{self.gpu_memory_utilization:g}); raise tp, quantize, or use a larger GPU")
        if self.kv <= 0:
            return "gpu_memory_utilization", (
                f"no available memory for the cache blocks: weights {self.weights / GIB:.2f} + activation "
                f"{self.activation / GIB:.2f} + non-torch {self.non_torch / GIB:.2f} + CUDA graphs "
                f"{self.cudagraph / GIB:.2f} GiB exceed the requested {self.requested / GIB:.2f} GiB")
        if self.kv_tokens < self.max_model_len:
            need = math.ceil(self.max_model_len / self.block_size) * self.block_bytes
            return "max_model_len", (
                f"KV cache holds {self.kv_tokens} tokens, less than max_model_len {self.max_model_len}: one request "
                f"needs {need / GIB:.2f} GiB of KV cache, more than the available {self.kv / GIB:.2f} GiB")
        if self.max_model_len > self.max_position_embeddings:
            return "max_model_len", (f"max_model_len {self.max_model_len} exceeds the model's max_position_embeddings "
                                     f"{self.max_position_embeddings}")
        return None


def _experts_per_gpu(model: ModelSpec, setup: MemorySetup) -> int:
    """Routed experts one GPU holds: all of them (each a 1/TP slice) under TP, whole ones spread over TP x DP
    ranks under expert parallelism."""
    if not model.moe:
        return 0
    return math.ceil(model.experts / (setup.tp * setup.data_parallel)) if setup.expert_parallel else model.experts


def _expert_width(model: ModelSpec, setup: MemorySetup, expert_dtype: str) -> int:
    """One routed expert's MLP width on one GPU, as vLLM lays it out."""
    width = model.moe_intermediate_size // (1 if setup.expert_parallel else setup.tp)
    if expert_dtype == "mxfp4":
        return math.ceil(width / MXFP4_WIDTH_PADDING) * MXFP4_WIDTH_PADDING
    return width


def _weights_per_gpu(model: ModelSpec, setup: MemorySetup, weight_dtype: str) -> float:
    """Attention and dense GEMMs split over TP (K/V heads replicated once TP exceeds them), routed experts as
    ``_experts_per_gpu`` lays them out, the vocabulary-parallel embedding and LM head, replicated norms, the rotary
    cache; MLA adds the up-projection copies vLLM makes at load (W_UK, W_UV) in the model's dtype."""
    tp = setup.tp
    linear_dtype, expert_dtype = stored_formats(model, weight_dtype)
    native = DTYPE_BYTES[model.torch_dtype]
    linear = model.layers * model.attention_parameters(tp) + model.mlp_parameters(tp, experts=0)
    expert_bytes = MXFP4_BYTES if expert_dtype == "mxfp4" else LINEAR_BYTES[expert_dtype]
    experts = (model.moe_layers * _experts_per_gpu(model, setup) * 3 * model.hidden_size
               * _expert_width(model, setup, expert_dtype))
    padded_vocab = math.ceil(model.vocab_size / VOCAB_PADDING) * VOCAB_PADDING
    embedding = math.ceil(padded_vocab / tp) * model.hidden_size * (1 if model.tie_word_embeddings else 2)
    rope_cache = model.max_position_embeddings * (model.qk_rope_head_dim if model.mla else model.head_dim)
    absorbed = (model.layers * model.kv_lora_rank * model.attention_heads // tp
                * (model.qk_nope_head_dim + model.v_head_dim))
    return (linear * LINEAR_BYTES[linear_dtype] + experts * expert_bytes
            + (embedding + model.small_parameters + rope_cache + absorbed) * native)


def _moe_workspace(model: ModelSpec, setup: MemorySetup, tokens: int, expert_dtype: str) -> float:
    """The fused-MoE kernel's buffers for a batch of ``tokens``: each token's ``experts_per_token`` rows of the
    gate/up output (2 x width) sharing memory with the down output (hidden), plus the activated half (width), in
    16-bit. vLLM keeps them across the profile run, so they add to the sampler's peak (Qwen3-30B-A3B, Mixtral, the
    DeepSeek-V2-Lite and Qwen1.5-MoE logs). The mxfp4 kernels (gpt-oss) keep none: its logs show the sampler's alone."""
    if not model.moe or expert_dtype == "mxfp4":
        return 0.0
    n = 2 * _expert_width(model, setup, expert_dtype)
    return tokens * model.experts_per_token * (max(n, model.hidden_size) + n // 2) * ACTIVATION_BYTES


def _activation_peak(model: ModelSpec, tp: int, tokens: int, seqs: int, sampler_name: str) -> float:
    """The profile run's peak without the MoE workspace: the sampler's, or the dense forward pass's when larger
    (attention, and the MLPs that are not routed experts: those run in the workspace)."""
    requests = min(seqs, tokens)
    sampler = SAMPLER_BYTES_PER_LOGIT[sampler_name] * requests * model.vocab_size
    hidden = HIDDEN_STATE_COPIES * tokens * model.hidden_size * ACTIVATION_BYTES
    qkv = (model.attention_heads // tp + 2 * kv_heads_per_gpu(model, tp)) * model.head_dim
    mlp = model.intermediate_size if model.layers > model.moe_layers else 0
    mlp = mlp // tp + model.shared_expert_intermediate_size // tp
    forward = tokens * ACTIVATION_BYTES * (4 * model.hidden_size + qkv + 3 * mlp)
    return max(forward, sampler + hidden)


def memory_budget(model: ModelSpec, gpu: GpuSpec, setup: MemorySetup, source: str = "memory budget") -> MemoryBudget:
    """The budget of ``model`` on TP ``setup.tp`` x ``gpu``; knobs vLLM would not accept raise ``ConfigError``.

    A set-up that parses but does not fit is returned (``problem()`` says why), so callers can show the terms.
    """
    version = parse_engine_version(setup.engine_version, source, "engine_version")
    if setup.tp < 1 or model.attention_heads % setup.tp:
        raise ConfigError(source, "tp", f"{model.name} has {model.attention_heads} attention heads, "
                                        f"which tensor parallel size {setup.tp} does not divide")
    if not 0 < setup.gpu_memory_utilization <= 1:
        raise ConfigError(source, "gpu_memory_utilization", f"must be in (0, 1], got {setup.gpu_memory_utilization}")
    weight_dtype = setup.weight_dtype or model.torch_dtype
    kv_dtype = setup.kv_dtype or model.torch_dtype
    if weight_dtype not in LINEAR_BYTES:
        raise ConfigError(source, "weight_dtype", f"must be one of {', '.join(LINEAR_BYTES)}; got {weight_dtype!r}")
    if kv_dtype not in model.kv_dtypes:
        raise ConfigError(source, "kv_dtype", f"must be one of {', '.join(model.kv_dtypes)}; got {kv_dtype!r}")
    default_tokens, default_seqs = default_scheduler_limits(gpu)
    tokens = setup.max_num_batched_tokens or default_tokens
    seqs = setup.max_num_seqs or default_seqs
    profile = engine_profile(version)
    sampler = setup.sampler or profile.sampler
    if sampler not in SAMPLER_BYTES_PER_LOGIT:
        raise ConfigError(source, "sampler", f"must be one of {', '.join(SAMPLER_BYTES_PER_LOGIT)}; got {sampler!r}")
    _check_parallelism(model, setup, source)
    linear_dtype, expert_dtype = stored_formats(model, weight_dtype)
    group = setup.tp * setup.data_parallel if setup.expert_parallel else setup.tp  # the ranks collectives span
    nccl = 0.0 if group == 1 else profile.nccl_gib[0] if group == 2 else profile.nccl_gib[1]
    workspace = _moe_workspace(model, setup, tokens, expert_dtype)
    return MemoryBudget(
        model=model.name, gpu=gpu.name, tp=setup.tp, weight_dtype=linear_dtype, kv_dtype=kv_dtype,
        total=float(gpu.memory_bytes), gpu_memory_utilization=setup.gpu_memory_utilization,
        weights=_weights_per_gpu(model, setup, weight_dtype),
        activation=_activation_peak(model, setup.tp, tokens, seqs, sampler) + workspace,
        non_torch=(profile.non_torch_gib + nccl) * GIB,
        cudagraph=profile.cudagraph_gib * GIB,
        kv_bytes_per_token=kv_bytes_per_token(model, setup.tp, kv_dtype),
        block_size=setup.block_size,
        max_model_len=setup.max_model_len or model.max_position_embeddings,
        max_position_embeddings=model.max_position_embeddings, vocab_size=model.vocab_size,
        max_num_batched_tokens=tokens, max_num_seqs=seqs, engine_version=setup.engine_version, sampler=sampler,
        evidence=profile.evidence, expert_dtype=expert_dtype if model.moe else None, moe_workspace=workspace,
        experts_per_gpu=_experts_per_gpu(model, setup), data_parallel=setup.data_parallel,
        expert_parallel=setup.expert_parallel,
    )


def _check_parallelism(model: ModelSpec, setup: MemorySetup, source: str) -> None:
    """Expert parallelism and data parallelism as vLLM accepts them."""
    if setup.data_parallel < 1:
        raise ConfigError(source, "data_parallel", f"must be a positive integer, got {setup.data_parallel}")
    if setup.expert_parallel and not model.moe:
        raise ConfigError(source, "expert_parallel", f"{model.name} is a dense model: it has no experts to spread")
    if model.moe and not setup.expert_parallel and model.moe_intermediate_size % setup.tp:
        raise ConfigError(source, "tp", f"{model.name}'s experts are {model.moe_intermediate_size} wide, which "
                                        f"tensor parallel size {setup.tp} does not divide (expert parallelism "
                                        "spreads whole experts instead)")
