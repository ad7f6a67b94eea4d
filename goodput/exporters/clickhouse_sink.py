"""The trace store's ClickHouse sink: spans as rows of the OpenTelemetry Collector's ``otel_traces`` table.

``--store clickhouse://[USER[:PASSWORD]@]HOST[:PORT]/DATABASE[?table=otel_traces]`` (``clickhouses://`` or
``secure=1`` for TLS) inserts over ClickHouse's HTTP interface into a table the Collector (or anyone) made;
``--store chdb:DIR`` inserts into ClickHouse's engine in this process (chDB), creating the table with the
Collector's DDL when it is missing. Rows are the Collector's (``goodput.exporters.otel_traces``), and so is the INSERT
statement; the store's write-ahead log stays on local disk either way.

Each batch is inserted ``INSERT_ROWS`` spans at a time, each insert carrying an ``insert_deduplication_token`` made
from the spans it holds. The store retries a failed write as the same batch (across a restart too), so the same
spans are cut into the same inserts with the same tokens: when an insert succeeded but its reply was lost
(connection reset, timeout), ClickHouse recognises the retry and stores nothing twice. ClickHouse honours the token
on a Replicated*MergeTree table (what a cluster runs) and on a MergeTree table with
``non_replicated_deduplication_window`` set; on any other table a lost reply can store a span twice (docs/collector.md).
The token is in the statement (its SETTINGS clause, a bound parameter), over HTTP and on chDB alike: on chDB a batch
replayed after a hard kill is recognised the same way, in the table the sink creates with a window.
"""

from __future__ import annotations

import atexit
import hashlib
import http.client
import json
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from goodput.exporters.otel_traces import TableSpec, create_table, insert_spans, span_row
from goodput.exporters.otlp import Span
from goodput.exporters.store_sink import SinkFailed
from goodput.foundation.clickhouse import Statements, Target, connect, is_clickhouse, param_text, parse_target
from goodput.foundation.errors import ConfigError

__all__ = ["INSERT_ROWS", "TIMEOUT_S", "ClickHouseRefused", "ClickHouseSink", "insert_token", "parse_store"]

INSERT_ROWS = 50_000  # spans per INSERT: ClickHouse wants few, large inserts (each makes a part)
TIMEOUT_S = 30.0  # an insert with no reply this long counts as failed (and is retried with the same token)
DEDUP_WINDOW = 1000  # inserts remembered by a table this sink creates (chDB): a replayed batch is stored once
_LOCAL_ERRORS = (TypeError, ValueError, IndexError, KeyError, OverflowError)  # a span that cannot become a row


class ClickHouseRefused(Exception):
    """ClickHouse answered an insert with an error."""


def parse_store(spec: str) -> Path | Target:
    """``--store``'s value: a Parquet directory, a ``clickhouse://`` URL or ``chdb:DIR``."""
    if is_clickhouse(spec):
        return parse_target(spec, "--store")
    if "://" in spec:
        raise ConfigError("--store", spec, "not a directory, clickhouse:// URL or chdb:DIR")
    return Path(spec)


def insert_token(spans: list[Span]) -> str:
    """The deduplication token of one insert: a digest of the spans it holds, in order."""
    h = hashlib.sha256()
    for s in spans:
        h.update(f"{s.trace_id}/{s.span_id}/{s.start_ns}\n".encode())
    return "goodput-" + h.hexdigest()[:40]


class _HttpInserter:
    """An insert-only connection (``Statements``) over ClickHouse's HTTP interface: one POST per statement, a fresh connection
    each time (a reset one is simply gone), the statement and its bound parameters as a multipart form (the rows are
    far over a URL's limit), as clickhouse-connect sends large parameters."""

    def __init__(self, target: Target, timeout_s: float) -> None:
        self.target, self.timeout_s = target, timeout_s

    def command(self, sql: str, params: dict[str, Any] | None = None) -> None:
        t = self.target
        boundary = uuid.uuid4().hex
        fields = {"query": sql} | {f"param_{k}": v for k, v in param_text(params).items()}
        body = b"".join(f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n'.encode()
                        + value.encode() + b"\r\n" for name, value in fields.items()) + f"--{boundary}--\r\n".encode()
        query = urlencode({"database": t.database, "wait_end_of_query": "1"})
        headers = {"Content-Type": f"multipart/form-data; boundary={boundary}", "X-ClickHouse-User": t.user,
                   "X-ClickHouse-Key": t.password}
        cls = http.client.HTTPSConnection if t.secure else http.client.HTTPConnection
        conn = cls(t.host, t.port, timeout=self.timeout_s)
        try:
            conn.request("POST", f"/?{query}", body, headers)
            resp = conn.getresponse()
            text = resp.read()
        finally:
            conn.close()
        if resp.status != 200:
            first = text.decode("utf-8", "replace").strip().splitlines()[:1]
            raise ClickHouseRefused(f"HTTP {resp.status}: {first[0][:300] if first else resp.reason}")

    def close(self) -> None:
        """Nothing is held open between inserts."""


class ClickHouseSink:
    """Writes each batch to ``otel_traces`` in inserts of ``insert_rows`` spans, each named by ``insert_token``."""

    def __init__(self, target: Target, *, insert_rows: int = INSERT_ROWS, timeout_s: float = TIMEOUT_S) -> None:
        self.target, self.insert_rows = target, insert_rows
        self.table = TableSpec(database=target.database, table=target.table, dedup_window=DEDUP_WINDOW)
        self.kind = target.kind
        self._con: Statements
        if target.kind == "chdb":
            self._con = connect(target, "--store")
            create_table(self._con, self.table)
        else:
            self._con = _HttpInserter(target, timeout_s)

    def __str__(self) -> str:
        return str(self.target)

    def write(self, spans: list[Span]) -> list[tuple[Span, Exception]]:
        rejected: list[tuple[Span, Exception]] = []
        for at in range(0, len(spans), self.insert_rows):
            chunk = spans[at: at + self.insert_rows]
            try:
                rejected += self._insert(chunk)
            except Exception as e:  # refused, reset, timed out: the store retries from this chunk
                raise SinkFailed(spans[at:], e, rejected) from e
        return rejected

    def _insert(self, chunk: list[Span]) -> list[tuple[Span, Exception]]:
        """Insert one chunk under its token; a span that cannot become a row is left out and returned."""
        token = insert_token(chunk)
        try:
            insert_spans(self._con, chunk, self.table, batch=len(chunk), token=token)
            return []
        except _LOCAL_ERRORS:
            bad = [(s, e) for s, e in ((s, _row_problem(s)) for s in chunk) if e is not None]
            if not bad:
                raise
        bad_ids = {id(s) for s, _ in bad}
        insert_spans(self._con, [s for s in chunk if id(s) not in bad_ids], self.table, batch=len(chunk), token=token)
        return bad

    def close(self) -> None:
        """The last write is done. On chDB the process's session stays open for whoever shares it and is shut down
        at exit, before the interpreter's teardown: left to the teardown, chDB's shutdown raced its own background
        threads ('Exception in global_context->shutdown(): The ShutdownTablesThreadPool is not initialized' on
        stderr, and at times a SIGSEGV for an exit code: 4 of 17 stops here, 0 of 19 after)."""
        self._con.close()
        if self.kind == "chdb":
            atexit.unregister(_close_chdb)  # once, however many sinks close
            atexit.register(_close_chdb)


def _close_chdb() -> None:
    """Shut the process's chDB session down (``goodput.foundation.clickhouse`` keeps the one a process may have)."""
    from goodput.foundation import clickhouse

    while clickhouse._CHDB_SESSION:
        clickhouse._CHDB_SESSION.pop()[1].close()


def _row_problem(span: Span) -> Exception | None:
    """Why ``span`` cannot become an ``otel_traces`` row, or None."""
    try:
        json.dumps(span_row(span), ensure_ascii=False).encode()
    except _LOCAL_ERRORS as e:
        return e
    return None
