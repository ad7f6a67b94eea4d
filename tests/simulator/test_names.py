"""Model and GPU names as users type them, and Hugging Face config.json files, through the one resolver."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from goodput.foundation.errors import ConfigError
from goodput.simulator.catalog import (
    load_model_config,
    model_from_config,
    model_key,
    models,
    resolve_gpu,
    resolve_model,
)
from goodput.simulator.config import parse_fleet
from goodput.simulator.fleet import Fleet
from tests.conftest import BASE_DEPLOYMENT, fleet_data

CONFIGS = Path(__file__).resolve().parent.parent / "fixtures" / "model_configs"


@pytest.mark.parametrize(("typed", "name"), [
    ("Qwen/Qwen2.5-7B-Instruct", "Qwen2.5-7B"),
    ("meta-llama/Meta-Llama-3.1-70B-Instruct", "Llama-3.1-70B"),
    ("meta-llama/Llama-2-7b-chat-hf", "Llama-2-7B"),
    ("codellama/CodeLlama-13b-Instruct-hf", "CodeLlama-13B"),
    ("meta-llama/Meta-Llama-3-8B-Instruct", "Llama-3-8B"),
    ("google/gemma-2-9b-it", "Gemma-2-9B"),
    ("mistralai/Mistral-7B-Instruct-v0.3", "Mistral-7B"),
    ("QWEN2-72B-INSTRUCT", "Qwen2-72B"),
])
def test_hugging_face_ids_and_tune_suffixes_resolve_with_a_note(typed, name):
    m = resolve_model(typed, "f.yaml", "model")
    assert m.name == name
    assert typed in m.note and name in m.note


def test_the_catalogs_own_spelling_needs_no_note_and_names_stay_distinct():
    assert resolve_model("Qwen2.5-7B", "f", "k").note is None
    keys = [model_key(n) for n, spec in models().items() if spec.name == n]
    assert len(keys) == len(set(keys))  # no two catalog models read as the same typed name


def test_an_unknown_model_lists_the_known_and_says_model_config():
    with pytest.raises(ConfigError) as e:
        resolve_model("acme/Frontier-9000-Instruct", "fleet.yaml", "deployments[0].model")
    assert str(e.value).startswith("fleet.yaml: deployments[0].model: unknown model 'acme/Frontier-9000-Instruct'")
    assert "Llama-2-7B" in str(e.value) and "model_config" in str(e.value)


@pytest.mark.parametrize(("typed", "name"), [
    ("H100", "H100-80GB-SXM"), ("h100", "H100-80GB-SXM"), ("NVIDIA H100 80GB HBM3", "H100-80GB-SXM"),
    ("H100 PCIe", "H100-80GB-PCIe"), ("NVIDIA A100-SXM4-80GB", "A100-80GB"), ("L4", "L4-24GB"),
    ("l40s", "L40S-48GB"), ("H200", "H200-141GB"), ("NVIDIA GeForce RTX 4090", "RTX-4090-24GB"),
])
def test_gpu_aliases_resolve_with_a_note(typed, name):
    m = resolve_gpu(typed, "f", "gpu")
    assert m.name == name and name in m.note
    assert resolve_gpu(name, "f", "gpu").note is None


def test_an_ambiguous_gpu_lists_the_choices():
    with pytest.raises(ConfigError, match=r"GPU 'A100' is ambiguous: one of A100-40GB, A100-80GB$"):
        resolve_gpu("A100", "f", "gpu")
    with pytest.raises(ConfigError, match="unknown GPU 'B200'; known: A100-40GB"):
        resolve_gpu("B200", "f", "gpu")


@pytest.mark.parametrize(("file", "catalog"), [("qwen2.5-7b-instruct.json", "Qwen2.5-7B"),
                                               ("codellama-7b-hf.json", "CodeLlama-7B")])
def test_a_hugging_face_config_reads_as_the_catalogs_entry(file, catalog):
    spec = load_model_config(CONFIGS / file, None, "--model-config", "")
    want = models()[catalog]
    drop = {"name", "source"}
    assert {k: v for k, v in dataclasses.asdict(spec).items() if k not in drop} == \
           {k: v for k, v in dataclasses.asdict(want).items() if k not in drop}
    assert spec.parameters == want.parameters


def test_config_defaults_and_refusals():
    base = json.loads((CONFIGS / "codellama-7b-hf.json").read_text())
    gqa = {k: v for k, v in base.items() if k != "num_key_value_heads"} | {"head_dim": None}
    spec = model_from_config(gqa, "m", "c.json")
    assert (spec.kv_heads, spec.head_dim, spec.attention_bias) == (32, 128, False)
    assert model_from_config(base | {"sliding_window": 4096}, "m", "c").sliding_window == 4096
    assert model_from_config(base | {"sliding_window": 4096, "use_sliding_window": False}, "m", "c").sliding_window is None
    for bad, says in [({"num_hidden_layers": "32"}, "num_hidden_layers: must be a positive integer"),
                      ({"torch_dtype": "int3"}, "torch_dtype: must be one of"),
                      ({"layer_types": ["linear_attention", "full_attention"]}, "layer_types: linear_attention layers"),
                      ({"num_local_experts": 8, "num_experts_per_tok": 9}, "num_local_experts: 8 experts, 9 per token"),
                      ({"hidden_size": 4095}, "head_dim: is required")]:
        with pytest.raises(ConfigError, match=says):
            model_from_config(base | bad, "m", "c.json")
    with pytest.raises(ConfigError, match="vocab_size: is required"):
        model_from_config({k: v for k, v in base.items() if k != "vocab_size"}, "m", "c.json")


def test_unreadable_config_files_are_one_line(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        load_model_config(tmp_path / "nope.json", None, "--model-config", "")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ConfigError, match="bad.json: not JSON"):
        load_model_config(tmp_path / "bad.json", None, "--model-config", "")


def test_a_fleet_file_takes_typed_names_and_a_model_config(tmp_path):
    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "config.json").write_text((CONFIGS / "codellama-7b-hf.json").read_text())
    typed = dict(BASE_DEPLOYMENT, name="typed", model="meta-llama/Llama-3.1-8B-Instruct", gpu="H100")
    own = dict(BASE_DEPLOYMENT, name="own", model="my-coder", model_config="cfg/config.json", gpu="h100 pcie",
               engine=dict(BASE_DEPLOYMENT["engine"], max_model_len=16384))
    data = fleet_data([typed, own])
    for w in data["workloads"]:
        w["deployment"] = "typed"
    cfg = parse_fleet(data, str(tmp_path / "fleet.yaml"))
    a, b = cfg.deployments
    assert (a.model, a.gpu, a.model_config) == ("Llama-3.1-8B", "H100-80GB-SXM", None)
    assert (b.model, b.gpu) == ("my-coder", "H100-80GB-PCIe")
    assert b.spec.vocab_size == 32016 and b.spec == b.model_config
    assert b.budget.kv_bytes_per_token == 2 * 32 * 32 * 128 * 2  # no GQA: 32 KV heads
    fleet = Fleet(cfg)  # the simulated replicas run the config's architecture
    assert fleet.by_name["own"].roofline.flops_per_token == 2.0 * models()["CodeLlama-7B"].parameters
    with pytest.raises(ConfigError, match=r"deployments\[1\]\.model_config: cannot read"):
        parse_fleet(fleet_data([typed, dict(own, model_config="missing.json")]), str(tmp_path / "fleet.yaml"))
