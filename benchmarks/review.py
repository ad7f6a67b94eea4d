"""Weekly review benchmark: one week of 3 deployments x 3 tiers (9 workloads, 6 tenants each: 54 tenants).

- From Prometheus: the week is simulated (``goodput week``, 120 s step, 3 weeks of demand history),
  backfilled with promtool and served by a real Prometheus; the review (queries, summary, forecast,
  recommendations, html/md/json) is timed with its queries in flight 16 at a time, beside the same
  review with one query at a time (the baseline). Target: <= 30 s.
- From DuckDB: a store of ~1.67M requests (the requests of ~10M spans, 6 per request) generated in SQL
  over the week; the review from it is timed beside the one bucketing query alone (the floor). Target:
  <= 10 s.
"""

from __future__ import annotations

import argparse
import socket
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from benchmarks.report import emit
from goodput.analyzer.opening import open_backend
from goodput.analyzer.store import connect
from goodput.review.backfill import serve_tsdb
from goodput.review.report import write_review
from goodput.review.review import DEFAULT_RULES, prometheus_review
from goodput.review.traces import db_review, load_slos
from goodput.review.week import write_week
from goodput.simulator.config import parse_fleet
from goodput.simulator.week import WeekSpec

WEEK = "2026-W48"
DEPLOYMENTS = [
    {"name": "chat-8b-h100", "model": "Llama-3.1-8B", "gpu": "H100-80GB-SXM", "tp": 1, "replicas": 4},
    {"name": "rag-70b-h200", "model": "Llama-3.1-70B", "gpu": "H200-141GB", "tp": 4, "replicas": 2,
     "engine": {"weight_dtype": "fp8", "kv_dtype": "fp8", "max_num_seqs": 128}},
    {"name": "batch-32b-a100", "model": "Qwen2.5-32B", "gpu": "A100-80GB", "tp": 2, "replicas": 2},
]
TIERS = (("P0", "chat", 6.0), ("P1", "code", 3.0), ("P2", "batch", 1.0))


def fleet() -> dict:
    deps = [{"router": "least-outstanding", "engine": {}} | d for d in DEPLOYMENTS]
    workloads = [{"name": f"{d['name']}-{tier}", "scene": route, "route": route, "tier": tier,
                  "deployment": d["name"], "tenants": {"acme": 0.5, "globex": 0.5},
                  "input_tokens": {"p50": 900, "p95": 3000, "max": 8000}, "output_tokens": {"p50": 150, "p95": 500,
                                                                                            "max": 1000},
                  "arrival": {"process": "poisson", "rate": rate}} for d in deps for tier, route, rate in TIERS]
    events = [{"at": 1, "kind": "release", "deployment": "chat-8b-h100", "release_kind": "framework", "from": "a",
               "to": "b", "effects": {"decode_time_scale": 1.2}},
              {"at": 2, "kind": "replica_lost", "deployment": "chat-8b-h100", "replica": 3}]
    return {"name": "bench-week", "start_time": "2026-11-23T00:00:00Z", "seed": 1, "deployments": deps,
            "workloads": workloads, "events": events}


REQUESTS = """
INSERT INTO requests (trace_id, ts, start_ns, end_ns, deployment, tenant, tier, route, input_tokens, output_tokens,
                      outcome, queue_s, prefill_s, decode_s, e2e_s, ttft_s, tpot_s, preemptions)
SELECT printf('%032x', i), to_timestamp(1795392000 + i * {gap}), 0, 0,
       ['chat-8b-h100', 'rag-70b-h200', 'batch-32b-a100'][1 + i % 3], 'tenant-' || (hash(i) % 54),
       ['P0', 'P1', 'P2'][1 + (i // 3) % 3], ['chat', 'code', 'batch'][1 + (i // 3) % 3],
       800 + (hash(i) % 2000), 100 + (hash(i * 7) % 400), CASE WHEN i % 97 = 0 THEN 'timeout' ELSE 'ok' END,
       0.01 + random() * 0.05, 0.1 + random() * 0.2, 2 + random() * 3, 3 + random() * 3, 0.2 + random() * 0.4,
       0.02 + random() * 0.03, 0
FROM range({n}) t(i)
"""


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _timed(fn) -> tuple[float, object]:
    t = time.perf_counter()
    out = fn()
    return round(time.perf_counter() - t, 2), out


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(prog="python -m benchmarks.review", description=__doc__)
    p.add_argument("--requests", type=int, default=1_666_667, help="requests in the DuckDB store")
    p.add_argument("--step", type=int, default=120, help="seconds per simulated sample")
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv if argv is not None else [])
    work = Path(tempfile.mkdtemp(prefix="goodput-bench-review-"))
    figures: dict = {"machine": "2 shared cores, loaded by other work: compare figures within this run only"}

    cfg = parse_fleet(fleet(), "benchmarks/review.py")
    setup_s, paths = _timed(lambda: write_week(cfg, WeekSpec(WEEK, step_s=args.step, tenants=6), work / "week",
                                               backfill_port=_port(), progress=lambda m: None))
    figures["week_simulate_and_backfill_s"] = setup_s
    served = serve_tsdb(paths["tsdb"], _port())
    try:
        kw = {"plan": paths["plan"], "releases": paths["releases"], "rules_dir": DEFAULT_RULES}
        prometheus_review(served.url, WEEK, **kw)  # warm Prometheus's page cache once
        conc_s, _ = _timed(lambda: write_review(prometheus_review(served.url, WEEK, **kw), work / "r1"))
        seq_s, _ = _timed(lambda: write_review(prometheus_review(served.url, WEEK, concurrency=1, **kw), work / "r2"))
    finally:
        served.stop()
    figures["prometheus"] = {"review_concurrent_16_s": conc_s, "baseline_one_query_at_a_time_s": seq_s,
                             "target_s": 30}

    db = work / "traces.duckdb"
    con = connect(db, threads=2)
    con.execute(REQUESTS.format(n=args.requests, gap=7 * 86400 / args.requests))
    con.close()
    db_s, _ = _timed(lambda: write_review(db_review(db, WEEK), work / "r3"))
    slo = load_slos(DEFAULT_RULES / "slos.yaml")
    params = {"slo_tier": slo.tier.astype(str).tolist(), "slo_route": slo.route.astype(str).tolist(),
              "slo_ttft": slo.ttft_seconds.astype(float).tolist(), "slo_tpot": slo.tpot_seconds.astype(float).tolist(),
              "since": datetime(2026, 11, 2, tzinfo=UTC), "until": datetime(2026, 11, 30, tzinfo=UTC)}
    store = open_backend(db)
    try:  # the review's own bucketing statement, with the parameters db_review gives it (3 weeks of history)
        floor_s, _ = _timed(lambda: store.frame("goodput.review:week_buckets", params))
    finally:
        store.close()
    figures["duckdb"] = {"requests": args.requests, "review_s": db_s, "floor_bucketing_query_alone_s": floor_s,
                         "target_s": 10}
    return emit("weekly review (benchmarks/review.py)", figures, args.json)


if __name__ == "__main__":
    main(sys.argv[1:])
