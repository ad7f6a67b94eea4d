"""``goodput analyze ingest|decompose|regressions|triage``: thin faces over the analyzer library."""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from goodput.foundation.args import non_negative_number

__all__ = ["register"]

FORMATS = ("table", "json", "csv")


def _time(text: str) -> datetime:
    try:
        t = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an ISO 8601 / RFC 3339 time: {text!r}") from None
    return t if t.tzinfo else t.replace(tzinfo=UTC)


def _duration(text: str) -> timedelta:
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    try:
        return timedelta(seconds=float(text[:-1]) * units[text[-1]])
    except (KeyError, ValueError, IndexError):
        raise argparse.ArgumentTypeError(f"expected a duration like 30s, 5m, 1h, 1d; got {text!r}") from None


def _percentiles(text: str) -> list[float]:
    try:
        return [float(p) / 100 for p in text.split(",") if p.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected percentiles like 50,95,99; got {text!r}") from None


def _common(p: argparse.ArgumentParser, report: bool = True) -> None:
    p.add_argument("--db", type=Path, required=True, metavar="FILE.duckdb", help="analyzer database")
    if report:
        p.add_argument("--format", choices=FORMATS, default="table", help="table (default), json or csv")
        p.add_argument("--since", type=_time, default=None, metavar="TIME", help="only requests arriving at or after")
        p.add_argument("--until", type=_time, default=None, metavar="TIME", help="only requests arriving before")


def register(sub: argparse._SubParsersAction) -> None:
    a = sub.add_parser("analyze", help="latency decomposition, regressions and triage over request traces",
                       description="The analyzer: a DuckDB database of requests and their latency segments.")
    asub = a.add_subparsers(dest="analyze_command", metavar="COMMAND")
    asub.required = True

    p = asub.add_parser("ingest", help="load traces (OTLP JSON/protobuf, trace-store Parquet, requests.parquet)",
                        description="Load request traces into the database. Re-ingesting the same data adds nothing; "
                                    "records that cannot be used are quarantined with a reason.")
    p.add_argument("paths", nargs="+", type=Path, metavar="PATH")
    _common(p, report=False)
    p.add_argument("--format", choices=("table", "json"), default="table")
    p.set_defaults(func=_ingest)

    p = asub.add_parser("decompose", help="split E2E and TTFT into gateway, queue, prefill, decode, send",
                        description="Percentiles of E2E and TTFT per group, mean seconds per segment, clock-skew "
                                    "gaps and overlaps, and the segment that dominates each group's p95/p99 tail.")
    _common(p)
    p.add_argument("--by", default="deployment", help="comma-separated dimensions (deployment,tenant,tier,route,...)")
    p.add_argument("--bucket", default=None, choices=("1m", "5m", "15m", "1h", "1d"), help="also group by time bucket")
    p.add_argument("--percentiles", type=_percentiles, default=[0.5, 0.95, 0.99], metavar="50,95,99")
    p.set_defaults(func=_decompose)

    p = asub.add_parser("regressions", help="change points in p95 latency, attributed to releases or not",
                        description="Find steps in bucketed p95 latency per deployment, tier and segment, and say "
                                    "whether a release, a workload shift or a per-token cost change explains each.")
    _common(p)
    p.add_argument("--releases", type=Path, default=None, metavar="FILE", help="releases file (YAML or CSV)")
    p.add_argument("--bucket", type=_duration, default=timedelta(minutes=5), metavar="5m", help="time bucket (default 5m)")
    p.add_argument("--window", type=_duration, default=timedelta(minutes=30), metavar="30m",
                   help="how long before a change a release may be blamed (default 30m)")
    p.add_argument("--min-change", type=non_negative_number, default=0.1,
                   help="smallest relative change reported (default 0.1)")
    p.add_argument("--deployment", default=None)
    p.set_defaults(func=_regressions)

    p = asub.add_parser("triage", help="walk the troubleshooting order for one deployment and name the likely cause",
                        description="Latency split, workload, KV cache, routing and cache, releases — for one "
                                    "deployment, comparing the last quarter of the window with what came before.")
    _common(p)
    p.add_argument("--deployment", required=True)
    p.add_argument("--releases", type=Path, default=None, metavar="FILE")
    p.set_defaults(func=_triage)


def _ingest(args: argparse.Namespace) -> int:
    from analyzer.ingest import ingest, input_bytes
    from analyzer.store import connect
    from goodput.foundation.progress import progress_bar

    con = connect(args.db)
    total = input_bytes(args.paths)
    with progress_bar("ingesting", max(total / 2**20, 1e-6), unit="MiB") as update:
        summary = ingest(con, args.paths, progress=lambda done, _total: update(done / 2**20))
    con.close()
    d = summary.as_dict()
    if args.format == "json":
        print(json.dumps(d, indent=2))
    else:
        print(f"{d['requests_added']:,} requests added from {d['files']} file(s) ({d['spans']:,} spans) in "
              f"{d['seconds']:.1f} s; {d['duplicates_skipped']:,} already known; {d['quarantined']:,} quarantined")
        for reason, n in d["quarantine_reasons"].items():
            print(f"  quarantined {n:,}: {reason}")
    return 0


def _decompose(args: argparse.Namespace) -> int:
    from analyzer.decompose import decompose
    from analyzer.report import render
    from analyzer.store import connect

    con = connect(args.db, read_only=True)
    by = [b.strip() for b in args.by.split(",") if b.strip()]
    d = decompose(con, by, since=args.since, until=args.until, percentiles=args.percentiles, bucket=args.bucket)
    print(render(d.records(), args.format, title="latency decomposition (seconds)"))
    return 0


def _regressions(args: argparse.Namespace) -> int:
    from analyzer.regressions import find_regressions
    from analyzer.releases import load_releases
    from analyzer.report import render
    from analyzer.store import connect

    releases = load_releases(args.releases) if args.releases else []
    con = connect(args.db, read_only=True)
    regs = find_regressions(con, releases, bucket=f"{int(args.bucket.total_seconds())} seconds", window=args.window,
                            since=args.since, until=args.until, deployment=args.deployment, min_change=args.min_change)
    rows = [r.record() for r in regs]
    cols = ["time", "deployment", "tier", "metric", "change", "before_p95_s", "after_p95_s", "segment", "cause", "release",
            "blamed"]
    print(render(rows, args.format, title="latency change points", columns=None if args.format == "json" else cols))
    return 0


def _triage(args: argparse.Namespace) -> int:
    from analyzer.releases import load_releases
    from analyzer.store import connect
    from analyzer.triage import triage

    releases = load_releases(args.releases) if args.releases else []
    con = connect(args.db, read_only=True)
    t = triage(con, args.deployment, since=args.since, until=args.until, releases=releases)
    if args.format == "json":
        print(json.dumps(t.record(), indent=2, default=str))
    elif args.format == "csv":
        from analyzer.report import render

        print(render([{"step": s, "finding": f} for s, f in t.steps] + [{"step": "verdict", "finding": t.verdict}], "csv"))
    else:
        print(f"triage of {args.deployment}")
        for step, finding in t.steps:
            print(f"  {step}: {finding}")
        print(f"most likely: {t.verdict}")
    return 0

