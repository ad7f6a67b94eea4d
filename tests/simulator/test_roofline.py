"""The roofline's TP all-reduce term: its bytes per token, its place in a step, and the closed-form decode run
staying exact with it; and a decode step and a prefill chunk of a toy model against the roofline worked by hand."""

import pytest

from goodput.simulator.catalog import GpuSpec, ModelSpec, gpus, models
from goodput.simulator.config import EngineConfig
from goodput.simulator.roofline import Roofline, allreduce_s_per_token

QWEN7B = models()["Qwen2.5-7B"]  # 28 layers, hidden 3584


def test_allreduce_bytes_per_token_are_two_all_reduces_of_the_hidden_state_per_layer():
    # 2 all-reduces x 28 layers x 3584 x 2 bytes, a 2-GPU ring moving 2 (2 - 1) / 2 of it: 401,408 bytes
    assert allreduce_s_per_token(QWEN7B, 2, 4.6) == pytest.approx(401_408 / 4.6e9, rel=1e-12)
    # four GPUs move 2 (4 - 1) / 4 = 1.5x as much
    assert allreduce_s_per_token(QWEN7B, 4, 4.6) == pytest.approx(1.5 * 401_408 / 4.6e9, rel=1e-12)
    assert allreduce_s_per_token(QWEN7B, 1, 4.6) == 0.0  # nothing to reduce
    assert allreduce_s_per_token(QWEN7B, 2, 0.0) == 0.0  # the default: NVLink / custom all-reduce


def _roofline(gbps: float, tp: int = 2) -> Roofline:
    return Roofline.build(QWEN7B, gpus()["A100-80GB"], tp=tp, engine=EngineConfig(tp_allreduce_gbps=gbps))


def test_a_step_pays_the_all_reduce_per_token_on_top_of_compute_and_memory():
    with_ar, without = _roofline(4.6), _roofline(0.0)
    per_token = allreduce_s_per_token(QWEN7B, 2, 4.6)
    for tokens, ctx in ((1, 1024), (100, 1500), (2048, 512)):
        extra = with_ar.step_time(tokens, tokens * ctx, tokens * ctx) - without.step_time(tokens, tokens * ctx,
                                                                                         tokens * ctx)
        assert extra == pytest.approx(tokens * per_token, rel=1e-9)
    assert _roofline(4.6, tp=1).step_time(100, 1e5, 1e5) == _roofline(0.0, tp=1).step_time(100, 1e5, 1e5)


def test_a_decode_run_with_the_all_reduce_sums_its_steps_exactly():
    rf = _roofline(4.6)
    n, s0 = 64, 64 * 1200.0
    run = rf.decode_run(n, s0)
    steps = [rf.step_time(n, s0 + n * k, s0 + n * k) for k in range(300)]
    assert run.step_time(0) == pytest.approx(steps[0], rel=1e-12)
    assert run.time(300) == pytest.approx(sum(steps), rel=1e-9)


# a toy model and GPU with round numbers, so each term of a step is worked out by hand
TOY = ModelSpec("toy", layers=2, hidden_size=64, attention_heads=4, kv_heads=2, head_dim=16, intermediate_size=128,
                vocab_size=1000, tie_word_embeddings=False, max_position_embeddings=4096, torch_dtype="bfloat16")
# parameters: embedding and LM head 2 x 1000 x 64 = 128,000; per layer q, k, v 64 x (4 x 16 + 2 x 2 x 16) = 8,192,
# o 64 x 64 = 4,096, gated MLP 3 x 64 x 128 = 24,576: 36,864 x 2 layers = 73,728; norms 2 x (2 x 64) + 64 = 320
TOY_PARAMETERS = 202_048
# 1 GB/s of HBM and 1 TFLOP/s bf16 (fp8 unused): slow enough that every term is in milliseconds
TOY_GPU = GpuSpec("toy", memory_bytes=80 * 2**30, hbm_bandwidth_bytes_per_s=1e9, bf16_flops=1e12, fp8_flops=2e12)
# 50 % of peak FLOPs, 80 % of the bandwidth for the weights, 40 % for the attention's KV reads, 1 ms a step; TP 1:
# no per-layer TP term, no all-reduce
TOY_ENGINE = EngineConfig(compute_efficiency=0.5, memory_efficiency=0.8, attention_memory_efficiency=0.4,
                          step_overhead_ms=1.0, weight_dtype="bf16", kv_dtype="fp16")


def test_a_decode_step_and_a_prefill_chunk_against_the_roofline_worked_by_hand():
    assert TOY.parameters == TOY_PARAMETERS
    rf = Roofline.build(TOY, TOY_GPU, tp=1, engine=TOY_ENGINE)
    # FLOPs: 2 per parameter per token (a multiply-add), and per (query token x context token) pair 2 x 2 x 64 per
    # layer (QK^T and AV over 4 heads x 16 dims): 4 x 2 layers x 64 = 512. Compute runs at 1e12 x 0.5 = 5e11 FLOP/s.
    # Bytes: the weights once a step, 202,048 x 2 (bf16) = 404,096 B at 1e9 x 0.8 = 8e8 B/s: 0.50512 ms; the KV of
    # each context token 2 (K, V) x 2 layers x 2 KV heads x 16 dims x 2 (fp16) = 256 B, at 1e9 x 0.4 = 4e8 B/s.
    #
    # A decode step of 4 sequences of 1,000 tokens of context: 4 tokens, 4,000 pairs, 4,000 KV tokens read.
    #   compute: (2 x 202,048 x 4 + 512 x 4,000) = 3,664,384 FLOP / 5e11 = 0.007328768 ms
    #   memory:  0.50512 ms + 4,000 x 256 B / 4e8 = 2.56 ms -> 3.06512 ms (memory-bound: the KV read dominates)
    #   step:    3.06512 + 1 ms overhead = 4.06512 ms
    assert rf.step_time(4, 4_000, 4_000) == pytest.approx(4.06512e-3, rel=1e-12)
    # The first chunk of 2,048 prompt tokens: token i attends to i + 1 tokens, 2,048 x 2,049 / 2 = 2,098,176 pairs;
    # 2,048 KV tokens written.
    #   compute: (2 x 202,048 x 2,048 + 512 x 2,098,176) = 827,588,608 + 1,074,266,112 = 1,901,854,720 FLOP / 5e11
    #            = 3.80370944 ms
    #   memory:  0.50512 ms + 2,048 x 256 B / 4e8 = 1.31072 ms -> 1.81584 ms (compute-bound)
    #   step:    3.80370944 + 1 = 4.80370944 ms
    assert rf.step_time(2_048, 2_048 * 2_049 / 2, 2_048) == pytest.approx(4.80370944e-3, rel=1e-12)
