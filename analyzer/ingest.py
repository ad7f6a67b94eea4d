"""``goodput analyze ingest``: traces and request records from every format goodput meets, into DuckDB.

Formats: OTLP JSON (one export document per file, or the Collector file exporter's one document per
line), OTLP protobuf (one ExportTraceServiceRequest, or the Collector's 4-byte length-prefixed
stream), the request exporter's Parquet trace store (a directory or files), and the simulator's
``requests.parquet``. Parquet is read by DuckDB itself (streamed, out of core); JSON and protobuf are
decoded in batches, so memory stays bounded whatever the file size. Everything that cannot be used
lands in ``quarantine`` with a reason; ingesting the same data twice adds nothing.
"""

from __future__ import annotations

import json
import struct
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import pyarrow.parquet as pq

from analyzer.store import sql
from exporters.otlp import OtlpError, Span, decode_json, decode_protobuf
from exporters.trace_store import spans_to_arrow
from goodput.foundation.errors import ConfigError

__all__ = ["IngestSummary", "ingest", "input_bytes"]

BATCH_SPANS = 50_000
WHOLE_FILE_LIMIT = 512 * 1024 * 1024


@dataclass
class IngestSummary:
    files: int = 0
    spans: int = 0
    requests: int = 0
    duplicates: int = 0
    quarantined: int = 0
    reasons: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0

    def as_dict(self) -> dict:
        return {"files": self.files, "spans": self.spans, "requests_added": self.requests,
                "duplicates_skipped": self.duplicates, "quarantined": self.quarantined,
                "quarantine_reasons": self.reasons, "seconds": round(self.seconds, 3)}


def _kind(path: Path) -> str:
    if path.is_dir():
        files = sorted(path.rglob("*.parquet"))
        if not files:
            raise ConfigError(str(path), "", "directory holds no Parquet files")
        return _parquet_kind(files[0])
    if path.suffix == ".parquet":
        return _parquet_kind(path)
    with path.open("rb") as f:
        head = f.read(64).lstrip()
    return "json" if head.startswith(b"{") else "protobuf"


def _parquet_kind(path: Path) -> str:
    try:
        names = set(pq.read_schema(path).names)
    except Exception as e:  # noqa: BLE001 - pyarrow raises several types for a bad file
        raise ConfigError(str(path), "", f"not a readable Parquet file: {e}") from None
    if {"trace_id", "span_id", "parent_span_id", "attributes"} <= names:
        return "spans-parquet"
    if {"trace_id", "arrival", "queue_start", "completed", "deployment"} <= names:
        return "simulator-parquet"
    raise ConfigError(str(path), "", "Parquet file is neither a goodput trace store nor a simulator requests.parquet")


def _size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*.parquet")) if path.is_dir() else path.stat().st_size


def input_bytes(paths: list[Path]) -> int:
    """The bytes ``ingest`` will read from ``paths``: the scale of its progress (missing paths count 0)."""
    return sum(_size(p) for p in paths if p.exists())


def _json_docs(path: Path, quarantine: Callable[[str, str], None], read: Callable[[int], None]
               ) -> Iterator[list[Span]]:
    """Spans per document: a file of one (possibly pretty-printed) document, or one per line."""
    with path.open("rb") as f:
        first = f.readline()
        try:
            json.loads(first)
            per_line = True
        except ValueError:
            per_line = False
    if not per_line:
        if path.stat().st_size > WHOLE_FILE_LIMIT:
            quarantine(f"{path}", f"not one JSON document per line and larger than {WHOLE_FILE_LIMIT} bytes")
            return
        try:
            yield decode_json(path.read_bytes())
        except OtlpError as e:
            quarantine(f"{path}", str(e))
        read(path.stat().st_size)
        return
    with path.open("rb") as f:
        for lineno, line in enumerate(f, start=1):
            read(len(line))
            if not line.strip():
                continue
            try:
                yield decode_json(line)
            except OtlpError as e:
                quarantine(f"{path}:{lineno}", str(e))


def _proto_docs(path: Path, quarantine: Callable[[str, str], None], read: Callable[[int], None]
                ) -> Iterator[list[Span]]:
    """The Collector's proto file format ([4-byte big-endian length][message]...), read record by record,
    or else one bare ExportTraceServiceRequest."""
    size = path.stat().st_size
    with path.open("rb") as f:
        i = 0
        while True:
            head = f.read(4)
            if len(head) < 4:
                break
            (n,) = struct.unpack(">I", head)
            body = f.read(n) if n <= size else b""
            try:
                if len(body) != n or (i == 0 and f.tell() > size):
                    raise OtlpError("not length-prefixed")
                spans = decode_protobuf(body)
            except OtlpError as e:
                if i == 0:
                    break  # not the prefixed format: try the whole file as one message below
                quarantine(f"{path}#{i}", str(e))
                read(4 + n)
                i += 1
                continue
            read(4 + n)
            i += 1
            yield spans
        if i > 0:
            return
    if size > WHOLE_FILE_LIMIT:
        quarantine(f"{path}", f"neither length-prefixed OTLP protobuf nor one message under {WHOLE_FILE_LIMIT} bytes")
        return
    try:
        yield decode_protobuf(path.read_bytes())
    except OtlpError as e:
        quarantine(f"{path}", str(e))
    read(size)


def ingest(con: duckdb.DuckDBPyConnection, paths: list[Path],
           progress: Callable[[int, int], None] | None = None) -> IngestSummary:
    """Load ``paths``; ``progress(bytes read, bytes in all inputs)`` is called as it goes."""
    t0 = time.perf_counter()
    for path in paths:
        if not path.exists():
            raise ConfigError(str(path), "", "no such file or directory")
    total = input_bytes(paths)
    done = 0

    def read(n: int) -> None:
        nonlocal done
        done += n
        if progress is not None:
            progress(done, total)

    out = IngestSummary()
    before_q = con.execute("SELECT count(*) FROM quarantine").fetchall()[0][0]
    before_r = con.execute("SELECT count(*) FROM requests").fetchall()[0][0]
    con.execute(sql("stage_spans"))
    span_dups = 0
    sim_rows = sim_added = 0
    for path in paths:
        kind = _kind(path)
        src = str(path)
        out.files += 1

        def quarantine(where: str, reason: str, src: str = src) -> None:
            con.execute("INSERT INTO quarantine (source, trace_id, span_id, reason, detail) VALUES (?, NULL, NULL, ?, ?)",
                        [src, "malformed OTLP payload", f"{where}: {reason}"[:2000]])

        if kind == "spans-parquet":
            glob = str(path / "**" / "*.parquet") if path.is_dir() else str(path)
            _stage_src(con, con.read_parquet(glob, hive_partitioning=True, union_by_name=True), src)
        elif kind == "simulator-parquet":
            con.execute("CREATE OR REPLACE TEMP TABLE sim AS SELECT *, ? AS source FROM read_parquet(?)", [src, src])
            sim_rows += con.execute("SELECT count(*) FROM sim").fetchall()[0][0]
            before_sim = con.execute("SELECT count(*) FROM requests").fetchall()[0][0]
            con.execute(sql("normalize_simulator"))
            sim_added += con.execute("SELECT count(*) FROM requests").fetchall()[0][0] - before_sim
        else:
            docs = (_json_docs if kind == "json" else _proto_docs)(path, quarantine, read)
            batch: list[Span] = []
            for spans in docs:
                batch.extend(spans)
                if len(batch) >= BATCH_SPANS:
                    _stage(con, batch, src)
                    batch = []
            if batch:
                _stage(con, batch, src)
        if kind.endswith("parquet"):
            read(_size(path))
    out.spans = con.execute("SELECT (SELECT count(*) FROM staged_roots) + (SELECT coalesce(sum(spans), 0) FROM "
                            "staged_kids) + (SELECT count(*) FROM staged_other)").fetchall()[0][0]
    if out.spans:
        rows, traces, pairs, known = con.execute(
            "SELECT count(*), count(DISTINCT trace_id), count(DISTINCT (trace_id, span_id)), "
            "count(DISTINCT trace_id) FILTER (WHERE trace_id IN (SELECT trace_id FROM requests)) FROM staged_roots"
        ).fetchall()[0]
        span_dups = rows - pairs + known  # repeated root spans in this run, and requests already in the database
        if rows == traces:  # one root per trace: nothing to de-duplicate
            con.execute("ALTER TABLE staged_roots RENAME TO roots")
        else:
            con.execute("CREATE OR REPLACE TEMP TABLE roots AS SELECT DISTINCT ON (trace_id, span_id) * FROM staged_roots")
        con.execute(sql("normalize_spans"))
    after_r = con.execute("SELECT count(*) FROM requests").fetchall()[0][0]
    out.requests = after_r - before_r
    rows = con.execute("SELECT reason, count(*) FROM quarantine WHERE rowid >= ? GROUP BY reason ORDER BY 2 DESC",
                       [before_q]).fetchall()
    out.reasons = {r: n for r, n in rows}
    out.quarantined = sum(out.reasons.values())
    bad_sim = sum(n for r, n in rows if r.startswith("request has no"))
    out.duplicates = span_dups + (sim_rows - sim_added - bad_sim)
    con.execute("INSERT INTO ingest_log VALUES (?, now(), ?, ?, ?, ?)",
                [", ".join(str(p) for p in paths)[:4000], out.spans + sim_rows, out.requests, out.duplicates,
                 out.quarantined])
    for table in ("staged_roots", "staged_kids", "staged_other", "roots"):
        con.execute(f"DROP TABLE IF EXISTS {table}")
    out.seconds = time.perf_counter() - t0
    return out


def _stage_src(con: duckdb.DuckDBPyConnection, rel, source: str) -> None:
    """Split a relation in the trace store's schema into the staging tables (analyzer/sql/stage_from_src.sql)."""
    con.register("src", rel)
    for stmt in _statements(sql("stage_from_src")):
        con.execute(stmt, {"source": source})
    con.unregister("src")


def _statements(text: str) -> list[str]:
    """The statements of a SQL file (parameters need one execute per statement)."""
    body = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("--"))
    return [s for s in body.split(";") if s.strip()]


def _stage(con: duckdb.DuckDBPyConnection, spans: list[Span], source: str) -> None:
    _stage_src(con, spans_to_arrow(spans), source)
