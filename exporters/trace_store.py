"""The request exporter's trace store: spans as Parquet, partitioned by date and hour, never lost once acknowledged.

An accepted payload is appended to a write-ahead log before the receiver answers 200; spans wait in
a bounded buffer and are flushed to ``DIR/date=YYYY-MM-DD/hour=HH/part-*.parquet`` every few seconds
(and on shutdown), after which their log segment is deleted. On start, leftover log segments are
replayed into Parquet. When the buffer is full, ``accept`` raises ``StoreFull`` (the receiver answers
503 with Retry-After) instead of dropping; after ``close`` began it raises ``StoreClosed``.

Nothing one record holds can stop the writer: a span Arrow cannot take is written aside to
``DIR/_quarantine/spans-<pid>.jsonl`` (with the error) and the rest of its batch is stored; a logged
payload that no longer decodes at replay is written aside whole. A flush that fails for the disk's sake
keeps its spans buffered and its log segments, is retried, and ``health`` names it until one succeeds.

Layout (hive partitioning, readable by DuckDB, Trino or Spark)::

    DIR/date=2026-11-23/hour=09/part-<unix ms>-<seq>.parquet
    DIR/_wal/segment-<n>.wal          # [4-byte length][1-byte kind: J|P][payload] records
    DIR/_quarantine/spans-<pid>.jsonl # {"error", "span"} per span that could not be written
    DIR/_quarantine/wal-<segment>-<offset>.<json|pb>  # a logged payload that no longer decodes
"""

from __future__ import annotations

import json
import logging
import os
import struct
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from exporters.otlp import Span, decode_json, decode_protobuf

__all__ = ["SCHEMA", "StoreClosed", "StoreFull", "TraceStore", "spans_to_arrow"]

log = logging.getLogger(__name__)

SCHEMA = pa.schema([
    ("trace_id", pa.string()), ("span_id", pa.string()), ("parent_span_id", pa.string()), ("name", pa.string()),
    ("kind", pa.int8()), ("start_time_unix_nano", pa.int64()), ("end_time_unix_nano", pa.int64()),
    ("status_code", pa.int8()), ("status_message", pa.string()), ("service_name", pa.string()),
    ("attributes", pa.map_(pa.string(), pa.string())), ("resource", pa.map_(pa.string(), pa.string())),
])
_HEADER = struct.Struct(">IB")


class StoreFull(Exception):
    """The buffer is at its limit; retry after ``retry_after`` seconds."""

    def __init__(self, retry_after: float) -> None:
        super().__init__(f"trace store buffer full; retry after {retry_after:.0f} s")
        self.retry_after = retry_after


class StoreClosed(StoreFull):
    """The store is shutting down: its last flush has begun, so nothing more can be made durable here."""

    def __init__(self, retry_after: float) -> None:
        super().__init__(retry_after)
        self.args = (f"trace store shutting down; retry after {retry_after:.0f} s",)


class _WriteFailed(Exception):
    """Writing Parquet failed (disk, permissions): ``rows`` were not written."""

    def __init__(self, rows: list[Span], cause: Exception) -> None:
        super().__init__(f"{type(cause).__name__}: {cause}")
        self.rows = rows


_HOUR_NS = 3_600_000_000_000


def spans_to_arrow(rows: list[Span]) -> pa.Table:
    """Spans as a table in the store's schema (also what the analyzer stages)."""
    return pa.table({
        "trace_id": [s.trace_id for s in rows], "span_id": [s.span_id for s in rows],
        "parent_span_id": [s.parent_span_id for s in rows], "name": [s.name for s in rows],
        "kind": [s.kind for s in rows], "start_time_unix_nano": [s.start_ns for s in rows],
        "end_time_unix_nano": [s.end_ns for s in rows], "status_code": [s.status_code for s in rows],
        "status_message": [s.status_message for s in rows], "service_name": [s.service_name for s in rows],
        "attributes": _map_array([s.attributes for s in rows]),
        "resource": _map_array([s.resource for s in rows]),
    }, schema=SCHEMA)


def _text(v) -> str:
    return v if v.__class__ is str else ("true" if v else "false") if v.__class__ is bool else str(v)


def _map_array(dicts: list[dict]) -> pa.MapArray:
    """A map<string, string> column built from flat key and value lists (far cheaper than lists of pairs)."""
    offsets, keys, values, n = [0], [], [], 0
    for d in dicts:
        keys.extend(d)
        values.extend(map(_text, d.values()))
        n += len(d)
        offsets.append(n)
    return pa.MapArray.from_arrays(pa.array(offsets, pa.int32()), pa.array(keys, pa.string()),
                                   pa.array(values, pa.string()))


def _quarantine_line(span: Span, error: Exception) -> str:
    """One JSON line for a span the store could not take: every field, anything odd as its repr."""
    fields = {f: getattr(span, f) for f in Span.__slots__}
    fields["attributes"] = {str(k): v for k, v in span.attributes.items()}
    fields["resource"] = {str(k): v for k, v in span.resource.items()}
    rec = {"error": f"{type(error).__name__}: {error}", "span": fields}
    try:
        return json.dumps(rec, default=repr, ensure_ascii=True)
    except (TypeError, ValueError):  # e.g. a nested key JSON cannot hold
        return json.dumps({"error": rec["error"], "span": repr(span)}, ensure_ascii=True)


class TraceStore:
    def __init__(self, root: Path, *, max_buffered_spans: int = 200_000, flush_interval_s: float = 2.0,
                 fsync: bool = False, on_flush: Callable[[int], None] | None = None) -> None:
        self.root = Path(root)
        self.wal_dir = self.root / "_wal"
        self.quarantine_dir = self.root / "_quarantine"
        self.wal_dir.mkdir(parents=True, exist_ok=True)
        self.max_buffered = max_buffered_spans
        self.flush_interval = flush_interval_s
        self.fsync = fsync
        self.on_flush = on_flush
        self.lock = threading.Lock()
        self.flush_lock = threading.Lock()
        self.buffer: list[Span] = []
        self.flushed_total = 0
        self.quarantined_total = 0
        self.error: str | None = None  # why the last flush failed; None once one succeeds
        self._closed = False
        self._seq = 0
        existing = sorted(self.wal_dir.glob("segment-*.wal"))
        self._segment_no = (int(existing[-1].stem.split("-")[1]) + 1) if existing else 0
        self._wal, self._wal_path = self._open_segment()
        self._done_segments: list[Path] = []  # closed segments whose spans are not all in Parquet yet
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.recovered = self._recover(existing)

    # ------------------------------------------------------------------ write-ahead log

    def _open_segment(self):
        path = self.wal_dir / f"segment-{self._segment_no:08d}.wal"
        self._segment_no += 1
        return open(path, "ab", buffering=0), path

    def _recover(self, segments: list[Path]) -> int:
        """Buffer the spans of leftover segments and flush them; a payload that no longer decodes is quarantined."""
        spans = []
        for seg in segments:
            data = seg.read_bytes()
            pos = 0
            while pos + _HEADER.size <= len(data):
                size, kind = _HEADER.unpack_from(data, pos)
                payload = data[pos + _HEADER.size: pos + _HEADER.size + size]
                if len(payload) < size:
                    break  # torn final record: it was never acknowledged
                try:
                    spans.extend(decode_protobuf(payload) if kind == ord("P") else decode_json(payload))
                except ValueError as e:
                    self._quarantine_payload(f"wal-{seg.stem}-{pos}.{'pb' if kind == ord('P') else 'json'}",
                                             payload, e)
                pos += _HEADER.size + size
        self.buffer.extend(spans)
        self._done_segments.extend(segments)
        if spans or segments:
            self.flush()
        return len(spans)

    # ------------------------------------------------------------------ quarantine

    def _quarantine_payload(self, name: str, payload: bytes, error: Exception) -> None:
        self.quarantine_dir.mkdir(exist_ok=True)
        (self.quarantine_dir / name).write_bytes(payload)
        self.quarantined_total += 1
        log.warning("trace store: quarantined a logged payload as %s: %s", self.quarantine_dir / name, error)

    def _quarantine_spans(self, bad: list[tuple[Span, Exception]]) -> None:
        self.quarantine_dir.mkdir(exist_ok=True)
        path = self.quarantine_dir / f"spans-{os.getpid()}.jsonl"
        with open(path, "a", encoding="utf-8") as f:
            for span, error in bad:
                f.write(_quarantine_line(span, error) + "\n")
            f.flush()
            os.fsync(f.fileno())
        self.quarantined_total += len(bad)
        log.warning("trace store: quarantined %d span(s) in %s: %s", len(bad), path, bad[0][1])

    def _table(self, rows: list[Span]) -> tuple[pa.Table, list[Span]]:
        """``rows`` in the store's schema, and the rows in it; rows Arrow cannot take are quarantined."""
        try:
            return spans_to_arrow(rows), rows
        except Exception:  # noqa: BLE001 - whatever one record does, the others are stored
            good, bad = [], []
            for s in rows:
                try:
                    spans_to_arrow([s])
                    good.append(s)
                except Exception as e:  # noqa: BLE001
                    bad.append((s, e))
            self._quarantine_spans(bad)
            return spans_to_arrow(good), good

    # ------------------------------------------------------------------ accept / flush

    @property
    def buffered(self) -> int:
        return len(self.buffer)

    def accept(self, spans: list[Span], payload: bytes, kind: str) -> None:
        """Log ``payload`` durably and buffer ``spans``; after this returns they will reach Parquet."""
        if not spans:
            return
        with self.lock:
            if self._closed:
                raise StoreClosed(max(1.0, self.flush_interval))
            if len(self.buffer) + len(spans) > self.max_buffered:
                raise StoreFull(max(1.0, self.flush_interval))
            self._wal.write(_HEADER.pack(len(payload), ord(kind)) + payload)
            if self.fsync:
                os.fsync(self._wal.fileno())
            self.buffer.extend(spans)

    def flush(self) -> int:
        """Write everything buffered so far to Parquet; returns the number of spans stored (not quarantined).

        Log segments are deleted only once all their spans are written; on a write error the unwritten spans go
        back to the buffer, ``error`` says why, and the next flush tries again."""
        with self.flush_lock:
            with self.lock:
                new_wal, new_path = self._open_segment()
                batch, self.buffer = self.buffer, []
                old_wal, self._wal = self._wal, new_wal
                self._done_segments.append(self._wal_path)
                self._wal_path = new_path
            old_wal.close()
            quarantined = self.quarantined_total
            try:
                if batch:
                    self._write(batch)
            except _WriteFailed as e:
                with self.lock:
                    self.buffer[:0] = e.rows
                self.error = str(e)
                log.error("trace store: flush failed, %d span(s) kept for the next try: %s", len(e.rows), e)
                stored = len(batch) - len(e.rows) - (self.quarantined_total - quarantined)
                self.flushed_total += stored
                return stored
            self.error = None
            for seg in self._done_segments:
                seg.unlink(missing_ok=True)
            self._done_segments.clear()
            stored = len(batch) - (self.quarantined_total - quarantined)
            self.flushed_total += stored
            if self.on_flush is not None and stored:
                self.on_flush(stored)
            return stored

    def _write(self, spans: list[Span]) -> None:
        parts: dict[int, list[Span]] = {}
        for s in spans:
            hour = s.start_ns // _HOUR_NS
            rows = parts.get(hour)
            if rows is None:
                rows = parts[hour] = []
            rows.append(s)
        pending = list(parts.values())
        for i, (hour, rows) in enumerate(parts.items()):
            tmp = None
            try:
                table, rows = self._table(rows)
                if not rows:
                    continue
                ts = datetime.fromtimestamp(hour * 3600, UTC)
                d = self.root / f"date={ts:%Y-%m-%d}" / f"hour={ts:%H}"
                d.mkdir(parents=True, exist_ok=True)
                self._seq += 1
                final = d / f"part-{int(time.time() * 1000)}-{os.getpid()}-{self._seq:06d}.parquet"
                tmp = final.with_suffix(".parquet.tmp")
                pq.write_table(table, tmp, compression="zstd")
                os.replace(tmp, final)
            except Exception as e:  # noqa: BLE001 - the disk said no: keep what is left for the next flush
                if tmp is not None:
                    tmp.unlink(missing_ok=True)
                raise _WriteFailed(rows + [s for r in pending[i + 1:] for s in r], e) from e

    # ------------------------------------------------------------------ health and lifecycle

    def health(self) -> str | None:
        """Why the store cannot be trusted right now, or None: a dead flush thread or a failing flush."""
        if self._thread is not None and not self._thread.is_alive() and not self._closed:
            return "trace store flush thread is not running"
        if self.error is not None:
            return f"trace store flush failing: {self.error}"
        return None

    def start(self) -> TraceStore:
        def loop() -> None:
            while not self._stop.wait(self.flush_interval):
                try:
                    self.flush()
                except Exception as e:  # noqa: BLE001 - e.g. no new log segment: say so, keep trying
                    self.error = f"{type(e).__name__}: {e}"
                    log.exception("trace store: flush failed")

        self._thread = threading.Thread(target=loop, name="trace-store-flush", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        """Refuse further spans, flush what was accepted, and remove the log if everything reached Parquet."""
        with self.lock:
            self._closed = True
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.flush_interval + 30)
        self.flush()
        self._wal.close()
        if self.error is None:
            self._wal_path.unlink(missing_ok=True)
        else:
            log.error("trace store: closed with %d span(s) only in the write-ahead log (%s); they are replayed at "
                      "the next start", len(self.buffer), self.error)
