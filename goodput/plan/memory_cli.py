"""``goodput plan memory``: the per-GPU memory budget of one vLLM deployment, in the terms of vLLM's start-up log.

A user holds the output against the engine's own lines ("Model loading took", "Available KV cache memory",
"GPU KV cache size", "Maximum concurrency for ... tokens per request"). The arithmetic is
``goodput.simulator.memory`` — the same budget the simulator sizes its replicas' KV caches with.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from goodput.foundation.args import positive_int
from goodput.foundation.errors import ConfigError
from goodput.simulator.catalog import GIB, gpus, load_model_config, models, resolve_gpu, resolve_model
from goodput.simulator.memory import DEFAULT_ENGINE_VERSION, SAMPLER_BYTES_PER_LOGIT, MemoryBudget, MemorySetup, memory_budget

__all__ = ["add_parser", "budget_json", "format_budget", "run"]

# how vLLM's start-up log names each top-k/top-p sampler, for the user to check --sampler against
SAMPLER_LOG_LINES = {
    "pytorch": "Falling back to the PyTorch-native implementation of top-p & top-k sampling",
    "flashinfer": "Using FlashInfer for top-p & top-k sampling",
    "triton": "no FlashInfer line (vLLM 0.12-0.19 unless VLLM_USE_FLASHINFER_SAMPLER=1)",
}
# --quantization as vLLM names it → the weight format the budget knows
QUANTIZATION = {"none": None, "fp8": "fp8", "awq": "int4", "gptq": "int4"}
KV_CACHE_DTYPES = ("auto", "fp8")
BLOCK_SIZES = (8, 16, 32, 64, 128)


def _fraction(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 < v <= 1:
        raise argparse.ArgumentTypeError(f"must be in (0, 1], got {text}")
    return v


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "memory", help="per-GPU memory budget and KV cache of one vLLM deployment",
        description="Weights, activation peak, non-torch memory and CUDA graph reserve per GPU, and the KV cache "
                    "they leave, in the terms vLLM logs at start-up (Available KV cache memory, GPU KV cache size, "
                    "Maximum concurrency). Exit 2 with the term that breaks when the model does not fit.")
    p.add_argument("--model", default=None,
                   help="catalog model as you name it: Llama-3.1-8B, a Hugging Face id (Qwen/Qwen2.5-7B-Instruct), any "
                        "case, -Instruct/-hf/-it/-chat ignored (an unknown name lists them); with --model-config, "
                        "only the name to print")
    p.add_argument("--model-config", default=None, metavar="CONFIG_JSON",
                   help="a Hugging Face config.json (layers, hidden size, heads, KV heads, head dim, vocab, dtype) "
                        "for a model the catalog lacks")
    p.add_argument("--gpu", required=True,
                   help="catalog GPU or an alias: H100-80GB-SXM, H100, 'H100 PCIe', nvidia-smi's name (an unknown "
                        "name lists them; an ambiguous one, e.g. A100, lists the choices)")
    p.add_argument("--tp", type=positive_int, default=1, help="tensor parallel size (default 1)")
    p.add_argument("--enable-expert-parallel", action="store_true",
                   help="mixture of experts: spread whole experts over the TP x DP ranks (vLLM's flag) instead of "
                        "splitting every expert's width over TP")
    p.add_argument("--data-parallel-size", type=positive_int, default=1, metavar="DP",
                   help="engine replicas of TP GPUs each; with --enable-expert-parallel their experts are shared "
                        "(default 1). The budget is per GPU, the KV cache per replica")
    p.add_argument("--gpu-memory-utilization", type=_fraction, default=0.9, metavar="U",
                   help="fraction of GPU memory vLLM may use (default 0.9)")
    p.add_argument("--max-model-len", type=positive_int, default=None, metavar="TOKENS",
                   help="context length (default: the model's max_position_embeddings)")
    p.add_argument("--kv-cache-dtype", choices=KV_CACHE_DTYPES, default="auto",
                   help="auto: the model's dtype; fp8: one byte per element")
    p.add_argument("--quantization", choices=tuple(QUANTIZATION), default="none",
                   help="weight quantization: fp8 (1 byte), awq / gptq (4-bit, group 128)")
    p.add_argument("--max-num-batched-tokens", type=positive_int, default=None, metavar="TOKENS",
                   help="default: vLLM's for the GPU (8192 on >= 70 GiB parts but A100, else 2048)")
    p.add_argument("--max-num-seqs", type=positive_int, default=None, metavar="N",
                   help="default: vLLM's for the GPU (1024 on >= 70 GiB parts but A100, else 256)")
    p.add_argument("--block-size", type=int, choices=BLOCK_SIZES, default=16, help="KV cache block size (default 16)")
    p.add_argument("--engine-version", default=DEFAULT_ENGINE_VERSION, metavar="X.Y",
                   help=f"vLLM version whose memory profiling to model (0.8 or later; default {DEFAULT_ENGINE_VERSION})")
    p.add_argument("--sampler", choices=tuple(SAMPLER_BYTES_PER_LOGIT), default=None,
                   help="top-k/top-p sampler vLLM runs, which sets most of the activation peak (default: the engine "
                        "version's; the start-up log says which: 'Using FlashInfer for top-p & top-k sampling' or "
                        "'Falling back to the PyTorch-native implementation')")
    p.add_argument("--format", choices=("table", "json"), default="table")
    p.set_defaults(func=run)


def _gib(x: float) -> float:
    return round(x / GIB, 2)


def budget_json(b: MemoryBudget, notes: list[str] | None = None) -> dict[str, Any]:
    """The budget's terms (GiB per GPU) and vLLM's start-up figures, as plain data; ``notes``: how the names
    typed were matched."""
    return {
        "notes": notes or [],
        "model": b.model, "gpu": b.gpu, "tp": b.tp, "engine_version": b.engine_version, "sampler": b.sampler,
        "weight_dtype": b.weight_dtype, "kv_cache_dtype": b.kv_dtype, "block_size": b.block_size,
        "max_model_len": b.max_model_len, "max_num_batched_tokens": b.max_num_batched_tokens,
        "max_num_seqs": b.max_num_seqs, "gpu_memory_utilization": b.gpu_memory_utilization,
        "data_parallel_size": b.data_parallel, "expert_parallel": b.expert_parallel,
        "expert_dtype": b.expert_dtype, "experts_per_gpu": b.experts_per_gpu,
        "gib_per_gpu": {"total": _gib(b.total), "requested": _gib(b.requested), "weights": _gib(b.weights),
                        "activation_peak": _gib(b.activation), "moe_workspace": _gib(b.moe_workspace),
                        "non_torch": _gib(b.non_torch),
                        "cudagraph_reserve": _gib(b.cudagraph), "available_kv_cache": _gib(b.kv)},
        "kv_bytes_per_token": int(b.kv_bytes_per_token),
        "num_gpu_blocks": b.num_blocks,
        "gpu_kv_cache_tokens": b.kv_tokens,
        "maximum_concurrency": round(b.max_concurrency, 2),
    }


def format_budget(b: MemoryBudget) -> str:
    rows = [
        ("total GPU memory (as CUDA reports it)", b.total, ""),
        (f"requested = total x {b.gpu_memory_utilization:g}", b.requested, "gpu_memory_utilization"),
        ("  model weights", b.weights, f'vLLM: "Model loading took {_gib(b.weights):.2f} GiB"'),
        ("  activation peak (profile run)", b.activation,
         f"{min(b.max_num_seqs, b.max_num_batched_tokens):,} requests x {b.vocab_size:,} vocab sampled by "
         f"{b.sampler}, {b.max_num_batched_tokens:,} tokens forward"),
        ("  non-torch memory", b.non_torch, f"cuBLAS workspaces{', NCCL buffers' if _collectives(b) else ''}"),
        ("  CUDA graph reserve", b.cudagraph, "vLLM >= 0.21 estimates it before sizing the KV cache"),
    ]
    if b.expert_dtype is not None:
        rows.insert(4, ("    of which fused-MoE workspace", b.moe_workspace,
                        f"{b.max_num_batched_tokens:,} tokens x experts per token"))
    width = max(len(r[0]) for r in rows)
    lines = [f"{b.model} on {_gpus(b)}, vLLM {b.engine_version} profile: {b.weight_dtype} weights{_experts(b)}, "
             f"{b.kv_dtype} KV cache, max_num_batched_tokens {b.max_num_batched_tokens}, max_num_seqs {b.max_num_seqs}",
             "", f"{'term':<{width}}  GiB per GPU"]
    lines += [f"{name:<{width}}  {_gib(v):>11.2f}  {note}".rstrip() for name, v, note in rows]
    lines += ["",
              f"Available KV cache memory: {_gib(b.kv):.2f} GiB",
              f"KV blocks: {b.num_blocks:,} of {b.block_size} tokens ({int(b.kv_bytes_per_token):,} bytes per token)",
              f"GPU KV cache size: {b.kv_tokens:,} tokens",
              f"Maximum concurrency for {b.max_model_len:,} tokens per request: {b.max_concurrency:.2f}x",
              "", f"sampler: {b.sampler} (vLLM's log: {SAMPLER_LOG_LINES[b.sampler]}; --sampler if yours differs)",
              f"(activation and non-torch constants for this vLLM version fitted on: {b.evidence})"]
    return "\n".join(lines)


def _collectives(b: MemoryBudget) -> bool:
    """Whether NCCL buffers are part of the non-torch memory: TP, or expert parallelism across DP replicas."""
    return b.tp > 1 or (b.expert_parallel and b.data_parallel > 1)


def _gpus(b: MemoryBudget) -> str:
    return f"{b.tp}x {b.gpu}" + (f" (x{b.data_parallel} data parallel)" if b.data_parallel > 1 else "")


def _experts(b: MemoryBudget) -> str:
    """How the routed experts sit on a GPU: every one sliced over TP, or whole ones under expert parallelism."""
    if b.expert_dtype is None:
        return ""
    where = (f"{b.experts_per_gpu} whole experts per GPU (expert parallel)" if b.expert_parallel
             else f"all {b.experts_per_gpu} experts, each 1/{b.tp} of its width")
    return f" ({b.expert_dtype} experts: {where})"


def run(args: argparse.Namespace) -> int:
    notes = []
    if args.model_config is not None:
        model = load_model_config(args.model_config, args.model, "--model-config", "")
        notes.append(f"model {model.name} from {args.model_config}")
        if model.sliding_window and model.sliding_window < model.max_position_embeddings:
            notes.append(f"sliding_window {model.sliding_window} not modelled: every layer counted as full attention "
                         "(an upper bound on the KV bytes per token)")
    elif args.model is None:
        raise ConfigError("plan memory", "--model", "is required (or --model-config CONFIG_JSON)")
    else:
        matched = resolve_model(args.model, "--model", "")
        model = models()[matched.name]
        notes += [matched.note] if matched.note else []
    gmatch = resolve_gpu(args.gpu, "--gpu", "")
    gpu = gpus()[gmatch.name]
    notes += [gmatch.note] if gmatch.note else []
    setup = MemorySetup(
        tp=args.tp, weight_dtype=QUANTIZATION[args.quantization],
        kv_dtype=None if args.kv_cache_dtype == "auto" else args.kv_cache_dtype,
        gpu_memory_utilization=args.gpu_memory_utilization, max_model_len=args.max_model_len,
        max_num_batched_tokens=args.max_num_batched_tokens, max_num_seqs=args.max_num_seqs,
        block_size=args.block_size, engine_version=args.engine_version, sampler=args.sampler,
        expert_parallel=args.enable_expert_parallel, data_parallel=args.data_parallel_size)
    budget = memory_budget(model, gpu, setup, source="plan memory")
    problem = budget.problem()
    if problem is not None:
        raise ConfigError(f"{model.name} does not fit {_gpus(budget)}", problem[0], problem[1])
    if args.format == "json":
        print(json.dumps(budget_json(budget, notes), indent=2))
    else:
        print("".join(f"note: {n}\n" for n in notes) + format_budget(budget))
    return 0
