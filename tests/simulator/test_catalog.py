import pytest

from goodput.foundation.errors import ConfigError
from simulator.catalog import GIB, GpuSpec, gpus, kv_bytes_per_token, memory_budget, models
from tests.conftest import BASE_DEPLOYMENT, make_fleet


def test_catalog_has_the_required_models_and_gpus():
    assert {"Llama-3.1-8B", "Llama-3.1-70B", "Qwen2.5-32B"} <= set(models())
    assert {"A100-80GB", "H100-80GB-SXM", "H200-141GB", "L40S-48GB"} <= set(gpus())
    m = models()["Llama-3.1-70B"]
    assert (m.layers, m.hidden_size, m.attention_heads, m.kv_heads, m.head_dim) == (80, 8192, 64, 8, 128)


@pytest.mark.parametrize(
    ("model", "tp", "dtype", "expected"),
    [
        ("Llama-3.1-8B", 1, "fp16", 131_072),  # 2 x 32 x 8 x 128 x 2
        ("Llama-3.1-70B", 1, "fp16", 327_680),  # 2 x 80 x 8 x 128 x 2
        ("Llama-3.1-70B", 4, "fp16", 81_920),  # kv heads split 8 / 4
        ("Llama-3.1-70B", 8, "fp8", 20_480),  # one KV head per GPU, 1 byte
        ("Qwen2.5-7B", 8, "fp16", 14_336),  # ceil(4 / 8) = 1 head: 2 x 28 x 1 x 128 x 2
        ("Qwen2.5-32B", 2, "fp16", 131_072),  # 2 x 64 x 4 x 128 x 2
    ],
)
def test_kv_bytes_per_token(model, tp, dtype, expected):
    assert kv_bytes_per_token(models()[model], tp, dtype) == expected


def test_memory_budget_matches_vllm_measurement():
    # llm-d planner's empirical table: H100 79.18 GiB x 0.9 - 14.99 (weights) - 4.76 (activation)
    # - 0.13 (non-torch) = 51.38 GiB of KV for Llama-3.1-8B.
    h100 = GpuSpec("H100", int(79.18 * GIB), 3.35e12, 989e12, 1979e12)
    b = memory_budget(models()["Llama-3.1-8B"], h100, tp=1, weight_dtype="bf16", kv_dtype="fp16",
                      gpu_memory_utilization=0.9, activation_reserve_bytes=(4.76 + 0.13) * GIB)
    assert b.kv / GIB == pytest.approx(51.38, rel=0.002)
    assert b.num_blocks == int(b.kv // (131_072 * 16))


def test_model_that_does_not_fit_names_the_memory_terms():
    dep = dict(BASE_DEPLOYMENT, model="Llama-3.1-70B", gpu="L40S-48GB", tp=1)
    with pytest.raises(ConfigError) as e:
        make_fleet(deployments=[dep])
    msg = str(e.value)
    assert msg.startswith("test-fleet.yaml: deployments[0].model: Llama-3.1-70B (bf16) does not fit 1x L40S-48GB")
    for term in ("weights", "reserve", "KV"):
        assert term in msg


def test_fp8_70b_fits_two_h100():
    dep = dict(BASE_DEPLOYMENT, model="Llama-3.1-70B", tp=2, engine={"weight_dtype": "fp8", "kv_dtype": "fp8"})
    fleet = make_fleet(deployments=[dep])
    budget = fleet.deployments[0].budget
    assert budget.weights == pytest.approx(70.6e9 / 2)
    assert budget.num_blocks > 10_000
