"""``goodput plan memory`` for mixtures of experts as users type them: by catalog name or Hugging Face id, and from
their config.json; the figures vLLM logs for the same set-ups are in tests/simulator/test_memory_moe.py."""

from __future__ import annotations

import json

import pytest

from tests.conftest import REPO
from tests.plan.test_plan_memory import plan

CONFIGS = REPO / "goodput" / "simulator" / "data" / "model_configs"


@pytest.mark.parametrize(("name", "config", "tp", "gpu"), [
    ("mistralai/Mixtral-8x7B-Instruct-v0.1", "mixtral-8x7b-instruct-v0.1.json", "2", "H100"),
    ("Qwen/Qwen3-30B-A3B", "qwen3-30b-a3b.json", "1", "H100"),
    ("deepseek-ai/DeepSeek-V3", "deepseek-v3.json", "8", "H200"),
])
def test_the_moe_names_plan_by_name_and_from_their_config(capsys, name, config, tp, gpu):
    args = ("--gpu", gpu, "--tp", tp, "--max-model-len", "8192", "--engine-version", "0.19.0", "--format", "json")
    rc, out, err = plan(capsys, "--model", name, *args)
    assert rc == 0, err
    by_name = json.loads(out)
    rc, out, err = plan(capsys, "--model-config", str(CONFIGS / config), *args)
    assert rc == 0, err
    by_config = json.loads(out)
    assert by_config["gpu_kv_cache_tokens"] == by_name["gpu_kv_cache_tokens"] > 0
    assert by_config["gib_per_gpu"] == by_name["gib_per_gpu"] and by_name["expert_dtype"] is not None


def test_the_table_says_how_the_experts_sit(capsys):
    rc, out, _ = plan(capsys, "--model", "Mixtral-8x7B", "--gpu", "H100", "--tp", "2", "--engine-version", "0.19.0",
                      "--max-model-len", "8192", "--gpu-memory-utilization", "0.95")
    assert rc == 0 and "bf16 experts: all 8 experts, each 1/2 of its width" in out
    assert '"Model loading took 43.50 GiB"' in out and "of which fused-MoE workspace" in out  # vLLM: 43.51 GiB
    assert "GPU KV cache size: 466,288 tokens" in out  # vLLM 0.19.0 logged 465,936
    rc, out, _ = plan(capsys, "--model", "DeepSeek-R1", "--gpu", "H200", "--data-parallel-size", "8",
                      "--enable-expert-parallel", "--max-model-len", "32768")
    assert rc == 0 and "fp8 experts: 32 whole experts per GPU (expert parallel)" in out
    assert "1x H200-141GB (x8 data parallel)" in out and "70,272 bytes per token" in out


def test_what_cannot_be_modelled_is_one_line_and_exit_2(capsys, tmp_path):
    rc, _, err = plan(capsys, "--model", "Llama-3.1-8B", "--gpu", "H100", "--enable-expert-parallel")
    assert rc == 2 and err.count("\n") == 1 and "expert_parallel: Llama-3.1-8B is a dense model" in err
    sparse = json.loads((CONFIGS / "deepseek-v3.json").read_text()) | {"index_topk": 2048}
    (tmp_path / "config.json").write_text(json.dumps(sparse))
    rc, _, err = plan(capsys, "--model-config", str(tmp_path / "config.json"), "--gpu", "H200", "--tp", "8")
    assert rc == 2 and err.count("\n") == 1 and "index_topk: DeepSeek sparse attention" in err
    rc, _, err = plan(capsys, "--model", "Mixtral-8x7B", "--gpu", "H100")
    assert rc == 2 and err.count("\n") == 1 and "weights" in err  # 87 GiB of experts on one H100
