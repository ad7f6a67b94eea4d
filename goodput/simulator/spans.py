"""Request traces in OTLP JSON, as the OpenTelemetry Collector's file exporter writes them.

Two span shapes (``span_format``):

- ``goodput``: a SERVER ``llm.request`` from gateway receipt to the last byte sent, with back-to-back
  INTERNAL children ``llm.gateway`` -> ``llm.queue`` -> ``llm.prefill`` -> ``llm.decode`` -> ``llm.send``
  whose boundaries are the request's own timestamps (docs/design.md); a disaggregated deployment's request has
  ``llm.kv_transfer`` between ``llm.prefill`` and ``llm.decode`` (its KV moving to the decode replica);
- ``vllm``: vLLM's own, one SERVER ``llm_request`` per request that reached the engine, from engine arrival
  to the last token, with ``gen_ai.latency.*`` seconds, old-style usage names and finish reasons as vLLM V1's
  ``output_processor.do_tracing`` writes them; its resource names the deployment (``service.name``) and the
  replica (``service.instance.id``), as a vLLM started with ``OTEL_SERVICE_NAME`` would;
- ``both``: each request in both shapes, one request id (``llm.request_id`` = ``gen_ai.request.id``).

The ``llm.gateway`` span carries what is known at admission (deployment, model, tenant, tier, route, request
id; behind a circuit breaker ``llm.circuit_state``, its primary's breaker then): the live fleet exports it as soon
as the request is admitted and ``llm.queue`` as soon as it is scheduled (``early``), the root and the other segments
when it finishes, so a store sees a request while it is in flight and counts arrivals at admission. vLLM's shape
has no early span: its one span ends with the request.

A request that came with a W3C ``traceparent`` continues the caller's trace: its top span's parent is the
caller's span. Ids are lowercase hex, kinds integers, 64-bit integers decimal strings (OTLP JSON encoding).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from goodput.contracts.vocabulary import CIRCUIT_STATE_ATTR, KV_TRANSFER_SPAN, SEGMENT_SPANS
from goodput.simulator.records import RequestTable

__all__ = ["EARLY_SEGMENTS", "KV_TRANSFER", "SEGMENTS", "SPAN_FORMATS", "SPAN_KIND_INTERNAL", "SPAN_KIND_SERVER", "Part",
           "early_spans", "request_spans", "span_documents", "vllm_span", "write_spans"]

SPAN_KIND_INTERNAL = 1
SPAN_KIND_SERVER = 2
STATUS_ERROR = 2
SEGMENTS = SEGMENT_SPANS
KV_TRANSFER = KV_TRANSFER_SPAN  # between llm.prefill and llm.decode, for a disaggregated deployment's requests
KV_SPAN = 7  # its span id is the request's span id base | 7 (segments are | 1..5 by position, vLLM's | 6)
EARLY_SEGMENTS = 2  # llm.gateway (ends at admission) and llm.queue (ends at scheduling) may go out early
SPAN_FORMATS = ("goodput", "vllm", "both")
REQUESTS_PER_DOCUMENT = 256
VLLM_SPAN = 6  # the llm_request span's id is the request's span id base | 6 (the root is | 0, segments | 1..5)

_esc = json.dumps

# what of a request a document holds: (segments already sent, None) = the rest of a finished request (root
# included); (sent, upto) = its segments sent+1 .. upto while it is in flight
Part = tuple[int, int | None]


def _attr(key: str, value: str | int | float | None) -> str:
    if value is None:
        return ""
    if isinstance(value, int):
        return f'{{"key":"{key}","value":{{"intValue":"{value}"}}}}'
    if isinstance(value, float):
        return f'{{"key":"{key}","value":{{"doubleValue":{value!r}}}}}'
    return f'{{"key":"{key}","value":{{"stringValue":{_esc(value)}}}}}'


def _segments(t: dict[str, int], finish: str, handed_off: bool = False, ds: int = -1) -> list[tuple[str, int, int]]:
    """(name, start_ns, end_ns) of the children the request lived through; they tile [arrival, completed].
    ``handed_off``: a prefill replica handed it to a decode replica after its first token; ``ds``: when that decode
    replica first scheduled it (-1: never), so ``llm.kv_transfer`` is the link's time and any wait for decode blocks."""
    a, qs, sch, ft, lt, c = (t["arrival"], t["queue_start"], t["scheduled"], t["first_token"], t["last_token"],
                             t["completed"])
    out = [("llm.gateway", a, qs if 0 <= qs <= c else c)]
    enqueued = sch >= 0 or finish in ("timeout", "error", "abort")
    if enqueued and qs >= 0 and qs <= c:
        out.append(("llm.queue", qs, sch if sch >= 0 else c))
    if sch >= 0:
        out.append(("llm.prefill", sch, ft if ft >= 0 else c))
    if ft >= 0 and handed_off:
        out.append((KV_TRANSFER, ft, ds if ds >= 0 else c))
        if ds >= 0:
            out.append(("llm.decode", ds, lt if lt >= 0 else c))
    elif ft >= 0:
        out.append(("llm.decode", ft, lt if lt >= 0 else c))
    if lt >= 0:
        out.append(("llm.send", lt, c))
    return out


def _ids(table: RequestTable, i: int) -> tuple[int, str, str]:
    """The request's span id base, its trace id and its parent (the caller's span, or "")."""
    return int(table.request_id[i][-16:], 16) << 3, table.trace_id[i], table.parent_span_id[i]


def _parent(parent: str) -> str:
    return f'"parentSpanId":"{parent}",' if parent else ""


def _status(table: RequestTable, i: int) -> str:
    if table.outcome[i] == "ok":
        return '{"code":0}'
    return f'{{"code":{STATUS_ERROR},"message":{_esc(table.reject_reason[i] or table.finish_reason[i])}}}'


def _decisions(table: RequestTable, i: int) -> list[str]:
    """``llm.fallback_from`` and the rest of the gateway's routing decisions, each only when it made one."""
    return [_attr(f"llm.{k}", v[i] or None) for k, v in table.decisions.items()]


def _gateway_attrs(table: RequestTable, i: int) -> str:
    """What the gateway knows at admission: enough to count the arrival and place a request in flight, and, behind
    a fleet file's gateway, its decision (``llm.admission``, the wait there, the reason it refused)."""
    admission = table.admission[i]
    return ",".join(x for x in (
        _attr("gen_ai.request.model", table.model[i]),
        _attr("llm.tenant", table.tenant[i]),
        _attr("llm.tier", table.tier[i]),
        _attr("llm.route", table.route[i]),
        _attr("llm.deployment", table.deployment[i]),
        _attr("llm.request_id", table.request_id[i]),
        _attr("llm.admission", admission),
        _attr("llm.gateway_wait_s", table.gateway_wait_s[i]),
        _attr("llm.reject_reason", table.reject_reason[i] if admission == "rejected" else None),
        _attr("llm.overload_step", table.overload_step[i]),
        _attr("llm.degraded", table.degraded[i]),
        _attr(CIRCUIT_STATE_ATTR, table.circuit_state[i]),
        *_decisions(table, i),
    ) if x)


def _kv_attrs(table: RequestTable, i: int) -> str:
    return ",".join((_attr("llm.kv_transfer.bytes", int(table.kv_transfer_bytes[i])),
                     _attr("llm.kv_transfer.link_s", float(table.kv_transfer_s[i])),
                     _attr("llm.prefill_replica", table.prefill_replica[i])))


def _segment(table: RequestTable, i: int, trace: str, base: int, root_id: str, k: int, name: str, start: int,
             end: int) -> str:
    attrs = (f'"attributes":[{_gateway_attrs(table, i)}],' if name == "llm.gateway" else
             f'"attributes":[{_kv_attrs(table, i)}],' if name == KV_TRANSFER else "")
    return (f'{{"traceId":"{trace}","spanId":"{(base | k) & 0xFFFFFFFFFFFFFFFF:016x}","parentSpanId":"{root_id}",'
            f'"name":"{name}","kind":{SPAN_KIND_INTERNAL},"startTimeUnixNano":"{start}","endTimeUnixNano":"{end}",'
            f'{attrs}"status":{{"code":0}}}}')


def early_spans(table: RequestTable, i: int, sent: int, upto: int) -> list[str]:
    """Segments ``sent``+1 .. ``upto`` (1 ``llm.gateway``, 2 ``llm.queue``) of request ``i``, still in flight;
    their ids are the ones ``request_spans`` gives the same segments."""
    base, trace, _ = _ids(table, i)
    root_id = f"{base & 0xFFFFFFFFFFFFFFFF:016x}"
    t = table.ts
    bounds = ((t["arrival"][i], t["queue_start"][i]), (t["queue_start"][i], t["scheduled"][i]))
    return [_segment(table, i, trace, base, root_id, k, SEGMENTS[k - 1], int(bounds[k - 1][0]), int(bounds[k - 1][1]))
            for k in range(sent + 1, min(upto, EARLY_SEGMENTS) + 1) if bounds[k - 1][1] >= 0]


def request_spans(table: RequestTable, i: int, sent: int = 0) -> list[str]:
    """The JSON objects (as text) of request ``i``'s spans in goodput's shape, root first, without its first
    ``sent`` segments (exported early, while it was in flight)."""
    base, trace, parent = _ids(table, i)
    root_id = f"{base & 0xFFFFFFFFFFFFFFFF:016x}"
    t = {k: int(v[i]) for k, v in table.ts.items()}
    finish = table.finish_reason[i]
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
        _attr("llm.prefill_replica", table.prefill_replica[i] or None),
        _attr("llm.outcome", table.outcome[i]),
        _attr("llm.finish_reason", finish),
        _attr("llm.reject_reason", table.reject_reason[i]),
        _attr("llm.overload_step", table.overload_step[i]),
        _attr("llm.degraded", table.degraded[i]),
        _attr("llm.cached_tokens", int(table.cached_tokens[i])),
        _attr("llm.preemptions", int(table.preemptions[i])),
        _attr("llm.request_id", table.request_id[i]),
        *_decisions(table, i),
    ) if x)
    spans = [
        f'{{"traceId":"{trace}","spanId":"{root_id}",{_parent(parent)}"name":"llm.request","kind":{SPAN_KIND_SERVER},'
        f'"startTimeUnixNano":"{t["arrival"]}","endTimeUnixNano":"{t["completed"]}",'
        f'"attributes":[{attrs}],"status":{_status(table, i)}}}'
    ]
    k = 0
    for pos, (name, start, end) in enumerate(_request_segments(table, i, t), start=1):
        k += name != KV_TRANSFER
        if pos > sent:
            spans.append(_segment(table, i, trace, base, root_id, KV_SPAN if name == KV_TRANSFER else k, name, start,
                                  end))
    return spans


def _request_segments(table: RequestTable, i: int, t: dict[str, int]) -> list[tuple[str, int, int]]:
    return _segments(t, table.finish_reason[i], bool(table.prefill_replica[i]), int(table.decode_start[i]))


def vllm_span(table: RequestTable, i: int) -> str | None:
    """Request ``i`` as vLLM's ``llm_request`` span (JSON text), or None if it never reached the engine."""
    t = {k: int(v[i]) for k, v in table.ts.items()}
    finish = table.finish_reason[i]
    seg = {name: (end - start) / 1e9 for name, start, end in _request_segments(table, i, t)}
    if "llm.queue" not in seg:
        return None
    base, trace, parent = _ids(table, i)
    arrival = t["queue_start"]  # the engine's arrival_time: after the gateway and the API server
    end = t["last_token"] if t["last_token"] >= 0 else t["completed"]
    reason = finish if finish in ("stop", "length") else "abort"
    attrs = ",".join(x for x in (
        _attr("gen_ai.response.model", table.model[i]),
        _attr("gen_ai.request.id", table.request_id[i]),
        _attr("gen_ai.usage.prompt_tokens", int(table.input_tokens[i])),
        _attr("gen_ai.usage.completion_tokens", int(table.output_tokens[i])),
        _attr("gen_ai.request.n", 1),
        _attr("gen_ai.response.finish_reasons", json.dumps([reason])),
        _attr("gen_ai.latency.time_in_queue", seg["llm.queue"]),
        _attr("gen_ai.latency.time_to_first_token", (t["first_token"] - arrival) / 1e9 if t["first_token"] >= 0 else None),
        _attr("gen_ai.latency.time_in_model_prefill", seg.get("llm.prefill")),
        _attr("gen_ai.latency.time_in_model_decode", seg.get("llm.decode")),
        _attr("gen_ai.latency.time_in_model_inference",
              (end - t["scheduled"]) / 1e9 if t["scheduled"] >= 0 else None),
        _attr("gen_ai.latency.e2e", (end - arrival) / 1e9),
    ) if x)
    return (f'{{"traceId":"{trace}","spanId":"{(base | VLLM_SPAN) & 0xFFFFFFFFFFFFFFFF:016x}",{_parent(parent)}'
            f'"name":"llm_request","kind":{SPAN_KIND_SERVER},"startTimeUnixNano":"{arrival}","endTimeUnixNano":"{end}",'
            f'"attributes":[{attrs}],"status":{_status(table, i)}}}')


def _resource(service: str, instance: str | None = None) -> str:
    attrs = ",".join(x for x in (_attr("service.name", service), _attr("service.instance.id", instance)) if x)
    return f'{{"attributes":[{attrs}]}}'


def span_documents(table: RequestTable, service: str = "goodput-simulator", rows: range | None = None,
                   span_format: str = "goodput", parts: dict[int, Part] | None = None) -> Iterator[str]:
    """One ``{"resourceSpans": ...}`` JSON document per batch of requests. ``parts``: what to send of each
    request, by ``table.rid`` (default: all of each, every request finished)."""
    if span_format not in SPAN_FORMATS:
        raise ValueError(f"span_format must be one of {', '.join(SPAN_FORMATS)}, got {span_format!r}")
    scope = '{"name":"goodput.simulator","version":"0.1.0"}'
    rows = rows if rows is not None else range(table.n)
    for start in range(rows.start, rows.stop, REQUESTS_PER_DOCUMENT):
        ours: list[str] = []
        engines: dict[tuple[str, str], list[str]] = {}  # (deployment, replica) -> llm_request spans
        for i in range(start, min(start + REQUESTS_PER_DOCUMENT, rows.stop)):
            sent, upto = parts.get(int(table.rid[i]), (0, None)) if parts is not None else (0, None)
            if span_format != "vllm":
                ours.extend(request_spans(table, i, sent) if upto is None else early_spans(table, i, sent, upto))
            if span_format != "goodput" and upto is None and (span := vllm_span(table, i)) is not None:
                engines.setdefault((table.deployment[i], table.replica[i]), []).append(span)
        blocks = [(_resource(service), ours)] if ours else []
        blocks += [(_resource(dep, rep or None), spans) for (dep, rep), spans in engines.items()]
        yield '{"resourceSpans":[' + ",".join(
            f'{{"resource":{res},"scopeSpans":[{{"scope":{scope},"spans":[{",".join(spans)}]}}]}}'
            for res, spans in blocks) + "]}"


def write_spans(table: RequestTable, path: Path, span_format: str = "goodput") -> int:
    """Write the collector-style JSON lines file; returns the number of documents."""
    n = 0
    with open(path, "w") as f:
        for doc in span_documents(table, span_format=span_format):
            f.write(doc)
            f.write("\n")
            n += 1
    return n
