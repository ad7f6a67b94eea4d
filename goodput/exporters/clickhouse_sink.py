"""The trace store's ClickHouse sink: spans as rows of the OpenTelemetry Collector's ``otel_traces`` table.

``--store clickhouse://[USER[:PASSWORD]@]HOST[:PORT]/DATABASE[?table=otel_traces]`` (``clickhouses://`` or
``secure=1`` for TLS) inserts over ClickHouse's HTTP interface into a table the Collector (or anyone) made;
``--store chdb:DIR`` inserts into ClickHouse's engine in this process (chDB), creating the table with the
Collector's DDL when it is missing. Rows are the Collector's (``goodput.exporters.otel_traces``), and so is the INSERT
statement; the store's write-ahead log stays on local disk either way.

Each batch is inserted ``INSERT_ROWS`` spans at a time, each insert carrying an ``insert_deduplication_token`` made
from the spans it holds. The store cuts every batch as its write-ahead log holds it, so a retry (after a failure, a
restart or a SIGKILL) sends the same spans in the same inserts under the same tokens: when an insert succeeded but its
reply was lost, ClickHouse recognises the retry and stores nothing twice. ClickHouse honours the token on a
Replicated*MergeTree table (what a cluster runs) and on a MergeTree table with ``non_replicated_deduplication_window``
set; ``dedup_problem`` names any other table at start (docs/collector.md). The token is in the statement (its SETTINGS
clause, a bound parameter), over HTTP and on chDB alike; the table the sink creates on chDB has a window.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import json
import re
import socket
import threading
import time
import uuid
from collections.abc import Callable
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
MAX_REPLY_BYTES = 1 << 20  # an insert's reply is empty or one error: more is a server gone wrong
TIMEOUT_S = 30.0  # an insert with no reply this long counts as failed (and is retried with the same token)
DEDUP_WINDOW = 1000  # inserts remembered by a table this sink creates (chDB): a replayed batch is stored once
_TABLE_ENGINE_SQL = ("SELECT engine, engine_full FROM system.tables "
                     "WHERE database = {database:String} AND name = {table:String}")
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
    far over a URL's limit), as clickhouse-connect sends large parameters.

    An answer counts as stored only when ClickHouse says so: HTTP 200, no ``X-ClickHouse-Exception-Code`` and no
    exception in the body (ClickHouse can fail a query after its 200 went out), and an ``X-ClickHouse-Summary`` whose
    ``written_rows`` is in ``written`` for the sink to compare with the rows it sent (a proxy that strips it, or
    answers for a server it never reached, cannot be told from one that stored). Each POST, reply included, has
    ``timeout_s`` or until ``stop_by``'s deadline, and a reply over ``MAX_REPLY_BYTES`` is cut off: a server that
    trickles or streams can hold neither the flush nor the shutdown, nor the memory."""

    def __init__(self, target: Target, timeout_s: float) -> None:
        self.target, self.timeout_s = target, timeout_s
        self.deadline = float("inf")  # monotonic time by which every POST is over (shutdown)
        self.written: int | None = None  # written_rows of the last statement's summary
        self._lock = threading.Lock()
        self._inflight: tuple[socket.socket, threading.Event] | None = None  # the POST under way: stop_by cuts it

    def command(self, sql: str, params: dict[str, Any] | None = None) -> None:
        self.written = None
        text, headers = self.post(sql, params)
        if text.strip():  # an INSERT answers with an empty body; anything else is an error, 200 or not
            raise ClickHouseRefused(f"ClickHouse answered the insert with {_first_line(text)}")
        summary = headers.get("X-ClickHouse-Summary")
        if summary is None:
            raise ClickHouseRefused("a 200 without X-ClickHouse-Summary: cannot tell the rows were stored")
        try:
            self.written = int(json.loads(summary)["written_rows"])
        except (KeyError, TypeError, ValueError):
            raise ClickHouseRefused(f"no written_rows in X-ClickHouse-Summary {summary[:200]!r}") from None

    def query_rows(self, sql: str, params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        """A small query's rows (``FORMAT JSONEachRow``)."""
        text, _ = self.post(sql + "\nFORMAT JSONEachRow", params)
        return [json.loads(line) for line in text.splitlines() if line.strip()]

    def post(self, sql: str, params: dict[str, Any] | None) -> tuple[str, http.client.HTTPMessage]:
        """One statement's reply body and headers, within the time and size caps; ``ClickHouseRefused`` when
        ClickHouse says it failed."""
        t = self.target
        boundary = uuid.uuid4().hex
        fields = {"query": sql} | {f"param_{k}": v for k, v in param_text(params).items()}
        body = b"".join(f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n'.encode()
                        + value.encode() + b"\r\n" for name, value in fields.items()) + f"--{boundary}--\r\n".encode()
        query = urlencode({"database": t.database, "wait_end_of_query": "1"})
        headers = {"Content-Type": f"multipart/form-data; boundary={boundary}", "X-ClickHouse-User": t.user,
                   "X-ClickHouse-Key": t.password}
        budget = min(self.timeout_s, self.deadline - time.monotonic())
        if budget <= 0:
            raise TimeoutError("shutting down: no time left for another insert")
        cls = http.client.HTTPSConnection if t.secure else http.client.HTTPConnection
        conn = cls(t.host, t.port, timeout=budget)
        cut = threading.Event()
        timer: threading.Timer | None = None
        try:
            conn.connect()  # within budget (the socket's timeout); the socket is ours to cut after (the response
            timer = threading.Timer(budget, _cut, (conn.sock, cut))  # takes it from conn)
            timer.start()
            with self._lock:
                self._inflight = (conn.sock, cut)
            conn.request("POST", f"/?{query}", body, headers)
            resp = conn.getresponse()
            reply = resp.read(MAX_REPLY_BYTES + 1)
        except (OSError, http.client.HTTPException) as e:
            if cut.is_set():
                raise TimeoutError(f"no complete reply within {budget:.1f} s") from e
            raise
        finally:
            with self._lock:
                self._inflight = None
            if timer is not None:
                timer.cancel()
            conn.close()
        if cut.is_set():  # the reply ended because its time was up, not because it was whole
            raise TimeoutError(f"no complete reply within {budget:.1f} s")
        if len(reply) > MAX_REPLY_BYTES:
            raise ClickHouseRefused(f"reply over {MAX_REPLY_BYTES} bytes: not ClickHouse answering an insert")
        text = reply.decode("utf-8", "replace")
        code = resp.headers.get("X-ClickHouse-Exception-Code", "0").strip()
        if resp.status != 200 or code != "0":
            raise ClickHouseRefused(f"HTTP {resp.status}, exception code {code}: {_first_line(text) or resp.reason}")
        return text, resp.headers

    def stop_by(self, deadline: float) -> None:
        """No POST starts after ``deadline``, and the one under way (begun with the whole insert timeout) ends there."""
        with self._lock:
            self.deadline, inflight = deadline, self._inflight
        if inflight is not None:
            timer = threading.Timer(max(0.0, deadline - time.monotonic()), _cut, inflight)
            timer.daemon = True
            timer.start()

    def close(self) -> None:
        """Nothing is held open between inserts."""


def _cut(sock: socket.socket, cut: threading.Event) -> None:
    """End a POST past its time: shut its socket, so a read blocked on a silent or trickling server returns."""
    cut.set()
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)


def _first_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[0][:300] if lines else ""


class ClickHouseSink:
    """Writes each batch to ``otel_traces`` in inserts of ``insert_rows`` spans, each named by ``insert_token``."""

    def __init__(self, target: Target, *, insert_rows: int = INSERT_ROWS, timeout_s: float = TIMEOUT_S) -> None:
        self.target, self.insert_rows = target, insert_rows
        self.table = TableSpec(database=target.database, table=target.table, dedup_window=DEDUP_WINDOW)
        self.kind = target.kind
        self._deadline = float("inf")  # monotonic time after which no insert starts (shutdown)
        self._con: Statements
        self._rows: Callable[[str, dict[str, Any]], list[dict[str, Any]]]  # a small query's rows
        if target.kind == "chdb":
            con = connect(target, "--store")
            create_table(con, self.table)
            self._con, self._rows = con, lambda sql, params: con.query_df(sql, params).to_dict("records")
        else:
            self._con = http = _HttpInserter(target, timeout_s)
            self._rows = http.query_rows

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
            self._insert_rows(chunk, token)
            return []
        except _LOCAL_ERRORS:
            bad = [(s, e) for s, e in ((s, _row_problem(s)) for s in chunk) if e is not None]
            if not bad:
                raise
        bad_ids = {id(s) for s, _ in bad}
        self._insert_rows([s for s in chunk if id(s) not in bad_ids], token)
        return bad

    def _insert_rows(self, rows: list[Span], token: str) -> None:
        """One INSERT under ``token``; over HTTP, ``ClickHouseRefused`` unless ClickHouse says it wrote every row
        (``written_rows`` counts the rows an insert took, a retry it deduplicated included)."""
        if not rows:
            return
        if time.monotonic() >= self._deadline:
            raise TimeoutError("shutting down: no time left for another insert")
        insert_spans(self._con, rows, self.table, batch=len(rows), token=token)
        written = getattr(self._con, "written", None)
        if written is not None and written != len(rows):
            raise ClickHouseRefused(f"ClickHouse acknowledged an insert of {len(rows)} rows but wrote {written}")

    def stop_by(self, deadline: float) -> None:
        """Shutdown: no insert starts after ``deadline`` (``time.monotonic``), and one over HTTP under way is cut there,
        stored or failed. A chDB insert under way cannot be cut: the engine's call holds this thread, and nothing in
        Python (a timeout, a cancel, a signal) reaches into it; so a chDB shutdown may overrun ``deadline`` by the one
        insert running then (``insert_rows`` spans: 1.1-1.4 s for 50,000 on a loaded 2-core box, within the
        exporter's 3 s margin). What it and the inserts never started do not store stays in the write-ahead log and
        is replayed at the next start under the same tokens, which the table the sink makes on chDB recognises."""
        self._deadline = deadline
        if isinstance(self._con, _HttpInserter):
            self._con.stop_by(deadline)

    def dedup_problem(self) -> str | None:
        """Why the table may store a retried insert twice (which setting it lacks), or None when it deduplicates."""
        params = {"database": self.table.database, "table": self.table.table}
        try:
            rows = self._rows(_TABLE_ENGINE_SQL, params)
        except Exception as e:  # noqa: BLE001 -- any failure only means the check could not be made; say so
            return f"could not read its engine from system.tables ({type(e).__name__}: {str(e)[:200]})"
        if not rows:
            return "it does not exist (yet)"
        engine, full = str(rows[0]["engine"]), str(rows[0]["engine_full"])
        if engine.startswith(("Replicated", "Shared")):  # a cluster's (or ClickHouse Cloud's) tables deduplicate
            return None
        if not engine.endswith("MergeTree"):
            return f"its engine {engine} does not deduplicate inserts"
        window = re.search(r"non_replicated_deduplication_window\s*=\s*(\d+)", full)
        if window is None or int(window.group(1)) == 0:
            return (f"{engine} without non_replicated_deduplication_window (ALTER TABLE {self.table.database}."
                    f"{self.table.table} MODIFY SETTING non_replicated_deduplication_window = {DEDUP_WINDOW})")
        return None

    def close(self) -> None:
        """The last write is done. A chDB session lives on for whoever shares it; ``goodput.foundation.clickhouse``
        shuts it down at exit (``close_embedded``)."""
        self._con.close()


def _row_problem(span: Span) -> Exception | None:
    """Why ``span`` cannot become an ``otel_traces`` row, or None."""
    try:
        json.dumps(span_row(span), ensure_ascii=False).encode()
    except _LOCAL_ERRORS as e:
        return e
    return None
