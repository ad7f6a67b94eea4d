"""The trace store's ClickHouse sink: spans as rows of the OpenTelemetry Collector's ``otel_traces`` table.

``--store clickhouse://[USER[:PASSWORD]@]HOST:PORT/DATABASE[?table=otel_traces]`` inserts over ClickHouse's HTTP
interface; ``--store chdb:DIR`` inserts into a ClickHouse engine in this process (chDB), its data in DIR, creating
the table with the Collector's DDL when it is missing. Either way the store's write-ahead log stays local.

Each batch is inserted ``INSERT_ROWS`` spans at a time, as JSONEachRow, with an ``insert_deduplication_token`` made
from the spans it holds. The store retries a failed write as the same batch, so the same spans are cut into the same
inserts with the same tokens: when an insert succeeded but its reply was lost (connection reset, timeout), ClickHouse
recognises the retry and stores nothing twice. ClickHouse honours the token on a Replicated*MergeTree table (what a
cluster runs) and on a plain MergeTree table with ``non_replicated_deduplication_window`` set; on any other table a
lost reply can store a span twice. A replay of the log after a hard kill cuts its inserts afresh, so it is not
covered by the token either.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlencode, urlsplit

from exporters.otlp import Span
from exporters.store_sink import SinkFailed
from goodput.foundation.errors import ConfigError

__all__ = ["INSERT_ROWS", "ClickHouseRefused", "ClickHouseSink", "ClickHouseTarget", "insert_token", "parse_store"]

INSERT_ROWS = 50_000  # spans per INSERT: ClickHouse wants few, large inserts (each makes a part)
TIMEOUT_S = 30.0  # an insert with no reply this long counts as failed (and is retried with the same token)
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


class ClickHouseRefused(Exception):
    """ClickHouse answered an insert with an error."""


@dataclass(frozen=True)
class ClickHouseTarget:
    """Where the spans go: a ClickHouse server (``path`` None) or a chDB directory."""

    database: str
    table: str
    host: str = ""
    port: int = 0
    user: str = ""
    password: str = ""
    path: Path | None = None

    def __str__(self) -> str:
        where = f"chdb:{self.path}" if self.path is not None else f"clickhouse://{self.host}:{self.port}"
        return f"{where}/{self.database}.{self.table}"

    @property
    def insert_sql(self) -> str:
        """The INSERT statement; its identifiers were checked by ``parse_store``."""
        return f"INSERT INTO `{self.database}`.`{self.table}` FORMAT JSONEachRow"


def _ident(text: str, what: str, spec: str) -> str:
    if not _IDENT.match(text):
        raise ConfigError("--store", spec, f"{what} {text!r} is not a plain ClickHouse identifier ([A-Za-z_][A-Za-z0-9_]*)")
    return text


def parse_store(spec: str) -> Path | ClickHouseTarget:
    """``--store``'s value: a Parquet directory, ``clickhouse://HOST:PORT/DATABASE[?table=T]`` or ``chdb:DIR``."""
    if spec.startswith("chdb:"):
        path = spec[len("chdb:"):]
        if not path:
            raise ConfigError("--store", spec, "chdb: needs a directory (chdb:DIR)")
        return ClickHouseTarget(database="otel", table="otel_traces", path=Path(path))
    if "://" not in spec:
        return Path(spec)
    u = urlsplit(spec)
    if u.scheme != "clickhouse":
        raise ConfigError("--store", spec, f"unknown scheme {u.scheme!r} (a directory, clickhouse:// or chdb:)")
    try:
        port = u.port
    except ValueError:
        port = -1
    if not u.hostname or port is None or not 0 < port < 65536:
        raise ConfigError("--store", spec, "needs a host and an HTTP port: clickhouse://HOST:PORT/DATABASE")
    query = parse_qs(u.query, keep_blank_values=True)
    unknown = sorted(set(query) - {"table"})
    if unknown:
        raise ConfigError("--store", spec, f"unknown parameter {unknown[0]!r} (only table=)")
    database = _ident(u.path.strip("/") or "default", "database", spec)
    table = _ident(query.get("table", ["otel_traces"])[-1], "table", spec)
    return ClickHouseTarget(database=database, table=table, host=u.hostname, port=port,
                            user=unquote(u.username or ""), password=unquote(u.password or ""))


def insert_token(spans: list[Span]) -> str:
    """The deduplication token of one insert: a digest of the spans it holds, in order."""
    h = hashlib.sha256()
    for s in spans:
        h.update(f"{s.trace_id}/{s.span_id}/{s.start_ns}\n".encode())
    return "goodput-" + h.hexdigest()[:40]


_KINDS = ("Unspecified", "Internal", "Server", "Client", "Producer", "Consumer")
_STATUS = ("Unset", "Ok", "Error")


def _text(v) -> str:
    return v if v.__class__ is str else ("true" if v else "false") if v.__class__ is bool else str(v)


def _row(s: Span) -> dict:
    """One ``otel_traces`` row (interim: the columns the analyzer reads)."""
    return {"Timestamp": f"{s.start_ns // 1_000_000_000}.{s.start_ns % 1_000_000_000:09d}",
            "TraceId": s.trace_id, "SpanId": s.span_id, "ParentSpanId": s.parent_span_id, "SpanName": s.name,
            "SpanKind": _KINDS[s.kind] if 0 <= s.kind < len(_KINDS) else str(s.kind),
            "ServiceName": s.service_name,
            "ResourceAttributes": {str(k): _text(v) for k, v in s.resource.items()},
            "SpanAttributes": {str(k): _text(v) for k, v in s.attributes.items()},
            "Duration": max(0, s.end_ns - s.start_ns),
            "StatusCode": _STATUS[s.status_code] if 0 <= s.status_code < len(_STATUS) else str(s.status_code),
            "StatusMessage": s.status_message}


def _body(spans: list[Span]) -> tuple[bytes, list[tuple[Span, Exception]]]:
    """The JSONEachRow body of ``spans``, and the spans that cannot become a row (with why)."""
    lines, bad = [], []
    for s in spans:
        try:
            lines.append(json.dumps(_row(s), ensure_ascii=False, separators=(",", ":")))
        except (TypeError, ValueError, OverflowError) as e:
            bad.append((s, e))
    return ("\n".join(lines) + "\n").encode("utf-8", "surrogatepass") if lines else b"", bad


class _HttpInsert:
    """One POST per insert to ClickHouse's HTTP interface; a fresh connection each time, so a reset one is gone."""

    def __init__(self, target: ClickHouseTarget, timeout_s: float) -> None:
        self.target, self.timeout_s = target, timeout_s

    def __call__(self, body: bytes, token: str) -> None:
        t = self.target
        params = urlencode({"query": t.insert_sql, "database": t.database, "insert_deduplication_token": token,
                            "wait_end_of_query": "1"})
        headers = {"Content-Type": "application/x-ndjson"}
        if t.user:
            headers |= {"X-ClickHouse-User": t.user, "X-ClickHouse-Key": t.password}
        conn = http.client.HTTPConnection(t.host, t.port, timeout=self.timeout_s)
        try:
            conn.request("POST", f"/?{params}", body, headers)
            resp = conn.getresponse()
            text = resp.read()
        finally:
            conn.close()
        if resp.status != 200:
            first = text.decode("utf-8", "replace").strip().splitlines()[:1]
            raise ClickHouseRefused(f"HTTP {resp.status}: {first[0][:300] if first else resp.reason}")

    def close(self) -> None:
        """Nothing is held open between inserts."""


class _ChdbInsert:
    """Inserts into a chDB session at ``target.path``, creating the database and table when they are missing."""

    def __init__(self, target: ClickHouseTarget, ddl: str) -> None:
        from chdb import session

        self.target = target
        target.path.mkdir(parents=True, exist_ok=True)
        self.session = session.Session(str(target.path))
        self.session.query(f"CREATE DATABASE IF NOT EXISTS `{target.database}`")
        self.session.query(ddl)

    def __call__(self, body: bytes, token: str) -> None:
        # the token is our own hex digest (insert_token), never data; the rows follow the statement inline
        sql = self.target.insert_sql.replace(" FORMAT ", f" SETTINGS insert_deduplication_token='{token}' FORMAT ")
        self.session.query(sql + "\n" + body.decode("utf-8", "surrogatepass"))

    def close(self) -> None:
        self.session.close()


class ClickHouseSink:
    """Writes each batch to ``otel_traces`` in inserts of ``insert_rows`` spans, each named by ``insert_token``."""

    kind = "clickhouse"

    def __init__(self, target: ClickHouseTarget, *, insert_rows: int = INSERT_ROWS, timeout_s: float = TIMEOUT_S,
                 ddl: str | None = None) -> None:
        self.target, self.insert_rows = target, insert_rows
        if target.path is not None:
            self.kind = "chdb"
            self._insert = _ChdbInsert(target, ddl or _MINIMAL_DDL.format(db=target.database, table=target.table))
        else:
            self._insert = _HttpInsert(target, timeout_s)

    def __str__(self) -> str:
        return str(self.target)

    def write(self, spans: list[Span]) -> list[tuple[Span, Exception]]:
        rejected: list[tuple[Span, Exception]] = []
        for at in range(0, len(spans), self.insert_rows):
            chunk = spans[at: at + self.insert_rows]
            body, bad = _body(chunk)
            try:
                if len(bad) < len(chunk):
                    self._insert(body, insert_token(chunk))
            except Exception as e:  # noqa: BLE001 - refused, reset, timed out: the store retries this chunk on
                raise SinkFailed(spans[at:], e, rejected) from e
            rejected += bad
        return rejected

    def close(self) -> None:
        self._insert.close()


_MINIMAL_DDL = """CREATE TABLE IF NOT EXISTS `{db}`.`{table}` (
    Timestamp DateTime64(9), TraceId String, SpanId String, ParentSpanId String, SpanName LowCardinality(String),
    SpanKind LowCardinality(String), ServiceName LowCardinality(String),
    ResourceAttributes Map(LowCardinality(String), String), SpanAttributes Map(LowCardinality(String), String),
    Duration UInt64, StatusCode LowCardinality(String), StatusMessage String
) ENGINE = MergeTree PARTITION BY toDate(Timestamp) ORDER BY (ServiceName, SpanName, toDateTime(Timestamp))"""
