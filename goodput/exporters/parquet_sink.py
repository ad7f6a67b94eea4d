"""The trace store's Parquet sink: spans as files partitioned by date and hour, readable by DuckDB, Trino or Spark.

Layout (hive partitioning)::

    DIR/date=2026-11-23/hour=09/part-<unix ms>-<pid>-<seq>.parquet

A file is written under a temporary name and renamed into place, so a reader never sees half of one.
"""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from goodput.exporters.otlp import Span
from goodput.exporters.store_sink import SinkFailed

__all__ = ["SCHEMA", "ParquetSink", "spans_to_arrow"]

SCHEMA = pa.schema([
    ("trace_id", pa.string()), ("span_id", pa.string()), ("parent_span_id", pa.string()), ("name", pa.string()),
    ("kind", pa.int8()), ("start_time_unix_nano", pa.int64()), ("end_time_unix_nano", pa.int64()),
    ("status_code", pa.int8()), ("status_message", pa.string()), ("service_name", pa.string()),
    ("attributes", pa.map_(pa.string(), pa.string())), ("resource", pa.map_(pa.string(), pa.string())),
])
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
    offsets, n = [0], 0
    keys: list[str] = []
    values: list[str] = []
    for d in dicts:
        keys.extend(d)
        values.extend(map(_text, d.values()))
        n += len(d)
        offsets.append(n)
    return pa.MapArray.from_arrays(pa.array(offsets, pa.int32()), pa.array(keys, pa.string()),
                                   pa.array(values, pa.string()))


def _table(rows: list[Span]) -> tuple[pa.Table, list[Span], list[tuple[Span, Exception]]]:
    """``rows`` in the store's schema, the rows in it, and those Arrow cannot take (with why)."""
    try:
        return spans_to_arrow(rows), rows, []
    except Exception:  # noqa: BLE001 - whatever one record does, the others are stored
        good, bad = [], []
        for s in rows:
            try:
                spans_to_arrow([s])
                good.append(s)
            except Exception as e:  # noqa: BLE001
                bad.append((s, e))
        return spans_to_arrow(good), good, bad


class ParquetSink:
    """Writes each flush as one Parquet file per hour of span start."""

    kind = "parquet"

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self._seq = 0

    def __str__(self) -> str:
        return f"parquet {self.root}"

    def stop_by(self, deadline: float) -> None:
        """A local write cannot be cut short: nothing to bound."""

    def write(self, spans: list[Span]) -> list[tuple[Span, Exception]]:
        parts: dict[int, list[Span]] = {}
        for s in spans:
            hour = s.start_ns // _HOUR_NS
            rows = parts.get(hour)
            if rows is None:
                rows = parts[hour] = []
            rows.append(s)
        pending = list(parts.values())
        rejected: list[tuple[Span, Exception]] = []
        for i, (hour, rows) in enumerate(parts.items()):
            tmp = None
            try:
                table, rows, bad = _table(rows)
                rejected += bad
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
            except Exception as e:  # the disk said no: keep what is left for the next flush
                if tmp is not None:
                    tmp.unlink(missing_ok=True)
                raise SinkFailed(rows + [s for r in pending[i + 1:] for s in r], e, rejected) from e
        return rejected

    def close(self) -> None:
        """Nothing is held open between flushes."""
