"""``goodput review`` (the weekly capacity review) and ``goodput week`` (a simulated week for Prometheus)."""

from __future__ import annotations

import argparse
import json
import socket
from pathlib import Path

from goodput.foundation import promendpoint
from goodput.foundation.args import int_in, non_negative_number, output_dir, positive_int, positive_number, seed
from goodput.foundation.errors import ConfigError
from goodput.simulator.week import MAX_TENANTS, MAX_WEEKS_BEFORE

__all__ = ["register"]


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "review", help="the weekly capacity review from Prometheus or a trace store",
        description="Write DIR/review.html (self-contained), DIR/review.md (charts as SVG in DIR/charts/) and "
                    "DIR/review.json for one ISO week, from a Prometheus with the goodput rules (recorded or "
                    "backfilled) or from a trace store (DuckDB, ClickHouse). See docs/review.md.")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--prometheus", metavar="URL", help="Prometheus-API base URL, with any path prefix: "
                     "http://127.0.0.1:9090, http://vmselect:8481/select/0/prometheus, http://mimir:8080/prometheus")
    src.add_argument("--db", metavar="TRACES.duckdb|clickhouse://HOST:PORT/DB|chdb:DIR",
                     help="a trace store: the analyzer's DuckDB file, or the Collector's otel_traces read in place in "
                          "ClickHouse (clickhouse://HOST:PORT/DATABASE[?table=otel_traces]) or chDB (chdb:DIR)")
    p.add_argument("--week", required=True, metavar="YYYY-Www", help="ISO week to review, e.g. 2026-W48")
    p.add_argument("--out", type=output_dir, required=True, metavar="DIR", help="output directory (created)")
    p.add_argument("--plan", type=Path, default=None, metavar="FILE",
                   help="capacity plan (examples/plan.yaml format); without it capacity sections say 'no plan'")
    p.add_argument("--releases", type=Path, default=None, metavar="FILE", help="releases file (YAML or CSV)")
    p.add_argument("--rules", type=Path, default=None, metavar="DIR",
                   help="rule files whose page alerts are evaluated when Prometheus has no ALERTS history "
                        "(default: the repository's rules/)")
    p.add_argument("--history-weeks", type=int_in(1, MAX_WEEKS_BEFORE), default=3, help="weeks of demand before the week for "
                   "the forecast and the week-over-week change (default 3, at most 52)")
    p.add_argument("--redundancy", type=positive_number, default=1.2,
                   help="replicas needed = ceil(demand x this / per-replica goodput), as rules/slos.yaml's "
                        "capacity_redundancy (default 1.2)")
    p.add_argument("--gpu-hour-cost", type=positive_number, default=None, metavar="USD",
                   help="price of one GPU-hour, for cost used vs needed")
    p.add_argument("--concurrency", type=positive_int, default=16, help="range queries in flight (default 16)")
    p.add_argument("--format", choices=("table", "json"), default="table", help="summary on stdout")
    promendpoint.add_arguments(p)
    p.set_defaults(func=_review)

    w = sub.add_parser(
        "week", help="a compressed simulated week as OpenMetrics, backfilled into a TSDB",
        description="Model FLEET.yaml over one ISO week (and weeks of demand history before it) step by step "
                    "and write DIR/week.om (the catalog's series), DIR/releases.yaml, DIR/plan.yaml and "
                    "DIR/truth.json. With --backfill, promtool writes it and the recording rules into DIR/tsdb; "
                    "serve that with prometheus --storage.tsdb.path=DIR/tsdb --storage.tsdb.retention.time=3650d.")
    w.add_argument("fleet", metavar="FLEET.yaml")
    w.add_argument("--week", required=True, metavar="YYYY-Www")
    w.add_argument("--out", type=output_dir, required=True, metavar="DIR")
    w.add_argument("--step", type=positive_int, default=60, metavar="SECONDS", help="seconds per sample (default 60)")
    w.add_argument("--weeks-before", type=int_in(0, MAX_WEEKS_BEFORE), default=3,
                   help="weeks of demand history (default 3, at most 52)")
    w.add_argument("--growth", type=non_negative_number, default=0.06, help="demand growth per week (default 0.06)")
    w.add_argument("--peak-utilization", type=positive_number, default=0.72,
                   help="the first day's peak load of each deployment, as a share of its capacity (default 0.72)")
    w.add_argument("--tenants", type=int_in(1, MAX_TENANTS), default=None, metavar="N",
                   help="tenants per workload (the fleet's plus a Zipf tail; default: the fleet's; at most 10000)")
    w.add_argument("--seed", type=seed, default=7)
    w.add_argument("--backfill", action="store_true", help="backfill into DIR/tsdb with promtool")
    w.add_argument("--rules", type=Path, default=None, metavar="DIR", help="rule files to backfill (default rules/)")
    w.set_defaults(func=_week)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _print(review: dict, paths: dict, fmt: str) -> None:
    if fmt == "json":
        print(json.dumps({"files": {k: str(v) for k, v in paths.items()}, "recommendations": review["recommendations"],
                          "pages": len(review.get("pages", [])), "has_data": review["has_data"]}, indent=2))
        return
    if not review["has_data"]:
        print(f"no data for {review['week']} ({review['start']} .. {review['end']})")
    if review.get("partial"):
        print(f"partial week: {review['week']} is in progress, figures up to {review['partial']['as_of']}")
    for dep, e in review["deployments"].items():
        cap, tok = e["capacity"], e["tokens_per_second"]
        head = f"headroom {cap['headroom_pct']}%" if cap.get("plan") else cap["note"]
        print(f"{dep}: 5-minute peak {tok['peak_5m']:,.0f} tokens/s, busiest hour {tok['peak_hour_mean']:,.0f} "
              f"tokens/s ({tok['peak_hour']}), {head}, {len(e['pages'])} page(s)")
    for r in review["recommendations"]:
        print(f"  {r['deployment']}: {r['action']} ({r['reason']})")
    for k, v in paths.items():
        print(f"  {k:5s} {v}")


def _review(args: argparse.Namespace) -> int:
    from goodput.review.report import write_review
    from goodput.review.review import DEFAULT_RULES, prometheus_review

    if args.out.exists() and not args.out.is_dir():
        raise ConfigError(str(args.out), "--out", "exists and is not a directory")
    if args.plan is not None and not args.plan.is_file():
        raise ConfigError(str(args.plan), "--plan", "no such file")
    if args.db is not None:
        from goodput.review.traces import db_review
        review = db_review(args.db, args.week, plan=args.plan, releases=args.releases, redundancy=args.redundancy)
    else:
        review = prometheus_review(promendpoint.from_args(args.prometheus, args), args.week, plan=args.plan,
                                   releases=args.releases, rules_dir=args.rules or DEFAULT_RULES,
                                   history_weeks=args.history_weeks, redundancy=args.redundancy,
                                   gpu_hour_cost=args.gpu_hour_cost, concurrency=args.concurrency)
    _print(review, write_review(review, args.out), args.format)
    return 0


def _week(args: argparse.Namespace) -> int:
    from goodput.review.week import write_week
    from goodput.simulator.config import load_fleet
    from goodput.simulator.week import WeekSpec

    spec = WeekSpec(args.week, weeks_before=args.weeks_before, step_s=args.step, growth_per_week=args.growth,
                    peak_utilization=args.peak_utilization, tenants=args.tenants, seed=args.seed)
    paths = write_week(load_fleet(args.fleet), spec, args.out, backfill_port=_free_port() if args.backfill else None,
                       rules_dir=args.rules)
    for k, v in paths.items():
        print(f"  {k:9s} {v}")
    return 0
