"""The OTLP receiver against hostile bodies, over real sockets: integers past Python's 4,300-digit limit and slow
uploads that would hold the shared body budget."""

import logging

import httpx
import pytest

from goodput.exporters.requests import OTLP_MAX_BODY_BYTES, RequestMetrics, TraceReceiver
from goodput.exporters.trace_store import TraceStore
from goodput.foundation.http import Server


@pytest.fixture
def receiver(tmp_path):
    metrics = RequestMetrics()
    store = TraceStore(tmp_path / "store", flush_interval_s=3600).start()
    otlp = Server("127.0.0.1", 0, TraceReceiver(metrics, store).routes(), max_body_bytes=OTLP_MAX_BODY_BYTES,
                  timeout_s=5).start()
    try:
        yield otlp, metrics
    finally:
        otlp.stop(drain_s=5)
        store.close()


LONG = "9" * 5000


@pytest.mark.parametrize("body", [
    '{"resourceSpans": ' + LONG + "}",  # a bare number: json.loads itself refuses it
    '{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "' + "a" * 32 + '", "spanId": "' + "b" * 16
    + '", "startTimeUnixNano": "' + LONG + '", "endTimeUnixNano": 1}]}]}]}',  # as the JSON mapping's string
    '{"resourceSpans": [{"resource": {"attributes": [{"key": "n", "value": {"intValue": "' + LONG + '"}}]}}]}',
])
def test_an_integer_past_the_digit_limit_is_a_400_in_one_line_without_a_traceback(receiver, body, caplog):
    otlp, metrics = receiver
    with caplog.at_level(logging.DEBUG):
        r = httpx.post(f"{otlp.url}/v1/traces", content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error.startswith("bad OTLP payload: ") and "\n" not in error
    assert not [rec for rec in caplog.records if rec.exc_info], "a traceback in the exporter's log"
    assert sum(metrics.rejected_payloads.values()) == 1
