"""``goodput analyze ingest|prepare|decompose|regressions|triage``: thin faces over the analyzer library."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

from goodput.foundation.errors import ConfigError

__all__ = ["register"]

FORMATS = ("table", "json", "csv")
NOTHING = 1  # exit status when the input or the window holds nothing to report (errors exit 2)
ALERTMANAGER_ENV = "GOODPUT_ALERTMANAGER_URL"  # triage's default --alertmanager
DEFAULT_SLOS = Path(__file__).resolve().parents[2] / "rules" / "slos.yaml"


def _time(flag: str, text: str | None) -> datetime | None:
    if text is None:
        return None
    try:
        t = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ConfigError(flag, text, "not an ISO 8601 / RFC 3339 time") from None
    return t if t.tzinfo else t.replace(tzinfo=UTC)


def _duration(flag: str, text: str) -> timedelta:
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    try:
        seconds = float(text[:-1]) * units[text[-1]]
    except (KeyError, ValueError, IndexError):
        seconds = float("nan")
    if not 1 <= seconds <= 366 * 86400:
        raise ConfigError(flag, text, "expected a duration from 1s to 366d, like 30s, 5m, 1h, 1d")
    return timedelta(seconds=seconds)


def _fraction(flag: str, text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        v = float("nan")
    if not 0 <= v < 100:
        raise ConfigError(flag, text, "expected a relative change >= 0, like 0.1 for 10%")
    return v


def _percentiles(flag: str, text: str) -> list[float]:
    try:
        out = [float(p) / 100 for p in text.split(",") if p.strip()]
    except ValueError:
        out = []
    if not out or not all(0 < p < 1 for p in out):
        raise ConfigError(flag, text, "expected percentiles between 0 and 100 (exclusive), like 50,95,99")
    return out


def _window_of(args: argparse.Namespace) -> tuple[datetime | None, datetime | None]:
    since, until = _time("--since", args.since), _time("--until", args.until)
    if since is not None and until is not None and since >= until:
        raise ConfigError("--since", args.since, f"must be before --until {args.until}")
    return since, until


def _common(p: argparse.ArgumentParser, report: bool = True) -> None:
    if not report:
        p.add_argument("--db", type=Path, required=True, metavar="FILE.duckdb", help="analyzer database")
    else:  # a report reads the DuckDB file, or the spans where they are: ClickHouse's otel_traces (docs/clickhouse.md)
        p.add_argument("--db", required=True, metavar="FILE.duckdb|clickhouse://HOST:PORT/DB|chdb:DIR",
                       help="analyzer database, or the OpenTelemetry Collector's otel_traces table read in place: "
                            "clickhouse://[USER[:PASSWORD]@]HOST[:PORT]/DATABASE[?table=otel_traces] (HTTP, 8123) or "
                            "chdb:DIR[?database=otel&table=otel_traces] (ClickHouse in-process)")
        p.add_argument("--format", choices=FORMATS, default="table", help="table (default), json or csv")
        p.add_argument("--since", default=None, metavar="TIME", help="only requests arriving at or after (RFC 3339)")
        p.add_argument("--until", default=None, metavar="TIME", help="only requests arriving before (RFC 3339)")


def register(sub: argparse._SubParsersAction) -> None:
    a = sub.add_parser("analyze", help="latency decomposition, regressions and triage over request traces",
                       description="The analyzer: a DuckDB database of requests and their latency segments.")
    asub = a.add_subparsers(dest="analyze_command", metavar="COMMAND")
    asub.required = True

    p = asub.add_parser("ingest", help="load traces (OTLP JSON/protobuf, trace-store Parquet, requests.parquet)",
                        description="Load request traces into the database. A directory is read file by file "
                                    "(.parquet, .json, .jsonl, .ndjson, .pb, .binpb). Re-ingesting the same data adds "
                                    "nothing; records that cannot be used are quarantined with a reason; spans of other "
                                    "services are context (ignored).",
                        epilog=f"exit status: 0 requests found (new or already known), {NOTHING} nothing usable in "
                               "the input, 2 bad arguments or unreadable files")
    p.add_argument("paths", nargs="+", type=Path, metavar="PATH", help="trace files or directories")
    _common(p, report=False)
    p.add_argument("--format", choices=("table", "json"), default="table")
    p.set_defaults(func=_ingest)

    p = asub.add_parser("prepare", help="keep the request model inside ClickHouse as spans arrive (views + backfill)",
                        description="Create, beside the Collector's otel_traces, the tables and materialized views "
                                    "that keep goodput's request model up to date as spans are inserted, then backfill "
                                    "them from the spans already there (in chunks of hours). decompose, regressions, "
                                    "triage, the review and the console then read those tables instead of deriving "
                                    "requests from raw spans. Idempotent: run again, it changes nothing. The user needs "
                                    "CREATE TABLE, CREATE VIEW and INSERT on the database (docs/clickhouse.md).",
                        epilog="exit status: 0 prepared (or already), 2 bad arguments or refused DDL")
    p.add_argument("--db", required=True, metavar="clickhouse://HOST:PORT/DB|chdb:DIR",
                   help="the Collector's otel_traces: clickhouse://[USER[:PASSWORD]@]HOST[:PORT]/DATABASE"
                        "[?table=otel_traces] or chdb:DIR[?database=otel&table=otel_traces]")
    p.add_argument("--print", action="store_true", dest="print_ddl",
                   help="print the DDL instead of running it (for database admins who apply schema by hand)")
    p.add_argument("--cluster", default="", metavar="NAME",
                   help="ON CLUSTER NAME: Replicated* local tables and Distributed ones over them, sharded by trace "
                        "(--db names each shard's local span table; run once per shard to backfill it)")
    p.add_argument("--no-backfill", action="store_true", help="create the tables and views only")
    p.add_argument("--ttl", type=int, default=None, metavar="DAYS",
                   help="drop goodput's rows DAYS days after their day, as the Collector's ttl drops otel_traces' "
                        "(default: keep them; run again with another --ttl to change it)")
    p.set_defaults(func=_prepare)

    p = asub.add_parser("decompose", help="split E2E and TTFT into gateway, queue, prefill, kv_transfer, decode, send",
                        description="Percentiles of E2E and TTFT per group, mean seconds per segment, clock-skew "
                                    "gaps and overlaps, and the segment that dominates each group's p95/p99 tail. The "
                                    "table shows the columns that matter; --format json|csv has them all.",
                        epilog=f"exit status: 0 report printed, {NOTHING} no requests in the window, 2 bad arguments")
    _common(p)
    p.add_argument("--by", default="deployment", help="comma-separated dimensions (deployment,tenant,tier,route,...)")
    p.add_argument("--bucket", default=None, metavar="1m|5m|15m|1h|1d", help="also group by time bucket")
    p.add_argument("--percentiles", default="50,95,99", metavar="50,95,99", help="E2E and TTFT percentiles")
    p.set_defaults(func=_decompose)

    p = asub.add_parser("regressions", help="change points in p95 latency, attributed to releases or not",
                        description="Find steps in bucketed p95 latency per deployment, tier and segment, and say "
                                    "whether a release, a workload shift or a per-token cost change explains each.")
    _common(p)
    p.add_argument("--releases", type=Path, default=None, metavar="FILE", help="releases file (YAML or CSV)")
    p.add_argument("--bucket", default="auto", metavar="auto|5m",
                   help="time bucket, 1s to 366d; auto (the default) chooses it for the window: at least 16 buckets "
                        "of a short window, 1m or wider where the window allows, a day of 5m at most")
    p.add_argument("--window", default="30m", metavar="30m",
                   help="how long before a change a release may be blamed (default 30m)")
    p.add_argument("--min-change", default="0.1", metavar="0.1", help="smallest relative change reported (default 0.1)")
    p.add_argument("--deployment", default=None)
    p.set_defaults(func=_regressions)

    p = asub.add_parser("triage", help="walk the troubleshooting order for one deployment and name the likely cause",
                        description="Latency split, workload, KV cache, routing and cache, releases — for one "
                                    "deployment, comparing the last quarter of the window with what came before. A "
                                    "cause is named only when p95 latency regressed; otherwise it says so. Without "
                                    "--deployment it triages the deployment that is paging (Alertmanager), else the "
                                    "one with the worst SLO attainment in the store, and says why.")
    _common(p)
    p.add_argument("--deployment", default=None,
                   help="the deployment to triage (default: the one paging, else the worst SLO attainment)")
    p.add_argument("--alertmanager", default=os.environ.get(ALERTMANAGER_ENV) or None, metavar="URL",
                   help=f"Alertmanager to ask which deployment pages (default ${ALERTMANAGER_ENV}; "
                        "unset: the worst SLO attainment)")
    p.add_argument("--slos", type=Path, default=DEFAULT_SLOS, metavar="FILE",
                   help="SLO spec for the worst-attainment choice (default: the repository's rules/slos.yaml)")
    p.add_argument("--releases", type=Path, default=None, metavar="FILE", help="releases file (YAML or CSV)")
    p.add_argument("--prometheus", default=None, metavar="URL",
                   help="Prometheus to ask what the engines hold in flight, for deployments whose spans are all sent at "
                        "the end (vLLM's shape); without it their final buckets are bounded conservatively")
    p.set_defaults(func=_triage)


def _ingest(args: argparse.Namespace) -> int:
    from goodput.analyzer.ingest import ingest, input_bytes
    from goodput.analyzer.store import connect
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
        skipped = f", {d['skipped_files']} skipped (not a trace format)" if d["skipped_files"] else ""
        print(f"read {d['files']} file(s){skipped}: {d['spans']:,} spans in {d['seconds']:.1f} s")
        print(f"{d['requests_added']:,} requests added ({d['retries']:,} of them retries of an earlier call in their "
              f"trace); {d['duplicates_skipped']:,} already known; {d['quarantined']:,} quarantined; "
              f"{d['ignored']:,} spans ignored; {d['in_flight']:,} in flight (early spans, root still to come)")
        for reason, n in d["quarantine_reasons"].items():
            print(f"  quarantined {n:,}: {reason}")
        for reason, n in d["ignored_reasons"].items():
            print(f"  ignored {n:,}: {reason}")
    if not summary.usable:
        print("goodput: nothing usable: no LLM request (llm.request, llm_request or a requests.parquet row) in "
              f"{', '.join(str(p) for p in args.paths)}", file=sys.stderr)
        return NOTHING
    return 0


def _prepare(args: argparse.Namespace) -> int:
    from goodput.analyzer.backend import open_clickhouse
    from goodput.analyzer.prepare import MAX_TTL_DAYS, Layout, ddl, prepare
    from goodput.foundation.clickhouse import is_clickhouse, parse_target

    if not is_clickhouse(args.db):
        raise ConfigError("--db", args.db, "prepare is for ClickHouse: clickhouse://HOST:PORT/DATABASE or chdb:DIR")
    if args.cluster and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", args.cluster):
        raise ConfigError("--cluster", args.cluster, "not a plain identifier (letters, digits, _)")
    if args.ttl is not None and not 1 <= args.ttl <= MAX_TTL_DAYS:
        raise ConfigError("--ttl", str(args.ttl), f"expected days in 1..{MAX_TTL_DAYS}")
    target = parse_target(args.db, "--db")
    if args.print_ddl:
        for statement in ddl(Layout(target.database, target.table, args.cluster, args.ttl)):
            print(statement + ";\n")
        print(f"-- then, to backfill and record the schema version: goodput analyze prepare --db {args.db}")
        return 0
    con = open_clickhouse(args.db)
    try:
        print(prepare(con, target, args.cluster, fill=not args.no_backfill, ttl_days=args.ttl))
    finally:
        con.close()
    return 0


def _decompose(args: argparse.Namespace) -> int:
    from goodput.analyzer.completeness import in_flight_rows, not_final
    from goodput.analyzer.decompose import BUCKETS, decompose
    from goodput.analyzer.opening import open_backend
    from goodput.analyzer.report import render

    since, until = _window_of(args)
    percentiles = _percentiles("--percentiles", args.percentiles)
    con = open_backend(args.db)
    by = [b.strip() for b in args.by.split(",") if b.strip()]
    d = decompose(con, by, since=since, until=until, percentiles=percentiles, bucket=args.bucket)
    rows = d.records()
    if not rows:
        print(f"goodput: no requests {_window(args)}", file=sys.stderr)
        return NOTHING
    counts = in_flight_rows(con, rows, since=since, until=until, bucket=BUCKETS.get(args.bucket or ""))
    for r, n in zip(rows, counts, strict=True):  # a row whose requests are not all finished will change: say so
        r["in_flight"], r["final"] = n, not_final(n) or "final"
    columns = None
    if args.format == "table":
        e2e = [k for k in rows[0] if re.fullmatch(r"e2e_p[0-9_]+_s", k)]
        ttft = [k for k in rows[0] if re.fullmatch(r"ttft_p[0-9_]+_s", k)]
        pct = [*e2e, "ttft_p95_s" if "ttft_p95_s" in ttft else ttft[-1]]
        kv = ["kv_transfer_s"] if any(r.get("kv_transfer_s") for r in rows) else []  # P/D disaggregated groups only
        columns = [*d.group_columns(), "requests", *pct, "gateway_s", "queue_s", "prefill_s", *kv, "decode_s", "send_s",
                   "other_s", "e2e_p95_top_segment", "final"]
    print(render(rows, args.format, title="latency decomposition (seconds; segments are means)", columns=columns))
    if args.format == "table" and any(n != 0 for n in counts):
        print(f"not final: requests still in flight are not in these figures yet ({_flight(con)}); they will change")
    return 0


def _flight(con) -> str:
    """What is in flight, per deployment that has any, one line."""
    from goodput.analyzer.completeness import completeness

    return "; ".join(f"{d}: {c.describe()}" for d, c in completeness(con).items()
                     if c.in_flight != 0 or c.basis == "bound")


def _window(args: argparse.Namespace) -> str:
    if args.since is None and args.until is None:
        return "in the database"
    return f"in the window {args.since or 'the beginning'} .. {args.until or 'now'}"


def _regressions(args: argparse.Namespace) -> int:
    from goodput.analyzer.opening import open_backend
    from goodput.analyzer.regressions import scan_regressions
    from goodput.analyzer.releases import load_releases
    from goodput.analyzer.report import render

    since, until = _window_of(args)
    window = _duration("--window", args.window)
    bucket = None if args.bucket == "auto" else f"{int(_duration('--bucket', args.bucket).total_seconds())} seconds"
    min_change = _fraction("--min-change", args.min_change)
    releases = load_releases(args.releases) if args.releases else []
    con = open_backend(args.db)
    regs = scan_regressions(con, releases, bucket=bucket, window=window,
                            since=since, until=until, deployment=args.deployment, min_change=min_change)
    rows = [r.record() for r in regs.found]
    cols = ["time", "deployment", "tier", "metric", "direction", "change", "before_p95_s", "after_p95_s", "segment",
            "release", "cause"]
    if not rows:
        print(f"no regression or improvement: {regs.describe()}", file=sys.stdout if args.format == "table" else sys.stderr)
        if args.format == "table":
            return 0
    chosen = ", chosen for the window" if regs.chosen else ""
    print(render(rows, args.format, title=f"latency change points (buckets of {regs.bucket}{chosen})",
                 columns=None if args.format == "json" else cols))
    return 0


def _triage(args: argparse.Namespace) -> int:
    from goodput.analyzer.opening import open_backend
    from goodput.analyzer.paging import pick_deployment
    from goodput.analyzer.releases import load_releases
    from goodput.analyzer.triage import triage

    since, until = _window_of(args)
    releases = load_releases(args.releases) if args.releases else []
    con = open_backend(args.db)
    in_flight = None
    if args.prometheus:
        from goodput.analyzer.completeness import prometheus_in_flight

        in_flight = prometheus_in_flight(args.prometheus)
    picked = None if args.deployment else pick_deployment(con, args.alertmanager, slos=args.slos, since=since,
                                                          until=until)
    t = triage(con, picked.deployment if picked else args.deployment, since=since, until=until, releases=releases,
               prometheus_in_flight=in_flight)
    t.picked = picked.reason if picked else ""
    if args.format == "json":
        print(json.dumps(t.record(), indent=2, default=str))
    elif args.format == "csv":
        from goodput.analyzer.report import render

        why = [{"step": "picked", "finding": t.picked}] if t.picked else []
        print(render([*why, *({"step": s, "finding": f} for s, f in t.steps), {"step": "verdict", "finding": t.verdict}],
                     "csv"))
    else:
        print(f"triage of {t.deployment}" + (f" (picked: {t.picked})" if t.picked else ""))
        for step, finding in t.steps:
            print(f"  {step}: {finding}")
        print(f"most likely: {t.verdict}" if t.regressed else t.verdict)
    return 0

