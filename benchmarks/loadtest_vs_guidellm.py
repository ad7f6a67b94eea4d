"""GuideLLM 0.8.x and ``goodput loadtest`` against the same targets, side by side: TTFT/ITL agreement, maximum rate.

Not in CI: GuideLLM is not a dependency of goodput (0.8.1 requires torch, transformers and datasets, ~1.3 GB). Install
it in a virtual environment of its own (a CPU torch will do) and name its ``guidellm`` script with ``--guidellm`` or
the ``GOODPUT_GUIDELLM`` environment variable (else ``guidellm`` on PATH)::

    python3 -m venv ~/gl && ~/gl/bin/pip install torch --index-url https://download.pytorch.org/whl/cpu
    ~/gl/bin/pip install guidellm==0.8.1
    python -m benchmarks.loadtest_vs_guidellm --guidellm ~/gl/bin/guidellm            # or --quick

Both tools run one after the other, never at once; every figure is printed with the load average it was taken at.

**Agreement** (one-replica live fleet, ``goodput fleet serve``, writing vLLM's ``llm_request`` span per request):
GuideLLM at a constant ``--rate`` with synthetic prompts of ``--prompt-tokens`` tokens of a small BPE trained here
with ``tokenizers`` (GuideLLM's own Python; over this repository's ``docs/*.md``), then ``goodput loadtest run
--pattern gamma --cv 0.01`` (evenly spaced) at the same rate with prompts of **the size the fleet counted for
GuideLLM's** (the fleet counts 4 characters a token, not BPE tokens, so the same ``prompt_tokens`` would not be the
same prompt). GuideLLM's report goes through ``goodput loadtest import`` (our definitions). Printed per tool: TTFT and
ITL p50/p95 (and GuideLLM's own numbers), achieved rate, the input/output tokens the fleet counted, the fleet's own
TTFT for those requests, and the client's excess over it (client TTFT − fleet TTFT): what each client adds.

**Maximum rate** (``benchmarks.stub_target``: pre-encoded SSE at a fixed ITL, costing the target little): each tool
is stepped through ``--ladder`` Poisson rates (GuideLLM ``kind=poisson`` with ``--override profile.rate``; ours
``--pattern step --steps rate=…``). A rate is **sustained** when the tool sent ≥ 95% of the requests it scheduled
(GuideLLM's cancelled ones count as scheduled), none failed, its schedule lag p99 (send − due) ≤ 50 ms, its ITL
p50 is within 20% of the stub's measured tick, and the stub was not the limit (its CPU < 50% of a core); the
maximum is the highest rate sustained with every lower one sustained too. Each tool's CPU (GuideLLM: its whole
process tree, worker processes included; ours: the one process) is sampled from /proc every 0.25 s beside the
stub's token counter, and reported per streamed token over the span in which the stub streamed.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import numpy as np
import pyarrow.parquet as pq
import yaml

from benchmarks import stub_target
from benchmarks.fleet_server import FLEET, MODEL, REPO, free_port, stop
from benchmarks.loadtest_client import wait_healthy
from benchmarks.report import emit
from goodput.cli import main as goodput
from goodput.loadtest.cli import EXIT_INVALID

GUIDELLM_ENV = "GOODPUT_GUIDELLM"
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
FLEET_SERVE = "import sys; from goodput.cli import main; sys.exit(main(sys.argv[1:]))"
# every request the same size: without ``min`` (default 1) half the requests would be drawn between 1 and p50
WORKLOAD = ("api: chat\ninput_tokens: {{min: {p}, p50: {p}, max: {p}}}\n"
            "output_tokens: {{min: {o}, p50: {o}, max: {o}}}\n")
SLO = "ttft_p95=60s"
SUSTAINED = {"sent_fraction": 0.95, "lag_p99_s": 0.050, "itl_tolerance": 0.20, "stub_cpu_busy": 0.50}


def load() -> str:
    """The 1/5/15-minute load average, to print beside every figure taken on a shared machine."""
    return "/".join(f"{x:.1f}" for x in os.getloadavg()) + f" on {os.cpu_count()} CPUs"


def _ms(x: float | None) -> float | None:
    return None if x is None or not np.isfinite(x) else round(float(x) * 1e3, 2)


def _pct(values, p: float) -> float | None:
    v = np.asarray([x for x in values if x is not None and np.isfinite(x)], dtype=float)
    return float(np.percentile(v, p)) if v.size else None


def tree_cpu_s(root: int, seen: dict[int, float]) -> float:
    """CPU seconds (user + system) of ``root`` and every descendant, from /proc; ``seen`` keeps the last reading of
    each pid, so a worker that has exited still counts with what it had used when last seen."""
    children: dict[int, list[int]] = {}
    cpu: dict[int, float] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            fields = Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(d))
        cpu[int(d)] = (int(fields[11]) + int(fields[12])) / tick
    todo = [root]
    while todo:
        pid = todo.pop()
        if pid in cpu:
            seen[pid] = cpu[pid]
        todo.extend(children.get(pid, ()))
    return sum(seen.values())


class Sampler(threading.Thread):
    """Every 0.25 s: the wall time, a process tree's CPU seconds and (with ``stats_url``) the stub's counters."""

    def __init__(self, root: int, stats_url: str | None) -> None:
        super().__init__(daemon=True)
        self.root, self.stats_url, self.seen = root, stats_url, {}
        self.samples: list[tuple[float, float, dict]] = []
        self.done = threading.Event()

    def run(self) -> None:
        with httpx.Client(timeout=2.0) as http:
            while not self.done.wait(0.25):
                stats = {}
                if self.stats_url:
                    with contextlib.suppress(httpx.HTTPError, ValueError):
                        stats = http.get(self.stats_url).json()
                self.samples.append((time.time(), tree_cpu_s(self.root, self.seen), stats))

    def cpu_per_token(self, windows: list[tuple[float, float]] | None = None) -> dict:
        """Client CPU, stub tokens, stub CPU and ticks summed over ``windows`` (unix times; by default the span in
        which the stub streamed: first to last increase of its token count)."""
        pts = [(t, cpu, s["tokens"], s["cpu_s"], s["ticks"]) for t, cpu, s in self.samples if s]
        if windows is None:
            moving = [i for i in range(1, len(pts)) if pts[i][2] > pts[i - 1][2]]
            windows = [(pts[moving[0] - 1][0], pts[moving[-1]][0])] if moving else []
        total = np.zeros(5)
        for start, end in windows:
            inside = [np.array(p) for p in pts if start <= p[0] <= end]
            if len(inside) > 1:
                total += inside[-1] - inside[0]
        wall, cpu, tokens, stub_cpu, ticks = total
        if tokens <= 0:
            return {}
        return {"tokens_streamed": int(tokens), "client_cpu_s": round(cpu, 2),
                "client_cpu_us_per_token": round(cpu / tokens * 1e6, 1),
                "stub_cpu_busy": round(stub_cpu / wall, 3), "stub_tick_ms": round(wall / ticks * 1e3, 2) if ticks else None}


def _watched(cmd: list[str], stats_url: str | None = None, **kw) -> tuple[subprocess.CompletedProcess, Sampler, float]:
    """Run ``cmd`` to the end with its process tree's CPU sampled; (its result, the sampler, wall seconds)."""
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)
    sampler = Sampler(proc.pid, stats_url)
    sampler.start()
    out, err = proc.communicate()
    sampler.done.set()
    sampler.join()
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err), sampler, time.monotonic() - t0


def guidellm_exe(given: str | None) -> str:
    exe = given or os.environ.get(GUIDELLM_ENV) or shutil.which("guidellm")
    if not exe or not Path(exe).is_file():
        raise SystemExit(f"GuideLLM not found: give --guidellm PATH or set {GUIDELLM_ENV} (see --help to install it)")
    return exe


def run_guidellm(exe: str, url: str, model: str, profile: str, overrides: list[str], seconds: float, data: str,
                 tok: Path, out_dir: Path, workers: int | None, stats_url: str | None = None) -> tuple[dict, Sampler, float]:
    """One GuideLLM run; (its JSON report, the CPU sampler of its process tree, wall seconds)."""
    out_dir.mkdir(parents=True)
    env = {**os.environ, "GUIDELLM__DEFAULT_RESULTS_DIR": str(out_dir)}
    if workers:
        env["GUIDELLM__MAX_WORKER_PROCESSES"] = str(workers)
    cmd = [exe, "run", "--backend", f"kind=openai_http,target={url},model={model}", "--profile", profile,
           *(["--override", "profile.rate", ",".join(overrides)] if overrides else []),
           "--constraint", f"kind=max_duration,seconds={seconds:g}", "--data", data,
           "--tokenizer", f"kind=huggingface_auto,model={tok}", "--disable-console-interactive"]
    res, sampler, wall = _watched(cmd, stats_url, cwd=out_dir, env=env)
    report = out_dir / "benchmarks.json"
    if res.returncode != 0 or not report.is_file():
        raise SystemExit(f"guidellm exited {res.returncode}:\n{res.stderr[-3000:] or res.stdout[-3000:]}")
    return json.loads(report.read_text()), sampler, wall


def run_ours(args: list[str], out_dir: Path, stats_url: str | None = None) -> tuple[dict, Sampler, float]:
    """``goodput loadtest run ARGS --out OUT_DIR`` in a process of its own; (its summary, CPU sampler, wall seconds)."""
    res, sampler, wall = _watched([sys.executable, "-m", "goodput", "loadtest", "run", *args, "--slo", SLO,
                                   "--server-metrics", "none", "--out", str(out_dir)], stats_url, cwd=REPO)
    if res.returncode not in (0, EXIT_INVALID):  # an INVALID run is reported as such, from its summary
        raise SystemExit(f"goodput loadtest run exited {res.returncode}:\n{res.stderr[-3000:] or res.stdout[-3000:]}")
    return json.loads((out_dir / "summary.json").read_text()), sampler, wall


def import_guidellm(report: dict, where: Path) -> dict:
    (where / "benchmarks.json").write_text(json.dumps(report))
    with contextlib.redirect_stdout(io.StringIO()):
        goodput(["loadtest", "import", str(where / "benchmarks.json"), "--slo", SLO, "--out", str(where / "run")])
    return json.loads((where / "run" / "summary.json").read_text())


def _step_figures(step: dict) -> dict:
    return {"ttft_p50_ms": _ms(step["ttft_s"]["p50"]), "ttft_p95_ms": _ms(step["ttft_s"]["p95"]),
            "itl_p50_ms": _ms(step["itl_s"]["p50"]), "itl_p95_ms": _ms(step["itl_s"]["p95"]),
            "tpot_p50_ms": _ms(step["tpot_s"]["p50"]), "tpot_p95_ms": _ms(step["tpot_s"]["p95"]),
            "requests": step["requests"], "errors": step["errors"], "achieved_rate": round(step["achieved_rate"], 3)}


def _guidellm_own(report: dict, i: int = 0) -> dict:
    """GuideLLM's own TTFT/ITL median and p95 (its definitions, its report) for benchmark ``i``."""
    m = report["benchmarks"][i]["metrics"]

    def two(name: str) -> tuple[float | None, float | None]:
        d = (m.get(name) or {}).get("successful") or {}
        return d.get("median"), (d.get("percentiles") or {}).get("p95")
    (t50, t95), (i50, i95) = two("time_to_first_token_ms"), two("inter_token_latency_ms")
    return {"ttft_p50_ms": t50, "ttft_p95_ms": t95, "itl_p50_ms": i50, "itl_p95_ms": i95,
            "request_rate": ((m.get("requests_per_second") or {}).get("successful") or {}).get("mean")}


# ---- agreement on the live fleet ----

def fleet_spans(path: Path) -> list[dict]:
    """The fleet's finished ``llm_request`` spans: trace id, input and output tokens, its TTFT (seconds)."""
    out = []
    if not path.is_file():
        return out
    for line in path.read_text().splitlines():
        for rs in json.loads(line)["resourceSpans"]:
            for ss in rs["scopeSpans"]:
                for span in ss["spans"]:
                    a = {x["key"]: next(iter(x["value"].values()), None) for x in span.get("attributes", [])}
                    if span["name"] != "llm_request" or a.get("gen_ai.latency.time_to_first_token") is None:
                        continue
                    if "abort" in str(a.get("gen_ai.response.finish_reasons", "")):
                        continue  # GuideLLM's requests cancelled when its window closed
                    out.append({"trace_id": span["traceId"], "input": int(a["gen_ai.usage.prompt_tokens"]),
                                "output": int(a["gen_ai.usage.completion_tokens"]),
                                "ttft_s": float(a["gen_ai.latency.time_to_first_token"])})
    return out


def _settled_spans(path: Path, deadline_s: float = 30.0) -> list[dict]:
    """The spans once the file has stopped growing (the fleet writes them in batches)."""
    last, t_end = -1, time.monotonic() + deadline_s
    while time.monotonic() < t_end:
        size = path.stat().st_size if path.is_file() else 0
        if size == last and size:
            break
        last = size
        time.sleep(2.0)
    return fleet_spans(path)


def _server_view(spans: list[dict]) -> dict:
    inp, out = [s["input"] for s in spans], [s["output"] for s in spans]
    return {"requests": len(spans), "input_tokens_p50": _pct(inp, 50), "input_tokens_min_max": [min(inp), max(inp)]
            if inp else None, "output_tokens_p50": _pct(out, 50),
            "fleet_ttft_p50_ms": _ms(_pct([s["ttft_s"] for s in spans], 50)),
            "fleet_ttft_p95_ms": _ms(_pct([s["ttft_s"] for s in spans], 95))}


def agreement(exe: str, tok: Path, tmp: Path, args: argparse.Namespace) -> dict:
    fleet = tmp / "fleet.yaml"
    fleet.write_text(yaml.safe_dump(FLEET))
    spans = tmp / "spans.jsonl"
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-c", FLEET_SERVE, "fleet", "serve", str(fleet), "--base-port", str(port),
                             "--traffic", "0", "--targets", str(tmp / "t.yaml"), "--spans-file", str(spans),
                             "--span-format", "vllm"], cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc)
        data = f"kind=synthetic_text,prompt_tokens={args.prompt_tokens},output_tokens={args.output_tokens}"
        load_gl = load()
        report, _, gl_wall = run_guidellm(exe, url, MODEL, f"kind=constant,rate={args.rate:g}", [], args.duration,
                                          data, tok, tmp / "gl", args.guidellm_workers)
        gl_spans = _settled_spans(spans)
        gl_sizes = _server_view(gl_spans)
        # our prompts at the size the fleet counted for GuideLLM's (our text is sized in the fleet's own units)
        size = int(round(gl_sizes["input_tokens_p50"] or args.prompt_tokens))
        (tmp / "w.yaml").write_text(WORKLOAD.format(p=size, o=args.output_tokens))
        load_ours = load()
        summary, _, our_wall = run_ours(["--target", url, "--model", MODEL, "--workload", str(tmp / "w.yaml"),
                                         "--pattern", "gamma", "--rate", f"{args.rate:g}", "--cv", "0.01",
                                         "--duration", f"{args.duration:g}"], tmp / "ours")
        rows = pq.read_table(tmp / "ours" / "requests.parquet", columns=["trace_id", "ttft_s"]).to_pylist()
        mine = {r["trace_id"] for r in rows}  # our traceparent is the span's trace id (not the preflight's)
        our_spans = [s for s in _settled_spans(spans) if s["trace_id"] in mine]
    finally:
        stop(proc)
    theirs = import_guidellm(report, tmp / "gl")
    gl, ours = _step_figures(theirs["steps"][0]), _step_figures(summary["steps"][0])
    # our TTFT minus the fleet's, request by request
    fleet_ttft = {s["trace_id"]: s["ttft_s"] for s in our_spans}
    excess = [r["ttft_s"] - fleet_ttft[r["trace_id"]] for r in rows if r["ttft_s"] is not None and r["trace_id"] in fleet_ttft]
    ours_server = _server_view(our_spans)
    ours.update(ours_server, client_excess_ttft_p50_ms=_ms(_pct(excess, 50)),
                client_excess_ttft_p95_ms=_ms(_pct(excess, 95)), wall_s=round(our_wall, 1), load_average=load_ours)
    # GuideLLM sends no traceparent: its excess is its TTFT's percentile minus the fleet's, not request by request
    gl.update(gl_sizes, client_excess_ttft_p50_ms=None if gl["ttft_p50_ms"] is None or gl_sizes["fleet_ttft_p50_ms"] is None
              else round(gl["ttft_p50_ms"] - gl_sizes["fleet_ttft_p50_ms"], 2),
              own_report=_guidellm_own(report), worker_processes=args.guidellm_workers or "GuideLLM's default",
              wall_s=round(gl_wall, 1), load_average=load_gl)
    keys = ("ttft_p50_ms", "ttft_p95_ms", "itl_p50_ms", "itl_p95_ms", "tpot_p50_ms", "tpot_p95_ms", "fleet_ttft_p50_ms",
            "fleet_ttft_p95_ms", "input_tokens_p50", "output_tokens_p50", "achieved_rate")
    ratios = {k: round(ours[k] / gl[k], 3) for k in keys if ours.get(k) and gl.get(k)}
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        goodput(["loadtest", "compare", str(tmp / "gl" / "run"), str(tmp / "ours"), "--format", "json"])
    cmp = json.loads(buf.getvalue())
    return {"guidellm (imported: our definitions)": gl, "goodput loadtest": ours, "ours / guidellm": ratios,
            "within_10_percent": {k: abs(r - 1) <= 0.1 for k, r in ratios.items()},
            "goodput loadtest compare": {"comparable": cmp["comparable"], "unknown": cmp["unknown"],
                                         "differences": {d["field"]: [d["a"], d["b"]] for d in cmp["differences"]},
                                         "steps_paired": len(cmp["steps"])}}


# ---- maximum sustained rate on the stub target ----

def _ladder_steps(summary: dict, sends: list[tuple[int, list[float]]], window_s: list[float], offered: list[float],
                  itl_s: float, busy: float | None) -> list[dict]:
    """Each step judged: ``sends[i]`` is (requests scheduled, the schedule lag of each one sent) of step ``i``."""
    out = []
    for i, step in enumerate(summary["steps"]):
        scheduled, lags = sends[i]
        lag = _pct(lags, 99)
        itl50 = step["itl_s"]["p50"]
        ok = {"sent": len(lags) >= SUSTAINED["sent_fraction"] * scheduled,
              "no_errors": not step["errors"],
              "lag": lag is not None and lag <= SUSTAINED["lag_p99_s"],
              "itl": itl50 is not None and abs(itl50 / itl_s - 1) <= SUSTAINED["itl_tolerance"],
              "stub_not_limit": busy is None or busy < SUSTAINED["stub_cpu_busy"]}
        out.append({"offered_rate": offered[i], "scheduled": scheduled, "sent": len(lags),
                    "sent_rate": round(len(lags) / window_s[i], 2), "completed": step["completed"],
                    "errors": step["errors"], "schedule_lag_p50_ms": _ms(_pct(lags, 50)), "schedule_lag_p99_ms": _ms(lag),
                    "ttft_p50_ms": _ms(step["ttft_s"]["p50"]), "ttft_p95_ms": _ms(step["ttft_s"]["p95"]),
                    "itl_p50_ms": _ms(itl50), "sustained": all(ok.values()),
                    "failed": [k for k, v in ok.items() if not v]})
    return out


def _guidellm_sends(report: dict) -> list[tuple[int, list[float]]]:
    """Per benchmark: requests GuideLLM scheduled (cancelled ones too), and request_start − targeted_start of each sent."""
    out = []
    for b in report["benchmarks"]:
        reqs = b.get("requests") or {}
        timings = [((r.get("info") or {}).get("timings") or {}) for k in ("successful", "errored", "incomplete")
                   for r in reqs.get(k) or []]
        sent = [t for t in timings if t.get("request_start") is not None]
        # a targeted_start off the report's clock (GuideLLM 0.8.1, some Poisson requests) is unknown, as in import
        lags = [t["request_start"] - t["targeted_start"] if t.get("targeted_start") is not None
                and t["request_start"] - t["targeted_start"] < 86400 else 0.0 for t in sent]
        out.append((len(timings), lags))
    return out


def _best(steps: list[dict]) -> float | None:
    best = None
    for s in steps:  # the highest rate sustained with every lower rate sustained too
        if not s["sustained"]:
            break
        best = s["offered_rate"]
    return best


def max_rate(exe: str, tok: Path, tmp: Path, args: argparse.Namespace) -> dict:
    rates = [float(r) for r in args.ladder.split(",")]
    port = free_port()
    proc = stub_target.start(port, args.stub_itl_ms)
    url = f"http://127.0.0.1:{port}"
    stats = url + "/stats"
    out: dict = {}
    try:
        wait_healthy(url, proc)
        data = f"kind=synthetic_text,prompt_tokens={args.ladder_prompt_tokens},output_tokens={args.ladder_output_tokens}"
        load_gl = load()
        report, sampler, wall = run_guidellm(exe, url, stub_target.MODEL, f"kind=poisson,rate={rates[0]:g}",
                                             [f"{r:g}" for r in rates], args.step_s, data, tok, tmp / "gl_ladder",
                                             args.guidellm_workers, stats)
        # GuideLLM's measured windows only: between them it starts new worker processes (not per-token work)
        gl_cpu = sampler.cpu_per_token([(float(b["scheduler_metrics"]["measure_start_time"]),
                                         float(b["scheduler_metrics"]["measure_end_time"])) for b in report["benchmarks"]])
        gl_cpu["client_cpu_s_whole_run"] = round(sampler.samples[-1][1], 2) if sampler.samples else None
        gl_sum = import_guidellm(report, tmp / "gl_ladder")
        gl_rates = [float(b["config"]["strategy"]["rate"]) for b in report["benchmarks"]]
        gl_steps = _ladder_steps(gl_sum, _guidellm_sends(report), [s["measured_s"] for s in gl_sum["steps"]], gl_rates,
                                 args.stub_itl_ms / 1e3, gl_cpu.get("stub_cpu_busy"))
        (tmp / "wl.yaml").write_text(WORKLOAD.format(p=args.ladder_prompt_tokens, o=args.ladder_output_tokens))
        load_ours = load()
        summary, sampler, our_wall = run_ours(
            ["--target", url, "--model", stub_target.MODEL, "--workload", str(tmp / "wl.yaml"), "--pattern", "step",
             "--steps", "rate=" + ",".join(f"{r:g}" for r in rates), "--step-s", f"{args.step_s:g}",
             "--duration", f"{args.step_s * len(rates):g}", "--max-in-flight", "4096"], tmp / "ours_ladder", stats)
        our_cpu = sampler.cpu_per_token()
        our_cpu["client_cpu_s_whole_run"] = round(sampler.samples[-1][1], 2) if sampler.samples else None
        recs = pq.read_table(tmp / "ours_ladder" / "requests.parquet",
                             columns=["step", "sent_s", "scheduled_s"]).to_pylist()
        sends = [(sum(1 for r in recs if r["step"] == i), [r["sent_s"] - r["scheduled_s"] for r in recs if r["step"] == i])
                 for i in range(len(rates))]
        our_steps = _ladder_steps(summary, sends, [s["measured_s"] for s in summary["steps"]], rates,
                                  args.stub_itl_ms / 1e3, our_cpu.get("stub_cpu_busy"))
    finally:
        stop(proc)
    out["guidellm"] = {"max_sustained_rate": _best(gl_steps), **gl_cpu, "wall_s": round(wall, 1),
                       "worker_processes": args.guidellm_workers or "GuideLLM's default", "load_average": load_gl,
                       "steps": gl_steps}
    out["goodput loadtest"] = {"max_sustained_rate": _best(our_steps), **our_cpu, "wall_s": round(our_wall, 1),
                               "load_average": load_ours, "steps": our_steps}
    return out


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(prog="python -m benchmarks.loadtest_vs_guidellm", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--guidellm", default=None, help=f"the guidellm script (default: ${GUIDELLM_ENV}, else guidellm on PATH)")
    p.add_argument("--quick", action="store_true", help="short runs: 15 s agreement, ladder 4,20,80 req/s of 8 s")
    p.add_argument("--only", choices=("agreement", "max-rate"), default=None, help="run one part only")
    p.add_argument("--guidellm-workers", type=int, default=None,
                   help="GuideLLM's worker processes (GUIDELLM__MAX_WORKER_PROCESSES; default: its own, 10)")
    p.add_argument("--rate", type=float, default=4.0, help="agreement: constant requests per second (default 4)")
    p.add_argument("--duration", type=float, default=None, help="agreement: seconds each tool sends (default 30)")
    p.add_argument("--prompt-tokens", type=int, default=256, help="agreement: GuideLLM's prompt tokens (default 256)")
    p.add_argument("--output-tokens", type=int, default=128, help="agreement: output tokens (default 128)")
    p.add_argument("--ladder", default=None, help="max rate: Poisson rates, comma-separated (default 4,25,50,100,200,400)")
    p.add_argument("--step-s", type=float, default=None, help="max rate: seconds per rate (default 15)")
    p.add_argument("--stub-itl-ms", type=float, default=10.0, help="max rate: the stub's ITL (default 10)")
    p.add_argument("--ladder-prompt-tokens", type=int, default=64)
    p.add_argument("--ladder-output-tokens", type=int, default=128)
    p.add_argument("--keep", type=Path, default=None, help="keep the runs (reports, run directories) in this new directory")
    p.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = p.parse_args(argv if argv is not None else [])
    args.duration = args.duration or (15.0 if args.quick else 30.0)
    args.ladder = args.ladder or ("4,20,80" if args.quick else "4,25,50,100,200,400")
    args.step_s = args.step_s or (8.0 if args.quick else 15.0)
    exe = guidellm_exe(args.guidellm)
    out: dict = {"load_average_at_start": load()}
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        if args.keep is not None:
            args.keep.mkdir(parents=True)
            tmp_path = args.keep
        python = str(Path(exe).with_name("python"))
        subprocess.run([python, "-c", TRAIN_TOKENIZER, str(REPO / "docs"), str(tmp_path / "tok")], check=True,
                       capture_output=True)
        if args.only in (None, "agreement"):
            out[f"agreement: live fleet, constant {args.rate:g} req/s x {args.duration:g} s, "
                f"{args.prompt_tokens} BPE -> {args.output_tokens} tokens"] = agreement(exe, tmp_path / "tok", tmp_path, args)
        if args.only in (None, "max-rate"):
            out[f"max sustained rate: stub target (ITL {args.stub_itl_ms:g} ms), Poisson {args.ladder} req/s x "
                f"{args.step_s:g} s, {args.ladder_output_tokens} tokens"] = max_rate(exe, tmp_path / "tok", tmp_path, args)
    out["load_average_at_end"] = load()
    return emit("GuideLLM vs goodput loadtest, same targets, same machine, one after the other", out, args.json)


if __name__ == "__main__":
    main(sys.argv[1:])
