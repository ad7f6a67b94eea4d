"""``goodput analyze ingest``: traces and request records from every format goodput meets, into DuckDB.

Formats: OTLP JSON (one export document per file, or the Collector file exporter's one document per
line), OTLP protobuf (one ExportTraceServiceRequest, or the Collector's 4-byte length-prefixed
stream), the request exporter's Parquet trace store (a directory or files), and the simulator's
``requests.parquet``; a directory is read file by file (by extension). Parquet is read by DuckDB itself
(streamed, out of core), and so are OTLP JSON lines whose every record DuckDB reads as the Python decoder
would (no Python per span); other JSON, and protobuf, are decoded in Python in batches, so memory stays
bounded whatever the file size. A malformed span is quarantined with its file, line and reason and the rest of its document
is kept; a request whose early spans (``llm.gateway``, ``llm.queue``) came without its root is in flight,
kept in ``in_flight`` until a later run brings the root; spans of other services are context, counted as
ignored; ingesting the same data twice adds nothing.
"""

from __future__ import annotations

import bisect
import json
import struct
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from goodput.analyzer.sqlfiles import sql
from goodput.exporters.otlp import OtlpError, Span, decode_json, decode_protobuf
from goodput.exporters.parquet_sink import spans_to_arrow
from goodput.foundation.errors import ConfigError
from goodput.foundation.jsonfile import parse_json

__all__ = ["IngestSummary", "ingest", "input_bytes"]

BATCH_SPANS = 50_000
WHOLE_FILE_LIMIT = 512 * 1024 * 1024
JSON_SUFFIXES = (".json", ".jsonl", ".ndjson")
PROTO_SUFFIXES = (".pb", ".binpb", ".proto", ".protobuf")
MAX_INT64 = 2**63 - 1

Quarantine = Callable[[str, str], None]


@dataclass
class IngestSummary:
    files: int = 0
    skipped_files: int = 0
    spans: int = 0
    requests: int = 0
    retried: int = 0  # requests added that were a retry or fallback of an earlier call in their trace
    duplicates: int = 0
    quarantined: int = 0
    in_flight: int = 0  # requests admitted (their early spans are in) whose root has not arrived, after this run
    new_in_flight: int = 0  # of those, how many this run added
    reasons: dict[str, int] = field(default_factory=dict)
    ignored: int = 0
    ignored_reasons: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def usable(self) -> bool:
        """Whether anything in the input was a request (new, already known, or newly in flight)."""
        return self.requests + self.duplicates + self.new_in_flight > 0

    def as_dict(self) -> dict:
        return {"files": self.files, "skipped_files": self.skipped_files, "spans": self.spans,
                "requests_added": self.requests, "retries": self.retried, "duplicates_skipped": self.duplicates,
                "quarantined": self.quarantined, "in_flight": self.in_flight, "new_in_flight": self.new_in_flight,
                "quarantine_reasons": self.reasons,
                "ignored": self.ignored,
                "ignored_reasons": self.ignored_reasons, "seconds": round(self.seconds, 3)}


def _sniff(path: Path) -> str:
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


def _files(root: Path) -> list[Path]:
    """The files below a directory, hidden ones and those under ``_``-named folders (the store's ``_wal``) left out."""
    return sorted(p for p in root.rglob("*") if p.is_file() and not any(part.startswith((".", "_"))
                                                                        for part in p.relative_to(root).parts))


def _traces(files: list[Path]) -> list[Path]:
    return [f for f in files if f.suffix in (".parquet", *JSON_SUFFIXES, *PROTO_SUFFIXES)]


def _plan(path: Path) -> tuple[list[tuple[str, list[Path]]], int]:
    """What to read under ``path``: (kind, files) groups — a directory's trace-store Parquet files are one
    group, read by DuckDB in one scan — and how many files of a directory were skipped (unknown suffix)."""
    if not path.is_dir():
        return [(_sniff(path), [path])], 0
    files = _files(path)
    traces = _traces(files)
    groups: list[tuple[str, list[Path]]] = []
    store: list[Path] = []
    for f in traces:
        kind = _sniff(f)
        if kind == "spans-parquet":
            store.append(f)
        else:
            groups.append((kind, [f]))
    skipped = len(files) - len(traces)
    if store:
        groups.insert(0, ("spans-parquet", store))
    if not groups:
        raise ConfigError(str(path), "", "directory holds no trace files (.parquet, .json, .jsonl, .ndjson, .pb, .binpb)")
    return groups, skipped


def _size(path: Path) -> int:
    return sum(f.stat().st_size for f in _traces(_files(path))) if path.is_dir() else path.stat().st_size


def input_bytes(paths: list[Path]) -> int:
    """The bytes ``ingest`` will read from ``paths``: the scale of its progress (missing paths count 0)."""
    return sum(_size(p) for p in paths if p.exists())


# ---------------------------------------------------------------------- OTLP JSON


def _json_spans(text: bytes, where: str, quarantine: Quarantine) -> list[Span]:
    """The spans of one JSON document; when it does not decode whole, each span on its own (the bad ones
    quarantined with their path in the document)."""
    try:
        return decode_json(text)
    except OtlpError as e:
        whole = str(e)
    try:
        doc = parse_json(text, where)
    except ConfigError:
        doc = None
    if not isinstance(doc, dict) or not isinstance(doc.get("resourceSpans"), list):
        quarantine(where, whole)
        return []
    out: list[Span] = []
    for i, rs in enumerate(doc["resourceSpans"]):
        scopes = rs.get("scopeSpans") if isinstance(rs, dict) else None
        if not isinstance(scopes, list):
            quarantine(f"{where} resourceSpans[{i}]", "expected an object with a scopeSpans list")
            continue
        for j, ss in enumerate(scopes):
            spans = ss.get("spans") if isinstance(ss, dict) else None
            if not isinstance(spans, list):
                quarantine(f"{where} resourceSpans[{i}].scopeSpans[{j}]", "expected an object with a spans list")
                continue
            for k, s in enumerate(spans):
                one = {"resourceSpans": [{"resource": rs.get("resource"), "scopeSpans": [{"spans": [s]}]}]}
                try:
                    out.extend(decode_json(json.dumps(one)))
                except (OtlpError, TypeError, ValueError) as e:
                    path = f"resourceSpans[{i}].scopeSpans[{j}].spans[{k}]"
                    reason = str(e).replace("resourceSpans[0].scopeSpans[0].spans[0]", path) \
                        .replace("resourceSpans[0]", f"resourceSpans[{i}]")
                    quarantine(where, reason if reason.startswith(path) else f"{path}: {reason}")
    return out


def _json_docs(path: Path, quarantine: Quarantine, read: Callable[[int], None]) -> Iterator[tuple[str, list[Span]]]:
    """(where, spans) per document: a file of one (possibly pretty-printed) document, or one per line."""
    with path.open("rb") as f:
        first = f.readline()
        try:
            parse_json(first, str(path))
            per_line = True
        except ConfigError:
            per_line = False
    if not per_line:
        if path.stat().st_size > WHOLE_FILE_LIMIT:
            quarantine(f"{path}", f"not one JSON document per line and larger than {WHOLE_FILE_LIMIT} bytes")
            return
        yield str(path), _json_spans(path.read_bytes(), str(path), quarantine)
        read(path.stat().st_size)
        return
    with path.open("rb") as f:
        for lineno, line in enumerate(f, start=1):
            read(len(line))
            if line.strip():
                where = f"{path}:{lineno}"
                yield where, _json_spans(line, where, quarantine)


# ---------------------------------------------------------------------- OTLP JSON, read by DuckDB

_INT = ("UBIGINT", "BIGINT")
_STR = ("VARCHAR",)
_EMPTY = ["NULL"]  # json_structure of an empty list
# Numbers or decimal strings, both as OTLP JSON allows: json_structure says "JSON" where a field is both
# (otlp_json.sql checks the text of each; a fraction is `suspect`)
_DECIMAL = (*_STR, *_INT, "JSON")
# The JSON types decode_json reads each field as (lists as one-element lists, objects as dicts); other fields of an
# object are ignored by both, but an AnyValue holds exactly one of these (array, kvlist and bytes values are
# decoded in Python, which writes them as their repr). A status is "JSON" where some are {} and others not.
_VALUE = {"stringValue": _STR, "intValue": _DECIMAL, "doubleValue": ("DOUBLE", *_INT), "boolValue": ("BOOLEAN",)}
_KV = [{"key": _STR, "value": _VALUE}]
_STATUS = {"code": _DECIMAL, "message": _STR}
_SHAPE = {"resourceSpans": [{"resource": {"attributes": _KV}, "scopeSpans": [{"spans": [{
    "traceId": _STR, "spanId": _STR, "parentSpanId": _STR, "name": _STR, "kind": _DECIMAL,
    "startTimeUnixNano": _DECIMAL, "endTimeUnixNano": _DECIMAL, "status": _STATUS, "attributes": _KV}]}]}]}


def _fits(shape, want) -> bool:
    """Whether a json_structure ``shape`` is one ``want`` (a _SHAPE node) allows."""
    if isinstance(want, tuple):
        return isinstance(shape, str) and shape in want
    if isinstance(want, list):
        return shape == _EMPTY or isinstance(shape, list) and len(shape) == 1 and _fits(shape[0], want[0])
    if want is _STATUS and shape == "JSON":
        return True  # its fields' text is checked by otlp_json.sql, and `suspect` holds any status not an object
    if not isinstance(shape, dict):
        return False
    if want is _VALUE and not shape.keys() <= want.keys():
        return False
    return all(_fits(v, want[k]) for k, v in shape.items() if k in want)


def _json_by_duckdb(con: duckdb.DuckDBPyConnection, path: Path, source: str) -> bool:
    """Stage the OTLP JSON lines of ``path`` read by DuckDB (goodput/analyzer/sql/otlp_json.sql); False, with nothing
    staged, when any document is one that only the Python decoder reads right (malformed, or odd)."""
    *macros, docs, spans = _statements(sql("otlp_json"))  # the documents' shapes, then their spans
    try:
        for stmt in macros:
            con.execute(stmt)
        suspect, shapes = con.execute(docs, {"path": str(path)}).fetchall()[0]
        if suspect or not all(_fits(json.loads(s), _SHAPE) for s in shapes or []):
            return False
        con.execute(spans, {"path": str(path)})
        if _count(con, "SELECT count(*) FROM otlp_spans WHERE ok IS NOT true"):
            return False
        _stage_src(con, con.table("otlp_spans"), source)
        return True
    except duckdb.Error:  # not JSON lines, a duplicate attribute key: the Python decoder says what and where
        return False
    finally:
        con.execute("DROP TABLE IF EXISTS otlp_spans")


# ---------------------------------------------------------------------- OTLP protobuf


def _proto_spans(body: bytes, where: str, quarantine: Quarantine) -> list[Span] | None:
    """The spans of one ExportTraceServiceRequest, each bad span quarantined; None if it is not one at all."""
    try:
        return decode_protobuf(body)
    except OtlpError:
        pass
    req = ExportTraceServiceRequest()
    try:
        req.ParseFromString(body)
    except DecodeError:
        return None
    out: list[Span] = []
    for i, rs in enumerate(req.resource_spans):
        for j, ss in enumerate(rs.scope_spans):
            for k, s in enumerate(ss.spans):
                one = ExportTraceServiceRequest()
                r = one.resource_spans.add()
                r.resource.CopyFrom(rs.resource)
                r.scope_spans.add().spans.add().CopyFrom(s)
                try:
                    out.extend(decode_protobuf(one.SerializeToString()))
                except OtlpError as e:
                    quarantine(f"{where} resourceSpans[{i}].scopeSpans[{j}].spans[{k}]", str(e))
    return out


def _proto_docs(path: Path, quarantine: Quarantine, read: Callable[[int], None]) -> Iterator[tuple[str, list[Span]]]:
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
            where = f"{path}#{i}"
            spans = _proto_spans(body, where, quarantine) if len(body) == n and not (i == 0 and f.tell() > size) else None
            if spans is None:
                if i == 0:
                    break  # not the prefixed format: try the whole file as one message below
                quarantine(where, "not an OTLP ExportTraceServiceRequest (protobuf)")
            read(4 + n)
            i += 1
            if spans is not None:
                yield where, spans
        if i > 0:
            return
    if size > WHOLE_FILE_LIMIT:
        quarantine(f"{path}", f"neither length-prefixed OTLP protobuf nor one message under {WHOLE_FILE_LIMIT} bytes")
        return
    spans = _proto_spans(path.read_bytes(), str(path), quarantine)
    if spans is None:
        quarantine(f"{path}", "not an OTLP ExportTraceServiceRequest (protobuf), bare or length-prefixed")
    else:
        yield str(path), spans
    read(size)


# ---------------------------------------------------------------------- staging


def _problem(s: Span) -> str:
    """Why a decoded span does not fit the trace store's schema (the slow path, after a batch failed)."""
    if not 0 <= s.kind <= 5:
        return f"kind {s.kind} is not an OTLP span kind (0-5)"
    if not 0 <= s.status_code <= 2:
        return f"status code {s.status_code} is not an OTLP status code (0-2)"
    for name, v in (("startTimeUnixNano", s.start_ns), ("endTimeUnixNano", s.end_ns)):
        if not 0 <= v <= MAX_INT64:
            return f"{name} {v} is outside 0 .. 2^63-1"
    for d in (s.attributes, s.resource):
        bad = next((k for k in d if not isinstance(k, str)), None)
        if bad is not None:
            return f"attribute key {bad!r} is not a string"
    try:
        json.dumps([s.name, s.service_name, s.status_message, s.attributes, s.resource], default=str,
                   ensure_ascii=False).encode()
    except UnicodeEncodeError as e:
        return f"text is not valid Unicode ({e.reason}, e.g. a lone surrogate)"
    return ""


class _Batch:
    """Decoded spans waiting to be staged, with the document each came from (for quarantine)."""

    def __init__(self) -> None:
        self.spans: list[Span] = []
        self.starts: list[int] = []
        self.wheres: list[str] = []

    def add(self, where: str, spans: list[Span]) -> None:
        if spans:
            self.starts.append(len(self.spans))
            self.wheres.append(where)
            self.spans.extend(spans)

    def table(self, quarantine: Quarantine) -> pa.Table:
        """The batch as Arrow; spans that do not convert are quarantined one by one, the rest kept."""
        try:
            return spans_to_arrow(self.spans)
        except (pa.ArrowException, OverflowError, TypeError, ValueError, UnicodeError) as e:
            first = e
        good = []
        for n, s in enumerate(self.spans):
            try:
                reason = _problem(s)
                if not reason:
                    spans_to_arrow([s])
            except (pa.ArrowException, OverflowError, TypeError, ValueError, UnicodeError) as e:
                reason = str(e) or str(first)
            if reason:
                d = bisect.bisect_right(self.starts, n) - 1
                quarantine(f"{self.wheres[d]} span {n - self.starts[d]} ({s.name!r})", reason)
            else:
                good.append(s)
        return spans_to_arrow(good)


def _statements(text: str) -> list[str]:
    """The statements of a SQL file (parameters need one execute per statement)."""
    body = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("--"))
    return [s for s in body.split(";") if s.strip()]


def _stage_src(con: duckdb.DuckDBPyConnection, rel, source: str) -> None:
    """Split a relation in the trace store's schema into the staging tables (goodput/analyzer/sql/stage_from_src.sql)."""
    con.register("src", rel)
    for stmt in _statements(sql("stage_from_src")):
        con.execute(stmt, {"source": source})
    con.unregister("src")


def _count(con: duckdb.DuckDBPyConnection, query: str, params: list | None = None) -> int:
    return con.execute(query, params or []).fetchall()[0][0]


def _stage_otlp(con: duckdb.DuckDBPyConnection, kind: str, path: Path, source: str, quarantine: Quarantine,
                read: Callable[[int], None]) -> None:
    """Stage an OTLP file: JSON lines read by DuckDB when it reads them as the Python decoder would, otherwise (and
    protobuf) decoded in Python in batches, each bad record quarantined."""
    if kind == "json" and _json_by_duckdb(con, path, source):
        read(path.stat().st_size)
        return
    batch = _Batch()
    for where, spans in (_json_docs if kind == "json" else _proto_docs)(path, quarantine, read):
        batch.add(where, spans)
        if len(batch.spans) >= BATCH_SPANS:
            _stage_src(con, batch.table(quarantine), source)
            batch = _Batch()
    if batch.spans:
        _stage_src(con, batch.table(quarantine), source)


# ---------------------------------------------------------------------- ingest


def ingest(con: duckdb.DuckDBPyConnection, paths: list[Path],
           progress: Callable[[int, int], None] | None = None) -> IngestSummary:
    """Load ``paths``; ``progress(bytes read, bytes in all inputs)`` is called as it goes."""
    t0 = time.perf_counter()
    for path in paths:
        if not path.exists():
            raise ConfigError(str(path), "", "no such file or directory")
    plans = [_plan(p) for p in paths]
    total = input_bytes(paths)
    done = 0

    def read(n: int) -> None:
        nonlocal done
        done += n
        if progress is not None:
            progress(done, total)

    out = IngestSummary()
    before_q = _count(con, "SELECT count(*) FROM quarantine")
    before_r = _count(con, "SELECT count(*) FROM requests")
    con.execute("CREATE OR REPLACE TEMP TABLE in_flight_before AS SELECT trace_id, parent_span_id FROM in_flight")
    con.execute(sql("stage_spans"))
    sim_rows = sim_added = 0
    for groups, skipped in plans:
        out.skipped_files += skipped
        for kind, files in groups:
            out.files += len(files)
            src = str(files[0]) if len(files) == 1 else str(files[0].parent)

            def quarantine(where: str, reason: str, src: str = src) -> None:
                con.execute("INSERT INTO quarantine (source, trace_id, span_id, reason, detail) "
                            "VALUES (?, NULL, NULL, ?, ?)", [src, "malformed OTLP payload", f"{where}: {reason}"[:2000]])

            if kind == "spans-parquet":
                _stage_src(con, con.read_parquet([str(f) for f in files], union_by_name=True), src)
            elif kind == "simulator-parquet":
                con.execute("CREATE OR REPLACE TEMP TABLE sim AS SELECT *, ? AS source FROM read_parquet(?)", [src, src])
                sim_rows += _count(con, "SELECT count(*) FROM sim")
                before_sim = _count(con, "SELECT count(*) FROM requests")
                con.execute(sql("normalize_simulator"))
                sim_added += _count(con, "SELECT count(*) FROM requests") - before_sim
            else:
                _stage_otlp(con, kind, files[0], src, quarantine, read)
            if kind.endswith("parquet"):
                read(sum(f.stat().st_size for f in files))
    span_dups = _normalize_spans(con, out)
    out.requests = _count(con, "SELECT count(*) FROM requests") - before_r
    out.retried = _count(con, "SELECT count(*) FROM requests WHERE rowid >= ? AND retries > 0", [before_r])
    rows = con.execute("SELECT reason, count(*) FROM quarantine WHERE rowid >= ? GROUP BY reason ORDER BY 2 DESC",
                       [before_q]).fetchall()
    out.reasons = {r: n for r, n in rows}
    out.quarantined = sum(out.reasons.values())
    out.in_flight = _count(con, "SELECT count(*) FROM in_flight")
    out.new_in_flight = _count(con, "SELECT count(*) FROM in_flight WHERE (trace_id, parent_span_id) NOT IN "
                                    "(SELECT (trace_id, parent_span_id) FROM in_flight_before)")
    bad_sim = sum(n for r, n in rows if r.startswith("request has no"))
    out.duplicates = span_dups + (sim_rows - sim_added - bad_sim)
    con.execute("INSERT INTO ingest_log VALUES (?, now(), ?, ?, ?, ?)",
                [", ".join(str(p) for p in paths)[:4000], out.spans + sim_rows, out.requests, out.duplicates,
                 out.quarantined])
    for table in ("staged_engine", "staged_kids", "staged_context", "ignored", "known", "new_requests",
                  "in_flight_before"):
        con.execute(f"DROP TABLE IF EXISTS {table}")
    out.seconds = time.perf_counter() - t0
    return out


def _normalize_spans(con: duckdb.DuckDBPyConnection, out: IngestSummary) -> int:
    """Staged spans -> requests (goodput/analyzer/sql/normalize_spans.sql); fills the span counts of ``out`` and
    returns how many engine calls were already known (repeated in this run, or in the database)."""
    out.spans = _count(con, "SELECT (SELECT count(*) FROM staged_engine) + (SELECT coalesce(sum(spans), 0) FROM "
                            "staged_kids) + (SELECT count(*) FROM staged_context)")
    if not out.spans:
        return 0
    rows, pairs = con.execute("SELECT count(*), count(DISTINCT (trace_id, span_id)) FROM staged_engine").fetchall()[0]
    if rows == pairs:  # nothing repeated: nothing to de-duplicate
        con.execute("ALTER TABLE staged_engine RENAME TO engine")
    else:
        con.execute("CREATE OR REPLACE TEMP TABLE engine AS SELECT DISTINCT ON (trace_id, span_id) * FROM staged_engine")
    con.execute(sql("normalize_spans"))
    out.ignored_reasons = {r: n for r, n in con.execute("SELECT reason, spans FROM ignored WHERE spans > 0").fetchall()}
    out.ignored = sum(out.ignored_reasons.values())
    return rows - pairs + _count(con, "SELECT calls FROM known")
