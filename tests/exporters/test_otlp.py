"""The OTLP decoder and receiver against wrong-typed, out-of-range, compressed-bomb and fuzzed payloads:
every one is a 4xx with a reason and a count, never a 500, and nothing that passes can break the Parquet flush."""

import copy
import gzip
import json
import random
import zlib

import pytest

from goodput.exporters.otlp import OtlpError, decode_json, decode_protobuf
from goodput.exporters.parquet_sink import spans_to_arrow
from goodput.exporters.requests import OTLP_MAX_BODY_BYTES, RequestMetrics, TraceReceiver
from goodput.exporters.trace_store import TraceStore
from tests.conftest import FIXTURES

SAMPLE = json.loads((FIXTURES / "otlp" / "otlp_proto_examples_trace.json").read_text())


def _span(**over) -> dict:
    s = {"traceId": "ab" * 16, "spanId": "cd" * 8, "name": "llm.request", "kind": 2,
         "startTimeUnixNano": "1795424400000000000", "endTimeUnixNano": "1795424401000000000",
         "status": {"code": 1}, "attributes": [{"key": "llm.tenant", "value": {"stringValue": "acme"}}]}
    s.update(over)
    return s


def _doc(*spans, resource=None) -> dict:
    return {"resourceSpans": [{"resource": resource if resource is not None else
                               {"attributes": [{"key": "service.name", "value": {"stringValue": "gw"}}]},
                               "scopeSpans": [{"spans": list(spans)}]}]}


@pytest.fixture
def receiver(tmp_path):
    store = TraceStore(tmp_path / "store", flush_interval_s=3600)
    yield TraceReceiver(RequestMetrics(), store)
    store.close()


def test_the_valid_sample_decodes_and_converts():
    spans = decode_json(json.dumps(SAMPLE))
    assert spans and spans_to_arrow(spans).num_rows == len(spans)


BAD = {
    "kind out of range": _doc(_span(kind=1000)),
    "negative kind": _doc(_span(kind=-1)),
    "status code out of range": _doc(_span(status={"code": 300})),
    "start time at 2^63": _doc(_span(startTimeUnixNano=str(2**63))),
    "end time at 2^64": _doc(_span(endTimeUnixNano=str(2**64))),
    "negative time": _doc(_span(startTimeUnixNano="-1")),
    "non-string attribute key": _doc(_span(attributes=[{"key": 5, "value": {"stringValue": "x"}}])),
    "lone surrogate in an attribute": _doc(_span(attributes=[{"key": "k", "value": {"stringValue": "\ud800"}}])),
    "lone surrogate in the name": _doc(_span(name="a\udfffb")),
    "lone surrogate in a resource key": _doc(_span(), resource={"attributes": [
        {"key": "\ud834", "value": {"stringValue": "x"}}]}),
    "scopeSpans of numbers": {"resourceSpans": [{"scopeSpans": [5]}]},
    "resource a string": {"resourceSpans": [{"resource": "x", "scopeSpans": []}]},
    "doubleValue not a number": _doc(_span(attributes=[{"key": "k", "value": {"doubleValue": "abc"}}])),
    "value a number": _doc(_span(attributes=[{"key": "k", "value": 5}])),
    "arrayValue a string": _doc(_span(attributes=[{"key": "k", "value": {"arrayValue": "x"}}])),
    "kvlistValue a list": _doc(_span(attributes=[{"key": "k", "value": {"kvlistValue": [1]}}])),
    "boolValue a string": _doc(_span(attributes=[{"key": "k", "value": {"boolValue": "false"}}])),
    "spans an object": {"resourceSpans": [{"scopeSpans": [{"spans": {"a": 1}}]}]},
    "status a string": _doc(_span(status="ok")),
    "name a list": _doc(_span(name=["x"])),
    "hex with a prefix": _doc(_span(traceId="0x" + "ab" * 15)),
    "hex with underscores": _doc(_span(spanId="cd_cd_cd_cd_cd_c")),
    "attributes an object": _doc(_span(attributes={"k": "v"})),
}


@pytest.mark.parametrize("doc", BAD.values(), ids=BAD.keys())
def test_invalid_json_payloads_are_refused_with_a_reason(receiver, doc):
    body = json.dumps(doc, ensure_ascii=True).encode()
    with pytest.raises(OtlpError):
        decode_json(body)
    status, _, resp, _ = receiver.handle("application/json", "", body)
    assert status == 400, resp
    assert json.loads(resp)["error"].startswith("bad OTLP payload")
    assert sum(receiver.metrics.rejected_payloads.values()) == 1 and receiver.store.buffered == 0


def test_protobuf_values_outside_the_store_schema_are_refused():
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    for field, value in (("kind", 1000), ("start_time_unix_nano", 2**63), ("end_time_unix_nano", 2**64 - 1)):
        req = ExportTraceServiceRequest()
        s = req.resource_spans.add().scope_spans.add().spans.add(trace_id=b"\x01" * 16, span_id=b"\x02" * 8,
                                                                  name="x")
        setattr(s, field, value)
        with pytest.raises(OtlpError, match=field.split("_")[0]):
            decode_protobuf(req.SerializeToString())
    req = ExportTraceServiceRequest()
    s = req.resource_spans.add().scope_spans.add().spans.add(trace_id=b"\x01" * 16, span_id=b"\x02" * 8)
    s.status.code = 300
    with pytest.raises(OtlpError, match="status"):
        decode_protobuf(req.SerializeToString())


def test_rejections_are_counted_by_reason(receiver):
    receiver.handle("application/json", "", b"{not json")
    receiver.handle("application/json", "", json.dumps(_doc(_span(kind=1000))).encode())
    receiver.handle("application/json", "br", b"{}")
    receiver.handle("application/json", "gzip", b"not gzip at all")
    assert dict(receiver.metrics.rejected_payloads) == {"malformed": 2, "invalid": 1, "unsupported_encoding": 1}


def _gzip_of_zeros(n: int) -> bytes:
    z = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = b"\0" * (1 << 20)
    parts = [z.compress(block) for _ in range(n >> 20)]
    return b"".join(parts) + z.flush()


def test_a_gzip_bomb_is_stopped_at_the_limit_with_413(receiver):
    import tracemalloc

    bomb = _gzip_of_zeros(1 << 30)  # 1 GiB of zeros in about 1 MB
    assert len(bomb) < 2 * 1024 * 1024
    tracemalloc.start()
    try:
        status, _, resp, _ = receiver.handle("application/json", "gzip", bomb)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert status == 413, resp
    assert "over" in json.loads(resp)["error"]
    assert peak < 4 * OTLP_MAX_BODY_BYTES, f"decompressing the bomb took {peak / 2**20:.0f} MiB"
    assert receiver.metrics.rejected_payloads["too_large"] == 1


def test_gzip_just_under_the_limit_and_multi_member_gzip_are_accepted(receiver):
    doc = json.dumps(_doc(_span())).encode()
    padded = doc + b" " * (OTLP_MAX_BODY_BYTES - len(doc))  # exactly the limit once inflated
    status, _, resp, _ = receiver.handle("application/json", "gzip", gzip.compress(padded))
    assert status == 200, resp
    two = json.dumps(_doc(_span(spanId="ef" * 8))).encode()
    status, _, resp, _ = receiver.handle("application/json", "gzip", gzip.compress(two[:10]) + gzip.compress(two[10:]))
    assert status == 200, resp
    assert receiver.store.buffered == 2


def _swap(doc, rng: random.Random):
    """``doc`` with one randomly chosen node replaced by a value of another type."""
    doc = copy.deepcopy(doc)
    paths = []

    def walk(node, path):
        paths.append(path)
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, path + (k,))
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, path + (i,))

    walk(doc, ())
    path = rng.choice(paths[1:])
    parent = doc
    for p in path[:-1]:
        parent = parent[p]
    parent[path[-1]] = rng.choice([5, -1, 2**64, 1.5, float("inf"), "x", "\ud800", "", None, True, [], [5], {},
                                   {"a": 1}, "ab" * 16, "1" * 40])
    return doc


def test_fuzzed_documents_get_2xx_or_4xx_only_and_what_is_accepted_flushes(receiver):
    rng = random.Random(10)
    docs = [SAMPLE, _doc(_span(), _span(spanId="ef" * 8, parentSpanId="cd" * 8, attributes=[
        {"key": "a", "value": {"arrayValue": {"values": [{"intValue": "3"}, {"doubleValue": 1.5}]}}},
        {"key": "b", "value": {"kvlistValue": {"values": [{"key": "c", "value": {"boolValue": True}}]}}}]))]
    statuses = {}
    for _ in range(400):
        doc = _swap(rng.choice(docs), rng)
        body = json.dumps(doc, ensure_ascii=True).encode()
        status, _, resp, _ = receiver.handle("application/json", "", body)
        assert status in (200, 400), (status, resp, body)
        statuses[status] = statuses.get(status, 0) + 1
        if status == 200:
            receiver.metrics.seen.clear()  # let the next variant of the same ids in
    assert statuses.get(400, 0) > 50 and statuses.get(200, 0) > 50, statuses
    assert receiver.store.flush() > 0 and receiver.store.quarantined_total == 0


def test_fuzzed_protobuf_gets_2xx_or_4xx_only(receiver):
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    req = ExportTraceServiceRequest()
    rs = req.resource_spans.add()
    rs.resource.attributes.add(key="service.name").value.string_value = "gw"
    for i in range(4):
        s = rs.scope_spans.add().spans.add(trace_id=bytes([i + 1]) * 16, span_id=bytes([i + 1]) * 8, name="llm.request",
                                           kind=2, start_time_unix_nano=1795424400 * 10**9,
                                           end_time_unix_nano=1795424401 * 10**9)
        s.attributes.add(key="llm.tenant").value.string_value = "acme"
        s.attributes.add(key="n").value.int_value = i
    good = req.SerializeToString()
    rng = random.Random(7)
    statuses = {}
    for _ in range(400):
        body = bytearray(good)
        for _ in range(rng.randint(1, 4)):
            body[rng.randrange(len(body))] = rng.randrange(256)
        status, _, resp, _ = receiver.handle("application/x-protobuf", "", bytes(body))
        assert status in (200, 400), (status, resp)
        statuses[status] = statuses.get(status, 0) + 1
        receiver.metrics.seen.clear()
    assert statuses.get(400, 0) > 20 and statuses.get(200, 0) > 20, statuses
    receiver.store.flush()
    assert receiver.store.quarantined_total == 0


def test_an_integer_attribute_beyond_int64_is_a_400_before_anything_is_stored(receiver):
    body = json.dumps(_doc(_span(attributes=[{"key": "gen_ai.usage.input_tokens",
                                               "value": {"intValue": "1" + "0" * 400}}]))).encode()  # > float max
    status, _, msg, _ = receiver.handle("application/json", "", body)
    assert status == 400 and b"int64" in msg, msg
    assert receiver.store.buffered == 0 and receiver.metrics.received == 0
    assert receiver.metrics.rejected_payloads == {"invalid": 1}


@pytest.mark.parametrize("what, doc, limit", [
    ("attributes", _doc(_span(attributes=[{"key": f"k{i}", "value": {"intValue": i}} for i in range(129)])), b"128"),
    ("string", _doc(_span(name="x" * 65_537)), b"65536"),
    ("nesting", _doc(_span(attributes=[{"key": "deep", "value": json.loads(
        '{"arrayValue": {"values": [' * 9 + '{"intValue": 1}' + "]}}" * 9)}])), b"8 deep"),
])
def test_per_span_limits_are_a_400_naming_the_limit(receiver, what, doc, limit):
    status, _, msg, _ = receiver.handle("application/json", "", json.dumps(doc).encode())
    assert status == 400 and limit in msg, (what, msg)
    assert receiver.store.buffered == 0


def _peak(fn, transient: bool = False) -> tuple[int, object]:
    """The peak of memory allocated while ``fn`` ran (``transient``: less what it still held at the end)."""
    import tracemalloc
    tracemalloc.start()
    try:
        out = fn()
        current, peak = tracemalloc.get_traced_memory()
        return peak - current if transient else peak, out
    finally:
        tracemalloc.stop()


def test_a_body_whose_decoded_tree_would_dwarf_it_is_refused_before_it_is_decoded(receiver):
    """1.5 million empty objects: 4.5 MB of JSON that ``json.loads`` would turn into ~100 MB of dicts."""
    body = b'{"resourceSpans": [' + b"{}," * 1_500_000 + b"{}]}"
    peak, (status, _, msg, _) = _peak(lambda: receiver.handle("application/json", "", body))
    assert status == 413 and b"1000000" in msg, msg
    assert peak < len(body) // 4, f"sizing up a {len(body)}-byte body cost {peak} bytes"
    many = json.dumps(_doc(*(_span(spanId=f"{i:016x}") for i in range(10_001)))).encode()
    status, _, msg, _ = receiver.handle("application/json", "", many)
    assert status == 413 and b"10000 " in msg, msg


def test_parallel_posts_cost_at_most_the_decode_slots_worth_of_memory(tmp_path):
    """Eight 1 MB posts at once cost, beyond the spans they leave buffered, near what two cost (``DECODE_SLOTS``),
    not eight times one."""
    import threading
    body = json.dumps(_doc(*(_span(spanId=f"{i:016x}", attributes=[
        {"key": f"attr.{k}", "value": {"stringValue": f"value-{i}-{k}"}} for k in range(8)]) for i in range(2000)))
    ).encode()

    def run(n: int) -> int:
        store = TraceStore(tmp_path / f"store{n}", flush_interval_s=3600)
        recv = TraceReceiver(RequestMetrics(), store, decode_wait_s=120)  # waits, however loaded the machine
        statuses = []

        def post(i: int) -> None:  # distinct trace ids per thread: every post is stored, none a duplicate
            statuses.append(recv.handle("application/json", "", body.replace(b'"abab', b'"%04x' % i))[0])

        def go():
            threads = [threading.Thread(target=post, args=(i,)) for i in range(n)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(120)
        try:
            peak, _ = _peak(go, transient=True)
        finally:
            store.close()
        assert statuses == [200] * n
        return peak

    one, eight = run(1), run(8)
    assert eight < 3.5 * one, f"one post cost {one} bytes, eight at once {eight}"


def test_a_protobuf_of_a_million_tiny_spans_is_refused_before_the_parser_builds_them():
    """31 MiB of 30-byte spans: the C parser would allocate ~200 MB for its 1.1 million messages (RSS, which
    tracemalloc cannot see); counted from the wire format first, the payload is a 413 and RSS barely moves."""
    import subprocess
    import sys
    code = """
import resource, tempfile
from pathlib import Path
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from goodput.exporters.requests import RequestMetrics, TraceReceiver
from goodput.exporters.trace_store import TraceStore
req = ExportTraceServiceRequest()
ss = req.resource_spans.add().scope_spans.add()
for i in range(20000):
    s = ss.spans.add(); s.trace_id = b"a" * 16; s.span_id = b"b" * 8
one = req.SerializeToString()
body = one * (31 * 2**20 // len(one))  # concatenated messages merge: 1.1 million spans
with tempfile.TemporaryDirectory() as d:
    store = TraceStore(Path(d) / "s", flush_interval_s=3600)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    status, _, msg, _ = TraceReceiver(RequestMetrics(), store).handle("application/x-protobuf", "", body)
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    store.close()
print(status, grown // 1024, msg.decode())
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    status, grown_mb, msg = out.stdout.split(" ", 2)
    assert status == "413" and "more than 10000 spans" in msg, out.stdout
    assert int(grown_mb) < 50, f"refusing it grew RSS by {grown_mb} MB"


def test_a_payload_that_finds_no_decode_slot_in_time_is_a_503_with_retry_after(tmp_path):
    store = TraceStore(tmp_path / "store", flush_interval_s=3600)
    recv = TraceReceiver(RequestMetrics(), store, decode_slots=1, decode_wait_s=0.1)
    try:
        assert recv.decoding.acquire(timeout=1)  # one payload being decoded
        status, _, msg, headers = recv.handle("application/json", "", json.dumps(_doc(_span())).encode())
        assert status == 503 and headers["Retry-After"] == "1" and b"1 payloads are being decoded" in msg
        recv.decoding.release()
        assert recv.handle("application/json", "", json.dumps(_doc(_span())).encode())[0] == 200
        assert recv.metrics.rejected_payloads == {"busy": 1}
    finally:
        store.close()


def test_attributes_read_in_one_comprehension_equal_those_read_one_at_a_time():
    """``_attrs_json`` reads a list of string attributes in one comprehension; every list, well-formed or not,
    gives what reading it one attribute at a time gives: the same dict, or the same error."""
    from goodput.exporters.otlp import _attrs_each, _attrs_json

    s = lambda k, v: {"key": k, "value": {"stringValue": v}}  # noqa: E731
    cases = [
        [], [s("a", "x"), s("b", "y")], [s("a", "x"), s("a", "y")],
        [s("a", 5), s("a", "y")],  # a key twice, the first value not a string: refused, not overwritten
        [s("a", "x"), {"key": "n", "value": {"intValue": "7"}}], [s("a", "x"), {"key": "f", "value": {"boolValue": True}}],
        [s("a", "x"), {"key": 3, "value": {"stringValue": "x"}}], [s("a", "x"), {"key": ["k"], "value": {}}],
        [s("a", "x"), {"key": "v"}], [s("a", "x"), "kv"], [s("a", "x"), {"key": "v", "value": "x"}],
        [s("a", None)], [{"key": "v", "value": {"stringValue": "x", "intValue": "1"}}],
        [{"key": "l", "value": {"arrayValue": {"values": [{"stringValue": "x"}]}}}],
    ]
    for items in cases:
        def read(f, items=items):
            try:
                return f(copy.deepcopy(items), "span", 0)
            except OtlpError as e:
                return f"error: {e}"
        assert read(_attrs_json) == read(_attrs_each), items


def test_protobuf_attributes_read_inline_equal_those_read_through_any_value():
    """``_attrs_pb`` reads a string value inline; every kind of value reads as ``_any_pb`` reads it, a key twice
    keeping its last value."""
    from opentelemetry.proto.common.v1.common_pb2 import KeyValueList

    from goodput.exporters.otlp import _any_pb, _attrs_pb

    kvs = KeyValueList()
    for key, field, value in (("s", "string_value", "x"), ("i", "int_value", -7), ("d", "double_value", 0.5),
                              ("b", "bool_value", True), ("y", "bytes_value", b"\x01\xff"), ("s", "string_value", "")):
        setattr(kvs.values.add(key=key).value, field, value)
    kvs.values.add(key="l").value.array_value.values.add().string_value = "in a list"
    kvs.values.add(key="none")
    inline = _attrs_pb(kvs.values)
    assert inline == {kv.key: _any_pb(kv.value) for kv in kvs.values}
    assert inline == {"s": "", "i": -7, "d": 0.5, "b": True, "y": "01ff", "l": ["in a list"], "none": None}
