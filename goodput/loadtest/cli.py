"""``goodput loadtest run|import|export|compare``: a load test against OpenAI-compatible targets, written to a run
directory (with its report, the server's view per step and any faults fired beside it); another tool's result
converted into one, or one written in the llm-d benchmark report format; two run directories compared.

Everything the user gave is checked before the first request (SLO, workload, pattern, faults, the targets'
``/v1/models``), so bad input is one line and exit 2 before the run starts. Ctrl-C stops the run: what was measured
is written, marked incomplete, and the exit code is 130.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from goodput.foundation.args import (
    int_in,
    non_negative_number,
    output_dir,
    positive_int,
    positive_number,
    positive_number_at_most,
    seed,
)
from goodput.foundation.errors import ConfigError
from goodput.loadtest.patterns import MAX_IN_FLIGHT
from goodput.simulator.config import MAX_RATE

if TYPE_CHECKING:  # the modules behind a run are imported where it starts: `goodput --help` stays quick
    import asyncio

    from goodput.loadtest.faults import Fault, FaultDriver
    from goodput.loadtest.prometheus_view import PrometheusView
    from goodput.loadtest.records import RequestRecord
    from goodput.loadtest.server_view import ServerView

__all__ = ["register"]

PATTERNS = ("concurrency", "step", "poisson", "gamma", "burst", "longtail", "replay", "sweep")
DEFAULT_MAX_IN_FLIGHT = 2048
MAX_DURATION_S = 7 * 86400.0
# comparability fields the target cannot tell the client (summary.json's "comparability"), given with --comparability
FROM_FLAGS = ("quantization", "framework", "framework_version", "hardware", "tensor_parallel", "prompt_template",
              "cache_state")
# the quick start, `loadtest run --target URL`: a short Poisson step of the inline default workload, no SLO
QUICK_RATE = 2.0
EXIT_INVALID = 3  # a run that printed INVALID: finished, but the client or the machine set the pace
QUICK_DURATION_S = 30.0
RUNS_DIR = Path("loadtest-runs")  # --out's default parent: a run directory per start, named for its UTC time
NO_SLO = "no SLO given: no attainment, goodput or knee (give --slo, e.g. ttft_p95=0.8s,tpot_p95=50ms)"




def register(sub: argparse._SubParsersAction) -> None:
    lt = sub.add_parser("loadtest", help="load tests that measure SLO goodput",
                        description="Load tests against OpenAI-compatible targets that measure SLO goodput.")
    lsub = lt.add_subparsers(dest="loadtest_command", metavar="COMMAND")
    lsub.required = True
    p = lsub.add_parser(
        "run", help="run a load test and write RUN_DIR/requests.parquet and summary.json",
        description="Send requests to --target under an arrival --pattern and measure every request (TTFT, ITL, "
                    "TPOT, E2E from when it was sent; schedule lag separately), then SLO attainment and SLO goodput "
                    "per step. Open-loop patterns never wait for earlier requests. Ctrl-C writes what was measured, "
                    "marked incomplete. Quick start: `goodput loadtest run --target URL` runs "
                    f"{QUICK_DURATION_S:g} s of Poisson arrivals at {QUICK_RATE:g} req/s of "
                    "prompt_tokens=256,output_tokens=128 against the target's first model, without an SLO, into "
                    "./loadtest-runs/UTC-TIME. Exit codes: 0 a complete, valid run; 1 client workers died; 2 bad "
                    f"input, nothing sent; {EXIT_INVALID} the run is INVALID (the client or the machine set the pace: "
                    "its figures measure the client, not the target); 130 stopped early.")
    p.add_argument("--target", action="append", required=True, metavar="URL",
                   help="base URL of an OpenAI-compatible server (repeat for several replicas, used in turn)")
    p.add_argument("--model", default=None, help="model to ask for (default: the first the target serves)")
    p.add_argument("--workload", default=None, metavar="FILE|FILE:NAME|KEY=N,...",
                   help="a workload YAML, a fleet file's workload by name, or inline lengths in GuideLLM's style: "
                        "prompt_tokens=256,output_tokens=128 (fixed), with prompt_tokens_stdev/_min/_max and "
                        "output_tokens_stdev/_min/_max for a clipped normal spread, api=chat|completions "
                        "(default: prompt_tokens=256,output_tokens=128; docs/loadtest.md)")
    p.add_argument("--pattern", default="poisson", choices=PATTERNS, help="arrival pattern (default poisson)")
    p.add_argument("--rate", type=positive_number_at_most(MAX_RATE), default=None, metavar="REQ/S",
                   help="requests per second (poisson, gamma, burst, longtail; sweep: the first step; at most 10000; "
                        f"poisson's default {QUICK_RATE:g})")
    p.add_argument("--context-limit", type=positive_int, default=None, metavar="TOKENS",
                   help="longtail: the context limit its long requests approach (default: the target's max_model_len)")
    p.add_argument("--longtail-fraction", type=non_negative_number, default=0.05, metavar="F",
                   help="longtail: the fraction of requests at 90-100%% of the context limit (default 0.05)")
    p.add_argument("--cv", type=positive_number, default=None, help="coefficient of variation of the gaps (gamma)")
    p.add_argument("--concurrency", type=int_in(1, MAX_IN_FLIGHT), default=None, metavar="N",
                   help="requests in flight (concurrency; at most 10000)")
    p.add_argument("--steps", default=None, metavar="rate=R1,R2|concurrency=C1,C2", help="levels of the step pattern")
    p.add_argument("--step-s", type=positive_number, default=None, metavar="SECONDS",
                   help="how long each step (or sweep step) holds (default: duration / steps; sweep: 30)")
    p.add_argument("--settle", type=non_negative_number, default=0.0, metavar="SECONDS",
                   help="unmeasured seconds at the start of every step (default 0)")
    p.add_argument("--burst", default=None, metavar="factor=F,length=S,period=S", help="spikes of the burst pattern")
    p.add_argument("--trace", default=None, metavar="FILE", help="Azure .csv or Mooncake .jsonl trace (replay)")
    p.add_argument("--time-scale", type=positive_number, default=1.0, help="replay: multiply trace times (0.5 = twice as fast)")
    p.add_argument("--slo", default=None, metavar="TERMS",
                   help="e.g. ttft_p95=0.8s,tpot_p95=50ms,e2e_p99=2s (default none: latencies only, no attainment, "
                        "goodput or knee; sweeps and faults need one)")
    p.add_argument("--duration", type=positive_number_at_most(MAX_DURATION_S), default=None, metavar="SECONDS",
                   help="length of the run (every pattern but sweep, whose length is its steps; at most a week; "
                        f"poisson's default {QUICK_DURATION_S:g})")
    p.add_argument("--out", type=output_dir, default=None, metavar="RUN_DIR",
                   help="run directory (created; default ./loadtest-runs/UTC-TIME, printed)")
    p.add_argument("--fault", action="append", default=[], metavar="FAULT",
                   help="abort_rate=F: the client drops this fraction of streams mid-way; replica_lost@SECONDS[:DEP] "
                        "or replica_added@SECONDS[:DEP]: the fleet's admin API (--admin-url) does it on the run clock")
    p.add_argument("--admin-url", default=None, metavar="URL",
                   help="the live fleet's admin API (fleet serve --admin-port), needed by replica faults")
    p.add_argument("--fault-window", type=positive_number, default=10.0, metavar="SECONDS",
                   help="sliding window over which a fault's time to detect and to recover are judged (default 10)")
    p.add_argument("--server-metrics", action="append", default=None, metavar="auto|none|URL",
                   help="engine /metrics to scrape during the run for the server's view per step (repeat for several; "
                        "default auto: each --target's /metrics; none: no scraping)")
    p.add_argument("--gpu-metrics", default=None, metavar="URL", help="a GPU exporter's /metrics, for GPU utilization")
    p.add_argument("--prometheus", default=None, metavar="URL",
                   help="take the server's view from this Prometheus (scraping goodput's engine exporter, and its GPU "
                        "exporter for utilization) instead of scraping /metrics")
    p.add_argument("--prometheus-selector", default="", metavar="{LABEL=\"VALUE\",...}",
                   help="label matchers for every Prometheus series, e.g. '{deployment=\"chat\"}' (default: all)")
    p.add_argument("--timeout", type=positive_number, default=120.0, metavar="SECONDS",
                   help="a request that takes longer is a timeout (default 120)")
    p.add_argument("--max-in-flight", type=int_in(1, MAX_IN_FLIGHT), default=DEFAULT_MAX_IN_FLIGHT, metavar="N",
                   help=f"connections in the client's pool; a due request waits for one, as schedule lag "
                        f"(default {DEFAULT_MAX_IN_FLIGHT})")
    p.add_argument("--workers", type=_workers, default="auto", metavar="auto|N",
                   help="client processes, each with its own event loop and pool: open-loop arrivals are dealt to them "
                        "in turn on one run clock, a closed loop's concurrency is split (default auto: enough that each "
                        "streams at most 20,000 tokens/s at the plan's peak second, peak arrivals/s x mean output "
                        "tokens, or holds at most 500 closed-loop streams; at most the machine's CPUs; 1 runs in this "
                        "process)")
    p.add_argument("--seed", type=seed, default=0, help="seed of arrivals and requests (default 0)")
    p.add_argument("--api-key", default=None, help="sent as a bearer token")
    p.add_argument("--no-ignore-eos", dest="ignore_eos", action="store_false",
                   help="let the model stop early (default: ask for exactly the drawn output length)")
    p.add_argument("--comparability", action="append", default=[], metavar="KEY=VALUE",
                   help=f"a field that makes runs comparable, as summary.json records it: {', '.join(FROM_FLAGS)}")
    p.add_argument("--format", choices=("table", "json"), default="table", help="summary format on stdout")
    p.set_defaults(func=_run)

    imp = lsub.add_parser(
        "import", help="convert a GuideLLM, vLLM bench, AIPerf, inference-perf or llm-d result into a run directory",
        description="Read a GuideLLM JSON report (0.8.x), a vLLM `bench serve --save-result` JSON, an AIPerf export "
                    "(profile_export.jsonl per request, profile_export_aiperf.json/.csv aggregates; its artifact "
                    "directory), an inference-perf report (its directory or any *_lifecycle_metrics.json) or llm-d "
                    "benchmark reports v0.2 (a file or a directory of them), recognised by its shape, and write "
                    "RUN_DIR/summary.json, report.html and requests.parquet where the file has per-request data, with "
                    "SLO attainment and goodput computed for --slo by goodput's own definitions (the server's token "
                    "counts where the file has them; summary.json's source.token_counts says which).")
    imp.add_argument("file", type=Path, metavar="PATH", help="the other tool's result file or output directory")
    imp.add_argument("--out", type=output_dir, required=True, metavar="RUN_DIR", help="run directory (created)")
    imp.add_argument("--slo", required=True, metavar="TERMS",
                     help="the SLO to judge the requests by, e.g. ttft_p95=0.8s,tpot_p95=50ms")
    imp.add_argument("--format", choices=("table", "json"), default="table", help="summary format on stdout")
    imp.set_defaults(func=_import)

    exp = lsub.add_parser(
        "export", help="write a run directory in another tool's format (llm-d benchmark report v0.2)",
        description="Write RUN_DIR (a goodput run or an imported one) as llm-d benchmark reports v0.2 "
                    "(llm-d-benchmark's benchmark_report schema_v0_2), one JSON report per step, into --out; "
                    "`goodput loadtest import` reads them back.")
    exp.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="the run directory to export")
    exp.add_argument("--format", dest="export_format", choices=("llmd-v0.2",), default="llmd-v0.2",
                     help="the format written (default llmd-v0.2)")
    exp.add_argument("--out", type=output_dir, default=None, metavar="DIR",
                     help="where the reports go (default RUN_DIR/llmd-v0.2)")
    exp.set_defaults(func=_export)

    cmp = lsub.add_parser(
        "compare", help="may two runs be compared, and what changed",
        description="Compare two run directories (goodput runs or imported ones): the comparability fields that "
                    "differ (a different workload, arrival or SLO makes them not comparable; a different system is "
                    "what is compared), then per load level the change in goodput, attainment and latency "
                    "percentiles, and the change of the knee. Exit status: 0 when the runs are comparable, 1 when "
                    "they are not (the report is printed either way), 2 on bad input.")
    cmp.add_argument("run_a", type=Path, metavar="RUN_A", help="the baseline run directory")
    cmp.add_argument("run_b", type=Path, metavar="RUN_B", help="the run directory compared with it")
    cmp.add_argument("--format", choices=("table", "json"), default="table", help="report format on stdout")
    cmp.set_defaults(func=_compare)


def _workers(text: str) -> str | int:
    """``--workers``: auto or a positive count."""
    return text if text == "auto" else positive_int(text)


def _import(args: argparse.Namespace) -> int:
    from goodput.loadtest.imports import import_run
    from goodput.loadtest.slo import parse_slo

    slo = parse_slo(args.slo)
    if not args.file.exists():
        raise ConfigError(str(args.file), "FILE", "not found")
    if args.out.exists() and not args.out.is_dir():
        raise ConfigError(str(args.out), "--out", "exists and is not a directory")
    summary = import_run(args.file, args.out, slo)
    _print(args, summary)
    return 0


def _export(args: argparse.Namespace) -> int:
    from goodput.loadtest.llmd import export_run

    out = args.out if args.out is not None else args.run_dir / args.export_format
    if out.exists() and not out.is_dir():
        raise ConfigError(str(out), "--out", "exists and is not a directory")
    for path in export_run(args.run_dir, out):
        print(path)
    return 0


def _compare(args: argparse.Namespace) -> int:
    from goodput.loadtest.compare import compare, render_text
    from goodput.loadtest.results import read_run

    _, a = read_run(args.run_a)
    _, b = read_run(args.run_b)
    result = compare(a, b)
    sys.stdout.write(json.dumps(result, indent=2) + "\n" if args.format == "json" else render_text(result))
    return 0 if result["comparable"] else 1


def _faults(args: argparse.Namespace) -> tuple[float, list[Fault]]:
    """(the client's abort rate, the timed faults for the admin API); a replica fault without --admin-url, or in
    a sweep (whose steps each start a clock of their own), is a ConfigError."""
    from goodput.loadtest.faults import TIMED_KINDS, parse_faults

    parsed = parse_faults(args.fault)
    rates = [f.rate for f in parsed if f.kind == "abort_rate" and f.rate is not None]
    timed = [f for f in parsed if f.kind in TIMED_KINDS]
    if args.admin_url is not None and not args.admin_url.startswith(("http://", "https://")):
        raise ConfigError("--admin-url", args.admin_url, "expected an http(s):// URL")
    if timed:
        spec = next(x for x in args.fault if not x.strip().startswith("abort_rate="))
        if args.admin_url is None:
            raise ConfigError("--fault", spec, "a replica fault needs --admin-url URL (the fleet's admin API, "
                                               "fleet serve --admin-port)")
        if args.pattern == "sweep":
            raise ConfigError("--fault", spec, "replica faults need one run clock; a sweep starts one per step")
    return (rates[-1] if rates else 0.0), timed


def _comparability(pairs: list[str]) -> dict:
    out: dict = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key = key.strip()
        if not sep or key not in FROM_FLAGS:
            raise ConfigError("--comparability", pair, f"expected KEY=VALUE with KEY one of {', '.join(FROM_FLAGS)}")
        if key == "tensor_parallel":
            if not value.strip().isdigit() or int(value) < 1:
                raise ConfigError("--comparability", pair, "tensor_parallel must be a positive integer")
            out[key] = int(value)
        else:
            out[key] = value.strip()
    return out


def _run_dir() -> Path:
    """``--out``'s default: ``loadtest-runs/YYYYmmddTHHMMSSZ`` (``-2``, ``-3``... when that start's is taken)."""
    import time

    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    return next(d for d in (RUNS_DIR / f"{stamp}{f'-{i}' if i > 1 else ''}" for i in range(1, 1000))
                if not d.exists())


def _quick_start(args: argparse.Namespace) -> None:
    """Fill what the quick start leaves out: poisson's rate and duration, the workload, the run directory; an SLO
    is needed by what is judged against one (a sweep's search, a fault's detect and recover)."""
    from goodput.loadtest.workload import DEFAULT_INLINE

    if args.pattern == "poisson":
        args.rate = QUICK_RATE if args.rate is None else args.rate
        args.duration = QUICK_DURATION_S if args.duration is None else args.duration
    args.workload = args.workload or DEFAULT_INLINE
    if args.slo is None and (args.pattern == "sweep" or args.fault):
        what, value = ("--pattern", "sweep") if args.pattern == "sweep" else ("--fault", args.fault[0])
        raise ConfigError(what, value, "needs --slo TERMS (it is judged against the SLO), e.g. ttft_p95=0.8s")
    args.out_chosen = args.out is not None
    if args.out is None:
        args.out = output_dir(str(_run_dir()))


def _without_slo(step_dicts: list[dict]) -> None:
    """No SLO: the figures judged against one are null, never those of an empty SLO every success meets."""
    for step in step_dicts:
        for group in (step, *step["per_tier"].values()):
            group.update(slo_attainment=None, goodput_requests_per_s=None, goodput_tokens_per_s=None)
        step.update(slo_terms=[], slo_met=None)


def _run(args: argparse.Namespace) -> int:
    from goodput.loadtest import patterns
    from goodput.loadtest.client import ClientOptions, preflight
    from goodput.loadtest.slo import parse_slo
    from goodput.loadtest.workload import SpecStream, load_workload

    slo = parse_slo(args.slo) if args.slo is not None else None
    _quick_start(args)
    workload = load_workload(args.workload)
    abort_rate, timed = _faults(args)
    beside = _Beside(_server_metrics(args), args.gpu_metrics, args.admin_url, timed, args.prometheus,
                     args.prometheus_selector)
    args.fixed = _comparability(args.comparability)
    if args.out.exists() and not args.out.is_dir():
        raise ConfigError(str(args.out), "--out", "exists and is not a directory")
    if args.pattern == "sweep":
        _need(args.rate, "--rate", "sweep")
    else:
        _need(args.duration, "--duration", args.pattern)
        sched = patterns.schedule(args.pattern, duration_s=args.duration, rate=args.rate, cv=args.cv,
                                  concurrency=args.concurrency, steps=args.steps, step_s=args.step_s,
                                  settle_s=args.settle, burst=args.burst, trace=args.trace, time_scale=args.time_scale,
                                  seed=args.seed)
    model, entry = preflight(args.target[0], args.model)  # --target is required: at least one
    for target in args.target[1:]:
        model, entry = preflight(target, args.model or model)
    if args.model and model != args.model:
        print(f"goodput: --model {args.model} is served as {model}", file=sys.stderr)
    opts = ClientOptions(model=model, chat=workload.chat, timeout_s=args.timeout, ignore_eos=args.ignore_eos,
                         abort_rate=abort_rate, api_key=args.api_key, seed=args.seed)
    if not args.out_chosen:
        print(f"goodput: writing the run to {args.out} (--out RUN_DIR to choose)", file=sys.stderr)
    if args.pattern == "sweep":
        return _sweep(args, opts, workload, slo, entry, beside)
    # the pool holds the largest closed-loop concurrency, so no worker waits for a connection
    args.max_in_flight = max([args.max_in_flight] + [s.concurrency or 0 for s in sched.steps])
    first = sched.steps[0]  # a replayed trace is one step; its lengths and hash ids are per arrival
    specs = SpecStream(workload, args.seed, first.input_tokens, first.output_tokens, first.hash_ids, first.block_tokens)
    arrival = {"pattern": args.pattern, **_arrival(args)}
    if args.pattern == "longtail":
        specs, arrival["context_limit"] = _longtail(args, workload, specs, first.arrival_count, entry)
        arrival["longtail_fraction"] = args.longtail_fraction
    result = _drive(args, opts, sched.steps, specs, sched.duration_s, beside)
    return _report(args, result, slo, workload, entry, arrival, beside)


def _longtail(args: argparse.Namespace, workload, specs, n: int, entry: dict):
    """The longtail length mix over the run's ``n`` requests: the workload's own draws, ``--longtail-fraction`` of
    them moved to 90-100% of the context limit (``patterns.longtail_lengths``); every request's output is capped so
    prompt + output fit the limit, as a server would refuse more. Returns (the spec stream, the limit)."""
    import numpy as np

    from goodput.loadtest.patterns import longtail_lengths
    from goodput.loadtest.workload import SpecStream

    limit = args.context_limit or entry.get("max_model_len")
    if not isinstance(limit, int) or limit < 2:
        raise ConfigError("--pattern", "longtail", "needs --context-limit TOKENS (the target reports no max_model_len)")
    if args.longtail_fraction > 1:
        raise ConfigError("--longtail-fraction", str(args.longtail_fraction), "must be a fraction between 0 and 1")
    drawn = [specs(i) for i in range(n)]
    inputs = longtail_lengths([min(s.input_tokens, limit - 1) for s in drawn], np.random.default_rng(args.seed),
                              context_limit=limit - 1, fraction=args.longtail_fraction)
    outputs = [max(1, min(s.output_tokens, limit - int(i))) for s, i in zip(drawn, inputs, strict=True)]
    return SpecStream(workload, args.seed, inputs, outputs), limit


def _need(value, flag: str, pattern: str) -> None:
    if value is None:
        raise ConfigError("--pattern", pattern, f"needs {flag}")


def _arrival(args: argparse.Namespace) -> dict:
    keys = ("rate", "cv", "concurrency", "steps", "step_s", "settle", "burst", "trace", "time_scale")
    return {k: getattr(args, k) for k in keys if getattr(args, k) is not None}


def _server_metrics(args: argparse.Namespace) -> list[str]:
    """The /metrics URLs ``--server-metrics`` names: auto (the default) is each target's; none is none."""
    from goodput.loadtest.server_view import metrics_url

    if args.prometheus is not None:
        from goodput.loadtest.prometheus_view import check_prometheus

        if args.server_metrics not in (None, ["none"]) or args.gpu_metrics is not None:
            raise ConfigError("--prometheus", args.prometheus, "the server's view comes from one source: give "
                                                               "--prometheus or --server-metrics/--gpu-metrics, not both")
        if args.prometheus_selector and not (args.prometheus_selector.startswith("{")
                                             and args.prometheus_selector.endswith("}")):
            raise ConfigError("--prometheus-selector", args.prometheus_selector, "expected {label=\"value\",...}")
        check_prometheus(args.prometheus)
        return []
    given = args.server_metrics or ["auto"]
    if ("none" in given or "auto" in given) and len(given) > 1:
        raise ConfigError("--server-metrics", ",".join(given), "auto and none stand alone; give them once, without URLs")
    if given == ["none"]:
        return []
    if given == ["auto"]:
        return [metrics_url(t) for t in args.target]
    for url in given:
        if not url.startswith(("http://", "https://")):
            raise ConfigError("--server-metrics", url, "expected auto, none or an http(s):// URL of a /metrics")
    return given


@dataclass
class _Beside:
    """What runs beside the load, on its clock: the server's view (a scraping thread) and the fault driver (a task
    on the run's event loop)."""

    metrics_urls: list[str]
    gpu_url: str | None
    admin_url: str | None = None
    timed_faults: list[Fault] = field(default_factory=list)
    prometheus: str | None = None
    prometheus_selector: str = ""
    view: ServerView | PrometheusView | None = None
    driver: FaultDriver | None = None
    firing: asyncio.Task[None] | None = None

    def start(self, clock) -> None:
        """Called on the run's event loop the moment its clock starts."""
        import asyncio

        from goodput.loadtest.faults import FaultDriver
        from goodput.loadtest.server_view import ServerView

        if self.prometheus is not None:
            from goodput.loadtest.prometheus_view import PrometheusView

            self.view = PrometheusView(self.prometheus, self.prometheus_selector, clock=clock)
            self.view.start()
        elif self.metrics_urls:
            self.view = ServerView(self.metrics_urls, gpu_url=self.gpu_url, clock=clock)
            self.view.start()
        if self.timed_faults and self.admin_url is not None:  # _faults: timed faults come with --admin-url
            self.driver = FaultDriver(self.admin_url, self.timed_faults, clock)
            self.firing = asyncio.get_running_loop().create_task(self.driver.run())

    async def stop(self) -> None:
        """The run is over: faults not yet due stay unfired; one last scrape closes the last step."""
        import asyncio

        if self.firing is not None:
            self.firing.cancel()
            await asyncio.gather(self.firing, return_exceptions=True)
        if self.view is not None:
            self.view.stop()

    def fault_summary(self, records, slo, window_s: float) -> list[dict]:
        """summary.json's ``faults``: each fired fault with its time to detect and to recover, then the unfired."""
        from goodput.loadtest.faults import fault_summary

        if self.driver is None:
            return []
        return fault_summary(self.driver.fired + self.driver.unfired(), records, slo, window_s)

    def per_step(self, step_dicts: list[dict]) -> None:
        """Put the server's view of each step into the step's ``server``."""
        if self.view is not None:
            views = self.view.per_step(step_dicts)
            for step in step_dicts:
                step["server"] = views[int(step["index"])]


def _drive(args: argparse.Namespace, opts, steps, specs, total_s: float, beside: _Beside):
    """Run ``steps`` with a progress bar, ``beside`` started on the run clock: on this event loop, or over
    ``--workers`` processes (``workers.run_workers``); Ctrl-C or SIGTERM sets the runner's stop."""
    import asyncio
    import signal

    from goodput.foundation.progress import progress_bar
    from goodput.loadtest.client import Client
    from goodput.loadtest.runner import run_plan
    from goodput.loadtest.workers import auto_workers, run_workers

    workers = auto_workers(steps, specs) if args.workers == "auto" else args.workers

    async def one(stop: asyncio.Event, update):
        client = Client(args.target, opts, args.max_in_flight)
        try:
            return await run_plan(client, steps, specs, max_in_flight=args.max_in_flight, stop=stop,
                                  on_record=lambda _r: update(client.clock()),
                                  on_start=lambda: beside.start(client.clock))
        finally:
            await client.aclose()

    async def go(update):
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):  # Ctrl-C or a kill: stop, and write what was measured
            loop.add_signal_handler(sig, stop.set)
        try:
            if workers == 1:
                return await one(stop, update)
            return await run_workers(args.target, opts, steps, specs, workers=workers,
                                     max_in_flight=args.max_in_flight, stop=stop, on_start=beside.start,
                                     on_progress=update)
        finally:
            await beside.stop()
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)

    with progress_bar("load test", total_s) as update:
        return asyncio.run(go(update))


class _Stopped(Exception):
    """Ctrl-C during a sweep step: no more steps."""


def _sweep(args: argparse.Namespace, opts, workload, slo, entry, beside: _Beside) -> int:
    """Coarse rate steps, then bisection around the knee; each step a fresh Poisson window of ``--step-s``."""
    from goodput.loadtest import patterns, stats
    from goodput.loadtest.runner import RunResult, sweep_rates
    from goodput.loadtest.workload import SpecStream

    hold = args.step_s or 30.0
    runs: list[tuple[float, RunResult, dict]] = []

    def measure(rate: float) -> tuple[bool, float, float | None]:
        step = patterns.schedule("poisson", duration_s=hold, rate=rate, settle_s=args.settle,
                                 seed=args.seed + len(runs)).steps[0]
        # each sweep step is a run of its own clock
        one = _Beside(beside.metrics_urls, beside.gpu_url, prometheus=beside.prometheus,
                      prometheus_selector=beside.prometheus_selector)
        result = _drive(args, opts, [step], SpecStream(workload, args.seed + len(runs)), hold, one)
        (summary,) = stats.summarize(result.measured(), slo, [step])
        summary["served_rate"] = stats.served_rate(result.measured(), step)
        one.per_step([summary])
        runs.append((rate, result, summary))
        if not result.complete:
            raise _Stopped
        return summary["slo_met"], summary["goodput_requests_per_s"], summary["served_rate"]

    with contextlib.suppress(_Stopped):
        sweep_rates(measure, args.rate, max_steps=8)
    return _report_sweep(args, runs, slo, workload, entry)


def _summary(args, result, step_dicts, slo, workload, entry, arrival: dict) -> dict:
    from goodput.loadtest import results, stats

    summary = results.new_summary("goodput")
    sent = [r for r in result.records if r.status]
    comp = summary["comparability"]
    comp.update({
        "model": args.model or entry.get("id", ""), "framework": entry.get("owned_by", ""),
        "input_tokens": stats.distribution([r.input_tokens for r in sent]),
        "output_tokens": stats.distribution([r.output_tokens for r in sent if not r.error]),
        "arrival": arrival, "slo": str(slo) if slo is not None else "",
        "concurrency_steps": [s["concurrency"] for s in step_dicts if s.get("concurrency") is not None],
        "workload": workload.name, "api": "chat" if workload.chat else "completions",
        **args.fixed,
    })
    c = result.client
    if slo is None:
        summary["notes"] = [NO_SLO]
    summary.update({
        "complete": result.complete, "valid": result.valid, "invalid_reasons": result.invalid_reasons,
        "slo": slo.to_dict() if slo is not None else None, "steps": step_dicts,
        "knee": stats.knee(step_dicts) if slo is not None else None,
        "client": {"schedule_lag_p50_s": c.schedule_lag_p50_s, "schedule_lag_p99_s": c.schedule_lag_p99_s,
                   "cpu_s": c.cpu_s, "cpu_per_token_us": c.cpu_per_token_us, "wall_s": c.wall_s,
                   "cpu_wait_s": c.cpu_wait_s, "workers": c.workers},
    })
    if c.per_worker:
        summary["client_workers"] = c.per_worker
    if result.failures:
        summary["client_failures"] = result.failures
    return summary


def _aborts(args, records, slo) -> list[dict]:
    """The ``abort_rate`` fault's entry in summary.json's ``faults`` (none without one)."""
    from goodput.loadtest.faults import abort_summary

    rate, _ = _faults(args)
    return [abort_summary(rate, records, slo, args.fault_window)] if rate else []


def _report(args, result, slo, workload, entry, arrival: dict, beside: _Beside) -> int:
    from goodput.loadtest import stats
    from goodput.loadtest.slo import Slo

    step_dicts = stats.summarize(result.measured(), slo or Slo(()), result.steps)
    if slo is None:
        _without_slo(step_dicts)
    beside.per_step(step_dicts)
    summary = _summary(args, result, step_dicts, slo, workload, entry, arrival)
    summary["faults"] = beside.fault_summary(result.measured(), slo, args.fault_window) + _aborts(args, result.measured(), slo)
    _write(args, result.records, summary, slo)
    return _exit(result.complete, result.failures, result.valid)


def _exit(complete: bool, failures: list[str], valid: bool) -> int:
    """0; 1 when client workers died (each named on stderr); 130 for a run stopped early (Ctrl-C); else
    ``EXIT_INVALID`` for a run the client could not pace (it printed INVALID): a script must not read it as a
    measurement of the target."""
    for failure in failures:
        print(f"goodput: error: {failure}; the report keeps what the other workers measured", file=sys.stderr)
    return 1 if failures else 130 if not complete else 0 if valid else EXIT_INVALID


def _write(args, records, summary: dict, slo) -> None:
    """The run directory (summary.json, requests.parquet, report.html), then the summary on stdout; a partial run
    gets its report too. The report's path goes to stderr under --format json, which keeps stdout one JSON."""
    from goodput.loadtest import results
    from goodput.loadtest.report import write_report

    results.write_run(args.out, records, summary)
    report = write_report(args.out, summary, results.records_table(records, slo))
    _print(args, summary)
    print(f"report: {report}", file=sys.stderr if args.format == "json" else sys.stdout)


def _report_sweep(args, runs, slo, workload, entry) -> int:
    """One run directory for the whole sweep: step i is the i-th rate tried, on one run clock."""
    from dataclasses import replace

    from goodput.loadtest import stats
    from goodput.loadtest.runner import RunResult, client_health

    records: list[RequestRecord] = []
    measured, step_dicts, offset = [], [], 0.0
    for i, (_rate, result, summary) in enumerate(runs):
        cut = set(result.cut)
        for r in result.records:
            if r.index not in cut:  # the client's own cut at a Ctrl-C says nothing about the target
                measured.append(len(records))
            records.append(replace(r, index=len(records), step=i, scheduled_s=r.scheduled_s + offset,
                                   sent_s=r.sent_s + offset, itl_s=list(r.itl_s),
                                   first_token_s=None if r.first_token_s is None else r.first_token_s + offset,
                                   done_s=None if r.done_s is None else r.done_s + offset))
        step_dicts.append({**summary, "index": i, "start_s": summary["start_s"] + offset,
                           "end_s": summary["end_s"] + offset})
        offset += result.client.wall_s
    waits = [res.client.cpu_wait_s for _, res, _ in runs]
    workers = max((res.client.workers for _, res, _ in runs), default=1)
    health = client_health(records, sum(res.client.cpu_s for _, res, _ in runs), offset,
                           None if None in waits else sum(waits), workers,
                           sum(res.client.cpu_s if res.client.busiest_cpu_s is None else res.client.busiest_cpu_s
                               for _, res, _ in runs))
    complete = bool(runs) and all(res.complete for _, res, _ in runs)
    failures = [f for _, res, _ in runs for f in res.failures]
    merged = RunResult(records, [], health, complete, health.invalid_reasons(), failures=failures)
    summary = _summary(args, merged, step_dicts, slo, workload, entry, {"pattern": "sweep", **_arrival(args)})
    summary["knee"] = stats.knee(step_dicts)
    summary["faults"] = _aborts(args, [records[i] for i in measured], slo)
    _write(args, records, summary, slo)
    return _exit(complete, failures, merged.valid)


def _fmt(v, scale: float = 1.0, digits: int = 0, unit: str = "") -> str:
    return "-" if v is None else f"{v * scale:.{digits}f}{unit}"


def _bounded(q: dict | None, scale: float = 1.0, unit: str = "") -> str:
    """A histogram quantile (``Quantile.to_dict``): its value, or ``<300ms`` / ``>60000ms`` in the edge buckets."""
    from goodput.foundation.histogram import Quantile

    return "-" if q is None else Quantile.from_dict(q).text(scale, unit=unit)


def _pct(step: dict, metric: str, p: str):
    return (step.get(metric) or {}).get(p)


def _fault_line(f: dict) -> str:
    if f["kind"] == "abort_rate":
        return (f"fault abort_rate={f['rate']:g}: {f['aborted']} of {f['requests']} streams dropped mid-way"
                f" ({_fmt(f['aborted_rate'], 100, 1, unit='%')})")
    when = f"fired at {f['fired_s']:.1f} s" if f.get("fired_s") is not None else f"not fired ({f.get('error', '')})"
    return (f"fault {f['kind']}@{f['at_s']:g}s {f.get('replica') or ''}: {when}; detect "
            f"{_fmt(f.get('detect_s'), digits=1, unit=' s')}, recover {_fmt(f.get('recover_s'), digits=1, unit=' s')}")


def _print(args: argparse.Namespace, summary: dict) -> None:
    if args.format == "json":
        print(json.dumps(summary, indent=2))
        return
    server = any(s.get("server") for s in summary["steps"])  # the server's view, when it was scraped
    head = (f"{'step':<18}{'offered':>9}{'achieved':>9}{'ttft p95':>10}{'tpot p95':>10}{'e2e p99':>10}"
            f"{'errors':>8}{'attain':>8}{'goodput':>9}" + (f"{'srv queue p95':>14}{'kv mean':>9}" if server else ""))
    print(head + "\n" + "-" * len(head))
    for s in summary["steps"]:
        offered = s["offered_rate"] if s.get("offered_rate") is not None else s.get("concurrency")
        view = s.get("server") or {}
        print(f"{str(s['label'])[:17]:<18}{_fmt(offered, digits=2):>9}{_fmt(s.get('achieved_rate'), digits=2):>9}"
              f"{_fmt(_pct(s, 'ttft_s', 'p95'), 1e3, unit='ms'):>10}{_fmt(_pct(s, 'tpot_s', 'p95'), 1e3, 1, unit='ms'):>10}"
              f"{_fmt(_pct(s, 'e2e_s', 'p99'), 1e3, unit='ms'):>10}{_fmt(s.get('error_rate'), 100, 1, unit='%'):>8}"
              f"{_fmt(s.get('slo_attainment'), 100, 1, unit='%'):>8}{_fmt(s.get('goodput_requests_per_s'), digits=2):>9}"
              + (f"{_bounded(view.get('queue_wait_p95_s'), 1e3, unit='ms'):>14}"
                 f"{_fmt(view.get('kv_usage_mean'), 100, 1, unit='%'):>9}" if server else ""))
    from goodput.loadtest.report import verdict_text

    c = summary.get("client") or {}
    print(NO_SLO if summary.get("slo") is None else f"SLO {summary['comparability']['slo']}: {verdict_text(summary)}")
    if c:  # an imported run has no client figures of ours
        print(f"client: schedule lag p50 {c['schedule_lag_p50_s'] * 1e3:.1f} ms, p99 {c['schedule_lag_p99_s'] * 1e3:.1f} ms;"
              f" CPU {c['cpu_s']:.2f} s ({c['cpu_per_token_us']:.0f} us per streamed token)"
              + (f"; waited {c['cpu_wait_s']:.2f} s for a CPU" if c.get("cpu_wait_s") is not None else ""))
    for f in summary.get("faults") or ():
        print(_fault_line(f))
    if not summary["valid"]:
        print("INVALID: " + "; ".join(summary["invalid_reasons"]))
    if not summary["complete"]:
        print("INCOMPLETE: stopped early; the figures cover what was measured", file=sys.stderr)
    print(f"wrote {args.out}")
