"""The roofline's TP all-reduce term: its bytes per token, its place in a step, and the closed-form decode run
staying exact with it."""

import pytest

from goodput.simulator.catalog import gpus, models
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
