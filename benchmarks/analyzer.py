"""Analyzer benchmark over ~10M spans (1.67M requests x 6 spans) on 2 cores, in one run:

- ingest rate from the request exporter's Parquet trace store layout (and the ingest's peak RSS);
- decomposition plus grouped p50/p95/p99 of E2E and TTFT by deployment x tenant through the analyzer,
  beside (a) one hand-written DuckDB query computing the same percentiles straight from a segment Parquet
  file (the floor for this engine) and (b) the same computation in pandas.

The spans are synthetic (DuckDB generates them: lognormal-ish segment durations, 8 deployments x 50 tenants),
laid out exactly like the trace store (date=/hour= partitions, the store's schema).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import duckdb
import pandas as pd

from benchmarks.report import emit
from goodput.analyzer.decompose import decompose
from goodput.analyzer.store import connect

REPO = Path(__file__).resolve().parents[1]

GENERATE = """
COPY (
  WITH r AS (
    SELECT i,
      lpad(printf('%x', i), 32, '0') AS trace_id,
      1795424400000000000 + i * 360000000 AS t0,                         -- one request every 0.36 ms: 10 minutes
      'dep-' || (i % 8) AS deployment, 'tenant-' || (hash(i) % 50) AS tenant,
      ['P0', 'P1', 'P2'][1 + i % 3] AS tier, ['chat', 'rag', 'code'][1 + i % 3] AS route,
      CAST(1000000 + random() * 4000000 AS BIGINT) AS gw,
      CAST(exp(random() * 6) * 1000000 AS BIGINT) AS q,
      CAST(20000000 + random() * 300000000 AS BIGINT) AS pf,
      CAST(200000000 + random() * 4000000000 AS BIGINT) AS dc,
      CAST(500000 + random() * 2000000 AS BIGINT) AS sd
    FROM range({n}) t(i)
  ), s AS (
    SELECT trace_id, lpad(printf('%x', i * 8), 16, '0') AS span_id, '' AS parent_span_id, 'llm.request' AS name, 2 AS kind,
           t0 AS start_time_unix_nano, t0 + gw + q + pf + dc + sd AS end_time_unix_nano,
           MAP {{'llm.deployment': deployment, 'llm.tenant': tenant, 'llm.tier': tier, 'llm.route': route,
                 'llm.outcome': 'ok', 'gen_ai.request.model': 'Llama-3.1-8B', 'gen_ai.usage.input_tokens': '800',
                 'gen_ai.usage.output_tokens': '200'}} AS attributes
    FROM r
    UNION ALL
    SELECT trace_id, lpad(printf('%x', i * 8 + k), 16, '0'), lpad(printf('%x', i * 8), 16, '0'), seg, 1, a, b, MAP {{}}
    FROM (SELECT *, unnest([1, 2, 3, 4, 5]) AS k,
                 unnest(['llm.gateway', 'llm.queue', 'llm.prefill', 'llm.decode', 'llm.send']) AS seg,
                 unnest([t0, t0 + gw, t0 + gw + q, t0 + gw + q + pf, t0 + gw + q + pf + dc]) AS a,
                 unnest([t0 + gw, t0 + gw + q, t0 + gw + q + pf, t0 + gw + q + pf + dc, t0 + gw + q + pf + dc + sd]) AS b
          FROM r)
  )
  SELECT trace_id, span_id, parent_span_id, name, CAST(kind AS TINYINT) AS kind, start_time_unix_nano,
         end_time_unix_nano, CAST(0 AS TINYINT) AS status_code, '' AS status_message, 'gateway' AS service_name,
         attributes, MAP {{'service.name': 'gateway'}} AS resource,
         strftime(make_timestamptz(start_time_unix_nano // 1000), '%Y-%m-%d') AS date,
         strftime(make_timestamptz(start_time_unix_nano // 1000), '%H') AS hour
  FROM s
) TO '{out}' (FORMAT parquet, PARTITION_BY (date, hour), COMPRESSION zstd);
"""

HAND = """
SELECT deployment, tenant,
       quantile_cont(e2e, [0.5, 0.95, 0.99]) AS e2e_q, quantile_cont(ttft, [0.5, 0.95, 0.99]) AS ttft_q
FROM (
  SELECT trace_id, any_value(deployment) AS deployment, any_value(tenant) AS tenant, sum(duration_s) AS e2e,
         sum(duration_s) FILTER (WHERE segment IN ('gateway', 'queue', 'prefill')) AS ttft
  FROM read_parquet('{seg}') GROUP BY trace_id
) GROUP BY deployment, tenant
"""


def generate_store(store: Path, requests: int) -> None:
    """A synthetic trace store of ``requests`` requests (6 spans each) under ``store``."""
    gen = duckdb.connect()
    gen.execute("SET threads = 2")
    gen.execute(GENERATE.format(n=requests, out=store))
    gen.close()


def ingest_in_child(store: Path, db: Path) -> dict:
    """Ingest ``store`` into ``db`` in a child process, so its peak RSS is its own; its figures."""
    child = subprocess.run([sys.executable, "-c", f"from benchmarks.analyzer import _ingest_child; "
                            f"_ingest_child({str(store)!r}, {str(db)!r})"], cwd=REPO, capture_output=True, text=True)
    if child.returncode != 0:
        raise SystemExit(child.stderr)
    return json.loads(child.stdout.strip().splitlines()[-1])


def _ingest_child(store: str, db: str) -> None:
    from goodput.analyzer.ingest import ingest

    con = connect(db, threads=2)
    t0 = time.perf_counter()
    s = ingest(con, [Path(store)])
    dt = time.perf_counter() - t0
    # VmHWM is this process's own peak; getrusage's ru_maxrss survives exec and can report the parent's
    status = Path("/proc/self/status").read_text() if Path("/proc/self/status").exists() else ""
    hwm = next((line.split()[1] for line in status.splitlines() if line.startswith("VmHWM:")), None)
    rss = int(hwm) / 1024 if hwm else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB -> MiB
    print(json.dumps({"spans": s.spans, "requests": s.requests, "seconds": dt, "peak_rss_mib": rss}))


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(prog="python -m benchmarks.analyzer", description=__doc__)
    p.add_argument("--requests", type=int, default=1_666_667, help="requests to generate (6 spans each)")
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv if argv is not None else [])
    work = Path(tempfile.mkdtemp(prefix="goodput-bench-analyzer-"))
    store, db, seg = work / "store", work / "db.duckdb", work / "segments.parquet"
    t0 = time.perf_counter()
    generate_store(store, args.requests)
    gen_s = time.perf_counter() - t0
    ing = ingest_in_child(store, db)
    con = connect(db, threads=2)
    con.execute(f"COPY (SELECT s.trace_id, r.deployment, r.tenant, s.segment, s.duration_s FROM segments s "
                f"JOIN requests r USING (trace_id) WHERE s.segment <> 'other') TO '{seg}' (FORMAT parquet)")
    seg_rows = con.execute(f"SELECT count(*) FROM read_parquet('{seg}')").fetchall()[0][0]
    timings = {}
    for _ in range(2):  # warm once, then measure
        t = time.perf_counter()
        ours = decompose(con, ["deployment", "tenant"])
        timings["analyzer"] = time.perf_counter() - t
        t = time.perf_counter()
        hand = con.execute(HAND.format(seg=seg)).fetchall()
        timings["hand_written_duckdb"] = time.perf_counter() - t
    t = time.perf_counter()
    df = pd.read_parquet(seg)
    wide = df.pivot_table(index=["trace_id", "deployment", "tenant"], columns="segment", values="duration_s",
                          aggfunc="sum").reset_index()
    wide["e2e"] = wide[["gateway", "queue", "prefill", "decode", "send"]].sum(axis=1)
    wide["ttft"] = wide[["gateway", "queue", "prefill"]].sum(axis=1)
    pd_out = wide.groupby(["deployment", "tenant"])[["e2e", "ttft"]].quantile([0.5, 0.95, 0.99])
    timings["pandas"] = time.perf_counter() - t
    assert len(ours.rows) == len(hand) == len(pd_out) // 3
    out = {
        "spans": ing["spans"], "requests": ing["requests"], "segment_rows": seg_rows, "generate_s": round(gen_s, 1),
        "ingest_s": round(ing["seconds"], 2), "ingest_spans_per_s": round(ing["spans"] / ing["seconds"]),
        "ingest_peak_rss_mib": round(ing["peak_rss_mib"]),
        "decompose_by_deployment_x_tenant_s": {k: round(v, 3) for k, v in timings.items()},
        "analyzer_vs_hand_written": round(timings["analyzer"] / timings["hand_written_duckdb"], 2),
        "pandas_vs_analyzer": round(timings["pandas"] / timings["analyzer"], 1),
    }
    return emit("analyzer benchmark (2 threads)", out, args.json)


if __name__ == "__main__":
    main(sys.argv[1:])
