"""Decode OTLP trace payloads (protobuf or JSON, per the OTLP specification) into flat span records. Pure.

JSON follows the OTLP JSON encoding: lowercase-or-not hex ids, integer enums, 64-bit integers as
decimal strings or numbers. Anything that does not fit raises ``OtlpError`` with what and where.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

__all__ = ["OtlpError", "Span", "decode_json", "decode_protobuf", "span_from_dict"]


class OtlpError(ValueError):
    """A payload the receiver refuses (HTTP 400)."""


@dataclass(slots=True)
class Span:
    trace_id: str
    span_id: str
    parent_span_id: str
    name: str
    kind: int
    start_ns: int
    end_ns: int
    status_code: int
    status_message: str
    service_name: str
    attributes: dict[str, Any]
    resource: dict[str, Any]


def _any_pb(v) -> Any:
    which = v.WhichOneof("value")
    if which is None:
        return None
    if which == "array_value":
        return [_any_pb(x) for x in v.array_value.values]
    if which == "kvlist_value":
        return {kv.key: _any_pb(kv.value) for kv in v.kvlist_value.values}
    if which == "bytes_value":
        return v.bytes_value.hex()
    return getattr(v, which)


def decode_protobuf(body: bytes) -> list[Span]:
    req = ExportTraceServiceRequest()
    try:
        req.ParseFromString(body)
    except DecodeError as e:
        raise OtlpError(f"not an OTLP ExportTraceServiceRequest (protobuf): {e}") from None
    out = []
    for rs in req.resource_spans:
        res = {kv.key: _any_pb(kv.value) for kv in rs.resource.attributes}
        service = str(res.get("service.name", ""))
        for ss in rs.scope_spans:
            for s in ss.spans:
                if len(s.trace_id) != 16 or len(s.span_id) != 8:
                    raise OtlpError(f"span {s.name!r}: trace_id must be 16 bytes and span_id 8 bytes")
                out.append(Span(
                    s.trace_id.hex(), s.span_id.hex(), s.parent_span_id.hex(), s.name, s.kind,
                    s.start_time_unix_nano, s.end_time_unix_nano, s.status.code, s.status.message, service,
                    {kv.key: _any_pb(kv.value) for kv in s.attributes}, res,
                ))
    return out


def _any_json(v: Any, where: str) -> Any:
    if not isinstance(v, dict):
        raise OtlpError(f"{where}: AnyValue must be an object")
    if "stringValue" in v:
        return v["stringValue"]
    if "intValue" in v:
        try:
            return int(v["intValue"])
        except (TypeError, ValueError):
            raise OtlpError(f"{where}: intValue {v['intValue']!r} is not an integer") from None
    if "doubleValue" in v:
        return float(v["doubleValue"])
    if "boolValue" in v:
        return bool(v["boolValue"])
    if "arrayValue" in v:
        return [_any_json(x, where) for x in (v["arrayValue"].get("values") or [])]
    if "kvlistValue" in v:
        return _attrs_json(v["kvlistValue"].get("values") or [], where)
    if "bytesValue" in v:
        return v["bytesValue"]
    return None


def _attrs_json(items: Any, where: str) -> dict[str, Any]:
    if not isinstance(items, list):
        raise OtlpError(f"{where}: attributes must be a list")
    out = {}
    for kv in items:
        try:
            key, v = kv["key"], kv["value"]
        except (KeyError, TypeError):
            raise OtlpError(f"{where}: attribute without a key or value") from None
        if "stringValue" in v:  # the common case, without a call
            out[key] = v["stringValue"]
        else:
            out[key] = _any_json(v, f"{where}.{key}")
    return out


def _int(v: Any, where: str) -> int:
    try:
        return int(v)
    except (TypeError, ValueError):
        raise OtlpError(f"{where}: expected an integer, got {v!r}") from None


def span_from_dict(s: dict[str, Any], service: str, res: dict[str, Any], where: str) -> Span:
    if not isinstance(s, dict):
        raise OtlpError(f"{where}: span must be an object")
    try:
        trace_id, span_id, parent = s["traceId"], s["spanId"], s.get("parentSpanId") or ""
        if len(trace_id) != 32 or len(span_id) != 16 or len(parent) not in (0, 16):
            raise ValueError
        int(trace_id, 16), int(span_id, 16), int(parent or "0", 16)
    except (KeyError, TypeError, ValueError):
        raise OtlpError(f"{where}: traceId must be 32 and spanId / parentSpanId 16 hex digits, got "
                        f"{s.get('traceId')!r} / {s.get('spanId')!r} / {s.get('parentSpanId')!r}") from None
    try:
        start, end, kind = int(s["startTimeUnixNano"]), int(s["endTimeUnixNano"]), int(s.get("kind", 0))
    except (KeyError, TypeError, ValueError):
        raise OtlpError(f"{where}: startTimeUnixNano, endTimeUnixNano and kind must be integers") from None
    status = s.get("status") or {}
    attrs = s.get("attributes")
    return Span(
        trace_id.lower(), span_id.lower(), parent.lower(), str(s.get("name", "")), kind, start, end,
        _int(status.get("code", 0), f"{where}.status.code"), str(status.get("message", "")), service,
        _attrs_json(attrs, f"{where}.attributes") if attrs else {}, res,
    )


def decode_json(body: bytes | str) -> list[Span]:
    try:
        doc = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise OtlpError(f"not JSON: {e}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("resourceSpans", []), list):
        raise OtlpError("expected an object with a resourceSpans list")
    out = []
    for i, rs in enumerate(doc.get("resourceSpans") or []):
        if not isinstance(rs, dict):
            raise OtlpError(f"resourceSpans[{i}]: expected an object")
        res = _attrs_json((rs.get("resource") or {}).get("attributes") or [], f"resourceSpans[{i}].resource")
        service = str(res.get("service.name", ""))
        for j, ss in enumerate(rs.get("scopeSpans") or []):
            for k, s in enumerate((ss or {}).get("spans") or []):
                out.append(span_from_dict(s, service, res, f"resourceSpans[{i}].scopeSpans[{j}].spans[{k}]"))
    return out
