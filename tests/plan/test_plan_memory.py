"""``goodput plan memory`` as a user runs it: vLLM's start-up terms on stdout, one line and exit 2 on bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from goodput.cli import main
from goodput.simulator.catalog import gpus, models


def plan(capsys, *argv: str) -> tuple[int, str, str]:
    """Exit code, stdout, stderr; argparse's own errors exit from the parser, the budget's come back as 2."""
    try:
        rc = main(["plan", "memory", *argv])
    except SystemExit as e:
        rc = e.code
    out, err = capsys.readouterr()
    return rc, out, err


def test_the_table_speaks_vllms_start_up_log(capsys):
    rc, out, err = plan(capsys, "--model", "Llama-3.1-8B", "--gpu", "H100-80GB-SXM", "--max-model-len", "16000",
                        "--engine-version", "0.11")
    assert rc == 0, err
    assert '"Model loading took 14.99 GiB"' in out
    assert "Available KV cache memory: 51.38 GiB" in out  # llm-d's H100 log: 51.38 GiB
    assert "GPU KV cache size: 420,928 tokens" in out
    assert "Maximum concurrency for 16,000 tokens per request: 26.31x" in out
    for term in ("model weights", "activation peak", "non-torch memory", "CUDA graph reserve"):
        assert term in out


def test_json_carries_every_term(capsys):
    rc, out, _ = plan(capsys, "--model", "Llama-3.3-70B", "--gpu", "H100-80GB-SXM", "--tp", "2", "--quantization",
                      "fp8", "--kv-cache-dtype", "fp8", "--max-model-len", "16000", "--format", "json")
    assert rc == 0
    doc = json.loads(out)
    gib = doc["gib_per_gpu"]
    assert gib["weights"] == pytest.approx(33.87, abs=0.02)
    assert gib["requested"] == pytest.approx(
        gib["weights"] + gib["activation_peak"] + gib["non_torch"] + gib["cudagraph_reserve"] + gib["available_kv_cache"],
        abs=0.03)
    assert doc["kv_bytes_per_token"] == 80 * 2 * 4 * 128  # fp8: one byte, 4 of 8 KV heads per GPU
    assert doc["gpu_kv_cache_tokens"] == doc["num_gpu_blocks"] * 16
    assert doc["maximum_concurrency"] == pytest.approx(doc["num_gpu_blocks"] / 1000, abs=0.01)


def test_a_model_that_does_not_fit_names_the_term_in_one_line(capsys):
    rc, out, err = plan(capsys, "--model", "Llama-3.1-70B", "--gpu", "L4-24GB")
    assert rc == 2 and out == ""
    assert err.count("\n") == 1
    assert err.startswith("goodput: error: Llama-3.1-70B does not fit 1x L4-24GB: weights: model weights 131.")


def test_too_long_a_context_names_max_model_len(capsys):
    rc, _, err = plan(capsys, "--model", "Llama-3.1-8B", "--gpu", "L4-24GB")
    assert rc == 2
    assert ": max_model_len: KV cache holds 31808 tokens, less than max_model_len 131072: one request needs 16.00 GiB" in err


@pytest.mark.parametrize(("flag", "known"), [("--model", lambda: models()), ("--gpu", lambda: gpus())])
def test_an_unknown_name_lists_the_known_ones(capsys, flag, known):
    argv = {"--model": "Llama-3.1-8B", "--gpu": "H100-80GB-SXM"}
    argv[flag] = "GPT-5"
    rc, _, err = plan(capsys, *[x for kv in argv.items() for x in kv])
    assert rc == 2 and err.count("\n") == 1
    assert f"{flag}: unknown" in err
    assert all(name in err for name in known())


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [(["--tp", "3"], "tp: Llama-3.1-8B has 32 attention heads"),
     (["--engine-version", "0.6.3"], "engine_version: vLLM 0.6.3 runs the V0 engine"),
     (["--gpu-memory-utilization", "1.5"], "must be in (0, 1]")],
)
def test_bad_knobs_are_one_line(capsys, argv, fragment):
    rc, _, err = plan(capsys, "--model", "Llama-3.1-8B", "--gpu", "H100-80GB-SXM", *argv)
    assert rc == 2
    assert fragment in err and err.count("\n") == 1


def test_the_sampler_vllm_logs_sets_the_activation_peak(capsys):
    """dennislee22's vLLM 0.10.1.1 A100 log ran FlashInfer's sampler and sized 93,872 KV tokens; PyTorch's sort-based
    sampler, the 0.10 default where flashinfer is not installed, profiles three times the memory."""
    argv = ("--model", "Qwen2.5-7B", "--gpu", "A100-80GB", "--gpu-memory-utilization", "0.25", "--max-model-len",
            "16384", "--engine-version", "0.10.1.1", "--format", "json")
    docs = {}
    for sampler in ("flashinfer", "pytorch"):
        rc, out, err = plan(capsys, *argv, "--sampler", sampler)
        assert rc == 0, err
        docs[sampler] = json.loads(out)
        assert docs[sampler]["sampler"] == sampler
    assert docs["flashinfer"]["gpu_kv_cache_tokens"] == pytest.approx(93_872, rel=0.005)
    assert docs["pytorch"]["gib_per_gpu"]["activation_peak"] > 2.5 * docs["flashinfer"]["gib_per_gpu"]["activation_peak"]
    rc, out, _ = plan(capsys, *argv[:-2])
    assert "sampler: pytorch (vLLM's log: Falling back to the PyTorch-native implementation" in out


def test_an_unknown_sampler_is_refused_with_the_known_ones(capsys):
    rc, out, err = plan(capsys, "--model", "Qwen2.5-7B", "--gpu", "A100-80GB", "--sampler", "sort")
    assert rc == 2 and out == ""
    assert "--sampler: invalid choice: 'sort' (choose from 'pytorch', 'flashinfer', 'triton')" in err


CONFIGS = Path(__file__).resolve().parent.parent / "fixtures" / "model_configs"


def test_names_as_users_type_them_plan_the_same_budget_with_notes(capsys):
    rc, out, err = plan(capsys, "--model", "Qwen/Qwen2.5-7B-Instruct", "--gpu", "H100", "--format", "json")
    assert rc == 0, err
    typed = json.loads(out)
    rc, out, _ = plan(capsys, "--model", "Qwen2.5-7B", "--gpu", "H100-80GB-SXM", "--format", "json")
    exact = json.loads(out)
    assert exact["notes"] == [] and len(typed["notes"]) == 2
    assert "Qwen2.5-7B" in typed["notes"][0] and "H100-80GB-SXM" in typed["notes"][1]
    assert {k: v for k, v in typed.items() if k != "notes"} == {k: v for k, v in exact.items() if k != "notes"}
    rc, out, _ = plan(capsys, "--model", "qwen/qwen2.5-7b-instruct", "--gpu", "h100")
    assert rc == 0 and out.startswith("note: qwen/qwen2.5-7b-instruct is catalog model Qwen2.5-7B")


def test_an_ambiguous_gpu_exits_2_with_the_choices(capsys):
    rc, _, err = plan(capsys, "--model", "Llama-3.1-8B", "--gpu", "A100")
    assert rc == 2 and err.count("\n") == 1
    assert "--gpu: GPU 'A100' is ambiguous: one of A100-40GB, A100-80GB" in err


def test_a_model_config_plans_any_model(capsys, tmp_path):
    rc, out, err = plan(capsys, "--model-config", str(CONFIGS / "codellama-7b-hf.json"), "--gpu", "A100-80GB",
                        "--format", "json")
    assert rc == 0, err
    own = json.loads(out)
    rc, out, _ = plan(capsys, "--model", "CodeLlama-7B", "--gpu", "A100-80GB", "--format", "json")
    catalog = json.loads(out)
    assert own["gpu_kv_cache_tokens"] == catalog["gpu_kv_cache_tokens"] and own["kv_bytes_per_token"] == 524288
    assert own["model"] == "model_configs" and "codellama-7b-hf.json" in own["notes"][0]  # no _name_or_path
    windowed = json.loads((CONFIGS / "codellama-7b-hf.json").read_text()) | {"sliding_window": 4096}
    (tmp_path / "config.json").write_text(json.dumps(windowed))
    rc, out, _ = plan(capsys, "--model", "my-coder", "--model-config", str(tmp_path / "config.json"), "--gpu", "A100-80GB")
    assert rc == 0 and out.startswith("note: model my-coder from ") and "sliding_window 4096 not modelled" in out
    (tmp_path / "hybrid.json").write_text(json.dumps(windowed | {"layer_types": ["linear_attention"] * 32}))
    rc, _, err = plan(capsys, "--model-config", str(tmp_path / "hybrid.json"), "--gpu", "A100-80GB")
    assert rc == 2 and err.count("\n") == 1 and "layer_types: linear_attention layers are not modelled" in err
    rc, _, err = plan(capsys, "--gpu", "A100-80GB")
    assert rc == 2 and "--model: is required (or --model-config" in err
