"""Request traces in OTLP JSON, as the OpenTelemetry Collector's file exporter writes them.

One trace per request: a SERVER root ``llm.request`` from gateway receipt to the last byte sent,
and back-to-back INTERNAL children ``llm.gateway`` -> ``llm.queue`` -> ``llm.prefill`` ->
``llm.decode`` -> ``llm.send`` whose boundaries are the request's own timestamps (DESIGN.md).
Ids are lowercase hex, kinds integers, 64-bit integers decimal strings (OTLP JSON encoding).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from simulator.records import RequestTable

__all__ = ["SEGMENTS", "SPAN_KIND_INTERNAL", "SPAN_KIND_SERVER", "request_spans", "span_documents", "write_spans"]

SPAN_KIND_INTERNAL = 1
SPAN_KIND_SERVER = 2
STATUS_ERROR = 2
SEGMENTS = ("llm.gateway", "llm.queue", "llm.prefill", "llm.decode", "llm.send")
REQUESTS_PER_DOCUMENT = 256

_esc = json.dumps


def _attr(key: str, value: str | int | None) -> str:
    if value is None:
        return ""
    if isinstance(value, int):
        return f'{{"key":"{key}","value":{{"intValue":"{value}"}}}}'
    return f'{{"key":"{key}","value":{{"stringValue":{_esc(value)}}}}}'


def _segments(t: dict[str, int], finish: str) -> list[tuple[str, int, int]]:
    """(name, start_ns, end_ns) of the children the request lived through; they tile [arrival, completed]."""
    a, qs, sch, ft, lt, c = (t["arrival"], t["queue_start"], t["scheduled"], t["first_token"], t["last_token"],
                             t["completed"])
    out = [("llm.gateway", a, qs if 0 <= qs <= c else c)]
    enqueued = sch >= 0 or finish in ("timeout", "error", "abort")
    if enqueued and qs >= 0 and qs <= c:
        out.append(("llm.queue", qs, sch if sch >= 0 else c))
    if sch >= 0:
        out.append(("llm.prefill", sch, ft if ft >= 0 else c))
    if ft >= 0:
        out.append(("llm.decode", ft, lt if lt >= 0 else c))
    if lt >= 0:
        out.append(("llm.send", lt, c))
    return out


def request_spans(table: RequestTable, i: int) -> list[str]:
    """The JSON objects (as text) of request ``i``'s spans, root first."""
    trace = table.trace_id[i]
    rid = int(trace[-16:], 16)
    root_id = f"{(rid << 3) & 0xFFFFFFFFFFFFFFFF:016x}"
    t = {k: int(v[i]) for k, v in table.ts.items()}
    finish = table.finish_reason[i]
    outcome = table.outcome[i]
    attrs = ",".join(x for x in (
        _attr("gen_ai.operation.name", table.operation[i]),
        _attr("gen_ai.request.model", table.model[i]),
        _attr("gen_ai.usage.input_tokens", int(table.input_tokens[i])),
        _attr("gen_ai.usage.output_tokens", int(table.output_tokens[i])),
        _attr("llm.tenant", table.tenant[i]),
        _attr("llm.tier", table.tier[i]),
        _attr("llm.route", table.route[i]),
        _attr("llm.scene", table.scene[i]),
        _attr("llm.deployment", table.deployment[i]),
        _attr("llm.replica", table.replica[i] or None),
        _attr("llm.outcome", outcome),
        _attr("llm.finish_reason", finish),
        _attr("llm.reject_reason", table.reject_reason[i]),
        _attr("llm.cached_tokens", int(table.cached_tokens[i])),
        _attr("llm.preemptions", int(table.preemptions[i])),
        _attr("llm.request_id", table.request_id[i]),
    ) if x)
    status = (f'{{"code":{STATUS_ERROR},"message":{_esc(table.reject_reason[i] or finish)}}}'
              if outcome != "ok" else '{"code":0}')
    spans = [
        f'{{"traceId":"{trace}","spanId":"{root_id}","name":"llm.request","kind":{SPAN_KIND_SERVER},'
        f'"startTimeUnixNano":"{t["arrival"]}","endTimeUnixNano":"{t["completed"]}",'
        f'"attributes":[{attrs}],"status":{status}}}'
    ]
    for k, (name, start, end) in enumerate(_segments(t, finish), start=1):
        span_id = f"{((rid << 3) | k) & 0xFFFFFFFFFFFFFFFF:016x}"
        spans.append(
            f'{{"traceId":"{trace}","spanId":"{span_id}","parentSpanId":"{root_id}","name":"{name}",'
            f'"kind":{SPAN_KIND_INTERNAL},"startTimeUnixNano":"{start}","endTimeUnixNano":"{end}","status":{{"code":0}}}}'
        )
    return spans


def span_documents(table: RequestTable, service: str = "goodput-simulator",
                   rows: range | None = None) -> Iterator[str]:
    """One ``{"resourceSpans": ...}`` JSON document per batch of requests."""
    resource = f'{{"attributes":[{_attr("service.name", service)}]}}'
    scope = '{"name":"goodput.simulator","version":"0.1.0"}'
    rows = rows if rows is not None else range(table.n)
    for start in range(rows.start, rows.stop, REQUESTS_PER_DOCUMENT):
        spans = []
        for i in range(start, min(start + REQUESTS_PER_DOCUMENT, rows.stop)):
            spans.extend(request_spans(table, i))
        yield (f'{{"resourceSpans":[{{"resource":{resource},"scopeSpans":[{{"scope":{scope},'
               f'"spans":[{",".join(spans)}]}}]}}]}}')


def write_spans(table: RequestTable, path: Path) -> int:
    """Write the collector-style JSON lines file; returns the number of documents."""
    n = 0
    with open(path, "w") as f:
        for doc in span_documents(table):
            f.write(doc)
            f.write("\n")
            n += 1
    return n
