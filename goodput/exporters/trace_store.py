"""The request exporter's trace store: spans never lost once acknowledged, written through a pluggable sink.

An accepted payload is appended to a write-ahead log before the receiver answers 200; spans wait in
a bounded buffer and are handed to the sink every few seconds (and on shutdown), after which their log
segment is deleted. The sink is Parquet files (``goodput.exporters.parquet_sink``, the default) or ClickHouse's
``otel_traces`` table (``goodput.exporters.clickhouse_sink``). On start, leftover log segments are replayed into
the sink. When the buffer is full, ``accept`` raises ``StoreFull`` (the receiver answers 503 with
Retry-After) instead of dropping; after ``close`` began it raises ``StoreClosed``.

Nothing one record holds can stop the writer: a span the sink cannot take is written aside to
``DIR/_quarantine/spans-<pid>.jsonl`` (with the error) and the rest of its batch is stored; a logged
payload that no longer decodes at replay is written aside whole. A write the sink's destination refuses
(disk full, ClickHouse down or stalled) keeps its spans and their log segments; it is retried with
exponential backoff, and ``health`` names the sink and the error until a write succeeds.

Exactly once, across a kill too: a sink that names its inserts by their content (ClickHouse's deduplication token)
recognises an insert that succeeded but whose reply was lost, if it is sent again cut the same way. So every batch
handed to the sink is fixed by the log: a flush writes the spans of one closed segment as one batch, and a replay
writes each leftover segment as the batch it was. After a failed write the closed segments are rewritten as one
holding only what is still owed, each batch as its own ``B`` record (the failed write's unstored rows first, cut at
an insert's edge) and an ``X`` record naming the segments it replaces (skipped at replay should a crash leave them,
their own ``B`` records included). Replay queues a span once, whichever leftover segments hold it.
Log records are OTLP payloads (``J`` JSON, ``P`` protobuf) or spans in the store's own JSON (``S``: a payload's spans
less those the receiver had already seen; ``B``, and ``R`` from earlier versions: a batch of a rewrite).

Layout of DIR::

    DIR/_wal/segment-<n>.wal          # [4-byte length][1-byte kind: J|P|S|B|X (R read)][payload] records
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
from pathlib import Path

from goodput.exporters.otlp import Span, decode_json, decode_protobuf
from goodput.exporters.parquet_sink import ParquetSink
from goodput.exporters.store_sink import Sink, SinkFailed

__all__ = ["StoreClosed", "StoreFull", "TraceStore", "decode_spans", "encode_spans"]

log = logging.getLogger(__name__)

_HEADER = struct.Struct(">IB")
MAX_BACKOFF_S = 60.0  # the longest wait between two tries of a failing sink
SHUTDOWN_S = 20.0  # close's bound on the last flush: inside Kubernetes' 30 s grace, with room for the rest
BEHIND_FRACTION = 0.8  # a buffer this full means the sink is not keeping up with what is accepted


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


def encode_spans(spans: list[Span]) -> bytes:
    """Spans as one log record's payload: a JSON array of their fields, in ``Span`` order."""
    return json.dumps([[getattr(s, f) for f in Span.__slots__] for s in spans], ensure_ascii=True,
                      separators=(",", ":")).encode()


def decode_spans(payload: bytes) -> list[Span]:
    """The spans ``encode_spans`` wrote; ``ValueError`` when the payload is not such a record."""
    try:
        return [Span(*row) for row in json.loads(payload)]
    except (TypeError, json.JSONDecodeError) as e:
        raise ValueError(f"not a span record: {e}") from None


def _records(data: bytes):
    """A log segment's whole records: (offset, kind, payload); a torn final record was never acknowledged."""
    pos = 0
    while pos + _HEADER.size <= len(data):
        size, kind = _HEADER.unpack_from(data, pos)
        payload = data[pos + _HEADER.size: pos + _HEADER.size + size]
        if len(payload) < size:
            return
        yield pos, kind, payload
        pos += _HEADER.size + size


def _unique(spans: list[Span]) -> list[Span]:
    """``spans`` less repeats of a (trace, span) id, in order: a payload logged twice is one batch's rows once."""
    seen: set[tuple[str, str]] = set()
    out = []
    for s in spans:
        key = (s.trace_id, s.span_id)
        if key not in seen:
            seen.add(key)
            out.append(s)
    return out


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
    def __init__(self, root: Path, *, sink: Sink | None = None, max_buffered_spans: int = 200_000,
                 flush_interval_s: float = 2.0, fsync: bool = False,
                 on_flush: Callable[[int], None] | None = None) -> None:
        self.root = Path(root)
        self.wal_dir = self.root / "_wal"
        self.quarantine_dir = self.root / "_quarantine"
        self.wal_dir.mkdir(parents=True, exist_ok=True)
        self.sink = ParquetSink(self.root) if sink is None else sink
        self.max_buffered = max_buffered_spans
        self.flush_interval = flush_interval_s
        self.fsync = fsync
        self.on_flush = on_flush
        self.lock = threading.Lock()
        self.flush_lock = threading.Lock()
        self.buffer: list[Span] = []  # accepted into the open log segment
        self._batches: list[list[Span]] = []  # owed, each cut as the log has it: written in order, never merged
        self.flushed_total = 0
        self.quarantined_total = 0
        self.write_errors_total = 0
        self.error: str | None = None  # why the last flush failed; None once one succeeds
        self._failures = 0  # flushes failed in a row: the backoff's exponent
        self._closed = False
        existing = sorted(self.wal_dir.glob("segment-*.wal"))
        self._segment_no = (int(existing[-1].stem.split("-")[1]) + 1) if existing else 0
        self._wal, self._wal_path = self._open_segment()
        self._done_segments: list[Path] = []  # closed segments whose spans are not all stored yet
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.recovered = self._recover(existing)

    # ------------------------------------------------------------------ write-ahead log

    def _open_segment(self):
        path = self.wal_dir / f"segment-{self._segment_no:08d}.wal"
        self._segment_no += 1
        return open(path, "ab", buffering=0), path

    def _recover(self, segments: list[Path]) -> int:
        """Queue the spans of leftover segments as the batches they were (a rewrite's batches, then each other
        segment whole, its repeats dropped as a flush drops them) and flush them; a payload that no longer decodes
        is quarantined.

        A segment a rewrite names (its ``X`` record) is skipped whole, its own ``B`` batches included: the rewrite
        holds what of them was still owed. A span queued once is not queued again from a later batch, whichever
        segment holds it (a crash that left a segment beside its replacement, a client that resent a post whose
        answer a crash lost): replay stores each span once on any table, deduplicating or not."""
        rewritten: dict[str, list[list[Span]]] = {}
        plain: dict[str, list[Span]] = {}
        replaced: set[str] = set()
        for seg in segments:
            spans, batches = plain.setdefault(seg.name, []), rewritten.setdefault(seg.name, [])
            for pos, kind, payload in _records(seg.read_bytes()):
                try:
                    if kind == ord("X"):
                        replaced.update(str(name) for name in json.loads(payload))
                    elif kind in (ord("B"), ord("R")):
                        batches.append(decode_spans(payload))
                    else:
                        spans.extend(decode_protobuf(payload) if kind == ord("P") else
                                     decode_spans(payload) if kind == ord("S") else decode_json(payload))
                except (ValueError, TypeError) as e:  # e.g. a damaged record
                    self._quarantine_payload(f"wal-{seg.stem}-{pos}.{'pb' if kind == ord('P') else 'json'}",
                                             payload, e)
        kept = [seg.name for seg in segments if seg.name not in replaced]
        queued: set[tuple[str, str]] = set()
        for batch in [b for name in kept for b in rewritten[name]] + [_unique(plain[name]) for name in kept]:
            fresh = [s for s in batch if (s.trace_id, s.span_id) not in queued]
            if fresh:
                queued.update((s.trace_id, s.span_id) for s in fresh)
                self._batches.append(fresh)
        self._done_segments.extend(segments)
        if segments:
            self.flush()
        return len(queued)

    # ------------------------------------------------------------------ quarantine

    def _quarantine_payload(self, name: str, payload: bytes, error: Exception) -> None:
        self.quarantine_dir.mkdir(exist_ok=True)
        (self.quarantine_dir / name).write_bytes(payload)
        self.quarantined_total += 1
        log.warning("trace store: quarantined a logged payload as %s: %s", self.quarantine_dir / name, error)

    def _quarantine_spans(self, bad: list[tuple[Span, Exception]]) -> None:
        if not bad:
            return
        self.quarantine_dir.mkdir(exist_ok=True)
        path = self.quarantine_dir / f"spans-{os.getpid()}.jsonl"
        with open(path, "a", encoding="utf-8") as f:
            for span, error in bad:
                f.write(_quarantine_line(span, error) + "\n")
            f.flush()
            os.fsync(f.fileno())
        self.quarantined_total += len(bad)
        log.warning("trace store: quarantined %d span(s) in %s: %s", len(bad), path, bad[0][1])

    # ------------------------------------------------------------------ accept / flush

    @property
    def buffered(self) -> int:
        """Spans accepted and not yet stored, those waiting for a retry included."""
        return len(self.buffer) + sum(len(b) for b in self._batches)

    def accept(self, spans: list[Span], payload: bytes, kind: str) -> None:
        """Log ``payload`` durably and buffer ``spans``; after this returns they will reach the sink."""
        if not spans:
            return
        with self.lock:
            if self._closed:
                raise StoreClosed(max(1.0, self.flush_interval))
            if self.buffered + len(spans) > self.max_buffered:
                raise StoreFull(max(1.0, self.flush_interval))
            self._wal.write(_HEADER.pack(len(payload), ord(kind)) + payload)
            if self.fsync:
                os.fsync(self._wal.fileno())
            self.buffer.extend(spans)

    def flush(self) -> int:
        """Hand everything buffered so far to the sink; returns the number of spans stored (not quarantined).

        The open log segment is closed and its spans queued as one batch; batches are written in order, each as the
        log holds it. Log segments are deleted only once all their spans are stored. On a sink error the unstored
        spans are kept (the log rewritten to hold only them), ``error`` says why, and the next flush tries again."""
        with self.flush_lock:
            with self.lock:
                new_wal, new_path = self._open_segment()
                batch, self.buffer = self.buffer, []
                old_wal, self._wal = self._wal, new_wal
                self._done_segments.append(self._wal_path)
                self._wal_path = new_path
            old_wal.close()
            if batch:
                self._batches.append(_unique(batch))
            stored = 0
            while self._batches:
                rows = self._batches[0]
                try:
                    rejected = self.sink.write(rows)
                except SinkFailed as e:
                    self._quarantine_spans(e.rejected)
                    stored += len(rows) - len(e.rows) - len(e.rejected)
                    self.flushed_total += len(rows) - len(e.rows) - len(e.rejected)
                    self._batches[0] = e.rows  # cut at an insert's edge: its inserts are the ones tried
                    self._failed(e)
                    self._rewrite_log()
                    return stored
                self._quarantine_spans(rejected)
                stored += len(rows) - len(rejected)
                self.flushed_total += len(rows) - len(rejected)
                self._batches.pop(0)
            self.error, self._failures = None, 0
            for seg in self._done_segments:
                seg.unlink(missing_ok=True)
            self._done_segments.clear()
            if self.on_flush is not None and stored:
                self.on_flush(stored)
            return stored

    def _rewrite_log(self) -> None:
        """Replace the closed log segments by one holding only the batches still owed, each as its own record.

        Written aside and renamed into place before the old segments go, with a record naming them, so a crash
        leaves one or the other (or both, and replay skips the replaced); if the disk refuses, the old segments
        stay, and replay cuts them as the flushes did, which is safe too."""
        with self.lock:
            path = self.wal_dir / f"segment-{self._segment_no:08d}.wal"
            self._segment_no += 1
        tmp = path.with_suffix(".tmp")
        try:
            with open(tmp, "wb") as f:
                names = json.dumps([seg.name for seg in self._done_segments]).encode()
                f.write(_HEADER.pack(len(names), ord("X")) + names)
                for rows in self._batches:
                    if rows:
                        payload = encode_spans(rows)
                        f.write(_HEADER.pack(len(payload), ord("B")) + payload)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except OSError as e:
            tmp.unlink(missing_ok=True)
            log.warning("trace store: could not rewrite the write-ahead log, keeping it whole: %s", e)
            return
        for seg in self._done_segments:
            seg.unlink(missing_ok=True)
        self._done_segments = [path]

    def _failed(self, e: SinkFailed) -> None:
        self.write_errors_total += 1
        self._failures += 1
        self.error = f"{self.sink}: {e}"
        log.error("trace store: writing to %s failed, %d span(s) kept for the next try: %s", self.sink,
                  self.buffered, e)

    def backoff(self) -> float:
        """Seconds until the next flush: the interval, doubled per failed flush in a row up to ``MAX_BACKOFF_S``."""
        if not self._failures:
            return self.flush_interval
        return max(self.flush_interval, min(MAX_BACKOFF_S, self.flush_interval * 2 ** min(self._failures, 16)))

    # ------------------------------------------------------------------ health and lifecycle

    def health(self) -> str | None:
        """Why the store cannot be trusted right now, or None: a dead flush thread or a failing sink."""
        if self._thread is not None and not self._thread.is_alive() and not self._closed:
            return "trace store flush thread is not running"
        if self.error is not None:
            return f"trace store flush failing: {self.error}"
        if self.buffered >= BEHIND_FRACTION * self.max_buffered:
            return (f"trace store sink {self.sink} not keeping up: {self.buffered} of {self.max_buffered} spans "
                    "buffered (new spans get 503 when it is full)")
        return None

    def start(self) -> TraceStore:
        def loop() -> None:
            while not self._stop.wait(self.backoff()):
                try:
                    self.flush()
                except Exception as e:  # e.g. no new log segment: say so, keep trying
                    self.error = f"{type(e).__name__}: {e}"
                    log.exception("trace store: flush failed")

        self._thread = threading.Thread(target=loop, name="trace-store-flush", daemon=True)
        self._thread.start()
        return self

    def close(self, within_s: float = SHUTDOWN_S) -> None:
        """Refuse further spans, flush what was accepted, and remove the log if everything reached the sink.

        Returns within about ``within_s``: the sink's writes are cut at that deadline (a stalled ClickHouse cannot
        hold a pod past its grace period), and what they did not store stays in the log for the next start."""
        deadline = time.monotonic() + within_s
        with self.lock:
            self._closed = True
        self._stop.set()
        self.sink.stop_by(deadline)
        if self._thread is not None:
            self._thread.join(timeout=max(0.0, deadline - time.monotonic()) + 1)
        if self._thread is not None and self._thread.is_alive():
            self.error = self.error or f"{self.sink}: a flush still running at the shutdown deadline"
        else:
            self.flush()
        self._wal.close()
        self.sink.close()
        if self.error is None:
            self._wal_path.unlink(missing_ok=True)
        else:
            log.error("trace store: closed with %d span(s) only in the write-ahead log (%s); they are replayed at "
                      "the next start", self.buffered, self.error)
