"""Decode OTLP trace payloads (protobuf or JSON, per the OTLP specification) into flat span records. Pure.

JSON follows the OTLP JSON encoding: lowercase-or-not hex ids, integer enums, 64-bit integers as
decimal strings or numbers. Anything that does not fit raises ``OtlpError`` with what and where.

Given ``Limits`` (the receiver does; files read by the analyzer do not), a payload is sized up before it is
decoded: for JSON, spans and values are counted in the raw bytes (no allocation) so a body whose decoded tree
would dwarf it is refused first; for protobuf, spans are counted by walking the wire format (each span skipped by
its length, stopping at the limit) before the C parser allocates a message per span. AnyValue nesting is capped
at ``MAX_DEPTH`` always.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from goodput.foundation.errors import long_integer

__all__ = ["MAX_DEPTH", "RECEIVER_LIMITS", "Limits", "OtlpError", "OtlpInvalid", "OtlpTooLarge", "Span",
           "decode_json", "decode_protobuf", "span_from_dict"]


class OtlpError(ValueError):
    """A payload the receiver refuses (HTTP 400)."""


class OtlpInvalid(OtlpError):
    """Well-formed OTLP holding a value the trace store cannot (enum or time out of range, text not UTF-8), or over
    a per-span limit (attributes, string length, nesting)."""


class OtlpTooLarge(OtlpError):
    """A payload over a per-post count limit (spans, JSON values): refused before it is decoded (HTTP 413)."""


@dataclass(frozen=True, slots=True)
class Limits:
    """What one payload may hold, checked before the work it would cost."""

    max_spans: int = 10_000  # per payload
    max_json_values: int = 1_000_000  # JSON values and keys per payload (each costs a Python object)
    max_attributes: int = 128  # per span, and per resource (OpenTelemetry's default attribute count limit)
    max_string_chars: int = 65_536  # a span name or string attribute value


RECEIVER_LIMITS = Limits()
MAX_DEPTH = 8  # arrays / kvlists nested in one attribute value


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


# a \\uD800-\\uDFFF escape: the only way a JSON payload can carry a string that is not valid UTF-8
_ESCAPED_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]")


def _any_pb(v, depth: int = 0) -> Any:
    which = v.WhichOneof("value")
    if which is None:
        return None
    if which in ("array_value", "kvlist_value") and depth >= MAX_DEPTH:
        raise OtlpInvalid(f"an attribute value nests arrays / kvlists more than {MAX_DEPTH} deep")
    if which == "array_value":
        return [_any_pb(x, depth + 1) for x in v.array_value.values]
    if which == "kvlist_value":
        return {kv.key: _any_pb(kv.value, depth + 1) for kv in v.kvlist_value.values}
    if which == "bytes_value":
        return v.bytes_value.hex()
    return getattr(v, which)


def _attrs_pb(attributes) -> dict[str, Any]:
    """Repeated KeyValue as a dict: a string value read inline (most are), any other through ``_any_pb``."""
    out = {}
    for kv in attributes:
        v = kv.value
        out[kv.key] = v.string_value if v.WhichOneof("value") == "string_value" else _any_pb(v)
    return out


_MAX_KIND = 5  # SPAN_KIND_CONSUMER
_MAX_STATUS = 2  # STATUS_CODE_ERROR
_INT64 = 2**63


def _check(span: Span, where: str) -> Span:
    """``span`` if every field fits the trace store's schema (int8 enums, int64 times, UTF-8 text), else OtlpError:
    a span refused here is a 400, one let through would fail the Parquet flush after its 200."""
    if not 0 <= span.kind <= _MAX_KIND:
        raise OtlpInvalid(f"{where}: kind {span.kind} is not a SpanKind (0..{_MAX_KIND})")
    if not 0 <= span.status_code <= _MAX_STATUS:
        raise OtlpInvalid(f"{where}: status.code {span.status_code} is not a StatusCode (0..{_MAX_STATUS})")
    if not (0 <= span.start_ns < _INT64 and 0 <= span.end_ns < _INT64):
        raise OtlpInvalid(f"{where}: startTimeUnixNano / endTimeUnixNano {span.start_ns} / {span.end_ns} "
                        "outside 0 .. 2^63-1")
    return span


def _utf8(spans: list[Span]) -> None:
    """Every string of ``spans`` encodes as UTF-8 (JSON ``\\ud800`` escapes decode to lone surrogates)."""
    for i, s in enumerate(spans):
        try:
            for text in (s.name, s.status_message, s.service_name):
                text.encode()
            for d in (s.attributes, s.resource):
                for k, v in d.items():  # other values are stored as their repr, which escapes surrogates
                    k.encode()
                    if isinstance(v, str):
                        v.encode()
        except UnicodeEncodeError:
            raise OtlpInvalid(f"span {i} ({s.trace_id}/{s.span_id}): a string is not valid UTF-8 "
                            "(lone surrogate)") from None


def _limit_attributes(n: int, limits: Limits | None, where: str) -> None:
    if limits is not None and n > limits.max_attributes:
        raise OtlpInvalid(f"{where}: {n} attributes, over the limit of {limits.max_attributes}")


def _limit_strings(span: Span, limits: Limits | None, where: str) -> None:
    if limits is None:
        return
    cap = limits.max_string_chars
    if len(span.name) > cap or any(v.__class__ is str and len(v) > cap for v in span.attributes.values()):
        raise OtlpInvalid(f"{where}: a name or string attribute over the limit of {cap} characters")


def _limit_spans(n: int, limits: Limits | None) -> None:
    if limits is not None and n > limits.max_spans:
        raise OtlpTooLarge(f"more than {limits.max_spans} spans in one payload, the limit (send smaller batches)")


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while shift < 64:
        if i >= len(buf):
            break
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, i
        shift += 7
    raise OtlpError("not an OTLP ExportTraceServiceRequest (protobuf): truncated or overlong varint")


def _len_fields(buf: bytes, start: int, end: int, number: int, budget: list[int]) -> Iterator[tuple[int, int]]:
    """(start, end) of each length-delimited field ``number`` in ``buf[start:end]``, skipping the other fields;
    every field visited spends one of ``budget[0]``."""
    i = start
    while i < end:
        budget[0] -= 1
        if budget[0] < 0:
            raise OtlpTooLarge("too many protobuf fields around the spans of one payload")
        key, i = _varint(buf, i)
        wire = key & 7
        if wire == 0:
            _, i = _varint(buf, i)
        elif wire == 1:
            i += 8
        elif wire == 5:
            i += 4
        elif wire == 2:
            n, i = _varint(buf, i)
            if key >> 3 == number and i + n <= end:
                yield i, i + n
            i += n
        else:
            raise OtlpError(f"not an OTLP ExportTraceServiceRequest (protobuf): wire type {wire}")
        if i > end:
            raise OtlpError("not an OTLP ExportTraceServiceRequest (protobuf): a field runs past its message")


def _size_up_protobuf(body: bytes, limits: Limits) -> None:
    """Count the spans of a protobuf payload from its wire format (resource_spans = 1, scope_spans = 2, spans = 2),
    stopping at the limit: O(limit) work and no allocation, where the C parser would build every span first."""
    spans, budget = 0, [4 * limits.max_spans + 1024]
    for rs in _len_fields(body, 0, len(body), 1, budget):
        for ss in _len_fields(body, *rs, 2, budget):
            for _ in _len_fields(body, *ss, 2, budget):
                spans += 1
                if spans > limits.max_spans:
                    _limit_spans(spans, limits)


def decode_protobuf(body: bytes, limits: Limits | None = None) -> list[Span]:
    if limits is not None:
        _size_up_protobuf(body, limits)
    req = ExportTraceServiceRequest()
    try:
        req.ParseFromString(body)
    except DecodeError as e:
        raise OtlpError(f"not an OTLP ExportTraceServiceRequest (protobuf): {e}") from None
    out = []
    for i, rs in enumerate(req.resource_spans):
        _limit_attributes(len(rs.resource.attributes), limits, f"resource_spans[{i}].resource")
        res = _attrs_pb(rs.resource.attributes)
        service = str(res.get("service.name", ""))
        for j, ss in enumerate(rs.scope_spans):
            for k, s in enumerate(ss.spans):
                where = f"resource_spans[{i}].scope_spans[{j}].spans[{k}]"
                if len(s.trace_id) != 16 or len(s.span_id) != 8:
                    raise OtlpError(f"{where} {s.name!r}: trace_id must be 16 bytes and span_id 8 bytes")
                _limit_attributes(len(s.attributes), limits, where)
                out.append(_check(Span(
                    s.trace_id.hex(), s.span_id.hex(), s.parent_span_id.hex(), s.name, s.kind,
                    s.start_time_unix_nano, s.end_time_unix_nano, s.status.code, s.status.message, service,
                    _attrs_pb(s.attributes), res,
                ), where))
                _limit_strings(out[-1], limits, where)
    return out


def _any_json(v: Any, where: str, depth: int = 0) -> Any:
    if not isinstance(v, dict):
        raise OtlpError(f"{where}: AnyValue must be an object")
    if "stringValue" in v:
        return _str(v["stringValue"], f"{where}.stringValue")
    if "intValue" in v:
        try:
            n = int(v["intValue"])
        except (TypeError, ValueError, OverflowError):
            return _int(v["intValue"], f"{where}.intValue")  # raises, saying why
        if not -_INT64 <= n < _INT64:  # AnyValue.int_value is an int64, as the store and the metrics take it
            raise OtlpInvalid(f"{where}.intValue: {v['intValue']!r} is outside the int64 range")
        return n
    if "doubleValue" in v:
        d = v["doubleValue"]
        if isinstance(d, bool) or not isinstance(d, int | float | str):
            raise OtlpError(f"{where}: doubleValue {d!r} is not a number")
        try:
            return float(d)  # the JSON mapping also allows "NaN", "Infinity" and numbers as strings
        except ValueError:
            raise OtlpError(f"{where}: doubleValue {d!r} is not a number") from None
    if "boolValue" in v:
        if not isinstance(v["boolValue"], bool):
            raise OtlpError(f"{where}: boolValue {v['boolValue']!r} is not true or false")
        return v["boolValue"]
    if ("arrayValue" in v or "kvlistValue" in v) and depth >= MAX_DEPTH:
        raise OtlpInvalid(f"{where}: arrays / kvlists nested more than {MAX_DEPTH} deep")
    if "arrayValue" in v:
        return [_any_json(x, where, depth + 1) for x in _list(_obj(v["arrayValue"], f"{where}.arrayValue").get(
            "values"), f"{where}.arrayValue.values")]
    if "kvlistValue" in v:
        return _attrs_json(_obj(v["kvlistValue"], f"{where}.kvlistValue").get("values") or [], where, depth + 1)
    if "bytesValue" in v:
        return _str(v["bytesValue"], f"{where}.bytesValue")
    return None


def _obj(v: Any, where: str) -> dict[str, Any]:
    if v is None:
        return {}
    if not isinstance(v, dict):
        raise OtlpError(f"{where}: expected an object, got {type(v).__name__}")
    return v


def _list(v: Any, where: str) -> list[Any]:
    if v is None:
        return []
    if not isinstance(v, list):
        raise OtlpError(f"{where}: expected a list, got {type(v).__name__}")
    return v


def _str(v: Any, where: str) -> str:
    if not isinstance(v, str):
        raise OtlpError(f"{where}: expected a string, got {type(v).__name__}")
    return v


def _attrs_json(items: Any, where: str, depth: int = 0) -> dict[str, Any]:
    if not isinstance(items, list):
        raise OtlpError(f"{where}: attributes must be a list")
    try:  # the common case, every value a string and no key twice, in one comprehension; anything else below
        out = {kv["key"]: kv["value"]["stringValue"] for kv in items}
        if (len(out) == len(items) and all(k.__class__ is str for k in out)
                and all(v.__class__ is str for v in out.values())):
            return out
    except (KeyError, TypeError):
        pass
    return _attrs_each(items, where, depth)


def _attrs_each(items: list[Any], where: str, depth: int) -> dict[str, Any]:
    """``_attrs_json`` one attribute at a time: any value type, and the error that names what is wrong."""
    out = {}
    for kv in items:
        try:
            key, v = kv["key"], kv["value"]
        except (KeyError, TypeError):
            raise OtlpError(f"{where}: attribute without a key or value") from None
        if not isinstance(key, str):
            raise OtlpError(f"{where}: attribute key {key!r} is not a string")
        if v.__class__ is dict and v.get("stringValue").__class__ is str:  # the common case, without a call
            out[key] = v["stringValue"]
        else:
            out[key] = _any_json(v, f"{where}.{key}", depth)
    return out


def _int(v: Any, where: str) -> int:
    """An integer from a JSON number or decimal string (how the JSON mapping writes 64-bit integers)."""
    if isinstance(v, bool) or not isinstance(v, int | float | str):
        raise OtlpError(f"{where}: expected an integer, got {v!r}")
    try:
        return int(v) if not isinstance(v, str) else int(v.strip(), 10)
    except (ValueError, OverflowError):
        raise OtlpError(f"{where}: expected an integer, got {v!r}") from None


def _hex_id(v: Any, nbytes: int, where: str, required: bool = True) -> str:
    if not required and v in (None, ""):
        return ""
    try:
        if len(v) == 2 * nbytes and len(bytes.fromhex(v)) == nbytes:
            return v.lower()
    except (TypeError, ValueError):
        pass
    raise OtlpError(f"{where}: expected {2 * nbytes} hex digits, got {v!r}")


def span_from_dict(s: dict[str, Any], service: str, res: dict[str, Any], where: str) -> Span:
    try:  # the common, well-formed case in one pass; anything odd is explained by _refuse_span
        trace_id, span_id, parent = s["traceId"], s["spanId"], s.get("parentSpanId") or ""
        ids = trace_id + span_id + parent
        start, end, kind = int(s["startTimeUnixNano"]), int(s["endTimeUnixNano"]), int(s.get("kind", 0))
        status = s.get("status") or _NO_STATUS
        code, message, name = int(status.get("code", 0)), status.get("message", ""), s.get("name", "")
        ok = (len(trace_id) == 32 and len(span_id) == 16 and len(parent) in (0, 16)
              and len(bytes.fromhex(ids)) * 2 == len(ids) and name.__class__ is str and message.__class__ is str)
    except (KeyError, TypeError, ValueError, OverflowError, AttributeError):
        ok = False
    if not ok:
        _refuse_span(s, where)
    attrs = s.get("attributes")
    return _check(Span(trace_id.lower(), span_id.lower(), parent.lower(), name, kind, start, end, code, message,
                       service, _attrs_json(attrs, f"{where}.attributes") if attrs else {}, res), where)


_NO_STATUS: dict[str, Any] = {}


def _refuse_span(s: Any, where: str) -> None:
    """Raise OtlpError naming the first field of span ``s`` that is missing or of the wrong type."""
    if not isinstance(s, dict):
        raise OtlpError(f"{where}: span must be an object")
    _hex_id(s.get("traceId"), 16, f"{where}.traceId")
    _hex_id(s.get("spanId"), 8, f"{where}.spanId")
    _hex_id(s.get("parentSpanId"), 8, f"{where}.parentSpanId", required=False)
    for key in ("startTimeUnixNano", "endTimeUnixNano"):
        if key not in s:
            raise OtlpError(f"{where}: {key} is required")
        _int(s[key], f"{where}.{key}")
    _int(s.get("kind", 0), f"{where}.kind")
    status = _obj(s.get("status"), f"{where}.status")
    _int(status.get("code", 0), f"{where}.status.code")
    _str(status.get("message", ""), f"{where}.status.message")
    _str(s.get("name", ""), f"{where}.name")
    raise OtlpError(f"{where}: not an OTLP span")


def _size_up_json(body: bytes | str, limits: Limits) -> None:
    """Refuse a JSON payload whose decoded tree would be too large, from counts in its raw text: every value and
    key follows a ``{``, ``[``, ``:`` or ``,`` (or is the document), and every span has a ``"spanId"`` key, so
    these counts are upper bounds (characters inside strings only overcount)."""
    raw = body if isinstance(body, bytes) else body.encode("utf-8", "surrogatepass")
    values = 1 + sum(raw.count(c) for c in (b"{", b"[", b":", b","))
    if values > limits.max_json_values:
        raise OtlpTooLarge(f"about {values} JSON values in one payload, over the limit of {limits.max_json_values} "
                           "(send smaller batches)")
    _limit_spans(raw.count(b'"spanId"'), limits)


def decode_json(body: bytes | str, limits: Limits | None = None) -> list[Span]:
    if limits is not None:
        _size_up_json(body, limits)
    try:
        doc = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise OtlpError(f"not JSON: {e}") from None
    except RecursionError:
        raise OtlpError("not JSON: nested too deeply") from None
    except ValueError:  # what else json.loads raises: an integer past Python's digit limit
        raise OtlpError(f"not usable JSON: {long_integer()}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("resourceSpans", []), list):
        raise OtlpError("expected an object with a resourceSpans list")
    out = []
    for i, rs in enumerate(doc.get("resourceSpans") or []):
        where = f"resourceSpans[{i}]"
        rs = _obj(rs, where)
        attrs = _obj(rs.get("resource"), f"{where}.resource").get("attributes") or []
        _limit_attributes(len(attrs) if isinstance(attrs, list) else 0, limits, f"{where}.resource")
        res = _attrs_json(attrs, f"{where}.resource")
        service = str(res.get("service.name", ""))
        for j, ss in enumerate(_list(rs.get("scopeSpans"), f"{where}.scopeSpans")):
            w = f"{where}.scopeSpans[{j}]"
            for k, s in enumerate(_list(_obj(ss, w).get("spans"), f"{w}.spans")):
                span = span_from_dict(s, service, res, f"{w}.spans[{k}]")
                if limits is not None:
                    _limit_attributes(len(span.attributes), limits, f"{w}.spans[{k}]")
                    _limit_strings(span, limits, f"{w}.spans[{k}]")
                out.append(span)
    if _ESCAPED_SURROGATE.search(body if isinstance(body, bytes) else body.encode("utf-8", "surrogatepass")):
        _utf8(out)
    return out
