"""The cost of an insert into a prepared database: the Collector's inserts of 10,000 spans into ``otel_traces`` after
`goodput analyze prepare`, beside the same inserts into an unprepared table, in one chDB session (one run).

The spans are a simulated run of tests/fixtures/regression_fleet.yaml in the order they end (a Collector exports a
span when it ends, so its batches cut traces apart); the first ``--base`` of them are stored and prepared (the
backfill), the next ``--inserts`` batches of ``--batch`` spans are timed, each as one INSERT, into database ``plain``
(no views) and ``prepared`` (its materialized views run inside the insert). Then the sync a reader runs before its
first statement (``sync_s``: the model of the traces those inserts touched) and the one before the next (nothing
new: ``idle_sync_s``); the prepared tables are checked against a backfill of the same spans (``same_as_backfill``).
The figures: each insert's wall seconds, their medians and ratio.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from benchmarks.report import emit

REPO = Path(__file__).resolve().parents[1]
FLEET = REPO / "tests" / "fixtures" / "regression_fleet.yaml"
_REQUESTS = "SELECT * EXCEPT version FROM {db:Identifier}.goodput_requests FINAL ORDER BY trace_id, span_id"


def _spans(seconds: float, keep: Path | None) -> list:
    """The simulated run's spans in the order they end; with ``keep``, its directory (simulated once, then reused)."""
    from goodput.exporters.otlp import decode_json
    from goodput.simulator.config import load_fleet
    from goodput.simulator.run import simulate, write_outputs

    with tempfile.TemporaryDirectory() as tmp:
        out = keep or Path(tmp)
        if not (out / "spans.otlp.jsonl").exists():
            write_outputs(simulate(load_fleet(FLEET), seconds), out)
        with open(out / "spans.otlp.jsonl") as f:
            spans = [span for line in f for span in decode_json(line)]
    return sorted(spans, key=lambda s: s.end_ns)


def run(seconds: float, base: int, batch: int, inserts: int, keep: Path | None = None) -> dict:
    from goodput.analyzer.prepare import Layout, prepare, sync
    from goodput.exporters.otel_traces import TableSpec, create_table, insert_spans
    from goodput.foundation.clickhouse import connect, parse_target

    t = time.perf_counter()
    spans = _spans(seconds, keep)
    simulated = time.perf_counter() - t
    stored, fresh = spans[:base], [spans[base + i * batch:base + (i + 1) * batch] for i in range(inserts)]
    if len(fresh[-1]) < batch:
        raise SystemExit(f"--seconds {seconds}: {len(spans):,} spans, fewer than --base + --inserts x --batch")
    with tempfile.TemporaryDirectory() as tmp:
        con = connect(f"chdb:{tmp}")
        timings: dict[str, list[float]] = {}
        for db in ("plain", "prepared", "backfilled"):
            create_table(con, TableSpec(database=db))
            insert_spans(con, stored, TableSpec(database=db))
        t = time.perf_counter()
        prepare(con, parse_target(f"chdb:{tmp}?database=prepared"))
        prepared_s = time.perf_counter() - t
        for db in ("plain", "prepared"):
            timings[db] = []
            for chunk in fresh:
                t = time.perf_counter()
                insert_spans(con, chunk, TableSpec(database=db))
                timings[db].append(time.perf_counter() - t)
        t = time.perf_counter()
        synced = sync(con, Layout("prepared", "otel_traces"))
        sync_s = time.perf_counter() - t
        t = time.perf_counter()
        sync(con, Layout("prepared", "otel_traces"))
        idle_sync_s = time.perf_counter() - t
        for chunk in fresh:
            insert_spans(con, chunk, TableSpec(database="backfilled"))
        prepare(con, parse_target(f"chdb:{tmp}?database=backfilled"))
        same = con.query_df(_REQUESTS, {"db": "prepared"}).equals(con.query_df(_REQUESTS, {"db": "backfilled"}))
        rows = len(con.query_df(_REQUESTS, {"db": "prepared"}))
    plain, prep = statistics.median(timings["plain"]), statistics.median(timings["prepared"])
    return {"spans_simulated": len(spans), "simulate_s": round(simulated, 1), "base_spans": base, "batch": batch,
            "inserts": inserts, "prepare_s": round(prepared_s, 2),
            "insert_s_unprepared": [round(x, 3) for x in timings["plain"]],
            "insert_s_prepared": [round(x, 3) for x in timings["prepared"]],
            "median_insert_s_unprepared": round(plain, 3), "median_insert_s_prepared": round(prep, 3),
            "prepared_over_unprepared": round(prep / plain, 2), "synced_spans": synced, "sync_s": round(sync_s, 2),
            "idle_sync_s": round(idle_sync_s, 3), "requests": rows, "same_as_backfill": same}


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=float, default=2700.0, help="simulated seconds of the fleet (default 2700)")
    p.add_argument("--base", type=int, default=20_000, help="spans stored before prepare (default 20,000)")
    p.add_argument("--batch", type=int, default=10_000, help="spans per insert (default 10,000)")
    p.add_argument("--inserts", type=int, default=10, help="inserts timed (default 10)")
    p.add_argument("--keep", type=Path, help="simulate into this directory once and reuse it (default: a temporary one)")
    p.add_argument("--out", type=Path, help="also write the figures (JSON) here")
    a = p.parse_args(argv)
    return emit("insert cost after `goodput analyze prepare` (chDB)", run(a.seconds, a.base, a.batch, a.inserts, a.keep), a.out)


if __name__ == "__main__":
    main()
