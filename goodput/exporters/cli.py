"""``goodput exporter gpu|engine|requests``: thin faces over the exporters."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from goodput.exporters.dialects import DIALECTS
from goodput.foundation.args import any_port, interval_seconds, positive_int, positive_number, positive_number_at_most
from goodput.foundation.errors import ConfigError

SHUTDOWN_GRACE_S = 25.0  # the request exporter's SIGTERM-to-exit: inside Kubernetes' default 30 s grace, with margin

__all__ = ["register"]


def _common(p: argparse.ArgumentParser, port: int) -> None:
    p.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    p.add_argument("--port", type=any_port, default=port, help=f"metrics port (default {port})")


def register(sub: argparse._SubParsersAction) -> None:
    exp = sub.add_parser("exporter", help="the GPU, engine and request exporters",
                         description="Prometheus exporters publishing goodput's canonical llm_* metric catalog.")
    esub = exp.add_subparsers(dest="exporter", metavar="EXPORTER")
    esub.required = True

    gpu = esub.add_parser("gpu", help="GPU metrics from NVML (nvidia-ml-py)",
                          description="Sample every GPU through NVML on a timer and serve the last snapshot.")
    _common(gpu, 9400)
    gpu.add_argument("--fake", type=Path, metavar="FILE", help="use a fake NVML described in FILE (YAML)")
    gpu.add_argument("--mapping", type=Path, metavar="FILE",
                     help="rules attributing GPU processes to deployments (YAML; see docs/exporters.md)")
    gpu.add_argument("--interval", type=interval_seconds, default=5.0, help="sampling interval, seconds (default 5)")
    gpu.add_argument("--kubelet-pod-resources", type=Path, metavar="SOCKET",
                     help="label each GPU's series with the pod, namespace and container holding it, from the kubelet's "
                          "pod-resources socket (e.g. /var/lib/kubelet/pod-resources/kubelet.sock)")
    gpu.add_argument("--pod-resources-interval", type=interval_seconds, default=30.0, metavar="SECONDS",
                     help="how often to ask the kubelet which pods hold the GPUs, seconds (default 30)")
    gpu.set_defaults(func=_gpu)

    eng = esub.add_parser("engine", help="normalize engine /metrics (vLLM, SGLang, TGI, Triton)",
                          description="Scrape every target's /metrics and publish the canonical llm_* families. "
                                      "`goodput exporter engine normalize DUMP` normalizes one saved dump instead.")
    _common(eng, 9401)
    eng.add_argument("--targets", type=Path, metavar="FILE",
                     help="targets file: goodput's (written by `goodput fleet serve`) or Prometheus file_sd, YAML or "
                          "JSON; re-read when it changes, before every scrape round")
    eng.add_argument("--plan", type=Path, metavar="FILE", help="capacity plan (per-replica SLO goodput)")
    eng.add_argument("--interval", type=interval_seconds, default=5.0, help="scrape interval, seconds (default 5)")
    eng.add_argument("--timeout", type=positive_number, default=3.0, help="per-target timeout, seconds (default 3)")
    eng.add_argument("--max-bytes", type=positive_int, default=8 * 1024 * 1024,
                     help="per-target response body limit, bytes (default 8 MiB)")
    eng.set_defaults(func=_engine)
    nsub = eng.add_subparsers(dest="engine_command", metavar="COMMAND")
    nsub.required = False
    norm = nsub.add_parser("normalize", help="normalize one saved /metrics dump to stdout",
                           description="Print the canonical llm_* exposition of one saved engine dump.")
    norm.add_argument("dump", type=Path, metavar="DUMP")
    norm.add_argument("--engine", default="auto", choices=("auto", *DIALECTS),
                      help="the dump's dialect (default auto: recognised by its names)")
    norm.add_argument("--deployment", default="")
    norm.add_argument("--replica", default="")
    norm.add_argument("--model", default=None, help="model label (default: what the dump says)")
    norm.set_defaults(func=_normalize)

    req = esub.add_parser("requests", help="per-tenant metrics and a trace store from OTLP request spans",
                          description="Receive OTLP/HTTP request spans (POST /v1/traces, protobuf or JSON), publish "
                                      "llm_gateway_* metrics and store the spans: Parquet, or ClickHouse's otel_traces.")
    _common(req, 9402)
    req.add_argument("--otlp-port", type=any_port, default=4318, help="OTLP/HTTP port (default 4318)")
    req.add_argument("--store", required=True, metavar="DIR|URL",
                     help="where spans are stored: a Parquet directory, clickhouse://[USER[:PASSWORD]@]HOST:PORT/"
                          "DATABASE[?table=otel_traces] (the Collector's otel_traces table, over HTTP) or chdb:DIR "
                          "(ClickHouse in-process); see docs/collector.md")
    req.add_argument("--wal", type=Path, metavar="DIR",
                     help="write-ahead log and quarantine directory (default: the Parquet store directory; required "
                          "with a ClickHouse store)")
    req.add_argument("--insert-timeout", type=positive_number, default=30.0, metavar="SECONDS",
                     help="a ClickHouse insert unanswered this long fails and is retried (default 30)")
    req.add_argument("--shutdown-grace", type=positive_number_at_most(3600, " s"), default=SHUTDOWN_GRACE_S,
                     metavar="SECONDS",
                     help="SIGTERM to exit, at most: posts in flight are finished, the last flush is cut short and what it "
                          "did not store stays in the write-ahead log for the next start (default 25, inside Kubernetes' "
                          "default 30 s terminationGracePeriodSeconds; set it a few seconds under the pod's)")
    req.add_argument("--max-tenants", type=positive_int, default=50, help="tenant label values kept (default 50)")
    req.add_argument("--max-buffered-spans", type=positive_int, default=200_000,
                     help="spans held before flushing; beyond it the receiver answers 503 (default 200000)")
    req.add_argument("--flush-interval", type=interval_seconds, default=2.0,
                     help="seconds between flushes to the store (default 2; doubled after each failed one, up to 60)")
    req.set_defaults(func=_requests)


def _engine(args: argparse.Namespace) -> int:
    from goodput.exporters.config import load_plan
    from goodput.exporters.engine import EngineExporter
    from goodput.exporters.targets_file import TargetsFile
    from goodput.foundation.http import Server, metrics_routes, serve_until_signal

    if args.targets is None:
        raise ConfigError("goodput exporter engine", "--targets", "is required (or use `normalize DUMP`)")
    watched = TargetsFile(args.targets)
    targets = watched.targets
    plan = load_plan(args.plan) if args.plan else None
    exp = EngineExporter(targets, plan, timeout_s=args.timeout, max_bytes=args.max_bytes, interval_s=args.interval,
                         targets_file=watched)
    routes = metrics_routes(exp.render) | {("GET", "/healthz"): exp.healthz}
    srv = Server(args.host, args.port, routes).start()
    exp.start()
    print(f"engine exporter: {len(targets.targets)} targets, metrics at {srv.url}/metrics", flush=True)

    def stop() -> None:
        exp.stop()
        srv.stop()

    serve_until_signal(stop)
    return 0


def _normalize(args: argparse.Namespace) -> int:
    from goodput.contracts.catalog import ENGINE, ENGINE_LABELS
    from goodput.exporters.exposition import labels, render
    from goodput.exporters.normalize import TooManySeries, UnknownDialect, normalize

    try:
        text = args.dump.read_text(errors="replace")
    except OSError as e:
        raise ConfigError(str(args.dump), "", f"cannot read: {e.strerror or e}") from None
    try:
        n = normalize(text, args.engine)
    except UnknownDialect as e:
        raise ConfigError(str(args.dump), "--engine", str(e)) from None
    except TooManySeries as e:  # the per-target cap the live exporter holds each scrape to: same limit, one line
        raise ConfigError(str(args.dump), "", str(e)) from None
    single = not n.others  # --model names the one model; several keep their own names
    lines = n.lines_by_model(lambda m: labels(ENGINE_LABELS, ((args.model or m) if single else m, args.deployment,
                                                             args.replica)))
    sys.stdout.write(render((spec, lines.get(spec.name, ())) for spec in ENGINE))
    for kind, count in sorted(n.errors.items()):
        print(f"goodput: warning: {args.dump}: {count} {kind} problem(s) skipped", file=sys.stderr)
    return 0


def _gpu(args: argparse.Namespace) -> int:
    from goodput.exporters.gpu import run_gpu_exporter

    return run_gpu_exporter(args)


def _requests(args: argparse.Namespace) -> int:
    from goodput.exporters.requests import run_request_exporter

    return run_request_exporter(args)
