"""OTLP ingest and the trace store read in place, on one simulated hour of examples/fleet.yaml (420k spans), in one run:

- ``goodput analyze ingest`` of the run's OTLP JSON lines: after (DuckDB reads the file, goodput/analyzer/sql/otlp_json.sql)
  beside before (the Python decoder it replaces, still the path for odd or bad files: the same code, called with
  DuckDB's reader turned off);
- the analyses' answer time (``decompose``, ``triage`` as a user runs them) on the ingested DuckDB file beside the
  request exporter's trace store read in place (``--db STORE_DIR``: no ingest, the model built at open).

Each step runs in a child process: its wall seconds and CPU seconds (user + system, all threads) are its own.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.report import emit

REPO = Path(__file__).resolve().parents[1]

INGEST = """
import importlib, sys
from pathlib import Path
from goodput.analyzer.store import connect
ingest = importlib.import_module("goodput.analyzer.ingest")
if sys.argv[3] == "before":
    ingest._json_by_duckdb = lambda *a: False
con = connect(sys.argv[2], threads=2)
s = ingest.ingest(con, [Path(sys.argv[1])])
print(s.spans, s.requests)
"""


def _child(cmd: list[str]) -> tuple[float, float, str]:
    """Run ``cmd``; its wall seconds, CPU seconds and output."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)}: {done.stderr[-2000:]}")
    return wall, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime, done.stdout


def _store(spans: Path, store: Path) -> None:
    """The run's spans written as the request exporter's trace store writes them (one flush per line)."""
    from goodput.exporters.otlp import decode_json
    from goodput.exporters.parquet_sink import ParquetSink

    sink = ParquetSink(store)
    with spans.open("rb") as f:
        for line in f:
            sink.write(decode_json(line))


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(prog="python -m benchmarks.ingest_otlp", description=__doc__)
    p.add_argument("--duration", type=float, default=3600.0, help="simulated seconds of examples/fleet.yaml")
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv if argv is not None else [])
    work = Path(tempfile.mkdtemp(prefix="goodput-bench-ingest-"))
    py = sys.executable
    _child([py, "-m", "goodput", "simulate", "examples/fleet.yaml", "--duration", str(args.duration),
            "--out", str(work / "run")])
    spans = work / "run" / "spans.otlp.jsonl"
    out: dict = {"spans_file_mib": round(spans.stat().st_size / 2**20, 1)}
    for path in ("before", "after"):
        wall, cpu, printed = _child([py, "-c", INGEST, str(spans), str(work / f"{path}.duckdb"), path])
        n, requests = map(int, printed.split())
        out[f"ingest_{path}"] = {"spans": n, "requests": requests, "wall_s": round(wall, 2), "cpu_s": round(cpu, 2),
                                 "spans_per_wall_s": round(n / wall), "spans_per_cpu_s": round(n / cpu)}
    out["ingest_speedup_wall"] = round(out["ingest_before"]["wall_s"] / out["ingest_after"]["wall_s"], 1)
    t = time.perf_counter()
    _store(spans, work / "store")
    out["store_write_s"] = round(time.perf_counter() - t, 1)
    deployment = "chat-8b-h100"
    for step, extra in (("decompose", ["--by", "deployment,tenant"]), ("triage", ["--deployment", deployment])):
        for where, db in (("after_ingest", work / "after.duckdb"), ("store_in_place", work / "store")):
            wall, cpu, printed = _child([py, "-m", "goodput", "analyze", step, "--db", str(db), *extra,
                                         "--format", "json"])
            out[f"{step}_{where}"] = {"wall_s": round(wall, 2), "cpu_s": round(cpu, 2)}
            out.setdefault(f"{step}_answers", []).append(json.loads(printed))
        a, b = out.pop(f"{step}_answers")
        out[f"{step}_same_answer"] = _comparable(a) == _comparable(b)
    out["load_average"] = [round(x, 2) for x in os.getloadavg()]
    return emit("OTLP ingest and the trace store in place (2 threads)", out, args.json)


def _comparable(answer):
    """An answer without what names where it was read from, its floats to 12 significant digits (sums of the same
    rows in another order differ in the last bits)."""
    if isinstance(answer, dict):
        return {k: _comparable(v) for k, v in answer.items() if k not in ("db", "source", "store")}
    if isinstance(answer, list):
        return [_comparable(v) for v in answer]
    if isinstance(answer, float):
        return float(f"{answer:.12g}")
    return answer


if __name__ == "__main__":
    main(sys.argv[1:])
