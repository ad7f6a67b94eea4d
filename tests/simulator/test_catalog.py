import pytest

from goodput.foundation.errors import ConfigError
from goodput.simulator.catalog import GIB, gpus, kv_bytes_per_token, models
from tests.conftest import BASE_DEPLOYMENT, make_fleet


def test_catalog_has_the_required_models_and_gpus():
    assert {"Llama-3.1-8B", "Llama-3.1-70B", "Qwen2.5-32B"} <= set(models())
    assert {"A100-80GB", "A100-40GB", "H100-80GB-SXM", "H100-80GB-PCIe", "H200-141GB", "L40S-48GB", "L4-24GB",
            "A10G-24GB", "RTX-4090-24GB"} <= set(gpus())
    assert {"Llama-3.3-70B", "Qwen2.5-72B", "Qwen3-0.6B", "Mistral-Small-24B", "Gemma-2-27B",
            "DeepSeek-R1-Distill-Llama-70B"} <= set(models())
    assert all(m.source.startswith("https://huggingface.co/") for m in models().values())
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
    assert budget.weights / GIB == pytest.approx(33.88, rel=0.005)  # vLLM: "Model loading took 33.88 GiB"
    assert budget.num_blocks > 10_000
