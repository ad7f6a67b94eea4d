"""How ``tests/fixtures/loadtest/``'s inference-perf and AIPerf files were made: the real tools against the live fleet.

Not in CI (``make test`` never runs it): neither tool is a dependency of goodput. Each needs a virtual environment of
its own (inference-perf 0.7.0 requires Python >= 3.12, AIPerf 0.13.0 runs on 3.11; ~1-2 GB together)::

    ~/.pyenv/versions/3.12.1/bin/python -m venv /tmp/ip && /tmp/ip/bin/pip install inference-perf==0.7.0
    ~/.pyenv/versions/3.11.7/bin/python -m venv /tmp/ap && /tmp/ap/bin/pip install aiperf==0.13.0
    python -m benchmarks.third_party_clients --inference-perf /tmp/ip/bin/inference-perf \\
        --aiperf /tmp/ap/bin/aiperf --work /tmp/clients [--copy]

The run: ``goodput fleet serve examples/fleet.yaml --traffic 0`` (no replayed traffic; the clients talk to its first
replica), a byte-level BPE tokenizer of 8,000 tokens trained on local text with ``tokenizers`` in the tools' own
Python (both clients want a Hugging Face tokenizer and would otherwise download the model's), given to the fleet too
as its first deployment's ``tokenizer`` (the served model's tokenizer, as a real server counts with the tokenizer its
clients are given; the fixtures were made before, when the fleet counted 157-208 for the clients' 256), then each client in
turn, never at once: Poisson 4 req/s for 30 s, 256 prompt tokens and 128 output tokens (``ignore_eos``), streaming
completions, the server's token counts asked for. ``--copy`` puts the small output files in
``tests/fixtures/loadtest/`` (the names ``tests/fixtures/SOURCES.md`` lists) and prints each tool's own medians
beside what ``goodput loadtest import`` makes of them.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx
import yaml

from benchmarks.fleet_server import REPO, free_port, stop

FIXTURES = REPO / "tests" / "fixtures" / "loadtest"
RATE, DURATION_S, PROMPT_TOKENS, OUTPUT_TOKENS = 4.0, 30, 256, 128
TTFT_SLO_S, TPOT_SLO_S = 0.5, 0.05
TOKENIZER = """
import glob, os, sys
from tokenizers import Tokenizer, models, pre_tokenizers, decoders, trainers
from transformers import PreTrainedTokenizerFast
files = [f for f in glob.glob("/usr/share/common-licenses/*") + glob.glob("/usr/lib/python3*/*.py") if os.path.isfile(f)][:400]
t = Tokenizer(models.BPE(unk_token=None))
t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False); t.decoder = decoders.ByteLevel()
t.train(files, trainers.BpeTrainer(vocab_size=8000, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                   special_tokens=["<|eos|>"]))
PreTrainedTokenizerFast(tokenizer_object=t, eos_token="<|eos|>").save_pretrained(sys.argv[1])
"""
# the files each tool writes that the fixtures keep (the rest, e.g. AIPerf's inputs.json of prompts, are large)
INFERENCE_PERF_FILES = ("summary_lifecycle_metrics.json", "stage_0_lifecycle_metrics.json",
                        "per_request_lifecycle_metrics.json", "config.yaml")
AIPERF_FILES = ("profile_export.jsonl", "profile_export_aiperf.json", "profile_export_aiperf.csv")


def fleet_file(tokenizer: Path, out: Path) -> Path:
    """examples/fleet.yaml with its first deployment (the replica the clients talk to) counting by ``tokenizer``."""
    doc = yaml.safe_load((REPO / "examples" / "fleet.yaml").read_text())
    doc["deployments"][0]["tokenizer"] = str(tokenizer.resolve())
    out.write_text(yaml.safe_dump(doc, sort_keys=False))
    return out


def start_fleet(port: int, targets: Path, fleet: Path) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-m", "goodput", "fleet", "serve", str(fleet),
                             "--traffic", "0", "--base-port", str(port), "--targets", str(targets)], cwd=REPO)
    url = f"http://127.0.0.1:{port}"
    for _ in range(120):
        try:
            if httpx.get(f"{url}/v1/models", timeout=1.0).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        if proc.poll() is not None:
            raise SystemExit(f"the fleet exited with {proc.returncode}")
        time.sleep(0.5)
    stop(proc)
    raise SystemExit("the fleet did not answer /v1/models within 60 s")


def inference_perf(exe: str, url: str, model: str, tokenizer: Path, out: Path) -> Path:
    """Run inference-perf with the YAML config its docs describe; returns its report directory."""
    dist = {"min": PROMPT_TOKENS, "max": PROMPT_TOKENS, "mean": PROMPT_TOKENS, "std_dev": 0, "total_count": 200,
            "type": "fixed"}
    config = {
        "load": {"type": "poisson", "stages": [{"rate": RATE, "duration": DURATION_S}], "num_workers": 2},
        "api": {"type": "completion", "streaming": True},
        "server": {"type": "vllm", "base_url": url, "model_name": model, "ignore_eos": True},
        "tokenizer": {"pretrained_model_name_or_path": str(tokenizer)},
        "data": {"type": "synthetic", "input_distribution": dist,
                 "output_distribution": {**dist, "min": OUTPUT_TOKENS, "max": OUTPUT_TOKENS, "mean": OUTPUT_TOKENS}},
        "report": {"request_lifecycle": {"summary": True, "per_stage": True, "per_request": True,
                                         "use_server_output_tokens": True},
                   "goodput": {"constraints": {"ttft": TTFT_SLO_S, "tpot": TPOT_SLO_S}}},
        "storage": {"local_storage": {"path": str(out)}},
    }
    out.mkdir(parents=True, exist_ok=True)
    cfg = out / "config.yml"
    cfg.write_text(yaml.safe_dump(config, sort_keys=False))
    subprocess.run([exe, "--config_file", str(cfg)], check=True, cwd=out, timeout=600)
    found = sorted(out.rglob("summary_lifecycle_metrics.json"))
    if not found:
        raise SystemExit(f"inference-perf wrote no summary_lifecycle_metrics.json under {out}")
    return found[-1].parent


def aiperf(exe: str, url: str, model: str, tokenizer: Path, out: Path) -> Path:
    """Run ``aiperf profile``; returns its artifact directory."""
    subprocess.run([
        exe, "profile", "--model", model, "--url", url, "--endpoint-type", "completions", "--streaming",
        "--tokenizer", str(tokenizer), "--request-rate", f"{RATE:g}", "--arrival-pattern", "poisson",
        "--benchmark-duration", str(DURATION_S), "--benchmark-grace-period", "30",
        "--isl", str(PROMPT_TOKENS), "--isl-stddev", "0", "--osl", str(OUTPUT_TOKENS), "--osl-stddev", "0",
        "--extra-inputs", "ignore_eos:true", "--use-server-token-count", "--random-seed", "0",
        "--goodput", f"time_to_first_token:{TTFT_SLO_S * 1e3:g} inter_token_latency:{TPOT_SLO_S * 1e3:g}",
        "--no-gpu-telemetry", "--ui", "none", "--artifact-dir", str(out)], check=True, timeout=600)
    found = sorted(out.rglob("profile_export.jsonl"))
    if not found:
        raise SystemExit(f"aiperf wrote no profile_export.jsonl under {out}")
    return found[-1].parent


def copy(src: Path, names: tuple[str, ...], dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    for name in names:
        if (src / name).is_file():
            shutil.copyfile(src / name, dest / name)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.third_party_clients", description=__doc__.split("\n\n")[0])
    ap.add_argument("--inference-perf", required=True, metavar="EXE", help="the inference-perf script of its venv")
    ap.add_argument("--aiperf", required=True, metavar="EXE", help="the aiperf script of its venv")
    ap.add_argument("--work", type=Path, required=True, help="a scratch directory (tokenizer, the tools' outputs)")
    ap.add_argument("--copy", action="store_true", help="copy the outputs into tests/fixtures/loadtest/")
    args = ap.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    tokenizer = args.work / "bpe8k"
    if not (tokenizer / "tokenizer.json").is_file():
        subprocess.run([str(Path(args.inference_perf).parent / "python"), "-c", TOKENIZER, str(tokenizer)], check=True)
    port = free_port()
    fleet = start_fleet(port, args.work / "targets.yaml",
                        fleet_file(tokenizer / "tokenizer.json", args.work / "fleet.yaml"))
    try:
        url = f"http://127.0.0.1:{port}"
        model = httpx.get(f"{url}/v1/models", timeout=5.0).json()["data"][0]["id"]
        ip_dir = inference_perf(args.inference_perf, url, model, tokenizer, args.work / "inference-perf")
        ap_dir = aiperf(args.aiperf, url, model, tokenizer, args.work / "aiperf")
    finally:
        stop(fleet)
    print(json.dumps({"model": model, "inference_perf": str(ip_dir), "aiperf": str(ap_dir)}))
    if args.copy:
        copy(ip_dir, INFERENCE_PERF_FILES, FIXTURES / "inference_perf_0.7.0")
        copy(ap_dir, AIPERF_FILES, FIXTURES / "aiperf_0.13.0")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
