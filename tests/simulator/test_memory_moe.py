"""Mixture-of-experts and MLA models in the memory budget and the roofline: numbers worked by hand (Mixtral's
weights, bytes per token of MLA against GQA, a MoE decode step), Hugging Face configs read as the catalog's entries,
and the published vLLM start-up figures of tests/fixtures/published/vllm_startup_moe.yaml (KV tokens within 5%).
docs/capacity.md carries the table; regenerate it with ``python -m tests.simulator.test_memory_moe``."""

from __future__ import annotations

import dataclasses
from functools import cache

import pytest
import yaml

from goodput.simulator.catalog import GIB, GpuSpec, gpus, kv_bytes_per_token, load_model_config, models
from goodput.simulator.config import EngineConfig
from goodput.simulator.fleet import Fleet
from goodput.simulator.memory import MemorySetup, memory_budget
from goodput.simulator.roofline import Roofline
from tests.conftest import BASE_DEPLOYMENT, FIXTURES, REPO, make_fleet
from tests.simulator.test_memory_published import GOAL, docs_table, render_table, rows
from tests.simulator.test_memory_published_latency import GOAL as LATENCY_GOAL
from tests.simulator.test_memory_published_latency import Run, simulate_row

MOE_STARTUP = FIXTURES / "published" / "vllm_startup_moe.yaml"
CONFIGS = REPO / "goodput" / "simulator" / "data" / "model_configs"
MOE_LATENCY = FIXTURES / "published" / "vllm_moe_latency.yaml"
BEGIN, END = "<!-- moe-memory-fidelity:begin -->", "<!-- moe-memory-fidelity:end -->"
LATENCY_BEGIN, LATENCY_END = "<!-- moe-latency-fidelity:begin -->", "<!-- moe-latency-fidelity:end -->"
H100, H200 = gpus()["H100-80GB-SXM"], gpus()["H200-141GB"]


def test_mixtral_weights_worked_by_hand():
    m = models()["Mixtral-8x7B"]
    # per layer: q and o 4096 x 4096 each, k and v 4096 x 1024 each = 41,943,040; 8 experts x 3 x 4096 x 14,336 =
    # 1,409,286,144; router 4096 x 8 = 32,768. x 32 layers = 46,440,644,608; embedding and LM head 2 x 32,000 x
    # 4096 = 262,144,000; norms 32 x 2 x 4096 + 4096 = 266,240
    assert m.parameters == 46_702_792_704
    # a token runs 2 of the 8 experts: 32 x (41,943,040 + 2 x 352,321,536 + 32,768) + 262,144,000 + 266,240
    assert m.active_parameters == 12_879_925_248
    # TP 2 in bf16, per layer: attention 4096 x (2048 + 2 x 4 x 128) + 2048 x 4096 = 20,971,520; 8 experts each
    # 3 x 4096 x 7168 wide (every expert split) = 704,643,072; the router whole, 32,768: 725,647,360 x 32 layers x
    # 2 B; half the vocabulary (already a multiple of 64) twice, 16,000 x 4096 x 2 x 2 B; norms and the rotary cache
    # (32,768 x 128) whole, (266,240 + 4,194,304) x 2 B
    b = memory_budget(m, H100, MemorySetup(tp=2, engine_version="0.19.0"))
    assert b.weights == 725_647_360 * 32 * 2 + 16_000 * 4096 * 2 * 2 + (266_240 + 4_194_304) * 2
    assert b.weights / GIB == pytest.approx(43.51, abs=0.01)  # vLLM 0.19.0: "Model loading took 43.51 GiB"
    # expert parallelism spreads whole experts: 4 of 8 per GPU at TP 2, the same bytes as two halves of 8
    ep = memory_budget(m, H100, MemorySetup(tp=2, expert_parallel=True, engine_version="0.19.0"))
    assert (ep.experts_per_gpu, b.experts_per_gpu, ep.weights) == (4, 8, b.weights)


def test_mla_caches_one_latent_where_gqa_caches_per_head_k_and_v():
    v3, mixtral = models()["DeepSeek-V3"], models()["Mixtral-8x7B"]
    # MLA: 61 layers x (kv_lora_rank 512 + rope 64) x 2 B, the same on every TP rank (the latent is not split)
    assert [kv_bytes_per_token(v3, tp, "bf16") for tp in (1, 8)] == [70_272, 70_272]
    assert kv_bytes_per_token(v3, 8, "fp8") == 35_136
    # GQA: 2 (K, V) x 32 layers x 8 KV heads x 128 x 2 B, split over TP
    assert [kv_bytes_per_token(mixtral, tp, "bf16") for tp in (1, 8)] == [131_072, 16_384]
    # what per-head K and V would cost for DeepSeek-V3's 128 heads of 192 (K) and 128 (V) dims: 61 x 128 x 320 x 2 B,
    # 71x the latent
    assert 61 * 128 * (192 + 128) * 2 / kv_bytes_per_token(v3, 1, "bf16") == pytest.approx(71.1, abs=0.05)


def test_deepseek_v3_on_eight_h200s():
    b = memory_budget(models()["DeepSeek-V3"], H200, MemorySetup(tp=8, max_model_len=32768))
    assert (b.weight_dtype, b.expert_dtype) == ("fp8", "fp8")  # the checkpoint is stored in fp8
    # 671e9 parameters (as the card says), nearly all fp8 GEMMs: about 671 GB / 8 = 78 GiB a GPU
    assert models()["DeepSeek-V3"].parameters == pytest.approx(671.0e9, rel=0.001)
    assert models()["DeepSeek-V3"].active_parameters == pytest.approx(37.6e9, rel=0.01)
    assert 78 < b.weights / GIB < 81 and b.problem() is None
    assert b.kv_tokens == b.num_blocks * 16 and b.kv / b.kv_tokens == pytest.approx(70_272, rel=0.001)
    # DP 8 with expert parallelism: 32 whole experts a GPU, attention replicated, and every GPU caches its own
    # requests' latents, where TP 8 caches the same latent on all eight
    dp = memory_budget(models()["DeepSeek-V3"], H200, MemorySetup(tp=1, data_parallel=8, expert_parallel=True,
                                                                   max_model_len=32768))
    assert dp.experts_per_gpu == 32 and dp.weights > b.weights and dp.kv_bytes_per_token == b.kv_bytes_per_token


@pytest.mark.parametrize(("file", "catalog"), [("mixtral-8x7b-instruct-v0.1.json", "Mixtral-8x7B"),
                                               ("qwen3-30b-a3b.json", "Qwen3-30B-A3B"),
                                               ("deepseek-v3.json", "DeepSeek-V3"),
                                               ("gpt-oss-120b.json", "gpt-oss-120b"),
                                               ("llama-4-scout-17b-16e-instruct.json", "Llama-4-Scout-17B-16E")])
def test_a_moe_config_json_reads_as_the_catalogs_entry(file, catalog):
    spec = load_model_config(CONFIGS / file, None, "--model-config", "")
    drop = {"name", "source", "sliding_window"}  # gpt-oss's window is noted, the catalog budgets full attention
    assert {k: v for k, v in dataclasses.asdict(spec).items() if k not in drop} == \
           {k: v for k, v in dataclasses.asdict(models()[catalog]).items() if k not in drop}


def test_a_moe_decode_step_reads_the_experts_its_tokens_touch():
    """Worked by hand on a toy MoE: 4 experts, 2 per token, on a 1 GB/s, 1 TFLOP/s GPU."""
    toy = dataclasses.replace(models()["Mixtral-8x7B"], name="toy-moe", layers=2, hidden_size=64, attention_heads=4,
                              kv_heads=2, head_dim=16, intermediate_size=128, vocab_size=1000, experts=4,
                              experts_per_token=2, moe_intermediate_size=128)
    gpu = GpuSpec("toy", memory_bytes=80 * 2**30, hbm_bandwidth_bytes_per_s=1e9, bf16_flops=1e12, fp8_flops=2e12)
    engine = EngineConfig(compute_efficiency=0.5, memory_efficiency=0.8, attention_memory_efficiency=0.4,
                          step_overhead_ms=1.0, weight_dtype="bf16", kv_dtype="fp16")
    rf = Roofline.build(toy, gpu, tp=1, engine=engine)
    # attention 64 x (64 + 64) + 64 x 64 = 12,288 a layer; one expert 3 x 64 x 128 = 24,576; router 256;
    # embedding and LM head 128,000; norms 2 x 128 + 64 = 320
    shared = 2 * (12_288 + 256) + 128_000 + 320
    assert rf.weight_bytes == shared * 2 and rf.expert_bytes == 2 * 4 * 24_576 * 2 and rf.expert_miss == 0.5
    assert rf.flops_per_token == 2 * (shared + 2 * 2 * 24_576)  # FLOPs of the two experts a token runs
    # one token touches 2 of 4 experts a layer: half the expert bytes; four tokens 1 - 0.5^4 = 15/16 of them
    assert rf.weights_read(1) == shared * 2 + 0.5 * 393_216
    assert rf.weights_read(4) == shared * 2 + 15 / 16 * 393_216
    # a decode step of 4 sequences of 1,000 tokens: memory-bound, (weights read / 8e8 + 4,000 x 256 B / 4e8) + 1 ms
    step = (shared * 2 + 15 / 16 * 393_216) / 8e8 + 4_000 * 256 / 4e8 + 1e-3
    assert rf.step_time(4, 4_000, 4_000) == pytest.approx(step, rel=1e-12)
    assert rf.decode_run(4, 4_000).step_time(0) == pytest.approx(step, rel=1e-12)
    dense = Roofline.build(models()["Llama-3.1-8B"], gpu, tp=1, engine=engine)
    assert dense.expert_bytes == 0 and dense.weights_read(1) == dense.weights_read(512) == dense.weight_bytes


def test_a_simulated_moe_fleet_steps_on_active_parameters_and_sizes_its_kv_on_all():
    dep = dict(BASE_DEPLOYMENT, model="Qwen/Qwen3-30B-A3B", gpu="H100", engine=dict(BASE_DEPLOYMENT["engine"],
                                                                                  max_model_len=8192))
    cfg = make_fleet([dep])
    m = models()["Qwen3-30B-A3B"]
    assert cfg.deployments[0].budget.weights / GIB == pytest.approx(56.88, abs=0.01)  # every expert resident
    rf = Fleet(cfg).by_name["chat"].roofline
    assert rf.flops_per_token == 2.0 * m.active_parameters  # 3.35e9 of 30.5e9
    # batch 1 reads 8 of 128 experts a layer; 64 sequences touch 1 - (1 - 8/128)^64 = 98.4% of them
    assert rf.weights_read(1) == pytest.approx((m.active_parameters) * 2, rel=1e-9)
    assert rf.weights_read(64) / (m.parameters * 2) == pytest.approx(1 - (1 - 8 / 128) ** 64, abs=0.002)
    assert rf.step_time(1, 1000, 1000) < rf.step_time(64, 64_000, 64_000) / 4


def test_the_moe_fixture_covers_the_three_names_and_holds_some_out():
    setups = [r.setup for r in rows(MOE_STARTUP)]
    assert {"Mixtral-8x7B", "Qwen3-30B-A3B", "DeepSeek-V2-Lite", "gpt-oss-20b"} <= {s["model"] for s in setups}
    assert sum(s["role"] == "held-out" for s in setups) >= 6
    doc = yaml.safe_load(MOE_STARTUP.read_text())
    assert all(s["source"] in doc["sources"] for s in setups)


@pytest.mark.parametrize("row", rows(MOE_STARTUP), ids=lambda r: r.setup["id"])
def test_moe_kv_tokens_within_five_percent_of_vllm(row):
    theirs, ours = row.tokens
    assert abs(row.error) <= GOAL, f"{row.setup['id']}: vLLM {theirs:,} KV tokens, the budget {ours:,} ({row.error:+.1%})"


@pytest.mark.parametrize("row", rows(MOE_STARTUP), ids=lambda r: r.setup["id"])
def test_moe_weights_match_model_loading_took(row):
    bound = row.setup.get("weights_tolerance", 0.01)
    assert row.ours.weights / GIB == pytest.approx(row.published["weights_gib"], rel=bound)


def test_docs_carry_the_current_moe_table():
    assert docs_table(BEGIN, END) == render_table(rows(MOE_STARTUP)), (
        "docs/capacity.md is stale: python -m tests.simulator.test_memory_moe")


@cache
def latency_runs() -> tuple[Run, ...]:
    """The simulated batch beside each held-out MoE latency row."""
    return tuple(simulate_row(row) for row in yaml.safe_load(MOE_LATENCY.read_text())["benchmarks"])


def render_latency_table() -> str:
    lines = ["| set-up | batch | vLLM latency ms | simulated ms | output tok/s (theirs / ours) | error |",
             "|---|---|---|---|---|---|"]
    for r in latency_runs():
        row = r.row
        lines.append(f"| {row['model']} TP{row['tp']} {row['gpu']} | {row['batch']} | {row['mean_latency_ms']:,.0f} | "
                     f"{r.latency_s * 1000:,.0f} | {r.throughput(r.published_s):,.0f} / {r.throughput(r.latency_s):,.0f} | "
                     f"{r.error:+.1%} |")
    return "\n".join(lines)


@pytest.mark.parametrize("run", latency_runs(), ids=lambda r: r.row["id"])
def test_held_out_moe_latency_within_its_bound(run):
    bound = run.row.get("tolerance", LATENCY_GOAL)
    assert abs(run.error) <= bound, f"{run.row['id']}: {run.error:+.1%} against vLLM (bound {bound:.0%})"


def test_docs_carry_the_current_moe_latency_table():
    assert docs_table(LATENCY_BEGIN, LATENCY_END) == render_latency_table(), (
        "docs/capacity.md is stale: python -m tests.simulator.test_memory_moe")


if __name__ == "__main__":
    print(render_table(rows(MOE_STARTUP)))
    print()
    print(render_latency_table())
