"""The memory budget's terms, each against what vLLM does (goodput/simulator/memory.py), and the simulator sizing its
replicas with it."""

from __future__ import annotations

import pytest

from goodput.foundation.errors import ConfigError
from goodput.simulator.catalog import GIB, gpus, models
from goodput.simulator.memory import MemorySetup, default_scheduler_limits, memory_budget
from tests.conftest import BASE_DEPLOYMENT, make_fleet

H100, A100, L4 = "H100-80GB-SXM", "A100-80GB", "L4-24GB"


def budget(model="Llama-3.1-8B", gpu=H100, **kw):
    return memory_budget(models()[model], gpus()[gpu], MemorySetup(**kw))


def test_parameter_counts_follow_from_the_architecture():
    # model cards: 8.03B, 70.6B, 32.8B, 0.6B
    assert models()["Llama-3.1-8B"].parameters == pytest.approx(8.03e9, rel=0.002)
    assert models()["Llama-3.1-70B"].parameters == pytest.approx(70.6e9, rel=0.002)
    assert models()["Qwen3-32B"].parameters == pytest.approx(32.8e9, rel=0.002)
    assert models()["Qwen3-0.6B"].parameters == pytest.approx(0.6e9, rel=0.01)


def test_weights_split_over_tp_but_embeddings_stay_native_under_fp8():
    one, two = budget(tp=1).weights, budget(tp=2).weights
    assert two == pytest.approx(one / 2, rel=0.01)
    fp8 = budget("Llama-3.1-70B", tp=2, weight_dtype="fp8").weights
    assert fp8 / GIB == pytest.approx(33.88, rel=0.005)  # RedHatAI FP8-dynamic: "Model loading took 33.88 GiB"
    assert budget("Llama-3.1-70B", tp=2, weight_dtype="int4").weights < fp8 * 0.6


def test_activation_does_not_shrink_with_tp_and_grows_with_the_vocabulary():
    a1 = budget("Qwen3-32B", tp=1, engine_version="0.11").activation
    assert budget("Qwen3-32B", tp=2, engine_version="0.11").activation == pytest.approx(a1, rel=0.01)
    small_vocab = budget("Mistral-7B", engine_version="0.11").activation
    assert small_vocab < budget("Llama-3.1-8B", engine_version="0.11").activation / 2


def test_vllm_defaults_depend_on_the_gpu():
    assert default_scheduler_limits(gpus()[H100]) == (8192, 1024)
    assert default_scheduler_limits(gpus()["H200-141GB"]) == (8192, 1024)
    assert default_scheduler_limits(gpus()[A100]) == (2048, 256)  # vLLM excludes A100s from the larger defaults
    assert default_scheduler_limits(gpus()[L4]) == (2048, 256)
    # fewer sampled requests: a smaller activation peak on an A100 than on an H100 for the same model
    assert budget(gpu=A100).activation < budget(gpu=H100).activation / 3


def test_non_torch_grows_with_tp_and_cuda_graphs_count_from_0_21():
    assert budget(tp=2).non_torch > budget(tp=1).non_torch + GIB
    assert budget(tp=4).non_torch >= budget(tp=2).non_torch
    assert budget(engine_version="0.20").cudagraph == 0
    assert budget(engine_version="0.21.1").cudagraph > 0


def test_fp8_kv_cache_doubles_the_tokens_of_the_same_pool():
    auto, fp8 = budget(engine_version="0.19"), budget(engine_version="0.19", kv_dtype="fp8")
    assert auto.kv == fp8.kv
    assert fp8.kv_tokens == pytest.approx(2 * auto.kv_tokens, abs=16)


def test_vllm_start_up_figures_follow_from_the_blocks():
    b = budget(max_model_len=16000, engine_version="0.11")
    assert b.num_blocks == int(b.kv // (131_072 * 16))
    assert b.kv_tokens == b.num_blocks * 16
    assert b.max_concurrency == pytest.approx(b.num_blocks / 1000)


@pytest.mark.parametrize(
    ("kw", "term"),
    [
        ({"model": "Llama-3.1-70B", "gpu": L4}, "weights"),
        ({"model": "Qwen3-32B", "gpu": H100, "gpu_memory_utilization": 0.8, "max_model_len": 4096}, "gpu_memory_utilization"),
        ({"model": "Llama-3.1-8B", "gpu": L4}, "max_model_len"),  # 131072 tokens do not fit in 4 GiB of KV
        ({"model": "Gemma-2-9B", "gpu": H100, "max_model_len": 32768}, "max_model_len"),  # beyond 8192 positions
    ],
)
def test_a_set_up_that_does_not_fit_names_the_term_that_breaks(kw, term):
    assert budget(**kw).problem()[0] == term


def test_a_fitting_set_up_has_no_problem():
    assert budget("Llama-3.1-8B", L4, max_model_len=16384).problem() is None


@pytest.mark.parametrize(
    ("kw", "key"),
    [({"model": "Qwen2.5-0.5B", "tp": 4}, "tp"), ({"engine_version": "0.7.3"}, "engine_version"),
     ({"engine_version": "latest"}, "engine_version"), ({"kv_dtype": "int4"}, "kv_dtype"),
     ({"sampler": "sort"}, "sampler")],
)
def test_knobs_vllm_refuses_raise_a_config_error(kw, key):
    with pytest.raises(ConfigError) as e:
        budget(**kw)
    assert e.value.key == key


def test_the_simulator_runs_what_vllm_runs_at_low_utilization():
    # 0.3 x 79.18 GiB - 15 GiB of weights: vLLM serves 32k contexts; the former fixed 5 GiB reserve left 3.8 GiB
    # of KV (30,800 tokens) and refused the fleet.
    dep = dict(BASE_DEPLOYMENT, model="Llama-3.1-8B", gpu=H100, tp=1,
               engine={"gpu_memory_utilization": 0.3, "max_model_len": 32768})
    b = make_fleet(deployments=[dep]).deployments[0].budget
    assert b.kv_tokens >= 32768
    assert b.reserve < 2 * GIB


def test_the_simulator_refuses_what_vllm_refuses_and_names_the_key():
    dep = dict(BASE_DEPLOYMENT, model="Llama-3.1-8B", gpu=L4, tp=1, engine={"max_model_len": 65536})
    with pytest.raises(ConfigError) as e:
        make_fleet(deployments=[dep])
    assert e.value.key == "deployments[0].engine.max_model_len"
    assert "needs 8.00 GiB of KV cache" in e.value.problem


def test_the_sampler_sets_the_activation_peak_and_the_version_picks_the_default():
    """PyTorch's top-k/top-p sorts the logits with int64 indices; FlashInfer's does not (docs/capacity.md)."""
    sort_based = budget("Qwen2.5-7B", A100, engine_version="0.10.1.1", sampler="pytorch")
    sort_free = budget("Qwen2.5-7B", A100, engine_version="0.10.1.1", sampler="flashinfer")
    assert sort_based.activation > 2.5 * sort_free.activation
    assert sort_free.kv_tokens > sort_based.kv_tokens
    assert budget(engine_version="0.11").sampler == "pytorch"
    assert budget(engine_version="0.19").sampler == "triton"
    assert budget(engine_version="0.20").sampler == budget().sampler == "flashinfer"


def test_a_fleet_file_names_the_engine_version_and_sampler_its_pool_follows():
    engine = {"gpu_memory_utilization": 0.25, "max_model_len": 16384, "max_num_batched_tokens": 2048,
              "engine_version": "0.10.1.1", "sampler": "flashinfer"}
    dep = dict(BASE_DEPLOYMENT, model="Qwen2.5-7B", gpu=A100, tp=1, engine=engine)
    b = make_fleet(deployments=[dep]).deployments[0].budget
    assert (b.engine_version, b.sampler) == ("0.10.1.1", "flashinfer")
    assert b.kv_tokens == pytest.approx(93_872, rel=0.005)  # what that vLLM logged (dennislee22)
    for key, value in (("engine_version", "0.7"), ("sampler", "sort")):
        with pytest.raises(ConfigError) as e:
            make_fleet(deployments=[dict(dep, engine=dict(engine, **{key: value}))])
        assert e.value.key == f"deployments[0].engine.{key}"
