"""The request exporter's trace store: spans as Parquet, partitioned by date and hour, never lost once acknowledged.

An accepted payload is appended to a write-ahead log before the receiver answers 200; spans wait in
a bounded buffer and are flushed to ``DIR/date=YYYY-MM-DD/hour=HH/part-*.parquet`` every few seconds
(and on shutdown), after which their log segment is deleted. On start, leftover log segments are
replayed into Parquet. When the buffer is full, ``accept`` raises ``StoreFull`` (the receiver answers
503 with Retry-After) instead of dropping.

Layout (hive partitioning, readable by DuckDB, Trino or Spark)::

    DIR/date=2026-11-23/hour=09/part-<unix ms>-<seq>.parquet
    DIR/_wal/segment-<n>.wal          # [4-byte length][1-byte kind: J|P][payload] records
"""

from __future__ import annotations

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

__all__ = ["SCHEMA", "StoreFull", "TraceStore", "spans_to_arrow"]

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


class TraceStore:
    def __init__(self, root: Path, *, max_buffered_spans: int = 200_000, flush_interval_s: float = 2.0,
                 fsync: bool = False, on_flush: Callable[[int], None] | None = None) -> None:
        self.root = Path(root)
        self.wal_dir = self.root / "_wal"
        self.wal_dir.mkdir(parents=True, exist_ok=True)
        self.max_buffered = max_buffered_spans
        self.flush_interval = flush_interval_s
        self.fsync = fsync
        self.on_flush = on_flush
        self.lock = threading.Lock()
        self.flush_lock = threading.Lock()
        self.buffer: list[Span] = []
        self.flushed_total = 0
        self._seq = 0
        existing = sorted(self.wal_dir.glob("segment-*.wal"))
        self._segment_no = (int(existing[-1].stem.split("-")[1]) + 1) if existing else 0
        self._wal = self._open_segment()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.recovered = self._recover(existing)

    # ------------------------------------------------------------------ write-ahead log

    def _open_segment(self):
        path = self.wal_dir / f"segment-{self._segment_no:08d}.wal"
        self._segment_no += 1
        self._wal_path = path
        return open(path, "ab", buffering=0)

    def _recover(self, segments: list[Path]) -> int:
        spans = []
        for seg in segments:
            data = seg.read_bytes()
            pos = 0
            while pos + _HEADER.size <= len(data):
                size, kind = _HEADER.unpack_from(data, pos)
                payload = data[pos + _HEADER.size: pos + _HEADER.size + size]
                if len(payload) < size:
                    break  # torn final record: it was never acknowledged
                pos += _HEADER.size + size
                try:
                    spans.extend(decode_protobuf(payload) if kind == ord("P") else decode_json(payload))
                except ValueError:
                    continue
        if spans:
            self._write(spans)
        for seg in segments:
            seg.unlink()
        return len(spans)

    # ------------------------------------------------------------------ accept / flush

    @property
    def buffered(self) -> int:
        return len(self.buffer)

    def accept(self, spans: list[Span], payload: bytes, kind: str) -> None:
        """Log ``payload`` durably and buffer ``spans``; after this returns they will reach Parquet."""
        if not spans:
            return
        with self.lock:
            if len(self.buffer) + len(spans) > self.max_buffered:
                raise StoreFull(max(1.0, self.flush_interval))
            self._wal.write(_HEADER.pack(len(payload), ord(kind)) + payload)
            if self.fsync:
                os.fsync(self._wal.fileno())
            self.buffer.extend(spans)

    def flush(self) -> int:
        """Write everything buffered so far to Parquet; returns the number of spans written."""
        with self.flush_lock:
            with self.lock:
                batch, self.buffer = self.buffer, []
                old_wal, old_path = self._wal, self._wal_path
                self._wal = self._open_segment()
            old_wal.close()
            if batch:
                self._write(batch)
            old_path.unlink(missing_ok=True)
            self.flushed_total += len(batch)
            if self.on_flush is not None and batch:
                self.on_flush(len(batch))
            return len(batch)

    def _write(self, spans: list[Span]) -> None:
        parts: dict[int, list[Span]] = {}
        for s in spans:
            hour = s.start_ns // _HOUR_NS
            rows = parts.get(hour)
            if rows is None:
                rows = parts[hour] = []
            rows.append(s)
        for hour, rows in parts.items():
            table = spans_to_arrow(rows)
            ts = datetime.fromtimestamp(hour * 3600, UTC)
            d = self.root / f"date={ts:%Y-%m-%d}" / f"hour={ts:%H}"
            d.mkdir(parents=True, exist_ok=True)
            self._seq += 1
            final = d / f"part-{int(time.time() * 1000)}-{os.getpid()}-{self._seq:06d}.parquet"
            tmp = final.with_suffix(".parquet.tmp")
            pq.write_table(table, tmp, compression="zstd")
            os.replace(tmp, final)

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> TraceStore:
        def loop() -> None:
            while not self._stop.wait(self.flush_interval):
                self.flush()

        self._thread = threading.Thread(target=loop, name="trace-store-flush", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.flush_interval + 30)
        self.flush()
        self._wal.close()
        self._wal_path.unlink(missing_ok=True)
