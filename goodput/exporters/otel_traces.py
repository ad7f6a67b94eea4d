"""The OpenTelemetry Collector's ``otel_traces`` ClickHouse table: its DDL, and OTLP spans as its rows.

The DDL is the Collector contrib clickhouseexporter's own (``goodput/exporters/sql/traces_table.sql``, vendored; see
SOURCES.md beside it), rendered as the exporter renders it. A span becomes the row the exporter writes
(``exporter_traces.go``): ``Timestamp`` the start, ``Duration`` end minus start in nanoseconds, ``SpanKind`` and
``StatusCode`` as pdata names them (``Server``, ``Ok``), ids lowercase hex (empty when absent), ``ServiceName``
the resource's ``service.name``, attributes as ``Map(String, String)`` with pdata's ``Value.AsString`` text.
``goodput.exporters.otlp.Span`` carries no events, links, trace state or scope, so those columns are empty.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from goodput.exporters.otlp import Span
from goodput.foundation.clickhouse import DEFAULT_DATABASE, DEFAULT_TABLE, Statements, ident

__all__ = ["INSERT_BATCH", "SPAN_KINDS", "STATUS_CODES", "TableSpec", "attribute_text", "create_table",
           "create_table_sql", "insert_spans", "span_row", "ttl_expression"]

# pdata's ptrace.SpanKind.String() and ptrace.StatusCode.String(), by OTLP enum value
SPAN_KINDS = ("Unspecified", "Internal", "Server", "Client", "Producer", "Consumer")
STATUS_CODES = ("Unset", "Ok", "Error")
INSERT_BATCH = 50_000  # rows per INSERT: one bound parameter each, a few tens of MB at most


@dataclass(frozen=True, slots=True)
class TableSpec:
    """The exporter's settings that shape the table: database, traces_table_name, ttl, table_engine, cluster."""

    database: str = DEFAULT_DATABASE
    table: str = DEFAULT_TABLE
    engine: str = "MergeTree()"  # table_engine: name + params; ReplicatedMergeTree(...) on a cluster
    ttl_s: int = 0  # 0: keep forever
    cluster: str = ""
    # non_replicated_deduplication_window of a table goodput creates on a plain MergeTree: its inserts' tokens are
    # honoured (a Replicated* table honours them anyway); 0 leaves the Collector's DDL as it is
    dedup_window: int = 0


@cache
def _text(name: str) -> str:
    return resources.files("goodput.exporters").joinpath("sql", name).read_text()


def ttl_expression(ttl_s: int, field: str = "toDateTime(Timestamp)") -> str:
    """The exporter's GenerateTTLExpr: the largest whole unit (day, hour, minute, second) of the TTL."""
    if ttl_s <= 0:
        return ""
    for unit, seconds in (("Day", 86400), ("Hour", 3600), ("Minute", 60)):
        if ttl_s % seconds == 0:
            return f"TTL {field} + toInterval{unit}({ttl_s // seconds})"
    return f"TTL {field} + toIntervalSecond({ttl_s})"


def create_table_sql(spec: TableSpec = TableSpec()) -> str:
    """The vendored template rendered (no full-text indexes: bloom filters, the exporter's default)."""
    text = _text("traces_table.sql")
    head, _, rest = text.partition("{{- if .HasFullTextSearch}}")
    _, _, rest = rest.partition("{{- else}}")
    bloom, _, tail = rest.partition("{{- end}}")
    text = head.rstrip("\n") + bloom.rstrip("\n") + tail
    cluster = f"ON CLUSTER {ident(spec.cluster)}" if spec.cluster else ""
    for key, value in (("{{ident .Database}}", ident(spec.database)), ("{{ident .TableName}}", ident(spec.table)),
                       ("{{.ClusterString}}", cluster), ("{{.Engine}}", spec.engine),
                       ("{{.TTL}}", ttl_expression(spec.ttl_s))):
        text = text.replace(key, value)
    if spec.dedup_window > 0 and not spec.engine.startswith("Replicated"):
        text = text.replace("SETTINGS index_granularity = 8192,",
                            f"SETTINGS index_granularity = 8192, non_replicated_deduplication_window = {spec.dedup_window:d},")
    return text


def create_table(con: Statements, spec: TableSpec = TableSpec()) -> None:
    """CREATE DATABASE and TABLE IF NOT EXISTS, as the exporter does at start."""
    cluster = f" ON CLUSTER {ident(spec.cluster)}" if spec.cluster else ""
    con.command(f"CREATE DATABASE IF NOT EXISTS {ident(spec.database)}{cluster}")
    con.command(create_table_sql(spec))


def attribute_text(value: Any) -> str:
    """pdata ``Value.AsString``: strings as they are, bools ``true``/``false``, ints in decimal, doubles in the
    shortest form without an exponent, arrays and maps as compact JSON, empty as ``""``."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _double(value)
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)


def _double(v: float) -> str:  # Go strconv.FormatFloat(v, 'f', -1, 64)
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    text = repr(v)
    if "e" not in text and "E" not in text:
        return text.removesuffix(".0")
    from decimal import Decimal

    return format(Decimal(text), "f")


def _attrs(d: dict[str, Any]) -> dict[str, str]:
    return {k: attribute_text(v) for k, v in d.items()}


def span_row(span: Span) -> dict[str, Any]:
    """The exporter's row for ``span``: the column names of its traces_insert.sql (Nested as parallel arrays)."""
    return {
        "Timestamp": span.start_ns,
        "TraceId": span.trace_id,
        "SpanId": span.span_id,
        "ParentSpanId": span.parent_span_id,
        "TraceState": "",
        "SpanName": span.name,
        "SpanKind": SPAN_KINDS[span.kind],
        "ServiceName": attribute_text(span.resource.get("service.name")),
        "ResourceAttributes": _attrs(span.resource),
        "ScopeName": "",
        "ScopeVersion": "",
        "SpanAttributes": _attrs(span.attributes),
        "Duration": max(span.end_ns - span.start_ns, 0),  # the exporter's int64 into UInt64: negative clamps
        "StatusCode": STATUS_CODES[span.status_code],
        "StatusMessage": span.status_message,
        "EventsTimestamp": [], "EventsName": [], "EventsAttributes": [],
        "LinksTraceId": [], "LinksSpanId": [], "LinksTraceState": [], "LinksAttributes": [],
    }


def insert_spans(con: Statements, spans: Iterable[Span], spec: TableSpec = TableSpec(),
                 batch: int = INSERT_BATCH, token: str | None = None) -> int:
    """Insert ``spans`` as the exporter's rows, ``batch`` rows per INSERT; returns how many. ``token``: the
    insert's ``insert_deduplication_token`` (one INSERT only: ``batch`` must hold every span)."""
    sql, n, lines = _text("traces_insert.sql"), 0, []
    params = {"database": spec.database, "table": spec.table}
    if token is not None:
        sql, params["token"] = sql.rstrip() + "\nSETTINGS insert_deduplication_token = {token:String}", token
    for span in spans:
        lines.append(json.dumps(span_row(span), separators=(",", ":"), ensure_ascii=False))
        if len(lines) >= batch:
            n += _flush(con, sql, lines, params)
    return n + _flush(con, sql, lines, params)


def _flush(con: Statements, sql: str, lines: list[str], params: dict[str, str]) -> int:
    if not lines:
        return 0
    con.command(sql, {**params, "rows": "\n".join(lines)})
    n = len(lines)
    lines.clear()
    return n
