"""GuideLLM 0.8.x and ``goodput loadtest`` against the same replica at the same constant rate, side by side.

Not in CI: GuideLLM is not a dependency of goodput (0.8.1 requires torch, transformers and datasets). Install it
in a virtual environment of its own (a CPU torch will do) and point ``--guidellm`` at its ``guidellm`` script:

    python -m venv /tmp/gl && /tmp/gl/bin/pip install 'guidellm==0.8.*' 'torch==2.13.0+cpu'
    python -m benchmarks.loadtest_vs_guidellm --guidellm /tmp/gl/bin/guidellm

A one-replica live fleet (``goodput fleet serve``, no traffic of its own) runs in its own process. GuideLLM needs a
tokenizer to size its synthetic prompts: one is trained here with ``tokenizers`` (a small BPE over this repository's
``docs/*.md``, run with GuideLLM's own Python), so its prompts decode to real text (a word-level vocabulary that
maps its words to ``[UNK]`` makes it send empty prompts). Then, one after the other against the same replica:
GuideLLM with ``--profile kind=constant,rate=R`` and synthetic prompts of ``--prompt-tokens``/``--output-tokens``,
and ``goodput loadtest run`` at the same rate with the same lengths (evenly spaced arrivals: ``--pattern gamma``
with cv 0.01). GuideLLM's report is read through ``goodput loadtest import`` (its TPOT converted to ours, its ITL
its own per-request mean); TTFT and ITL medians and p95 are printed side by side with their ratio (goal: within
10%), and the figures GuideLLM printed itself beside them.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from benchmarks.fleet_server import FLEET, MODEL, NEW_RUNNER, REPO, free_port, stop
from benchmarks.loadtest_client import wait_healthy
from benchmarks.report import emit
from goodput.cli import main as goodput

TRAIN_TOKENIZER = """
import sys
from pathlib import Path
from tokenizers import Tokenizer, models, pre_tokenizers, decoders, trainers
files = [str(p) for p in Path(sys.argv[1]).glob("*.md")]
tok = Tokenizer(models.BPE(unk_token="[UNK]"))
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
tok.train(files, trainers.BpeTrainer(vocab_size=4000, special_tokens=["[UNK]", "<s>", "</s>"],
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
out = Path(sys.argv[2])
out.mkdir(parents=True, exist_ok=True)
tok.save(str(out / "tokenizer.json"))
(out / "tokenizer_config.json").write_text('{"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", '
                                           '"eos_token": "</s>", "unk_token": "[UNK]", "model_max_length": 131072}')
"""
WORKLOAD = "api: chat\ninput_tokens: {{p50: {p}, p95: {p}, max: {p}}}\noutput_tokens: {{p50: {o}, p95: {o}, max: {o}}}\n"


def _figures(summary: dict) -> dict:
    (s,) = summary["steps"][:1]
    pick = {"ttft": "ttft_s", "itl": "itl_s", "tpot": "tpot_s", "e2e": "e2e_s"}
    return {f"{k}_{p}_ms": None if s[key][p] is None else round(s[key][p] * 1e3, 2)
            for k, key in pick.items() for p in ("p50", "p95")} | {
        "requests": s["requests"], "errors": s["errors"], "achieved_rate": round(s["achieved_rate"], 3),
        "input_tokens_p50": (summary["comparability"].get("input_tokens") or {}).get("p50")}


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(prog="python -m benchmarks.loadtest_vs_guidellm", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--guidellm", default="guidellm", help="the guidellm script (default: guidellm on PATH)")
    p.add_argument("--rate", type=float, default=4.0, help="constant requests per second (default 4)")
    p.add_argument("--duration", type=float, default=30.0, help="seconds each tool sends (default 30)")
    p.add_argument("--prompt-tokens", type=int, default=256)
    p.add_argument("--output-tokens", type=int, default=128)
    p.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = p.parse_args(argv if argv is not None else [])
    exe = Path(args.guidellm) if "/" in args.guidellm else None
    python = str(exe.with_name("python")) if exe else sys.executable
    out: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        subprocess.run([python, "-c", TRAIN_TOKENIZER, str(REPO / "docs"), str(tmp_path / "tok")], check=True)
        fleet = tmp_path / "fleet.yaml"
        fleet.write_text(yaml.safe_dump(FLEET))
        port = free_port()
        proc = subprocess.Popen([sys.executable, "-c", NEW_RUNNER, tmp, str(fleet), str(port), str(tmp_path / "t.yaml")],
                                cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        url = f"http://127.0.0.1:{port}"
        try:
            wait_healthy(url, proc)
            gl_dir = tmp_path / "guidellm"
            gl_dir.mkdir()
            t0 = time.monotonic()
            gl = subprocess.run(
                [args.guidellm, "run", "--backend", f"kind=openai_http,target={url},model={MODEL}",
                 "--profile", f"kind=constant,rate={args.rate:g}",
                 "--constraint", f"kind=max_duration,seconds={args.duration:g}",
                 "--data", f"kind=synthetic_text,prompt_tokens={args.prompt_tokens},output_tokens={args.output_tokens}",
                 "--tokenizer", f"kind=huggingface_auto,model={tmp_path / 'tok'}", "--disable-console-interactive"],
                cwd=gl_dir, env={**os.environ, "GUIDELLM__DEFAULT_RESULTS_DIR": str(gl_dir)},
                capture_output=True, text=True)
            gl_wall = time.monotonic() - t0
            report = gl_dir / "benchmarks.json"
            if gl.returncode != 0 or not report.is_file():
                raise SystemExit(f"guidellm exited {gl.returncode}:\n{gl.stderr[-3000:] or gl.stdout[-3000:]}")
            slo = "ttft_p95=60s"
            with contextlib.redirect_stdout(io.StringIO()):
                goodput(["loadtest", "import", str(report), "--slo", slo, "--out", str(tmp_path / "gl_run")])
            (tmp_path / "w.yaml").write_text(WORKLOAD.format(p=args.prompt_tokens, o=args.output_tokens))
            with contextlib.redirect_stdout(io.StringIO()):
                code = goodput(["loadtest", "run", "--target", url, "--workload", str(tmp_path / "w.yaml"),
                                "--pattern", "gamma", "--rate", f"{args.rate:g}", "--cv", "0.01",
                                "--duration", f"{args.duration:g}", "--slo", slo, "--server-metrics", "none",
                                "--out", str(tmp_path / "our_run")])
            if code != 0:
                raise SystemExit(f"goodput loadtest run exited {code}")
        finally:
            stop(proc)
        theirs = _figures(json.loads((tmp_path / "gl_run" / "summary.json").read_text()))
        ours = _figures(json.loads((tmp_path / "our_run" / "summary.json").read_text()))
    # GuideLLM's ITL is a per-request mean gap, as our TPOT is; our ITL pools every gap (a wider p95)
    ratios = {k: round(ours[k] / theirs[k], 3) for k in ("ttft_p50_ms", "ttft_p95_ms", "itl_p50_ms", "itl_p95_ms",
                                                         "tpot_p50_ms", "tpot_p95_ms") if ours.get(k) and theirs.get(k)}
    out = {"guidellm (imported: our definitions)": theirs, "goodput loadtest": ours, "ours / guidellm": ratios,
           "within_10_percent": {k: abs(r - 1) <= 0.1 for k, r in ratios.items()},
           "guidellm_wall_s": round(gl_wall, 1)}
    return emit(f"GuideLLM vs goodput loadtest: constant {args.rate:g} req/s, {args.prompt_tokens} -> "
                f"{args.output_tokens} tokens, one replica", out, args.json)


if __name__ == "__main__":
    main(sys.argv[1:])
