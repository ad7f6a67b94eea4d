"""The analyzer at scale: decompose, regressions and triage on N spans in ClickHouse (chDB, the Collector's
``otel_traces`` table, read in place) beside DuckDB (the analyzer's store, the same spans), in one run.

The spans are a simulated fleet (tests/fixtures/regression_fleet.yaml: three hours, a prompt-template
release, a traffic burst and a framework release that slows decode), replicated in each engine by SQL
until there are N: copy k has its trace and request ids' first 8 hex digits set to k and its times shifted by
k ms, so every copy is the same fleet's traffic again (the fleet k times busier; the same change points).
The DuckDB store is the real ingest of the simulated run's OTLP spans, its ``requests``, ``segments`` and
``in_flight`` rows replicated the same way, its ``admission_spans`` kept (what ingesting the replicated spans
writes); the rate of that real ingest is reported (``duckdb_ingest_spans_per_s``: the copy DuckDB needs and
ClickHouse does not). Each engine is capped (``--memory-limit``) and queried in a child process of its own, so
each peak RSS is that engine's; beside it DuckDB's own accounting (``duckdb_memory()``, sampled). chDB keeps no
``system.query_log`` and answers nothing while a query runs, so ClickHouse's own figure is its cap, which its
memory tracker enforces (a query over it fails, and is reported as not run). Wall and CPU seconds both: on a
shared box CPU seconds are the steadier.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from benchmarks.report import emit
from goodput.analyzer.ingest import ingest
from goodput.analyzer.store import connect

REPO = Path(__file__).resolve().parents[1]
FLEET = REPO / "tests" / "fixtures" / "regression_fleet.yaml"
SECONDS = 10800.0
SHIFT_NS = 1_000_000  # copy k starts k ms after copy 0
TRIAGED = "chat"  # the deployment whose decode regressed

# copy k of each request and segment row: ids re-prefixed with k, times shifted by k ms
DUCKDB_REPLICATE = {
    "requests": """
INSERT INTO requests
SELECT s.* REPLACE (printf('%08x', k) || substr(trace_id, 9) AS trace_id,
                  printf('%08x', k) || substr(request_id, 9) AS request_id,
                  ts + to_microseconds(k * $shift // 1000) AS ts,
                  start_ns + k * $shift AS start_ns, end_ns + k * $shift AS end_ns)
FROM seed.requests s, range($first, $last) t(k)
""",
    "segments": """
INSERT INTO segments
SELECT s.* REPLACE (printf('%08x', k) || substr(trace_id, 9) AS trace_id,
                  printf('%08x', k) || substr(request_id, 9) AS request_id,
                  start_ns + k * $shift AS start_ns)
FROM seed.segments s, range($first, $last) t(k)
""",
    "in_flight": """
INSERT INTO in_flight
SELECT s.* REPLACE (printf('%08x', k) || substr(trace_id, 9) AS trace_id,
                  printf('%08x', k) || substr(request_id, 9) AS request_id,
                  gateway_start + k * $shift AS gateway_start, gateway_end + k * $shift AS gateway_end,
                  queue_start + k * $shift AS queue_start, queue_end + k * $shift AS queue_end)
FROM seed.in_flight s, range($first, $last) t(k)
""",
}
# the deployments whose gateway spans name them: without these a store has no early spans, and its completeness
# falls back to the conservative bound (goodput/analyzer/completeness.py) where the spans in ClickHouse say what is in flight
DUCKDB_ADMISSION = "INSERT INTO admission_spans SELECT * FROM seed.admission_spans"

CLICKHOUSE_REPLICATE = """
INSERT INTO {database:Identifier}.{table:Identifier}
SELECT s.* REPLACE (
    Timestamp + toIntervalNanosecond(k * {shift:UInt64}) AS Timestamp,
    concat(leftPad(lower(hex(toUInt32(k))), 8, '0'), substring(TraceId, 9)) AS TraceId,
    if(mapContains(SpanAttributes, 'llm.request_id'),
       mapUpdate(SpanAttributes, map('llm.request_id', concat(leftPad(lower(hex(toUInt32(k))), 8, '0'),
                                                              substring(SpanAttributes['llm.request_id'], 9)))),
       SpanAttributes) AS SpanAttributes)
FROM {database:Identifier}.{seed:Identifier} AS s, (SELECT number AS k FROM numbers({first:UInt64}, {count:UInt64})) AS copies
"""

SEGMENTS = ("gateway_s", "queue_s", "prefill_s", "decode_s", "send_s", "other_s")
BATCH_COPIES = 8  # copies per INSERT: bounds each statement's memory


def seed_run(work: Path, seconds: float = SECONDS) -> dict:
    """Simulate ``seconds`` of the regression fleet, ingested into a seed DuckDB store; its OTLP spans, releases
    file and counts."""
    from goodput.simulator.config import load_fleet
    from goodput.simulator.run import simulate, write_outputs

    shutil.rmtree(work / "seed", ignore_errors=True)
    paths = write_outputs(simulate(load_fleet(FLEET), seconds), work / "seed")
    db = work / "seed" / "seed.duckdb"
    con = connect(db, threads=2)
    summary = ingest(con, [paths["spans"]])
    con.close()
    return {"spans": str(paths["spans"]), "releases": str(paths["releases"]), "duckdb": str(db),
            "span_count": summary.spans, "requests": summary.requests, "ingest_s": summary.seconds}


def build_duckdb(seed: dict, copies: int, db: Path, memory_limit: str) -> None:
    """The analyzer's store holding ``copies`` copies of the seed run."""
    con = connect(db, threads=2, memory_limit=memory_limit)
    con.execute("ATTACH ? AS seed (READ_ONLY)", [seed["duckdb"]])
    for first in range(0, copies, BATCH_COPIES):
        for text in DUCKDB_REPLICATE.values():
            con.execute(text, {"shift": SHIFT_NS, "first": first, "last": min(first + BATCH_COPIES, copies)})
    con.execute(DUCKDB_ADMISSION)
    con.execute("DETACH seed")
    con.execute("CHECKPOINT")
    con.close()


def clickhouse(path: str, memory_limit: str):
    """The chDB session at ``path``, capped: ``memory_limit`` per query, spilling GROUP BY and ORDER BY at half."""
    from goodput.foundation.clickhouse import connect as ch_connect

    con = ch_connect(f"chdb:{path}")
    cap = _bytes(memory_limit)
    for name, value in (("max_memory_usage", cap), ("max_bytes_before_external_group_by", cap // 2),
                        ("max_bytes_before_external_sort", cap // 2), ("max_threads", 2)):
        con.command(f"SET {name} = {int(value)}")
    return con


def _bytes(text: str) -> int:
    units = {"KB": 10**3, "MB": 10**6, "GB": 10**9, "KIB": 2**10, "MIB": 2**20, "GIB": 2**30}
    t = text.strip().upper()
    for unit, mult in units.items():
        if t.endswith(unit) and t[:-len(unit)].strip().replace(".", "", 1).isdigit():
            return int(float(t[:-len(unit)]) * mult)
    raise SystemExit(f"--memory-limit {text}: expected a size like 4GB or 3.5GiB")


def build_clickhouse(con, seed: dict, copies: int) -> dict:
    """``con``'s table (the Collector's ``otel_traces``) holding ``copies`` copies of the seed run's spans, as its
    exporter writes them (goodput/exporters/otel_traces.py), replicated in the engine; its parts as the inserts left them,
    as a Collector's table has them."""
    from goodput.exporters.otel_traces import TableSpec, create_table, insert_spans
    from goodput.exporters.otlp import decode_json

    spec = TableSpec(database=con.target.database, table=con.target.table)
    seed_spec = TableSpec(database=spec.database, table=f"{spec.table}_seed")
    create_table(con, seed_spec)
    create_table(con, spec)
    t = time.perf_counter()
    with open(seed["spans"], "rb") as f:
        insert_spans(con, (span for line in f if line.strip() for span in decode_json(line)), seed_spec)
    loaded = time.perf_counter() - t
    t = time.perf_counter()
    for first in range(0, copies, BATCH_COPIES):
        con.command(CLICKHOUSE_REPLICATE, {"database": spec.database, "table": spec.table, "seed": seed_spec.table,
                                           "shift": SHIFT_NS, "first": first,
                                           "count": min(BATCH_COPIES, copies - first)})
    replicated = time.perf_counter() - t
    con.command("DROP TABLE {database:Identifier}.{seed:Identifier}", {"database": spec.database, "seed": seed_spec.table})
    size = con.query_df("SELECT sum(bytes_on_disk) AS b, sum(rows) AS r, count() AS parts FROM system.parts "
                        "WHERE database = {db:String} AND table = {t:String} AND active",
                        {"db": spec.database, "t": spec.table}).iloc[0]
    return {"seed_insert_s": round(loaded, 1), "replicate_s": round(replicated, 1),
            "rows": int(size["r"]), "parts": int(size["parts"]), "disk_gib": round(int(size["b"]) / 2**30, 2)}


def child(role: str, **kw) -> dict:
    """Run ``_child(role, kw)`` in a fresh interpreter, so its peak RSS is its own; its figures."""
    proc = subprocess.run([sys.executable, "-c", "import sys, json; from benchmarks.analyzer_scale import _child; "
                           "_child(sys.argv[1], json.loads(sys.argv[2]))", role, json.dumps(kw)],
                          cwd=REPO, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{role}: {proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


class Sampler:
    """Peak RSS of this process (and optionally an engine's own figure) sampled every 10 ms while a step runs."""

    def __init__(self, engine_bytes=None) -> None:
        self.engine_bytes = engine_bytes
        self.rss = self.engine = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.rss = max(self.rss, rss_bytes())
            if self.engine_bytes is not None:
                self.engine = max(self.engine, self.engine_bytes())
            self._stop.wait(0.01)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.rss = max(self.rss, rss_bytes())


def rss_bytes(field: str = "VmRSS") -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) * 1024
    return 0


def _cpu() -> float:
    """CPU seconds of this process, all threads: on a shared box, steadier than wall time."""
    u = resource.getrusage(resource.RUSAGE_SELF)
    return u.ru_utime + u.ru_stime


def _mib(n: int) -> int:
    return round(n / 2**20)


STEPS = ("decompose", "regressions", "triage")


def run_queries(open_con, releases_path: str, engine_bytes=None, progress: str | None = None,
                steps: list[str] | tuple[str, ...] = STEPS) -> dict:
    """Time ``steps`` (of decompose, regressions and triage), each on its own ``open_con()`` (closed after it, as
    one command opens and closes its own: what a backend derives once per command is derived again each step);
    seconds, peak RSS and the answers to compare (each step's figures also appended to ``progress`` as it ends, for
    a run cut short)."""
    from goodput.analyzer.decompose import decompose
    from goodput.analyzer.regressions import scan_regressions
    from goodput.analyzer.releases import load_releases
    from goodput.analyzer.triage import triage

    releases = load_releases(releases_path)
    run = {
        "decompose": lambda con: decompose(con, ["deployment", "tenant"]).records(),
        "regressions": lambda con: [r.record() for r in scan_regressions(con, releases).found],
        "triage": lambda con: triage(con, TRIAGED, releases=releases).record(),
    }
    out, answers = {}, {}
    for name in steps:
        step = run[name]
        with Sampler(engine_bytes) as s:
            t, cpu = time.perf_counter(), _cpu()
            con = open_con()
            try:
                answers[name] = step(con)
            except Exception as e:  # noqa: BLE001 - a step this engine cannot run yet is reported, not fatal
                out[name] = {"not_run": (str(e).strip().splitlines() or [type(e).__name__])[0][:200]}
                continue
            finally:
                con.close()
            seconds, cpu = time.perf_counter() - t, _cpu() - cpu
        out[name] = {"seconds": round(seconds, 2), "cpu_s": round(cpu, 2), "peak_rss_mib": _mib(s.rss)}
        if engine_bytes is not None:
            out[name]["engine_peak_mib"] = _mib(s.engine)
        if progress:
            with open(progress, "a") as f:
                f.write(json.dumps({name: out[name]}) + "\n")
    out["process_peak_rss_mib"] = _mib(rss_bytes("VmHWM"))
    return {"steps": out, "answers": answers}


def _child(role: str, kw: dict) -> None:
    if role == "build-duckdb":
        t = time.perf_counter()
        build_duckdb(kw["seed"], kw["copies"], Path(kw["db"]), kw["memory_limit"])
        res = {"seconds": round(time.perf_counter() - t, 1), "peak_rss_mib": _mib(rss_bytes("VmHWM"))}
    elif role == "build-clickhouse":
        t = time.perf_counter()
        res = build_clickhouse(clickhouse(kw["path"], kw["memory_limit"]), kw["seed"], kw["copies"])
        res.update(seconds=round(time.perf_counter() - t, 1), peak_rss_mib=_mib(rss_bytes("VmHWM")))
    elif role == "query-duckdb":
        con = connect(kw["db"], read_only=True, threads=2, memory_limit=kw["memory_limit"])
        cur = con.cursor()
        res = run_queries(con.cursor, kw["releases"], lambda: cur.execute(
            "SELECT coalesce(sum(memory_usage_bytes), 0) FROM duckdb_memory()").fetchall()[0][0], kw["progress"],
            kw["steps"])
        res["rows"] = con.execute("SELECT (SELECT count(*) FROM requests), (SELECT count(*) FROM segments)").fetchall()[0]
    elif role == "prepare-clickhouse":  # the backfill of `goodput analyze prepare` over the built table
        from goodput.analyzer.prepare import prepare

        con = clickhouse(kw["path"], kw["memory_limit"])
        t, cpu = time.perf_counter(), _cpu()
        said = prepare(con, con.target)
        res = {"seconds": round(time.perf_counter() - t, 1), "cpu_s": round(_cpu() - cpu, 1), "said": said,
               "peak_rss_mib": _mib(rss_bytes("VmHWM")),
               "requests_rows": int(con.query_df("SELECT count() AS n FROM {d:Identifier}.goodput_requests",
                                                 {"d": con.target.database})["n"].iloc[0])}
    elif role == "query-clickhouse":
        from goodput.analyzer.backend import ClickHouseBackend

        con = clickhouse(kw["path"], kw["memory_limit"])
        where = {"database": con.target.database, "table": con.target.table}
        con.command("SYSTEM STOP MERGES {database:Identifier}.{table:Identifier}", where)  # parts as built, while timed
        if kw["prepared"]:
            con.command("SYSTEM STOP MERGES {database:Identifier}.goodput_requests", where)
        res = run_queries(lambda: ClickHouseBackend(con, prepared=kw["prepared"]), kw["releases"],
                          progress=kw["progress"], steps=kw["steps"])
        res["rows"] = int(con.query_df("SELECT count() AS n FROM {database:Identifier}.{table:Identifier}",
                                       where)["n"].iloc[0])
    else:
        raise SystemExit(f"unknown role {role}")
    print(json.dumps(res, default=str))


def growth(small: dict, large: dict) -> dict:
    """Per engine and step: how many times longer the larger N took, and the exponent of N it grew by."""
    ratio = large["spans"] / small["spans"]
    out = {}
    for engine in ("duckdb", "clickhouse", "clickhouse_prepared"):
        if engine not in small or engine not in large:
            continue
        for step, fig in large[engine]["steps"].items():
            before = small[engine]["steps"].get(step)
            if not isinstance(fig, dict) or "seconds" not in fig or not isinstance(before, dict) or "seconds" not in before:
                continue
            a, b = before["seconds"], fig["seconds"]
            out[f"{engine}.{step}"] = {"x_time": round(b / a, 1) if a else None,
                                       "exponent": round(math.log(b / a) / math.log(ratio), 2) if a and b else None}
    return out


def measure(work: Path, seed: dict, spans: int, memory_limit: str, fig: dict, keep: bool = False,
            save=lambda: None, overlap: bool = False, steps: list[str] | tuple[str, ...] = STEPS,
            read_time: bool = True) -> None:
    """Build both stores for ``spans`` and time ``steps`` on each, into ``fig``; ``save`` after every phase, so
    a run cut short keeps what it measured. ``overlap``: build ClickHouse's table while DuckDB's side runs. On
    ClickHouse the steps run read time (unless not ``read_time``), then `goodput analyze prepare` backfills and they
    run again on the prepared tables."""
    copies = max(1, round(spans / seed["span_count"]))
    db = work / f"duckdb-{copies}.duckdb"
    db.unlink(missing_ok=True)
    ch = work / f"chdb-{copies}"
    shutil.rmtree(ch, ignore_errors=True)
    fig.update(spans=copies * seed["span_count"], requests=copies * seed["requests"], copies=copies,
               overlapped_builds=overlap)

    def build_ch() -> None:
        try:
            fig["clickhouse_build"] = child("build-clickhouse", seed=seed, copies=copies, path=str(ch),
                                            memory_limit=memory_limit)
        except SystemExit as e:  # a thread drops SystemExit: keep the child's error for the raise below
            fig["clickhouse_build_error"] = str(e)
        save()

    builder = threading.Thread(target=build_ch)
    if overlap:
        builder.start()
    fig["duckdb_build"] = child("build-duckdb", seed=seed, copies=copies, db=str(db), memory_limit=memory_limit)
    fig["duckdb_build"]["file_gib"] = round(db.stat().st_size / 2**30, 2)
    save()
    q = child("query-duckdb", db=str(db), releases=seed["releases"], memory_limit=memory_limit,
              progress=str(work / f"duckdb-{copies}.progress.jsonl"), steps=list(steps))
    fig["duckdb"] = {"steps": q["steps"], "rows": q["rows"]}
    fig["answers"] = {"duckdb": summarize(q["answers"])}
    save()
    if not keep:
        db.unlink()
    if not overlap:
        builder.start()
    builder.join()
    if "clickhouse_build" not in fig:
        raise SystemExit(fig.get("clickhouse_build_error", "build-clickhouse: no figures"))
    for key, prepared in (("clickhouse", False), ("clickhouse_prepared", True)):
        if prepared:
            fig["clickhouse_prepare"] = child("prepare-clickhouse", path=str(ch), memory_limit=memory_limit)
            save()
        elif not read_time:
            continue
        c = child("query-clickhouse", path=str(ch), releases=seed["releases"], memory_limit=memory_limit,
                  progress=str(work / f"{key}-{copies}.progress.jsonl"), steps=list(steps), prepared=prepared)
        fig[key] = {"steps": c["steps"], "rows": c["rows"]}
        fig["answers"][key] = summarize(c["answers"])
        fig[f"compared_{key}"] = sorted(set(fig["answers"]["duckdb"]) & set(fig["answers"][key]))
        fig[f"disagreements_{key}"] = disagreements(fig["answers"]["duckdb"], fig["answers"][key])
        save()
    if not keep:
        shutil.rmtree(ch, ignore_errors=True)


_SAVING = threading.Lock()  # the ClickHouse build may save from its thread


def _save(out: dict, path: Path | None) -> None:
    with _SAVING:
        if path is None:
            return
        path.write_text(json.dumps(out, indent=2, default=str))


def summarize(answers: dict) -> dict:
    """What must agree between engines: segment means per group, change points, triage's verdict."""
    out = {}
    if "decompose" in answers:
        out["decompose"] = {f"{r['deployment']}/{r['tenant']}": [r[k] for k in SEGMENTS] for r in answers["decompose"]}
    if "regressions" in answers:
        out["regressions"] = sorted(f"{r['deployment']}/{r['tier']} {r['metric']} {r['direction']} @ {r['time']} "
                                    f"({r['release'] if r['blamed'] else 'unexplained'})" for r in answers["regressions"])
    if "triage" in answers:
        out["triage"] = {"regressed": answers["triage"]["regressed"], "verdict": answers["triage"]["verdict"]}
    return out


def disagreements(a: dict, b: dict) -> list[str]:
    """Where two engines' summaries differ: segment means by more than 1 us, or anything else at all; steps
    only one engine ran are not compared."""
    out = []
    for step in sorted(set(a) & set(b)):
        if step != "decompose":
            if a[step] != b[step]:
                out.append(step)
            continue
        for group in sorted(set(a[step]) | set(b[step])):
            x, y = a[step].get(group), b[step].get(group)
            if x is None or y is None or any(u is None or v is None or abs(u - v) > 1e-6 for u, v in zip(x, y, strict=True)):
                out.append(f"decompose {group}")
    return out


def machine() -> dict:
    """What the figures were measured on: cores, CPU, memory, load when the run began, engine versions."""
    import chdb
    import duckdb

    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    cpu = next((line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("model name")), "")
    mem = Path("/proc/meminfo").read_text().split()[1] if Path("/proc/meminfo").exists() else "0"
    return {"cores": os.cpu_count(), "cpu": cpu, "memory_gib": round(int(mem) / 2**20), "load_average_1m": round(
        os.getloadavg()[0], 1), "duckdb": duckdb.__version__, "chdb": chdb.__version__}


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(prog="python -m benchmarks.analyzer_scale", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--spans", type=int, nargs="+", default=[1_000_000, 10_000_000],
                   help="span counts to measure, in order (rounded to whole copies of the simulated run; default "
                        "1M and 10M, minutes as part of `make bench`; the figures in docs/analyzer.md add 100M, hours)")
    p.add_argument("--memory-limit", default="4GB", help="each engine's memory cap (DuckDB memory_limit, "
                   "ClickHouse max_memory_usage)")
    p.add_argument("--previous", type=Path, default=None, help="figures (--json) of an earlier run at a smaller N, "
                   "for the growth from it")
    p.add_argument("--work", type=Path, default=None, help="scratch directory (default: a new temporary one)")
    p.add_argument("--keep", action="store_true", help="leave each N's stores under --work")
    p.add_argument("--overlap-builds", action="store_true", help="build ClickHouse's table while DuckDB's side "
                   "runs (for a short deadline: wall times then share the CPU; CPU seconds stay each engine's)")
    p.add_argument("--steps", nargs="+", choices=STEPS, default=list(STEPS), help="the analyses to time (default "
                   "all three; at 100M, ClickHouse's decompose alone is ~10 CPU minutes)")
    p.add_argument("--no-read-time", action="store_true", help="on ClickHouse time the prepared tables only, not "
                                                                  "the read-time derivation (hours at 100M spans)")
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv if argv is not None else [])
    work = args.work or Path(tempfile.mkdtemp(prefix="goodput-bench-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    t = time.perf_counter()
    seed = seed_run(work)
    out = {"machine": machine(), "seed": {"spans": seed["span_count"], "requests": seed["requests"],
                                          "seconds": round(time.perf_counter() - t, 1),
                                          "duckdb_ingest_spans_per_s": round(seed["span_count"] / seed["ingest_s"])},
           "memory_limit": args.memory_limit, "runs": []}
    if args.previous is not None:
        out["runs"] = json.loads(args.previous.read_text())["runs"]
    for n in args.spans:
        fig: dict = {}
        out["runs"].append(fig)
        measure(work, seed, n, args.memory_limit, fig, args.keep, save=lambda: _save(out, args.json),
                overlap=args.overlap_builds, steps=args.steps, read_time=not args.no_read_time)
    runs = sorted(out["runs"], key=lambda r: r["spans"])
    out["growth"] = {f"{a['spans']}->{b['spans']}": growth(a, b) for a, b in zip(runs, runs[1:], strict=False)}
    if args.work is None and not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return emit("analyzer at scale (2 threads per engine)", out, args.json)


if __name__ == "__main__":
    main(sys.argv[1:])
